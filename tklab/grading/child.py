"""The child process that runs one exercise: ``python -m tklab.grading.child``, started by ``tklab.grading.runner``.

It runs in the run's folder (the learner's file, the cases in ``cases.json``, their inputs as
``case-<i>-<name>.npy``), inside ``tklab.grading.sandbox``. For each case it poisons the outputs with NaN,
launches the learner's kernel, and sends the outputs back on the channel (``tklab.grading.channel``); with
``--bench`` it then times the kernel against the library at the benchmark size. It prints
``STAGE`` lines as it goes, so a hang is reported with where it happened. Exceptions become a
learner-facing ``error`` frame (a CUDA fault named with what to look for).

What the parent can believe (see ``runner``): the run's key is read from its own pipe and that pipe closed
in ``main`` before anything of the learner's is imported, compiled or loaded, and every frame carries it;
each case's outputs follow a ``launched`` frame for the launch the harness itself made; a numba kernel
must be what ``@cuda.jit`` makes (its type taken before the learner's module is imported), else "your
kernel was never launched". The benchmark's timer is bound before the learner's module is imported, and
``_bench`` rotates input sets, re-verifies the timed calls' outputs and probes with fresh inputs in the
same buffers, so remembered results earn no speed.

Modes (``tklab.grading.modes``) say which cases a run takes and what a correct result establishes; ``RUNNERS``
says how this child runs each: on this machine's GPU, the CPU emulator (``emulated``), numba's simulator, a
trace (``traced``), numba's PTX compile (``numba_ptx``), a drill (``drills``), or the reference solution timed for
a concept floor (in a child that holds nothing of the learner's).

Usage (the parent builds this line): ``python -m tklab.grading.child --exercise ID --file NAME --mode MODE
--channel FD [--limits JSON] [--bench] [--bench-seed N]``.

Public API: ``RUNNERS``, ``REFERENCE_VARIABLE``, ``main(argv)``.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import sys
import traceback
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..run import gpu
from ..run.arrays import as_values, isclose, poisoned
from . import in_child
from .channel import ChildIO, read_key
from .judge import case_rng, compare
from .modes import MODES

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


def _run_cases(spec: Any, chan: ChildIO, xp: Any, launch: Callable[[dict[str, Any], dict[str, int]], None]) -> bool:
    """The parent's inputs, NaN-poisoned outputs, launch, send the outputs back, for each case.

    The child also compares with the reference itself, only to stop early and to skip the benchmark of
    a wrong kernel; the verdict is the parent's comparison of what was sent.
    """
    from .spec_kit import dims_text

    for i, dims in enumerate(chan.cases):
        host = chan.inputs(i)
        arrays = {k: xp.asarray(v) for k, v in host.items()}
        outs = spec.outputs(dims)
        for name, (shape, dtype) in outs.items():
            arrays[name] = poisoned(xp, shape, dtype)
        in_child.stage(f"running {dims_text(dims)}")
        launch(arrays, dims)
        chan.send("launched", case=i, count=1)  # the harness's own launch, made and returned
        got = {name: (arrays[name] if xp is np else xp.asnumpy(arrays[name])) for name in outs}
        chan.send_outputs(i, got)
        expected = spec.reference(host, dims)
        if not all(compare(n, got[n], expected[n], *spec.tolerance(n))["ok"] for n in outs):
            return False
    return True


#: Input sets the timed calls rotate through: no two calls in a row see the same buffers.
ROTATE = 3
#: A kernel timed this much slower (plus ``_PROBE_SLACK_MS``) on inputs it sees for the first time than in the
#: timed loop skips work on inputs it has seen: its speed is not reported. Each probe call is timed as each
#: call of the loop is (one launch between CUDA events, after the same L2 flush), so an honest kernel's two
#: medians differ by noise only; a kernel that remembers enough to skip a fifth of its work is refused (the
#: factor was 2.0, against a probe timed without the flush: half the work could be skipped).
PROBE_FACTOR = 1.25
_PROBE_SLACK_MS = 0.02

#: The timer and the L2 flush, bound when this module is imported: before any learner code runs in the child,
#: so a file that replaces ``tklab.run.bench.bench`` at import does not change what measures it (a GPU run only).
_TIMER: Callable[..., Any] | None = None
_FLUSHER: Callable[[], Any] | None = None


def _bind_timer() -> None:
    """Take the timer now (called before the learner's module is imported or its kernel compiled)."""
    global _TIMER, _FLUSHER
    from ..run.bench import _l2_flusher, bench

    _TIMER, _FLUSHER = bench, _l2_flusher


def _probe_flush() -> Callable[[], None]:
    """The L2 flush the timed loop does before each call (``tklab.run.bench``), for the probe's calls; a no-op
    where it cannot be made (then the probe runs warmer than the loop: the safe side)."""
    try:
        flush = _FLUSHER() if _FLUSHER is not None else None
    except Exception:  # noqa: BLE001 - no flush is the probe's safe side, never a failed check
        flush = None
    return flush if flush is not None else (lambda: None)


class _Sets:
    """The benchmark's ``ROTATE`` input sets (fresh random numbers, separate buffers, outputs poisoned) and how to
    poison and verify one: every timed result is checked, so a kernel that skips work shows as wrong."""

    def __init__(self, spec: Any, seed: int) -> None:
        import cupy as cp

        self.cp, self.spec, self.bench, self.dims = cp, spec, spec.bench, spec.bench.dims
        self.outs = spec.outputs(self.dims)
        self.arrays = [self._fresh(seed, 99 + r, None) for r in range(ROTATE)]

    def _fresh(self, seed: int, stream: int, into: dict[str, Any] | None) -> dict[str, Any]:
        """New inputs (in ``into``'s buffers, same pointers, where given) and a poisoned output."""
        cp = self.cp
        values = self.spec.inputs(case_rng(seed, stream), self.dims)
        if into is None:
            into = {k: cp.asarray(v) for k, v in values.items()}
        else:
            for k, v in values.items():
                into[k][...] = cp.asarray(v)
        self.poison(into)
        return into

    def refill(self, seed: int, r: int) -> None:
        """Set ``r``'s inputs overwritten in place with new numbers, its output poisoned."""
        self._fresh(seed, 199 + r, self.arrays[r])

    def poison(self, arrays: dict[str, Any]) -> None:
        for name, (shape, dtype) in self.outs.items():
            if name in arrays:
                arrays[name][...] = poisoned(self.cp, shape, dtype)
            else:
                arrays[name] = poisoned(self.cp, shape, dtype)

    def right(self, arrays: dict[str, Any]) -> bool:
        b, cp = self.bench, self.cp
        expect = b.expect(arrays, self.dims) if b.expect is not None else b.baseline(arrays, self.dims)()
        ok = bool(isclose(as_values(arrays[b.output]), cp.asarray(expect), b.rtol, b.atol).all())
        del expect
        return ok


def _probe(sets: _Sets, runs: list[Callable[[], Any]], seed: int) -> tuple[float, bool]:
    """(median ms, all right) of one launch per set on inputs it has never seen, in the same buffers, each timed as
    a call of the timed loop is (between CUDA events, after the same L2 flush)."""
    cp = sets.cp
    probe, flush = [], _probe_flush()
    try:
        for r in range(len(runs)):
            sets.refill(seed, r)
            flush()  # as before each call of the timed loop: the same cold L2
            gpu.synchronize()
            start, end = cp.cuda.Event(), cp.cuda.Event()
            start.record()
            runs[r]()
            end.record()
            end.synchronize()
            probe.append(cp.cuda.get_elapsed_time(start, end))
            if not sets.right(sets.arrays[r]):
                return 0.0, False
    finally:
        if hasattr(flush, "ptr"):  # the flush's buffer (twice the L2), as bench frees its own
            with contextlib.suppress(Exception):
                from cuda.bindings import driver

                driver.cuMemFree(flush.ptr)  # type: ignore[attr-defined]
    return sorted(probe)[len(probe) // 2], True


def _bench(spec: Any, seed: int, launch: Callable[[dict[str, Any], dict[str, int]], None],
           prepare: Callable[[dict[str, Any], dict[str, int]], Callable[[], Any]] | None = None) -> dict[str, Any]:
    """A kernel vs the library at the benchmark size, same process, same GPU, back to back; speed that
    cannot be faked by remembering results. (The reference solution, where a concept floor compares with
    it, is timed by this same function in a child of its own: mode ``reference``.)

    The timed calls rotate through ``ROTATE`` input sets of their own (``_Sets``), with outputs poisoned before
    timing and every set's output verified after it: a kernel that returns early on a call it has seen leaves a
    wrong or poisoned output. Then each set's inputs are overwritten in place with new numbers (same pointers),
    its output poisoned, and one launch timed and verified (``_probe``): a kernel that caches results by address
    fails that check; one that runs far faster in the loop than on inputs it sees for the first time
    (``PROBE_FACTOR``) skips work on repeated inputs, and its speed is not reported.

    ``prepare(arrays, dims)``, where given, packs the launch once (arguments, tensor maps) and returns what
    runs it: then the time is the kernel's, not the time Python takes to pack its arguments on every call
    (packing per call, chapter 10's four tensor maps are encoded on every call and the GPU drains between timed
    calls: the reference measured about 0.8x the library that way, against parity when prepared once)."""
    if _TIMER is None:
        _bind_timer()
    assert _TIMER is not None
    timer, b = _TIMER, spec.bench
    dims = b.dims
    in_child.stage("benchmark: preparing inputs")
    sets = _Sets(spec, seed)
    in_child.stage("benchmark: checking the result at this size")
    for arrays in sets.arrays:
        launch(arrays, dims)
    gpu.synchronize()
    if not all(sets.right(a) for a in sets.arrays):
        return {"error": "the output is wrong at the benchmark size, so its speed is not reported"}
    for arrays in sets.arrays:
        sets.poison(arrays)
    runs = [prepare(a, dims) if prepare is not None else (lambda a=a: launch(a, dims)) for a in sets.arrays]
    calls, timed = itertools.count(), set()

    def rotating() -> None:
        r = next(calls) % len(runs)
        timed.add(r)
        runs[r]()

    base = b.baseline(sets.arrays[0], dims)
    in_child.stage("benchmark: timing")
    mine = timer(rotating, flops=b.flops(dims) if b.flops else None,
                 bytes=b.bytes(dims) if b.bytes else None, name=spec.id, ceilings=False, progress=False,
                 target_ms=150.0)
    lib = timer(base, flops=mine.flops, bytes=mine.bytes, name=b.baseline_name, ceilings=False,
                progress=False, target_ms=150.0)
    gpu.synchronize()
    in_child.stage("benchmark: checking the timed calls' results")
    if not timed or not all(sets.right(sets.arrays[r]) for r in sorted(timed)):
        return {"error": "the timed calls left a wrong output (a kernel must compute its result on every call), "
                         "so its speed is not reported"}
    in_child.stage("benchmark: fresh inputs in the same buffers")
    probe_ms, right = _probe(sets, runs, seed)
    if not right:
        return {"error": "new inputs in the same buffers gave a wrong output: the kernel returned a result it "
                         "had computed before (results cached across calls), so its speed is not reported"}
    if probe_ms > PROBE_FACTOR * mine.ms + _PROBE_SLACK_MS:
        return {"error": f"the kernel took {probe_ms:.3f} ms on fresh inputs but {mine.ms:.3f} ms in the timed "
                         "loop: it skips work on inputs it has seen, so its speed is not reported"}
    return {"ms": mine.ms, "baseline_ms": lib.ms, "device": gpu.name(), "fresh_ms": probe_ms}


#: Names the compile-cache entry of the exercise's reference solution, handed by the parent to a child of
#: mode ``reference`` only (the sandbox hides solutions/; the learner's child never gets it): that child
#: times the reference on the learner's benchmark inputs, in rounds before and after the learner's run.
REFERENCE_VARIABLE = "TKLAB_REFERENCE_MODULE"


def _reference_kernel(spec: Any, arch: str) -> Any:
    key = os.environ.get(REFERENCE_VARIABLE, "")
    if not key:
        return None
    from ..toolchain import cache
    from ..toolchain.compiler import Module

    entry = cache.load(key)
    if entry is None:
        return None
    mod = Module(source="", program="reference solution", arch=arch, options=(), key=key, cached=True,
                 **{k: entry[k] for k in ("cubin", "ptx", "log", "lowered", "seconds")})
    return mod[spec.kernel]


def _launchers(spec: Any, kernel: Any) -> tuple[Callable[[dict[str, Any], dict[str, int]], None],
                                               Callable[[dict[str, Any], dict[str, int]], Callable[[], Any]]]:
    """(launch, prepare) of a compiled kernel with the spec's launch shape and arguments: ``launch`` runs it once,
    ``prepare`` packs the launch once and returns what runs it (what ``_bench`` times)."""

    def launch(arrays: dict[str, Any], dims: dict[str, int]) -> None:
        shape = spec.launch(dims)
        kernel(shape.grid, shape.block, spec.args(arrays, dims), shared_mem=shape.shared_mem)

    def prepare(arrays: dict[str, Any], dims: dict[str, int]) -> Callable[[], Any]:
        shape = spec.launch(dims)
        return kernel.prepare(shape.grid, shape.block, spec.args(arrays, dims), shared_mem=shape.shared_mem)

    return launch, prepare


def _run_cuda(spec: Any, path: Path, chan: ChildIO, do_bench: bool) -> None:
    import cupy as cp

    from ..toolchain.compiler import compile as tk_compile
    if do_bench:
        _bind_timer()  # (a CUDA file has no host code; bound here all the same, before its module is loaded)
    arch = gpu.arch()
    in_child.stage("compiling")
    mod = tk_compile(path.read_text(), arch=arch, name=path.name, options=spec.options)
    kernel = mod[spec.kernel]
    chan.send("device", name=gpu.name())

    launch, prepare = _launchers(spec, kernel)

    def launch_sync(arrays: dict[str, Any], dims: dict[str, int]) -> None:
        launch(arrays, dims)
        gpu.synchronize()

    if _run_cases(spec, chan, cp, launch_sync) and do_bench and spec.bench is not None:
        chan.send("speed", **_bench(spec, chan.bench_seed, launch, prepare))


def _child_reference(spec: Any, path: Path, chan: ChildIO, do_bench: bool) -> None:
    """Mode ``reference``: the reference solution's module (from the compile-cache entry the parent handed
    over), timed by ``_bench`` on the benchmark inputs the learner's run gets (same seed), with the same
    rotation and checks. Nothing of the learner's is in this run's folder or environment."""
    from ..toolchain import cache

    _bind_timer()
    in_child.stage("loading the reference solution")
    key = os.environ.get(REFERENCE_VARIABLE, "")
    if not key or cache.load(key) is None:  # (asked before the GPU: a wiring fault is named as such anywhere)
        raise RuntimeError("the reference solution's compiled module was not handed over")
    kernel = _reference_kernel(spec, gpu.arch())
    chan.send("device", name=gpu.name())

    launch, prepare = _launchers(spec, kernel)
    chan.send("speed", **_bench(spec, chan.bench_seed, launch, prepare))


def _run_numba(spec: Any, path: Path, chan: ChildIO, do_bench: bool, *, simulate: bool) -> None:
    if simulate and os.environ.get("NUMBA_ENABLE_CUDASIM") != "1":
        raise RuntimeError("the simulator must be switched on before numba is imported "
                           "(NUMBA_ENABLE_CUDASIM=1 in the environment)")
    with contextlib.suppress(ImportError):
        from ..toolchain import numba_compat

        numba_compat.patch()
    warnings.simplefilter("ignore")  # numba's performance hints about tiny grids are noise here
    from numba import cuda

    def _probe() -> None:
        pass

    kernel_type = type(cuda.jit(_probe))  # what @cuda.jit makes, taken before the learner's code can change it
    if not simulate and do_bench:
        _bind_timer()
    in_child.stage("importing")
    module = in_child.import_file(path, f"tklab_learner_{spec.id}")
    kernel = getattr(module, spec.kernel, None)
    if kernel is None:
        raise AttributeError(f"{path.name} defines no function named {spec.kernel}")
    if type(kernel) is not kernel_type:
        raise TypeError(f"{spec.kernel} in {path.name} is not a @cuda.jit kernel (it is a {type(kernel).__name__}), "
                        "so your kernel was never launched: decorate the function with @cuda.jit")
    if simulate:
        chan.send("device", name="numba CUDA simulator (CPU)")
        xp: Any = np
    else:
        import cupy as cp
        chan.send("device", name=gpu.name())
        xp = cp

    def launch(arrays: dict[str, Any], dims: dict[str, int]) -> None:
        shape = spec.launch(dims)
        kernel[shape.grid, shape.block](*spec.args(arrays, dims))

    def launch_sync(arrays: dict[str, Any], dims: dict[str, int]) -> None:
        launch(arrays, dims)
        if not simulate:
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


def _child_emulated(spec: Any, path: Path, chan: ChildIO, do_bench: bool) -> None:
    """Modes "emu", "hazards", "practice": the exercise's cases on the CPU emulator (``emulated``)."""
    from . import emulated

    launch, finish = emulated.launcher(spec, path, chan)
    if _run_cases(spec, chan, np, launch):
        finish()


def _child_traced(spec: Any, path: Path, chan: ChildIO, do_bench: bool) -> None:
    """Mode "trace": the first emulated case with the emulator's trace on (``traced``)."""
    from . import traced

    _run_cases(spec, chan, np, traced.launcher(spec, path, chan))


def _child_numba_ptx(spec: Any, path: Path, chan: ChildIO, do_bench: bool) -> None:
    from . import numba_ptx

    numba_ptx.child(spec, path, chan)


def _child_drill(spec: Any, path: Path, chan: ChildIO, do_bench: bool) -> None:
    from . import drills

    drills.child(spec, path, chan)


#: How this child runs each mode of ``tklab.grading.modes`` (what each establishes is the parent's, there).
RUNNERS: dict[str, Callable[[Any, Path, ChildIO, bool], None]] = {
    "gpu": _child_gpu, "emu": _child_emulated, "sim": _child_sim, "reference": _child_reference,
    "numba-ptx": _child_numba_ptx, "practice": _child_emulated, "hazards": _child_emulated, "trace": _child_traced,
    "cpu": _child_drill,
}


def main(argv: Sequence[str] | None = None) -> int:
    """The child: run one exercise file on the parent's inputs, send the outputs. Exit 0 done, 3 error."""
    ap = argparse.ArgumentParser(prog="python -m tklab.grading.child", description="Run one exercise (child process).")
    ap.add_argument("--exercise", required=True)
    ap.add_argument("--file", required=True, type=Path)
    ap.add_argument("--mode", choices=list(RUNNERS), default="gpu")
    ap.add_argument("--channel", required=True, type=int, help="file descriptor the parent reads")
    ap.add_argument("--limits", default=None, help="JSON of tklab.grading.sandbox.Limits, applied first")
    ap.add_argument("--bench", action="store_true")
    ap.add_argument("--bench-seed", type=int, default=0)
    ap.add_argument("--key-fd", type=int, default=None, help="file descriptor holding the run's key")
    ap.add_argument("--spec", type=Path, default=None, help="the exercise's spec file (a copy, in the run's folder)")
    args = ap.parse_args(list(sys.argv[1:] if argv is None else argv))
    from .sandbox import drop_privileges

    skipped = drop_privileges()  # a root grader's run becomes its user here (having hidden what it may not see)
    key = read_key(args.key_fd) if args.key_fd is not None else ""  # first: before any learner code
    if args.limits:
        from .sandbox import Limits, apply_limits

        skipped += apply_limits(Limits(**json.loads(args.limits)))
    if MODES[args.mode].can_bench and args.bench:
        with contextlib.suppress(ImportError):
            _bind_timer()
    chan = ChildIO.from_folder(args.channel, Path.cwd(), args.bench_seed, key)
    if skipped:
        chan.send("limits", skipped=skipped)
    path = args.file.resolve()
    try:
        from . import specs

        spec = specs.from_file(args.spec, args.exercise) if args.spec else specs.get(args.exercise)  # a drill: tklab's
        RUNNERS[args.mode](spec, path, chan, args.bench)
    except Exception as e:  # noqa: BLE001 - everything a learner's code raises becomes a message
        chan.send("error", stage=in_child.current_stage(), **_describe(e, path))
        return 3
    chan.send("done")
    return 0




if __name__ == "__main__":
    raise SystemExit(main())
