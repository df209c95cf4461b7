"""A numba exercise's kernel → PTX, compiled in a sandboxed child whose only product is the PTX text.

Why: numba's CUDA simulator runs a kernel as Python in the process that sends the outputs, so a kernel body can
reach that process (a generator's frame leads to ``__import__`` past any list of forbidden names) and write the
"right" outputs itself. The graded path instead compiles the learner's ``@cuda.jit`` function to PTX with
numba-cuda's NVVM -- which needs no GPU -- in a child of its own ("numba-ptx": it imports the learner's file, so
whatever it sends is untrusted), and the parent hands that PTX to a second child ("emu"), where the PTX interpreter
runs it exactly as it runs a CUDA exercise's PTX. No learner Python runs where outputs are produced.

Public API: ``available() -> bool``, ``child(spec, path, chan)`` (mode "numba-ptx"; the checking process asks for
it through the runner: ``tklab.grading.running``).
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any


@functools.cache
def available() -> bool:
    """Can numba-cuda compile to PTX here (its NVVM is installed: a pip wheel on Linux; none on macOS)?"""
    if os.environ.get("TKLAB_NO_NUMBA_PTX", "") in ("1", "true", "yes"):
        return False
    import subprocess
    import sys

    code = ("import os; os.environ['NUMBA_ENABLE_CUDASIM']='0'\n"
            "from numba import cuda\n"
            "def k(x):\n    x[0] = 1.0\n"
            "from numba import float32\n"
            "cuda.compile_ptx(k, (float32[::1],), cc=(7, 5))\n")
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120,
                             env={**os.environ, "NUMBA_ENABLE_CUDASIM": "0"})
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0


def _cc(arch: str) -> tuple[int, int]:
    digits = "".join(ch for ch in arch if ch.isdigit())
    return (int(digits[0]), int(digits[1])) if len(digits) >= 2 else (7, 5)


def child(spec: Any, path: Path, chan: Any) -> None:
    """In the "numba-ptx" child: import the learner's file, compile its kernel for the first case's argument types,
    send the PTX (one frame, data only)."""
    import numpy as np

    from .in_child import import_file, stage

    stage("importing")
    module = import_file(path, f"tklab_learner_{spec.id}")
    kernel = getattr(module, spec.kernel, None)
    py_func = getattr(kernel, "py_func", None)
    if py_func is None:
        raise TypeError(f"{spec.kernel} in {path.name} is not a @cuda.jit kernel: decorate the function with "
                        "@cuda.jit")
    import numba
    from numba import cuda

    dims = spec.cases[0]
    rng = np.random.default_rng(0)
    arrays = dict(spec.inputs(rng, dims))
    for name, (shape, dtype) in spec.outputs(dims).items():
        arrays[name] = np.zeros(shape, dtype)
    signature = tuple(numba.typeof(a) for a in spec.args(arrays, dims))
    stage("compiling to PTX")
    ptx, _ = cuda.compile_ptx(py_func, signature, cc=_cc(spec.arch), lineinfo=True)
    chan.send("device", name="numba-cuda's NVVM (PTX for the CPU interpreter)")
    chan.send("ptx", ptx.encode())
