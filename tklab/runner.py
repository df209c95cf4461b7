"""Running one exercise in a separate, sandboxed process; the verdict is reached in the parent.

Why a separate process: a learner's kernel can fault (an illegal address, a ``__trap()``), which leaves
the CUDA context of its process unusable for good, or it can never finish. Run in a child process, the
first becomes a clear message and the second a timeout, and the notebook or the grading loop that
asked survives both. The same holds for a numba kernel in the CPU simulator (an endless Python loop,
a crash of the interpreter). The child runs in ``tklab.sandbox``: a fresh folder, a clean environment,
resource limits, a wall-clock limit for its whole process tree, bubblewrap where the machine has it.

Why the parent judges: the child runs the learner's code, so anything the child says could have been
written by that code. The parent draws the inputs (fresh random numbers), keeps its own copy, computes
the reference itself, and reads back only raw output arrays through a pipe it owns; it checks each
array's dtype and shape and compares. Nothing the child writes can say "passed". Speed is measured in
the child, next to the kernel: the parent checks the numbers are sane and recomputes the ratio, and
speed is never a condition of passing.

Two sides:

* parent: ``run_isolated(exercise_id, path, mode="gpu"|"sim", timeout=...)`` → ``RunOutcome``;
* child: ``python -m tklab.runner --exercise ID --file NAME --mode MODE --channel FD [--limits JSON]
  [--bench] [--bench-seed N]``, started in the run's folder, which holds the learner's file, the cases
  (``cases.json``) and their inputs (``case-<i>-<name>.npy``). It poisons the outputs with NaN,
  launches, and sends each case's outputs back as ``.npy`` frames on the channel; it prints
  ``@@tklab-stage <what>`` lines as it goes, so a hang is reported with where it happened.

Modes (``MODES``) say how a run happens in the child and what a correct result there establishes
(``Evidence``): ``gpu`` (the exercise on this machine's GPU) and ``sim`` (numba exercises in numba's
CUDA simulator, on the CPU). Another way to run an exercise (CUDA C++ on a CPU emulator, say) is one
more ``Mode`` given to ``register_mode``: the parent's side (inputs, reference, comparison, sandbox)
stays as it is.

Public API: ``run_isolated``, ``RunOutcome``, ``Evidence``, ``Mode``, ``MODES``, ``register_mode``,
``choose_mode``, ``compare``, ``draw_inputs``, ``judge``, ``ChildIO``, ``frame``, ``read_frames``,
``main(argv)`` (the child).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import math
import os
import shutil
import signal
import struct
import sys
import tempfile
import traceback
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

import numpy as np

from .arrays import as_values, isclose, poisoned

STAGE = "@@tklab-stage "
_PACKAGE_PARENT = Path(__file__).resolve().parent.parent
_SOLUTIONS = _PACKAGE_PARENT / "solutions"

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

#: Environment variables a child may need to find the GPU and its libraries; nothing else is passed on.
_PASSED_ENV = ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH",
               "TKLAB_CUDA_DIR", "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES")


class Evidence(str, Enum):
    """How a check established that a kernel's output is right (or that it could not)."""

    GPU = "gpu"  # ran on this machine's GPU
    SIMULATOR = "simulator"  # ran in numba's CUDA simulator (numba exercises, on the CPU)
    CPU_EMULATION = "cpu-emulation"  # CUDA C++ run by a CPU emulator: a mode for it registers itself
    NOT_ESTABLISHED = "not-established"  # nothing ran: static checks only


# ---- comparison -----------------------------------------------------------------------------------

def compare(name: str, got: np.ndarray, expected: np.ndarray, rtol: float, atol: float) -> dict[str, Any]:
    """Element-wise ``tklab.arrays.isclose`` (``|got - expected| <= atol + rtol·|expected|``; NaN, an unwritten
    element, fails).

    On failure: the first wrong element in row-major order, counts, and a small window of both arrays
    around it (at most 4 rows × 6 columns) for the learner to look at. uint16 outputs are compared as
    the bf16 values they hold (``as_values``).
    """
    got64 = np.asarray(as_values(np.asarray(got)), dtype=np.float64)
    exp64 = np.asarray(expected, dtype=np.float64)
    if got64.shape != exp64.shape:
        return {"ok": False, "output": name, "reason": f"{name} has shape {got64.shape}, expected {exp64.shape}"}
    good = isclose(got64, exp64, rtol, atol)
    with np.errstate(invalid="ignore"):
        err = np.abs(got64 - exp64)
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


