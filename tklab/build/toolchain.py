"""Find the CUDA pieces tklab needs: NVRTC, the CUDA headers, nvdisasm and cuobjdump.

Why a module of its own: a learner's machine may have a full CUDA toolkit, only the pip wheels
(``nvidia-cuda-nvrtc``, ``nvidia-cuda-runtime``, ``nvidia-cuda-cccl``, ``nvidia-cuda-nvdisasm``,
``nvidia-cuda-cuobjdump``), or a mix. ``cuda.pathfinder`` knows both layouts; we ask it first and fall
back to ``CUDA_HOME``/``PATH``. Everything here is cached for the life of the process.

Public API: ``tile_library_dir()``, ``include_dirs()``, ``binary(name)``, ``nvrtc_version()``,
``fingerprint()``.
"""

from __future__ import annotations

import functools
import os
import shutil
from pathlib import Path

#: The repository tklab lives in: the tile library (cuda/), solutions/, exercises/, bench/, notebooks/.
REPO = Path(__file__).resolve().parents[2]
#: The tile library's headers (``cuda/`` at the repository root); on the include path of every compile.
_REPO_CUDA = REPO / "cuda"


class ToolchainError(RuntimeError):
    """A CUDA component tklab needs is missing; the message says how to get it."""


def tile_library_dir() -> Path:
    """The folder holding ``tk.cuh``; ``TKLAB_CUDA_DIR`` overrides it (an installed copy, say)."""
    return Path(os.environ.get("TKLAB_CUDA_DIR", _REPO_CUDA))


def _cuda_home() -> Path | None:
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            return Path(os.environ[var])
    nvcc = shutil.which("nvcc")
    if nvcc:
        return Path(nvcc).resolve().parent.parent
    default = Path("/usr/local/cuda")
    return default if default.exists() else None


@functools.cache
def include_dirs() -> tuple[str, ...]:
    """Header folders for NVRTC: the CUDA runtime headers (cuda_bf16.h, ...) and CCCL (cuda/std/...).

    NVRTC ships its own builtin copies of a few headers, but ``cuda_bf16.h`` and libcu++ must be
    found on disk.
    """
    found: list[str] = []
    try:
        from cuda import pathfinder

        for lib in ("cudart", "cccl"):
            try:
                d = pathfinder.find_nvidia_header_directory(lib)
            except Exception:  # noqa: BLE001 - pathfinder raises various errors for "not found"
                d = None
            if d and d not in found:
                found.append(str(d))
    except ImportError:
        pass
    home = _cuda_home()
    if home is not None:
        for sub in ("include", "include/cccl", "targets/x86_64-linux/include"):
            d = home / sub
            if d.is_dir() and str(d) not in found:
                found.append(str(d))
    if not any(Path(d, "cuda_bf16.h").exists() for d in found):
        raise ToolchainError(
            "CUDA headers (cuda_bf16.h) not found. Install them with "
            "`pip install nvidia-cuda-runtime nvidia-cuda-cccl` or set CUDA_HOME to a CUDA toolkit."
        )
    return tuple(found)


@functools.cache
def binary(name: str) -> str:
    """Path of a CUDA binary utility (``nvdisasm`` or ``cuobjdump``)."""
    path: str | None = None
    try:
        from cuda import pathfinder

        path = pathfinder.find_nvidia_binary_utility(name)
    except Exception:  # noqa: BLE001 - missing wheel or unsupported name
        path = None
    if not path:
        home = _cuda_home()
        cand = home / "bin" / name if home else None
        path = str(cand) if cand and cand.exists() else shutil.which(name)
    if not path:
        raise ToolchainError(
            f"`{name}` not found. Install it with `pip install nvidia-cuda-{name}` (13.2 or newer for "
            "Hopper SASS) or put a CUDA toolkit's bin/ on PATH."
        )
    return str(path)


@functools.cache
def nvrtc_version() -> tuple[int, int]:
    """NVRTC's (major, minor); raises ToolchainError with an install hint when NVRTC is missing."""
    try:
        from cuda.bindings import nvrtc
    except ImportError as e:  # pragma: no cover - dependency of the package
        raise ToolchainError("cuda-bindings is not installed: `pip install cuda-bindings`.") from e
    try:
        err, major, minor = nvrtc.nvrtcVersion()
    except Exception as e:  # noqa: BLE001 - the shared library failed to load
        raise ToolchainError(
            f"NVRTC could not be loaded ({e}). Install it with `pip install nvidia-cuda-nvrtc`."
        ) from e
    return int(major), int(minor)


@functools.cache
def fingerprint() -> str:
    """Identifies the toolchain for the compile cache: NVRTC version and cuda-bindings version."""
    try:
        from importlib.metadata import version

        bindings = version("cuda-bindings")
    except Exception:  # noqa: BLE001
        bindings = "?"
    major, minor = nvrtc_version()
    return f"nvrtc-{major}.{minor}/cuda-bindings-{bindings}"
