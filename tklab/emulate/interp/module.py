"""Interpreted modules and kernels: the PTX a compiler made, run on the CPU by ``interp.cpp``.

``PtxModule(ptx, ...)`` parses and decodes the PTX once and hands the records to the emulator runtime;
``module["kernel"](grid, block, args)`` runs it on NumPy arrays with the same launch API, the same checks and the
same messages as the native emulator (``tklab.emulate.module``), and the same ``LaunchResult``, which here also
says what executed: ``executed`` (thread-level executions by PTX opcode) and ``concepts`` (counters the chapters'
verdicts read, such as exponentials executed while a wgmma group was still pending).

Why it is the graded path: the program that runs is the one NVRTC compiled for sm_90a -- the one the static checks
read and a GPU would run -- and the learner's code is data here: nothing of it runs natively, and every address it
computes is checked against the kernel's own buffers (docs/ARCHITECTURE.md, "The PTX interpreter").

Public API: ``PtxModule``, ``PtxKernel``, ``CONCEPTS``.
"""

from __future__ import annotations

import ctypes
import json
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ...build import signature
from ...build.compiler import KernelsByName
from ...run.launch import check_count, check_launch
from .. import errors
from ..module import _LOCK, TMA_ORDERS, LaunchResult
from ..tensormap import TensorMap
from . import decode as _decode
from . import lines as _lines
from .parse import parse

#: The concept counters a launch reports (``LaunchResult.concepts``), in the runtime's order.
CONCEPTS = ("ex2", "ex2_under_wgmma", "wgmma", "tma_loads", "tma_stores", "mma", "instructions",
            "wgmma_outside_turn", "tensor_flops", "scalar_flops")
_SLOTS = 64
_GLOBAL_SLOT = _SLOTS - 1  # the module's own .global/.const variables
_RUNTIMES: dict[str, ctypes.CDLL] = {}


def _runtime(path: Path) -> ctypes.CDLL:
    from ..module import _runtime as native_runtime

    lib = native_runtime(path)
    if not hasattr(lib, "_tk_interp_ready"):
        lib.tkemu_interp_load.restype = ctypes.c_void_p
        lib.tkemu_interp_load.argtypes = [ctypes.c_void_p, ctypes.c_uint64] * 5 + [ctypes.c_char_p, ctypes.c_uint64,
                                                                                   ctypes.c_uint32]
        lib.tkemu_interp_free.argtypes = [ctypes.c_void_p]
        lib.tkemu_interp_error.restype = ctypes.c_char_p
        lib.tkemu_interp_launch.restype = ctypes.c_int
        lib.tkemu_interp_launch.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_void_p, ctypes.c_uint64] + \
            [ctypes.c_uint] * 7 + [ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_double, ctypes.c_int]
        lib.tkemu_interp_counts.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
        lib.tkemu_interp_turns.argtypes = [ctypes.c_int, ctypes.c_int]
        lib._tk_interp_ready = True
    return lib