# ---- the channel: frames the child sends, the parent reads ----------------------------------------

_HEADER = struct.Struct(">I")
_MAX_HEADER = 1 << 16


def frame(message: str, payload: bytes = b"", /, **fields: Any) -> bytes:
    """One message: a 4-byte length, a JSON header (``type``, ``nbytes``, fields), then ``nbytes`` of payload."""
    head = json.dumps({**fields, "type": message, "nbytes": len(payload)}, default=str).encode()
    return _HEADER.pack(len(head)) + head + payload


class ChannelError(ValueError):
    """The bytes on the channel are not what a runner child sends."""


def read_frames(data: bytes) -> list[tuple[dict[str, Any], bytes]]:
    """Split the channel's bytes into (header, payload) pairs; raises ChannelError on anything malformed."""
    out = []
    pos = 0
    while pos < len(data):
        if pos + _HEADER.size > len(data):
            raise ChannelError("a message is cut short")
        (n,) = _HEADER.unpack_from(data, pos)
        if n > _MAX_HEADER or pos + _HEADER.size + n > len(data):
            raise ChannelError("a message header is cut short or too long")
        try:
            head = json.loads(data[pos + _HEADER.size:pos + _HEADER.size + n])
        except ValueError:
            raise ChannelError("a message header is not JSON") from None
        if not isinstance(head, dict) or not isinstance(head.get("type"), str) or \
                not isinstance(head.get("nbytes"), int) or head["nbytes"] < 0:
            raise ChannelError("a message header lacks its type or size")
        start = pos + _HEADER.size + n
        end = start + head["nbytes"]
        if end > len(data):
            raise ChannelError(f"a {head['type']!r} message is cut short")
        out.append((head, bytes(data[start:end])))
        pos = end
    return out


def _array_from(payload: bytes, shape: tuple[int, ...], dtype: str, what: str) -> np.ndarray:
    """A raw ``.npy`` payload as an array of exactly ``shape`` and ``dtype``; no pickles, no objects."""
    try:
        arr = np.lib.format.read_array(io.BytesIO(payload), allow_pickle=False)
    except Exception as e:  # noqa: BLE001 - whatever is wrong with the bytes, they are not an array
        raise ChannelError(f"{what} is not array data ({type(e).__name__})") from None
    if arr.dtype != np.dtype(dtype) or arr.shape != tuple(shape):
        raise ChannelError(f"{what} came back as {arr.dtype}{list(arr.shape)}, not {np.dtype(dtype)}{list(shape)}")
    return arr


class ChildIO:
    """The child's side of a run: the parent's cases and inputs in, frames out."""

    def __init__(self, write: Callable[[bytes], Any], cases: Sequence[dict[str, int]],
                 inputs: Callable[[int], dict[str, np.ndarray]], bench_seed: int = 0):
        self._write, self.cases, self._inputs, self.bench_seed = write, list(cases), inputs, bench_seed

    @classmethod
    def from_folder(cls, fd: int, folder: Path, bench_seed: int) -> ChildIO:
        cases = json.loads((folder / "cases.json").read_text())
        out = os.fdopen(fd, "wb", buffering=0)

        def inputs(i: int) -> dict[str, np.ndarray]:
            return {p.name.split("-", 2)[2][:-4]: np.load(p, allow_pickle=False)
                    for p in sorted(folder.glob(f"case-{i}-*.npy"))}

        def write(data: bytes) -> None:
            out.write(data)

        return cls(write, cases, inputs, bench_seed)

    def inputs(self, i: int) -> dict[str, np.ndarray]:
        return self._inputs(i)

    def send(self, message: str, payload: bytes = b"", /, **fields: Any) -> None:
        self._write(frame(message, payload, **fields))

    def send_outputs(self, i: int, arrays: dict[str, np.ndarray]) -> None:
        for name, arr in arrays.items():
            buf = io.BytesIO()
            np.lib.format.write_array(buf, np.ascontiguousarray(arr), allow_pickle=False)
            self.send("output", buf.getvalue(), case=i, name=name)


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


