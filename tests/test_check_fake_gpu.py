"""The runner's GPU path driven in-process with a stand-in device: CuPy → numpy, the kernel → a numpy
function, timings → fixed numbers. The child half (fresh inputs from the parent, NaN poison, launch,
outputs sent as frames, benchmark sanity check) writes into a buffer; the parent half (``judge``) reads
that buffer and reaches the verdict, exactly as across the pipe. CI has no GPU, so this is where that
plumbing is exercised on every commit; the real thing is in the ``gpu``-marked tests of test_check.py."""

from __future__ import annotations

import importlib
import sys
import types
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from tklab import channel, child, gpu, judge, runner, specs, verdict
from tklab.grading import modes, running
from tklab.run.bench import BenchResult

ROOT = Path(__file__).resolve().parent.parent


class _Kernel:
    def __init__(self, body):
        self.body, self.launches, self.prepared = body, [], 0

    def __call__(self, grid, block, args, shared_mem=0):
        self.launches.append((grid, block))
        self.body(*args)

    def prepare(self, grid, block, args, shared_mem=0):
        """As tklab's Kernel.prepare: arguments packed once, a callable that launches."""
        self.prepared += 1
        return lambda: self(grid, block, args, shared_mem)


@pytest.fixture
def fake_device(monkeypatch):
    fake_cp = types.ModuleType("cupy")
    for name in ("asarray", "full", "all", "abs", "matmul", "float64", "float32", "float16", "uint32", "empty_like"):
        setattr(fake_cp, name, getattr(np, name))
    fake_cp.asnumpy = np.asarray

    class _Event:  # the fresh-input probe's timing: as long as the timed loop's (2.0 ms), so no alarm
        def record(self):
            pass

        def synchronize(self):
            pass

    fake_cp.cuda = types.SimpleNamespace(Event=_Event)
    fake_cp.cuda.get_elapsed_time = lambda start, end: 2.0
    fake_cp.get_array_module = lambda *arrays: np
    monkeypatch.setitem(sys.modules, "cupy", fake_cp)
    monkeypatch.setattr(gpu, "arch", lambda: "sm_90a")
    monkeypatch.setattr(gpu, "name", lambda: "Fake GPU")
    monkeypatch.setattr(gpu, "synchronize", lambda: None)
    times = iter([2.0, 0.5])  # the learner's kernel first, then the library

    def fake_bench(fn, *, flops=None, bytes=None, **kw):  # noqa: A002
        fn()
        ms = next(times)
        return BenchResult(name="fake", ms=ms, ms_min=ms, ms_max=ms, ms_q1=ms, ms_q3=ms, reps=1, flops=flops,
                           bytes=bytes)

    monkeypatch.setattr(importlib.import_module("tklab.run.bench"), "bench", fake_bench)
    state = {}

    def fake_compile(source, **kw):
        return {spec_kernel: state["kernel"] for spec_kernel in ("smem_matmul",)}

    monkeypatch.setattr(importlib.import_module("tklab.toolchain.compiler"), "compile", fake_compile)
    return state


BENCH = {"M": 256, "N": 512, "K": 128}  # small: numpy stands in for the GPU


def _spec():
    spec = specs.get("ch02_smem_tiling")
    return replace(spec, bench=replace(spec.bench, dims=BENCH))


def _run(state, body, bench=True, tamper=None):
    """Child half into a buffer, parent half on the buffer: (spec, kernel, RunOutcome)."""
    spec = _spec()
    state["kernel"] = _Kernel(body)
    cases = list(spec.cases)
    inputs = judge.draw_inputs(spec, cases, 1234)
    sent = bytearray()
    chan = channel.ChildIO(sent.extend, cases, lambda i: {k: v.copy() for k, v in inputs[i].items()}, 1234)
    child._run_cuda(spec, ROOT / spec.solution, chan, bench)
    data = tamper(bytes(sent)) if tamper else bytes(sent)
    out = judge.judge(spec, modes.MODES["gpu"], cases, inputs, data)
    return spec, state["kernel"], out


def _right(a, b, c, m, n, k):
    c[...] = a @ b


