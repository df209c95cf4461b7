// The few type traits the tile library needs, written out.
//
// Why not <cuda/std/type_traits>? Under NVRTC that one header costs ~5 s of parsing on every cold compile
// (measured on this project's 2-core CI box), longer than everything else in tk.cuh together. These five
// traits are all we use, and each is one line of template matching.
#pragma once

namespace tk {

template <typename A, typename B> inline constexpr bool is_same_v = false;
template <typename A> inline constexpr bool is_same_v<A, A> = true;

template <typename T> inline constexpr bool is_const_v = false;
template <typename T> inline constexpr bool is_const_v<const T> = true;

template <bool C, typename A, typename B> struct conditional { using type = A; };
template <typename A, typename B> struct conditional<false, A, B> { using type = B; };
template <bool C, typename A, typename B> using conditional_t = typename conditional<C, A, B>::type;

template <typename T> struct remove_cv { using type = T; };
template <typename T> struct remove_cv<const T> { using type = T; };
template <typename T> struct remove_cv<volatile T> { using type = T; };
template <typename T> struct remove_cv<const volatile T> { using type = T; };
template <typename T> using remove_cv_t = typename remove_cv<T>::type;

template <typename T> struct remove_ref { using type = T; };
template <typename T> struct remove_ref<T&> { using type = T; };
template <typename T> struct remove_ref<T&&> { using type = T; };
template <typename T> using remove_cvref_t = remove_cv_t<typename remove_ref<T>::type>;

}  // namespace tk
