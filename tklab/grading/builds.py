"""An exercise's other builds: the same learner file compiled with other options, run by the same check.

Why: a branch the check's build compiles away never runs under the check. Chapter 11's kernel chooses its dQ
share with ``if constexpr (DQ_SPLIT)``: the d = 128 build takes one branch and discards the other, so a mistake
in the d = 64 branch, even one that does not compile at d = 64, would pass. ``Exercise.builds`` names the other
builds (each an ``Exercise`` of its own, id ``<id>@<tag>``: its options and cases, the same file), and after the
main run passes, ``run_others`` runs each the way the main run ran (same mode and seed, its own sandboxed child,
its own compile: NVRTC here, the PTX the emulator interprets built from it). Their cases join the outcome's, so
the report lists them (``D=64``); a build that does not compile, fails or is wrong is the outcome.

Public API: ``run_others(spec, outcome, *, file, source, shown, mode, seed, hide, timeout, arch, emulator_parts)``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .judge import RunOutcome


def _compiled(other: Any, source: str, shown: str, mode: str, arch: str) -> tuple[list[str], str | None, str]:
    """(cache keys for the child, PTX for an emulated run, problem) of one build: compiled here, where NVRTC
    runs as the grader, so a branch that compiles only in the main build is a compile error of this one."""
    from ..toolchain.compiler import CompileError
    from ..toolchain.compiler import compile as tk_compile
    from ..toolchain.locate import NvrtcUnavailable

    try:
        mod = tk_compile(source, arch=arch, name=shown, options=other.options)
    except NvrtcUnavailable:  # without NVRTC the practice build compiles it in its child
        return [], None, ""
    except CompileError as e:
        first = next((ln for ln in str(e).splitlines() if ": error" in ln), str(e).splitlines()[0] if str(e) else "")
        return [], None, f"{shown} does not compile as {other.title} ({' '.join(other.options)}): {first}"
    ptx = None
    if mode in ("emu", "hazards", "trace"):
        from .program import ptx_for

        ptx = ptx_for(other, source, shown, mod)
    return [mod.key], ptx, ""


def run_others(spec: Any, outcome: RunOutcome, *, file: Path, source: str, shown: str, mode: str,
               seed: int | None, hide: Sequence[str | os.PathLike[str]], timeout: float, arch: str,
               emulator_parts: Sequence[Path] | None) -> RunOutcome:
    """``outcome`` with ``spec.builds`` run after it (see the module docstring): unchanged when it did not pass
    or there is no other build; else the first other build's outcome that is not ``ok``, or ``outcome`` with
    their cases and notes added. The benchmark, a concept floor's yardstick and a GPU's hazard run stay the main
    build's."""
    if outcome.status != "ok" or not spec.builds or spec.language != "cuda":
        return outcome
    from .modes import MODES
    from .runner import run_isolated

    for other in spec.builds:
        if not MODES[mode].cases(other):  # e.g. no case of it small enough to emulate here
            continue
        keys, ptx, problem = _compiled(other, source, shown, mode, arch)
        if problem:
            return RunOutcome("error", problem, isolation=outcome.isolation)
        out = run_isolated(other.id, file, mode=mode, timeout=timeout, seed=seed, source=source, hide=hide,
                           cache_keys=keys, arch=arch or None, emulator_parts=emulator_parts, ptx=ptx)
        if out.status != "ok":
            return out
        result = outcome.result if outcome.result is not None else {}
        result.setdefault("cases", []).extend((out.result or {}).get("cases", []))
        outcome.result = result
        outcome.notes += [n for n in out.notes if n not in outcome.notes]
    return outcome
