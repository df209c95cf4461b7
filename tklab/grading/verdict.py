"""What a check concluded, and the report a learner reads: ``CheckResult``, its rows, ``Evidence``.

``CheckResult.passed`` is True, False, or None when nothing could say no but nothing could run the
kernel either (``NOT VERIFIED``); ``established`` says how correctness was established (``Evidence``).
The report is one list of rows (``CheckResult.rows()``), shown as text (``repr``) and as HTML in a
notebook, so the two never drift apart.

Public API: ``CheckResult``, ``Row``, ``Evidence``.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any

from .spec_kit import StaticResult, dims_text


class Evidence(str, Enum):
    """How a check established that a kernel's output is right (or that it could not)."""

    GPU = "gpu"  # ran on this machine's GPU
    SIMULATOR = "simulator"  # ran in numba's CUDA simulator (numba exercises, on the CPU)
    CPU_EMULATION = "cpu-emulation"  # the PTX NVRTC built, run by the CPU interpreter: a mode for it registers itself
    CPU_PRACTICE = "cpu-practice"  # no NVRTC: the source built as host C++ and run natively, practice only
    CPU = "cpu"  # a drill's Python function, run on the CPU and compared with the hardware model
    NOT_ESTABLISHED = "not-established"  # nothing ran: static checks only



@dataclass(frozen=True)
class Row:
    """One line of a check's report: a mark (✔ ✘ ·), what it is about, what was seen, and lines shown
    beneath it as they are (a compile log, the window of a wrong output); the block's first ``prose`` lines
    are sentences, which the HTML report wraps (the rest keep their columns)."""

    mark: str
    label: str
    detail: str
    block: list[str] = field(default_factory=list)
    prose: int = 0


