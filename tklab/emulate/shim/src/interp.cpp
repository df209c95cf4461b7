// The PTX interpreter: executes the PTX that NVRTC (or numba's NVVM) compiled, instruction by instruction, inside
// the emulator's runtime (fibers, barriers, the race and hazard checks, the asynchronous units of ptx.cpp).
//
// Why an interpreter: the program judged must be the program that runs. The native emulator compiles a learner's
// source a second time, with g++, into host code that runs in the checking process's child: a second program,
// and native code that can reach anything in its process. Here the learner's program is data -- decoded records
// (tklab/emulate/interp/decode.py) -- and the only code that runs is this file's. Every address an instruction
// uses is resolved to one of the kernel's own regions (its argument buffers, the block's shared memory, the
// thread's local memory and registers, the kernel's parameters) or the launch stops: nothing outside them can be
// read or written.
//
// Registers: one 64-bit slot per PTX register (of every function; calls do not recurse), starting as garbage
// (0xfe bytes), as GPU registers do. A wgmma group's accumulators, and the registers it reads matrix A from, are
// register slots: reading or writing one before the wgmma.wait_group that retires it is the runtime's
// asynchronous hazard (accumulator_touch).
// Code addresses in messages are instruction numbers (INSTR_TAG | n); Python maps them to the learner's lines
// through the PTX's .loc records.
#include "interp.h"

extern "C" {
void* tkemu_buffer_map(int slot, uint64_t bytes);
void tkemu_buffer_unmap(int slot);
int tkemu_launch(void (*entry)(void* const*), void* const* args, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                 unsigned by, unsigned bz, unsigned dyn_smem, int arch, int workers, int flags, double time_limit);
}

