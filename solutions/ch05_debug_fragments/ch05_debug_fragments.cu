// Chapter 5, debugging: one warp, one 16×16 tile on the tensor cores, with ldmatrix.
// C (16×16 fp32, row-major) = A (16×16 bf16, row-major) · B (16×16 bf16, row-major).
//
// Section 4's kernel: the warp copies A and B into shared memory, ldmatrix hands every lane its
// registers of the A fragment and (with .trans) of the B fragment, and two mma.sync m16n8k16 make the
// two 8-column halves of C. The accumulator of each half is a C fragment: lane 4g + t holds four
// floats of it, d[0] and d[1] in row g, d[2] and d[3] in row g + 8, at columns 2t and 2t + 1. Each
// lane stores them as two float2, one per row.
//
// Launch: grid = 1, block = 32 (one warp).
#include <cuda_bf16.h>

__device__ unsigned smem_addr(const void* p) { return unsigned(__cvta_generic_to_shared(p)); }

// Four 8x8 b16 matrices; lane l names row l%8 of matrix l/8. r[m] = row g, cols 2t, 2t+1 of matrix m.
__device__ void ldmatrix_x4(unsigned (&r)[4], unsigned addr) {
    asm("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
        : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr) : "memory");
}
// The same, each matrix transposed on the way: r[m] = column g, rows 2t, 2t+1 of matrix m.
__device__ void ldmatrix_x4_trans(unsigned (&r)[4], unsigned addr) {
    asm("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
        : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr) : "memory");
}
// d (16x8 fp32, C layout) = a (16x16 bf16, A layout) * {b0, b1} (16x8 bf16, B layout) + d.
__device__ void mma_16816(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%10, %11, %12, %13};"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(d[0]), "f"(d[1]), "f"(d[2]), "f"(d[3]));
}

extern "C" __global__ void mma_tile(const __nv_bfloat16* A, const __nv_bfloat16* B, float* C) {
    __shared__ alignas(16) __nv_bfloat16 As[16 * 16], Bs[16 * 16];
    const int lane = threadIdx.x;
    reinterpret_cast<uint4*>(As)[lane] = reinterpret_cast<const uint4*>(A)[lane];  // 8 bf16 per lane
    reinterpret_cast<uint4*>(Bs)[lane] = reinterpret_cast<const uint4*>(B)[lane];
    __syncwarp();

    const int row = lane % 16, col = 8 * (lane / 16);  // the row this lane gives ldmatrix
    unsigned a[4], b[4];
    ldmatrix_x4(a, smem_addr(&As[row * 16 + col]));        // a[0..3] = the A fragment
    ldmatrix_x4_trans(b, smem_addr(&Bs[row * 16 + col]));  // b[0..1]: columns 0..7, b[2..3]: 8..15

    float d[2][4] = {};
    mma_16816(d[0], a, b[0], b[1]);
    mma_16816(d[1], a, b[2], b[3]);

    const int g = lane / 4, t = lane % 4;
    for (int half = 0; half < 2; half++)
        for (int r = 0; r < 2; r++) {  // r = 0: row g, r = 1: row g + 8
            float* out = &C[(g + 8 * r) * 16 + 8 * half + 2 * t];
            // BEGIN BUG hint: C = A B, 16 x 16, from one warp's two mma.sync
            *reinterpret_cast<float2*>(out) = make_float2(d[half][2 * r], d[half][2 * r + 1]);
            // BUG: *reinterpret_cast<float2*>(out) = make_float2(d[half][r], d[half][r + 2]);
            // END BUG
        }
}
