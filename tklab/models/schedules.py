"""A model of how consumer warpgroups share an SM's tensor cores and special-function units in chapter
10's FlashAttention, for the three schedules of ``solutions/ch10_flash/ch10_flash.cu`` (SCHEDULE = 0, 1, 2).

Why a model: the point of chapter 10 is *when* each warpgroup issues its matrix products relative to its
softmax. A timeline drawn from measured kernels is out of reach (the hardware has no such trace); this
time-stepped simulation follows each warpgroup's program, step for step as the kernel is written, with
two shared units. A product is a string of wgmma instructions, and the tensor cores execute
instructions in the order they arrive: when two warpgroups issue products at the same time their
instructions interleave, and both products advance at half speed (finishing together, late); when the
warpgroups take turns issuing (ping-pong), one product runs whole, then the next. The special-function
units, which run the exponentials, are shared evenly by the warpgroups using them at once. A warpgroup
waiting for a product sees it ``latency`` after it finishes (the pipeline drains, the wait returns):
the cost that overlapping a product with the softmax hides.

Each warpgroup's program, per key block j (S_j = Q K_j^T, X_j = its softmax, PV_j = P_j V_j):
    plain     : S_j, wait, X_j, PV_j, wait                                  -- one thing at a time
    overlap   : S_j and PV_{j-1} issued together, X_j once S_j is done (PV_{j-1} still running)
    ping-pong : overlap, and the warpgroups take turns issuing (named barriers in the kernel)

Public API: ``simulate(schedule, *, blocks=6, gemm=1.0, softmax=1.0, groups=2, latency=0.25) -> Timeline``,
``SCHEDULES``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

SCHEDULES = ("plain", "overlap", "ping-pong")


@dataclass(frozen=True)
class Span:
    """One piece of work on the timeline: warpgroup, unit ("tensor" or "sfu"), label (S3, PV2, X3), times."""

    group: int
    unit: str
    label: str
    start: float
    end: float


@dataclass
class Timeline:
    """The simulated run: every span, and how busy the tensor cores were."""

    schedule: str
    spans: list[Span] = field(default_factory=list)
    end: float = 0.0

    @property
    def tensor_busy(self) -> float:
        """Fraction of the run during which the tensor cores had work (the thing to maximise)."""
        return self._busy("tensor")

    @property
    def sfu_busy(self) -> float:
        return self._busy("sfu")

    def _busy(self, unit: str) -> float:
        edges = sorted((s.start, s.end) for s in self.spans if s.unit == unit)
        covered, cur_s, cur_e = 0.0, None, None
        for s, e in edges:
            if cur_e is None or s > cur_e:
                if cur_e is not None:
                    covered += cur_e - cur_s
                cur_s, cur_e = s, e
            else:
                cur_e = max(cur_e, e)
        if cur_e is not None:
            covered += cur_e - cur_s
        return covered / self.end if self.end else 0.0


def _program(schedule: str, blocks: int) -> list[tuple]:
    """One warpgroup's instruction list: ("issue", op, unit), ("wait", op), ("run", op, unit), turns."""
    if schedule == "plain":
        prog: list[tuple] = []
        for j in range(blocks):
            prog += [("issue", f"S{j}", "tensor"), ("wait", f"S{j}"), ("run", f"X{j}", "sfu"),
                     ("issue", f"PV{j}", "tensor"), ("wait", f"PV{j}")]
        return prog
    turn = schedule == "ping-pong"
    take, give = ([("turn",)], [("pass",)]) if turn else ([], [])
    prog = [*take, ("issue", "S0", "tensor"), *give, ("wait", "S0"), ("run", "X0", "sfu")]
    for j in range(1, blocks):
        prog += [*take, ("issue", f"S{j}", "tensor"), ("issue", f"PV{j - 1}", "tensor"), *give,
                 ("wait", f"S{j}"), ("run", f"X{j}", "sfu"), ("wait", f"PV{j - 1}")]
    prog += [*take, ("issue", f"PV{blocks - 1}", "tensor"), *give, ("wait", f"PV{blocks - 1}")]
    return prog


