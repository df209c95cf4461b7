"""The data of one trace: what the emulator saw a kernel do, ready to analyse or draw (no GPU involved).

A trace is plain data (frozen dataclasses) so the sandboxed child can send it as JSON and the parent
(and the explorers) only parse it. Public API::

    Trace(kernel, source_name, grid, block, shared=(...), globals_=(...), events=(...), loops=(...))
    trace.to_json() -> str            Trace.from_json(text) -> Trace
    SharedInstr / GlobalInstr          one static instruction each (a source line may hold several)
    Sample                             one warp-wide execution: each lane's address (None: lane idle)
    Event                              one thing a warp did or waited for, on the emulator's logical clock
    LoopMix                            the instruction mix of one loop per iteration (per warp)

Time (``Event.t``/``Event.end``) is the emulator's logical clock: each warp counts the instructions it
executed, and a wait ends no earlier than the moment (on that clock) of what it waited for -- the
last arrival at a barrier, a TMA load's completion (issue + a fixed latency), a wgmma group's retirement.
It orders and spaces events; it is not nanoseconds.

Schema changes bump ``SCHEMA``; ``from_json`` refuses another schema by name.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

SCHEMA = 1
LANES = 32
SECTOR_BYTES = 32

#: Timeline event kinds. Waits have an ``end``; issues/completions are instants (``end`` is None).
EVENT_KINDS = ("barrier_wait", "mbarrier_wait", "tma_issue", "tma_complete", "wgmma_issue", "wgmma_retire")
#: Shared-memory operation kinds, named as in :mod:`tklab.models.banks`.
SHARED_OPS = ("ld", "st", "ldmatrix", "stmatrix")
GLOBAL_OPS = ("ld", "st", "atom")


@dataclass(frozen=True)
class Sample:
    """One warp-wide execution of an instruction: each lane's byte address, and how often this pattern recurred.

    Shared addresses are offsets in the block's shared window; global ones are byte offsets from the warp's
    lowest address rounded down to 128 bytes (what sectors depend on). ``count``
    executions had the same pattern up to a shift of every address by one amount that changes no count
    (whole words for shared, whole 32-byte sectors for global), so a trace stays small yet exact.
    """

    offsets: tuple[int | None, ...]
    count: int = 1
    wavefronts: int = 0  # shared: bank wavefronts of one such execution; global: sectors
    block: int = 0       # linear block index of the first execution seen
    warp: int = 0        # warp in that block


@dataclass(frozen=True)
class SharedInstr:
    """One static shared-memory instruction of the kernel and every warp-wide execution of it."""

    line: int                 # 1-based line in the traced source (0: not in the learner's file)
    text: str                 # that line, stripped
    op: str                   # "ld", "st", "ldmatrix", "stmatrix"
    ptx: str                  # the instruction as executed, e.g. "ld.shared.b32", "ldmatrix.x4"
    width: int                # bytes per lane (16 for ldmatrix/stmatrix: one 8x8 row per lane)
    executions: int           # warp-wide executions (ncu: instructions executed)
    wavefronts: int           # sum over executions (ncu: l1tex__data_pipe_lsu_wavefronts_mem_shared_op_*)
    ideal: int                # sum of conflict-free wavefronts (one per phase with work)
    ways: int                 # the worst execution's most distinct words asked of one bank in one phase
    colliding: tuple[tuple[int, ...], ...] = ()  # the worst execution: lanes sharing a bank, per busy bank
    samples: tuple[Sample, ...] = ()             # worst first

    @property
    def conflicts(self) -> int:
        """Extra wavefronts (ncu: l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_*)."""
        return self.wavefronts - self.ideal

    @property
    def per_request(self) -> float:
        return self.wavefronts / self.executions if self.executions else 0.0


@dataclass(frozen=True)
class GlobalInstr:
    """One static global-memory instruction: requests (warp-wide executions) and 32-byte sectors they touched."""

    line: int
    text: str
    op: str                   # "ld", "st", "atom"
    width: int                # bytes per lane
    requests: int             # ncu: l1tex__t_requests_pipe_lsu_mem_global_op_*
    sectors: int              # ncu: l1tex__t_sectors_pipe_lsu_mem_global_op_*
    samples: tuple[Sample, ...] = ()  # worst first

    @property
    def sectors_per_request(self) -> float:
        return self.sectors / self.requests if self.requests else 0.0

    @property
    def ideal_sectors_per_request(self) -> float:
        """Sectors a fully coalesced warp would touch: 32 lanes x width / 32 bytes (at least 1)."""
        return max(1.0, LANES * self.width / SECTOR_BYTES)


@dataclass(frozen=True)
class Event:
    """One timeline entry of one warp (``kind`` in ``EVENT_KINDS``)."""

    block: int
    warp: int
    t: int
    kind: str
    end: int | None = None  # waits only: when the warp went on
    id: int | None = None   # barrier id / mbarrier's shared address / TMA stage (box's smem address) / wgmma group
    line: int = 0

    @property
    def duration(self) -> int:
        return 0 if self.end is None else self.end - self.t


@dataclass(frozen=True)
class LoopMix:
    """The instruction mix of one source loop, per iteration of one warp."""

    first_line: int
    last_line: int
    text: str                                  # the loop's header line
    iterations: float                          # per warp, averaged over the warps that ran it
    per_iteration: tuple[tuple[str, float], ...]  # (kind, count per iteration), most first


@dataclass(frozen=True)
class Trace:
    """Everything recorded for one launch of one kernel."""

    kernel: str
    source_name: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared: tuple[SharedInstr, ...] = ()
    globals_: tuple[GlobalInstr, ...] = ()
    events: tuple[Event, ...] = ()
    loops: tuple[LoopMix, ...] = ()
    blocks_traced: int = 0           # blocks whose accesses were recorded (sampling: fewer than the grid)
    source_lines: tuple[str, ...] = ()  # the traced source, for the source view
    notes: tuple[str, ...] = ()      # what was sampled or left out, in words
    schema: int = SCHEMA
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> Trace:
        d = json.loads(text)
        if not isinstance(d, dict) or d.get("schema") != SCHEMA:
            got = d.get("schema") if isinstance(d, dict) else type(d).__name__
            raise ValueError(f"not a tklab trace of schema {SCHEMA} (got schema {got!r})")
        return cls(
            kernel=d["kernel"], source_name=d["source_name"],
            grid=tuple(d["grid"]), block=tuple(d["block"]),  # type: ignore[arg-type]
            shared=tuple(SharedInstr(**{**s, "colliding": tuple(tuple(c) for c in s["colliding"]),
                                        "samples": _samples(s["samples"])}) for s in d["shared"]),
            globals_=tuple(GlobalInstr(**{**g, "samples": _samples(g["samples"])}) for g in d["globals_"]),
            events=tuple(Event(**e) for e in d["events"]),
            loops=tuple(LoopMix(**{**m, "per_iteration": tuple((k, v) for k, v in m["per_iteration"])})
                        for m in d["loops"]),
            blocks_traced=d["blocks_traced"], source_lines=tuple(d["source_lines"]), notes=tuple(d["notes"]),
            schema=d["schema"], extra=d.get("extra", {}),
        )

    # Convenience views (the analysis module builds on them).
    def warps(self) -> list[tuple[int, int]]:
        """(block, warp) pairs that have timeline events, in order."""
        return sorted({(e.block, e.warp) for e in self.events})

    def timeline(self, block: int = 0, warp: int | None = None) -> list[Event]:
        return [e for e in self.events if e.block == block and (warp is None or e.warp == warp)]


def _samples(items: list[dict]) -> tuple[Sample, ...]:
    return tuple(Sample(**{**s, "offsets": tuple(s["offsets"])}) for s in items)