@dataclass
class CheckResult:
    """The verdict on one file; ``repr`` is the report a learner reads."""

    exercise: str
    title: str
    path: str
    compiled: bool = False
    passed: bool | None = None
    arch: str = ""
    resources: str = ""
    compile_error: str = ""
    static: list[StaticResult] = field(default_factory=list)
    run_status: str = "not run"  # ok, wrong, error, crashed, timeout, skipped, not run
    run_where: str = ""
    run_message: str = ""
    mismatch: dict[str, Any] | None = None
    speed: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)
    established: str = Evidence.NOT_ESTABLISHED.value  # how the output was judged (right or wrong): an Evidence value
    isolation: str = ""  # how the run was isolated (tklab.grading.sandbox), when there was a run
    cases_run: int = 0  # shapes the run covered, when some were left to a GPU (CPU emulation) ...
    cases_total: int = 0  # ... out of these (0: the run covered every case the exercise has)
    floors: list[StaticResult] = field(default_factory=list)  # the chapter's concept floors, judged on the run
    hazards: StaticResult | None = None  # a GPU check's second opinion: the emulator's hazard analysis
    hint: str = ""  # on FAILED: the exercise's level-1 hint (tklab.grading.hints), the concept without the line
    caveat: str = ""  # what a PASSED rests on when not everything ran here (e.g. "on the CPU emulator; ...")
    why: list[str] = field(default_factory=list)  # the trace's worst lines (grading.trace_report), when taken
    not_started: str = ""  # nothing written in the TODOs yet: where to write, all the report shows (untouched.py)
    given_changed: str = ""  # given code (outside the TODOs) the learner changed, in a sentence

    # ---- numbers ----
    @property
    def speed_ratio(self) -> float | None:
        """Library time / your time at the benchmark size (1.0 = as fast as the library)."""
        return self.speed.get("ratio") if self.speed else None

    @property
    def speed_target(self) -> float | None:
        return self.speed.get("target") if self.speed else None

    @property
    def static_ok(self) -> bool:
        return all(s.ok for s in self.static)

    @property
    def judged_ok(self) -> bool:
        """The concept floors and the emulator's hazard analysis (where they ran) found nothing wrong."""
        return all(f.ok for f in self.floors) and (self.hazards is None or self.hazards.ok)

    @property
    def partial(self) -> bool:
        """The run covered only some of the exercise's cases (the rest need a GPU)."""
        return 0 < self.cases_run < self.cases_total

    @property
    def verdict(self) -> str:
        if self.passed and self.partial:
            return f"PASSED on {self.cases_run} of {self.cases_total} cases; the rest need a GPU"
        return {True: "PASSED", False: "FAILED", None: "NOT VERIFIED"}[self.passed]

    @property
    def evidence(self) -> str:
        """Which evidence established the verdict, in words (the report's "evidence" row)."""
        how = {"gpu": f"the run on {self.run_where or 'the GPU'}", "simulator": "the run in numba's CUDA simulator",
               "cpu-emulation": "the run on the CPU emulator"}.get(self.established)
        if how is None:
            return ""
        parts = [how]
        if self.hazards is not None:
            parts.append("the CPU emulator's hazard analysis of one small case")
        if self.floors:
            parts.append("the concept floors (" + ", ".join(f.name for f in self.floors) + ")")
        return " + ".join(parts)

    @property
    def checked(self) -> list[str]:
        """What this check did establish, in plain words."""
        out = []
        if self.compiled:
            out.append(f"it compiles{f' for {self.arch}' if self.arch else ''}")
        if self.static:
            good = sum(s.ok for s in self.static)
            out.append(f"{good} of {len(self.static)} static checks pass")
        if self.established != Evidence.NOT_ESTABLISHED and self.run_status in ("ok", "wrong"):
            how = {"gpu": f"on {self.run_where or 'the GPU'}", "simulator": "in numba's CUDA simulator",
                   "cpu-emulation": f"on the CPU ({self.run_where or 'the compiled PTX, interpreted'})",
                   "cpu-practice": f"as a practice run ({self.run_where or 'not the program a GPU runs'})",
                   "cpu": "on the CPU"}.get(self.established, self.established)
            out.append(f"its output {'is right' if self.run_status == 'ok' else 'is wrong'}, run {how} on fresh "
                       "random inputs and compared by the checker")
        if self.hazards is not None and self.hazards.ok:
            out.append("no hazard in the CPU emulator's analysis of a small case")
        if self.speed_ratio is not None:
            out.append("its speed against the library")
        return out

    @property
    def unchecked(self) -> list[str]:
        """What this check did not establish, in plain words (empty when nothing is missing)."""
        if not self.compiled:
            return ["everything after compiling"]
        out = []
        if self.established == Evidence.NOT_ESTABLISHED or self.run_status not in ("ok", "wrong"):
            why = ("the run was not asked for" if self.run_message.startswith("not asked") else
                   "running it needs a GPU and this machine has none" if self.run_status == "not run" else
                   self.run_message)
            out.append(f"whether its output is right ({why}): passing the static checks does not mean it is")
        if self.speed_ratio is None:
            out.append("its speed")
        return out

    @property
    def summary(self) -> str:
        """One line: the verdict and its main reason (what ``grade`` puts in its CSV)."""
        if self.not_started:
            return f"not started: {self.not_started}"
        if not self.compiled:
            first = next((ln for ln in self.compile_error.splitlines() if ": error" in ln),
                         self.compile_error.splitlines()[0] if self.compile_error else "")
            return f"does not compile: {first}".strip()
        failed = [s for s in self.static if not s.ok]
        if self.run_status in ("error", "crashed", "timeout"):
            return self.run_message
        if self.run_status == "wrong" and self.mismatch:
            return _mismatch_line(self.mismatch)
        if failed:
            return f"{failed[0].name}: {failed[0].detail}"
        if self.hazards is not None and not self.hazards.ok:
            return f"{self.hazards.name}: {self.hazards.detail}"
        floor = next((f for f in self.floors if not f.ok), None)
        if floor is not None:
            return f"{floor.name}: {floor.detail}"
        if self.passed is None:  # (without NVRTC no static check ran: the caveat says so)
            done = "static checks passed" if self.static else "no static check ran" + (
                f" ({self.caveat})" if self.caveat else "")
            return f"{done}; correctness not established: " + (
                "the run was not asked for" if self.run_message.startswith("not asked")
                else "running it needs a GPU" if self.run_status == "not run" else self.run_message)
        line = f"correct ({self.caveat})" if self.caveat else "correct"
        if self.speed_ratio is not None:
            line += f"; {self.speed_ratio:.2f}× {self.speed['baseline']}"
            if self.speed_target is not None:
                line += f" (target {self.speed_target:.2f}×)"
        elif self.speed and self.speed.get("error"):
            line += f"; {self.speed['error']}"
        return line

    def rows(self) -> list[Row]:
        """The report's rows, in order: what the text and the HTML report both show."""
        ok, bad, dot = "✔", "✘", "·"
        changed = [Row(dot, "given code", self.given_changed)] if self.given_changed else []
        if self.not_started:  # the stub's placeholders fail in ways that blame given code: say only where to write
            return [Row(bad, "not started", self.not_started),
                    *([] if self.compiled else [Row(bad, "does not compile", "", self.compile_error.splitlines())]),
                    *changed, *(Row(dot, "note", n) for n in self.notes),
                    *([Row(dot, "hint", self.hint)] if self.hint else [])]
        if not self.compiled:
            rows = [Row(bad, "does not compile", "", self.compile_error.splitlines())]
        else:
            rows = [Row(ok, f"compiles for {self.arch}" if self.arch else "compiles", self.resources)]
        rows += changed
        rows += [Row(ok if s.ok else bad, s.name, s.detail) for s in self.static]
        if self.compiled:
            mark = {"ok": ok, "not run": dot, "skipped": dot}.get(self.run_status, bad)
            block = _mismatch_lines(self.mismatch) if self.mismatch else []
            rows.append(Row(mark, "run" + (f" on {self.run_where}" if self.run_where else ""), self.run_message,
                            block, prose=len(block) - len(_grid(self.mismatch.get("window"))) if block else 0))
            if self.hazards is not None:
                rows.append(Row(ok if self.hazards.ok else bad, self.hazards.name, self.hazards.detail))
            rows += [Row(ok if f.ok else bad, f.name, f.detail) for f in self.floors]
            if self.speed:
                rows.append(_speed_row(self.speed))
            if self.why:
                rows.append(Row("·", "why (the emulator's trace, worst lines first)", "", list(self.why)))
            if self.evidence and self.passed is not None:
                rows.append(Row(dot, "evidence", self.evidence))
            if self.isolation:
                rows.append(Row(dot, "where it ran", _isolation_in_words(self.isolation)))
        rows += [Row(dot, "note", n) for n in self.notes]
        if self.hint:
            rows.append(Row(dot, "hint", self.hint))
        if self.passed is None:
            rows.append(Row(dot, "checked", "; ".join(self.checked) or "nothing"))
            rows.append(Row(bad, "NOT checked", "; ".join(self.unchecked)))
        return rows

    @property
    def messages(self) -> list[str]:
        """The report, line by line."""
        out = [f"{self.exercise} · {self.title} · {self.path}"]
        for r in self.rows():
            out.append(f"  {r.mark} {r.label}" + (f": {r.detail}" if r.detail or r.block else ""))
            out += ["      " + ln for ln in r.block]
        reason = (f" ({self.caveat})" if self.caveat else "") if self.passed else f": {self.summary}"
        out.append(f"{self.verdict}{reason}")
        return out

    def __repr__(self) -> str:
        return "\n".join(self.messages)

    __str__ = __repr__

    def _repr_html_(self) -> str:
        """The rows as a table as wide as the notebook's column, never wider: fixed columns, long words
        broken, and the yours/expected grid (whose numbers must not wrap) scrolling sideways inside its own
        box. A notebook nobody has trusted drops the inline styles; the grid is narrow enough to fit then too."""
        colour = {True: "#1a7f37", False: "#cf222e", None: "#9a6700"}[self.passed]
        left = "text-align:left;vertical-align:top;overflow-wrap:anywhere"
        body = "".join(
            f"<tr><td style='vertical-align:top'>{r.mark}</td><td style='{left}'>{html.escape(r.label)}</td>"
            f"<td style='{left}'>{html.escape(r.detail)}"
            + "".join(f"<div style='margin-top:0.3em'>{html.escape(line)}</div>" for line in r.block[:r.prose])
            + (f"<pre style='white-space:pre;overflow-x:auto;max-width:100%;margin:0.3em 0 0'>"
               f"{html.escape(chr(10).join(r.block[r.prose:]))}</pre>" if r.block[r.prose:] else "") + "</td></tr>"
            for r in self.rows())
        reason = ((f" ({html.escape(self.caveat)})" if self.caveat else "") if self.passed
                  else ": " + html.escape(self.summary))
        return (f"<div style='max-width:100%;overflow-x:auto;overflow-wrap:anywhere'><b>{html.escape(self.exercise)}"
                f"</b> · {html.escape(self.title)} · <code>{html.escape(self.path)}</code>"
                "<table style='width:100%;table-layout:fixed;margin:0.3em 0'><colgroup><col style='width:1.8em'>"
                f"<col style='width:12em'><col></colgroup>{body}</table>"
                f"<b style='color:{colour}'>{self.verdict}</b>{reason}</div>")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(verdict=self.verdict, summary=self.summary, evidence=self.evidence, speed_ratio=self.speed_ratio,
                 checked=self.checked,
                 unchecked=self.unchecked)
        return d


