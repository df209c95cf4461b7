// The PTX interpreter's warp-wide and asynchronous instructions: shuffles, votes, reductions, elections; mma.sync,
// ldmatrix/stmatrix, wgmma; cp.async, mbarriers, TMA. Each gathers its operands from the thread's registers and calls
// the runtime's implementation in ptx.cpp / runtime.cpp, which the native engine calls too.
#include "interp.h"

namespace tkemu {
namespace interp {

// ---- warp-wide ----------------------------------------------------------------------------------------------------------------
namespace {
struct ShflIn {
    uint32_t a, b, c;
    uint32_t out;
    bool p;
    int mode;
};
struct ReduxIn {
    uint32_t v, out;
    int op;
    bool sg;
};
struct ElectIn {
    uint32_t out;
    bool p;
};
}  // namespace

void Thread_::warp_op(const Instr& in) {
    const int sub = int((in.mod >> SUB_SHIFT) & 31);
    switch (in.op) {
        case OP_SHFL: {  // shfl.sync.mode.b32 d[|p], a, b, c, membermask (the PTX ISA's pseudocode)
            const Operand& d = opnd(in, 0);
            ShflIn x{uint32_t(value(opnd(in, 1))), uint32_t(value(opnd(in, 2))), uint32_t(value(opnd(in, 3))), 0,
                     false, sub};
            const uint32_t mask = uint32_t(value(opnd(in, 4)));
            collective(32, 1, "a warp shuffle (shfl.sync)", mask, &x, [](Block&, Rendezvous& rv) {
                for (int lane = 0; lane < 32; ++lane) {
                    if (!((rv.expected[0] >> lane) & 1u)) continue;
                    auto* me = static_cast<ShflIn*>(rv.data[lane]);
                    const uint32_t bval = me->b & 31, cval = me->c & 31, seg = (me->c >> 8) & 31;
                    const uint32_t maxl = (uint32_t(lane) & seg) | (cval & ~seg), minl = uint32_t(lane) & seg;
                    int j;
                    bool pv;
                    switch (me->mode) {
                        case 1: j = lane - int(bval); pv = j >= int(maxl); break;
                        case 2: j = lane + int(bval); pv = j <= int(maxl); break;
                        case 3: j = lane ^ int(bval); pv = j <= int(maxl); break;
                        default: j = int(minl | (bval & ~seg)); pv = j <= int(maxl); break;
                    }
                    if (!pv || j < 0 || j > 31 || !((rv.expected[0] >> j) & 1u)) j = lane;
                    me->out = static_cast<ShflIn*>(rv.data[j])->a;
                    me->p = pv;
                }
            });
            if ((d.kind & 0x7f) == K_VEC) {
                write(P.ops[d.reg], x.out, 4);
                write_pred(P.ops[d.reg + 1], x.p);
            } else {
                write(d, x.out, 4);
            }
            return;
        }
        case OP_VOTE: {
            const Operand& d = opnd(in, 0);
            const bool pred = value(opnd(in, 1)) & 1;
            const uint32_t mask = uint32_t(value(opnd(in, 2)));
            if (sub == 3) {  // uni: all active lanes agree
                const unsigned any = vote(mask, pred, 1), all = vote(mask, pred, 2);
                write_pred(d, all || !any);
                return;
            }
            const unsigned r = vote(mask, pred, sub);
            if (sub == 0) write(d, r, 4);
            else write_pred(d, r != 0);
            return;
        }
        case OP_MATCH: {
            const Operand& d = opnd(in, 0);
            const uint64_t v = value(opnd(in, 1));
            const uint32_t mask = uint32_t(value(opnd(in, 2)));
            if (in.mod & M_FLAG) {
                int pred = 0;
                const unsigned r = match_all(mask, v, &pred);
                if ((d.kind & 0x7f) == K_VEC) {
                    write(P.ops[d.reg], r, 4);
                    write_pred(P.ops[d.reg + 1], pred);
                } else write(d, r, 4);
            } else {
                write(d, match_any(mask, v), 4);
            }
            return;
        }
        case OP_REDUX: {
            ReduxIn x{uint32_t(value(opnd(in, 1))), 0, sub, is_signed(in.t)};
            const uint32_t mask = uint32_t(value(opnd(in, 2)));
            collective(32, 6, "redux.sync", mask, &x, [](Block&, Rendezvous& rv) {
                uint32_t acc = 0;
                bool first = true;
                const auto* x0 = static_cast<ReduxIn*>(rv.data[__builtin_ctzll(rv.expected[0])]);
                for (int lane = 0; lane < 32; ++lane) {
                    if (!((rv.expected[0] >> lane) & 1u)) continue;
                    const uint32_t v = static_cast<ReduxIn*>(rv.data[lane])->v;
                    if (first) { acc = v; first = false; continue; }
                    switch (x0->op) {
                        case 0: acc += v; break;
                        case 3: acc = x0->sg ? uint32_t(std::min(int32_t(acc), int32_t(v))) : std::min(acc, v); break;
                        case 4: acc = x0->sg ? uint32_t(std::max(int32_t(acc), int32_t(v))) : std::max(acc, v); break;
                        case 5: acc &= v; break;
                        case 6: acc |= v; break;
                        default: acc ^= v; break;
                    }
                }
                for (int lane = 0; lane < 32; ++lane)
                    if ((rv.expected[0] >> lane) & 1u) static_cast<ReduxIn*>(rv.data[lane])->out = acc;
            });
            write(opnd(in, 0), x.out, 4);
            return;
        }
        case OP_ELECT: {  // elect.sync d|p, membermask: the lowest lane of the mask is elected
            const Operand& d = opnd(in, 0);
            const uint32_t mask = uint32_t(value(opnd(in, 1)));
            ElectIn x{0, false};
            collective(32, 7, "elect.sync", mask, &x, [](Block&, Rendezvous& rv) {
                const int leader = __builtin_ctzll(rv.expected[0]);
                for (int lane = 0; lane < 32; ++lane) {
                    if (!((rv.expected[0] >> lane) & 1u)) continue;
                    auto* me = static_cast<ElectIn*>(rv.data[lane]);
                    me->out = uint32_t(leader);
                    me->p = lane == leader;
                }
            });
            if ((d.kind & 0x7f) == K_VEC) {
                write(P.ops[d.reg], x.out, 4);
                write_pred(P.ops[d.reg + 1], x.p);
            } else {
                write_pred(d, x.p);
            }
            return;
        }
        default: stop("not_emulated", "this warp-wide instruction is not modelled");
    }
}

// ---- tensor cores ---------------------------------------------------------------------------------------------------------
static int ptx_type(int t) {
    switch (t) {
        case T_F32: return ptx::F32;
        case T_F16: return ptx::F16;
        case T_BF16: return ptx::BF16;
        case T_F64: return ptx::F64;
        case T_TF32: return ptx::TF32;
        case T_S32: return ptx::S32;
        case T_U32: return ptx::U32;
        default: return ptx::B16;
    }
}

void Thread_::tensor(const Instr& in) {
    switch (in.op) {
        case OP_MMA: {
            // mma.sync.aligned.mMnNkK.row.col.dtype.atype.btype.ctype: t = d, t2 = a, y = k | b << 8 | c << 16
            const int m = in.x & 0xff, n = in.x >> 8, k = int(in.y & 0xff);
            const int btype = int((in.y >> 8) & 0xff), ctype = int((in.y >> 16) & 0xff);
            uint64_t* d[8];
            uint64_t a[8] = {}, b[8] = {}, c[8] = {}, dv[8] = {};
            uint64_t* dp[8];
            const int nd = dests(opnd(in, 0), d, 8);
            sources(opnd(in, 1), a, 8);
            sources(opnd(in, 2), b, 8);
            sources(opnd(in, 3), c, 8);
            for (int i = 0; i < 8; ++i) dp[i] = &dv[i];
            W.stats[ST_MMA]++;
            if (tid % 32 == 0) W.stats[ST_TENSOR_FLOPS] += uint64_t(2) * uint64_t(m) * uint64_t(n) * uint64_t(k);
            ptx::mma(m, n, k, ptx_type(in.t), ptx_type(in.t2), ptx_type(btype), ptx_type(ctype), dp, a, b, c,
                     in.mod & M_FLAG, in.mod & M_FLAG2);
            for (int i = 0; i < nd; ++i)
                if (d[i]) { touch(d[i], true); *d[i] = dv[i] & 0xffffffffu; }
            return;
        }
        case OP_LDMATRIX: {
            uint64_t* d[4];
            uint64_t dv[4] = {};
            uint64_t* dp[4] = {&dv[0], &dv[1], &dv[2], &dv[3]};
            const int nd = dests(opnd(in, 0), d, 4);
            const uint64_t addr = shared_of(space_of(in), address(opnd(in, 1)), "ldmatrix");
            ptx::ldmatrix(in.x, in.mod & M_TRANS, dp, addr);
            for (int i = 0; i < nd; ++i)
                if (d[i]) { touch(d[i], true); *d[i] = dv[i] & 0xffffffffu; }
            return;
        }
        case OP_STMATRIX: {
            const uint64_t addr = shared_of(space_of(in), address(opnd(in, 0)), "stmatrix");
            uint64_t sv[4] = {};
            sources(opnd(in, 1), sv, 4);
            ptx::stmatrix(in.x, in.mod & M_TRANS, addr, sv);
            return;
        }
        case OP_MOVMATRIX: {
            uint64_t out = 0;
            ptx::movmatrix(&out, value(opnd(in, 1)));
            write(opnd(in, 0), out, 4);
            return;
        }
        case OP_WGMMA: {
            // {d}, a-desc | {a regs}, b-desc, scale-d, imm-scale-a, imm-scale-b[, imm-tnsp-a], imm-tnsp-b
            const Operand& dv = opnd(in, 0);
            const Operand& av = opnd(in, 1);
            const bool a_regs = (av.kind & 0x7f) == K_VEC;
            const int n = in.x;
            if (dv.n != n / 2) stop("invalid", "wgmma: the accumulator has " + std::to_string(dv.n) +
                                    " registers, m64n" + std::to_string(n) + " needs " + std::to_string(n / 2));
            uint64_t* d[128];
            void* dptr[128];
            dests(dv, d, 128);
            for (int i = 0; i < dv.n; ++i) {
                if (!d[i]) stop("invalid", "wgmma: an accumulator register is missing");
                dptr[i] = d[i];
            }
            uint64_t ar[4] = {};
            void* ahome[4] = {};
            uint64_t adesc = 0;
            if (a_regs) {
                // A's registers are read here without a touch: several wgmma may read the same A while an earlier
                // one is pending; ptx::wgmma checks them against its warpgroup's pending groups and tracks them.
                if (av.n != 4) stop("invalid", "wgmma: matrix A in registers is four registers, not " +
                                    std::to_string(av.n));
                for (int k = 0; k < 4; ++k) {
                    const Operand& o = P.ops[av.reg + k];
                    if (o.kind == K_REG) ahome[k] = R + o.reg, ar[k] = R[o.reg];
                    else ar[k] = value(o);
                }
            } else adesc = value(av);
            const uint64_t bdesc = value(opnd(in, 2));
            const int scale_d = int(value(opnd(in, 3)) & 1);
            const int sa = int(sext(value(opnd(in, 4)), 4)), sb = int(sext(value(opnd(in, 5)), 4));
            int ta = 0, tb = 0;
            if (a_regs) tb = in.n > 6 ? int(value(opnd(in, 6))) : 0;
            else { ta = in.n > 6 ? int(value(opnd(in, 6))) : 0; tb = in.n > 7 ? int(value(opnd(in, 7))) : 0; }
            W.stats[ST_WGMMA]++;
            if (tid % 128 == 0) W.stats[ST_TENSOR_FLOPS] += uint64_t(2) * 64 * uint64_t(n) * 16;
            if (g_turn_hi > g_turn_lo && !holding_turn) W.stats[ST_WGMMA_OUTSIDE_TURN]++;
            T.in_wgmma = true;
            ptx::wgmma(n, ptx_type(in.t), ptx_type(in.t2), ptx_type(int(in.y)), d, dptr, a_regs ? ar : nullptr, ahome,
                       adesc, bdesc, scale_d, sa, sb, ta, tb);
            T.in_wgmma = false;
            return;
        }
        case OP_WGMMA_FENCE: ptx::wgmma_fence(); return;
        case OP_WGMMA_COMMIT: ptx::wgmma_commit(); return;
        case OP_WGMMA_WAIT: ptx::wgmma_wait(int(value(opnd(in, 0)))); return;
        default: stop("not_emulated", "this tensor-core instruction is not modelled");
    }
}

// ---- asynchronous copies and mbarriers -----------------------------------------------------------------------------------------
void Thread_::async_copy(const Instr& in) {
    // A TMA instruction's tensor map (operand `at`: 128 bytes the kernel's memory must hold) and its in.x coordinates
    // (the vector operand after it), as the runtime takes them.
    auto tensor_map_at = [&](int at, int32_t (&coords)[5], const char* what) {
        const uint8_t* map = generic(address(opnd(in, at)), 128, false, what, false, nullptr);
        const Operand& cv = opnd(in, at + 1);
        for (int k = 0; k < in.x && k < cv.n; ++k) coords[k] = int32_t(value(P.ops[cv.reg + k]));
        return uint64_t(uintptr_t(map));
    };
    switch (in.op) {
        case OP_CP_ASYNC: {  // cp.async.cg.shared.global [dst], [src], cp-size{, src-size}
            const uint32_t dst = shared_of(space_of(in), address(opnd(in, 0)), "cp.async");
            const uint64_t src = address(opnd(in, 1));
            const int size = int(value(opnd(in, 2)));
            const int src_size = in.n > 3 ? int(value(opnd(in, 3))) : size;
            ptx::cp_async(dst, src, size, src_size);  // its source is checked against the kernel's buffers there
            return;
        }
        case OP_CP_ASYNC_COMMIT: ptx::cp_async_commit(); return;
        case OP_CP_ASYNC_WAIT: ptx::cp_async_wait((in.mod & M_FLAG) ? 0 : int(value(opnd(in, 0)))); return;
        case OP_MBAR_INIT:
            ptx::mbar_init(shared_of(space_of(in), address(opnd(in, 0)), "mbarrier.init"), uint32_t(value(opnd(in, 1))));
            return;
        case OP_MBAR_ARRIVE: {  // state, [addr]{, count} / .expect_tx: state, [addr], tx
            const uint64_t addr = shared_of(space_of(in), address(opnd(in, 1)), "mbarrier.arrive");
            uint64_t state;
            if (in.mod & M_FLAG) state = ptx::mbar_arrive(addr, 1, uint32_t(value(opnd(in, 2))), true);
            else state = ptx::mbar_arrive(addr, in.n > 2 ? uint32_t(value(opnd(in, 2))) : 1, 0, false);
            write(opnd(in, 0), state, 8);
            return;
        }
        case OP_MBAR_EXPECT_TX:
            ptx::mbar_expect_tx(shared_of(space_of(in), address(opnd(in, 0)), "mbarrier.expect_tx"),
                                uint32_t(value(opnd(in, 1))));
            return;
        case OP_MBAR_WAIT: {  // p, [addr], state-or-parity
            const uint64_t addr = shared_of(space_of(in), address(opnd(in, 1)), "mbarrier.try_wait");
            const bool ok = ptx::mbar_wait(addr, value(opnd(in, 2)), in.mod & M_FLAG, in.mod & M_FLAG2);
            write_pred(opnd(in, 0), ok);
            return;
        }
        case OP_MBAR_INVAL: ptx::mbar_inval(shared_of(space_of(in), address(opnd(in, 0)), "mbarrier.inval")); return;
        case OP_TMA_LOAD: {  // dst, map, {coords}, mbar
            const uint32_t dst = shared_of(S_SHARED, address(opnd(in, 0)), "cp.async.bulk.tensor");
            int32_t coords[5] = {};
            const uint64_t map = tensor_map_at(1, coords, "the tensor map of a TMA load");
            const uint32_t bar = shared_of(S_SHARED, address(opnd(in, 3)), "cp.async.bulk.tensor's mbarrier");
            W.stats[ST_TMA_LOAD]++;
            ptx::tma_load(in.x, dst, map, coords, bar);
            return;
        }
        case OP_TMA_STORE: {  // map, {coords}, src
            int32_t coords[5] = {};
            const uint64_t map = tensor_map_at(0, coords, "the tensor map of a TMA store");
            const uint32_t src = shared_of(S_SHARED, address(opnd(in, 2)), "cp.async.bulk.tensor (store)");
            W.stats[ST_TMA_STORE]++;
            ptx::tma_store(in.x, map, coords, src, (in.mod & M_FLAG) ? 1 : 0);
            return;
        }
        case OP_BULK_COMMIT: ptx::bulk_commit(); return;
        case OP_BULK_WAIT: ptx::bulk_wait(int(value(opnd(in, 0))), in.mod & M_FLAG); return;
        default: stop("not_emulated", "this asynchronous instruction is not modelled");
    }
}

}  // namespace interp
}  // namespace tkemu
