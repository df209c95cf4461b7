"""The course: what the chapters run beside their kernels, and the tools that keep the notebooks honest.

A chapter writes ``from tklab import course`` and finds here everything it calls beside its own kernel:
the same-run comparison and the results table (``results.py``), and the helpers that live with their
subject elsewhere (the occupancy model, the SASS main loop, numba's readiness, figures, bf16 arrays, the
cuBLAS baseline). The modules of this package:

    results        compare(key, kernel, library, ...), verify_matmul, results(): the chapters' table
    hosted         the hosted (Colab) start: the repository's owner in the badge and chapter 00
    where          what this machine runs of each chapter (GPU, CPU with NVRTC, CPU only)
    report         ``make gpu-check``: GPU tests, notebooks, benchmarks -> a dated report
    nbrefresh      ``make notebooks``: re-execute the notebooks, store clean outputs
    doctor         ``python -m tklab doctor``: what works on this machine
"""

from ..models.occupancy import HOPPER, occupancy, pooled_register_blocks, quadrant_figure
from ..run.arrays import bf16_random, bf16_to_float32
from ..run.baselines import cublas_bf16
from ..toolchain.numba_compat import numba_gpu_ready, numba_sass
from ..toolchain.sass import ffma_share, main_loop
from ..widgets.figures import plots
from .results import EXPECTED, Results, Row, compare, comparison, results, verify_matmul

__all__ = ["EXPECTED", "HOPPER", "Results", "Row", "bf16_random", "bf16_to_float32", "compare", "comparison",
           "cublas_bf16", "ffma_share", "main_loop", "numba_gpu_ready", "numba_sass", "occupancy", "plots",
           "pooled_register_blocks", "quadrant_figure", "results", "verify_matmul"]
