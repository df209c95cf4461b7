"""The parent's judgement of one run: the inputs it draws, the outputs it compares, the outcome it reports.

The child runs the learner's code, so anything it says could have been written by that code. The parent
draws the inputs (``draw_inputs``: fresh random numbers from a seed), computes the reference itself,
and reads back only raw output arrays (``tklab.grading.channel``); ``judge`` turns those bytes into a
``RunOutcome``; ``compare`` says, for one output, whether every element is close enough
(``tklab.run.arrays.isclose``) and, if not, where the first wrong one is and what surrounds it. Speed is
measured in the child, next to the kernel: ``judge`` checks the two times are sane and recomputes the
ratio from the spec, and speed is never a condition of passing.

Then the verdict: ``fill_run`` writes an outcome into the ``CheckResult``, ``annotate_emulated`` adds what an
emulated run covered and its concept floors judged on what executed, ``judge_gpu_floors`` the floors judged on a
GPU run's speed, and ``decide`` says PASSED, FAILED or not verified.

Public API: ``compare``, ``draw_inputs``, ``case_rng``, ``judge``, ``RunOutcome``, ``speed_entry``, ``fill_run``,
``annotate_emulated``, ``judge_gpu_floors``, ``decide``.
"""

from __future__ import annotations

import hmac
import math
import signal
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..run.arrays import as_values, isclose, relative_rms, unwritten
from . import cases
from .channel import ChannelError, array_from, read_frames
from .spec_kit import TMA_ORDERS, dims_text
from .verdict import Evidence


def compare(name: str, got: np.ndarray, expected: np.ndarray, rtol: float, atol: float,
            rms: float | None = None) -> dict[str, Any]:
    """Element-wise ``tklab.run.arrays.isclose`` (``|got - expected| <= atol + rtol·|expected|``; NaN, an unwritten
    element, fails; with ``rms``, a relative-RMS bound too and ``atol`` in units of the expected RMS).

    On failure: the first wrong element in row-major order, counts, and a small window of both arrays
    around it (at most 4 rows × 6 columns) for the learner to look at. uint16 outputs are compared as
    the bf16 values they hold (``as_values``).
    """
    got64 = np.asarray(as_values(np.asarray(got)), dtype=np.float64)
    exp64 = np.asarray(expected, dtype=np.float64)
    if got64.shape != exp64.shape:
        return {"ok": False, "output": name, "reason": f"{name} has shape {got64.shape}, expected {exp64.shape}"}
    good = isclose(got64, exp64, rtol, atol, rms)
    with np.errstate(invalid="ignore"):
        err = np.abs(got64 - exp64)
    finite = err[np.isfinite(err)]
    max_err = float(finite.max()) if finite.size else 0.0
    wrong = int(good.size - np.count_nonzero(good))
    rel = {"relative_rms": relative_rms(got64, exp64), "rms_bound": rms} if rms is not None else {}
    if wrong == 0:
        return {"ok": True, "output": name, "max_abs_err": max_err, **rel}
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
        "unwritten": int(np.count_nonzero(unwritten(np.asarray(got)) & ~np.isnan(exp64))),
        "nan_written": int(np.count_nonzero(np.isnan(got64) & ~unwritten(np.asarray(got)) & ~np.isnan(exp64))),
        "max_abs_err": max_err, **rel,
        "window": {"origin": [r0, c0], "got": g2[win].tolist(), "expected": e2[win].tolist(),
                   "bad": b2[win].tolist(), "matrix": got64.ndim >= 2},
    }


def case_rng(seed: int, i: int) -> np.random.Generator:
    """The random numbers of case ``i`` of a run seeded with ``seed`` (the same in parent and child)."""
    return np.random.default_rng([seed, i])


def draw_inputs(spec: Any, cases: Sequence[dict[str, int]], seed: int) -> list[dict[str, np.ndarray]]:
    """The parent's inputs for each case: fresh random numbers from ``seed``."""
    return [spec.inputs(case_rng(seed, i), dims) for i, dims in enumerate(cases)]


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


def speed_entry(spec: Any, reported: dict[str, Any] | None) -> dict[str, Any] | None:
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
    # (the reference solution's time, a concept floor's yardstick, is never taken from this run: the parent
    # times it in children of its own, tklab.grading.check._with_reference_rounds)
    out.update(ms=ms, baseline_ms=base, ratio=base / ms,
               tflops=flops / (ms * 1e-3) / 1e12 if flops else None,
               baseline_tflops=flops / (base * 1e-3) / 1e12 if flops else None,
               gbps=nbytes / (ms * 1e-3) / 1e9 if nbytes else None,
               baseline_gbps=nbytes / (base * 1e-3) / 1e9 if nbytes else None,
               device=str(reported.get("device", ""))[:100])
    return out


