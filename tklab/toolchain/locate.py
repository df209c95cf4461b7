"""Find the CUDA pieces tklab needs: NVRTC, the CUDA headers, nvdisasm and cuobjdump.

Why a module of its own: a learner's machine may have a full CUDA toolkit, only the pip wheels
(``nvidia-cuda-nvrtc``, ``nvidia-cuda-runtime``, ``nvidia-cuda-cccl``, ``nvidia-cuda-nvdisasm``,
``nvidia-cuda-cuobjdump``), or a mix. ``cuda.pathfinder`` knows both layouts; we ask it first and fall
back to ``CUDA_HOME``/``PATH``. Everything here is cached for the life of the process.

Without NVRTC (macOS, where ``nvidia-cuda-nvrtc`` has no wheel, or a machine where it is missing) the
rest of the course still works: ``nvrtc_missing()`` says why compiling for the GPU cannot happen here, and
every compile raises ``NvrtcUnavailable`` with that sentence and what still works (the CPU emulator).
``TKLAB_NO_NVRTC=1`` makes this machine behave so (how CI proves the path, and how to preview it).

Public API: ``tile_library_dir()``, ``include_dirs()``, ``binary(name)``, ``nvrtc_version()``,
``nvrtc_missing()``, ``nvrtc_available()``, ``fingerprint()``, ``ToolchainError``, ``NvrtcUnavailable``,
``NO_NVRTC``.
"""

from __future__ import annotations

import functools
import os
import shutil
import sys
from pathlib import Path

from ..paths import REPO

#: The tile library's headers (``cuda/`` at the repository root); on the include path of every compile.
_REPO_CUDA = REPO / "cuda"


#: Environment variable: ``1`` makes tklab behave as if NVRTC were not installed (CI's "no NVRTC" path).
NO_NVRTC = "TKLAB_NO_NVRTC"

#: What still works without NVRTC, said after every "needs NVRTC" message.
STILL_WORKS = ("the CPU emulator still checks your kernel: tklab.check(...) runs CUDA exercises on the CPU, "
               "tklab.compile(..., target='cpu') builds a kernel for it, and the chapters show the outputs "
               "recorded on an H200")

#: The same on macOS: the emulator builds with the Mac's clang (tklab.emulate.hostos); its Mac path is tested on
#: Linux (TKLAB_EMU_PORTABLE=1), never on a real Mac, so the sentence says so.
STILL_WORKS_MACOS = ("the chapters show the outputs recorded on an H200 and the models and explorers work; the "
                     "CPU emulator checks CUDA exercises with the Mac's clang++ (`xcode-select --install`; its macOS "
                     "port is tested on Linux only so far)")


class ToolchainError(RuntimeError):
    """A CUDA component tklab needs is missing; the message says how to get it (in a notebook: that line alone)."""

    def _render_traceback_(self) -> list[str]:
        return [f"{type(self).__name__}: {self}"]


class NvrtcUnavailable(ToolchainError):
    """Compiling for the GPU needs NVRTC, which this machine lacks; the message says why and what still works.

    In a notebook it shows as its message alone (no traceback through tklab): the cell's answer is that
    sentence, not a stack of frames.
    """

    def _render_traceback_(self) -> list[str]:
        return [f"NVRTC unavailable: {self}"]


def _hidden() -> bool:
    return os.environ.get(NO_NVRTC, "").strip().lower() in ("1", "true", "yes")


def _why_missing(detail: str) -> str:
    """The one sentence for "no NVRTC here", specific to the platform."""
    if _hidden():
        where = f"which {NO_NVRTC}=1 hides on this machine"
    elif sys.platform == "darwin":
        where = "which has no wheel for macOS"
    elif sys.platform == "win32":
        where = "which is not installed here (`pip install nvidia-cuda-nvrtc cuda-bindings`; Windows is untested)"
    else:
        where = f"which is not installed here (`pip install nvidia-cuda-nvrtc cuda-bindings`; {detail})"
    return f"compiling for the GPU needs NVRTC, {where}; {STILL_WORKS_MACOS if _on_macos() else STILL_WORKS}"


def _on_macos() -> bool:
    return sys.platform == "darwin" and not _hidden()


def nvrtc_missing() -> str | None:
    """Why NVRTC cannot be used here (one sentence for the learner), or None when it can."""
    if _hidden():
        return _why_missing("")
    try:
        _nvrtc_version()
    except ToolchainError as e:
        return _why_missing(str(e))
    return None


def nvrtc_available() -> bool:
    """True when NVRTC loads (and ``TKLAB_NO_NVRTC`` does not hide it)."""
    return nvrtc_missing() is None


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
        if sys.platform == "darwin":
            raise ToolchainError(f"reading SASS needs `{name}`, which has no macOS build (and there is no cubin to "
                                 f"read without NVRTC); {STILL_WORKS_MACOS}")
        raise ToolchainError(
            f"`{name}` not found. Install it with `pip install nvidia-cuda-{name}` (13.2 or newer for "
            "Hopper SASS) or put a CUDA toolkit's bin/ on PATH."
        )
    return str(path)


def nvrtc_version() -> tuple[int, int]:
    """NVRTC's (major, minor); raises ``NvrtcUnavailable`` saying why and what still works when it is missing."""
    why = nvrtc_missing()
    if why is not None:
        raise NvrtcUnavailable(why)
    return _nvrtc_version()


@functools.cache
def _nvrtc_version() -> tuple[int, int]:
    try:
        from cuda.bindings import nvrtc
    except ImportError as e:  # no cuda-bindings wheel (macOS) or not installed
        raise ToolchainError("cuda-bindings is not installed") from e
    try:
        err, major, minor = nvrtc.nvrtcVersion()
    except Exception as e:  # noqa: BLE001 - the shared library failed to load
        raise ToolchainError(f"NVRTC could not be loaded: {e}") from e
    return int(major), int(minor)


def fingerprint() -> str:
    """Identifies the toolchain for the compile cache: NVRTC version and cuda-bindings version.

    Raises ``NvrtcUnavailable`` without NVRTC (asked each time: ``TKLAB_NO_NVRTC`` may change in a process).
    """
    nvrtc_version()
    return _fingerprint()


@functools.cache
def _fingerprint() -> str:
    try:
        from importlib.metadata import version

        bindings = version("cuda-bindings")
    except Exception:  # noqa: BLE001
        bindings = "?"
    major, minor = nvrtc_version()
    return f"nvrtc-{major}.{minor}/cuda-bindings-{bindings}"
