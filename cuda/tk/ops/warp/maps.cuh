// Element-wise maps over register tiles and vectors: d = f(a), d = f(a, b), d = f(a, scalar).
//
// Every lane owns the same slots of every operand (same shape, same layout), so element-wise maths
// needs no communication: walk the registers, compute in float, round once into the destination type.
// The destination may have another element type than the sources (that is how conversions work).
#pragma once

#include "../../types/types.cuh"

namespace tk {

/// The maths of one element, in float. Functors so that they compose with map() and the reductions.
namespace op {
struct copy { __device__ float operator()(float a) const { return a; } };
struct neg  { __device__ float operator()(float a) const { return -a; } };
struct abs  { __device__ float operator()(float a) const { return fabsf(a); } };
struct exp  { __device__ float operator()(float a) const { return fast::exp2(a * 1.4426950408889634f); } };
struct exp2 { __device__ float operator()(float a) const { return fast::exp2(a); } };
struct log  { __device__ float operator()(float a) const { return fast::log(a); } };
struct log2 { __device__ float operator()(float a) const { return fast::log2(a); } };
struct rcp  { __device__ float operator()(float a) const { return fast::rcp(a); } };
struct add  { __device__ float operator()(float a, float b) const { return a + b; } };
struct sub  { __device__ float operator()(float a, float b) const { return a - b; } };
struct mul  { __device__ float operator()(float a, float b) const { return a * b; } };
struct div  { __device__ float operator()(float a, float b) const { return a / b; } };
struct max  { __device__ float operator()(float a, float b) const { return fmaxf(a, b); } };
struct min  { __device__ float operator()(float a, float b) const { return fminf(a, b); } };
}  // namespace op

namespace detail {
/// d.reg(i) = f(a.reg(i), ...) for every slot; a slot is one value or a pair.
template <typename D, typename F, typename... A>
__device__ inline void map_slots(D& d, F f, const A&... a) {
    using T = typename D::dtype;
#pragma unroll
    for (int i = 0; i < D::n_regs; i++) {
        if constexpr (tk::is_same_v<typename D::reg_t, T>) {
            d.reg(i) = from_float<T>(f(to_float(a.reg(i))...));
        } else {
            d.reg(i) = from_float2<T>(make_float2(f(to_float2(a.reg(i)).x...), f(to_float2(a.reg(i)).y...)));
        }
    }
}
}  // namespace detail

/// d = f(a), element by element.
template <register_object D, register_object A, typename F>
    requires same_shape<D, A>
__device__ inline void map(D& d, const A& a, F f) { detail::map_slots(d, f, a); }

/// d = f(a, b), element by element.
template <register_object D, register_object A, register_object B, typename F>
    requires same_shape<D, A> && same_shape<D, B>
__device__ inline void map(D& d, const A& a, const B& b, F f) { detail::map_slots(d, f, a, b); }

/// d = f(a, b, c), element by element (e.g. the running softmax sum l = alpha * l + rowsum).
template <register_object D, register_object A, register_object B, register_object C, typename F>
    requires same_shape<D, A> && same_shape<D, B> && same_shape<D, C>
__device__ inline void map(D& d, const A& a, const B& b, const C& c, F f) { detail::map_slots(d, f, a, b, c); }

/// d = f(a, s) with the same scalar s for every element.
template <register_object D, register_object A, typename F>
    requires same_shape<D, A>
__device__ inline void map(D& d, const A& a, float s, F f) {
    using T = typename D::dtype;
#pragma unroll
    for (int i = 0; i < D::n_regs; i++) {
        if constexpr (tk::is_same_v<typename D::reg_t, T>) {
            d.reg(i) = from_float<T>(f(to_float(a.reg(i)), s));
        } else {
            const float2 x = to_float2(a.reg(i));
            d.reg(i) = from_float2<T>(make_float2(f(x.x, s), f(x.y, s)));
        }
    }
}

// ---- named maps: destination first, like the maths ---------------------------------------------------
#define TK_UNARY_MAP(name)                                                                          \
    template <register_object D, register_object A>                                                 \
        requires same_shape<D, A>                                                                   \
    __device__ inline void name(D& d, const A& a) { map(d, a, op::name{}); }
TK_UNARY_MAP(neg)
TK_UNARY_MAP(abs)
TK_UNARY_MAP(exp)   // e^a = 2^(a log2 e), one ex2.approx (tk/common/fast_math.cuh states its accuracy)
TK_UNARY_MAP(exp2)  // 2^a: what softmax kernels use after folding log2(e) into the scale
TK_UNARY_MAP(log)   // ln a, one lg2.approx and a multiply
TK_UNARY_MAP(log2)  // log2 a, one lg2.approx
TK_UNARY_MAP(rcp)   // 1/a, one rcp.approx
#undef TK_UNARY_MAP

#define TK_BINARY_MAP(name)                                                                         \
    template <register_object D, register_object A, register_object B>                              \
        requires same_shape<D, A> && same_shape<D, B>                                              \
    __device__ inline void name(D& d, const A& a, const B& b) { map(d, a, b, op::name{}); }         \
    template <register_object D, register_object A>                                                 \
        requires same_shape<D, A>                                                                   \
    __device__ inline void name(D& d, const A& a, float s) { map(d, a, s, op::name{}); }
TK_BINARY_MAP(add)
TK_BINARY_MAP(sub)
TK_BINARY_MAP(mul)
TK_BINARY_MAP(div)
TK_BINARY_MAP(max)
TK_BINARY_MAP(min)
#undef TK_BINARY_MAP

}  // namespace tk
