# dave's ch01: the loop bound never changes, so the kernel never finishes.
from numba import cuda


@cuda.jit
def matmul(A, B, C):
    k = 0
    while k < A.shape[1]:
        C[0, 0] = k  # forgot k += 1
