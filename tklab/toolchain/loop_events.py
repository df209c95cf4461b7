"""A kernel's main loop read as events in order, and counted by kind: what one iteration of one warp issues.

Why: "where does my step differ from the fastest library's" is answered in the machine code, not the source. One
iteration of a kernel's hot loop (``sass.main_loop``) becomes a line of events -- wgmma (``mma80x8``: eight of N = 80
from shared memory, ``mma128rx5``: five with A in registers), waits (``wait<=1`` leaves the newest group running),
barriers, mbarrier waits and arrivals, shared stores and their width, exponentials -- with runs merged, and a count of
instructions by kind. ``bench/sass_vs_fa4.py`` writes FlashAttention-4's and ours this way (its report is what
chapters 10 and 11 print); ``beside(exercise, report)`` sets a learner's own compiled step beside them.

Public API: ``hot_loop(sass)``, ``events(loop)``, ``counts(loop)``, ``GROUPS``, ``beside(exercise, report, ...)``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

#: What ``counts`` counts: opcode prefixes per kind.
GROUPS: dict[str, tuple[str, ...]] = {
    "wgmma": ("HGMMA",), "exp": ("MUFU",), "max": ("FMNMX",), "fp32 math": ("FFMA", "FMUL", "FADD"),
    "select": ("FSEL",), "to bf16": ("F2FP",), "shared ld": ("LDS", "LDSM"), "shared st": ("STS", "STSM"),
    "uniform": ("U",), "int/addr": ("IMAD", "LOP3", "LEA", "SHF", "IADD3", "VIADD", "ISETP", "SEL", "PLOP3"),
    "sync": ("BAR", "SYNCS", "WARPGROUP", "MEMBAR", "FENCE"), "shuffle": ("SHFL",),
}

Loop = list[tuple[str, str]]


def hot_loop(sass: str) -> Loop:
    """(opcode, operands) of a kernel's main loop (``sass.main_loop``'s choice), operands without the encoding."""
    from .sass import loops, main_loop

    ops = main_loop(sass)
    body = next(b for b in loops(sass) if [o for _, o, _ in b] == ops)
    return [(o, a.split(";")[0].strip()) for _, o, a in body]


def counts(loop: Loop) -> dict[str, int]:
    """The loop's length, its instructions per kind of GROUPS, and its 16-byte shared stores."""
    ops = [o for o, _ in loop]
    row = {"loop": len(ops)}
    for name, prefixes in GROUPS.items():
        row[name] = sum(1 for o in ops if o.startswith(prefixes) and not (name == "uniform" and o.startswith("UTMA")))
    row["16-byte st"] = sum(1 for o in ops if o.startswith("STS.128"))
    return row


def events(loop: Loop) -> str:
    """The loop's events in order, runs merged (``expx32``): wgmma, waits, barriers, mbarriers, shared stores and
    exponentials; everything else (arithmetic, addresses, loads) is left out."""
    runs: list[list[Any]] = []  # [tag, count]
    for o, a in loop:
        if o.startswith("HGMMA"):
            shape = re.search(r"x(\d+)x16", o + " " + a)
            operands = a.split(",")
            in_regs = len(operands) > 1 and "gdesc" not in operands[1]
            tag = f"mma{shape.group(1) if shape else ''}{'r' if in_regs else ''}"
        elif o.startswith("WARPGROUP.DEPBAR"):
            tag = f"wait<={int(a.split(',')[-1], 0)}"
        elif o.startswith(("BAR.", "SYNCS.ARRIVE", "SYNCS.PHASECHK")):
            tag = ".".join(o.split(".")[:2])
        elif o.startswith(("STS", "STSM")):
            tag = o
        elif o.startswith("MUFU.EX2"):
            tag = "exp"
        else:
            continue
        if runs and runs[-1][0] == tag:
            runs[-1][1] += 1
        else:
            runs.append([tag, 1])
    return " ".join(tag if n == 1 else f"{tag}x{n}" for tag, n in runs)


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
    from ..widgets.traced import _exercise_file, is_stub
    from .compiler import compile as nvrtc_compile

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
