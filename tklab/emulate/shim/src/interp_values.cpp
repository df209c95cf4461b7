// The PTX interpreter's values: integer, float and packed-half arithmetic with PTX's rounding, saturation and
// flush-to-zero; conversions; comparisons; moves, packing and unpacking. (interp.h says how the pieces fit.)
#include "interp.h"

namespace tkemu {
namespace interp {

// ---- arithmetic ---------------------------------------------------------------------------------------------------

/// f() in PTX's rounding mode `rnd`, as a T (float or double): .rz, .rm and .rp switch the host's rounding around
/// it (the volatile result keeps the compiler from moving the operation out of the switch); .rn and none: as is.
template <typename T, typename F>
static T rounded(int rnd, F f) {
    if (rnd == R_RZ || rnd == R_RM || rnd == R_RP) {
        const int old = std::fegetround();
        std::fesetround(rnd == R_RZ ? FE_TOWARDZERO : rnd == R_RM ? FE_DOWNWARD : FE_UPWARD);
        volatile T r = f();
        std::fesetround(old);
        return r;
    }
    return f();
}

/// One float operation on f32 values (the op of `in`), with .ftz and rounding.
static float float_op(int op, uint32_t mod, float a, float b, float c) {
    const bool z = mod & M_FTZ;
    if (z) { a = ftz(a); b = ftz(b); c = ftz(c); }
    const int rnd = rnd_of(mod);
    float r;
    switch (op) {
        case OP_ADD: r = rounded<float>(rnd, [&] { return a + b; }); break;
        case OP_SUB: r = rounded<float>(rnd, [&] { return a - b; }); break;
        case OP_MUL: r = rounded<float>(rnd, [&] { return a * b; }); break;
        case OP_MAD: case OP_FMA: r = rounded<float>(rnd, [&] { return std::fma(a, b, c); }); break;
        case OP_DIV: r = rounded<float>(rnd, [&] { return a / b; }); break;
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
        case OP_ADD: return rounded<double>(rnd, [&] { return a + b; });
        case OP_SUB: return rounded<double>(rnd, [&] { return a - b; });
        case OP_MUL: return rounded<double>(rnd, [&] { return a * b; });
        case OP_MAD: case OP_FMA: return rounded<double>(rnd, [&] { return std::fma(a, b, c); });
        case OP_DIV: return rounded<double>(rnd, [&] { return a / b; });
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
        r = bits(sfloat ? as_double(st, a) : rounded<double>(rnd, [&] { return as_double(st, a); }));
        write(d, r, 8);
        return;
    }
    if (dt == T_F32) {
        float f;
        if (st == T_F64) {
            const double x = f64(a);
            f = rounded<float>(rnd ? rnd : R_RN, [&] { return float(x); });
        } else if (sfloat) {
            f = float(as_double(st, a));
        } else {
            const double x = as_double(st, a);
            f = rounded<float>(rnd ? rnd : R_RN, [&] { return float(x); });
            if (TBYTES[st] == 8) {  // a 64-bit integer is not exact in double: round from the integer itself
                f = is_signed(st) ? rounded<float>(rnd ? rnd : R_RN, [&] { return float(int64_t(a)); })
                                  : rounded<float>(rnd ? rnd : R_RN, [&] { return float(a); });
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

}  // namespace interp
}  // namespace tkemu