def draw_inputs(spec: Any, cases: Sequence[dict[str, int]], seed: int) -> list[dict[str, np.ndarray]]:
    """The parent's inputs for each case: fresh random numbers from ``seed``."""
    return [spec.inputs(_case_seed(seed, i), dims) for i, dims in enumerate(cases)]


def _run_cases(spec: Any, chan: ChildIO, xp: Any, launch: Callable[[dict[str, Any], dict[str, int]], None]) -> bool:
    """The parent's inputs, NaN-poisoned outputs, launch, send the outputs back, for each case.

    The child also compares with the reference itself, only to stop early and to skip the benchmark of
    a wrong kernel; the verdict is the parent's comparison of what was sent.
    """
    from .specs import dims_text

    for i, dims in enumerate(chan.cases):
        host = chan.inputs(i)
        arrays = {k: xp.asarray(v) for k, v in host.items()}
        outs = spec.outputs(dims)
        for name, (shape, dtype) in outs.items():
            arrays[name] = poisoned(xp, shape, dtype)
        _stage(f"running {dims_text(dims)}")
        launch(arrays, dims)
        got = {name: (arrays[name] if xp is np else xp.asnumpy(arrays[name])) for name in outs}
        chan.send_outputs(i, got)
        expected = spec.reference(host, dims)
        if not all(compare(n, got[n], expected[n], spec.rtol, spec.atol)["ok"] for n in outs):
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
        arrays[name] = poisoned(cp, shape, dtype)
    base = b.baseline(arrays, dims)
    _stage("benchmark: checking the result at this size")
    launch(arrays, dims)
    gpu.synchronize()
    expect = b.expect(arrays, dims) if b.expect is not None else base()
    got = as_values(arrays[b.output])
    ref = cp.asarray(expect)
    if not bool(isclose(got, ref, b.rtol, b.atol).all()):
        return {"error": "the output is wrong at the benchmark size, so its speed is not reported"}
    del expect, got, ref
    _stage("benchmark: timing")
    mine = bench(lambda: launch(arrays, dims), flops=b.flops(dims) if b.flops else None,
                 bytes=b.bytes(dims) if b.bytes else None, name=spec.id, ceilings=False, progress=False,
                 target_ms=150.0)
    lib = bench(base, flops=mine.flops, bytes=mine.bytes, name=b.baseline_name, ceilings=False,
                progress=False, target_ms=150.0)
    return {"ms": mine.ms, "baseline_ms": lib.ms, "device": gpu.name()}


def _run_cuda(spec: Any, path: Path, chan: ChildIO, do_bench: bool) -> None:
    import cupy as cp

    from . import compile as tk_compile
    from . import gpu

    arch = gpu.arch()
    _stage("compiling")
    mod = tk_compile(path.read_text(), arch=arch, name=path.name, options=spec.options)
    kernel = mod[spec.kernel]
    chan.send("device", name=gpu.name())

    def launch(arrays: dict[str, Any], dims: dict[str, int]) -> None:
        shape = spec.launch(dims)
        kernel(shape.grid, shape.block, spec.args(arrays, dims), shared_mem=shape.shared_mem)

    def launch_sync(arrays: dict[str, Any], dims: dict[str, int]) -> None:
        launch(arrays, dims)
        gpu.synchronize()

    if _run_cases(spec, chan, cp, launch_sync) and do_bench and spec.bench is not None:
        chan.send("speed", **_bench(spec, chan.bench_seed, launch))


def _import_file(path: Path, name: str) -> Any:
    mod_spec = importlib.util.spec_from_file_location(name, path)
    if mod_spec is None or mod_spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(module)
    return module


def _run_numba(spec: Any, path: Path, chan: ChildIO, do_bench: bool, *, simulate: bool) -> None:
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
        chan.send("device", name="numba CUDA simulator (CPU)")
        xp: Any = np
    else:
        import cupy as cp

        from . import gpu

        chan.send("device", name=gpu.name())
        xp = cp

    def launch(arrays: dict[str, Any], dims: dict[str, int]) -> None:
        shape = spec.launch(dims)
        kernel[shape.grid, shape.block](*spec.args(arrays, dims))

    def launch_sync(arrays: dict[str, Any], dims: dict[str, int]) -> None:
        launch(arrays, dims)
        if not simulate:
            from . import gpu

            gpu.synchronize()

    if _run_cases(spec, chan, xp, launch_sync) and do_bench and not simulate and spec.bench is not None:
        chan.send("speed", **_bench(spec, chan.bench_seed, launch))


