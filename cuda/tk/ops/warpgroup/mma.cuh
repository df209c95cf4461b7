// Warpgroup matrix multiply: D (+)= A * B on the tensor cores with wgmma, 64 rows at a time.
//
// All 128 threads of a warpgroup call these together. D is 64 x N in fp32, held as each warp's share:
// the 16 rows 16*warp() .. +15, an rt<float, 16, N> (register-tile layout). A is 64 x K, B is K x N;
// K is a multiple of 16 and one call issues K/16 wgmma instructions, then commits them as ONE group.
// The call returns at once: the tensor core keeps running. Before reading D, or overwriting the
// shared tiles (or the register A) it reads, wait and name the tiles the wait hands back:
//     mma_async_wait<0>(d)        every group done; d may be read
//     mma_async_wait<1>(s)        all but the newest group done (s belonged to an older one)
// Naming them pins their registers after the wait (wgmma::fence_operands), so the compiler cannot
// move a read of d above it.
//
//   mma_AB  (d, a, b)   d += a * b       a: st 64 x K   (K-major)   b: st K x N (MN-major)
//   mma_ABt (d, a, b)   d += a * b^T     a: st 64 x K                b: st N x K (K-major)
//   mma_AtB (d, a, b)   d += a^T * b     a: st K x 64   (MN-major)   b: st K x N
//   mma_AtBt(d, a, b)   d += a^T * b^T
//   mm_*    (d, a, b)   d  = ...         (the old contents of d are ignored)
//   mma_*   (d, a, b, accumulate)        either, chosen at run time: a K loop passes k > 0, so the first
//                                        slice overwrites d and no instruction has to zero it (zeroing
//                                        moves inside a pipeline of wgmma groups make ptxas serialize
//                                        them: warning C7515)
//   mma<MA, MB>(d, a, b, accumulate)     the one template all of these name (MA, MB: major::k or major::mn)
// A may also be a register tile rt<T, 16, K> (each warp's 16 rows; row layout): mma_AB / mma_ABt.
#pragma once

#include "../../hopper/descriptor.cuh"
#include "../../hopper/wgmma_instr.cuh"

namespace tk::warpgroup {

using wgmma::major;

/// An A operand: a 64 x K shared tile, or each warp's 16 x K rows in registers (row layout).
template <typename A>
concept a_operand = shared_tile<A> || register_tile<A>;

/// The one product all the names below are: d (+)= op(A) * op(B), where MA and MB say how A and B are
/// stored (major::k: along K; major::mn: along M or N, i.e. transposed). accumulate = false overwrites d.
/// One wgmma per 16-deep slice of K, committed as one group. A register A operand is K-major (its rows
/// are the warp's rows of the product).
template <major MA, major MB, int N, a_operand A, shared_tile SB>
__device__ inline void mma(rt<float, 16, N>& d, const A& a, const SB& b, bool accumulate = true) {
    using T = typename A::dtype;
    constexpr bool in_registers = register_tile<A>;
    if constexpr (in_registers)
        static_assert(MA == major::k && A::rows == 16 && A::is_row,
                      "a register A operand is K-major: each warp's 16 rows, row layout (pass it as A, not A^T)");
    else
        static_assert((MA == major::k ? A::rows : A::cols) == 64, "a warpgroup's A operand has 64 rows (M = 64)");
    constexpr int K = MA == major::k ? A::cols : A::rows;
    static_assert(tk::is_same_v<T, typename SB::dtype>, "A and B must hold the same element type");
    static_assert((MB == major::k ? SB::cols : SB::rows) == K, "inner dimensions of A and B differ");
    static_assert((MB == major::k ? SB::rows : SB::cols) == N, "B's N does not match the accumulator");
    wgmma::fence_operands(d);
    wgmma::fence();
#pragma unroll
    for (int k = 0; k < K / 16; ++k) {
        if constexpr (in_registers) {
            // The tile's own registers, not a copy, so that the instruction names them (the CPU emulator
            // holds them as A's until the group retires, as the tensor cores read them until then).
            const uint32_t(&regs)[4] = reinterpret_cast<const uint32_t(&)[4]>(a.tiles[0][k].data);
            wgmma::instr<T, N>::template rs<MB == major::mn>(d, regs, wgmma::descriptor<MB>(b, k), accumulate || k > 0);
        } else {
            wgmma::instr<T, N>::template ss<MA == major::mn, MB == major::mn>(
                d, wgmma::descriptor<MA>(a, k), wgmma::descriptor<MB>(b, k), accumulate || k > 0);
        }
    }
    wgmma::commit_group();
    wgmma::fence_operands(d);
}

// ---- the products by name: d += A*B, A*B^T, A^T*B, A^T*B^T (mm_*: d = ..., the old d ignored) ----------
template <int N, a_operand A, shared_tile SB>
__device__ inline void mma_AB(rt<float, 16, N>& d, const A& a, const SB& b, bool accumulate = true) { mma<major::k, major::mn>(d, a, b, accumulate); }
template <int N, a_operand A, shared_tile SB>
__device__ inline void mma_ABt(rt<float, 16, N>& d, const A& a, const SB& b, bool accumulate = true) { mma<major::k, major::k>(d, a, b, accumulate); }
template <int N, a_operand A, shared_tile SB>
__device__ inline void mma_AtB(rt<float, 16, N>& d, const A& a, const SB& b, bool accumulate = true) { mma<major::mn, major::mn>(d, a, b, accumulate); }
template <int N, a_operand A, shared_tile SB>
__device__ inline void mma_AtBt(rt<float, 16, N>& d, const A& a, const SB& b, bool accumulate = true) { mma<major::mn, major::k>(d, a, b, accumulate); }
template <int N, a_operand A, shared_tile SB>
__device__ inline void mm_AB(rt<float, 16, N>& d, const A& a, const SB& b) { mma<major::k, major::mn>(d, a, b, false); }
template <int N, a_operand A, shared_tile SB>
__device__ inline void mm_ABt(rt<float, 16, N>& d, const A& a, const SB& b) { mma<major::k, major::k>(d, a, b, false); }
template <int N, a_operand A, shared_tile SB>
__device__ inline void mm_AtB(rt<float, 16, N>& d, const A& a, const SB& b) { mma<major::mn, major::mn>(d, a, b, false); }
template <int N, a_operand A, shared_tile SB>
__device__ inline void mm_AtBt(rt<float, 16, N>& d, const A& a, const SB& b) { mma<major::mn, major::k>(d, a, b, false); }

/// Wait until at most N wgmma groups of this warpgroup are still running, then pin the registers of
/// the given tiles (accumulators to read next, register A operands to overwrite next) after the wait.
template <int N = 0, register_tile... RTs>
__device__ inline void mma_async_wait(RTs&... tiles) {
    wgmma::wait_group<N>();
    (wgmma::fence_operands(tiles), ...);
}

}  // namespace tk::warpgroup
