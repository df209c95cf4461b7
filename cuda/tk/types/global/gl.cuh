// Global layouts: a row-major matrix in device memory, seen as a grid of tiles.
//
// gl<T> is just a pointer, the matrix shape and its row stride (in elements). Ops take a coord counted
// in TILES of the register/shared tile they fill, so load(a, A, {i, k}) reads rows [i*R, i*R+R) and
// columns [k*C, k*C+C) of A. Nothing checks bounds: the shapes you launch must be multiples of the tiles.
#pragma once

#include "../../common/common.cuh"

namespace tk {

/// A tile's position in a larger matrix, in units of that tile's own size.
struct coord {
    int r, c;
};

template <typename T>  // T may be const-qualified for inputs
struct gl {
    using dtype = tk::remove_cv_t<T>;
    static_assert(element<dtype>, "gl<T>: T must be bf16, half or float");
    T* ptr;
    int rows, cols, stride;

    __host__ __device__ gl(T* p, int rows_, int cols_, int stride_ = 0)
        : ptr(p), rows(rows_), cols(cols_), stride(stride_ ? stride_ : cols_) {}

    __device__ T& operator()(int r, int c) const { return ptr[size_t(r) * stride + c]; }
    /// First element of tile t of a TR x TC tiling.
    template <int TR, int TC>
    __device__ T* tile_ptr(coord t) const { return ptr + size_t(t.r) * TR * stride + size_t(t.c) * TC; }
};

template <typename X> inline constexpr bool is_gl = false;
template <typename T> inline constexpr bool is_gl<gl<T>> = true;

}  // namespace tk
