"""A launch's arguments on the CPU, for either engine: NumPy arrays copied into bounds-checked buffer slots of the
runtime, tensor maps encoded over those slots, scalars packed as the kernel declares them; and, after the launch,
the arrays copied back, the slots given up, and the runtime's report turned into a ``LaunchResult`` or an error.

Why one module: the native engine (``module.EmuKernel``) and the PTX interpreter (``interp.module.PtxKernel``) take
the same arguments with the same checks and say the same things about them; only how a kernel's parameters are
known (the host build's signature, or the PTX's ``.param`` list) and how it is launched differ.

Public API: ``Param``, ``Arguments``, ``finish``, ``settle``, ``dyn_shared_limit``, ``checked_launch`` (what both
engines check before a launch, and the runtime's flags word), ``TMA_ORDERS``.
"""

from __future__ import annotations

import ctypes
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..run import signature
from ..run.launch import check_count, check_launch
from . import errors
from .tensormap import TensorMap


@dataclass(frozen=True)
class Param:
    """What a kernel's parameter takes: its size, whether it is a pointer, its declaration in the source (when
    known), and a scalar's NumPy type when the source does not say (the PTX's ``.param`` type)."""

    size: int
    pointer: bool | None  # None: unknown (an 8-byte PTX parameter): an array makes it a pointer
    declared: signature.Param | None = None
    scalar: str | None = None


#: When in-flight TMA loads land (``tklab.emulate.module``'s docstring), as the runtime numbers them.
TMA_ORDERS = {"in_order": 0, "delayed": 1, "reversed": 2}


@dataclass(frozen=True)
class Launch:
    """A launch as checked before either engine starts it: grid and block as 3-tuples, the arguments as the kernel
    takes them, the arch as the runtime numbers it (``dyn_shared_limit``) and the runtime's flags word."""

    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    args: Sequence[Any]
    arch: int
    flags: int


