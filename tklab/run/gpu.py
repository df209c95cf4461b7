"""Is there a GPU, what is it, and the CUDA context tklab launches in. The one module that asks the driver.

tklab shares the device's *primary* context with CuPy and PyTorch, so arrays they allocate can be
passed straight to our kernels. ``TKLAB_NO_GPU=1`` pretends there is no GPU (useful to preview what a
learner without one sees).

Which kernels this GPU can run is decided here too (``runs(needed)``, ``why_not(needed)``): a kernel built
for ``sm_80`` runs on any GPU from sm_80 on, one built for ``sm_90a`` (wgmma, setmaxnreg: features of that
one architecture) only on sm_90. The course's chapters and exercises name what they need; the check and the
doctor ask here.

Public API: ``available()``, ``arch()``, ``name()``, ``properties()``, ``context()``, ``check(result)``,
``capability(arch)``, ``runs(needed)``, ``why_not(needed)``.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from typing import Any


class CudaError(RuntimeError):
    """A CUDA driver call failed; the message carries the driver's error name and text."""


def check(result: Any, what: str = "CUDA call") -> Any:
    """Unpack a ``cuda.bindings`` result tuple, raising CudaError on failure."""
    from cuda.bindings import driver

    err, *rest = result if isinstance(result, tuple) else (result,)
    if err != driver.CUresult.CUDA_SUCCESS:
        _, name = driver.cuGetErrorName(err)
        _, text = driver.cuGetErrorString(err)
        name = name.decode() if isinstance(name, bytes) else str(name)
        text = text.decode() if isinstance(text, bytes) else str(text)
        raise CudaError(f"{what} failed: {name}: {text}")
    if not rest:
        return None
    return rest[0] if len(rest) == 1 else tuple(rest)


@functools.cache
def _device() -> int | None:
    if os.environ.get("TKLAB_NO_GPU", "") in ("1", "true", "yes"):
        return None
    try:
        from cuda.bindings import driver

        if driver.cuInit(0)[0] != driver.CUresult.CUDA_SUCCESS:
            return None
        err, count = driver.cuDeviceGetCount()
        if err != driver.CUresult.CUDA_SUCCESS or count == 0:
            return None
        ordinal = int(os.environ.get("TKLAB_DEVICE", "0"))
        return check(driver.cuDeviceGet(ordinal), "cuDeviceGet")
    except Exception:  # noqa: BLE001 - no driver library at all means no GPU
        return None


def available() -> bool:
    """True when a CUDA GPU and driver are usable."""
    return _device() is not None


def _require() -> Any:
    dev = _device()
    if dev is None:
        raise CudaError("No CUDA GPU is available on this machine. Compiling and inspecting work without "
                        "one (pass arch='sm_90a'); running kernels needs a GPU.")
    return dev


@dataclass(frozen=True)
class Properties:
    name: str
    major: int
    minor: int
    sm_count: int
    l2_bytes: int
    max_shared_per_block_optin: int
    clock_khz: int
    memory_clock_khz: int
    memory_bus_bits: int


@functools.cache
def properties() -> Properties:
    """A few device properties that lessons and ``bench`` use."""
    from cuda.bindings import driver

    dev = _require()
    a = driver.CUdevice_attribute

    def attr(x: Any) -> int:
        return int(check(driver.cuDeviceGetAttribute(x, dev), "cuDeviceGetAttribute"))

    raw = check(driver.cuDeviceGetName(256, dev), "cuDeviceGetName")
    return Properties(
        name=raw.split(b"\0", 1)[0].decode(),
        major=attr(a.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
        minor=attr(a.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR),
        sm_count=attr(a.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT),
        l2_bytes=attr(a.CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE),
        max_shared_per_block_optin=attr(a.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN),
        clock_khz=attr(a.CU_DEVICE_ATTRIBUTE_CLOCK_RATE),
        memory_clock_khz=attr(a.CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE),
        memory_bus_bits=attr(a.CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH),
    )


def name() -> str:
    return properties().name


def arch() -> str:
    """The compile target for this GPU: ``sm_90a`` on Hopper (so wgmma/setmaxnreg are allowed), else ``sm_XY``."""
    p = properties()
    suffix = "a" if (p.major, p.minor) == (9, 0) else ""
    return f"sm_{p.major}{p.minor}{suffix}"


def capability(arch: str) -> int:
    """``"sm_90a"`` → 90, ``"sm_75"`` → 75, ``"compute_80"`` → 80."""
    digits = "".join(ch for ch in arch.split("_", 1)[-1] if ch.isdigit())
    if not digits:
        raise ValueError(f"{arch!r} is not a CUDA architecture such as 'sm_80' or 'sm_90a'")
    return int(digits)


def why_not(needed: str) -> str | None:
    """Why this machine's GPU cannot run a kernel built for ``needed`` (a sentence), or None when it can.

    ``sm_XY`` runs on every GPU of capability XY or newer; ``sm_XYa`` (architecture-specific features such
    as wgmma) only on capability XY itself: an sm_90a kernel does not run on a Blackwell GPU either.
    """
    if not available():
        return "this machine has no NVIDIA GPU"
    have = arch()
    need, cap = capability(needed), capability(have)
    if needed.endswith("a"):
        if cap != need:
            return (f"this GPU ({name()}, {have}) lacks the sm_{need} instructions it uses (wgmma, TMA, setmaxnreg "
                    f"exist on sm_{need} only: an H100/H200)")
        return None
    if cap < need:
        return f"this GPU ({name()}, {have}) is older than the sm_{need} it needs"
    return None


def runs(needed: str) -> bool:
    """True when this machine's GPU can run a kernel built for ``needed`` (see ``why_not``)."""
    return why_not(needed) is None


@functools.cache
def context() -> Any:
    """Make the device's primary context current (the one CuPy and PyTorch use) and return it."""
    from cuda.bindings import driver

    dev = _require()
    ctx = check(driver.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
    check(driver.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    return ctx


def ensure_current() -> None:
    """Called before every driver call that needs a context (cheap after the first time)."""
    from cuda.bindings import driver

    ctx = context()
    cur = check(driver.cuCtxGetCurrent(), "cuCtxGetCurrent")
    if int(cur) != int(ctx):
        check(driver.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")


def synchronize() -> None:
    from cuda.bindings import driver

    ensure_current()
    check(driver.cuCtxSynchronize(), "kernel execution (cuCtxSynchronize)")