def simulate(schedule: str, *, blocks: int = 6, gemm: float = 1.0, softmax: float = 1.0, groups: int = 2,
             latency: float = 0.25, stagger: float = 0.0, dt: float = 1 / 64) -> Timeline:
    """Run ``groups`` warpgroups through ``blocks`` key blocks. ``gemm``: time of one product (S or PV) on
    the tensor cores; ``softmax``: time of one block's exponentials alone on the special-function units;
    ``latency``: from a product's end to its waiter going on; ``stagger``: warpgroup g starts g x stagger
    late (real warpgroups never start in perfect step). All in the same unit of time."""
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {', '.join(SCHEDULES)}, got {schedule!r}")
    if blocks < 1 or groups < 1 or gemm <= 0 or softmax <= 0 or latency < 0 or stagger < 0:
        raise ValueError("blocks and groups must be positive, gemm and softmax times greater than zero, "
                         "latency and stagger not negative")
    if schedule == "ping-pong" and groups < 2:
        raise ValueError("ping-pong needs at least two warpgroups")
    progs = [_program(schedule, blocks) for _ in range(groups)]
    pc = [0] * groups
    queue: list[tuple[int, str]] = []          # tensor-core products, in issue order
    sfu: dict[tuple[int, str], float] = {}     # exponentials in progress -> work left
    work_left: dict[tuple[int, str], float] = {}
    started: dict[tuple[int, str], float] = {}
    ready_at: dict[tuple[int, str], float] = {}  # when a waiter may go on
    turn_owner, timeline, t = 0, Timeline(schedule), 0.0

    def advance(g: int) -> None:
        nonlocal turn_owner
        if t < g * stagger - 1e-9:
            return
        while pc[g] < len(progs[g]):
            ins = progs[g][pc[g]]
            if ins[0] == "issue":
                queue.append((g, ins[1]))
                work_left[(g, ins[1])] = gemm
            elif ins[0] == "wait" and not ((g, ins[1]) in ready_at and ready_at[(g, ins[1])] <= t + 1e-9):
                return
            elif ins[0] == "run":
                key = (g, ins[1])
                if key not in sfu and key not in ready_at:
                    sfu[key], started[key] = softmax, t
                if key not in ready_at:
                    return
            elif ins[0] == "turn" and turn_owner != g:
                return
            elif ins[0] == "pass":
                turn_owner = (g + 1) % groups
            pc[g] += 1

    for g in range(groups):
        advance(g)
    while any(pc[g] < len(progs[g]) for g in range(groups)):
        # Taking turns, the warpgroups' products reach the tensor cores whole, one after another; issued
        # at once, their instructions interleave and every product in flight advances at a shared rate.
        running = queue[:1] if schedule == "ping-pong" else list(queue)
        for key in running:
            started.setdefault(key, t)
            work_left[key] -= dt / len(running)
        for key in sfu:  # the exponentials share the units
            sfu[key] -= dt / len(sfu)
        t += dt
        for key in [k for k in queue if work_left[k] <= 1e-9]:
            queue.remove(key)
            ready_at[key] = t + latency
            timeline.spans.append(Span(key[0], "tensor", key[1], round(started[key], 6), round(t, 6)))
        for key in [k for k, w in sfu.items() if w <= 1e-9]:
            del sfu[key]
            ready_at[key] = t
            timeline.spans.append(Span(key[0], "sfu", key[1], round(started[key], 6), round(t, 6)))
        for g in range(groups):
            advance(g)
        if t > 1e4:
            raise RuntimeError("schedule simulation did not finish (a wait on work never issued?)")
    timeline.end = round(t, 6)
    timeline.spans.sort(key=lambda s: (s.group, s.start, s.unit))
    return timeline
