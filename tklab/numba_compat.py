"""Make numba-cuda importable with numpy 2.5, which removed ``np.row_stack``.

numba-cuda 0.30.4 (the newest release as of 2026-11) still refers to ``np.row_stack`` while it
registers its numpy typing; with numpy >= 2.5 that fails and ``numba.cuda.jit`` cannot compile
anything. ``row_stack`` was an exact alias of ``vstack`` (deprecated in numpy 2.0), so restoring the
alias is behaviour-preserving. ``patch()`` only adds the name when it is missing; it never replaces
anything numpy still has. Call it before importing ``numba.cuda`` (``tklab.numba_compat.cuda()``
does both).

``cuda()`` also picks numba's CUDA simulator when there is no GPU (``NUMBA_ENABLE_CUDASIM=1``), so
chapter 01's kernels run on a laptop; it must run before anything imports ``numba.cuda``.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import numpy as np

from . import gpu


def patch() -> bool:
    """Restore ``np.row_stack`` if this numpy lacks it; returns True when the alias was added."""
    if hasattr(np, "row_stack"):
        return False
    np.row_stack = np.vstack  # type: ignore[attr-defined]
    return True


def cuda(simulate: bool | None = None) -> Any:
    """``numba.cuda``, imported after ``patch()``; the simulator when there is no GPU (or ``simulate=True``)."""
    patch()
    if simulate is None:
        simulate = not gpu.available()
    wanted = "1" if simulate else "0"
    if "numba.cuda" in sys.modules:
        if os.environ.get("NUMBA_ENABLE_CUDASIM", "0") != wanted:
            raise RuntimeError("numba.cuda was already imported in the other mode; restart the kernel "
                               "and call tklab.numba_compat.cuda() before importing numba.cuda")
    else:
        os.environ["NUMBA_ENABLE_CUDASIM"] = wanted
    from numba import cuda as numba_cuda

    return numba_cuda
