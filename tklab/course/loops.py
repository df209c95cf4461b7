"""A learner's compiled step beside the chapter's reference and FlashAttention-4's, read as events in order.

Why: chapter 11 compares FlashAttention-4's backward step with the reference instruction by instruction (the report
of ``bench/sass_vs_fa4.py``); a learner who wrote the step wants to see theirs the same way. The exercise file is
compiled for sm_90a with the exercise's options and never run; its main loop is read by
``tklab.toolchain.loop_events``.

Public API: ``beside(exercise, report, ...)``, ``report_line(report, kind, d, who)``.
"""

from __future__ import annotations

from pathlib import Path

from ..toolchain.loop_events import events, hot_loop


def report_line(report: Path, kind: str, d: int, who: str) -> tuple[str, str]:
    """(work, events) of one kernel in a ``bench/sass_vs_fa4.py`` report: e.g. kind "bwd", d 128, who
    "FlashAttention-4" gives ("16x80", "SYNCS.PHASECHKx2 mma80x8 ...")."""
    lines = report.read_text().splitlines()
    row = next((ln for ln in lines if ln.startswith(f"| {kind} d={d} | {who} |")), None)
    ev = next((ln for ln in lines if ln.startswith(f"- {kind} d={d}, {who}:")), None)
    if row is None or ev is None:
        raise ValueError(f"{report.name} has no {kind} d={d} row for {who!r}")
    return row.strip("|").split("|")[2].strip(), ev.split("`")[1]


def beside(exercise: str, report: Path, *, kind: str = "bwd", d: int = 128, who: str = "FlashAttention-4",
           exercises_dir: Path | None = None, width: int = 110) -> str:
    """The learner's compiled step (``exercises/<exercise>``, built with the exercise's options for sm_90a; it is
    compiled, never run) as events, beside the chapter's reference and ``who``'s from ``report``. A file that is
    still the stub, missing, or does not compile says so in a sentence instead."""
    import textwrap

    from ..grading import specs
    from ..toolchain.compiler import compile as nvrtc_compile
    from ..widgets.traced import _exercise_file, is_stub

    spec = specs.get(exercise)
    path, solution = _exercise_file(exercise, exercises_dir)
    work, theirs = report_line(report, kind, d, who)

    def show(label: str, ev: str) -> str:
        return f"{label}:\n" + textwrap.fill(ev, width, initial_indent="    ", subsequent_indent="    ")

    ref = nvrtc_compile(solution.read_text(), arch=spec.arch, name=solution.name, options=spec.options)
    kernel = "flash_bwd" if kind == "bwd" else "flash_fwd"
    out = [show(f"{who} ({work} per warp)", theirs),
           show("the chapter's reference", events(hot_loop(ref[kernel].sass)))]
    if not path.is_file():
        return "\n".join(out + [f"exercises/{path.name} is missing: python -m tklab exercises puts it back"])
    if is_stub(path, solution):
        return "\n".join(out + [f"exercises/{path.name} is still the stub: fill in its TODO, then run this again"])
    try:
        mine = nvrtc_compile(path.read_text(), arch=spec.arch, name=path.name, options=spec.options)
        line = events(hot_loop(mine[kernel].sass))
    except Exception as e:  # noqa: BLE001 -- said in a sentence, not a traceback
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        return "\n".join(out + [f"exercises/{path.name} did not compile: {first}"])
    return "\n".join(out + [show(f"yours (exercises/{path.name})", line)])
