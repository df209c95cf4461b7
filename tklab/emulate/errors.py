"""What can go wrong when a kernel runs on the CPU, as exceptions a learner can act on.

The runtime reports an error as JSON with placeholders: ``@@PC:offset@@`` (a code address in the
module → `` at file.cu:LINE``), ``@@S:alloc:byte@@`` (a shared-memory byte → ``As[3][7]``) and
``@@G:slot:offset:bytes@@`` (a global address → ``C[32, 0], 0 elements past the end of argument 2
'float* C' (32×32 float32)``) and, for the PTX interpreter, ``@@I:n@@`` (instruction n → `` at file.cu:LINE``).
``render`` fills them in.

Public API: ``EmulationError`` and its kinds (``OutOfBounds``, ``SharedRace``, ``AsyncHazard``, ``Deadlock``,
``TimeLimit``, ``NotEmulated``, ``InvalidOperation``, ``AssertionFailed``, ``InvalidAddress``),
``render(...)``.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

_KINDS: dict[str, type[EmulationError]] = {}


class EmulationError(RuntimeError):
    """A kernel failed under CPU emulation. ``kind``, ``thread``, ``block`` and the raw report are kept."""

    kind = "error"

    def __init_subclass__(cls, kind: str, **kw: Any) -> None:
        # Each kind of error is a class of its own (the name a verdict quotes, what ``except`` catches) and the
        # kind the runtime reports it by (``error_class``): only these, and what it means, differ between kinds.
        super().__init_subclass__(**kw)
        cls.kind = kind
        _KINDS[kind] = cls

    def __init__(self, message: str, report: dict[str, Any] | None = None):
        super().__init__(message)
        self.report = report or {}
        self.thread = tuple(self.report.get("thread", ())) or None
        self.block = tuple(self.report.get("block", ())) or None

    def _render_traceback_(self) -> list[str]:
        return [f"{type(self).__name__}: {self}"]


class OutOfBounds(EmulationError, kind="out_of_bounds"):
    """An access outside the memory it is meant for: past the ends of an array argument or of the block's shared
    memory, or not in shared memory where the instruction needs it."""


class SharedRace(EmulationError, kind="race"):
    """Two threads touch the same shared bytes, at least one of them writing, with nothing ordering the two."""


class Deadlock(EmulationError, kind="deadlock"):
    """No thread can make progress: each waits for something no thread left will do."""


class TimeLimit(EmulationError, kind="timeout"):
    """The kernel ran past its time limit."""


class NotEmulated(EmulationError, kind="not_emulated"):
    """An instruction (or an atomic operation on a width) the emulator does not model."""


class InvalidOperation(EmulationError, kind="invalid"):
    """An operation the hardware refuses or leaves undefined: a misused barrier or mbarrier, a misaligned or
    ill-sized asynchronous copy, warp-wide code that diverges, a wgmma without its whole warpgroup, shared memory
    that does not fit."""


class AssertionFailed(EmulationError, kind="assert"):
    """An assert() in the kernel failed."""


class InvalidAddress(EmulationError, kind="invalid_address"):
    """An access at an address that is in none of the kernel's regions (its arrays, shared memory, its own local
    memory, its parameters), or misaligned: on a GPU, an illegal or misaligned address."""


class AsyncHazard(EmulationError, kind="async"):
    """An asynchronous unit (TMA, wgmma, a TMA store) and a thread touch the same shared bytes with nothing
    ordering them as the PTX ISA requires: a read of a box still in flight, a write to operands a pending
    wgmma group or TMA store may still read, a stage handed back before its wgmma group was waited for,
    or ordinary stores read by the async proxy without ``fence.proxy.async``."""


def error_class(kind: str) -> type[EmulationError]:
    return _KINDS.get(kind, EmulationError)


@dataclass
class ArgInfo:
    """What a pointer argument was, for naming a global address in a message."""

    index: int
    name: str
    ctype: str
    dtype: np.dtype
    shape: tuple[int, ...]
    nbytes: int


@dataclass
class Context:
    """What ``render`` needs: the module file (for line numbers) and the arguments by buffer slot."""

    library: Path
    program: str
    args: dict[int, ArgInfo] = field(default_factory=dict)
    bases: dict[int, int] = field(default_factory=dict)  # buffer slot -> its address in emulator memory
    slot_bytes: int = 1 << 31  # the runtime's address-space slot per array argument
    #: The PTX interpreter's instruction numbers (``@@I:n@@``) → "file:line"; None for a native module.
    instr_where: Callable[[int], str] | None = None


def _lines(library: Path, offsets: list[int], program: str) -> dict[int, str]:
    """Code offsets → "file:line" (the innermost frame in the learner's file when inlined)."""
    tool = shutil.which("addr2line") or shutil.which("llvm-addr2line")
    if not tool or not offsets:
        return {}
    try:
        out = subprocess.run([tool, "-e", str(library), "-i", "-a", *(hex(o) for o in offsets)],
                             capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return {}
    result: dict[int, str] = {}
    current: int | None = None
    frames: dict[int, list[str]] = {}
    for line in out.splitlines():
        if line.startswith("0x"):
            current = int(line, 16)
            frames[current] = []
        elif current is not None and ":" in line and not line.startswith("??"):
            path, _, num = line.rpartition(":")
            num = num.split()[0]
            shown = Path(path).name if "/tk/" not in path else "tk/" + path.split("/tk/", 1)[1]
            frames[current].append(f"{shown}:{num}")
    for off, fr in frames.items():
        if not fr:
            continue
        mine = [f for f in fr if f.startswith(program + ":")]
        where = mine[-1] if mine else fr[0]
        result[off] = where if fr[0] == where else f"{where} (in {fr[0]})"
    return result


def _element(info: ArgInfo, offset: int) -> str:
    item = info.dtype.itemsize or 1
    index = offset // item
    total = info.nbytes // item
    shape = "×".join(map(str, info.shape)) or "1"
    desc = f"argument {info.index} '{info.ctype} {info.name}'".replace(" '' ", " ") if info.name else \
        f"argument {info.index}"
    if offset < 0:
        where = f"{-index} element{'s' if -index != 1 else ''} before the start of"
        spot = f"{info.name or 'arg'}[{index}]"
    elif index >= total:
        past = index - total
        where = f"{past} element{'s' if past != 1 else ''} past the end of"
        spot = f"{info.name or 'arg'}[{index}]"
    else:
        where, spot = "inside", f"{info.name or 'arg'}[{index}]"
    if len(info.shape) >= 2 and 0 <= index:
        cols = int(np.prod(info.shape[1:]))
        spot += f" (row {index // cols}, column {index % cols} of a {shape} array)" if index < total else ""
    return f"{spot}, {where} {desc} ({shape} {info.dtype.name})"


def render(text: str, report: dict[str, Any], ctx: Context) -> str:
    """Fill in the placeholders of a runtime message (see the module docstring)."""
    shared = report.get("shared", [])

    def shared_sub(m: re.Match[str]) -> str:
        i, off = int(m.group(1)), int(m.group(2))
        if i >= len(shared):
            return f"shared byte {off}"
        a = shared[i]
        rank, elem = a.get("rank", -1), a.get("elem", 0)
        if rank >= 0 and elem > 0:
            idx, coords = off // elem, []
            for d in reversed(a["dims"][:rank]):
                coords.append(idx % d)
                idx //= d
            return a["name"] + "".join(f"[{c}]" for c in reversed(coords))
        return a["name"] if off == 0 else f"{a['name']} (+{off} bytes)"

    def global_sub(m: re.Match[str]) -> str:
        slot, off = int(m.group(1)), int(m.group(2))
        info = ctx.args.get(slot)
        if info is not None and slot in ctx.bases:
            return _element(info, off)
        if ctx.bases:  # in no argument's region: name the array it most likely ran off (the nearest below)
            known = next(iter(ctx.bases))
            address = ctx.bases[known] + (slot - known) * ctx.slot_bytes + off
            below = [s for s, b in ctx.bases.items() if b <= address and s in ctx.args]
            if below:
                s = max(below, key=lambda s: ctx.bases[s])
                nearest = _element(ctx.args[s], address - ctx.bases[s])
                return nearest  # the runtime's message has said the address already
        return f"byte {off} of an address outside the kernel's arrays"

    text = re.sub(r"@@S:(\d+):(\d+)@@", shared_sub, text)
    if ctx.instr_where is not None:
        where = ctx.instr_where
        text = re.sub(r"@@I:(\d+)@@", lambda m: f" at {w}" if (w := where(int(m.group(1)))) else "", text)
    text = re.sub(r"@@G:(\d+):(-?\d+):(\d+)@@", global_sub, text)
    offsets = [int(o, 16) for chain in re.findall(r"@@PC:([0-9a-f|]+)@@", text) for o in chain.split("|")]
    lines = _lines(ctx.library, offsets, ctx.program)

    def pc_sub(m: re.Match[str]) -> str:
        """A chain of frames (innermost first) is named by its first line in the learner's file."""
        known = [lines[o] for o in (int(x, 16) for x in m.group(1).split("|")) if o in lines]
        mine = [w for w in known if w.startswith(ctx.program + ":")]
        return f" at {(mine or known)[0]}" if known else ""

    return re.sub(r"@@PC:([0-9a-f|]+)@@", pc_sub, text)