namespace tkemu {
namespace interp {

int g_turn_lo = 0, g_turn_hi = 0;

void stop(const char* kind, const std::string& msg) {
    Block* b = t_block;
    std::string m = msg;
    if (b && b->cur) m = thread_desc(*b, b->cur->id) + " of " + block_desc(*b) + ": " + msg + pc_mark(b->cur->pc);
    fail_json(error_json(kind, m));
}

// ---- calls ---------------------------------------------------------------------------------------------------------------------
void Thread_::call(const Instr& in) {
    const Operand& target = opnd(in, 0);
    const Operand& args = opnd(in, 1);
    const uint32_t f = uint32_t(target.reg);
    if (f >= P.funcs.size()) stop("invalid", "a call of an unknown function");
    const Func& fn = P.funcs[f];
    if (depth >= 64) stop("invalid", "calls nested deeper than 64");
    if (args.n != fn.n_params) stop("invalid", "a call with the wrong number of arguments");
    for (uint32_t k = 0; k < fn.n_params; ++k) {  // copy each argument into the callee's parameter
        const Operand& a = P.ops[args.reg + k];
        const Sym& dst = P.syms[fn.params + k];
        uint8_t* to = CP + P.func_param[f] + dst.offset;
        if ((a.kind & 0x7f) == K_SYM) {
            const Sym& src = P.syms[a.reg];
            const uint64_t sa = sym_addr(uint32_t(a.reg));
            const uint8_t* from = resolve(S_PARAM, sa, std::min(src.size, dst.size), false, "a call's argument");
            std::memcpy(to, from, std::min(src.size, dst.size));
        } else {
            const uint64_t v = value(a);
            std::memcpy(to, &v, std::min<uint32_t>(dst.size, 8));
        }
    }
    frames[depth++] = {func, pc + 1, pc};
    func = f;
    pc = fn.first;
}

bool Thread_::ret() {
    if (depth == 0) return false;
    const Frame fr = frames[--depth];
    const Func& callee = P.funcs[func];
    const Instr& ci = P.ins[fr.call_pc];
    const Operand& rets = P.ops[ci.a + 2];
    for (uint32_t k = 0; k < callee.n_rets && k < rets.n; ++k) {
        const Operand& r = P.ops[rets.reg + k];
        const Sym& src = P.syms[callee.rets + k];
        const uint8_t* from = CP + P.func_param[func] + src.offset;
        if ((r.kind & 0x7f) == K_SYM) {
            const Sym& dst = P.syms[r.reg];
            uint8_t* to = resolve(S_PARAM, sym_addr(uint32_t(r.reg)), std::min(src.size, dst.size), true, "a return value");
            std::memcpy(to, from, std::min(src.size, dst.size));
        }
    }
    func = fr.func;
    pc = fr.ret_pc;
    return true;
}

void Thread_::vprintf_(const Instr& in) {
    // call.uni (ret), vprintf, (fmt, args): fmt is a generic address of the format string, args of a local buffer
    const Operand& args = opnd(in, 0);
    if (args.n < 2) return;
    auto arg_value = [&](int k) -> uint64_t {
        const Operand& a = P.ops[args.reg + k];
        if ((a.kind & 0x7f) == K_SYM) {
            uint64_t v = 0;
            std::memcpy(&v, resolve(S_PARAM, sym_addr(uint32_t(a.reg)), 8, false, "printf"), 8);
            return v;
        }
        return value(a);
    };
    const uint64_t fmt_addr = arg_value(0), buf_addr = arg_value(1);
    std::string fmt;
    for (int i = 0; i < 4096; ++i) {
        const char ch = char(*generic(fmt_addr + uint64_t(i), 1, false, "printf's format", false, nullptr));
        if (!ch) break;
        fmt += ch;
    }
    std::string out;
    uint64_t off = 0;
    auto next = [&](int bytes) -> uint64_t {
        off = (off + uint64_t(bytes) - 1) / uint64_t(bytes) * uint64_t(bytes);
        uint64_t v = 0;
        if (buf_addr) std::memcpy(&v, generic(buf_addr + off, uint32_t(bytes), false, "printf's arguments", false, nullptr),
                                  size_t(bytes));
        off += uint64_t(bytes);
        return v;
    };
    for (size_t i = 0; i < fmt.size(); ++i) {
        if (fmt[i] != '%') { out += fmt[i]; continue; }
        size_t j = i + 1;
        while (j < fmt.size() && std::strchr("-+ #0123456789.*", fmt[j])) ++j;
        int longs = 0;
        while (j < fmt.size() && (fmt[j] == 'l' || fmt[j] == 'h' || fmt[j] == 'z')) { longs += fmt[j] == 'l'; ++j; }
        if (j >= fmt.size()) break;
        const char conv = fmt[j];
        std::string spec = fmt.substr(i, j - i);
        spec.erase(std::remove_if(spec.begin(), spec.end(), [](char ch) { return ch == 'l' || ch == 'h' || ch == 'z'; }),
                   spec.end());
        char buf[512];
        if (conv == '%') out += '%';
        else if (std::strchr("diouxXc", conv)) {
            const uint64_t v = next(longs ? 8 : 4);
            spec += "ll";
            spec += conv;
            if (conv == 'd' || conv == 'i') snprintf(buf, sizeof buf, spec.c_str(), (long long)(longs ? int64_t(v) : int64_t(int32_t(v))));
            else snprintf(buf, sizeof buf, spec.c_str(), (unsigned long long)(longs ? v : uint32_t(v)));
            out += buf;
        } else if (std::strchr("feEgGaA", conv)) {
            spec += conv;
            snprintf(buf, sizeof buf, spec.c_str(), f64(next(8)));
            out += buf;
        } else if (conv == 's') {
            const uint64_t sa = next(8);
            std::string s;
            for (int k = 0; k < 1024 && sa; ++k) {
                const char ch = char(*generic(sa + uint64_t(k), 1, false, "printf's string", false, nullptr));
                if (!ch) break;
                s += ch;
            }
            out += s;
        } else if (conv == 'p') {
            snprintf(buf, sizeof buf, "%#llx", (unsigned long long)next(8));
            out += buf;
        } else {
            out += spec + conv;
        }
        i = j;
    }
    device_printf("%s", out.c_str());
}

// ---- the loop ------------------------------------------------------------------------------------------------------------------
static bool wgmma_pending_in_warp(Block& b, int tid) {
    const size_t wg = size_t(tid / 128);
    if (wg >= b.wgs.size()) return false;
    const uint8_t mine = uint8_t(1u << ((tid % 128) / 32));
    for (const WgGroup& g : b.wgs[wg].committed)
        if (g.instrs > 0 && !(g.retired & mine)) return true;
    return false;
}

void Thread_::exec(const Instr& in) {
    switch (in.op) {
        case OP_NOP: case OP_FENCE: return;
        case OP_MOV: mov(in); return;
        case OP_CVT: convert(in); return;
        case OP_CVTA: {
            const int space = int((in.mod >> SPACE_SHIFT) & 7);
            const uint64_t a = value(opnd(in, 1));
            const bool to = in.mod & M_FLAG;
            uint64_t r = a;
            if (space == S_SHARED) {
                const uintptr_t arena = uintptr_t(B.arena);
                if (to) {
                    if (a - arena >= ARENA_BYTES) stop("invalid_address", "cvta.to.shared of an address that is not in "
                                                       "shared memory");
                    r = a - arena;
                } else r = arena + a;
            } else if (space == S_LOCAL) {
                r = to ? a - uintptr_t(L) : uintptr_t(L) + a;
            } else if (space == S_PARAM) {
                r = to ? a - uintptr_t(C.params.data()) : uintptr_t(C.params.data()) + a;
            }
            write(opnd(in, 0), r, TBYTES[in.t] ? TBYTES[in.t] : 8);
            return;
        }
        case OP_ISSPACEP: {
            const int space = int((in.mod >> SPACE_SHIFT) & 7);
            const uint64_t a = value(opnd(in, 1));
            const uintptr_t arena = uintptr_t(B.arena);
            bool r;
            if (space == S_SHARED) r = a - arena < ARENA_BYTES;
            else if (space == S_LOCAL) r = a - uintptr_t(L) < P.local_total;
            else if (space == S_PARAM) r = a - uintptr_t(C.params.data()) < C.params.size();
            else r = global_in_buffer(uintptr_t(a), 1);
            write_pred(opnd(in, 0), r);
            return;
        }
        case OP_LD: load_store(in, false); return;
        case OP_ST: load_store(in, true); return;
        case OP_PRMT: {
            const uint64_t a = value(opnd(in, 1)), b = value(opnd(in, 2)), c = value(opnd(in, 3));
            const uint64_t v = (uint64_t(uint32_t(b)) << 32) | uint32_t(a);
            uint32_t r = 0;
            const int mode = int((in.mod >> SUB_SHIFT) & 31);
            if (mode == 0) {
                for (int i = 0; i < 4; ++i) {
                    const uint32_t sel = (uint32_t(c) >> (4 * i)) & 0xf;
                    uint32_t byte = uint32_t((v >> (8 * (sel & 7))) & 0xff);
                    if (sel & 8) byte = (byte & 0x80) ? 0xff : 0;
                    r |= byte << (8 * i);
                }
            } else {
                stop("not_emulated", "prmt with a mode (.f4e, .b4e, ...) is not modelled");
            }
            write(opnd(in, 0), r, 4);
            return;
        }
        case OP_ADD: case OP_SUB: case OP_MUL: case OP_MAD: case OP_FMA: case OP_DIV: case OP_REM: case OP_ABS:
        case OP_NEG: case OP_MIN: case OP_MAX: case OP_AND: case OP_OR: case OP_XOR: case OP_NOT: case OP_CNOT:
        case OP_SHL: case OP_SHR: case OP_SHF: case OP_BFE: case OP_BFI: case OP_BREV: case OP_POPC: case OP_CLZ:
        case OP_BFIND: case OP_LOP3: case OP_MUL24: case OP_MAD24: case OP_SAD: case OP_RCP: case OP_SQRT:
        case OP_RSQRT: case OP_SIN: case OP_COS: case OP_LG2: case OP_TANH: case OP_COPYSIGN: case OP_SELP:
            arith(in);
            return;
        case OP_EX2:
            W.stats[ST_EX2]++;
            if (wgmma_pending_in_warp(B, tid)) W.stats[ST_EX2_UNDER_WGMMA]++;
            arith(in);
            return;
        case OP_TESTP: {
            const uint64_t a = value(opnd(in, 1));
            const double x = in.t == T_F64 ? f64(a) : double(f32(a));
            const int k = int((in.mod >> SUB_SHIFT) & 31);
            const int cls = std::fpclassify(x);
            const bool r = k == 0 ? std::isfinite(x) : k == 1 ? std::isinf(x) : k == 2 ? !std::isnan(x)
                           : k == 3 ? std::isnan(x) : k == 4 ? cls == FP_NORMAL : cls == FP_SUBNORMAL;
            write_pred(opnd(in, 0), r);
            return;
        }
        case OP_SETP: case OP_SET: setp(in); return;
        case OP_SLCT: {
            const uint64_t a = value(opnd(in, 1)), b = value(opnd(in, 2)), c = value(opnd(in, 3));
            const bool take_a = in.t2 == T_F32 ? f32(c) >= 0.0f : int32_t(c) >= 0;
            write(opnd(in, 0), take_a ? a : b, TBYTES[in.t]);
            return;
        }
        case OP_BAR_SYNC: {
            const unsigned id = unsigned(value(opnd(in, 0)));
            const int count = in.n > 1 ? int(value(opnd(in, 1))) : 0;
            bar_sync(id, count);
            if (int(id) >= g_turn_lo && int(id) < g_turn_hi) holding_turn = true;
            return;
        }
        case OP_BAR_ARRIVE: {
            const unsigned id = unsigned(value(opnd(in, 0)));
            bar_arrive(id, int(value(opnd(in, 1))));
            if (int(id) >= g_turn_lo && int(id) < g_turn_hi) holding_turn = false;
            return;
        }
        case OP_BAR_RED: {  // bar.red.popc.u32 d, a{, b}, {!}c
            const unsigned id = unsigned(value(opnd(in, 1)));
            const int pred = int(value(opnd(in, in.n - 1)) & 1);
            const int op = int((in.mod >> SUB_SHIFT) & 31);
            const int r = bar_red(op, id, pred);
            if (op == 0) write(opnd(in, 0), uint64_t(r), 4);
            else write_pred(opnd(in, 0), r != 0);
            return;
        }
        case OP_BAR_WARP_SYNC: syncwarp(uint32_t(value(opnd(in, 0)))); return;
        case OP_FENCE_PROXY_ASYNC: ptx::fence_proxy_async(); return;
        case OP_SHFL: case OP_VOTE: case OP_MATCH: case OP_REDUX: case OP_ELECT: warp_op(in); return;
        case OP_ACTIVEMASK: write(opnd(in, 0), activemask(), 4); return;
        case OP_NANOSLEEP: yield_now(); return;
        case OP_ATOM: atomic(in, true); return;
        case OP_RED: atomic(in, false); return;
        case OP_MMA: case OP_LDMATRIX: case OP_STMATRIX: case OP_MOVMATRIX: case OP_WGMMA: case OP_WGMMA_FENCE:
        case OP_WGMMA_COMMIT: case OP_WGMMA_WAIT:
            tensor(in);
            return;
        case OP_CP_ASYNC: case OP_CP_ASYNC_COMMIT: case OP_CP_ASYNC_WAIT: case OP_MBAR_INIT: case OP_MBAR_ARRIVE:
        case OP_MBAR_EXPECT_TX: case OP_MBAR_WAIT: case OP_MBAR_INVAL: case OP_TMA_LOAD: case OP_TMA_STORE:
        case OP_BULK_COMMIT: case OP_BULK_WAIT:
            async_copy(in);
            return;
        case OP_SETMAXNREG: ptx::setmaxnreg(in.mod & M_FLAG, int(value(opnd(in, 0)))); return;
        case OP_TRAP: trap();
        case OP_VPRINTF: vprintf_(in); return;
        case OP_NOT_MODELLED:
            stop("not_emulated", "not modelled: `" + P.strings[in.y] + "`");
        default:
            stop("not_emulated", std::string("not modelled: ") + (in.op < OP_COUNT ? OPNAMES[in.op] : "?"));
    }
}

void Thread_::run() {
    func = C.entry;
    pc = P.funcs[func].first;
    uint64_t* counts = W.counts.data();
    for (;;) {
        const Func& fn = P.funcs[func];
        if (pc >= fn.first + fn.count) {  // fell off the end of a function: a return
            if (!ret()) return;
            continue;
        }
        const Instr& in = P.ins[pc];
        T.pc = INSTR_TAG | pc;
        counts[pc]++;
        if ((++ticks & 0xffff) == 0) {  // the time limit, and spin loops that never touch memory make way
            check_deadline_now(B);
            yield_now();
        }
        if (in.guard >= 0 && (bool(R[in.guard] & 1) == bool(in.mod & M_GUARD_NEG))) {
            ++pc;
            continue;
        }
        switch (in.op) {
            case OP_BRA: pc = uint32_t(P.ops[in.a].imm); continue;
            case OP_CALL: call(in); continue;
            case OP_RET:
                if (!ret()) return;
                continue;
            case OP_EXIT: return;
            default: exec(in);
        }
        ++pc;
    }
}

// ---- blocks and launches ------------------------------------------------------------------------------------------------------
static uint64_t g_launch_serial = 0;

static WorkerState& worker_state(Block& b, Ctx& c) {
    if (!b.interp) b.interp = new WorkerState();
    auto* w = static_cast<WorkerState*>(b.interp);
    const Program& P = *c.prog;
    if (w->launch != g_launch_serial) {  // a new launch: its counts start at zero, and it learns of this worker
        w->launch = g_launch_serial;
        w->counts.assign(P.ins.size(), 0);
        std::memset(w->stats, 0, sizeof w->stats);
        std::lock_guard<std::mutex> lock(c.mu);
        c.workers.push_back(w);
    }
    if (w->serial != b.serial) {  // a new block: fresh garbage in every register and local byte
        w->serial = b.serial;
        const size_t nregs = size_t(b.n) * P.nregs;
        if (w->regs.size() < nregs) w->regs.resize(nregs);
        std::memset(w->regs.data(), 0xfe, nregs * sizeof(uint64_t));
        w->local.assign(size_t(b.n) * P.local_total, 0xfe);
        w->cparams.assign(size_t(b.n) * P.param_total, 0);
        w->shared_addr.assign(P.syms.size(), 0);
        w->shared_done = false;
    }
    return *w;
}

/// The block's shared variables get their places (the first thread of the block to run does it): the
/// extern (dynamic) array at the window's start, each static one after it, as the runtime places __shared__.
static void place_shared(WorkerState& w, const Program& P) {
    if (w.shared_done) return;
    w.shared_done = true;
    for (size_t s = 0; s < P.syms.size(); ++s) {
        const Sym& y = P.syms[s];
        if (y.space != S_SHARED) continue;
        if (y.flags & SYM_EXTERN) {
            w.shared_addr[s] = RESERVED;
            continue;
        }
        ShapeInfo shape{int(y.elem ? y.elem : 1), y.rank, {y.dims[0], y.dims[1], y.dims[2], y.dims[3]}};
        void* p = shared_static(&P.syms[s], y.size, y.align ? y.align : 1, P.strings[y.name].c_str(), &shape);
        w.shared_addr[s] = uint32_t(static_cast<char*>(p) - t_block->arena);
    }
}

static void fiber_entry(void* const* args) {
    Ctx& c = *static_cast<Ctx*>(args[0]);
    Block& b = *t_block;
    WorkerState& w = worker_state(b, c);
    place_shared(w, *c.prog);
    Thread_ th(*c.prog, c, w, b, b.cur->id);
    th.run();
}

}  // namespace interp
}  // namespace tkemu

