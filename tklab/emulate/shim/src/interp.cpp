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
// (0xfe bytes), as GPU registers do. A wgmma group's accumulators are register slots: reading or writing one
// before the wgmma.wait_group that retires it is the runtime's asynchronous hazard (accumulator_touch).
// Code addresses in messages are instruction numbers (INSTR_TAG | n); Python maps them to the learner's lines
// through the PTX's .loc records.
#include <cfenv>
#include <cmath>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "internal.h"

extern "C" {
void* tkemu_buffer_map(int slot, uint64_t bytes);
void tkemu_buffer_unmap(int slot);
int tkemu_launch(void (*entry)(void* const*), void* const* args, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                 unsigned by, unsigned bz, unsigned dyn_smem, int arch, int workers, int flags, double time_limit);
const char* tkemu_error();
}

namespace tkemu {
int device_printf(const char* fmt, ...);
namespace interp {

enum Op : uint16_t {
#define OP(name) OP_##name,
#include "interp_ops.def"

    OP_COUNT
};
enum Ty : uint8_t {
#define TYPE(name, bytes) T_##name,
#include "interp_ops.def"

    T_COUNT
};
static const uint8_t TBYTES[] = {
#define TYPE(name, bytes) bytes,
#include "interp_ops.def"

};
static const char* const OPNAMES[] = {
#define OP(name) #name,
#include "interp_ops.def"

};

enum Kind : uint8_t { K_REG = 1, K_IMM = 2, K_VEC = 3, K_ADDR = 4, K_SYM = 5, K_SPECIAL = 6, K_LABEL = 7, K_SINK = 8 };
constexpr uint8_t K_NEG = 0x80;
enum Space : int { S_GENERIC = 0, S_GLOBAL = 1, S_SHARED = 2, S_LOCAL = 3, S_PARAM = 4, S_CONST = 5 };

// Instr.mod bits (decode.py's layout)
constexpr uint32_t CMP_MASK = 0x1F, BOOL_SHIFT = 5, RND_SHIFT = 7, M_RINT = 1u << 10, M_FTZ = 1u << 11,
                   M_SAT = 1u << 12, M_APPROX = 1u << 13, M_RELU = 1u << 14, HL_SHIFT = 15, SPACE_SHIFT = 17,
                   VEC_SHIFT = 20, M_GUARD_NEG = 1u << 22, M_TRANS = 1u << 23, SUB_SHIFT = 24, M_FLAG = 1u << 29,
                   M_FLAG2 = 1u << 30, M_NAN = 1u << 31;
enum Rnd { R_NONE = 0, R_RN = 1, R_RZ = 2, R_RM = 3, R_RP = 4, R_RNA = 5 };
enum Cmp { C_EQ, C_NE, C_LT, C_LE, C_GT, C_GE, C_LO, C_LS, C_HI, C_HS, C_EQU, C_NEU, C_LTU, C_LEU, C_GTU, C_GEU,
           C_NUM, C_NAN };

#pragma pack(push, 1)
struct Instr {
    uint16_t op;
    uint8_t t, t2;
    uint32_t mod;
    int32_t guard;
    int32_t loc;
    uint32_t a;
    uint16_t n, x;
    uint32_t line, y;
};
struct Operand {
    uint8_t kind, t;
    uint16_t n;
    int32_t reg;
    int64_t imm;
};
struct Sym {
    uint8_t space, flags;
    uint16_t elem;
    uint32_t size, align, init, init_len;
    int32_t func;
    uint32_t name;
    int32_t dims[4];
    int32_t rank;
    uint32_t offset;
};
struct Func {
    uint32_t first, count, params, n_params, rets, n_rets, local_bytes, param_bytes, entry, name;
};
#pragma pack(pop)
static_assert(sizeof(Instr) == 32 && sizeof(Operand) == 16 && sizeof(Sym) == 52 && sizeof(Func) == 40,
              "the records decode.py writes");
constexpr uint8_t SYM_EXTERN = 1, SYM_ENTRY_PARAM = 2, SYM_CALL_PARAM = 4, SYM_FUNC_PARAM = 8;
constexpr uint64_t PARAM_SCRATCH = uint64_t(1) << 28;  // param-space addresses of a thread's call arguments
constexpr uint64_t GARBAGE = 0xfefefefefefefefeull;    // what a register holds before it is written

struct Program {
    std::vector<Instr> ins;
    std::vector<Operand> ops;
    std::vector<Sym> syms;
    std::vector<Func> funcs;
    std::vector<uint8_t> init;
    std::vector<std::string> strings;
    uint32_t nregs = 0;
    std::vector<uint32_t> func_local;  // each function's local bytes start here in a thread's local memory
    std::vector<uint32_t> func_param;  // ... and its params / call arguments here in its param scratch
    uint32_t local_total = 0, param_total = 0;
    uint32_t global_bytes = 0;         // the module's .global and .const variables, one buffer
    std::vector<uint32_t> global_off;  // per symbol (global/const): its offset in that buffer
    std::vector<uint64_t> last_counts; // the last launch's executions of each instruction (thread-level)
    uint64_t last_stats[10] = {};      // ... and its concept counters (Stat)
};

/// Each launch's shared facts.
struct Ctx {
    const Program* prog = nullptr;
    uint32_t entry = 0;
    std::vector<uint8_t> params;  // the entry's parameter bytes (the launch's arguments)
    char* globals = nullptr;      // the module's variables (mapped as an argument buffer: bounds-checked)
    int global_slot = -1;
    uint32_t dyn_smem = 0;
    std::mutex mu;
    std::vector<struct WorkerState*> workers;  // the worker states that ran this launch (their counts)
};
enum Stat { ST_EX2 = 0, ST_EX2_UNDER_WGMMA = 1, ST_WGMMA = 2, ST_TMA_LOAD = 3, ST_TMA_STORE = 4, ST_MMA = 5,
            ST_INSTRS = 6, ST_WGMMA_OUTSIDE_TURN = 7, ST_TENSOR_FLOPS = 8, ST_SCALAR_FLOPS = 9, ST_COUNT = 10 };
/// The named barriers a kernel's warpgroups take turns with ([lo, hi), none when lo == hi): a wgmma issued by a
/// thread that has not synced on one since it last arrived on one is issued outside its turn.
static int g_turn_lo = 0, g_turn_hi = 0;

/// One worker's state for the block it runs (registers and local memory of every thread of the block).
struct WorkerState {
    uint64_t serial = ~uint64_t(0);
    uint64_t launch = 0;
    std::vector<uint64_t> regs;
    std::vector<uint8_t> local;
    std::vector<uint8_t> cparams;
    std::vector<uint32_t> shared_addr;  // each symbol's shared address (static .shared, extern shared)
    std::vector<uint64_t> counts;
    uint64_t stats[ST_COUNT] = {};
    bool shared_done = false;
};

static Ctx* g_ctx = nullptr;

static inline uint64_t mask_of(int bytes) { return bytes >= 8 ? ~uint64_t(0) : ((uint64_t(1) << (8 * bytes)) - 1); }
static inline int64_t sext(uint64_t v, int bytes) {
    if (bytes >= 8) return int64_t(v);
    const int s = 64 - 8 * bytes;
    return int64_t(v << s) >> s;
}
static inline bool is_signed(int t) { return t == T_S8 || t == T_S16 || t == T_S32 || t == T_S64; }
static inline bool is_float(int t) {
    return t == T_F32 || t == T_F64 || t == T_F16 || t == T_BF16 || t == T_F16X2 || t == T_BF16X2 || t == T_TF32;
}
static inline float f32(uint64_t v) { return bits_f32(uint32_t(v)); }
static inline uint64_t bits(float f) { return f32_bits(f); }
static inline double f64(uint64_t v) { double d; std::memcpy(&d, &v, 8); return d; }
static inline uint64_t bits(double d) { uint64_t u; std::memcpy(&u, &d, 8); return u; }
static inline float ftz(float f) { return std::fpclassify(f) == FP_SUBNORMAL ? std::copysign(0.0f, f) : f; }
static inline float h2f(int t, uint16_t h) { return t == T_BF16 || t == T_BF16X2 ? bf16_to_f32(h) : f16_to_f32(h); }
static inline uint16_t f2h(int t, float f, int rnd = R_RN) {
    if (t == T_BF16 || t == T_BF16X2) return rnd == R_RZ ? f32_to_bf16_rz(f) : f32_to_bf16(f);
    return f32_to_f16(f);
}

/// A launch failure naming the instruction.
[[noreturn]] static void stop(const char* kind, const std::string& msg) {
    Block* b = t_block;
    std::string m = msg;
    if (b && b->cur) m = thread_desc(*b, b->cur->id) + " of " + block_desc(*b) + ": " + msg + pc_mark(b->cur->pc);
    fail_json(error_json(kind, m));
}

// ---- one thread's execution ---------------------------------------------------------------------------------------
struct Frame {
    uint32_t func, ret_pc, call_pc;
};

class Thread_ {
public:
    Thread_(const Program& p, const Ctx& c, WorkerState& w, Block& b, int tid)
        : P(p), C(c), W(w), B(b), T(b.threads[tid]), tid(tid),
          R(w.regs.data() + size_t(tid) * p.nregs),
          L(w.local.data() + size_t(tid) * p.local_total),
          CP(w.cparams.data() + size_t(tid) * p.param_total) {}

