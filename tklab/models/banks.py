"""Shared-memory bank model: how many wavefronts one warp-wide access takes, and which lane goes when.

Shared memory is 32 banks of 4 bytes; byte address ``a`` sits in bank ``(a // 4) % 32``. Each cycle
(a *wavefront*) every bank can deliver one 4-byte word, to any number of lanes that want that word.
A warp's access is split into wavefronts so that no bank is asked for two different words in one.

Public API::

    wavefronts(offsets, width, *, store=False) -> int      # what ncu counts for the instruction
    analyze(offsets, width, *, store=False) -> Access       # the schedule, for drawing
    analyze_matrix(rows, num=4, *, store=False) -> Access   # ldmatrix / stmatrix .x1/.x2/.x4
    phases(offsets, width, *, store=False) -> [lanes, ...]   # which lanes are served together
    predict_row(row) -> (wavefronts, conflicts)             # for a row of the measured table

``offsets`` are the 32 lanes' byte offsets (``None`` for a lane that sits out), ``width`` the bytes
per lane (1, 2, 4, 8, 16).

The rules, read off ncu's counters on an H200 (``bench/probes/banks_probe.py`` measures one
instruction per launch; ``bench/results/banks_h200.json`` holds every row; the tests check each one):

1. Lanes are served in *phases* of at most 128 bytes: the whole warp for 1-, 2- and 4-byte accesses,
   half-warps (lanes 0-15, 16-31) for 8 bytes, quarter-warps (8 lanes) for 16 bytes, and for
   ``ldmatrix``/``stmatrix`` one phase per 8x8 matrix (its 8 row addresses).
2. Loads only: neighbouring phases pair up (halves → the whole warp; quarters 0+1 and 2+3 → half-warps)
   when the warp's addresses ignore lane bit 0 (lanes 2k and 2k+1 read the same address) or ignore
   lane bit 1 (lanes l and l^2 do); a lane whose partner sits out does not spoil it. So a warp-wide
   broadcast of one 16-byte value takes 2 wavefronts, not 4, and of one 8-byte value 1, not 2; a
   pattern that pairs lanes otherwise (a,b,b,a), or only in part of the warp, is not merged.
   Stores, ldmatrix and stmatrix never pair up.
3. Inside a phase, a bank delivers one 4-byte word per wavefront to every lane that wants it
   (broadcast), so the phase takes as many wavefronts as the busiest bank has distinct words.
4. ncu's bank-conflict counter is the wavefronts beyond one per phase that has an active lane.

Reading ncu for these: ldmatrix wavefronts count in ``..._op_ld``, stmatrix ones in ``..._op_st``, but
neither instruction in ``smsp__inst_executed_op_shared_ld/st`` (ldmatrix is in ``..._op_ldsm``); and the
total ``l1tex__data_pipe_lsu_wavefronts_mem_shared.sum`` read one more than ld + st in every probe.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass, field

BANKS = 32
BANK_BYTES = 4
WIDTHS = (1, 2, 4, 8, 16)

# Lanes served together before any merging (rule 1 of the module docstring).
PHASE_LANES = {1: 32, 2: 32, 4: 32, 8: 16, 16: 8}
MERGE_LANE_BITS = (0, 1)  # rule 2: lane bits whose flip may leave every address unchanged


@dataclass(frozen=True)
class Request:
    """One lane's use of one bank: the 4-byte word it needs there."""

    lane: int
    bank: int
    word: int  # word address (byte address // 4)


@dataclass(frozen=True)
class Wavefront:
    """One pass through the banks: at most one distinct word per bank."""

    phase: int
    requests: tuple[Request, ...]

    @property
    def lanes(self) -> list[int]:
        return sorted({r.lane for r in self.requests})

    @property
    def banks(self) -> dict[int, int]:
        """bank → the word it delivers in this wavefront."""
        return {r.bank: r.word for r in self.requests}


@dataclass(frozen=True)
class Access:
    """The schedule of one warp-wide shared-memory instruction."""

    offsets: tuple[int | None, ...]
    width: int
    store: bool
    op: str  # "ld", "st", "ldmatrix", "stmatrix"
    phases: tuple[tuple[int, ...], ...]  # lanes scheduled together
    waves: tuple[Wavefront, ...] = field(repr=False)

    @property
    def wavefronts(self) -> int:
        """Wavefronts the instruction takes (ncu: l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld/st)."""
        return len(self.waves)

    @property
    def ideal(self) -> int:
        """Wavefronts with no conflict: one per phase that has work."""
        return sum(1 for p in self.phases if any(self.offsets[lane] is not None for lane in p))

    @property
    def conflicts(self) -> int:
        """Extra wavefronts caused by bank conflicts (ncu: l1tex__data_bank_conflicts_pipe_lsu_mem_shared_*)."""
        return self.wavefronts - self.ideal

    def lane_wavefront(self) -> dict[int, list[int]]:
        """lane → indices of the wavefronts that serve it."""
        out: dict[int, list[int]] = {}
        for i, w in enumerate(self.waves):
            for lane in w.lanes:
                out.setdefault(lane, []).append(i)
        return out

    def grid(self) -> list[list[int | None]]:
        """``grid()[w][bank]``: the lane (lowest, if several share the word) served by ``bank`` in wavefront w."""
        rows = []
        for w in self.waves:
            row: list[int | None] = [None] * BANKS
            for r in w.requests:
                if row[r.bank] is None or r.lane < row[r.bank]:
                    row[r.bank] = r.lane
            rows.append(row)
        return rows