def judge(spec: Any, mode: Any, cases: Sequence[dict[str, int]], inputs: Sequence[dict[str, np.ndarray]],
          channel: bytes, *, timed_out: bool = False, returncode: int | None = 0, stage: str = "starting",
          printed: str = "", timeout: float = 0.0, seconds: float = 0.0, overflow: bool = False,
          key: str | None = None) -> RunOutcome:
    """The verdict on one run, from the inputs the parent drew and the raw bytes the child sent back.

    ``key``: the run's key; every frame must carry it (else something besides the harness wrote into the
    pipe, and the run is refused). Each case's outputs count only after a ``launched`` frame for that case
    (the harness's own count of its launches of the learner's kernel): outputs without a launch fail with
    "your kernel was never launched"."""
    result: dict[str, Any] = {"mode": mode.name, "cases": [], "device": "", "speed": None}

    def outcome(status: str, message: str, *, evidence: Evidence = Evidence.NOT_ESTABLISHED) -> RunOutcome:
        return RunOutcome(status, message, result, returncode, stage, seconds, printed[-2000:], evidence=evidence)

    try:
        if overflow:
            raise ChannelError("far more data came back than the outputs can fill")
        sent = _read(read_frames(channel), spec, cases, key, result)
    except ChannelError as e:
        return outcome("error", f"the run's results came back malformed ({e}), so they were not accepted")
    problem = _compare_cases(spec, cases, inputs, sent, key, result)
    if problem == "wrong":
        return outcome("wrong", "wrong result", evidence=mode.evidence)
    if problem:
        return outcome("error", problem)
    if len(result["cases"]) == len(cases):
        result["ok"] = True
        result["speed"] = speed_entry(spec, sent.speed)
        if result["speed"] is None and mode.can_bench and (timed_out or sent.errors):
            why = (f"no timing within the {timeout:g} s limit (while {stage})" if timed_out
                   else f"the benchmark failed: {sent.errors[0]['message']}")
            result["speed"] = speed_entry(spec, {"error": why})
        return outcome("ok", "correct", evidence=mode.evidence)
    status, message = _why_outputs_are_missing(cases, result, sent.errors, timed_out=timed_out, timeout=timeout,
                                               stage=stage, returncode=returncode, printed=printed)
    return outcome(status, message)


@dataclass
class _Sent:
    """What the child's frames held: outputs by case, its launches by case, its errors, its reported speed."""

    outputs: dict[int, dict[str, np.ndarray]] = field(default_factory=dict)
    launched: dict[int, int] = field(default_factory=dict)
    errors: list[dict[str, Any]] = field(default_factory=list)
    speed: dict[str, Any] | None = None


def _read(frames: Sequence[tuple[dict[str, Any], bytes]], spec: Any, cases: Sequence[dict[str, int]],
          key: str | None, result: dict[str, Any]) -> _Sent:
    """Every frame checked and sorted (``ChannelError`` for one without the run's key or an output not asked for);
    what is data for the report (device, notes, facts, trace, PTX) goes straight into ``result``."""
    if key is not None:
        for head, _ in frames:
            if not hmac.compare_digest(str(head.get("key", "")).encode(), key.encode()):
                raise ChannelError("something other than the checker's harness wrote into the result pipe "
                                   f"(a {str(head.get('type'))[:20]!r} message without the run's key)")
    sent = _Sent()
    for head, payload in frames:
        kind = head["type"]
        if kind == "launched":
            i, n = head.get("case"), head.get("count")
            if isinstance(i, int) and isinstance(n, int) and not isinstance(n, bool) and n > 0:
                sent.launched[i] = n
        elif kind == "output":
            i, name = head.get("case"), head.get("name")
            if not isinstance(i, int) or not 0 <= i < len(cases) or name not in spec.outputs(cases[i]):
                raise ChannelError(f"an output for case {i!r} named {name!r} was not asked for")
            shape, dtype = spec.outputs(cases[i])[name]
            sent.outputs.setdefault(i, {})[name] = array_from(payload, shape, dtype, f"{name} of case {i}")
        elif kind == "device":
            result["device"] = str(head.get("name", ""))[:100]
        elif kind == "error":
            sent.errors.append({k: str(head.get(k, ""))[:2000] for k in ("kind", "message", "hint", "stage")})
        elif kind == "speed":
            sent.speed = head
        elif kind == "note":  # what the run wants the learner to know (e.g. the emulator's warnings)
            result.setdefault("notes", []).append(str(head.get("text", ""))[:600])
        elif kind == "facts":  # what the run saw, for the concept floors (e.g. wgmma groups in flight)
            result["facts"] = {str(k)[:40]: v for k, v in head.items()
                               if k != "type" and isinstance(v, (int, float)) and not isinstance(v, bool)}
        elif kind == "trace":  # tklab.trace's mode: the emulator's trace, as JSON (data only, parsed later)
            result["trace"] = bytes(payload[: 4 << 20])
        elif kind == "ptx":  # a numba kernel compiled to PTX (data only: another child interprets it)
            result["ptx"] = bytes(payload[: 8 << 20])
        elif kind == "limits" and isinstance(head.get("skipped"), list):
            result["limits_not_applied"] = [str(x)[:40] for x in head["skipped"][:10]]
    return sent