def _isolation_in_words(isolation: str) -> str:
    """The sandbox in a learner's words; the grader's detail stays in ``CheckResult.isolation`` (and --json)."""
    if isolation.startswith("bubblewrap"):
        return ("in a sandbox: your code could not touch your files, the network or the checker "
                "(details: the result's .isolation)")
    return ("in a separate process, so a crash or a hang cannot take your notebook down (details: the "
            "result's .isolation)")


def _fmt(x: float) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "nan"
    return f"{x:.5g}"


def _index(name: str, index: Sequence[int]) -> str:
    return f"{name}[{', '.join(map(str, index))}]"


def _mismatch_line(m: dict[str, Any]) -> str:
    where = dims_text(m["dims"]) if m.get("dims") else ""
    if "reason" in m:
        return f"wrong result ({where}): {m['reason']}"
    unwritten = f", {m['unwritten']} never written" if m.get("unwritten") else ""
    unwritten += f", {m['nan_written']} written as NaN" if m.get("nan_written") else ""
    return (f"wrong result ({where}): {m['wrong']} of {m['total']} elements of {m['output']} wrong{unwritten}"
            f"{_rms_text(m)}; first {_index(m['output'], m['index'])} = {_fmt(m['got'])}, "
            f"expected {_fmt(m['expected'])}")


