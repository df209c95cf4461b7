// The PTX interpreter's memory: every address an instruction uses resolved to one of the kernel's own regions (its
// argument buffers, the module's variables, the block's shared window, the thread's local memory, the parameters)
// or the launch stops; loads, stores, atomics; special registers and symbols' addresses.
#include "interp.h"

namespace tkemu {
namespace interp {

uint64_t Thread_::special(int id) {
    const uint3 t = T.tid;
    const Launch& Lc = *B.launch;
    const int lane = tid % 32;
    switch (id) {
        case 0: return t.x;
        case 1: return t.y;
        case 2: return t.z;
        case 3: return Lc.block.x;
        case 4: return Lc.block.y;
        case 5: return Lc.block.z;
        case 6: return B.bid.x;
        case 7: return B.bid.y;
        case 8: return B.bid.z;
        case 9: return Lc.grid.x;
        case 10: return Lc.grid.y;
        case 11: return Lc.grid.z;
        case 12: return uint64_t(lane);
        case 13: return uint64_t(tid / 32);
        case 14: return uint64_t((B.n + 31) / 32);
        case 15: return 0;   // %smid
        case 16: return 1;   // %nsmid
        case 17: return 0;   // %gridid
        case 18: return uint64_t(1u << lane);
        case 19: return uint64_t(lane == 31 ? ~0u : (2u << lane) - 1u);
        case 20: return uint64_t((1u << lane) - 1u);
        case 21: return uint64_t(~((1u << lane) - 1u));
        case 22: return uint64_t(lane == 31 ? 0u : ~((2u << lane) - 1u));
        case 23: return uint64_t(uint32_t(clock64()));
        case 24: return uint64_t(uint32_t(uint64_t(clock64()) >> 32));
        case 25: return uint64_t(clock64());
        case 26: return globaltimer();
        case 27: return uint64_t(uint32_t(globaltimer()));
        case 28: return uint64_t(globaltimer() >> 32);
        case 29: return C.dyn_smem;
        case 30: case 31: return B.limit;
        case 32: return 0;   // %cluster_ctarank: each block is its own cluster here
        case 33: return 1;   // %cluster_nctarank
        case 34: return 0;
        case 35: return B.bid.x;
        case 36: return B.bid.y;
        case 37: return B.bid.z;
        case 38: return Lc.grid.x;
        case 39: return Lc.grid.y;
        case 40: return Lc.grid.z;
        case 41: case 42: case 43: return 0;
        case 44: case 45: case 46: return 1;
        default: stop("not_emulated", "this special register is not modelled");
    }
}

uint64_t Thread_::sym_addr(uint32_t s) {
    const Sym& y = P.syms[s];
    switch (y.space) {
        case S_GLOBAL: case S_CONST: return uint64_t(uintptr_t(C.globals + P.global_off[s]));
        case S_SHARED: return W.shared_addr[s];
        case S_LOCAL: return P.func_local[y.func >= 0 ? y.func : 0] + y.offset;
        case S_PARAM:
            if (y.flags & SYM_ENTRY_PARAM) return y.offset;
            return PARAM_SCRATCH + P.func_param[y.func >= 0 ? y.func : 0] + y.offset;
        default: stop("invalid", "the address of a symbol in an unknown state space");
    }
}

uint8_t* Thread_::shared_ptr(uint64_t off, uint32_t bytes, bool write, const char* what, bool atomic) {
    if (off >= ARENA_BYTES || off + bytes > ARENA_BYTES)
        stop("out_of_bounds", std::string(what) + ": " + std::to_string(off) + " is not a shared-memory address");
    const uint32_t s = uint32_t(off);
    if (s < RESERVED || s + bytes > RESERVED + B.limit || (s + bytes > B.static_top && s < B.global_bottom)) {
        char buf[200];
        snprintf(buf, sizeof buf, "%s %u bytes at shared address 0x%x, outside the block's shared memory "
                 "(0x%x..0x%x in use)", write ? "wrote" : "read", bytes, s, RESERVED, B.static_top);
        stop("out_of_bounds", buf);
    }
    if (B.race && !atomic) shadow_access(B, tid, clock_of(B, tid), s, bytes, write, T.pc, "");
    if (g_trace_on) trace_access(B, tid, uintptr_t(B.arena + s), bytes, write, atomic, T.pc);
    return reinterpret_cast<uint8_t*>(B.arena + s);
}

uint8_t* Thread_::generic(uint64_t addr, uint32_t bytes, bool write, const char* what, bool atomic, int* space_out) {
    const uintptr_t a = uintptr_t(addr);
    const uintptr_t arena = uintptr_t(B.arena);
    if (a - arena < ARENA_BYTES) {
        if (space_out) *space_out = S_SHARED;
        return shared_ptr(a - arena, bytes, write, what, atomic);
    }
    const uintptr_t lb = uintptr_t(L);
    if (P.local_total && a - lb < P.local_total) {
        if (space_out) *space_out = S_LOCAL;
        return resolve(S_LOCAL, a - lb, bytes, write, what);
    }
    const uintptr_t pb = uintptr_t(C.params.data());
    if (!C.params.empty() && a - pb < C.params.size()) {
        if (space_out) *space_out = S_PARAM;
        if (write) stop("invalid", std::string(what) + ": a store into the kernel's parameters");
        return resolve(S_PARAM, a - pb, bytes, write, what);
    }
    if (space_out) *space_out = S_GLOBAL;
    return resolve(S_GLOBAL, addr, bytes, write, what, atomic);
}

uint8_t* Thread_::resolve(int space, uint64_t addr, uint32_t bytes, bool write, const char* what, bool atomic) {
    if (bytes > 1 && (addr % (bytes > 16 ? 16 : bytes)) && space != S_PARAM) {
        char buf[160];
        snprintf(buf, sizeof buf, "%s: a %u-byte access at a misaligned address (%#llx): the GPU faults "
                 "(misaligned address)", what, bytes, (unsigned long long)addr);
        stop("invalid_address", buf);
    }
    switch (space) {
        case S_GENERIC: return generic(addr, bytes, write, what, atomic, nullptr);
        case S_SHARED: return shared_ptr(addr, bytes, write, what, atomic);
        case S_GLOBAL: case S_CONST: {
            if (write && space == S_CONST) stop("invalid", std::string(what) + ": a store into constant memory");
            const uintptr_t a = uintptr_t(addr);
            if (!global_in_buffer(a, bytes)) global_check(a, bytes, write, T.pc, what);  // reports and stops
            if (g_trace_on && !t_trace_skip) trace_access(B, tid, a, bytes, write, atomic, T.pc);
            if ((++T.accesses & 0xfff) == 0) {  // spin-waiters make way; the clock is watched
                check_deadline_now(B);
                yield_now();
            }
            return reinterpret_cast<uint8_t*>(a);
        }
        case S_LOCAL:
            if (addr + bytes > P.local_total || addr + bytes < addr)
                stop("invalid_address", std::string(what) + ": an access outside the thread's local memory (a "
                     "local array indexed out of its bounds?)");
            return L + addr;
        case S_PARAM:
            if (addr < PARAM_SCRATCH) {
                if (write) stop("invalid", std::string(what) + ": a store into the kernel's parameters");
                if (addr + bytes > C.params.size()) stop("invalid_address", std::string(what) +
                                                         ": a read past the kernel's parameters");
                return const_cast<uint8_t*>(C.params.data()) + addr;
            }
            if (addr - PARAM_SCRATCH + bytes > P.param_total)
                stop("invalid_address", std::string(what) + ": a parameter address outside every call's arguments");
            return CP + (addr - PARAM_SCRATCH);
        default: stop("invalid", "an unknown state space");
    }
}

uint32_t Thread_::shared_of(int space, uint64_t addr, const char* what) {
    if (space == S_SHARED) return uint32_t(addr);
    const uintptr_t a = uintptr_t(addr), arena = uintptr_t(B.arena);
    if (a - arena < ARENA_BYTES) return uint32_t(a - arena);
    stop("invalid_address", std::string(what) + ": the address is not in shared memory");
}

int Thread_::dests(const Operand& vec, uint64_t** out, int cap) {
    if ((vec.kind & 0x7f) != K_VEC || vec.n > cap) stop("invalid", "a vector destination of the wrong shape");
    for (int k = 0; k < vec.n; ++k) {
        const Operand& o = P.ops[vec.reg + k];
        if ((o.kind & 0x7f) == K_SINK) { out[k] = nullptr; continue; }
        if ((o.kind & 0x7f) != K_REG) stop("invalid", "a vector destination that is not a register");
        out[k] = R + o.reg;
    }
    return vec.n;
}
int Thread_::sources(const Operand& vec, uint64_t* out, int cap) {
    if ((vec.kind & 0x7f) != K_VEC) { out[0] = value(vec); return 1; }
    if (vec.n > cap) stop("invalid", "a vector operand of the wrong shape");
    for (int k = 0; k < vec.n; ++k) out[k] = value(P.ops[vec.reg + k]);
    return vec.n;
}


// ---- loads and stores ---------------------------------------------------------------------------------------------------
void Thread_::load_store(const Instr& in, bool store) {
    const int space = int((in.mod >> SPACE_SHIFT) & 7);
    const int vec = int((in.mod >> VEC_SHIFT) & 3);
    const int count = vec == 0 ? 1 : vec == 1 ? 2 : vec == 2 ? 4 : 8;
    const int nb = TBYTES[in.t];
    const Operand& addr_op = opnd(in, store ? 0 : 1);
    const Operand& val = opnd(in, store ? 1 : 0);
    const uint64_t addr = address(addr_op);
    const uint32_t total = uint32_t(nb * count);
    uint8_t* p = resolve(space, addr, total, store, store ? "st" : "ld");
    if (store) {
        if (count == 1) {
            const uint64_t v = value(val);
            std::memcpy(p, &v, size_t(nb));
        } else {
            for (int k = 0; k < count; ++k) {
                const uint64_t v = value(P.ops[val.reg + k]);
                std::memcpy(p + k * nb, &v, size_t(nb));
            }
        }
        return;
    }
    auto widen = [&](uint64_t raw) { return is_signed(in.t) ? uint64_t(sext(raw, nb)) : raw; };
    if (count == 1) {
        uint64_t v = 0;
        std::memcpy(&v, p, size_t(nb));
        write(val, widen(v), (val.kind & 0x7f) == K_REG && is_signed(in.t) ? 8 : nb);
    } else {
        for (int k = 0; k < count; ++k) {
            uint64_t v = 0;
            std::memcpy(&v, p + k * nb, size_t(nb));
            write(P.ops[val.reg + k], widen(v), nb);
        }
    }
}

// ---- atomics --------------------------------------------------------------------------------------------------------------
void Thread_::atomic(const Instr& in, bool has_dest) {
    const int space = int((in.mod >> SPACE_SHIFT) & 7);
    const int sub = int((in.mod >> SUB_SHIFT) & 31);
    const int t = in.t;
    const int nb = TBYTES[t];
    const int k0 = has_dest ? 1 : 0;
    const uint64_t addr = address(opnd(in, k0));
    const uint64_t b = value(opnd(in, k0 + 1));
    const uint64_t c = in.n > k0 + 2 ? value(opnd(in, k0 + 2)) : 0;
    uint8_t* p = resolve(space, addr, uint32_t(nb), true, has_dest ? "atom" : "red", true);
    int op;
    const bool fl = is_float(t);
    switch (sub) {
        case 0:  // add
            op = t == T_F32 ? A_FADD : t == T_F64 ? A_DADD : t == T_F16X2 ? A_HADD2 : t == T_BF16X2 ? A_BADD2
                 : t == T_F16 ? A_HADD : t == T_BF16 ? A_BADD : A_ADD;
            break;
        case 1: op = A_INC; break;
        case 2: op = A_DEC; break;
        case 3: op = fl ? A_FMIN : is_signed(t) ? A_MIN_S : A_MIN_U; break;
        case 4: op = fl ? A_FMAX : is_signed(t) ? A_MAX_S : A_MAX_U; break;
        case 5: op = A_AND; break;
        case 6: op = A_OR; break;
        case 7: op = A_XOR; break;
        case 8: op = A_EXCH; break;
        default: op = A_CAS; break;
    }
    if (op == A_FMIN || op == A_FMAX) {  // not among the runtime's atomics: one thread runs at a time anyway
        float cur;
        std::memcpy(&cur, p, 4);
        const float v = op == A_FMIN ? fmin_ptx(cur, f32(b), false) : fmax_ptx(cur, f32(b), false);
        std::memcpy(p, &v, 4);
        if (has_dest) write(opnd(in, 0), bits(cur), 4);
        return;
    }
    uint64_t old;
    if (op == A_CAS) old = atomic_rmw(p, nb, op, c, b);
    else old = atomic_rmw(p, nb, op, b, 0);
    if (has_dest) write(opnd(in, 0), old, nb);
}

}  // namespace interp
}  // namespace tkemu