def _child_gpu(spec: Any, path: Path, chan: ChildIO, do_bench: bool) -> None:
    if spec.language == "cuda":
        _run_cuda(spec, path, chan, do_bench)
    else:
        _run_numba(spec, path, chan, do_bench, simulate=False)


def _child_sim(spec: Any, path: Path, chan: ChildIO, do_bench: bool) -> None:
    _run_numba(spec, path, chan, False, simulate=True)


# ---- modes --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Mode:
    """One way to run an exercise: which exercises it takes, how the child runs them, what it proves.

    ``child(spec, file, channel, bench)`` runs in the child process (see ``_child_gpu``): it sends a
    ``device`` frame, then each case's outputs (``ChildIO.send_outputs``), then optionally ``speed``.
    """

    name: str
    evidence: Evidence
    languages: tuple[str, ...]
    needs_gpu: bool
    cases: Callable[[Any], Sequence[dict[str, int]]]
    child: Callable[[Any, Path, ChildIO, bool], None]
    can_bench: bool = False
    env: tuple[tuple[str, str], ...] = ()
    note: str = ""

    def takes(self, spec: Any, have_gpu: bool) -> bool:
        return spec.language in self.languages and (have_gpu or not self.needs_gpu) and bool(self.cases(spec))


#: Modes by name, in order of preference: ``choose_mode`` takes the first that fits.
MODES: dict[str, Mode] = {}


def register_mode(mode: Mode, *, before: str | None = None) -> None:
    """Add a way to run exercises (``before``: prefer it to that mode)."""
    items = [(k, v) for k, v in MODES.items() if k != mode.name]
    at = next((i for i, (k, _) in enumerate(items) if k == before), len(items))
    items.insert(at, (mode.name, mode))
    MODES.clear()
    MODES.update(items)


def choose_mode(spec: Any, have_gpu: bool) -> Mode | None:
    """The preferred mode that can run ``spec`` here (None: nothing can, correctness is not established)."""
    return next((m for m in MODES.values() if m.takes(spec, have_gpu)), None)


register_mode(Mode("gpu", Evidence.GPU, ("cuda", "numba"), True, lambda s: s.cases, _child_gpu, can_bench=True,
                   env=(("NUMBA_ENABLE_CUDASIM", "0"),)))
register_mode(Mode("sim", Evidence.SIMULATOR, ("numba",), False, lambda s: s.sim_cases, _child_sim,
                   env=(("NUMBA_ENABLE_CUDASIM", "1"),),
                   note="ran in numba's CUDA simulator on tiny shapes; speed is measured on a GPU only"))


def _emulated_cases(spec: Any) -> list[dict[str, int]]:
    from .emulate import exercise

    return exercise.runnable_cases(spec)


def _child_emulated(spec: Any, path: Path, chan: ChildIO, do_bench: bool) -> None:
    from .emulate import exercise

    exercise.child(spec, path, chan, _run_cases)


# CUDA C++ without a GPU: the CPU emulator (tklab.emulate), at the exercise's smaller cases, no timing.
register_mode(Mode("emu", Evidence.CPU_EMULATION, ("cuda",), False, _emulated_cases, _child_emulated,
                   note="CPU emulation: correctness only, no timing; the speed is measured on a GPU only"))


def main(argv: Sequence[str] | None = None) -> int:
    """The child: run one exercise file on the parent's inputs, send the outputs. Exit 0 done, 3 error."""
    ap = argparse.ArgumentParser(prog="python -m tklab.runner", description="Run one exercise (child process).")
    ap.add_argument("--exercise", required=True)
    ap.add_argument("--file", required=True, type=Path)
    ap.add_argument("--mode", choices=list(MODES), default="gpu")
    ap.add_argument("--channel", required=True, type=int, help="file descriptor the parent reads")
    ap.add_argument("--limits", default=None, help="JSON of tklab.sandbox.Limits, applied first")
    ap.add_argument("--bench", action="store_true")
    ap.add_argument("--bench-seed", type=int, default=0)
    args = ap.parse_args(list(sys.argv[1:] if argv is None else argv))
    skipped: list[str] = []
    if args.limits:
        from .sandbox import Limits, apply_limits

        skipped = apply_limits(Limits(**json.loads(args.limits)))
    chan = ChildIO.from_folder(args.channel, Path.cwd(), args.bench_seed)
    if skipped:
        chan.send("limits", skipped=skipped)
    path = args.file.resolve()
    try:
        from . import specs

        MODES[args.mode].child(specs.get(args.exercise), path, chan, args.bench)
    except Exception as e:  # noqa: BLE001 - everything a learner's code raises becomes a message
        chan.send("error", stage=_current_stage, **_describe(e, path))
        return 3
    chan.send("done")
    return 0


