// The emulator's runtime interface: what the CUDA shim (prelude.h) and the rewritten kernel source call.
//
// Every CUDA thread of a block is a fiber on one OS thread; the fibers switch at barriers, at warp-wide
// operations (shuffles, mma, ldmatrix ...) and at waits, so the block's threads meet exactly where the
// hardware makes them meet. threadIdx & co. are per-OS-thread variables the scheduler sets on each switch.
// Instructions that inline PTX names (mma.sync, ldmatrix, cp.async, mbarrier, TMA, wgmma ...) are
// implemented in tkemu::ptx, on raw register bits (uint64_t holding the 16/32/64 bits of the operand).
#pragma once

#include <cstddef>
#include <cstdint>

#include "vector_types.h"

extern thread_local uint3 threadIdx;
extern thread_local uint3 blockIdx;
extern thread_local dim3 blockDim;
extern thread_local dim3 gridDim;
static constexpr int warpSize = 32;

namespace tkemu {

/// Stop the launch with an error (kind: "invalid", "assert", "not_emulated" ...). Never returns.
[[noreturn]] void fail(const char* kind, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
[[noreturn]] void not_emulated(const char* instruction, const char* why);

// ---- barriers and warp collectives ---------------------------------------------------------------------
void bar_sync(unsigned id, int count);    // count <= 0: every thread of the block (__syncthreads)
void bar_arrive(unsigned id, int count);
int bar_red(int op, unsigned id, int pred);  // __syncthreads_count (0) / _and (1) / _or (2)
void syncwarp(unsigned mask);
uint64_t shfl(unsigned mask, uint64_t value, int mode, int lane, int width);  // mode 0 idx, 1 up, 2 down, 3 bfly
unsigned vote(unsigned mask, int pred, int mode);  // 0 ballot, 1 any, 2 all
unsigned match_any(unsigned mask, uint64_t value);
unsigned match_all(unsigned mask, uint64_t value, int* pred);
unsigned activemask();
void yield_now();  // let the other threads run (nanosleep, spin loops)
int ptx_laneid();
int ptx_warpid();

// ---- shared memory ---------------------------------------------------------------------------------------
uint32_t smem_addr(const void* p);  // generic pointer -> shared-window address
void* smem_ptr(uint64_t addr, uint32_t bytes, const char* what);
void* dynamic_shared();
/// Element size and extents of a __shared__ array, for naming the element a message is about.
struct ShapeInfo {
    int elem;
    int rank;
    int dims[4];
};
void* shared_static(const void* key, size_t size, size_t align, const char* name, const ShapeInfo* shape);
void* shared_global(const void* key, size_t size, size_t align, const char* name, const ShapeInfo* shape);
bool is_shared(const void* p);
void mem_check(const void* p, size_t bytes, bool write);  // an explicit bounds/race check (atomics)

// ---- atomics (global or shared) -------------------------------------------------------------------------
enum AtomicOp : int {
    A_ADD = 0, A_FADD = 1, A_DADD = 2, A_SUB = 3, A_EXCH = 4, A_MIN_S = 5, A_MIN_U = 6, A_MAX_S = 7, A_MAX_U = 8,
    A_INC = 9, A_DEC = 10, A_CAS = 11, A_AND = 12, A_OR = 13, A_XOR = 14, A_FMIN = 15, A_FMAX = 16,
    A_HADD2 = 17, A_BADD2 = 18, A_HADD = 19, A_BADD = 20
};
uint64_t atomic_rmw(void* p, int bytes, int op, uint64_t value, uint64_t compare);

// ---- misc ------------------------------------------------------------------------------------------------
long long clock64();
uint64_t globaltimer();
[[noreturn]] void trap();
void assert_fail(const char* expr, const char* file, int line);
int device_printf(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// ---- PTX instructions (operands are raw register bits) ---------------------------------------------------
namespace ptx {
enum Type : int { F32 = 0, F16 = 1, BF16 = 2, F64 = 3, TF32 = 4, S32 = 5, U32 = 6, B16 = 7 };
void mma(int m, int n, int k, int dtype, int atype, int btype, int ctype, uint64_t* const* d, const uint64_t* a,
         const uint64_t* b, const uint64_t* c, bool a_row, bool b_col);
void ldmatrix(int num, bool trans, uint64_t* const* d, uint64_t addr);
void stmatrix(int num, bool trans, uint64_t addr, const uint64_t* s);
void movmatrix(uint64_t* d, uint64_t s);
void cp_async(uint64_t dst, uint64_t src, int cp_size, int src_size);
void cp_async_commit();
void cp_async_wait(int n);
void mbar_init(uint64_t addr, uint32_t count);
uint64_t mbar_arrive(uint64_t addr, uint32_t count, uint32_t tx, bool expect_tx);
void mbar_expect_tx(uint64_t addr, uint32_t tx);
bool mbar_wait(uint64_t addr, uint64_t state_or_parity, bool parity, bool try_wait);
void mbar_inval(uint64_t addr);
void tma_load(int dims, uint64_t dst, uint64_t map, const int32_t* coords, uint64_t bar);
void tma_store(int dims, uint64_t map, const int32_t* coords, uint64_t src, int reduce);
void bulk_commit();
void bulk_wait(int n, bool read);
// a_homes: where the thread keeps each of its four A registers (nullptr: none, or not one to track).
void wgmma(int n, int dtype, int atype, int btype, uint64_t* const* d, void* const* dptr, const uint64_t* a_regs,
           void* const* a_homes, uint64_t a_desc, uint64_t b_desc, int scale_d, int scale_a, int scale_b, int tnsp_a,
           int tnsp_b);
void wgmma_fence();
void wgmma_commit();
void wgmma_wait(int n);
void fence_proxy_async();
void wgmma_operands(bool begin);  // around a wgmma asm statement's own loads and stores of its operands
void setmaxnreg(bool inc, int n);
uint64_t ld(int space, uint64_t addr, int bytes);  // space 0 generic, 1 global, 2 shared
void st(int space, uint64_t addr, int bytes, uint64_t value);
uint64_t cvta_to_shared(uint64_t generic);
uint64_t cvta_shared_to_generic(uint64_t shared);
}  // namespace ptx

}  // namespace tkemu
