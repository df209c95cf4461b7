"""Where things are: the repository, and the folder tklab keeps its caches in.

Why a module of its own at the bottom: the compiler, the grader, the profiler and the benches all need these two
places, and none of them should import another just to learn them.
"""

from __future__ import annotations

import os
from pathlib import Path

#: The repository this package is checked out in (tklab/ sits at its top).
REPO = Path(__file__).resolve().parent.parent


def solution(name: str) -> Path:
    """A course kernel's file in ``solutions/`` by its name: at the top (``gemm_wgmma.cu``, ``variants/...``), or an
    exercise's solution in the exercise's folder (``ch08_wgmma.cu`` is ``solutions/ch08_wgmma/ch08_wgmma.cu``)."""
    top = REPO / "solutions" / name
    return top if top.is_file() else REPO / "solutions" / name.split(".", 1)[0] / name


def cache_dir() -> Path:
    """``$TKLAB_CACHE_DIR`` if set and not empty, else ``~/.cache/tklab``."""
    configured = os.environ.get("TKLAB_CACHE_DIR", "").strip()
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "tklab"