def checked_launch(name: str, grid: Any, block: Any, args: Sequence[Any], *, declared: Sequence[signature.Param] | None,
                   count: int, arch: str, shared_mem: int, race: bool, reverse: bool, tma_order: str,
                   convert: Callable[[Sequence[Any]], Sequence[Any]] | None = None) -> Launch:
    """The checks both engines make before a launch, in the order a learner's mistake is named: the TMA order, the
    grid and block, the arguments' count (``count`` parameters, after ``convert``: numba's arrays as their structs'
    fields), the dynamic shared memory. The flags word: bit 0 race detection, bit 1 threads in reverse order, bits
    2-3 the TMA order, bits 8 and up the block's shared memory in KB (the runtime's one source for it too)."""
    if tma_order not in TMA_ORDERS:
        raise ValueError(f"{name}: tma_order={tma_order!r}; choose one of {', '.join(TMA_ORDERS)}")
    g, b = check_launch(name, grid, block, args)
    if convert is not None:
        args = convert(args)
    check_count(name, declared, count, len(args))
    number, limit = dyn_shared_limit(name, arch, shared_mem)
    flags = (1 if race else 0) | (2 if reverse else 0) | (TMA_ORDERS[tma_order] << 2) | ((limit // 1024) << 8)
    return Launch(g, b, args, number, flags)


def dyn_shared_limit(name: str, arch: str, shared_mem: int) -> tuple[int, int]:
    """(the arch's number as the runtime takes it, the per-block limit in bytes); an error for a launch over it."""
    from ..run.limits import SHARED_OPTIN  # one source for the per-block limits (here: no GPU's own)

    number = 90 if arch.startswith("sm_9") else 80
    limit = SHARED_OPTIN[number]
    if shared_mem > limit:
        raise ValueError(f"{name}: {shared_mem} B of dynamic shared memory is more than a block can have on {arch} "
                         f"({limit} B)")
    return number, limit


class Arguments:
    """The arguments of one launch (see the module docstring): ``pack`` checks and packs them, ``mapped`` gives
    each parameter's bytes once the arrays are in the runtime's slots, ``done`` copies back and unmaps."""

    def __init__(self, kernel: str, params: Sequence[Param], values: Sequence[Any], *, slots: int):
        self.kernel, self.params, self.slots = kernel, list(params), slots
        self.buffers: list[tuple[int, np.ndarray, np.ndarray]] = []  # (slot, the caller's array, its host copy)
        self.infos: dict[int, errors.ArgInfo] = {}
        self.maps: list[tuple[int, TensorMap]] = []
        self.addresses: dict[int, int] = {}
        self.packed = [self._pack(i, v) for i, v in enumerate(values)]
        self._array_at = {i for i, v in enumerate(values) if isinstance(v, np.ndarray) and len(self.packed[i]) == 8
                          and self._is_pointer(i, v)}

    def _is_pointer(self, i: int, value: Any) -> bool:
        p = self.params[i]
        return bool(p.pointer) if p.pointer is not None else (p.size == 8 and isinstance(value, np.ndarray))

    def _pack(self, i: int, value: Any) -> bytes:
        p = self.params[i]
        decl = p.declared
        where = f"{self.kernel}: argument {i}" + (f" ('{decl.ctype} {decl.name}')" if decl else "")
        if isinstance(value, TensorMap):
            if p.size != 128:
                raise TypeError(f"{where} takes {p.size} bytes, not a tensor map (128 bytes, a CUtensorMap)")
            self.maps.append((i, value))
            return bytes(128)
        if self._is_pointer(i, value):
            if value is None or (isinstance(value, (int, np.integer)) and int(value) == 0):
                return bytes(8)
            if not isinstance(value, np.ndarray):
                if hasattr(value, "__cuda_array_interface__") or hasattr(value, "data_ptr"):
                    raise TypeError(f"{where}: a GPU array was passed to the CPU emulator; pass a NumPy array "
                                    "(cupy.asnumpy(x) / tensor.cpu().numpy())")
                raise TypeError(f"{where} is a pointer: pass a NumPy array, not {type(value).__name__}")
            allowed = signature.POINTEES.get(decl.base) if decl is not None else None
            if allowed and value.dtype.name not in allowed:
                raise TypeError(f"{where} expects {decl.base} data ({'/'.join(allowed)}), but the array holds "  # type: ignore[union-attr]
                                f"{value.dtype.name}; convert it first (e.g. .astype(...))")
            slot = len(self.buffers)
            if slot >= self.slots:
                raise ValueError(f"{self.kernel}: at most {self.slots} array arguments")
            host = np.ascontiguousarray(value)
            self.buffers.append((slot, value, host))
            self.infos[slot] = errors.ArgInfo(i, decl.name if decl else "", decl.ctype if decl else "", host.dtype,
                                              tuple(host.shape), host.nbytes)
            return slot.to_bytes(8, "little")  # replaced by the address once mapped
        if isinstance(value, np.ndarray):
            raise TypeError(f"{where} is declared as a value, but an array was passed")
        if isinstance(value, (bytes, bytearray, np.void)):
            raw = bytes(value)
        elif hasattr(value, "as_kernel_arg"):
            raise TypeError(f"{where}: {type(value).__name__} is a GPU object; under emulation use "
                            "tklab.emulate.tensor_map(numpy_array, tile)")
        elif isinstance(value, (bool, int, float, np.generic)):
            raw = _scalar(where, value, p)
        else:
            raise TypeError(f"{where}: cannot pass a {type(value).__name__} to a kernel")
        if len(raw) != p.size:
            raise TypeError(f"{where} takes {p.size} bytes, but the value packs to {len(raw)} bytes")
        return raw

    def _map(self, rt: Any, slot: int, host: np.ndarray, index: int) -> None:
        addr = rt.tkemu_buffer_map(slot, host.nbytes)
        if not addr:
            raise MemoryError(f"{self.kernel}: cannot map {host.nbytes} bytes for argument {index}")
        ctypes.memmove(addr, host.ctypes.data, host.nbytes)
        self.addresses[slot] = addr

    def mapped(self, rt: Any) -> list[bytes]:
        """Copy the arrays into the runtime's slots (call under the launch lock, then ``done``); each parameter's
        bytes, with the arrays' addresses and the tensor maps encoded over them."""
        packed = list(self.packed)
        for slot, _orig, host in self.buffers:
            self._map(rt, slot, host, self.infos[slot].index)
        for i in self._array_at:
            packed[i] = self.addresses[int.from_bytes(packed[i], "little")].to_bytes(8, "little")
        for i, tmap in self.maps:
            slot = next((s for s, orig, _h in self.buffers if orig is tmap.array or
                         np.shares_memory(orig, tmap.array)), None)
            if slot is None:
                slot = len(self.buffers)
                host = np.ascontiguousarray(tmap.array)
                self.buffers.append((slot, tmap.array, host))
                self.infos[slot] = errors.ArgInfo(i, f"tensor map {i}", "CUtensorMap", host.dtype, tuple(host.shape),
                                                  host.nbytes)
                self._map(rt, slot, host, i)
            packed[i] = tmap.encode(self.addresses[slot], slot)
        return packed

    def copy_back(self) -> None:
        """The arrays as the kernel left them, into the caller's arrays (before ``done``)."""
        for slot, orig, host in self.buffers:
            if slot in self.addresses:
                ctypes.memmove(host.ctypes.data, self.addresses[slot], host.nbytes)
                if host is not orig and orig.flags.writeable:
                    orig[...] = host

    def done(self, rt: Any) -> None:
        for slot in self.addresses:
            rt.tkemu_buffer_unmap(slot)


def _scalar(where: str, value: Any, p: Param) -> bytes:
    from ..run.launch import _pack_scalar

    if p.declared is None and p.scalar is not None:  # the PTX's type (no source declaration to go by)
        dtype = np.dtype(p.scalar)
        if dtype.kind in "iu":
            if isinstance(value, (float, np.floating)) and not float(value).is_integer():
                raise TypeError(f"{where} is an integer, but {value!r} was passed")
            info = np.iinfo(dtype)
            if info.min <= int(value) <= info.max:
                return np.array(int(value), dtype=dtype).tobytes()
            if dtype.kind == "u" and -(info.max // 2) - 1 <= int(value) < 0:  # a negative int into a .b/.u param
                return np.array(int(value), dtype=dtype.name.replace("uint", "int")).tobytes()
            raise OverflowError(f"{where}: {value} does not fit in {dtype.name}")
        return np.array(value, dtype=dtype).tobytes()
    return _pack_scalar(lambda: where, value, p.declared, p.size)


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


def settle(kernel: Any, result: LaunchResult, error: errors.EmulationError | None) -> LaunchResult:
    """The end of either engine's launch: ``result`` kept as ``kernel.last`` (what the launch saw, also when it failed:
    its warnings and output), then the runtime's error raised, if it reported one, else ``result`` returned."""
    kernel.last = result
    if error is not None:
        raise error
    return result


def finish(rt: Any, args: Arguments, failed: int, *, library: Path, program: str, tma_order: str,
           instr_where: Callable[[int], str] | None = None, **extra: Any) -> tuple[Any, errors.EmulationError | None]:
    """The launch's report (read before ``args.done``): its ``LaunchResult`` (``extra``: the interpreter's fields),
    and the error the runtime reported (None: none), its placeholders filled in (lines, elements, arguments)."""
    error = (rt.tkemu_error() or b"").decode(errors="replace")
    warnings = json.loads((rt.tkemu_warnings() or b"[]").decode(errors="replace") or "[]")
    output = (rt.tkemu_output() or b"").decode(errors="replace")
    stats = json.loads((rt.tkemu_stats() or b"{}").decode(errors="replace") or "{}")
    ctx = errors.Context(library, program, dict(args.infos), dict(args.addresses), int(rt.tkemu_slot_bytes()),
                         instr_where=instr_where)
    result = LaunchResult([errors.render(w["message"], w, ctx) for w in warnings], output, tma_order,
                          int(stats.get("wgmma_max_in_flight", 0)), **extra)
    if output:
        sys.stdout.write(output)
    if not failed:
        return result, None
    report = json.loads(error) if error else {"kind": "error", "message": "the launch failed"}
    message = errors.render(report.get("message", ""), report, ctx)
    if result.warnings and report.get("kind") in ("deadlock", "timeout"):
        message += "\n(note: " + "; ".join(result.warnings) + ")"
    return result, errors.error_class(report.get("kind", ""))(message, report)
