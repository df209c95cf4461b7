"""A raw emulator trace (:mod:`.collect`) → a :class:`~tklab.trace.model.Trace`: bank wavefronts through the
validated bank model (``tklab.models.banks``), 32-byte sectors per global request, the timeline, the instruction
mix per loop iteration. Pure data work: the parent runs it on what the sandboxed child sent.

Public API: ``analyze(raw, *, kernel, source, source_name, grid, block, library=None)``, ``shared_cost``,
``sectors``, ``loops_of``.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..models import banks
from .model import LANES, SECTOR_BYTES, Event, GlobalInstr, LoopMix, Sample, SharedInstr, Trace

_MAX_SAMPLES = 4


def shared_cost(offsets: Sequence[int | None], op: str, width: int) -> banks.Access | None:
    """The bank model's schedule of one warp-wide shared access (None: a size the hardware has no single
    instruction for, e.g. a 32-byte struct copy)."""
    if op in ("ldmatrix", "stmatrix"):
        return banks.analyze_matrix(list(offsets), width, store=op == "stmatrix")
    if width not in banks.WIDTHS:
        return None
    return banks.analyze(list(offsets), width, store=op == "st")


def ways_and_colliding(acc: banks.Access) -> tuple[int, tuple[tuple[int, ...], ...]]:
    """The most distinct words one bank was asked for in one phase, and per such bank the lanes that asked."""
    worst, groups = 1, []
    for phase in acc.phases:
        words: dict[int, set[int]] = defaultdict(set)
        lanes: dict[int, set[int]] = defaultdict(set)
        for lane in phase:
            o = acc.offsets[lane]
            if o is None:
                continue
            for w in range(o // banks.BANK_BYTES, (o + acc.width - 1) // banks.BANK_BYTES + 1):
                words[w % banks.BANKS].add(w)
                lanes[w % banks.BANKS].add(lane)
        for bank, ws in words.items():
            if len(ws) > 1:
                worst = max(worst, len(ws))
                groups.append(tuple(sorted(lanes[bank])))
    groups.sort(key=lambda g: (-len(g), g))
    return worst, tuple(dict.fromkeys(groups))[:8]


def sectors(offsets: Sequence[int | None], width: int) -> int:
    """Distinct 32-byte sectors one warp-wide global access touches."""
    return len({b // SECTOR_BYTES for o in offsets if o is not None for b in (o, o + max(width, 1) - 1)})


def _resolve(pcs: list[str], library: Path | None, program: str) -> dict[str, int]:
    """pc chains ("a|b|c", innermost first) → the first line in the learner's file (0: none)."""
    if library is None:
        return {}
    from ..emulate.errors import _lines  # addr2line over the module: offsets → "file:line"

    offsets = sorted({int(o, 16) for chain in pcs if chain for o in chain.split("|")})
    lines = _lines(library, offsets, program)
    out: dict[str, int] = {}
    for chain in pcs:
        for o in (chain.split("|") if chain else []):
            where = lines.get(int(o, 16), "")
            m = re.match(re.escape(program) + r":(\d+)", where)
            if m:
                out[chain] = int(m.group(1))
                break
    return out


def _text(lines: Sequence[str], n: int) -> str:
    return lines[n - 1].strip() if 0 < n <= len(lines) else ""


def loops_of(source_lines: Sequence[str]) -> list[tuple[int, int]]:
    """(first, last) 1-based lines of each ``for``/``while`` loop in the source, by brace matching."""
    out = []
    for i, line in enumerate(source_lines):
        code = line.split("//", 1)[0]
        if not re.search(r"\b(for|while)\s*\(", code):
            continue
        depth, opened, j = 0, False, i
        while j < len(source_lines):
            seg = source_lines[j].split("//", 1)[0]
            if j == i:
                seg = seg[re.search(r"\b(for|while)\s*\(", seg).end():]  # type: ignore[union-attr]
            for ch in seg:
                if ch == "{":
                    depth += 1
                    opened = True
                elif ch == "}":
                    depth -= 1
            if opened and depth <= 0:
                break
            if not opened and j > i and seg.strip().endswith(";"):
                break  # a loop without braces: one statement
            if not opened and j == i and seg.strip().endswith(";") and "{" not in seg:
                break
            j += 1
        out.append((i + 1, min(j, len(source_lines) - 1) + 1))
    return out