def test_correct_kernel_passes_every_case_and_gets_a_ratio(fake_device):
    spec, kernel, out = _run(fake_device, _right)
    assert out.status == "ok" and out.evidence == verdict.Evidence.GPU
    assert [c["dims"] for c in out.result["cases"]] == list(spec.cases) and out.result["device"] == "Fake GPU"
    rotate = child.ROTATE  # every case; each input set's check; one timing call; each set's fresh-input probe
    assert len(kernel.launches) == len(spec.cases) + rotate + 1 + rotate
    assert kernel.prepared == rotate  # the timed calls run prepared launches: Python's packing is not timed
    assert kernel.launches[0] == ((768 // 32, 1024 // 32), (32, 32))  # the spec's launch shape
    s = out.result["speed"]
    assert s["ratio"] == 0.25 and s["ms"] == 2.0 and s["baseline_ms"] == 0.5 and s["target"] == spec.bench.target
    assert s["tflops"] == pytest.approx(2 * 256 * 512 * 128 / 2e-3 / 1e12) and s["dims"] == BENCH


def test_unwritten_edge_is_caught_with_the_first_wrong_element(fake_device):
    def body(a, b, c, m, n, k):  # forgets the last column when N is not a multiple of 32
        full = (int(n) // 32) * 32
        c[:, :full] = (a @ b)[:, :full]

    _, _, out = _run(fake_device, body)
    assert out.status == "wrong" and out.result["speed"] is None
    bad = out.result["cases"][-1]
    assert bad["dims"] == {"M": 33, "N": 65, "K": 47}
    m = bad["outputs"][0]
    assert m["index"] == [0, 64] and m["unwritten"] == 33 and np.isnan(m["got"])


def test_speed_is_not_reported_for_a_kernel_wrong_at_the_benchmark_size(fake_device):
    def body(a, b, c, m, n, k):
        c[...] = a @ b
        if int(m) == BENCH["M"]:
            c[0, 0] += 1.0

    _, _, out = _run(fake_device, body)
    assert out.status == "ok" and "wrong at the benchmark size" in out.result["speed"]["error"]


# ---- the parent decides: what the child sends is data, never a verdict -------------------------------

def test_a_child_that_claims_success_without_outputs_fails(fake_device):
    spec = _spec()
    cases = list(spec.cases)
    inputs = judge.draw_inputs(spec, cases, 7)
    claim = channel.frame("done", ok=True, passed=True, status="ok") + channel.frame("speed", ms=0.001, baseline_ms=1)
    out = judge.judge(spec, modes.MODES["gpu"], cases, inputs, claim, returncode=0)
    assert out.status == "crashed" and "before returning the output for M=1024" in out.message
    assert out.evidence == verdict.Evidence.NOT_ESTABLISHED


def test_outputs_the_child_changed_after_the_fact_are_judged_as_they_are(fake_device):
    """Flip one float in the first case's payload: the parent's comparison notices."""
    def tamper(data: bytes) -> bytes:
        frames = channel.read_frames(data)
        head, payload = next((h, p) for h, p in frames if h["type"] == "output")
        at = data.index(payload) + len(payload) - 4
        return data[:at] + np.float32(1e9).tobytes() + data[at + 4:]

    _, _, out = _run(fake_device, _right, bench=False, tamper=tamper)
    assert out.status == "wrong" and out.result["cases"][0]["outputs"][0]["got"] == 1e9


@pytest.mark.parametrize("bad, words", [
    (lambda d: d[:-3], "cut short"),
    (lambda d: d + b"\x00\x00\x00\x05{bad}", "not JSON"),
    (lambda d: channel.frame("output", b"\x93NUMPY junk", case=0, name="C") + d, "not array data"),
    (lambda d: channel.frame("output", _npy(np.zeros((2, 2), np.float32)), case=0, name="C") + d, "float32[2, 2]"),
    (lambda d: channel.frame("output", _npy(np.zeros((1024, 768), np.float64)), case=0, name="C") + d, "float64"),
    (lambda d: channel.frame("output", _npy(np.zeros(3, np.float32)), case=9, name="C") + d, "not asked for"),
    (lambda d: channel.frame("output", _npy(np.array([{"ok": True}], dtype=object)), case=0, name="C") + d,
     "not array data"),
])
def test_malformed_channel_data_is_refused(fake_device, bad, words):
    _, _, out = _run(fake_device, _right, bench=False, tamper=bad)
    assert out.status == "error" and "malformed" in out.message and words in out.message, out.message


def _npy(arr: np.ndarray) -> bytes:
    import io

    buf = io.BytesIO()
    np.lib.format.write_array(buf, arr, allow_pickle=True)
    return buf.getvalue()


def test_speed_numbers_are_rebuilt_from_the_spec_and_checked(fake_device):
    spec = _spec()
    assert judge.speed_entry(spec, {"ms": 2.0, "baseline_ms": 1.0, "ratio": 1000, "target": 0.0001,
                                "baseline": "fake"})["ratio"] == 0.5
    s = judge.speed_entry(spec, {"ms": 2.0, "baseline_ms": 1.0, "ratio": 1000, "target": 0.0001})
    assert s["target"] == spec.bench.target and s["baseline"] == spec.bench.baseline_name
    for bad in ({"ms": -1, "baseline_ms": 1}, {"ms": float("nan"), "baseline_ms": 1}, {"ms": "1", "baseline_ms": 1},
                {"ms": True, "baseline_ms": 1}, {}):
        assert "malformed" in judge.speed_entry(spec, bad)["error"]


def test_runner_error_description_points_at_cuda_faults():
    e = gpu.CudaError("kernel execution (cuCtxSynchronize) failed: CUDA_ERROR_ILLEGAL_ADDRESS: an illegal "
                      "memory access was encountered")
    d = child._describe(e, ROOT / "x.cu")
    assert d["kind"] == "cuda" and "outside its arrays" in d["hint"]


def test_hopper_only_exercise_is_skipped_on_another_gpu_before_anything_starts(monkeypatch):
    real = specs.get
    monkeypatch.setattr(specs, "get", lambda i: replace(real(i), arch="sm_90a"))
    out = runner.run_isolated("ch06_tiles", ROOT / real("ch06_tiles").solution, mode="gpu", arch="sm_80")
    assert out.status == "skipped" and "needs a Hopper GPU" in out.message and "sm_80" in out.message


def test_a_kernel_that_remembers_its_buffers_gets_no_speed(fake_device):
    """Issue 24: a kernel that skips the work on buffers it has seen; the fresh numbers in the same buffers
    after timing leave its stale output, and its speed is not reported (its cases still pass)."""
    seen: list[np.ndarray] = []  # the benchmark's buffers it has computed for (kept alive: no reused ids)

    def lazy(a, b, c, m, n, k):
        if int(m) == BENCH["M"]:
            if any(x is a for x in seen):
                return
            seen.append(a)
        c[...] = a @ b

    spec, kernel, out = _run(fake_device, lazy)
    assert out.status == "ok"
    s = out.result["speed"]
    assert "ratio" not in s and "compute its result on every call" in s["error"], s  # poisoned by the skip


@pytest.mark.parametrize("first_sight_ms, reported", [(2.2, True), (2.6, False)], ids=["noise", "a-quarter-skipped"])
def test_a_kernel_faster_on_inputs_it_has_seen_gets_no_speed(fake_device, monkeypatch, first_sight_ms, reported):
    """Issue 39: the timed loop rotates three input sets, so a kernel that remembers what it has seen can skip
    work there and still be right. The probe times each set's first sight the way the loop times its calls; the
    loop here takes 2.0 ms. 2.6 ms at first sight (1.3x: a quarter of the work skipped on repeats) loses the
    speed; 2.2 ms (1.1x) is noise and keeps it. (The old factor, 2x plus 0.05 ms, let both through: half the
    work could be skipped.)"""
    monkeypatch.setattr(sys.modules["cupy"].cuda, "get_elapsed_time", lambda start, end: first_sight_ms)
    spec, kernel, out = _run(fake_device, _right)
    assert out.status == "ok"
    s = out.result["speed"]
    if reported:
        assert s["ratio"] == 0.25, s
    else:
        assert "ratio" not in s and "skips work on inputs it has seen" in s["error"], s


# ---- a concept floor's yardstick: the reference solution timed in a child of its own ------------------

def _frames_of(spec, body, run_child, seed=1234):
    """Run one child function on the fake device; (frames bytes, arrays the kernel saw at the bench size)."""
    seen: list[np.ndarray] = []

    def recording(a, *rest):
        if a.shape[0] == BENCH["M"]:
            seen.append(a.copy())
        body(a, *rest)

    kernel = _Kernel(recording)
    cases = list(spec.cases)
    inputs = judge.draw_inputs(spec, cases, seed)
    sent = bytearray()
    chan = channel.ChildIO(sent.extend, cases, lambda i: {k: v.copy() for k, v in inputs[i].items()}, seed)
    run_child(kernel, chan)
    return bytes(sent), seen


def test_the_reference_child_times_the_solution_on_the_learners_benchmark_inputs(fake_device, monkeypatch):
    """Mode ``reference`` runs no cases and nothing of the learner's: it loads the module the parent handed
    over and times it with the learner's own benchmark procedure, on the same inputs (same seed)."""
    spec = _spec()

    def learner_child(kernel, chan):
        fake_device["kernel"] = kernel
        child._run_cuda(spec, ROOT / spec.solution, chan, True)

    def reference_child(kernel, chan):
        monkeypatch.setenv(child.REFERENCE_VARIABLE, "k")
        monkeypatch.setattr(importlib.import_module("tklab.toolchain.cache"), "load", lambda key: {"key": key})
        monkeypatch.setattr(child, "_reference_kernel", lambda s, arch: kernel)
        child._child_reference(spec, Path("x.cu"), chan, True)

    _, learner_saw = _frames_of(spec, _right, learner_child)
    times = iter([1.6, 0.5])  # the reference's time, then the library's

    def fake_bench(fn, **kw):
        fn()
        ms = next(times)
        return BenchResult(name="fake", ms=ms, ms_min=ms, ms_max=ms, ms_q1=ms, ms_q3=ms, reps=1)

    monkeypatch.setattr(importlib.import_module("tklab.run.bench"), "bench", fake_bench)
    monkeypatch.setattr(child, "_TIMER", None)
    ref, ref_saw = _frames_of(spec, _right, reference_child)
    out = judge.judge(spec, modes.MODES["reference"], [], [], ref)
    assert out.status == "ok" and out.result["speed"]["ms"] == 1.6 and out.result["speed"]["baseline_ms"] == 0.5
    assert not [h for h, _ in channel.read_frames(ref) if h["type"] in ("output", "launched")]  # no cases run
    assert len(ref_saw) == len(learner_saw) > 0  # the same benchmark inputs, call for call
    assert all(np.array_equal(a, b) for a, b in zip(ref_saw, learner_saw, strict=True))
    assert "reference_ms" not in judge.speed_entry(spec, {"ms": 2.0, "baseline_ms": 1.0, "reference_ms": 0.1})
    assert modes.choose_mode(spec, True).name == "gpu"  # never chosen for a learner's run


def test_the_reference_child_without_its_module_says_so(fake_device, monkeypatch):
    monkeypatch.delenv(child.REFERENCE_VARIABLE, raising=False)
    with pytest.raises(RuntimeError, match="not handed over"):
        child._child_reference(_spec(), Path("x.cu"), channel.ChildIO(lambda b: None, [], lambda i: {}, 1), True)


@pytest.fixture(scope="module")
def ch10_variant(tmp_path_factory):
    """A benign variant of chapter 10's solution (a comment added): the learner's module key differs from the
    reference's, so the test can tell which child got which."""
    path = tmp_path_factory.mktemp("ch10") / "ch10_flash.cu"
    path.write_text((ROOT / "solutions" / "ch10_flash" / "ch10_flash.cu").read_text() + "\n// my version\n")
    return path


def _recorder(monkeypatch, learner_ms, reference_ms, learner_status="ok"):
    """Every sandboxed run replaced by a recorder that returns the given times: (calls, the learner's run)."""
    calls: list[dict] = []
    rounds = iter(reference_ms)

    def fake_run(exercise_id, file, *, mode, **kw):
        calls.append({"mode": mode, "file": Path(file), **kw})
        if mode == "reference":
            ms = next(rounds)
            speed = {"ms": ms, "baseline_ms": 1.0} if ms else {"error": "the GPU fell off"}
            return judge.RunOutcome("ok", "correct", {"cases": [], "speed": speed}, evidence=verdict.Evidence.GPU)
        speed = judge.speed_entry(specs.get(exercise_id), {"ms": learner_ms, "baseline_ms": 1.0})
        return judge.RunOutcome(learner_status, "x", {"cases": [], "device": "Fake GPU",
                                                      "speed": speed if learner_status == "ok" else None},
                                evidence=verdict.Evidence.GPU)

    monkeypatch.setattr(runner, "run_isolated", fake_run)
    return calls, lambda: fake_run("ch10_flash", "mine.cu", mode="gpu")


def _check_with_rounds(monkeypatch, path, learner_ms, reference_ms):
    """``check`` of ch10 on a stand-in Hopper GPU with the recorder; the hazard analysis (emulator) is not what
    is tested here."""
    import tklab.grading.check as chk

    specs.all_ids()  # every spec imported before the stand-in GPU (their builds ask the real one)
    calls, _ = _recorder(monkeypatch, learner_ms, reference_ms)
    monkeypatch.setattr(chk.gpu, "available", lambda: True)
    monkeypatch.setattr(chk.gpu, "arch", lambda: "sm_90a")
    monkeypatch.setattr(running.cases, "hazard_cases", lambda spec: [])  # no hazard run: the rounds alone
    return chk.check("ch10_flash", path, seed=None), calls


def _rounds(monkeypatch, learner_ms, reference_ms, learner_status="ok"):
    """The rounds alone (``_with_reference_rounds``, then the floors), on the recorder: (result, calls)."""

    calls, learner_run = _recorder(monkeypatch, learner_ms, reference_ms, learner_status)
    spec = specs.get("ch10_flash")
    res = verdict.CheckResult(spec.id, spec.title, "mine.cu", compiled=True, arch="sm_90a")
    out = running._with_reference_rounds(learner_run, res, spec, {child.REFERENCE_VARIABLE: "k"}, ["k"], 7, 60.0, ())
    judge.fill_run(res, out)
    if out.status == "ok":
        judge.judge_gpu_floors(res, spec)
    return res, calls


@pytest.mark.nvrtc
def test_the_learners_run_never_gets_the_reference_and_the_parent_computes_the_ratio(monkeypatch, ch10_variant):
    res, calls = _check_with_rounds(monkeypatch, ch10_variant, learner_ms=1.0, reference_ms=[0.9, 0.94])
    assert [c["mode"] for c in calls] == ["reference", "gpu", "reference"]  # the learner's run between two rounds
    ref, mine = calls[0], calls[1]
    assert child.REFERENCE_VARIABLE not in (mine.get("env") or {})  # the learner's child: no reference...
    reference_key = ref["env"][child.REFERENCE_VARIABLE]
    assert ref["cache_keys"] == [reference_key] and reference_key not in mine["cache_keys"]  # ...and no module
    assert len(mine["cache_keys"]) == 1  # its own module only
    assert "my version" not in ref["source"] and ref["file"].resolve() != ch10_variant.resolve()  # nothing of theirs
    assert ref["seed"] == mine["seed"] == calls[2]["seed"] is not None  # the same benchmark inputs
    s = res.speed
    assert s["reference_rounds_ms"] == [0.9, 0.94] and s["reference_ratio"] == pytest.approx(0.92)
    floor = next(f for f in res.floors if "overlap" in f.name)
    assert floor.ok and "0.92x" in floor.detail


@pytest.mark.parametrize("rounds, learner_ms, ok, words", [
    ([1.0, 1.02], 1.6, False, "0.63x"),                      # serialised: the floor fails on the parent's ratio
    ([1.0, 1.4], 1.0, True, "ratio is uncertain"),           # a busy GPU between the rounds: said in a note
    ([None, 1.0], 1.0, True, "one round of the reference"),  # one round failed: the other carries it
    ([None, None], 1.0, None, "could not be timed"),         # no yardstick: the floor is not judged on speed
])
def test_reference_rounds_that_disagree_or_fail_are_reported(monkeypatch, rounds, learner_ms, ok, words):
    res, calls = _rounds(monkeypatch, learner_ms, rounds)
    assert [c["mode"] for c in calls] == ["reference", "gpu", "reference"]
    floor = next((f for f in res.floors if "overlap" in f.name), None)
    assert (floor.ok if floor else None) is ok
    assert words in (floor.detail if floor and not ok else "") + " ".join(res.notes), (res.notes, floor)


def test_a_failed_learner_run_costs_one_reference_round_only(monkeypatch):
    res, calls = _rounds(monkeypatch, 1.0, [1.0], learner_status="error")
    assert [c["mode"] for c in calls] == ["reference", "gpu"] and "reference_ratio" not in (res.speed or {})


@pytest.mark.gpu
@pytest.mark.hopper
def test_on_the_gpu_the_solution_meets_its_own_overlap_floor_in_separate_rounds(ch10_variant):
    """The real thing (``make gpu-check``): chapter 10's solution (a comment added, so its module is its own)
    against the reference solution timed in two rounds of its own child: about 1x, and the floor holds."""
    from tklab.grading.check import check
    OVERLAP_RATIO = specs.module("ch10_flash").OVERLAP_RATIO

    res = check("ch10_flash", ch10_variant)
    assert res.passed is True, res
    s = res.speed
    assert len(s["reference_rounds_ms"]) == 2 and all(r > 0 for r in s["reference_rounds_ms"]), s
    assert OVERLAP_RATIO <= s["reference_ratio"] <= 1 / OVERLAP_RATIO, s  # the same kernel: within the floor's slack
    floor = next(f for f in res.floors if "overlap" in f.name)
    assert floor.ok and "the reference solution" in floor.detail, floor


@pytest.mark.nvrtc
def test_the_reference_child_gets_its_module_through_the_real_sandbox_and_nothing_else(tmp_path):
    """Mode ``reference`` through ``run_isolated`` (the real sandbox, no GPU here): with the key and the cache
    entry handed over it gets as far as asking for the GPU; without them it says the module is missing."""

    spec = specs.get("ch10_flash")
    keys: list[str] = []
    env = running._reference(spec, "sm_90a", keys)
    kw = {"mode": "reference", "bench": True, "seed": 3, "arch": "sm_90a", "source": "// nothing\n", "timeout": 60}
    handed = runner.run_isolated(spec.id, tmp_path / "ch10_flash.cu", env=env, cache_keys=keys, **kw)
    missing = runner.run_isolated(spec.id, tmp_path / "ch10_flash.cu", env=env, **kw)
    assert "not handed over" in missing.result["speed"]["error"], missing.result
    assert "not handed over" not in handed.result["speed"]["error"], handed.result
    assert "GPU" in handed.result["speed"]["error"], handed.result  # the next step: there is none here


def test_the_shared_compile_cache_is_hidden_from_the_learners_run(tmp_path, monkeypatch):
    """The reference's module (and every solution the chapters compiled) lives in the shared compile cache: a
    learner's run in bubblewrap must not see it, even where every user may read it (here under /var/tmp)."""
    import tempfile

    from tklab.grading import sandbox

    if sandbox.isolation().level != "bubblewrap":
        pytest.skip(f"no bubblewrap here: {sandbox.isolation().describe()}")
    try:
        shared = Path(tempfile.mkdtemp(dir="/var/tmp", prefix="tklab-shared-cache-"))
    except OSError as e:
        pytest.skip(f"no /var/tmp to put a shared cache in: {e}")
    try:
        entry = shared / "ab" / "ab-reference"
        entry.mkdir(parents=True)
        (entry / "cubin").write_bytes(b"the reference solution")
        for p in (shared, shared / "ab", entry):
            p.chmod(0o755)
        (entry / "cubin").chmod(0o644)
        monkeypatch.setenv("TKLAB_CACHE_DIR", str(shared))
        learner = tmp_path / "ch01_naive_matmul.py"  # the runner takes any file: no hygiene check on this path
        learner.write_text(f"import os\nprint('SEES', os.path.exists({str(entry / 'cubin')!r}))\n"
                           + (ROOT / "solutions" / "ch01_naive_matmul" / "ch01_naive_matmul.py").read_text())
        out = runner.run_isolated("ch01_naive_matmul", learner, mode="sim", timeout=60)
        assert out.status == "ok" and "SEES False" in out.output, (out.message, out.output[-500:])
    finally:
        import shutil

        shutil.rmtree(shared, ignore_errors=True)
