"""Emulated modules and kernels: the ``compile`` / ``kernel(grid, block, args)`` API, on NumPy arrays.

A launch copies every array argument into its own bounds-checked region of emulator memory, runs the
grid (blocks on a small thread pool, each block's threads as fibers), copies the arrays back, and
raises an ``EmulationError`` that names the thread, the block, the source line and the argument when
something went wrong. Kernel ``printf`` output is printed after the launch.

The emulator models Hopper's asynchrony as the PTX ISA allows it to happen, not as it usually happens
(docs/ARCHITECTURE.md, "The emulator's model of time"): a TMA load's box holds garbage (NaN) and is "in
flight" from its issue until it lands, a wgmma group's accumulators read NaN until the
``wgmma.wait_group`` that retires it, and a write to bytes that a pending group or TMA store may still
read is an ``AsyncHazard``. ``tma_order`` picks when in-flight TMA loads land:

- ``"delayed"`` (default): each at the last moment the PTX ISA allows -- when a thread waits on (or arrives
  at) its mbarrier and nothing but the load's bytes is missing, or when no thread could otherwise move;
- ``"in_order"``: as soon as its mbarrier's arrivals are in (in issue order: what a quiet GPU mostly does);
- ``"reversed"``: as late as ``"delayed"``, and when one must land, every load issued after it lands first,
  newest first (stages complete out of order).

A kernel that is correct passes under all three; a grader runs it under more than one.

Public API: ``EmuModule``, ``EmuKernel`` (``__call__(grid, block, args, shared_mem=0, *, race=True,
time_limit=60.0, workers=None, reverse=False, tma_order="delayed")``), ``LaunchResult`` (``warnings``,
``output``, ``wgmma_max_in_flight``: the most wgmma groups one warp had committed and not yet waited
for at once, over the launch -- 2 for a loop that overlaps two products); ``tma_order`` names one of
``arguments.TMA_ORDERS``.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..run import signature
from ..toolchain.compiler import KernelsByName
from .arguments import Arguments, LaunchResult, Param, checked_launch, finish, settle
from .build import Built

_LOCK = threading.Lock()  # one launch at a time: the runtime's buffer slots are process-wide
_SLOTS = 64


_RUNTIMES: dict[str, ctypes.CDLL] = {}


def _runtime(path: Path) -> ctypes.CDLL:
    """The runtime library, loaded once per process by name: every module linked against it (it is their
    DT_NEEDED, by soname) then shares its state with the launches made here."""
    if path.name in _RUNTIMES:
        return _RUNTIMES[path.name]
    lib = ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
    lib.tkemu_slot_bytes.restype = ctypes.c_uint64
    lib.tkemu_buffer_map.restype = ctypes.c_void_p
    lib.tkemu_buffer_map.argtypes = [ctypes.c_int, ctypes.c_uint64]
    lib.tkemu_buffer_unmap.argtypes = [ctypes.c_int]
    lib.tkemu_launch.restype = ctypes.c_int
    lib.tkemu_launch.argtypes = [ctypes.c_void_p, ctypes.c_void_p] + [ctypes.c_uint] * 7 + \
        [ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_double]
    for f in ("tkemu_error", "tkemu_warnings", "tkemu_output", "tkemu_stats"):
        getattr(lib, f).restype = ctypes.c_char_p
    _RUNTIMES[path.name] = lib
    return lib


class EmuModule(KernelsByName):
    """A module compiled for the CPU emulator; kernels by name, like ``tklab.Module``."""

    def __init__(self, built: Built, *, source: str, arch: str, options: Sequence[str] = ()):
        self.built, self.source, self.arch, self.options = built, source, arch, tuple(options)
        self.program = built.program
        self.target = "cpu"
        self._rt = _runtime(built.runtime)  # the copy beside the module (loaded once per path)
        self._lib = ctypes.CDLL(str(built.path))
        self._kernels: dict[str, EmuKernel] = {}

    @property
    def kernels(self) -> list[str]:
        return list(self.built.kernels)

    @property
    def unsupported(self) -> list[str]:
        """Inline-PTX instructions in the source that stop the kernel if executed (not emulated)."""
        return list(self.built.unsupported)

    def __getitem__(self, name: str) -> EmuKernel:
        if name not in self.built.kernels:
            raise KeyError(f"no kernel named {name!r} in {self.program}; kernels: {', '.join(self.kernels) or 'none'}"
                           " (template kernels need name_expressions=)")
        if name not in self._kernels:
            self._kernels[name] = EmuKernel(self, name, self.built.kernels[name])
        return self._kernels[name]

    def __repr__(self) -> str:
        return f"<tklab.emulate.EmuModule {self.program} (CPU, as {self.arch}) kernels={self.kernels}>"


class EmuKernel:
    """One kernel of an ``EmuModule``; call it like a GPU kernel, with NumPy arrays."""

    def __init__(self, module: EmuModule, name: str, symbol: str):
        self.module, self.name, self.display_name = module, name, name
        lib = module._lib
        self._entry = ctypes.cast(getattr(lib, f"__tkemu_entry_{symbol}"), ctypes.c_void_p).value
        sig_fn = getattr(lib, f"__tkemu_sig_{symbol}")
        sig_fn.restype = ctypes.POINTER(ctypes.c_int)
        raw = sig_fn()
        n = raw[0]
        self.param_sizes = [raw[1 + i] for i in range(n)]
        self.param_aligns = [raw[1 + n + i] for i in range(n)]
        self.param_pointer = [bool(raw[1 + 2 * n + i]) for i in range(n)]
        self.params = signature.find(module.source, name.split("<", 1)[0]) if "<" not in name else None
        if self.params is not None and len(self.params) != n:
            self.params = None
        self.last = LaunchResult()

    def __call__(self, grid: Any, block: Any, args: Sequence[Any] = (), *, shared_mem: int = 0, stream: Any = None,
                 sync: bool = False, race: bool = True, time_limit: float = 60.0, workers: int | None = None,
                 reverse: bool = False, tma_order: str = "delayed") -> LaunchResult:
        """Run the kernel on the CPU (see the module docstring); arrays are updated in place."""
        n = len(self.param_sizes)
        launch = checked_launch(self.name, grid, block, args, declared=self.params, count=n, arch=self.module.arch,
                                shared_mem=shared_mem, race=race, reverse=reverse, tma_order=tma_order)
        params = [Param(self.param_sizes[i], self.param_pointer[i], self.params[i] if self.params else None)
                  for i in range(n)]
        packing = Arguments(self.name, params, args, slots=_SLOTS)
        rt = self.module._rt
        with _LOCK:
            try:
                packed = packing.mapped(rt)
                # Each argument in its own 64-byte-aligned cell (a CUtensorMap is alignas(64)).
                cells = np.zeros(max(1, n) * 256 + 64, dtype=np.uint8)
                base = (-cells.ctypes.data) % 64
                pointers = (ctypes.c_void_p * max(1, n))()
                for i, raw in enumerate(packed):
                    off = base + 256 * i
                    cells[off:off + len(raw)] = np.frombuffer(raw, dtype=np.uint8)
                    pointers[i] = cells.ctypes.data + off
                nworkers = workers if workers is not None else 1  # one worker: the same error each run
                failed = rt.tkemu_launch(self._entry, ctypes.cast(pointers, ctypes.c_void_p), *launch.grid,
                                         *launch.block, int(shared_mem), launch.arch, int(nworkers), launch.flags,
                                         float(time_limit))
                packing.copy_back()
                result, error = finish(rt, packing, failed, library=self.module.built.path,
                                       program=self.module.program, tma_order=tma_order)
            finally:
                packing.done(rt)
        return settle(self, result, error)

    def __repr__(self) -> str:
        return f"<tklab.emulate.EmuKernel {self.name} (CPU)>"