def _mix(entries: list[tuple[int, str, float]], source_lines: Sequence[str]) -> tuple[LoopMix, ...]:
    """entries: (line, kind, executions per warp that ran it). Iterations of a loop: the fewest executions per
    warp of an instruction directly in its body (one that runs once per iteration); counts per iteration include
    inner loops."""
    loops = loops_of(source_lines)
    out = []
    for first, last in loops:
        inner = [(a, b) for a, b in loops if (a, b) != (first, last) and first <= a and b <= last]
        mine = [e for e in entries if first <= e[0] <= last]
        direct = [e[2] for e in mine if e[2] > 0 and not any(a <= e[0] <= b for a, b in inner)]
        if not mine or not direct:
            continue
        iters = min(direct)
        per: dict[str, float] = defaultdict(float)
        for _line, kind, n in mine:
            per[kind] += n / iters
        out.append(LoopMix(first, last, _text(source_lines, first), round(iters, 3),
                           tuple(sorted(((k, round(v, 3)) for k, v in per.items()), key=lambda kv: -kv[1]))))
    return tuple(out)


def _by_line(instrs: list[dict[str, Any]], where: dict[str, int]) -> list[dict[str, Any]]:
    """One entry per source line and kind of access: a loop the compiler unrolled (the interpreter runs the PTX, where
    chapter 04's four-row loop is four copies of each access) reads as the line the learner wrote, its copies'
    executions and patterns together; the warps that ran it are the most that ran any copy."""
    merged: dict[tuple[int, bool, str, int], dict[str, Any]] = {}
    out: list[dict[str, Any]] = []
    for ins in instrs:
        line = where.get(ins["pc"], 0)
        if not line:
            out.append(ins)
            continue
        k = (line, bool(ins["shared"]), str(ins["op"]), int(ins["width"]))
        if k not in merged:
            merged[k] = {**ins, "pats": list(ins["pats"]), "copies": 1}
            out.append(merged[k])
            continue
        m = merged[k]
        m["pats"] = m["pats"] + list(ins["pats"])
        m["lane_execs"] = int(m.get("lane_execs", 0)) + int(ins.get("lane_execs", 0))
        m["warps"] = max(int(m.get("warps", 0)), int(ins.get("warps", 0)))
        m["copies"] += 1
    return out


def pcs_of(raw: dict[str, Any]) -> list[str]:
    return [i["pc"] for i in raw.get("instrs", [])] + [o[0] for o in raw.get("ops", [])] + \
        [e[6] for e in raw.get("events", [])]


def resolve(raw: dict[str, Any], module: Any, source_name: str) -> dict[str, int]:
    """Every pc chain of ``raw`` → its line in the learner's file (where the module is: the sandboxed child).
    ``module``: the emulated module (the interpreter's instruction numbers "I<n>" are named through its PTX's
    line records; a native module's code offsets through its debug info), or a native module's library path."""
    if getattr(module, "engine", "") == "ptx":
        from ..emulate.interp import lines as interp_lines

        out: dict[str, int] = {}
        for chain in pcs_of(raw):
            if chain and chain.startswith("I") and chain not in out:
                line = interp_lines.line_of(module.decoded, int(chain[1:]), source_name)
                if line:
                    out[chain] = line
        return out
    library = module if isinstance(module, Path) else Path(module.built.path)
    return _resolve(pcs_of(raw), library, source_name)