# ---- parent ---------------------------------------------------------------------------------------

@dataclass
class RunOutcome:
    """What happened: ``status`` is ``ok``, ``wrong``, ``error`` (an exception in the kernel's run, e.g. a
    CUDA fault, or results that came back malformed), ``crashed`` (the process died), ``timeout`` or
    ``skipped``. ``evidence`` says how the outputs were judged (for ``ok`` and ``wrong``; else not at all)."""

    status: str
    message: str
    result: dict[str, Any] | None = None
    returncode: int | None = None
    stage: str = ""
    seconds: float = 0.0
    output: str = ""
    notes: list[str] = field(default_factory=list)
    evidence: Evidence = Evidence.NOT_ESTABLISHED
    isolation: str = ""


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(code).name
    except ValueError:
        return f"signal {code}"


def _positive(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0 \
        else None


def _speed(spec: Any, reported: dict[str, Any] | None) -> dict[str, Any] | None:
    """The speed entry, built here from the spec; the child contributes two times (checked) and a name."""
    if reported is None or spec.bench is None:
        return None
    b = spec.bench
    out: dict[str, Any] = {"dims": b.dims, "baseline": b.baseline_name, "target": b.target}
    if reported.get("error"):
        out["error"] = str(reported["error"])[:300]
        return out
    ms, base = _positive(reported.get("ms")), _positive(reported.get("baseline_ms"))
    if ms is None or base is None:
        out["error"] = "the timing came back malformed, so no speed is reported"
        return out
    flops = b.flops(b.dims) if b.flops else None
    nbytes = b.bytes(b.dims) if b.bytes else None
    out.update(ms=ms, baseline_ms=base, ratio=base / ms,
               tflops=flops / (ms * 1e-3) / 1e12 if flops else None,
               baseline_tflops=flops / (base * 1e-3) / 1e12 if flops else None,
               gbps=nbytes / (ms * 1e-3) / 1e9 if nbytes else None,
               baseline_gbps=nbytes / (base * 1e-3) / 1e9 if nbytes else None,
               device=str(reported.get("device", ""))[:100])
    return out


def judge(spec: Any, mode: Mode, cases: Sequence[dict[str, int]], inputs: Sequence[dict[str, np.ndarray]],
          channel: bytes, *, timed_out: bool = False, returncode: int | None = 0, stage: str = "starting",
          printed: str = "", timeout: float = 0.0, seconds: float = 0.0, overflow: bool = False) -> RunOutcome:
    """The verdict on one run, from the inputs the parent drew and the raw bytes the child sent back."""
    from .specs import dims_text

    tail = printed[-2000:]
    result: dict[str, Any] = {"mode": mode.name, "cases": [], "device": "", "speed": None}

    def outcome(status: str, message: str, *, evidence: Evidence = Evidence.NOT_ESTABLISHED) -> RunOutcome:
        return RunOutcome(status, message, result, returncode, stage, seconds, tail, evidence=evidence)

    try:
        if overflow:
            raise ChannelError("far more data came back than the outputs can fill")
        frames = read_frames(channel)
        got: dict[int, dict[str, np.ndarray]] = {}
        errors: list[dict[str, Any]] = []
        reported_speed = None
        for head, payload in frames:
            kind = head["type"]
            if kind == "output":
                i, name = head.get("case"), head.get("name")
                if not isinstance(i, int) or not 0 <= i < len(cases) or name not in spec.outputs(cases[i]):
                    raise ChannelError(f"an output for case {i!r} named {name!r} was not asked for")
                shape, dtype = spec.outputs(cases[i])[name]
                got.setdefault(i, {})[name] = _array_from(payload, shape, dtype, f"{name} of case {i}")
            elif kind == "device":
                result["device"] = str(head.get("name", ""))[:100]
            elif kind == "error":
                errors.append({k: str(head.get(k, ""))[:2000] for k in ("kind", "message", "hint", "stage")})
            elif kind == "speed":
                reported_speed = head
            elif kind == "note":  # what the run wants the learner to know (e.g. the emulator's warnings)
                result.setdefault("notes", []).append(str(head.get("text", ""))[:600])
            elif kind == "limits" and isinstance(head.get("skipped"), list):
                result["limits_not_applied"] = [str(x)[:40] for x in head["skipped"][:10]]
    except ChannelError as e:
        return outcome("error", f"the run's results came back malformed ({e}), so they were not accepted")
    for i, dims in enumerate(cases):
        outs = spec.outputs(dims)
        if set(got.get(i, {})) != set(outs):
            break
        expected = spec.reference(inputs[i], dims)
        entry: dict[str, Any] = {"dims": dims, "ok": True, "outputs": []}
        for name in outs:
            cmp = compare(name, got[i][name], expected[name], spec.rtol, spec.atol)
            entry["outputs"].append(cmp)
            entry["ok"] = entry["ok"] and cmp["ok"]
        result["cases"].append(entry)
        if not entry["ok"]:
            return outcome("wrong", "wrong result", evidence=mode.evidence)
    else:
        result["ok"] = True
        result["speed"] = _speed(spec, reported_speed)
        if result["speed"] is None and mode.can_bench and (timed_out or errors):
            why = (f"no timing within the {timeout:g} s limit (while {stage})" if timed_out
                   else f"the benchmark failed: {errors[0]['message']}")
            result["speed"] = _speed(spec, {"error": why})
        return outcome("ok", "correct", evidence=mode.evidence)
    if timed_out:
        return outcome("timeout", f"no result within {timeout:g} s, while {stage}: an endless loop (a loop bound "
                       "that never changes, a barrier not every thread reaches) or a far too slow kernel; the run "
                       "and every process it started were stopped")
    if errors:
        err = errors[0]
        hint = f" ({err['hint']})" if err.get("hint") else ""
        return outcome("error", f"the run failed while {err.get('stage') or stage}: {err['message']}{hint}")
    code = returncode
    how = (f"was killed by {_signal_name(-code)}" if code is not None and code < 0
           else f"exited with code {code}")
    last = [ln for ln in printed.splitlines() if ln.strip()][-3:]
    detail = f"; its last output: {' | '.join(last)}" if last else ""
    missing = dims_text(cases[len(result["cases"])]) if len(result["cases"]) < len(cases) else ""
    return outcome("crashed", f"the run crashed while {stage}: the process {how} before returning the output for "
                   f"{missing}{detail}")


def _child_env(workdir: Path, mode: Mode, extra: dict[str, str] | None) -> dict[str, str]:
    """A clean environment: what Python, the GPU and tklab need, nothing of the grader's."""
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(workdir), "TMPDIR": str(workdir / "tmp"),
           "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "PYTHONPATH": str(_PACKAGE_PARENT), "PYTHONNOUSERSITE": "1",
           "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1", "TKLAB_CACHE_DIR": str(workdir / "cache"),
           "NUMBA_CACHE_DIR": str(workdir / "numba-cache"), "CUPY_CACHE_DIR": str(workdir / "cupy-cache")}
    env.update({k: os.environ[k] for k in _PASSED_ENV if k in os.environ})
    env.update(dict(mode.env))
    env.update(extra or {})
    return env


