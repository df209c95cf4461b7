"""The ``%%tk`` cell magic: a notebook cell of CUDA C++ becomes kernels you can call by name.

Usage (after ``%load_ext tklab``)::

    %%tk [--arch sm_90a] [--name gemm.cu] [--module mod] [--quiet] [-O ...]
    extern "C" __global__ void saxpy(float* y, const float* x, float a, int n) { ... }

Afterwards ``saxpy`` is a ``tklab.Kernel`` in the notebook (``saxpy(grid, block, (y, x, 2.0, n))``) and
the module's summary (registers, shared memory, spills, instruction mix) is shown under the cell.
Without a GPU and without ``--arch`` the cell is compiled for ``sm_90a``, the course's target, so the
inspection half still works. Compile errors point at the cell's own line numbers; any other mistake
(an unknown option, a bad arch) is one line, not a traceback through tklab. A kernel declared without
``extern "C"`` is bound under its plain name, with a note (its symbol is C++-mangled). Without NVRTC
(macOS) the cell is built for the CPU emulator instead and says so: its kernels run on NumPy arrays.

Public API: ``run_cell(line, cell, namespace)``, ``MagicError``, ``EmulatedKernel``, ``register(ipython)``.
"""

from __future__ import annotations

import argparse
import shlex
from typing import Any

from .toolchain import compiler, locate


class MagicError(ValueError):
    """A mistake in a ``%%tk`` cell's options or arguments; IPython shows it as one line."""

    def _render_traceback_(self) -> list[str]:
        return [f"%%tk: {self}"]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # argparse would print usage to stderr and exit
        raise MagicError(message)


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="%%tk", add_help=False)
    p.add_argument("--arch", default=None)
    p.add_argument("--name", default="cell.cu")
    p.add_argument("--module", default=None, help="also bind the Module under this name")
    p.add_argument("--quiet", action="store_true", help="do not display the summary")
    p.add_argument("-O", "--option", action="append", default=[], dest="options",
                   help="extra NVRTC option (repeatable), e.g. -O=-DTILE=64")
    return p


def _bind(mod: compiler.Module, namespace: dict[str, Any]) -> list[str]:
    """Bind each kernel under a Python name; notes for kernels whose symbol is C++-mangled."""
    notes = []
    for kernel in mod:
        if not kernel.name.startswith("_Z") and kernel.name.isidentifier():
            namespace[kernel.name] = kernel
            continue
        plain = compiler.plain_name(kernel.name)
        if plain is not None and mod.plain_names.get(plain) == kernel.name:
            namespace[plain] = mod[plain]
            notes.append(f"{plain} is not declared extern \"C\": its symbol is {kernel.name}; bound as {plain} "
                         f"(write extern \"C\" __global__ void {plain}(...) to keep the plain name)")
        else:
            notes.append(f"{kernel.name} is a C++-mangled kernel (overloaded, templated or in a namespace): "
                         "not bound; declare it extern \"C\", or use tklab.compile(..., name_expressions=[...])")
    return notes


def run_cell(line: str, cell: str, namespace: dict[str, Any]) -> compiler.Module:
    """Compile ``cell`` with the options on the magic ``line`` and bind its kernels into ``namespace``.

    Raises ``CompileError`` for errors in the cell's code and ``MagicError`` for anything else.
    """
    try:
        args = _parser().parse_args(shlex.split(line))
    except (MagicError, ValueError) as e:
        raise MagicError(f"could not understand the options {line!r} ({e}); "
                         "use --arch, --name, --module, --quiet, -O") from None
    arch = args.arch or compiler.default_arch()
    missing = locate.nvrtc_missing()
    if missing is not None:
        return _emulated(cell, arch, args, namespace, missing)
    try:
        mod = compiler.compile(cell, arch=arch, name=args.name, options=tuple(args.options))
    except compiler.CompileError:
        raise
    except (ValueError, TypeError) as e:
        raise MagicError(str(e)) from None
    mod.notes = _bind(mod, namespace)
    if args.module:
        if not args.module.isidentifier():
            raise MagicError(f"--module {args.module!r} is not a Python name")
        namespace[args.module] = mod
    return mod


class EmulatedKernel:
    """A ``%%tk`` kernel built for the CPU emulator (no NVRTC here): it launches like the GPU one, on NumPy
    arrays; asking for what only NVRTC makes (SASS, registers, spills) says so instead of AttributeError."""

    NEEDS_NVRTC = frozenset({"sass", "histogram", "registers", "spill_bytes", "shared_bytes", "stack_bytes", "ptx",
                             "cubin", "module_sass", "main_loop"})

    def __init__(self, kernel: Any, missing: str):
        self._kernel, self._missing = kernel, missing

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._kernel(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        if name in EmulatedKernel.NEEDS_NVRTC:
            raise locate.NvrtcUnavailable(f"{self._kernel.name}.{name} is read from what NVRTC compiles: "
                                             f"{self._missing}")
        return getattr(self._kernel, name)

    def __repr__(self) -> str:
        return repr(self._kernel)


def _emulated(cell: str, arch: str, args: argparse.Namespace, namespace: dict[str, Any], missing: str) -> Any:
    """Without NVRTC: the cell is built for the CPU emulator instead, its kernels bound the same way (they run on
    NumPy arrays); the first note says what needs NVRTC. No emulator either: the NVRTC sentence, as an error."""
    from . import emulate

    try:
        mod: Any = emulate.compile(cell, arch=arch, name=args.name, options=tuple(args.options))
    except emulate.EmulationCompileError:
        raise
    except Exception as e:  # noqa: BLE001 - no host C++ compiler: only the NVRTC sentence is useful
        raise MagicError(f"{missing} (and the CPU emulator cannot build here: {e})") from None
    bound = []
    for kname in mod.kernels:
        plain = kname if kname.isidentifier() and not kname.startswith("_Z") else compiler.plain_name(kname)
        if plain is not None:
            namespace[plain] = EmulatedKernel(mod[kname], missing)
            bound.append(plain)
    mod.notes = [f"{missing}. This cell was built for the CPU emulator instead: {', '.join(bound) or 'no kernel'} "
                 "run on NumPy arrays (correctness only); registers, SASS and timings need NVRTC"]
    if args.module:
        if not args.module.isidentifier():
            raise MagicError(f"--module {args.module!r} is not a Python name")
        namespace[args.module] = mod
    return mod


def register(ipython: Any) -> None:
    from IPython.core.magic import register_cell_magic
    from IPython.display import display

    @register_cell_magic("tk")
    def tk(line: str, cell: str) -> None:
        mod = run_cell(line, cell, ipython.user_ns)
        for note in mod.notes:
            print(f"note: {note}")
        if "--quiet" not in line:
            display(mod)

    del tk