def _compare_cases(spec: Any, cases: Sequence[dict[str, int]], inputs: Sequence[dict[str, np.ndarray]],
                   sent: _Sent, key: str | None, result: dict[str, Any]) -> str:
    """Each case whose outputs all came back, compared with the reference computed here, in order, into
    ``result["cases"]``: "" (no case wrong so far), "wrong", or why outputs were not accepted."""
    for i, dims in enumerate(cases):
        outs = spec.outputs(dims)
        if set(sent.outputs.get(i, {})) != set(outs):
            return ""
        if key is not None and i not in sent.launched:
            return (f"your kernel was never launched for {dims_text(dims)}: outputs came back without a launch the "
                    "checker made, so they were not accepted")
        expected = spec.reference(inputs[i], dims)
        entry: dict[str, Any] = {"dims": dims, "ok": True, "outputs": []}
        for name in outs:
            cmp = compare(name, sent.outputs[i][name], expected[name], *spec.tolerance(name))
            entry["outputs"].append(cmp)
            entry["ok"] = entry["ok"] and cmp["ok"]
        result["cases"].append(entry)
        if not entry["ok"]:
            return "wrong"
    return ""


def _why_outputs_are_missing(cases: Sequence[dict[str, int]], result: dict[str, Any], errors: list[dict[str, Any]],
                             *, timed_out: bool, timeout: float, stage: str, returncode: int | None,
                             printed: str) -> tuple[str, str]:
    """(status, message) of a run that stopped before sending every output: a timeout, the error it reported, or a
    crash (its signal or exit code and last output)."""
    if timed_out:
        return "timeout", (f"no result within {timeout:g} s, while {stage}: an endless loop (a loop bound that "
                           "never changes, a barrier not every thread reaches) or a far too slow kernel; the run "
                           "and every process it started were stopped")
    if errors:
        err = errors[0]
        hint = f" ({err['hint']})" if err.get("hint") else ""
        return "error", f"the run failed while {err.get('stage') or stage}: {err['message']}{hint}"
    code = returncode
    how = f"was killed by {_signal_name(-code)}" if code is not None and code < 0 else f"exited with code {code}"
    last = [ln for ln in printed.splitlines() if ln.strip()][-3:]
    detail = f"; its last output: {' | '.join(last)}" if last else ""
    missing = dims_text(cases[len(result["cases"])]) if len(result["cases"]) < len(cases) else ""
    return "crashed", (f"the run crashed while {stage}: the process {how} before returning the output for "
                       f"{missing}{detail}")


# ---- the verdict ---------------------------------------------------------------------------------------

def fill_run(res: Any, outcome: RunOutcome) -> None:
    """The run's part of the report: its status, where it ran, what it was right on or the first wrong output,
    the speed it measured, and how correctness was established."""
    res.run_status = outcome.status
    result = outcome.result or {}
    res.run_where = result.get("device") or res.run_where
    if outcome.status == "ok":
        n = len(result.get("cases", []))
        shapes = "; ".join(dims_text(c["dims"]) for c in result.get("cases", []))
        res.run_message = f"correct on {n} fresh random input{'s' if n != 1 else ''} ({shapes})"
    elif outcome.status == "wrong":
        bad = next(c for c in result["cases"] if not c["ok"])
        m = next(o for o in bad["outputs"] if not o["ok"])
        res.mismatch = {**m, "dims": bad["dims"]}
        res.run_message = f"wrong result for {dims_text(bad['dims'])}"
    else:
        res.run_message = outcome.message
    if result.get("speed"):
        res.speed = result["speed"]
    if outcome.status in ("ok", "wrong"):
        res.established = outcome.evidence.value
    res.isolation = outcome.isolation
    res.notes += outcome.notes


