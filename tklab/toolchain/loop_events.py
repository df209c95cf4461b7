"""A kernel's main loop read as events in order, and counted by kind: what one iteration of one warp issues.

Why: "where does my step differ from the fastest library's" is answered in the machine code, not the source. One
iteration of a kernel's hot loop (``sass.main_loop``) becomes a line of events -- wgmma (``mma80x8``: eight of N = 80
from shared memory, ``mma128rx5``: five with A in registers), waits (``wait<=1`` leaves the newest group running),
barriers, mbarrier waits and arrivals, shared stores and their width, exponentials -- with runs merged, and a count of
instructions by kind. ``bench/sass_vs_fa4.py`` writes FlashAttention-4's and ours this way (its report is what
chapters 10 and 11 print); ``tklab.course.loops.beside`` sets a learner's own compiled step beside them.

Public API: ``hot_loop(sass)``, ``events(loop)``, ``counts(loop)``, ``GROUPS``.
"""

from __future__ import annotations

import re
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