    void run();

private:
    const Program& P;
    const Ctx& C;
    WorkerState& W;
    Block& B;
    tkemu::Thread& T;
    int tid;
    uint64_t* R;
    uint8_t* L;
    uint8_t* CP;
    uint32_t pc = 0;
    Frame frames[64];
    int depth = 0;
    uint32_t func = 0;
    uint64_t ticks = 0;
    bool holding_turn = false;  // synced on a turn barrier since the last arrive on one (g_turn_lo..hi)

    // -- registers ----------------------------------------------------------------------------------------------
    inline void touch(uint64_t* slot, bool write) {
        const uintptr_t a = uintptr_t(slot);
        if (a - T.acc_lo < T.acc_hi - T.acc_lo) accumulator_touch(B, a, 4, write, T.pc);
    }
    inline uint64_t reg(int32_t r) {
        uint64_t* s = R + r;
        touch(s, false);
        return *s;
    }
    inline void set(int32_t r, uint64_t v) {
        uint64_t* s = R + r;
        touch(s, true);
        *s = v;
    }
    const Operand& opnd(const Instr& in, int k) const { return P.ops[in.a + k]; }

    uint64_t special(int id);
    uint64_t sym_addr(uint32_t s);
    uint64_t value(const Operand& o) {
        switch (o.kind & 0x7f) {
            case K_REG: {
                const uint64_t v = reg(o.reg);
                return (o.kind & K_NEG) ? uint64_t(v == 0) : v;
            }
            case K_IMM: return uint64_t(o.imm);
            case K_SPECIAL: return special(o.n);
            case K_SYM: return sym_addr(uint32_t(o.reg)) + uint64_t(o.imm);
            case K_SINK: return 0;
            default: stop("invalid", "an operand that has no value here");
        }
    }
    void write(const Operand& o, uint64_t v, int bytes) {
        if ((o.kind & 0x7f) == K_SINK) return;
        if ((o.kind & 0x7f) != K_REG) stop("invalid", "an instruction writes to an operand that is not a register");
        set(o.reg, v & mask_of(bytes));
    }
    void write_pred(const Operand& o, bool p) {
        if ((o.kind & 0x7f) == K_SINK) return;
        set(o.reg, p ? 1 : 0);
    }
    uint64_t address(const Operand& o) {
        if ((o.kind & 0x7f) == K_ADDR) {
            if (o.n || o.t) return sym_addr(uint32_t(o.reg)) + uint64_t(o.imm);  // [sym+off]
            return (o.reg >= 0 ? reg(o.reg) : 0) + uint64_t(o.imm);
        }
        return value(o);
    }

