// The PTX interpreter's pieces (interp.cpp says why it exists): the decoded records decode.py writes and
// tkemu_interp_load checks, a launch's shared facts (Ctx), a worker's registers and local memory for the block it
// runs (WorkerState), and one thread's execution (Thread_), whose instructions live by kind in
//   interp_values.cpp  arithmetic, conversions, comparisons, moves
//   interp_memory.cpp  addresses resolved to the kernel's own regions, loads, stores, atomics
//   interp_units.cpp   warp-wide instructions, tensor cores, asynchronous copies and mbarriers
//   interp.cpp         calls, the instruction loop, blocks and launches, the C interface
#pragma once

#include <cfenv>
#include <cmath>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "internal.h"

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
inline const uint8_t TBYTES[] = {
#define TYPE(name, bytes) bytes,
#include "interp_ops.def"

};
inline const char* const OPNAMES[] = {
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
extern int g_turn_lo, g_turn_hi;

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


inline uint64_t mask_of(int bytes) { return bytes >= 8 ? ~uint64_t(0) : ((uint64_t(1) << (8 * bytes)) - 1); }
inline int64_t sext(uint64_t v, int bytes) {
    if (bytes >= 8) return int64_t(v);
    const int s = 64 - 8 * bytes;
    return int64_t(v << s) >> s;
}
inline bool is_signed(int t) { return t == T_S8 || t == T_S16 || t == T_S32 || t == T_S64; }
inline bool is_float(int t) {
    return t == T_F32 || t == T_F64 || t == T_F16 || t == T_BF16 || t == T_F16X2 || t == T_BF16X2 || t == T_TF32;
}
inline float f32(uint64_t v) { return bits_f32(uint32_t(v)); }
inline uint64_t bits(float f) { return f32_bits(f); }
inline double f64(uint64_t v) { double d; std::memcpy(&d, &v, 8); return d; }
inline uint64_t bits(double d) { uint64_t u; std::memcpy(&u, &d, 8); return u; }
inline float ftz(float f) { return std::fpclassify(f) == FP_SUBNORMAL ? std::copysign(0.0f, f) : f; }
inline float h2f(int t, uint16_t h) { return t == T_BF16 || t == T_BF16X2 ? bf16_to_f32(h) : f16_to_f32(h); }
inline uint16_t f2h(int t, float f, int rnd = R_RN) {
    if (t == T_BF16 || t == T_BF16X2) return rnd == R_RZ ? f32_to_bf16_rz(f) : f32_to_bf16(f);
    return f32_to_f16(f);
}

/// A launch failure naming the thread, its block and the instruction it was executing.
[[noreturn]] void stop(const char* kind, const std::string& msg);


inline int rnd_of(uint32_t mod) { return int((mod >> RND_SHIFT) & 7); }
inline int space_of(const Instr& in) { return int((in.mod >> SPACE_SHIFT) & 7); }
/// PTX min/max on f32: a NaN operand gives the other one (with .NaN: NaN); -0 is below +0.
inline float fmin_ptx(float a, float b, bool nan) {
    if (std::isnan(a) || std::isnan(b)) return nan ? std::numeric_limits<float>::quiet_NaN() : (std::isnan(a) ? b : a);
    if (a == 0 && b == 0) return std::signbit(a) ? a : b;
    return a < b ? a : b;
}
inline float fmax_ptx(float a, float b, bool nan) {
    if (std::isnan(a) || std::isnan(b)) return nan ? std::numeric_limits<float>::quiet_NaN() : (std::isnan(a) ? b : a);
    if (a == 0 && b == 0) return std::signbit(a) ? b : a;
    return a > b ? a : b;
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
        if (a - T.acc_lo < T.acc_hi - T.acc_lo || a - T.a_lo < T.a_hi - T.a_lo) accumulator_touch(B, a, 4, write, T.pc);
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

}  // namespace interp
}  // namespace tkemu
