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
for at once, over the launch -- 2 for a loop that overlaps two products), ``TMA_ORDERS``.
"""

from __future__ import annotations

import ctypes
import json
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..build import signature
from ..build.compiler import KernelsByName
from ..run.launch import check_count, check_launch
from . import errors
from .build import Built
from .tensormap import TensorMap

_LOCK = threading.Lock()  # one launch at a time: the runtime's buffer slots are process-wide
_SLOTS = 64
#: When in-flight TMA loads land (see the module docstring), as the runtime numbers them.
TMA_ORDERS = {"in_order": 0, "delayed": 1, "reversed": 2}


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


@dataclass
class LaunchResult:
    """What the last launch left besides the arrays: warnings (e.g. reads of unwritten shared memory),
    ``printf`` output, the TMA completion order it ran under, and the most wgmma groups one warp had
    in flight at once (committed, not yet retired by its ``wgmma.wait_group``; 0 without wgmma)."""

    warnings: list[str] = field(default_factory=list)
    output: str = ""
    tma_order: str = "delayed"
    wgmma_max_in_flight: int = 0
    #: The PTX interpreter's account of what executed (thread-level executions by PTX opcode); {} natively.
    executed: dict[str, int] = field(default_factory=dict)
    #: ... its concept counters (``tklab.emulate.interp.module.CONCEPTS``); {} natively.
    concepts: dict[str, int] = field(default_factory=dict)
    #: ... and each instruction's executions (a NumPy array by instruction number); None natively.
    counts: Any = None


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

    def _param(self, i: int) -> signature.Param | None:
        return self.params[i] if self.params else None

    def _pack(self, i: int, value: Any, buffers: list[tuple[int, np.ndarray, np.ndarray]],
              infos: dict[int, errors.ArgInfo], maps: list[tuple[int, TensorMap]]) -> bytes:
        param = self._param(i)
        where = f"{self.name}: argument {i}" + (f" ('{param.ctype} {param.name}')" if param else "")
        size = self.param_sizes[i]
        if isinstance(value, TensorMap):
            maps.append((i, value))
            return bytes(128)
        if self.param_pointer[i]:
            if value is None or (isinstance(value, (int, np.integer)) and int(value) == 0):
                return bytes(8)
            if not isinstance(value, np.ndarray):
                if hasattr(value, "__cuda_array_interface__") or hasattr(value, "data_ptr"):
                    raise TypeError(f"{where}: a GPU array was passed to the CPU emulator; pass a NumPy array "
                                    "(cupy.asnumpy(x) / tensor.cpu().numpy())")
                raise TypeError(f"{where} is a pointer: pass a NumPy array, not {type(value).__name__}")
            allowed = signature.POINTEES.get(param.base) if param is not None else None
            if allowed and value.dtype.name not in allowed:
                raise TypeError(f"{where} expects {param.base} data ({'/'.join(allowed)}), but the array holds "  # type: ignore[union-attr]
                                f"{value.dtype.name}; convert it first (e.g. .astype(...))")
            slot = len(buffers)
            if slot >= _SLOTS:
                raise ValueError(f"{self.name}: at most {_SLOTS} array arguments")
            host = np.ascontiguousarray(value)
            buffers.append((slot, value, host))
            infos[slot] = errors.ArgInfo(i, param.name if param else "", param.ctype if param else "",
                                         host.dtype, tuple(host.shape), host.nbytes)
            return slot.to_bytes(8, "little")  # replaced by the address once mapped
        if isinstance(value, np.ndarray):
            raise TypeError(f"{where} is declared as a value, but an array was passed")
        if isinstance(value, (bytes, bytearray, np.void)):
            raw = bytes(value)
        elif hasattr(value, "as_kernel_arg"):
            raise TypeError(f"{where}: {type(value).__name__} is a GPU object; under emulation use "
                            "tklab.emulate.tensor_map(numpy_array, tile)")
        elif isinstance(value, (bool, int, float, np.generic)):
            from ..run.launch import _pack_scalar

            raw = _pack_scalar(where, value, param, size)
        else:
            raise TypeError(f"{where}: cannot pass a {type(value).__name__} to a kernel")
        if len(raw) != size:
            raise TypeError(f"{where} takes {size} bytes, but the value packs to {len(raw)} bytes")
        return raw

    def __call__(self, grid: Any, block: Any, args: Sequence[Any] = (), *, shared_mem: int = 0, stream: Any = None,
                 sync: bool = False, race: bool = True, time_limit: float = 60.0, workers: int | None = None,
                 reverse: bool = False, tma_order: str = "delayed") -> LaunchResult:
        """Run the kernel on the CPU (see the module docstring); arrays are updated in place."""
        if tma_order not in TMA_ORDERS:
            raise ValueError(f"{self.name}: tma_order={tma_order!r}; choose one of {', '.join(TMA_ORDERS)}")
        g, b = check_launch(self.name, grid, block, args)
        n = len(self.param_sizes)
        check_count(self.name, self.params, n, len(args))
        arch = 90 if self.module.arch.startswith("sm_9") else 80
        from ..course.limits import SHARED_OPTIN  # one source for the per-block limits (here: no GPU's own)

        limit = SHARED_OPTIN[arch]
        if shared_mem > limit:
            raise ValueError(f"{self.name}: {shared_mem} B of dynamic shared memory is more than a block can have "
                             f"on {self.module.arch} ({limit} B)")
        buffers: list[tuple[int, np.ndarray, np.ndarray]] = []
        infos: dict[int, errors.ArgInfo] = {}
        maps: list[tuple[int, TensorMap]] = []
        packed = [self._pack(i, a, buffers, infos, maps) for i, a in enumerate(args)]
        rt = self.module._rt
        with _LOCK:
            addresses: dict[int, int] = {}
            try:
                for slot, _orig, host in buffers:
                    addr = rt.tkemu_buffer_map(slot, host.nbytes)
                    if not addr:
                        raise MemoryError(f"{self.name}: cannot map {host.nbytes} bytes for argument "
                                          f"{infos[slot].index}")
                    ctypes.memmove(addr, host.ctypes.data, host.nbytes)
                    addresses[slot] = addr
                for i in range(n):
                    if self.param_pointer[i] and isinstance(args[i], np.ndarray):
                        slot = int.from_bytes(packed[i], "little")
                        packed[i] = addresses[slot].to_bytes(8, "little")
                for i, tmap in maps:
                    slot = next((s for s, orig, _h in buffers if orig is tmap.array or
                                 np.shares_memory(orig, tmap.array)), None)
                    if slot is None:
                        slot = len(buffers)
                        host = np.ascontiguousarray(tmap.array)
                        buffers.append((slot, tmap.array, host))
                        infos[slot] = errors.ArgInfo(i, f"tensor map {i}", "CUtensorMap", host.dtype,
                                                     tuple(host.shape), host.nbytes)
                        addr = rt.tkemu_buffer_map(slot, host.nbytes)
                        ctypes.memmove(addr, host.ctypes.data, host.nbytes)
                        addresses[slot] = addr
                    packed[i] = tmap.encode(addresses[slot], slot)
                # Each argument in its own 64-byte-aligned cell (a CUtensorMap is alignas(64)).
                cells = np.zeros(max(1, n) * 256 + 64, dtype=np.uint8)
                base = (-cells.ctypes.data) % 64
                pointers = (ctypes.c_void_p * max(1, n))()
                for i, raw in enumerate(packed):
                    off = base + 256 * i
                    cells[off:off + len(raw)] = np.frombuffer(raw, dtype=np.uint8)
                    pointers[i] = cells.ctypes.data + off
                nworkers = workers if workers is not None else 1  # one worker: the same error each run
                flags = (1 if race else 0) | (2 if reverse else 0) | (TMA_ORDERS[tma_order] << 2) | \
                    ((limit // 1024) << 8)  # the block's shared memory, in KB: the runtime's one source too
                failed = rt.tkemu_launch(self._entry, ctypes.cast(pointers, ctypes.c_void_p), *g, *b, int(shared_mem),
                                         arch, int(nworkers), flags, float(time_limit))
                for slot, orig, host in buffers:
                    ctypes.memmove(host.ctypes.data, addresses[slot], host.nbytes)
                    if host is not orig and orig.flags.writeable:
                        orig[...] = host
                error = (rt.tkemu_error() or b"").decode(errors="replace")
                warnings = json.loads((rt.tkemu_warnings() or b"[]").decode(errors="replace") or "[]")
                output = (rt.tkemu_output() or b"").decode(errors="replace")
                stats = json.loads((rt.tkemu_stats() or b"{}").decode(errors="replace") or "{}")
            finally:
                for slot in addresses:
                    rt.tkemu_buffer_unmap(slot)
        ctx = errors.Context(self.module.built.path, self.module.program, infos, dict(addresses),
                             int(rt.tkemu_slot_bytes()))
        result = LaunchResult([errors.render(w["message"], w, ctx) for w in warnings], output, tma_order,
                              int(stats.get("wgmma_max_in_flight", 0)))
        self.last = result
        if output:
            sys.stdout.write(output)
        if failed:
            report = json.loads(error) if error else {"kind": "error", "message": "the launch failed"}
            message = errors.render(report.get("message", ""), report, ctx)
            if result.warnings and report.get("kind") in ("deadlock", "timeout"):
                message += "\n(note: " + "; ".join(result.warnings) + ")"
            raise errors.error_class(report.get("kind", ""))(message, report)
        return result

    def __repr__(self) -> str:
        return f"<tklab.emulate.EmuKernel {self.name} (CPU)>"