class PtxModule(KernelsByName):
    """A module of PTX run by the interpreter; kernels by name, like ``tklab.Module`` and ``EmuModule``."""

    engine = "ptx"

    def __init__(self, ptx: str, *, program: str = "kernel.cu", source: str | None = None, arch: str = "sm_90a",
                 options: Sequence[str] = (), lowered: dict[str, str] | None = None, key: str = "",
                 abi: str = "cuda"):
        from .. import build as native_build

        self.ptx, self.source, self.arch, self.options = ptx, source, arch, tuple(options)
        self.program, self.target, self.key = program, "cpu", key
        if abi not in ("cuda", "numba"):
            raise ValueError(f"abi={abi!r}: 'cuda' (C++ kernels) or 'numba' (numba's array arguments)")
        self.abi = abi
        self.lowered = dict(lowered or {})
        self.decoded = _decode.decode(parse(ptx))
        if source:
            _name_shared_elements(self.decoded, source, options)
        self._rt = _runtime(native_build.runtime_library())
        arrays = self.decoded.arrays()
        self._keep = arrays  # the runtime copies them; kept alive for the call anyway
        ins, ops, syms, funcs = arrays["instrs"], arrays["operands"], arrays["symbols"], arrays["functions"]
        init, text = arrays["init"], arrays["strings"]
        assert isinstance(ins, np.ndarray) and isinstance(ops, np.ndarray)
        assert isinstance(syms, np.ndarray) and isinstance(funcs, np.ndarray)
        assert isinstance(init, bytes) and isinstance(text, bytes)
        handle = self._rt.tkemu_interp_load(
            ins.ctypes.data, len(ins), ops.ctypes.data, len(ops), syms.ctypes.data, len(syms), funcs.ctypes.data,
            len(funcs), ctypes.c_char_p(init or b"\0"), len(init), ctypes.c_char_p(text), len(text),
            self.decoded.n_regs)
        if not handle:
            raise RuntimeError((self._rt.tkemu_interp_error() or b"").decode())
        self._handle = handle
        self._kernels: dict[str, PtxKernel] = {}

    def __del__(self) -> None:
        handle = getattr(self, "_handle", None)
        if handle:
            self._rt.tkemu_interp_free(handle)
            self._handle = None

    @property
    def kernels(self) -> list[str]:
        names = []
        back = {v: k for k, v in self.lowered.items()}
        for k in self.decoded.kernels:
            names.append(back.get(k, k))
        return names

    @property
    def unsupported(self) -> list[str]:
        """PTX instructions of the module the interpreter does not model (they stop a launch that executes one)."""
        not_modelled = _decode.OPS["NOT_MODELLED"]
        return sorted({self.decoded.opnames[i] for i, rec in enumerate(self.decoded.instrs) if rec[0] == not_modelled})

    @property
    def turns(self) -> tuple[int, int]:
        """The named barriers the kernel's warpgroups take turns with, ``[lo, hi)``: from what the kernel exports
        (``turn_barriers``, the first turn id, and ``epilogue_barriers``, the first id after them); (0, 0): none."""
        c = self.decoded.constants
        lo, hi = c.get("turn_barriers"), c.get("epilogue_barriers")
        return (int(lo), int(hi)) if isinstance(lo, int) and isinstance(hi, int) and 0 < lo < hi <= 16 else (0, 0)

    @property
    def constants(self) -> dict[str, int]:
        """The integer ``.global`` constants the module exports (``extern "C" __device__ int x = ...``)."""
        return dict(self.decoded.constants)

    def where(self, index: int) -> str:
        """Instruction ``index`` as "file:line" (the learner's line first)."""
        return _lines.where(self.decoded, index, _lines.shown(self.program))

    def __getitem__(self, name: str) -> PtxKernel:
        if self.abi == "numba" and len(self.decoded.kernels) == 1:  # numba mangles the name; one kernel per module
            if name not in self._kernels:
                self._kernels[name] = PtxKernel(self, name, self.decoded.kernels[0])
            return self._kernels[name]
        symbol = self.lowered.get(name, name)
        if symbol not in self.decoded.kernels:
            from ...build.compiler import plain_name

            plain = {plain_name(k): k for k in self.decoded.kernels if plain_name(k)}
            if name in plain:
                symbol = plain[name]
            else:
                raise KeyError(f"no kernel named {name!r} in {self.program}; kernels: "
                               f"{', '.join(self.kernels) or 'none'} (template kernels need name_expressions=)")
        if name not in self._kernels:
            self._kernels[name] = PtxKernel(self, name, symbol)
        return self._kernels[name]

    def __repr__(self) -> str:
        return (f"<tklab.emulate PtxModule {self.program} (CPU: PTX for {self.arch}, interpreted) "
                f"kernels={self.kernels}>")