def _rms_text(m: dict[str, Any]) -> str:
    if m.get("rms_bound") is None or m.get("relative_rms") is None:
        return ""
    return f" (relative RMS error {m['relative_rms']:.2g}, at most {m['rms_bound']:.2g} allowed)"


def _mismatch_lines(m: dict[str, Any]) -> list[str]:
    """First wrong element, then the window of output above the expected values (wrong entries starred)."""
    if "reason" in m:
        return [m["reason"]]
    name = m["output"]
    notes = ([f"{m['unwritten']} never written: they still hold the NaN the checker filled them with"]
             if m.get("unwritten") else []) + \
        ([f"{m['nan_written']} written as NaN: computed from garbage, e.g. shared memory no thread filled"]
         if m.get("nan_written") else [])
    lines = [f"{m['wrong']} of {m['total']} elements of {name} are wrong"
             + (f" ({'; '.join(notes)})" if notes else "") + _rms_text(m)
             + f"; the first is {_index(name, m['index'])}: got {_fmt(m['got'])}, expected {_fmt(m['expected'])}"]
    w = m.get("window")
    if not w:
        return lines
    r0, c0 = w["origin"]
    rows, cols = len(w["got"]), len(w["got"][0]) if w["got"] else 0
    span = f"rows {r0}..{r0 + rows - 1}, columns {c0}..{c0 + cols - 1}" if w.get("matrix") else \
        f"elements {c0}..{c0 + cols - 1}"
    lines.append(f"{span} of {name} (* = wrong):")
    return lines + _grid(w)


def _grid(w: dict[str, Any] | None) -> list[str]:
    """The window's output above the expected values, in columns as wide as the widest number plus a space
    (so no two numbers ever touch), each row labelled by its index in a matrix. One above the other, not
    side by side: half as wide, so the grid fits a notebook's column."""
    if not w:
        return []
    r0 = w["origin"][0]
    got = [[_fmt(v) + ("*" if bad else " ") for v, bad in zip(row, marks, strict=True)]
           for row, marks in zip(w["got"], w["bad"], strict=True)]
    expected = [[_fmt(v) + " " for v in row] for row in w["expected"]]
    width = 1 + max((len(c) for row in got + expected for c in row), default=0)
    label = max(5, len(str(r0 + len(got) - 1)))
    out = []
    for title, grid in (("yours", got), ("expected", expected)):
        out.append(" " * (label + 2) + title)
        for i, row in enumerate(grid):
            index = str(r0 + i).rjust(label) if w.get("matrix") else " " * label
            out.append(index + "".join(c.rjust(width) for c in row).rstrip())
    return out


def _speed_row(s: dict[str, Any]) -> Row:
    where = dims_text(s["dims"])
    if s.get("error"):
        return Row("✘", f"speed ({where})", s["error"])
    rate = ""
    if s.get("tflops"):
        rate = f"; {s['tflops']:.1f} vs {s['baseline_tflops']:.1f} TFLOP/s"
    elif s.get("gbps"):
        rate = f"; {s['gbps']:.0f} vs {s['baseline_gbps']:.0f} GB/s"
    target = s.get("target")
    verdict = ""
    if target is not None:
        verdict = f" (target {target:.2f}×: {'met' if s['ratio'] >= target else 'not yet'})"
    mark = "✔" if target is None or s["ratio"] >= target else "·"
    return Row(mark, f"speed at {where}", f"{s['ms']:.3f} ms, {s['baseline']} {s['baseline_ms']:.3f} ms → "
               f"{s['ratio']:.2f}× the library{verdict}{rate}")


