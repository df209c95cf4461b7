"""The course's reference kernels from Python: how each is built (its -D options and the launch geometry that
follows from them), launched on a GPU, checked against a NumPy reference and timed against the library.

    attention            chapters 09-10: attention in NumPy, the block map and traffic model, the FlashAttention
                         forward builds and launches, SDPA baselines
    attention_bwd        chapter 11: the backward's reference, builds and launches
    attention_autograd   chapter 11: a torch.autograd.Function over the two
    gemm                 chapter 08: the GEMM progression's steps, launches, checks and timing against cuBLAS
    tma_copy             chapter 07: a matrix copied three ways, and the TMA ring

Below the grader and the course: a spec reads an exercise's geometry here, a widget draws it, a chapter times it.
"""
