# GENERATED from solutions/ch01_naive_matmul/ch01_naive_matmul.py by `python -m tklab exercises`: fill in the TODOs.
"""Chapter 1: your first GPU kernel, a naive matrix multiply in Python with numba.cuda.

C = A @ B for float32 row-major matrices, A of shape (M, K), B of shape (K, N), C of shape (M, N).
One thread computes one element of C. The launch is a 2D grid of 16×16-thread blocks:

    grid  = (ceil(N / 16), ceil(M / 16))     # x runs along the columns of C, y along the rows
    block = (16, 16)

so thread (x, y) of the whole grid owns C[y, x]. The grid is rounded up, so some threads fall
outside C when M or N is not a multiple of 16: they must do nothing. Why x along the columns:
neighbouring threads of a warp differ in x, so they read neighbouring B[k, x] and write neighbouring
C[y, x]; those accesses coalesce into few memory transactions.

Check it with ``tklab.check("ch01")`` (runs in numba's CUDA simulator when there is no GPU).
"""

from numba import cuda, float32  # noqa: F401 - float32 is for the part you write


@cuda.jit
def matmul(A, B, C):
    """C[row, col] = sum over k of A[row, k] * B[k, col], one thread per element of C."""
    # TODO: your code here (about 7 lines).
    # Goal: this thread's element of C: which one it is, nothing outside C, and the dot product of its row
    #       of A with its column of B accumulated in float32
    # Stuck? tklab.hint("ch01_naive_matmul") in a notebook, or python -m tklab hint ch01_naive_matmul.
    pass