def _warm_cache(keys: Sequence[str], target: Path) -> None:
    """Copy the parent's compile-cache entries into the run's folder, so the child need not compile again."""
    from . import cache

    for k in keys:
        src = cache.cache_dir() / k[:2] / k
        if src.is_dir():
            with contextlib.suppress(OSError):
                shutil.copytree(src, target / k[:2] / k)


def run_isolated(exercise_id: str, path: str | Path, *, mode: str = "gpu", timeout: float = 60.0,
                 bench: bool = False, seed: int | None = None, env: dict[str, str] | None = None,
                 source: str | None = None, hide: Sequence[str | Path] = (), cache_keys: Sequence[str] = (),
                 arch: str | None = None) -> RunOutcome:
    """Run ``path`` as exercise ``exercise_id`` in a sandboxed child; never raises for the learner's faults.

    ``source``: the file's text as the caller read it (written into the run's folder instead of the raw
    bytes). ``env``: extra environment variables for the child (its environment is otherwise clean).
    ``hide``: folders the sandbox hides (the solutions always). ``cache_keys``: compile-cache entries to
    hand to the child. ``arch``: the GPU's arch, if the caller knows it.
    """
    from . import specs
    from .sandbox import Limits, Sandbox, limits_for

    spec = specs.get(exercise_id)
    m = MODES[mode]
    path = Path(path)
    if m.needs_gpu and spec.hopper_only:
        if arch is None:
            from . import gpu

            arch = gpu.arch()
        if not arch.startswith("sm_90"):
            return RunOutcome("skipped", f"this exercise needs a Hopper GPU (sm_90a); this one is {arch}")
    cases = list(m.cases(spec))
    seed = seed if seed is not None else int.from_bytes(os.urandom(4), "little")
    inputs = draw_inputs(spec, cases, seed)
    budget = (1 << 20) + sum(int(np.prod(shape)) * np.dtype(dt).itemsize + 4096
                             for dims in cases for shape, dt in spec.outputs(dims).values())
    workdir = Path(tempfile.mkdtemp(prefix="tklab-run-"))
    try:
        name = path.name if path.name.isprintable() and "/" not in path.name else spec.filename
        if source is not None:
            (workdir / name).write_text(source, encoding="utf-8")
        else:
            shutil.copyfile(path, workdir / name)
        (workdir / "cases.json").write_text(json.dumps(cases))
        for i, arrays in enumerate(inputs):
            for k, v in arrays.items():
                np.save(workdir / f"case-{i}-{k}.npy", v, allow_pickle=False)
        for sub in ("tmp", "cache"):
            (workdir / sub).mkdir()
        _warm_cache(cache_keys, workdir / "cache")
        cpus = os.cpu_count() or 1
        limits = limits_for(Limits(wall_seconds=timeout, memory=None if m.needs_gpu else 4 << 30,
                                   cpu_seconds=int(timeout * cpus) + 30))
        box = Sandbox(workdir, gpu=m.needs_gpu, hide=[_SOLUTIONS, *hide], limits=limits)
        box.hand_over()
        read_fd, write_fd = os.pipe()
        argv = [sys.executable, "-m", "tklab.runner", "--exercise", spec.id, "--file", name, "--mode", m.name,
                "--channel", str(write_fd), "--limits", limits.to_json()]
        if bench and m.can_bench:
            argv += ["--bench", "--bench-seed", str(seed)]
        channel = bytearray()
        printed = bytearray()
        stage = ["starting"]
        overflow = [False]
        pending = [b""]

        def on_channel(data: bytes) -> None:
            if len(channel) + len(data) > budget:
                overflow[0] = True
                return
            channel.extend(data)

        def on_output(data: bytes) -> None:
            lines = (pending[0] + data).split(b"\n")
            pending[0] = lines.pop()[-4096:]
            for ln in lines:
                text = ln.decode("utf-8", "replace")
                if text.startswith(STAGE):
                    stage[0] = text[len(STAGE):][:200]
                else:
                    printed.extend(ln[:1000] + b"\n")
            del printed[:-200_000]

        try:
            box.start(argv, _child_env(workdir, m, env), pass_fds=[write_fd])
        finally:
            os.close(write_fd)
        try:
            assert box.proc is not None and box.proc.stdout is not None
            fin = box.supervise({box.proc.stdout.fileno(): on_output, read_fd: on_channel})
        finally:
            os.close(read_fd)
        on_output(b"\n")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    out = judge(spec, m, cases, inputs, bytes(channel), timed_out=fin.timed_out, returncode=fin.returncode,
                stage=stage[0], printed=printed.decode("utf-8", "replace"), timeout=timeout, seconds=fin.seconds,
                overflow=overflow[0])
    out.isolation = f"{box.isolation.describe()}; limits: {limits.describe()}"
    if out.result and out.result.get("limits_not_applied"):
        out.isolation += f" (not applied here: {', '.join(out.result['limits_not_applied'])})"
    if fin.killed:
        out.notes.append(f"{fin.killed} process{'es' if fin.killed != 1 else ''} the run left behind "
                         f"{'were' if fin.killed != 1 else 'was'} stopped")
    return out


if __name__ == "__main__":
    raise SystemExit(main())