def _check(offsets: Sequence[int | None], width: int, lanes: int = 32) -> tuple[int | None, ...]:
    if width not in WIDTHS:
        raise ValueError(f"width {width!r} is not a shared-memory access size; use one of {WIDTHS} bytes")
    offs = tuple(offsets)
    if len(offs) != lanes:
        raise ValueError(f"need {lanes} offsets, one per lane, not {len(offs)}")
    for lane, o in enumerate(offs):
        if o is None:
            continue
        if isinstance(o, bool) or not isinstance(o, int):
            try:
                o = operator.index(o)  # numpy integers; a float is never cut to an int here
            except TypeError:
                if isinstance(o, float) and o.is_integer():
                    o = int(o)
                else:
                    raise ValueError(f"lane {lane}: offset {o!r} is not a whole byte offset") from None
        if o < 0:
            raise ValueError(f"lane {lane}: offset {o} is negative")
        if o % width:
            raise ValueError(f"lane {lane}: offset {o} is not a multiple of the access width {width} "
                             f"(the hardware needs {width}-byte accesses {width}-byte aligned)")
    return tuple(None if o is None else int(o) for o in offs)


def _schedule(offs: tuple[int | None, ...], width: int, phases: list[tuple[int, ...]]) -> list[Wavefront]:
    """Within each phase: the k-th distinct word a bank must deliver goes out in the phase's k-th wavefront."""
    waves: list[Wavefront] = []
    for pi, phase in enumerate(phases):
        rank: dict[int, list[int]] = {}  # bank → distinct words, in order of first request
        reqs: list[tuple[int, Request]] = []
        for lane in phase:
            o = offs[lane]
            if o is None:
                continue
            for word in range(o // BANK_BYTES, (o + width - 1) // BANK_BYTES + 1):
                bank = word % BANKS
                words = rank.setdefault(bank, [])
                if word not in words:
                    words.append(word)
                reqs.append((words.index(word), Request(lane, bank, word)))
        n = max((len(w) for w in rank.values()), default=0)
        for k in range(n):
            waves.append(Wavefront(pi, tuple(r for kk, r in reqs if kk == k)))
    return waves


def _pairs_up(offs: tuple[int | None, ...]) -> bool:
    """Rule 2: does flipping lane bit 0 (or bit 1) leave every active lane's address unchanged?"""
    for bit in MERGE_LANE_BITS:
        partner = 1 << bit
        if all(offs[lane] is None or offs[lane ^ partner] is None or offs[lane] == offs[lane ^ partner]
               for lane in range(32)):
            return True
    return False


def phases(offsets: Sequence[int | None], width: int, *, store: bool = False) -> list[tuple[int, ...]]:
    """The groups of lanes served together (rules 1 and 2 of the module docstring)."""
    offs = _check(offsets, width)
    step = PHASE_LANES[width]
    base = [tuple(range(s, s + step)) for s in range(0, 32, step)]
    if store or width < 8 or not _pairs_up(offs):
        return base
    return [a + b for a, b in zip(base[::2], base[1::2], strict=True)]


def analyze(offsets: Sequence[int | None], width: int, *, store: bool = False) -> Access:
    """The wavefront schedule of one warp-wide load (or store) of ``width`` bytes per lane."""
    offs = _check(offsets, width)
    groups = phases(offs, width, store=store)
    waves = _schedule(offs, width, groups)
    return Access(offs, width, store, "st" if store else "ld", tuple(groups), tuple(waves))


def wavefronts(offsets: Sequence[int | None], width: int, *, store: bool = False) -> int:
    """Wavefronts one warp-wide access takes: 1 is conflict-free, 32 is fully serialised."""
    return analyze(offsets, width, store=store).wavefronts


def analyze_matrix(rows: Sequence[int | None], num: int = 4, *, store: bool = False) -> Access:
    """ldmatrix / stmatrix ``.x{num}``: lane ``8m + r`` gives the address of row r of matrix m (16 bytes).

    ``rows`` may have 8*num entries or 32 (entries past 8*num are ignored, as the hardware ignores them).
    """
    if num not in (1, 2, 4):
        raise ValueError(f"ldmatrix/stmatrix move 1, 2 or 4 matrices, not {num}")
    rows = list(rows)
    if len(rows) == 32:
        rows = rows[: 8 * num]
    if len(rows) != 8 * num:
        raise ValueError(f".x{num} needs {8 * num} row addresses (lanes 0..{8 * num - 1}), not {len(rows)}")
    offs = _check(rows + [None] * (32 - 8 * num), 16)
    groups = [tuple(range(8 * m, 8 * m + 8)) for m in range(num)]
    waves = _schedule(offs, 16, groups)
    return Access(offs, 16, store, "stmatrix" if store else "ldmatrix", tuple(groups), tuple(waves))


def predict_row(row: dict) -> tuple[int, int]:
    """(wavefronts, conflicts) the model gives for a row of the measured table."""
    offs = [None if o < 0 else o for o in row["offsets"]]
    store = row["op"] in ("st", "stmatrix")
    if row["op"] in ("ldmatrix", "stmatrix"):
        acc = analyze_matrix(offs[: 8 * row["num"]], row["num"], store=store)
    else:
        acc = analyze(offs, row["width"], store=store)
    return acc.wavefronts, acc.conflicts