    // -- memory -------------------------------------------------------------------------------------------------
    uint8_t* resolve(int space, uint64_t addr, uint32_t bytes, bool write, const char* what, bool atomic = false);
    uint8_t* shared_ptr(uint64_t off, uint32_t bytes, bool write, const char* what, bool atomic);
    uint8_t* generic(uint64_t addr, uint32_t bytes, bool write, const char* what, bool atomic, int* space_out);
    uint32_t shared_of(int space, uint64_t addr, const char* what);

    // -- instruction groups ---------------------------------------------------------------------------------------
    void exec(const Instr& in);
    void arith(const Instr& in);
    void convert(const Instr& in);
    void load_store(const Instr& in, bool store);
    void setp(const Instr& in);
    void mov(const Instr& in);
    void atomic(const Instr& in, bool has_dest);
    void warp_op(const Instr& in);
    void tensor(const Instr& in);
    void async_copy(const Instr& in);
    void call(const Instr& in);
    bool ret();
    void vprintf_(const Instr& in);
    int dests(const Operand& vec, uint64_t** out, int cap);
    int sources(const Operand& vec, uint64_t* out, int cap);
};

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

// ---- arithmetic ---------------------------------------------------------------------------------------------------
static inline int rnd_of(uint32_t mod) { return int((mod >> RND_SHIFT) & 7); }
static inline int space_of(const Instr& in) { return int((in.mod >> SPACE_SHIFT) & 7); }

template <typename F>
static float round_f32(int rnd, F f) {
    if (rnd == R_RZ || rnd == R_RM || rnd == R_RP) {
        const int old = std::fegetround();
        std::fesetround(rnd == R_RZ ? FE_TOWARDZERO : rnd == R_RM ? FE_DOWNWARD : FE_UPWARD);
        volatile float r = f();
        std::fesetround(old);
        return r;
    }
    return f();
}
template <typename F>
static double round_f64(int rnd, F f) {
    if (rnd == R_RZ || rnd == R_RM || rnd == R_RP) {
        const int old = std::fegetround();
        std::fesetround(rnd == R_RZ ? FE_TOWARDZERO : rnd == R_RM ? FE_DOWNWARD : FE_UPWARD);
        volatile double r = f();
        std::fesetround(old);
        return r;
    }
    return f();
}

static float fmin_ptx(float a, float b, bool nan) {
    if (std::isnan(a) || std::isnan(b)) return nan ? std::numeric_limits<float>::quiet_NaN() : (std::isnan(a) ? b : a);
    if (a == 0 && b == 0) return std::signbit(a) ? a : b;
    return a < b ? a : b;
}
static float fmax_ptx(float a, float b, bool nan) {
    if (std::isnan(a) || std::isnan(b)) return nan ? std::numeric_limits<float>::quiet_NaN() : (std::isnan(a) ? b : a);
    if (a == 0 && b == 0) return std::signbit(a) ? b : a;
    return a > b ? a : b;
}

/// One float operation on f32 values (the op of `in`), with .ftz and rounding.
static float float_op(int op, uint32_t mod, float a, float b, float c) {
    const bool z = mod & M_FTZ;
    if (z) { a = ftz(a); b = ftz(b); c = ftz(c); }
    const int rnd = rnd_of(mod);
    float r;
    switch (op) {
        case OP_ADD: r = round_f32(rnd, [&] { return a + b; }); break;
        case OP_SUB: r = round_f32(rnd, [&] { return a - b; }); break;
        case OP_MUL: r = round_f32(rnd, [&] { return a * b; }); break;
        case OP_MAD: case OP_FMA: r = round_f32(rnd, [&] { return std::fma(a, b, c); }); break;
        case OP_DIV: r = round_f32(rnd, [&] { return a / b; }); break;
        case OP_ABS: r = std::fabs(a); break;
        case OP_NEG: r = -a; break;
        case OP_MIN: r = fmin_ptx(a, b, mod & M_NAN); break;
        case OP_MAX: r = fmax_ptx(a, b, mod & M_NAN); break;
        case OP_RCP: r = 1.0f / a; break;
        case OP_SQRT: r = std::sqrt(a); break;
        case OP_RSQRT: r = 1.0f / std::sqrt(a); break;
        case OP_SIN: r = std::sin(a); break;
        case OP_COS: r = std::cos(a); break;
        case OP_LG2: r = std::log2(a); break;
        case OP_EX2: r = std::exp2(a); break;
        case OP_TANH: r = std::tanh(a); break;
        case OP_COPYSIGN: r = std::copysign(b, a); break;
        default: stop("not_emulated", "this float operation is not modelled");
    }
    if (mod & M_RELU) r = std::isnan(r) ? r : (r < 0 ? 0.0f : r);
    if (mod & M_SAT) r = std::isnan(r) ? 0.0f : std::fmin(1.0f, std::fmax(0.0f, r));
    return z ? ftz(r) : r;
}

static double double_op(int op, uint32_t mod, double a, double b, double c) {
    const int rnd = rnd_of(mod);
    switch (op) {
        case OP_ADD: return round_f64(rnd, [&] { return a + b; });
        case OP_SUB: return round_f64(rnd, [&] { return a - b; });
        case OP_MUL: return round_f64(rnd, [&] { return a * b; });
        case OP_MAD: case OP_FMA: return round_f64(rnd, [&] { return std::fma(a, b, c); });
        case OP_DIV: return round_f64(rnd, [&] { return a / b; });
        case OP_ABS: return std::fabs(a);
        case OP_NEG: return -a;
        case OP_MIN: return (std::isnan(a) || std::isnan(b)) ? ((mod & M_NAN) ? NAN : (std::isnan(a) ? b : a))
                                                              : (a < b ? a : b);
        case OP_MAX: return (std::isnan(a) || std::isnan(b)) ? ((mod & M_NAN) ? NAN : (std::isnan(a) ? b : a))
                                                              : (a > b ? a : b);
        case OP_RCP: return 1.0 / a;
        case OP_SQRT: return std::sqrt(a);
        case OP_RSQRT: return 1.0 / std::sqrt(a);
        case OP_COPYSIGN: return std::copysign(b, a);
        default: stop("not_emulated", "this f64 operation is not modelled");
    }
}

void Thread_::arith(const Instr& in) {
    const int t = in.t;
    const int nb = TBYTES[t];
    const Operand& d = opnd(in, 0);
    const uint64_t a = in.n > 1 ? value(opnd(in, 1)) : 0;
    const uint64_t b = in.n > 2 ? value(opnd(in, 2)) : 0;
    const uint64_t c = in.n > 3 ? value(opnd(in, 3)) : 0;
    const int op = in.op;
    if (op == OP_SELP) {  // selp.type d, a, b, c: any type, no arithmetic
        write(d, (c & 1) ? a : b, nb ? nb : 8);
        return;
    }
    if (t == T_PRED) {  // and/or/xor/not on predicates
        bool r;
        switch (op) {
            case OP_AND: r = (a & 1) && (b & 1); break;
            case OP_OR: r = (a & 1) || (b & 1); break;
            case OP_XOR: r = (a & 1) != (b & 1); break;
            case OP_NOT: r = !(a & 1); break;
            default: stop("not_emulated", "this predicate operation is not modelled");
        }
        write_pred(d, r);
        return;
    }
    if (t == T_F32 || (t == T_TF32)) {
        if (op == OP_FMA || op == OP_MAD) W.stats[ST_SCALAR_FLOPS] += 2;
        else if (op == OP_ADD || op == OP_SUB || op == OP_MUL) W.stats[ST_SCALAR_FLOPS] += 1;
        write(d, bits(float_op(op, in.mod, f32(a), f32(b), f32(c))), 4);
        return;
    }
    if (t == T_F64) {
        write(d, bits(double_op(op, in.mod, f64(a), f64(b), f64(c))), 8);
        return;
    }
    if (t == T_F16 || t == T_BF16 || t == T_F16X2 || t == T_BF16X2) {
        const int lanes = (t == T_F16X2 || t == T_BF16X2) ? 2 : 1;
        uint64_t r = 0;
        for (int l = 0; l < lanes; ++l) {
            const float x = h2f(t, uint16_t(a >> (16 * l))), y = h2f(t, uint16_t(b >> (16 * l))),
                        z = h2f(t, uint16_t(c >> (16 * l)));
            uint32_t m = in.mod & ~uint32_t(M_FTZ);  // halves have no subnormal flush here worth modelling
            float v;
            if (op == OP_FMA || op == OP_MAD) v = std::fma(x, y, z);  // one rounding, to the half type
            else if (op == OP_ABS) v = std::fabs(x);
            else if (op == OP_NEG) v = -x;
            else v = float_op(op, m & ~(7u << RND_SHIFT), x, y, z);
            if (in.mod & M_RELU) v = std::isnan(v) ? v : (v < 0 ? 0.0f : v);
            if (in.mod & M_SAT) v = std::isnan(v) ? 0.0f : std::fmin(1.0f, std::fmax(0.0f, v));
            r |= uint64_t(op == OP_NEG ? uint16_t(uint16_t(a >> (16 * l)) ^ 0x8000)
                          : op == OP_ABS ? uint16_t(uint16_t(a >> (16 * l)) & 0x7fff) : f2h(t, v)) << (16 * l);
        }
        write(d, r, 2 * lanes);
        return;
    }
    // integers
    const bool sg = is_signed(t);
    const int hl = int((in.mod >> HL_SHIFT) & 3);
    const uint64_t M = mask_of(nb);
    auto S = [&](uint64_t v) { return sext(v, nb); };
    auto U = [&](uint64_t v) { return v & M; };
    uint64_t r = 0;
    int out_bytes = nb;
    switch (op) {
        case OP_ADD:
            if (in.mod & M_SAT) {
                const int64_t s = S(a) + S(b);
                r = uint64_t(s > INT32_MAX ? INT32_MAX : s < INT32_MIN ? INT32_MIN : s);
            } else r = a + b;
            break;
        case OP_SUB:
            if (in.mod & M_SAT) {
                const int64_t s = S(a) - S(b);
                r = uint64_t(s > INT32_MAX ? INT32_MAX : s < INT32_MIN ? INT32_MIN : s);
            } else r = a - b;
            break;
        case OP_MUL: case OP_MAD: {
            uint64_t p;
            if (hl == 2) {  // .wide: the full product, twice as wide
                p = sg ? uint64_t(S(a) * S(b)) : U(a) * U(b);
                out_bytes = 2 * nb;
            } else if (hl == 1) {
                if (nb == 8) p = sg ? uint64_t((__int128(int64_t(a)) * int64_t(b)) >> 64)
                                    : uint64_t((unsigned __int128)(a) * b >> 64);
                else p = sg ? uint64_t((S(a) * S(b)) >> (8 * nb)) : (U(a) * U(b)) >> (8 * nb);
            } else p = a * b;
            r = op == OP_MAD ? p + c : p;
            if (op == OP_MAD && (in.mod & M_SAT) && hl == 1) {
                const int64_t s = S(p) + S(c);
                r = uint64_t(s > INT32_MAX ? INT32_MAX : s < INT32_MIN ? INT32_MIN : s);
            }
            break;
        }
        case OP_MUL24: case OP_MAD24: {
            const int64_t x = sg ? sext(a & 0xffffff, 3) : int64_t(a & 0xffffff);
            const int64_t y = sg ? sext(b & 0xffffff, 3) : int64_t(b & 0xffffff);
            const uint64_t p = uint64_t(x * y);
            r = (hl == 1 ? (p >> 16) : p) + (op == OP_MAD24 ? c : 0);
            break;
        }
        case OP_SAD: r = (sg ? uint64_t(S(a) > S(b) ? S(a) - S(b) : S(b) - S(a)) : (U(a) > U(b) ? U(a) - U(b) : U(b) - U(a))) + c;
            break;
        case OP_DIV:
            if (U(b) == 0) r = M;  // the GPU's answer to a division by zero: all ones
            else r = sg ? uint64_t(S(a) / S(b)) : U(a) / U(b);
            break;
        case OP_REM:
            if (U(b) == 0) r = a;
            else r = sg ? uint64_t(S(a) % S(b)) : U(a) % U(b);
            break;
        case OP_ABS: r = uint64_t(S(a) < 0 ? -S(a) : S(a)); break;
        case OP_NEG: r = uint64_t(-S(a)); break;
        case OP_MIN: r = sg ? uint64_t(S(a) < S(b) ? S(a) : S(b)) : (U(a) < U(b) ? U(a) : U(b));
            if ((in.mod & M_RELU) && sg && S(r) < 0) r = 0;
            break;
        case OP_MAX: r = sg ? uint64_t(S(a) > S(b) ? S(a) : S(b)) : (U(a) > U(b) ? U(a) : U(b));
            if ((in.mod & M_RELU) && sg && S(r) < 0) r = 0;
            break;
        case OP_AND: r = a & b; break;
        case OP_OR: r = a | b; break;
        case OP_XOR: r = a ^ b; break;
        case OP_NOT: r = ~a; break;
        case OP_CNOT: r = U(a) == 0 ? 1 : 0; break;
        case OP_SHL: { const uint32_t s = uint32_t(b); r = s >= uint32_t(8 * nb) ? 0 : a << s; break; }
        case OP_SHR: {
            const uint32_t s = uint32_t(b);
            if (sg) r = uint64_t(s >= uint32_t(8 * nb) ? (S(a) < 0 ? -1 : 0) : S(a) >> s);
            else r = s >= uint32_t(8 * nb) ? 0 : U(a) >> s;
            break;
        }
        case OP_BFE: {
            const uint32_t pos = uint32_t(b) & 0xff, len = uint32_t(c) & 0xff, w = 8 * nb;
            if (len == 0) { r = 0; break; }
            uint64_t x = U(a);
            const uint32_t msb = std::min(pos + len - 1, w - 1);
            const bool sbit = sg ? ((pos >= w) ? (x >> (w - 1)) & 1 : (x >> msb) & 1) : false;
            uint64_t v = pos >= w ? 0 : (x >> pos);
            if (len < 64) v &= (uint64_t(1) << len) - 1;
            if (sg && sbit && len < w) v |= ~((uint64_t(1) << len) - 1);
            if (sg && pos >= w) v = sbit ? ~uint64_t(0) : 0;
            r = v;
            break;
        }
        case OP_BFI: {  // bfi d, f, b, pos, len: insert f's low len bits into b at pos
            const uint64_t e = value(opnd(in, 4));
            const uint32_t pos = uint32_t(c) & 0xff, len = uint32_t(e) & 0xff, w = 8 * nb;
            r = b;
            for (uint32_t i = 0; i < len && pos + i < w; ++i) {
                const uint64_t bit = (a >> i) & 1;
                r = (r & ~(uint64_t(1) << (pos + i))) | (bit << (pos + i));
            }
            break;
        }
        case OP_BREV: {
            r = 0;
            for (int i = 0; i < 8 * nb; ++i) r |= ((a >> i) & 1) << (8 * nb - 1 - i);
            break;
        }
        case OP_POPC: r = uint64_t(__builtin_popcountll(U(a))); out_bytes = 4; break;
        case OP_CLZ: r = U(a) ? uint64_t(__builtin_clzll(U(a)) - (64 - 8 * nb)) : uint64_t(8 * nb); out_bytes = 4; break;
        case OP_BFIND: {
            int64_t pos = -1;
            uint64_t x = U(a);
            if (sg && S(a) < 0) x = ~x & M;
            for (int i = 8 * nb - 1; i >= 0; --i)
                if ((x >> i) & 1) { pos = i; break; }
            if (pos >= 0 && (in.mod & M_FLAG)) pos = 8 * nb - 1 - pos;
            r = pos < 0 ? 0xffffffffu : uint64_t(pos);
            out_bytes = 4;
            break;
        }
        case OP_LOP3: {
            const uint32_t lut = uint32_t(value(opnd(in, 4)));
            r = 0;
            for (int i = 0; i < 32; ++i) {
                const int idx = int(((a >> i) & 1) << 2 | ((b >> i) & 1) << 1 | ((c >> i) & 1));
                r |= uint64_t((lut >> idx) & 1) << i;
            }
            break;
        }
        case OP_SHF: {
            const uint64_t lo = uint32_t(a), hi = uint32_t(b);
            uint32_t s = uint32_t(c);
            s = (in.mod & M_FLAG2) ? (s > 32 ? 32 : s) : (s & 31);
            const uint64_t v = (hi << 32) | lo;
            r = (in.mod & M_FLAG) ? uint32_t(v >> s) : uint32_t((v << s) >> 32);
            break;
        }
        case OP_SELP: r = (c & 1) ? a : b; break;
        default: stop("not_emulated", std::string("integer ") + OPNAMES[op] + " is not modelled");
    }
    write(d, r, out_bytes);
}

// ---- conversions ----------------------------------------------------------------------------------------------------
static uint64_t float_to_int(double x, int dt, int rnd) {
    const int nb = TBYTES[dt];
    const bool sg = is_signed(dt);
    if (std::isnan(x)) return 0;
    double r;
    switch (rnd) {
        case R_RN: r = std::nearbyint(x); break;
        case R_RM: r = std::floor(x); break;
        case R_RP: r = std::ceil(x); break;
        default: r = std::trunc(x); break;
    }
    if (sg) {
        const double lo = -std::ldexp(1.0, 8 * nb - 1), hi = std::ldexp(1.0, 8 * nb - 1) - 1;
        if (r <= lo) return uint64_t(int64_t(lo)) & mask_of(nb);
        if (r >= hi) return (nb == 8 ? uint64_t(INT64_MAX) : uint64_t(int64_t(hi))) & mask_of(nb);
        return uint64_t(int64_t(r)) & mask_of(nb);
    }
    if (r <= 0) return 0;
    const double hi = std::ldexp(1.0, 8 * nb) - 1;
    if (r >= hi) return mask_of(nb);
    return uint64_t(r) & mask_of(nb);
}

static double as_double(int st, uint64_t v) {
    switch (st) {
        case T_F32: case T_TF32: return f32(v);
        case T_F64: return f64(v);
        case T_F16: case T_BF16: return h2f(st, uint16_t(v));
        default: return is_signed(st) ? double(sext(v, TBYTES[st])) : double(v & mask_of(TBYTES[st]));
    }
}

void Thread_::convert(const Instr& in) {
    const int dt = in.t, st = in.t2;
    const int rnd = rnd_of(in.mod);
    const Operand& d = opnd(in, 0);
    if (in.n == 3 && (dt == T_BF16X2 || dt == T_F16X2)) {  // cvt.rn.bf16x2.f32 d, a, b: d.hi = a, d.lo = b
        float hi = f32(value(opnd(in, 1))), lo = f32(value(opnd(in, 2)));
        if (in.mod & M_RELU) { hi = hi < 0 ? 0 : hi; lo = lo < 0 ? 0 : lo; }
        const uint64_t r = uint64_t(f2h(dt, lo, rnd)) | (uint64_t(f2h(dt, hi, rnd)) << 16);
        write(d, r, 4);
        return;
    }
    const uint64_t a = value(opnd(in, 1));
    const bool dfloat = is_float(dt), sfloat = is_float(st);
    uint64_t r;
    if (!dfloat && !sfloat) {  // integer to integer: extend from the source, truncate to the destination
        const int64_t sv = is_signed(st) ? sext(a, TBYTES[st]) : int64_t(a & mask_of(TBYTES[st]));
        if (in.mod & M_SAT) {
            const int nb = TBYTES[dt];
            if (is_signed(dt)) {
                const int64_t lo = nb == 8 ? INT64_MIN : -(int64_t(1) << (8 * nb - 1));
                const int64_t hi = nb == 8 ? INT64_MAX : (int64_t(1) << (8 * nb - 1)) - 1;
                const bool neg = is_signed(st) && sv < 0;
                r = uint64_t(neg ? (sv < lo ? lo : sv) : (uint64_t(sv) > uint64_t(hi) ? hi : sv));
            } else {
                r = (is_signed(st) && sv < 0) ? 0 : (uint64_t(sv) > mask_of(nb) ? mask_of(nb) : uint64_t(sv));
            }
        } else r = uint64_t(sv);
        write(d, r, TBYTES[dt]);
        return;
    }
    if (!dfloat) {  // float to integer: rounds (.rni/...), saturates, NaN -> 0
        double x = as_double(st, a);
        if ((in.mod & M_FTZ) && st == T_F32) x = ftz(float(x));
        write(d, float_to_int(x, dt, rnd ? rnd : R_RZ), TBYTES[dt]);
        return;
    }
    // to a float type
    if (dt == T_F64) {
        r = bits(sfloat ? as_double(st, a) : round_f64(rnd, [&] { return as_double(st, a); }));
        write(d, r, 8);
        return;
    }
    if (dt == T_F32) {
        float f;
        if (st == T_F64) {
            const double x = f64(a);
            f = round_f32(rnd ? rnd : R_RN, [&] { return float(x); });
        } else if (sfloat) {
            f = float(as_double(st, a));
        } else {
            const double x = as_double(st, a);
            f = round_f32(rnd ? rnd : R_RN, [&] { return float(x); });
            if (TBYTES[st] == 8) {  // a 64-bit integer is not exact in double: round from the integer itself
                f = is_signed(st) ? round_f32(rnd ? rnd : R_RN, [&] { return float(int64_t(a)); })
                                  : round_f32(rnd ? rnd : R_RN, [&] { return float(a); });
            }
        }
        if (in.mod & M_FTZ) f = ftz(f);
        if ((in.mod & M_RINT) && sfloat) {  // cvt.rni.f32.f32: round to an integral value
            switch (rnd) {
                case R_RN: f = std::nearbyint(f); break;
                case R_RM: f = std::floor(f); break;
                case R_RP: f = std::ceil(f); break;
                default: f = std::trunc(f); break;
            }
        }
        if (in.mod & M_SAT) f = std::isnan(f) ? 0.0f : std::fmin(1.0f, std::fmax(0.0f, f));
        write(d, bits(f), 4);
        return;
    }
    if (dt == T_TF32) {  // cvt.rna.tf32.f32: keep 10 mantissa bits, round half away from zero
        uint32_t u = uint32_t(a);
        if (!std::isnan(f32(a))) u = (u + 0x1000u) & 0xffffe000u;
        write(d, u, 4);
        return;
    }
    if (dt == T_F16 || dt == T_BF16) {
        float f = float(as_double(st, a));
        if (in.mod & M_RELU) f = std::isnan(f) ? f : (f < 0 ? 0.0f : f);
        if (in.mod & M_SAT) f = std::isnan(f) ? 0.0f : std::fmin(1.0f, std::fmax(0.0f, f));
        write(d, f2h(dt, f, rnd), 2);
        return;
    }
    stop("not_emulated", "this conversion is not modelled");
}

// ---- comparisons -----------------------------------------------------------------------------------------------------
static bool compare(int cmp, int t, uint64_t a, uint64_t b, bool ftz_) {
    if (is_float(t)) {
        double x, y;
        if (t == T_F64) { x = f64(a); y = f64(b); }
        else if (t == T_F16 || t == T_BF16) { x = h2f(t, uint16_t(a)); y = h2f(t, uint16_t(b)); }
        else { float p = f32(a), q = f32(b); if (ftz_) { p = ftz(p); q = ftz(q); } x = p; y = q; }
        const bool un = std::isnan(x) || std::isnan(y);
        switch (cmp) {
            case C_EQ: return !un && x == y;
            case C_NE: return !un && x != y;
            case C_LT: return !un && x < y;
            case C_LE: return !un && x <= y;
            case C_GT: return !un && x > y;
            case C_GE: return !un && x >= y;
            case C_EQU: return un || x == y;
            case C_NEU: return un || x != y;
            case C_LTU: return un || x < y;
            case C_LEU: return un || x <= y;
            case C_GTU: return un || x > y;
            case C_GEU: return un || x >= y;
            case C_NUM: return !un;
            case C_NAN: return un;
            default: return false;
        }
    }
    const int nb = TBYTES[t];
    const bool sg = is_signed(t) && cmp != C_LO && cmp != C_LS && cmp != C_HI && cmp != C_HS;
    if (sg) {
        const int64_t x = sext(a, nb), y = sext(b, nb);
        switch (cmp) {
            case C_EQ: return x == y;
            case C_NE: return x != y;
            case C_LT: return x < y;
            case C_LE: return x <= y;
            case C_GT: return x > y;
            case C_GE: return x >= y;
            default: return false;
        }
    }
    const uint64_t x = a & mask_of(nb), y = b & mask_of(nb);
    switch (cmp) {
        case C_EQ: return x == y;
        case C_NE: return x != y;
        case C_LT: case C_LO: return x < y;
        case C_LE: case C_LS: return x <= y;
        case C_GT: case C_HI: return x > y;
        case C_GE: case C_HS: return x >= y;
        default: return false;
    }
}

void Thread_::setp(const Instr& in) {
    const int cmp = int(in.mod & CMP_MASK), bop = int((in.mod >> BOOL_SHIFT) & 3);
    const uint64_t a = value(opnd(in, 1)), b = value(opnd(in, 2));
    bool r = compare(cmp, in.t, a, b, in.mod & M_FTZ);
    const Operand& d = opnd(in, 0);
    bool q = !r;
    if (bop) {
        const bool c = value(opnd(in, 3)) & 1;
        auto comb = [&](bool x) { return bop == 1 ? (x && c) : bop == 2 ? (x || c) : (x != c); };
        r = comb(r);
        q = comb(q);
    }
    if (in.op == OP_SET) {
        const uint64_t one = in.t == T_F32 ? bits(1.0f) : mask_of(TBYTES[in.t]);
        write(d, r ? one : 0, TBYTES[in.t]);
        return;
    }
    if ((d.kind & 0x7f) == K_VEC) {  // p|q
        write_pred(P.ops[d.reg], r);
        write_pred(P.ops[d.reg + 1], q);
    } else {
        write_pred(d, r);
    }
}

// ---- moves -------------------------------------------------------------------------------------------------------------
void Thread_::mov(const Instr& in) {
    const Operand& d = opnd(in, 0);
    const Operand& s = opnd(in, 1);
    const int nb = TBYTES[in.t];
    if ((d.kind & 0x7f) == K_VEC) {  // mov.b64 {a, b}, x: unpack, low part first
        const uint64_t v = value(s);
        const int part = nb / d.n;
        for (int k = 0; k < d.n; ++k) write(P.ops[d.reg + k], (v >> (8 * part * k)) & mask_of(part), part);
        return;
    }
    if ((s.kind & 0x7f) == K_VEC) {  // mov.b32 x, {a, b}: pack
        const int part = nb / s.n;
        uint64_t v = 0;
        for (int k = 0; k < s.n; ++k) v |= (value(P.ops[s.reg + k]) & mask_of(part)) << (8 * part * k);
        write(d, v, nb);
        return;
    }
    if (in.t == T_PRED) { write_pred(d, value(s) & 1); return; }
    write(d, value(s), nb);
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
            uint64_t adesc = 0;
            if (a_regs) sources(av, ar, 4);
            else adesc = value(av);
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
            ptx::wgmma(n, ptx_type(in.t), ptx_type(in.t2), ptx_type(int(in.y)), d, dptr, a_regs ? ar : nullptr, adesc,
                       bdesc, scale_d, sa, sb, ta, tb);
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
            const uint8_t* map = generic(address(opnd(in, 1)), 128, false, "the tensor map of a TMA load", false,
                                         nullptr);
            int32_t coords[5] = {};
            const Operand& cv = opnd(in, 2);
            for (int k = 0; k < in.x && k < cv.n; ++k) coords[k] = int32_t(value(P.ops[cv.reg + k]));
            const uint32_t bar = shared_of(S_SHARED, address(opnd(in, 3)), "cp.async.bulk.tensor's mbarrier");
            W.stats[ST_TMA_LOAD]++;
            ptx::tma_load(in.x, dst, uint64_t(uintptr_t(map)), coords, bar);
            return;
        }
        case OP_TMA_STORE: {  // map, {coords}, src
            const uint8_t* map = generic(address(opnd(in, 0)), 128, false, "the tensor map of a TMA store", false,
                                         nullptr);
            int32_t coords[5] = {};
            const Operand& cv = opnd(in, 1);
            for (int k = 0; k < in.x && k < cv.n; ++k) coords[k] = int32_t(value(P.ops[cv.reg + k]));
            const uint32_t src = shared_of(S_SHARED, address(opnd(in, 2)), "cp.async.bulk.tensor (store)");
            W.stats[ST_TMA_STORE]++;
            ptx::tma_store(in.x, uint64_t(uintptr_t(map)), coords, src, (in.mod & M_FLAG) ? 1 : 0);
            return;
        }
        case OP_BULK_COMMIT: ptx::bulk_commit(); return;
        case OP_BULK_WAIT: ptx::bulk_wait(int(value(opnd(in, 0))), in.mod & M_FLAG); return;
        default: stop("not_emulated", "this asynchronous instruction is not modelled");
    }
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
    g_ctx = &c;
    g_interp = true;
    void* args[1] = {&c};
    const int failed = tkemu_launch(&fiber_entry, args, gx, gy, gz, bx, by, bz, dyn_smem, arch, workers, flags,
                                    time_limit);
    g_interp = false;
    g_ctx = nullptr;
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

