# carol's ch01: the interpreter dies before any kernel runs (a stand-in for a segfaulting extension).
import os

from numba import cuda

os.abort()


@cuda.jit
def matmul(A, B, C):
    C[0, 0] = 0.0  # never reached: the import aborts
