"""Instruction numbers → the learner's source lines, through the PTX's ``.loc`` records.

With ``-lineinfo`` every PTX instruction carries a location and the chain of calls it was inlined through, so an
instruction inside the tile library (an mbarrier wait in ``tk/hopper/mbarrier.cuh``) also knows the learner's line
that called it. A message names the learner's line first and the library's in parentheses, as the native
emulator's messages do.

Public API: ``where(program, index, learner) -> str`` ("ch10_flash.cu:143 (in tk/hopper/mbarrier.cuh:24)"),
``line_of(program, index, learner) -> int | None`` (the learner's line number), ``shown(path)``.
"""

from __future__ import annotations

from pathlib import PurePosixPath

from .decode import Program


def shown(path: str) -> str:
    """How a file is named in a message: the tile library's headers as ``tk/...``, others by their name."""
    if "/tk/" in path:
        return "tk/" + path.split("/tk/", 1)[1].replace("/../", "/").replace("hopper/../", "")
    return PurePosixPath(path).name


def _frames(program: Program, index: int) -> list[tuple[str, int]]:
    if not 0 <= index < len(program.instrs):
        return []
    loc = program.instrs[index][5]
    frames = []
    for lc in program.loc_chain(loc):
        path = program.files.get(lc.file, "")
        if lc.line > 0 and path:
            frames.append((shown(path), lc.line))
    return frames


def where(program: Program, index: int, learner: str) -> str:
    """``file:line`` of instruction ``index``: the innermost frame in the learner's file (``learner``, a base name:
    the statement they wrote, inside their own helper or lambda if it is one) when the instruction was inlined from
    elsewhere, with the innermost frame in parentheses; "" if unknown."""
    frames = _frames(program, index)
    if not frames:
        return ""
    mine = [f for f in frames if f[0] == learner]
    first = f"{frames[0][0]}:{frames[0][1]}"
    if not mine:
        return first
    at = f"{mine[0][0]}:{mine[0][1]}"
    return at if at == first else f"{at} (in {first})"


def line_of(program: Program, index: int, learner: str) -> int | None:
    """The learner's line of instruction ``index`` (the innermost frame in their file), or None."""
    mine = [f for f in _frames(program, index) if f[0] == learner]
    return mine[0][1] if mine else None