def _name_shared_elements(decoded: _decode.Program, source: str, options: Sequence[str]) -> None:
    """Give each shared array whose declaration the source shows its element size and extents (for messages)."""
    from .shapes import shared_shapes

    shapes = shared_shapes(source, options, decoded.constants)
    for sym in decoded.symbols:
        hit = shapes.get(sym.display) if sym.space == "shared" else None
        if hit is None:
            continue
        elem, dims = hit
        total = elem
        for d in dims:
            total *= d
        if total == sym.size and len(dims) <= 4:
            sym.elem, sym.dims = elem, dims


def _numba_args(args: Sequence[Any]) -> list[Any]:
    """numba passes an array as its struct's fields, one parameter each: meminfo, parent, nitems, itemsize, data,
    shape[ndim], strides[ndim] (bytes); a scalar as itself."""
    out: list[Any] = []
    for a in args:
        if isinstance(a, np.ndarray):
            out += [np.uint64(0), np.uint64(0), np.int64(a.size), np.int64(a.itemsize), a,
                    *(np.int64(d) for d in a.shape), *(np.int64(st) for st in a.strides)]
        else:
            out.append(a)
    return out


_PTX_SCALARS = {"u8": "uint8", "s8": "int8", "u16": "uint16", "s16": "int16", "u32": "uint32", "s32": "int32",
                "b32": "uint32", "u64": "uint64", "s64": "int64", "b64": "uint64", "f32": "float32",
                "f64": "float64", "f16": "float16", "b16": "uint16", "b8": "uint8"}