def analyze(raw: dict[str, Any], *, kernel: str, source: str, source_name: str, grid: Sequence[int],
            block: Sequence[int], library: Path | None = None, where: dict[str, int] | None = None) -> Trace:
    """Turn the runtime's raw trace into a ``Trace``; lines come from ``where`` (pc chain → line, made by
    ``resolve`` where the module is) or from ``library``'s debug info."""
    lines = source.splitlines()
    if where is None:
        where = _resolve(pcs_of(raw), library, source_name)
    where = {str(k): int(v) for k, v in where.items()}
    threads = max(1, int(block[0]) * int(block[1]) * int(block[2]))
    warps = max(1, raw.get("blocks_traced", 0) * ((threads + LANES - 1) // LANES))
    shared: list[SharedInstr] = []
    globals_: list[GlobalInstr] = []
    mix: list[tuple[int, str, float]] = []
    notes: list[str] = []
    for ins in _by_line(raw.get("instrs", []), where):
        line = where.get(ins["pc"], 0)
        op, width = ins["op"], int(ins["width"])
        pats = [(int(c), int(blk), int(w), tuple(offs)) for c, blk, w, offs in ins["pats"]]
        if ins["shared"]:
            rated = []
            for count, blk, w, offs in pats:
                acc = shared_cost(offs, op, width)
                if acc is None:
                    break
                rated.append((acc, count, blk, w))
            if len(rated) != len(pats):
                notes.append(f"line {line}: a {width}-byte shared {op} has no single-instruction bank model; left out")
                continue
            rated.sort(key=lambda r: (-(r[0].wavefronts - r[0].ideal), -r[1]))
            ways, colliding = ways_and_colliding(rated[0][0])
            lane_width = 16 if op in ("ldmatrix", "stmatrix") else width
            ptx = f"{op}.x{width}" if op in ("ldmatrix", "stmatrix") else f"{op}.shared.b{8 * width}"
            shared.append(SharedInstr(
                line, _text(lines, line), op, ptx, lane_width, sum(r[1] for r in rated),
                sum(r[0].wavefronts * r[1] for r in rated), sum(r[0].ideal * r[1] for r in rated), ways, colliding,
                tuple(Sample(tuple(a.offsets), c, a.wavefronts, blk, w) for a, c, blk, w in rated[:_MAX_SAMPLES])))
            kind = op if op in ("ldmatrix", "stmatrix") else f"{op}.shared"
            mix.append((line, kind, shared[-1].executions / max(1, int(ins.get("warps", 0)) or warps)))
        else:
            rated_g = sorted(((sectors(offs, width), c, blk, w, offs) for c, blk, w, offs in pats),
                             key=lambda r: (-r[0], -r[1]))
            globals_.append(GlobalInstr(
                line, _text(lines, line), op, width, sum(r[1] for r in rated_g), sum(r[0] * r[1] for r in rated_g),
                tuple(Sample(tuple(o), c, s, blk, w) for s, c, blk, w, o in rated_g[:_MAX_SAMPLES])))
            mix.append((line, f"{op}.global", globals_[-1].requests / max(1, int(ins.get("warps", 0)) or warps)))
    for chain, kind, n, ran in raw.get("ops", []):
        if kind not in ("ldmatrix", "stmatrix"):  # already counted with their accesses
            mix.append((where.get(chain, 0), kind, int(n) / max(1, int(ran))))
    events = tuple(Event(int(b), int(w), int(t), kind, int(end) if kind.endswith("wait") else None,
                         int(i), where.get(pc, 0))
                   for b, w, t, kind, end, i, pc in raw.get("events", []))
    if raw.get("events_full"):
        notes.append("the timeline hit its event limit; later events are left out")
    shared.sort(key=lambda s: (-s.conflicts, s.line))
    globals_.sort(key=lambda g: (-(g.sectors - g.ideal_sectors_per_request * g.requests), g.line))
    return Trace(kernel, source_name, tuple(int(x) for x in grid), tuple(int(x) for x in block),  # type: ignore[arg-type]
                 tuple(shared), tuple(globals_), events, _mix(mix, lines), int(raw.get("blocks_traced", 0)),
                 tuple(lines), tuple(notes))
