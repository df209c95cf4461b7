"""Running one exercise in a separate process, with a time limit.

Why a separate process: a learner's kernel can fault (an illegal address, a ``__trap()``), which leaves
the CUDA context of its process unusable for good, or it can never finish. Run in a child process, the
first becomes a clear message and the second a timeout, and the notebook or the grading loop that
asked survives both. The same holds for a numba kernel in the CPU simulator (an endless Python loop,
a crash of the interpreter).

Two sides:

* parent: ``run_isolated(exercise_id, path, mode="gpu"|"sim", timeout=...)`` → ``RunOutcome``; it
  starts ``python -m tklab.runner ...``, kills the child's whole process group at the time limit and
  tells a crash (signal, exit code) from a wrong answer;
* child: ``python -m tklab.runner --exercise ID --file PATH --mode gpu|sim --out result.json
  [--bench] [--seed N]`` builds fresh random inputs, poisons the outputs with NaN, launches, compares
  with the reference and (``--bench``, GPU) times the kernel against the library in the same run.
  It prints ``@@tklab-stage <what>`` lines as it goes, so a hang is reported with where it happened.

Public API: ``run_isolated``, ``RunOutcome``, ``compare``, ``main(argv)`` (the child).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

STAGE = "@@tklab-stage "
_PACKAGE_PARENT = Path(__file__).resolve().parent.parent

#: Driver error names → what a learner should look for.
_CUDA_HINTS = {
    "ILLEGAL_ADDRESS": "the kernel read or wrote outside its arrays: check the bounds tests and the index "
                       "arithmetic",
    "MISALIGNED_ADDRESS": "a wide load or store (float4, a 32-bit pair of bf16) used an address that is not "
                          "a multiple of its size",
    "LAUNCH_FAILED": "the kernel stopped on a fault (a __trap(), or an illegal access)",
    "ILLEGAL_INSTRUCTION": "the kernel executed an instruction this GPU cannot run, or hit a trap",
    "ASSERT": "a device-side assert() failed",
    "LAUNCH_OUT_OF_RESOURCES": "the launch asks for more registers or shared memory than a block may use",
    "LAUNCH_TIMEOUT": "the kernel ran too long",
    "ILLEGAL_STATE": "the GPU context was already broken by an earlier fault",
}


# ---- comparison -----------------------------------------------------------------------------------

def compare(name: str, got: np.ndarray, expected: np.ndarray, rtol: float, atol: float) -> dict[str, Any]:
    """Element-wise ``|got - expected| <= atol + rtol·|expected|``; NaN (an unwritten element) fails.

    On failure: the first wrong element in row-major order, counts, and a small window of both arrays
    around it (at most 4 rows × 6 columns) for the learner to look at.
    """
    got64 = np.asarray(got, dtype=np.float64)
    exp64 = np.asarray(expected, dtype=np.float64)
    if got64.shape != exp64.shape:
        return {"ok": False, "output": name, "reason": f"{name} has shape {got64.shape}, expected {exp64.shape}"}
    with np.errstate(invalid="ignore"):
        err = np.abs(got64 - exp64)
        good = err <= atol + rtol * np.abs(exp64)
    good &= ~(np.isnan(got64) & ~np.isnan(exp64))
    finite = err[np.isfinite(err)]
    max_err = float(finite.max()) if finite.size else 0.0
    wrong = int(good.size - np.count_nonzero(good))
    if wrong == 0:
        return {"ok": True, "output": name, "max_abs_err": max_err}
    first = tuple(int(i) for i in np.argwhere(~good)[0])
    g2 = got64.reshape(got64.shape[0], -1) if got64.ndim >= 2 else got64.reshape(1, -1)
    e2 = exp64.reshape(g2.shape)
    b2 = (~good).reshape(g2.shape)
    r, c = (first[0], int(np.ravel_multi_index(first[1:], got64.shape[1:]))) if got64.ndim >= 2 else (0, first[0])
    r0, c0 = max(0, min(r - 1, g2.shape[0] - 4)), max(0, min(c - 2, g2.shape[1] - 6))
    win = (slice(r0, r0 + 4), slice(c0, c0 + 6))
    return {
        "ok": False, "output": name, "index": list(first), "got": float(got64[first]),
        "expected": float(exp64[first]), "wrong": wrong, "total": int(good.size),
        "unwritten": int(np.count_nonzero(np.isnan(got64) & ~np.isnan(exp64))), "max_abs_err": max_err,
        "window": {"origin": [r0, c0], "got": g2[win].tolist(), "expected": e2[win].tolist(),
                   "bad": b2[win].tolist(), "matrix": got64.ndim >= 2},
    }


# ---- child ----------------------------------------------------------------------------------------

_current_stage = "starting"


def _stage(text: str) -> None:
    global _current_stage
    _current_stage = text
    print(f"{STAGE}{text}", flush=True)


def _describe(exc: BaseException, learner_file: Path) -> dict[str, str]:
    """A learner-facing description of an exception raised while running the kernel."""
    text = f"{type(exc).__name__}: {exc}"
    for key, hint in _CUDA_HINTS.items():
        if key in text or key.lower().replace("_", " ") in text.lower():
            return {"kind": "cuda", "message": text.split(". After a fault")[0], "hint": hint}
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if Path(f.filename).resolve() == learner_file.resolve()]
    where = f" (at {learner_file.name}:{frames[-1].lineno}: {frames[-1].line})" if frames else ""
    return {"kind": "python", "message": text + where, "hint": ""}


def _case_seed(seed: int, i: int) -> np.random.Generator:
    return np.random.default_rng([seed, i])


def _run_cases(spec: Any, cases: Sequence[dict[str, int]], seed: int, xp: Any,
               launch: Callable[[dict[str, Any], dict[str, int]], None], result: dict[str, Any]) -> bool:
    """Fresh inputs, NaN-poisoned outputs, launch, compare: for each case until the first failure."""
    from .specs import dims_text

    for i, dims in enumerate(cases):
        host = spec.inputs(_case_seed(seed, i), dims)
        arrays = {k: xp.asarray(v) for k, v in host.items()}
        outs = spec.outputs(dims)
        for name, (shape, dtype) in outs.items():
            arrays[name] = xp.full(shape, np.nan, dtype=dtype)
        _stage(f"running {dims_text(dims)}")
        launch(arrays, dims)
        expected = spec.reference(host, dims)
        entry: dict[str, Any] = {"dims": dims, "ok": True, "outputs": []}
        for name in outs:
            got = arrays[name] if xp is np else xp.asnumpy(arrays[name])
            cmp = compare(name, got, expected[name], spec.rtol, spec.atol)
            entry["outputs"].append(cmp)
            entry["ok"] = entry["ok"] and cmp["ok"]
        result["cases"].append(entry)
        if not entry["ok"]:
            return False
    return True


def _bench(spec: Any, seed: int, launch: Callable[[dict[str, Any], dict[str, int]], None]) -> dict[str, Any]:
    """Learner vs library at the benchmark size, same inputs, same process, same GPU, back to back."""
    import cupy as cp

    from . import gpu
    from .bench import bench

    b = spec.bench
    dims = b.dims
    _stage("benchmark: preparing inputs")
    arrays = {k: cp.asarray(v) for k, v in spec.inputs(_case_seed(seed, 99), dims).items()}
    for name, (shape, dtype) in spec.outputs(dims).items():
        arrays[name] = cp.full(shape, np.nan, dtype=dtype)
    base = b.baseline(arrays, dims)
    _stage("benchmark: checking the result at this size")
    launch(arrays, dims)
    gpu.synchronize()
    expect = b.expect(arrays, dims) if b.expect is not None else base()
    got = arrays[b.output].astype(cp.float64)
    ref = cp.asarray(expect).astype(cp.float64)
    ok = bool(cp.all(cp.abs(got - ref) <= b.atol + b.rtol * cp.abs(ref)).item())
    out: dict[str, Any] = {"dims": dims, "baseline": b.baseline_name, "target": b.target}
    if not ok:
        out["error"] = "the output is wrong at the benchmark size, so its speed is not reported"
        return out
    del expect, got, ref
    _stage("benchmark: timing")
    mine = bench(lambda: launch(arrays, dims), flops=b.flops(dims) if b.flops else None,
                 bytes=b.bytes(dims) if b.bytes else None, name=spec.id, ceilings=False, progress=False,
                 target_ms=150.0)
    lib = bench(base, flops=mine.flops, bytes=mine.bytes, name=b.baseline_name, ceilings=False,
                progress=False, target_ms=150.0)
    out.update(ms=mine.ms, baseline_ms=lib.ms, ratio=lib.ms / mine.ms, tflops=mine.tflops,
               baseline_tflops=lib.tflops, gbps=mine.gbps, baseline_gbps=lib.gbps, device=gpu.name())
    return out


def _run_cuda(spec: Any, path: Path, seed: int, do_bench: bool, result: dict[str, Any]) -> None:
    import cupy as cp

    from . import compile as tk_compile
    from . import gpu

    arch = gpu.arch()
    if spec.hopper_only and not arch.startswith("sm_90"):
        result["skipped"] = f"this exercise needs a Hopper GPU (sm_90a); this one is {arch}"
        return
    _stage("compiling")
    mod = tk_compile(path.read_text(), arch=arch, name=path.name, options=spec.options)
    kernel = mod[spec.kernel]
    result["device"] = gpu.name()

    def launch(arrays: dict[str, Any], dims: dict[str, int]) -> None:
        shape = spec.launch(dims)
        kernel(shape.grid, shape.block, spec.args(arrays, dims), shared_mem=shape.shared_mem)

    def launch_sync(arrays: dict[str, Any], dims: dict[str, int]) -> None:
        launch(arrays, dims)
        gpu.synchronize()

    result["ok"] = _run_cases(spec, spec.cases, seed, cp, launch_sync, result)
    if result["ok"] and do_bench and spec.bench is not None:
        result["speed"] = _bench(spec, seed, launch)


def _import_file(path: Path, name: str) -> Any:
    mod_spec = importlib.util.spec_from_file_location(name, path)
    if mod_spec is None or mod_spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(module)
    return module


def _run_numba(spec: Any, path: Path, mode: str, seed: int, do_bench: bool, result: dict[str, Any]) -> None:
    simulate = mode == "sim"
    if simulate and os.environ.get("NUMBA_ENABLE_CUDASIM") != "1":
        raise RuntimeError("the simulator must be switched on before numba is imported "
                           "(NUMBA_ENABLE_CUDASIM=1 in the environment)")
    with contextlib.suppress(ImportError):
        from . import numba_compat

        numba_compat.patch()
    warnings.simplefilter("ignore")  # numba's performance hints about tiny grids are noise here
    _stage("importing")
    module = _import_file(path, f"tklab_learner_{spec.id}")
    kernel = getattr(module, spec.kernel, None)
    if kernel is None:
        raise AttributeError(f"{path.name} defines no function named {spec.kernel}")
    if simulate:
        result["device"] = "numba CUDA simulator (CPU)"
        xp: Any = np
        cases = spec.sim_cases
    else:
        import cupy as cp

        from . import gpu

        result["device"] = gpu.name()
        xp, cases = cp, spec.cases

    def launch(arrays: dict[str, Any], dims: dict[str, int]) -> None:
        shape = spec.launch(dims)
        kernel[shape.grid, shape.block](*spec.args(arrays, dims))

    def launch_sync(arrays: dict[str, Any], dims: dict[str, int]) -> None:
        launch(arrays, dims)
        if not simulate:
            from . import gpu

            gpu.synchronize()

    result["ok"] = _run_cases(spec, cases, seed, xp, launch_sync, result)
    if result["ok"] and do_bench and not simulate and spec.bench is not None:
        result["speed"] = _bench(spec, seed, launch)


def main(argv: Sequence[str] | None = None) -> int:
    """The child: run one exercise file here and write a JSON result. Exit 0 ok, 1 wrong, 3 error."""
    ap = argparse.ArgumentParser(prog="python -m tklab.runner", description="Run one exercise (child process).")
    ap.add_argument("--exercise", required=True)
    ap.add_argument("--file", required=True, type=Path)
    ap.add_argument("--mode", choices=("gpu", "sim"), default="gpu")
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--bench", action="store_true")
    ap.add_argument("--seed", type=int, default=None)
    args = ap.parse_args(list(sys.argv[1:] if argv is None else argv))
    from . import specs

    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "little")
    result: dict[str, Any] = {"exercise": args.exercise, "mode": args.mode, "seed": seed, "ok": False,
                              "cases": [], "error": None, "speed": None}
    try:
        spec = specs.get(args.exercise)
        if spec.language == "numba":
            _run_numba(spec, args.file, args.mode, seed, args.bench, result)
        elif args.mode == "sim":
            raise ValueError(f"{spec.id} is CUDA C++: it runs on a GPU only")
        else:
            _run_cuda(spec, args.file, seed, args.bench, result)
    except Exception as e:  # noqa: BLE001 - everything a learner's code raises becomes the verdict
        result["ok"] = False
        result["error"] = _describe(e, args.file)
    result["stage"] = _current_stage
    tmp = args.out.with_suffix(".tmp")
    tmp.write_text(json.dumps(result))
    tmp.replace(args.out)
    if result["error"]:
        return 3
    return 0 if result["ok"] or result.get("skipped") else 1


# ---- parent ---------------------------------------------------------------------------------------

@dataclass
class RunOutcome:
    """What happened to the child: ``status`` is ``ok``, ``wrong``, ``error`` (an exception in the kernel's
    run, e.g. a CUDA fault), ``crashed`` (the process died), ``timeout`` or ``skipped``."""

    status: str
    message: str
    result: dict[str, Any] | None = None
    returncode: int | None = None
    stage: str = ""
    seconds: float = 0.0
    output: str = ""
    notes: list[str] = field(default_factory=list)


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(code).name
    except ValueError:
        return f"signal {code}"


def run_isolated(exercise_id: str, path: str | Path, *, mode: str = "gpu", timeout: float = 60.0,
                 bench: bool = False, seed: int | None = None, env: dict[str, str] | None = None) -> RunOutcome:
    """Run ``path`` as exercise ``exercise_id`` in a child process; never raises for the learner's faults."""
    path = Path(path).resolve()
    with tempfile.TemporaryDirectory(prefix="tklab-run-") as tmp:
        out = Path(tmp) / "result.json"
        cmd = [sys.executable, "-m", "tklab.runner", "--exercise", exercise_id, "--file", str(path),
               "--mode", mode, "--out", str(out)]
        if bench:
            cmd.append("--bench")
        if seed is not None:
            cmd += ["--seed", str(seed)]
        child_env = dict(os.environ if env is None else env)
        child_env["PYTHONPATH"] = os.pathsep.join(p for p in (str(_PACKAGE_PARENT), child_env.get("PYTHONPATH")) if p)
        child_env["PYTHONUNBUFFERED"] = "1"
        child_env["NUMBA_ENABLE_CUDASIM"] = "1" if mode == "sim" else "0"
        start = time.monotonic()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env=child_env, start_new_session=True, cwd=tmp)
        timed_out = False
        try:
            output, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            output, _ = proc.communicate()
        seconds = time.monotonic() - start
        stages = [ln[len(STAGE):] for ln in output.splitlines() if ln.startswith(STAGE)]
        stage = stages[-1] if stages else "starting"
        printed = "\n".join(ln for ln in output.splitlines() if not ln.startswith(STAGE))
        result = json.loads(out.read_text()) if out.exists() else None
    tail = printed[-2000:]
    if timed_out:
        return RunOutcome("timeout", f"no result within {timeout:g} s, while {stage}: an endless loop (a loop "
                          "bound that never changes, a barrier not every thread reaches) or a far too slow "
                          "kernel; the run was stopped", result, None, stage, seconds, tail)
    if result is None:
        code = proc.returncode
        how = (f"was killed by {_signal_name(-code)}" if code is not None and code < 0
               else f"exited with code {code}")
        last = [ln for ln in printed.splitlines() if ln.strip()][-3:]
        detail = f"; its last output: {' | '.join(last)}" if last else ""
        return RunOutcome("crashed", f"the run crashed while {stage}: the process {how}{detail}", None, code,
                          stage, seconds, tail)
    if result.get("skipped"):
        return RunOutcome("skipped", result["skipped"], result, proc.returncode, stage, seconds, tail)
    if result.get("error"):
        err = result["error"]
        hint = f" ({err['hint']})" if err.get("hint") else ""
        stage = result.get("stage", stage)
        return RunOutcome("error", f"the run failed while {stage}: {err['message']}{hint}", result,
                          proc.returncode, stage, seconds, tail)
    if not result.get("ok"):
        return RunOutcome("wrong", "wrong result", result, proc.returncode, stage, seconds, tail)
    return RunOutcome("ok", "correct", result, proc.returncode, stage, seconds, tail)


if __name__ == "__main__":
    raise SystemExit(main())