class PtxKernel:
    """One kernel of a ``PtxModule``; call it like a GPU kernel, with NumPy arrays."""

    def __init__(self, module: PtxModule, name: str, symbol: str):
        self.module, self.name, self.symbol, self.display_name = module, name, symbol, name
        self.entry = module.decoded.entry(symbol)
        self.ptx_params = module.decoded.kernel_params(symbol)
        src = module.source
        self.params = signature.find(src, name.split("<", 1)[0]) if src and "<" not in name else None
        if self.params is not None and len(self.params) != len(self.ptx_params):
            self.params = None
        self.last = LaunchResult()

    def _layout(self) -> tuple[list[int], int]:
        offsets = [p.offset for p in self.ptx_params]
        end = max((p.offset + p.size for p in self.ptx_params), default=0)
        return offsets, end

    def _pack(self, i: int, value: Any, buffers: list[tuple[int, np.ndarray, np.ndarray]],
              infos: dict[int, errors.ArgInfo], maps: list[tuple[int, TensorMap]]) -> bytes:
        param = self.params[i] if self.params else None
        ptx = self.ptx_params[i]
        where = f"{self.name}: argument {i}" + (f" ('{param.ctype} {param.name}')" if param else "")
        size = ptx.size
        if isinstance(value, TensorMap):
            if size != 128:
                raise TypeError(f"{where} takes {size} bytes, not a tensor map (128 bytes, a CUtensorMap)")
            maps.append((i, value))
            return bytes(128)
        pointer = param.pointer if param is not None else (size == 8 and isinstance(value, np.ndarray))
        if pointer:
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
            if slot >= _GLOBAL_SLOT:
                raise ValueError(f"{self.name}: at most {_GLOBAL_SLOT} array arguments")
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
            from ...run.launch import _pack_scalar

            if param is None and ptx.ptype in _PTX_SCALARS and ptx.count is None:
                dtype = np.dtype(_PTX_SCALARS[ptx.ptype])
                if dtype.kind in "iu" and isinstance(value, (float, np.floating)) and not float(value).is_integer():
                    raise TypeError(f"{where} is an integer, but {value!r} was passed")
                if dtype.kind in "iu":
                    info = np.iinfo(dtype)
                    if not info.min <= int(value) <= info.max:
                        if dtype.kind == "u" and -(info.max // 2) - 1 <= int(value) < 0:
                            raw = np.array(int(value), dtype=dtype.name.replace("uint", "int")).tobytes()
                        else:
                            raise OverflowError(f"{where}: {value} does not fit in {dtype.name}")
                    else:
                        raw = np.array(int(value), dtype=dtype).tobytes()
                else:
                    raw = np.array(value, dtype=dtype).tobytes()
            else:
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
        if self.module.abi == "numba":
            args = _numba_args(args)
        n = len(self.ptx_params)
        check_count(self.name, self.params, n, len(args))
        arch = 90 if self.module.arch.startswith("sm_9") else 80
        from ...course.limits import SHARED_OPTIN

        limit = SHARED_OPTIN[arch]
        if shared_mem > limit:
            raise ValueError(f"{self.name}: {shared_mem} B of dynamic shared memory is more than a block can have "
                             f"on {self.module.arch} ({limit} B)")
        buffers: list[tuple[int, np.ndarray, np.ndarray]] = []
        infos: dict[int, errors.ArgInfo] = {}
        maps: list[tuple[int, TensorMap]] = []
        packed = [self._pack(i, a, buffers, infos, maps) for i, a in enumerate(args)]
        offsets, total = self._layout()
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
                    if isinstance(args[i], np.ndarray) and len(packed[i]) == 8 and not isinstance(args[i], TensorMap):
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
                blob = bytearray(max(total, 1))
                for i, raw in enumerate(packed):
                    blob[offsets[i]:offsets[i] + len(raw)] = raw
                params = (ctypes.c_uint8 * len(blob)).from_buffer(blob)
                nworkers = workers if workers is not None else 1
                flags = (1 if race else 0) | (2 if reverse else 0) | (TMA_ORDERS[tma_order] << 2) | \
                    ((limit // 1024) << 8)
                rt.tkemu_interp_turns(*self.module.turns)
                failed = rt.tkemu_interp_launch(self.module._handle, self.entry, ctypes.addressof(params), total, *g,
                                                *b, int(shared_mem), arch, int(nworkers), flags, float(time_limit),
                                                _GLOBAL_SLOT)
                if failed == 2:
                    raise RuntimeError((rt.tkemu_interp_error() or b"").decode())
                for slot, orig, host in buffers:
                    ctypes.memmove(host.ctypes.data, addresses[slot], host.nbytes)
                    if host is not orig and orig.flags.writeable:
                        orig[...] = host
                error = (rt.tkemu_error() or b"").decode(errors="replace")
                warnings = json.loads((rt.tkemu_warnings() or b"[]").decode(errors="replace") or "[]")
                output = (rt.tkemu_output() or b"").decode(errors="replace")
                stats = json.loads((rt.tkemu_stats() or b"{}").decode(errors="replace") or "{}")
                counts = np.zeros(max(1, len(self.module.decoded.instrs)), np.uint64)
                concepts = np.zeros(len(CONCEPTS), np.uint64)
                rt.tkemu_interp_counts(self.module._handle, counts.ctypes.data, concepts.ctypes.data)
            finally:
                for slot in addresses:
                    rt.tkemu_buffer_unmap(slot)
        infos[_GLOBAL_SLOT] = errors.ArgInfo(-1, "the module's global variables", "", np.dtype(np.uint8), (0,), 0)
        ctx = errors.Context(Path(self.module.program), Path(self.module.program).name, infos, dict(addresses),
                             int(rt.tkemu_slot_bytes()), instr_where=self.module.where)
        executed: Counter[str] = Counter()
        names = self.module.decoded.opnames
        for i in np.nonzero(counts)[0]:
            executed[names[int(i)]] += int(counts[int(i)])
        result = LaunchResult([errors.render(w["message"], w, ctx) for w in warnings], output, tma_order,
                              int(stats.get("wgmma_max_in_flight", 0)))
        result.executed = dict(executed)
        result.counts = counts
        result.concepts = {k: int(v) for k, v in zip(CONCEPTS, concepts, strict=False)}
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
        return f"<tklab.emulate PtxKernel {self.name} (PTX, interpreted on the CPU)>"

