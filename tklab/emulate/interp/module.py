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
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ...run import signature
from ...toolchain.compiler import KernelsByName
from .. import errors
from ..arguments import Arguments, LaunchResult, Param, checked_launch, finish, settle
from ..module import _LOCK
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
            from ...toolchain.compiler import plain_name

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

    def _params(self) -> list[Param]:
        out = []
        for i, p in enumerate(self.ptx_params):
            decl = self.params[i] if self.params else None
            scalar = _PTX_SCALARS.get(p.ptype) if p.count is None else None
            out.append(Param(p.size, decl.pointer if decl is not None else (False if p.size != 8 else None), decl,
                             scalar))
        return out

    def __call__(self, grid: Any, block: Any, args: Sequence[Any] = (), *, shared_mem: int = 0, stream: Any = None,
                 sync: bool = False, race: bool = True, time_limit: float = 60.0, workers: int | None = None,
                 reverse: bool = False, tma_order: str = "delayed") -> LaunchResult:
        """Run the kernel on the CPU (see the module docstring); arrays are updated in place."""
        launch = checked_launch(self.name, grid, block, args, declared=self.params, count=len(self.ptx_params),
                                arch=self.module.arch, shared_mem=shared_mem, race=race, reverse=reverse,
                                tma_order=tma_order, convert=_numba_args if self.module.abi == "numba" else None)
        packing = Arguments(self.name, self._params(), launch.args, slots=_GLOBAL_SLOT)
        total = max((p.offset + p.size for p in self.ptx_params), default=0)
        rt = self.module._rt
        decoded = self.module.decoded
        with _LOCK:
            try:
                blob = bytearray(max(total, 1))  # the entry's parameters, laid out as its .param list says
                for p, raw in zip(self.ptx_params, packing.mapped(rt), strict=True):
                    blob[p.offset:p.offset + len(raw)] = raw
                params = (ctypes.c_uint8 * len(blob)).from_buffer(blob)
                rt.tkemu_interp_turns(*self.module.turns)
                failed = rt.tkemu_interp_launch(self.module._handle, self.entry, ctypes.addressof(params), total,
                                                *launch.grid, *launch.block, int(shared_mem), launch.arch,
                                                int(workers if workers is not None else 1), launch.flags,
                                                float(time_limit), _GLOBAL_SLOT)
                if failed == 2:
                    raise RuntimeError((rt.tkemu_interp_error() or b"").decode())
                packing.copy_back()
                counts = np.zeros(max(1, len(decoded.instrs)), np.uint64)
                concepts = np.zeros(len(CONCEPTS), np.uint64)
                rt.tkemu_interp_counts(self.module._handle, counts.ctypes.data, concepts.ctypes.data)
                executed: Counter[str] = Counter()
                for i in np.nonzero(counts)[0]:
                    executed[decoded.opnames[int(i)]] += int(counts[int(i)])
                packing.infos[_GLOBAL_SLOT] = errors.ArgInfo(-1, "the module's global variables", "",
                                                             np.dtype(np.uint8), (0,), 0)
                result, error = finish(rt, packing, failed, library=Path(self.module.program),
                                       program=Path(self.module.program).name, tma_order=tma_order,
                                       instr_where=self.module.where, executed=dict(executed), counts=counts,
                                       concepts={k: int(v) for k, v in zip(CONCEPTS, concepts, strict=False)})
            finally:
                packing.done(rt)
        return settle(self, result, error)

    def __repr__(self) -> str:
        return f"<tklab.emulate PtxKernel {self.name} (PTX, interpreted on the CPU)>"

