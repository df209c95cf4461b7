"""Make numba-cuda importable with numpy 2.5, which removed ``np.row_stack``.

numba-cuda 0.30.4 (the newest release as of 2026-11) still refers to ``np.row_stack`` while it
registers its numpy typing; with numpy >= 2.5 that fails and ``numba.cuda.jit`` cannot compile
anything. ``row_stack`` was an exact alias of ``vstack`` (deprecated in numpy 2.0), so restoring the
alias is behaviour-preserving. ``patch()`` only adds the name when it is missing; it never replaces
anything numpy still has. Call it before importing ``numba.cuda`` (``tklab.numba_compat.cuda()``
does both).
"""

from __future__ import annotations

from typing import Any

import numpy as np


def patch() -> bool:
    """Restore ``np.row_stack`` if this numpy lacks it; returns True when the alias was added."""
    if hasattr(np, "row_stack"):
        return False
    np.row_stack = np.vstack  # type: ignore[attr-defined]
    return True


def cuda() -> Any:
    """``numba.cuda``, imported after ``patch()``."""
    patch()
    from numba import cuda as numba_cuda

    return numba_cuda
