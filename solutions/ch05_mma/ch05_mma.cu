// Chapter 5: tensor cores by hand. One warp computes C = A @ B for a single 16×16×16 tile:
// A (16×16, row-major) and B (16×16 = K×N, row-major) hold bf16, C (16×16, row-major) is fp32.
//
// `mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32` multiplies a 16×16 A by a 16×8 B and adds
// a 16×8 fp32 accumulator, all 32 lanes together. No lane holds a row or a column: each holds a
// *fragment*, a fixed scattering of elements given in the PTX ISA ("Matrix Fragments for
// mma.m16n8k16"). With g = lane / 4 and t = lane % 4:
//
//   A (4 registers, 2 bf16 each):   a[0] = A[g][2t, 2t+1]     a[1] = A[g+8][2t, 2t+1]
//                                   a[2] = A[g][2t+8, 2t+9]   a[3] = A[g+8][2t+8, 2t+9]
//   B (2 registers, 2 bf16 each):   b[0] = B[2t, 2t+1][n]     b[1] = B[2t+8, 2t+9][n]      with n = g
//   C (4 floats):                   c[0], c[1] = C[g][2t, 2t+1]    c[2], c[3] = C[g+8][2t, 2t+1]
//
// Two bf16 share a 32-bit register; the one with the lower index sits in the low 16 bits. A 16-wide
// C takes two mma's: one for columns 0..7 of B and C, one for columns 8..15 (same A fragment).
// bf16 values are passed as their 16-bit patterns (unsigned short), so no header is needed.
//
// Launch: grid = 1, block = 32 (one warp).

extern "C" __global__ void mma_16x16x16(const unsigned short* __restrict__ A,
                                        const unsigned short* __restrict__ B, float* __restrict__ C) {
    const int lane = threadIdx.x;
    const int g = lane / 4, t = lane % 4;  // "groupID" and "threadID_in_group" in the PTX tables
    unsigned a[4];                          // A fragment: 8 bf16
    unsigned b[2][2];                       // B fragments of the two 8-column halves
    float c[2][4] = {};                     // accumulators of the two halves

    // BEGIN SOLUTION hint: this lane's four registers of the A fragment (two neighbouring bf16 each), read from A where the m16n8k16 A layout puts them
    a[0] = *reinterpret_cast<const unsigned*>(&A[g * 16 + 2 * t]);
    a[1] = *reinterpret_cast<const unsigned*>(&A[(g + 8) * 16 + 2 * t]);
    a[2] = *reinterpret_cast<const unsigned*>(&A[g * 16 + 2 * t + 8]);
    a[3] = *reinterpret_cast<const unsigned*>(&A[(g + 8) * 16 + 2 * t + 8]);
    // END SOLUTION

    // BEGIN SOLUTION hint: this lane's B fragment for each 8-column half: pairs of bf16 that are a row apart in B (so not neighbours in memory), packed low half first
    for (int h = 0; h < 2; ++h) {
        const int n = 8 * h + g;
        b[h][0] = unsigned(B[(2 * t) * 16 + n]) | (unsigned(B[(2 * t + 1) * 16 + n]) << 16);
        b[h][1] = unsigned(B[(2 * t + 8) * 16 + n]) | (unsigned(B[(2 * t + 9) * 16 + n]) << 16);
    }
    // END SOLUTION

    // BEGIN SOLUTION hint: one tensor-core multiply-accumulate per 8-column half, into c[h]
    for (int h = 0; h < 2; ++h) {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
            "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
            : "+f"(c[h][0]), "+f"(c[h][1]), "+f"(c[h][2]), "+f"(c[h][3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[h][0]), "r"(b[h][1]));
    }
    // END SOLUTION

    // BEGIN SOLUTION hint: this lane's accumulators, written to C where the m16n8k16 C layout puts them
    for (int h = 0; h < 2; ++h) {
        const int col = 8 * h + 2 * t;
        C[g * 16 + col] = c[h][0];
        C[g * 16 + col + 1] = c[h][1];
        C[(g + 8) * 16 + col] = c[h][2];
        C[(g + 8) * 16 + col + 1] = c[h][3];
    }
    // END SOLUTION
}
