"""The ``%%tk`` cell magic: a notebook cell of CUDA C++ becomes kernels you can call by name.

Usage (after ``%load_ext tklab``)::

    %%tk [--arch sm_90a] [--name gemm.cu] [--module mod] [--quiet] [-O ...]
    extern "C" __global__ void saxpy(float* y, const float* x, float a, int n) { ... }

Afterwards ``saxpy`` is a ``tklab.Kernel`` in the notebook (``saxpy(grid, block, (y, x, 2.0, n))``) and
the module's summary (registers, shared memory, spills, instruction mix) is shown under the cell.
Without a GPU and without ``--arch`` the cell is compiled for ``sm_90a``, the course's target, so the
inspection half still works. Compile errors point at the cell's own line numbers.
"""

from __future__ import annotations

import argparse
import shlex
from typing import Any

from . import compiler, gpu

COURSE_ARCH = "sm_90a"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="%%tk", add_help=False)
    p.add_argument("--arch", default=None)
    p.add_argument("--name", default="cell.cu")
    p.add_argument("--module", default=None, help="also bind the Module under this name")
    p.add_argument("--quiet", action="store_true", help="do not display the summary")
    p.add_argument("-O", "--option", action="append", default=[], dest="options",
                   help="extra NVRTC option (repeatable), e.g. -O=-DTILE=64")
    return p


def run_cell(line: str, cell: str, namespace: dict[str, Any]) -> compiler.Module:
    """Compile ``cell`` with the options on the magic ``line`` and bind its kernels into ``namespace``."""
    try:
        args = _parser().parse_args(shlex.split(line))
    except SystemExit:
        raise ValueError(f"%%tk: could not understand the options {line!r}; "
                         "use --arch, --name, --module, --quiet, -O") from None
    arch = args.arch or (gpu.arch() if gpu.available() else COURSE_ARCH)
    mod = compiler.compile(cell, arch=arch, name=args.name, options=tuple(args.options))
    for kernel in mod:
        if kernel.name.isidentifier():
            namespace[kernel.name] = kernel
    if args.module:
        namespace[args.module] = mod
    return mod


def register(ipython: Any) -> None:
    from IPython.core.magic import register_cell_magic
    from IPython.display import display

    @register_cell_magic("tk")
    def tk(line: str, cell: str) -> None:
        mod = run_cell(line, cell, ipython.user_ns)
        if "--quiet" not in line:
            display(mod)

    del tk