def annotate_emulated(res: Any, outcome: Any, spec: Any) -> None:
    """Add what the learner should know about an emulated run to a ``CheckResult``: its notes, how many
    cases it covered and which it left to a GPU, its other builds' included (so a pass says "PASSED on n of m
    cases"), and the chapter's concept floors judged on what the emulator saw (``spec.floors``)."""
    result = getattr(outcome, "result", None) or {}
    res.notes += [str(n) for n in result.get("notes", [])[:3]]
    shapes: list[tuple[str, dict[str, int]]] = []
    skipped: list[dict[str, int]] = []
    for build in (spec, *getattr(spec, "builds", ())):  # the other builds' cases are the check's too
        for d in cases.cases(build):
            if (build.id, cases.shape(d)) not in shapes:
                shapes.append((build.id, cases.shape(d)))
        skipped += cases.left_to_gpu(build)
    res.cases_run, res.cases_total = len(shapes), len(shapes) + len(skipped)
    orders = sorted({TMA_ORDERS[d.get("tma_order", 0)] for d in cases.cases(spec)})
    if len(orders) > 1:
        res.notes.append("TMA loads were made to land in these orders: " + ", ".join(orders))
    if skipped:
        res.notes.append("too big to emulate, left to a GPU: " + "; ".join(dims_text(d) for d in skipped))
    if getattr(outcome, "status", "") == "ok":
        facts = result.get("facts", {})
        for floor in getattr(spec, "floors", ()):
            judged = floor.judge_emulated(facts)
            if judged is not None:
                res.floors.append(judged)


def judge_gpu_floors(res: Any, spec: Any) -> None:
    """The concept floors a GPU run's speed can judge (e.g. the ratio to the reference solution)."""
    for floor in spec.floors:
        judged = floor.judge_gpu(res.speed or {})
        if judged is not None:
            res.floors.append(judged)


def judge_run(res: Any, spec: Any, ran: Any, why: str) -> None:
    """Everything the run stage's ``Ran`` says, written into the report: the outcome, the mode's notes and caveats,
    the emulated run's coverage and floors, or the GPU run's floors and its hazard run."""
    mode, outcome = ran.mode, ran.outcome
    fill_run(res, outcome)
    if mode.note:
        res.notes.append(mode.note)
    if why and mode.name in ("emu", "practice"):
        res.notes.append(why)
        res.caveat = res.caveat or "on the CPU emulator: " + why.split(", so ")[0]
    if mode.name == "practice":
        practice = "practice only: without NVRTC the source ran as host C++ on this machine, not the program a " \
            "GPU runs; not a graded verdict"
        res.caveat = practice + (f"; {res.caveat}" if res.caveat else "")
    if mode.name in ("emu", "practice"):
        annotate_emulated(res, outcome, spec)
        marker = "EmulationCompileError: "
        if outcome.status == "error" and marker in outcome.message and res.resources.startswith("built for"):
            # without NVRTC the sandboxed run is the file's first compile: its error is a compile error
            res.compiled, res.compile_error = False, outcome.message.split(marker, 1)[1]
    elif mode.name == "gpu" and outcome.status == "ok":
        judge_gpu_floors(res, spec)
        if ran.hazards is not None:
            judge_hazards(res, spec, ran.hazards, ran.hazard_cases)
    res.notes += ran.notes


def judge_hazards(res: Any, spec: Any, out: RunOutcome, hazard_cases: Sequence[dict[str, int]]) -> None:
    """The emulator's hazard run beside a GPU run: a race, a stage released while a product still reads it, a box
    read before it landed ... fail the check even where the GPU's timing hid them; its concept floors too."""
    from .spec_kit import StaticResult

    name = "hazard analysis (CPU emulator)"
    where = "; ".join(dims_text(c) for c in hazard_cases)
    if out.status == "ok":
        res.hazards = StaticResult(name, True, f"no race or asynchronous hazard at {where}")
        for floor in spec.floors:
            judged = floor.judge_emulated((out.result or {}).get("facts", {}))
            if judged is not None:
                res.floors.append(judged)
    elif out.status == "wrong":
        bad = next(c for c in out.result["cases"] if not c["ok"])
        m = next(o for o in bad["outputs"] if not o["ok"])
        res.hazards = StaticResult(name, False, f"right on the GPU, but wrong at {dims_text(bad['dims'])} when the "
                                   "emulator lets asynchronous copies and products finish in another order "
                                   f"({m.get('wrong', '?')} elements of {m['output']} wrong): the code relies on "
                                   "timing")
    else:
        res.hazards = StaticResult(name, False, out.message)


def decide(res: Any) -> None:
    """PASSED when the static checks, the run and the floors agree; FAILED when one says no; None (not verified)
    when nothing could run the kernel here."""
    ran = res.run_status in ("ok", "wrong", "error", "crashed", "timeout")
    if not res.static_ok:
        res.passed = False
    elif ran:
        res.passed = res.run_status == "ok" and res.judged_ok
    else:
        res.passed = None