using namespace tkemu;
using namespace tkemu::interp;

extern "C" {

/// Load a decoded program (decode.py's arrays); returns a handle, or null with tkemu_interp_error() saying why.
static std::string g_interp_error;

const char* tkemu_interp_error() { return g_interp_error.c_str(); }

void* tkemu_interp_load(const void* instrs, uint64_t n_instrs, const void* ops, uint64_t n_ops, const void* syms,
                        uint64_t n_syms, const void* funcs, uint64_t n_funcs, const void* init, uint64_t init_len,
                        const char* strings, uint64_t strings_len, uint32_t nregs) {
    auto* p = new Program();
    p->ins.assign(static_cast<const Instr*>(instrs), static_cast<const Instr*>(instrs) + n_instrs);
    p->ops.assign(static_cast<const Operand*>(ops), static_cast<const Operand*>(ops) + n_ops);
    p->syms.assign(static_cast<const Sym*>(syms), static_cast<const Sym*>(syms) + n_syms);
    p->funcs.assign(static_cast<const Func*>(funcs), static_cast<const Func*>(funcs) + n_funcs);
    p->init.assign(static_cast<const uint8_t*>(init), static_cast<const uint8_t*>(init) + init_len);
    for (uint64_t i = 0; i < strings_len;) {
        const char* s = strings + i;
        const size_t len = strnlen(s, strings_len - i);
        p->strings.emplace_back(s, len);
        i += len + 1;
    }
    p->nregs = nregs;
    // Every index the records hold is checked once here, so the loop can trust them.
    auto bad = [&](const std::string& why) {
        g_interp_error = "the decoded program is inconsistent: " + why;
        delete p;
        return nullptr;
    };
    std::function<bool(const Operand&, int)> check_op = [&](const Operand& o, int depth) -> bool {
        const int k = o.kind & 0x7f;
        if (k == K_REG && (o.reg < 0 || uint32_t(o.reg) >= nregs)) return false;
        if (k == K_VEC && (o.reg < 0 || uint64_t(o.reg) + o.n > n_ops || depth > 3)) return false;
        if (k == K_VEC)
            for (int j = 0; j < o.n; ++j)
                if (!check_op(p->ops[o.reg + j], depth + 1)) return false;
        if (k == K_SYM && (o.reg < 0 || uint64_t(o.reg) >= n_syms)) return false;
        if (k == K_ADDR && (o.n || o.t) && (o.reg < 0 || uint64_t(o.reg) >= n_syms)) return false;
        if (k == K_ADDR && !(o.n || o.t) && o.reg >= 0 && uint32_t(o.reg) >= nregs) return false;
        if (k == K_LABEL && o.n == 0 && (o.imm < 0 || uint64_t(o.imm) >= n_instrs)) return false;
        if (k == K_LABEL && o.n == 1 && (o.reg < 0 || uint64_t(o.reg) >= n_funcs)) return false;
        if (k == K_SPECIAL && o.n > 46) return false;
        return true;
    };
    for (uint64_t i = 0; i < n_instrs; ++i) {
        const Instr& in = p->ins[i];
        if (in.op >= OP_COUNT || in.t >= T_COUNT || in.t2 >= T_COUNT) return bad("an opcode or type out of range");
        if (uint64_t(in.a) + in.n > n_ops) return bad("operands out of range");
        if (in.guard >= 0 && uint32_t(in.guard) >= nregs) return bad("a guard out of range");
        if (in.op == OP_NOT_MODELLED && in.y >= p->strings.size()) return bad("a message out of range");
        for (int k = 0; k < in.n; ++k)
            if (!check_op(p->ops[in.a + k], 0)) return bad("an operand out of range at instruction " + std::to_string(i));
        if (in.op == OP_BRA && (in.n < 1 || (p->ops[in.a].kind & 0x7f) != K_LABEL)) return bad("a branch without a target");
        if (in.op == OP_CALL && (in.n < 3 || (p->ops[in.a].kind & 0x7f) != K_LABEL || p->ops[in.a].n != 1 ||
                                 (p->ops[in.a + 1].kind & 0x7f) != K_VEC || (p->ops[in.a + 2].kind & 0x7f) != K_VEC))
            return bad("a malformed call");
        if ((in.op == OP_TMA_LOAD || in.op == OP_TMA_STORE) && (in.x > 5 || in.n < 2)) return bad("a malformed TMA");
    }
    for (const Func& f : p->funcs) {
        if (uint64_t(f.first) + f.count > n_instrs || uint64_t(f.params) + f.n_params > n_syms ||
            uint64_t(f.rets) + f.n_rets > n_syms || f.name >= p->strings.size())
            return bad("a function out of range");
    }
    uint32_t goff = 0;
    p->global_off.assign(n_syms, 0);
    for (uint64_t s = 0; s < n_syms; ++s) {
        const Sym& y = p->syms[s];
        if (y.name >= p->strings.size() || uint64_t(y.init) + y.init_len > init_len || y.space > S_CONST ||
            (y.func >= 0 && uint64_t(y.func) >= n_funcs) || y.size > (1u << 30))
            return bad("a symbol out of range");
        if (y.space == S_GLOBAL || y.space == S_CONST) {
            const uint32_t al = y.align ? y.align : 1;
            goff = (goff + al - 1) / al * al;
            p->global_off[s] = goff;
            goff += y.size;
        }
    }
    p->global_bytes = goff;
    // Each function's locals and call arguments at fixed places of a thread's memory (calls never recurse).
    p->func_local.assign(n_funcs, 0);
    p->func_param.assign(n_funcs, 0);
    for (uint64_t f = 0; f < n_funcs; ++f) {
        p->func_local[f] = p->local_total;
        p->local_total += (p->funcs[f].local_bytes + 15) / 16 * 16;
        p->func_param[f] = p->param_total;
        p->param_total += (p->funcs[f].param_bytes + 15) / 16 * 16;
    }
    return p;
}

void tkemu_interp_free(void* program) { delete static_cast<Program*>(program); }

/// Launch entry function `entry` of a loaded program: `params` are the entry's parameter bytes, laid out as its
/// .param list says. Returns what tkemu_launch returns (1: failed; tkemu_error() says why).
int tkemu_interp_launch(void* program, uint32_t entry, const void* params, uint64_t params_len, unsigned gx,
                        unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, unsigned dyn_smem, int arch,
                        int workers, int flags, double time_limit, int global_slot) {
    Program& P = *static_cast<Program*>(program);
    if (entry >= P.funcs.size() || !P.funcs[entry].entry) {
        g_interp_error = "no such kernel";
        return 2;
    }
    Ctx c;
    c.prog = &P;
    c.entry = entry;
    c.params.assign(static_cast<const uint8_t*>(params), static_cast<const uint8_t*>(params) + params_len);
    c.dyn_smem = dyn_smem;
    ++g_launch_serial;
    if (P.global_bytes) {
        void* g = tkemu_buffer_map(global_slot, P.global_bytes);
        if (!g) {
            g_interp_error = "cannot map the module's global variables";
            return 2;
        }
        c.globals = static_cast<char*>(g);
        c.global_slot = global_slot;
        for (size_t s = 0; s < P.syms.size(); ++s) {
            const Sym& y = P.syms[s];
            if ((y.space == S_GLOBAL || y.space == S_CONST) && y.init_len)
                std::memcpy(c.globals + P.global_off[s], P.init.data() + y.init, std::min(y.init_len, y.size));
        }
    }
    g_interp = true;
    void* args[1] = {&c};
    const int failed = tkemu_launch(&fiber_entry, args, gx, gy, gz, bx, by, bz, dyn_smem, arch, workers, flags,
                                    time_limit);
    g_interp = false;
    if (c.globals) tkemu_buffer_unmap(global_slot);
    P.last_counts.assign(P.ins.size(), 0);
    std::memset(P.last_stats, 0, sizeof P.last_stats);
    for (WorkerState* w : c.workers) {
        for (size_t i = 0; i < P.ins.size() && i < w->counts.size(); ++i) P.last_counts[i] += w->counts[i];
        for (int k = 0; k < ST_COUNT; ++k) P.last_stats[k] += w->stats[k];
    }
    for (uint64_t n : P.last_counts) P.last_stats[ST_INSTRS] += n;
    return failed;
}

/// The last launch's executions of each instruction (n_instrs values, thread-level) into `counts`, and its
/// concept counters (ST_COUNT values, Stat's order: ex2, ex2 while a wgmma group of the warp was pending, wgmma,
/// TMA loads, TMA stores, mma.sync, all instructions (thread-level), wgmma issued outside the warpgroup's turn,
/// tensor-core FLOPs (wgmma and mma.sync, counted once per warpgroup or warp), scalar fp32 FLOPs) into `stats`.
void tkemu_interp_counts(void* program, uint64_t* counts, uint64_t* stats) {
    const Program& P = *static_cast<Program*>(program);
    for (size_t i = 0; i < P.ins.size(); ++i) counts[i] = i < P.last_counts.size() ? P.last_counts[i] : 0;
    for (int k = 0; k < ST_COUNT; ++k) stats[k] = P.last_stats[k];
}

/// The named barriers the kernel's warpgroups take turns with, [lo, hi) (lo == hi: none), for the next launches.
void tkemu_interp_turns(int lo, int hi) {
    g_turn_lo = lo;
    g_turn_hi = hi;
}

}  // extern "C"

