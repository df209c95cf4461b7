"""Which path this machine is on, and what each chapter does there (``make doctor`` prints it).

Four paths: a Hopper GPU (everything runs), another NVIDIA GPU (the chapters it can run run on it, the
Hopper ones fall back to the CPU emulator and the recorded H200 numbers), a CPU with NVRTC (kernels are
compiled and inspected, checked on the emulator, timings recorded) and a CPU without NVRTC (macOS: checked
on the emulator, compile and SASS cells say they need NVRTC, outputs recorded). What a chapter needs is
what its exercises need (``spec.arch``); chapter 00 only copies memory.

Public API: ``MachinePath``, ``machine_path()``, ``Chapter``, ``chapters()``, ``on_path(chapter, path)``, ``table()``.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from enum import Enum

from ..paths import REPO
from ..run import gpu
from ..toolchain import locate

#: Chapter 00 has no exercise: its kernels copy and add vectors, which every supported GPU runs.
CHAPTER_00_NEEDS = "sm_75"


class MachinePath(str, Enum):
    HOPPER = "Hopper GPU"
    OTHER_GPU = "other NVIDIA GPU"
    CPU_NVRTC = "CPU with NVRTC"
    CPU_ONLY = "CPU without NVRTC"


def machine_path() -> MachinePath:
    """The path this machine is on."""
    if gpu.available():
        return MachinePath.HOPPER if gpu.runs("sm_90a") else MachinePath.OTHER_GPU
    return MachinePath.CPU_NVRTC if locate.nvrtc_available() else MachinePath.CPU_ONLY


@dataclass(frozen=True)
class Chapter:
    number: str
    title: str
    needs: str  # the arch its kernels need (the most demanding of its exercises')
    language: str  # "cuda" or "numba"


def _needs(archs: list[str]) -> str:
    """The most demanding arch: an ``a`` arch (one architecture only) beats any plain one."""
    return max(archs, key=lambda a: (a.endswith("a"), gpu.capability(a)))


def chapters() -> list[Chapter]:
    """The chapters with a notebook, in order, with what their exercises need."""
    from ..grading import specs

    by_chapter: dict[str, list[object]] = {}
    for exercise_id in specs.all_ids():
        spec = specs.get(exercise_id)
        if spec.language != "python":  # drills run on the CPU anywhere: they say nothing of a chapter's GPU needs
            by_chapter.setdefault(spec.chapter, []).append(spec)
    out = []
    for nb in sorted((REPO / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        number, title = nb.stem[:2], nb.stem[3:].replace("_", " ")
        found = by_chapter.get(number, [])
        needs = _needs([s.arch for s in found]) if found else CHAPTER_00_NEEDS  # type: ignore[attr-defined]
        language = "numba" if found and all(s.language == "numba" for s in found) else "cuda"  # type: ignore[attr-defined]
        out.append(Chapter(number, title, needs, language))
    return out


def on_path(ch: Chapter, path: MachinePath, emulator: bool = True) -> tuple[str, str]:
    """(its kernels, its timings) for chapter ``ch`` on ``path``, in a few words each; ``emulator``: whether
    the CPU emulator works here (the doctor's probe)."""
    emulated = "its PTX interpreted on the CPU" if emulator else "not run here (no working CPU emulator)"
    if emulator and path is MachinePath.CPU_ONLY:
        emulated = "a practice build on the CPU (no NVRTC: not graded)"
    if path in (MachinePath.HOPPER, MachinePath.OTHER_GPU):
        if gpu.runs(ch.needs) and (path is MachinePath.HOPPER or ch.language == "numba" or locate.nvrtc_available()):
            return "run on this GPU", "measured here"
        return f"exercise {emulated} (needs {ch.needs})", "recorded on an H200"
    if ch.language == "numba":
        if path is MachinePath.CPU_ONLY:
            return "numba's CUDA simulator (practice: not graded)", "recorded on an H200"
        return "its PTX (numba) interpreted on the CPU", "recorded on an H200"
    if ch.number == "00":
        return "recorded (no GPU to measure)", "recorded on an H200"
    if path is MachinePath.CPU_NVRTC:
        return f"compiled and inspected here, {emulated}", "recorded on an H200"
    return f"{emulated} (compile/SASS cells need NVRTC)", "recorded on an H200"


def mac_lines(emulator: bool, compiler: str | None) -> list[str]:
    """What a Mac's path is, said outright (``compiler``: the emulator's C++ compiler, when one was found)."""
    if emulator and compiler:
        how = (f"practised on the CPU emulator's host build (with {compiler}): no NVRTC means no PTX to interpret, so "
               "these runs are practice, not graded verdicts")
    else:
        how = "need the CPU emulator, which needs Apple's clang++: `xcode-select --install`, then `make doctor`"
    return ["  A Mac: no NVIDIA GPU and no NVRTC (CUDA has no macOS build), so the course runs on the CPU:",
            f"  - CUDA exercises: {how}",
            "  - compile and SASS cells: say that they need NVRTC",
            "  - timings and profiles: the ones recorded on an H200",
            "  - models, explorers, widgets and drills: as anywhere else",
            "  (the emulator's macOS build is tested on Linux in its Mac mode, TKLAB_EMU_PORTABLE=1, never on a Mac)"]


def _compiler() -> str | None:
    try:
        from ..emulate import toolchain as host

        return host.find().description
    except Exception:  # noqa: BLE001 - no compiler: the Mac's lines say what to install
        return None


def table(path: MachinePath | None = None, emulator: bool = True, platform: str | None = None) -> list[str]:
    """The doctor's lines: the path, then one line per chapter (``emulator``: see ``on_path``; ``platform``:
    ``sys.platform`` unless given: a Mac's path is named as such)."""
    path = path or machine_path()
    if path in (MachinePath.HOPPER, MachinePath.OTHER_GPU):
        where = f"{gpu.name()}, {gpu.arch()}"
    else:
        why = (locate.nvrtc_missing() or "").split(";")[0]
        where = "no NVIDIA GPU" + (f"; {why}" if path is MachinePath.CPU_ONLY and why else "")
    mac = (platform or sys.platform) == "darwin" and path is MachinePath.CPU_ONLY
    rows = [(f"{c.number} {c.title}", *on_path(c, path, emulator)) for c in chapters()]
    w0, w1 = max(len(r[0]) for r in rows), max(len(r[1]) for r in rows)
    lines = [f"This machine's path: {path.value}{', a Mac' if mac else ''} ({where})"]
    if mac:
        lines += mac_lines(emulator, _compiler() if emulator else None)
    lines += [f"  {'chapter':<{w0}}  {'kernels':<{w1}}  timings"]
    lines += [f"  {a:<{w0}}  {b:<{w1}}  {c}" for a, b, c in rows]
    return lines
