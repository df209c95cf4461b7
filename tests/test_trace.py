"""tklab.trace: the learner's own kernel as the emulator saw it (issue 29), on the CPU.

Each case is the smallest launch that shows the behaviour; compiled modules are cached (TKLAB_CACHE_DIR)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from answers import answer

import tklab
from tklab import tma_copy
from tklab.emulate.toolchain import NoCompiler, find
from tklab.trace import view
from tklab.trace.model import Trace

ROOT = Path(__file__).resolve().parent.parent
CH04 = (ROOT / "solutions" / "ch04_swizzle" / "ch04_swizzle.cu").read_text()
ANSWER = answer("ch04_swizzle", "^")  # the layout line, read from the solution


def _compiler() -> bool:
    try:
        find()
        return True
    except NoCompiler:
        return False


pytestmark = pytest.mark.skipif(not _compiler(), reason="no C++ compiler for the emulator")


def ch04(layout: str) -> str:
    assert ANSWER in CH04
    return CH04.replace(ANSWER, layout)


def _line(src: str, needle: str) -> int:
    return next(i for i, ln in enumerate(src.splitlines(), 1) if needle in ln)


def _transpose(src: str, **kw: int) -> Trace:
    m = n = 64
    a = np.arange(m * n, dtype=np.float32).reshape(m, n)
    out = np.zeros((n, m), np.float32)
    tr = tklab.trace(src, kernel="transpose", grid=(2, 2), block=(32, 8), args=(a, out, m, n),
                     name="ch04_swizzle.cu", **kw)
    assert np.array_equal(out, a.T)  # the traced launch still computes
    return tr


@pytest.fixture(scope="module")
def naive() -> Trace:
    return tklab.trace("ch04_swizzle", path=_write(ch04("return r * TILE + c;")))


def _write(src: str) -> Path:
    import tempfile

    d = Path(tempfile.mkdtemp(prefix="tklab-trace-test-"))
    (d / "ch04_swizzle.cu").write_text(src)
    return d / "ch04_swizzle.cu"


def test_naive_transpose_shows_its_32_way_conflict_line(naive: Trace) -> None:
    """Through the sandboxed child: the column read (phase 2) is 32-way, every lane on one bank; the row
    write is conflict-free; global accesses are coalesced."""
    src = naive.source_lines
    read = _line("\n".join(src), "out[oy * M + ox] = tile[")
    worst = naive.shared[0]
    assert worst.line == read and worst.op == "ld"
    # Every warp-wide load of a column: one wavefront per active lane (ideal 1). The exercise's first emulated
    # case is the ragged 67 x 45, so the edge tiles' warps have fewer lanes: most loads are 32-way, none is
    # conflict-free (a padded layout gives wavefronts == executions, below).
    assert (worst.ideal, worst.ways) == (worst.executions, 32)
    assert 20 * worst.executions < worst.wavefronts <= 32 * worst.executions
    assert worst.colliding[0] == tuple(range(32))
    store = next(s for s in naive.shared if s.op == "st")
    assert store.conflicts == 0 and abs(store.executions - worst.executions) <= 1
    # coalesced both ways through the tile: 4 sectors per full request (32 lanes x 4 B), fewer at the ragged edges
    assert naive.globals_ and all(3.0 < g.sectors_per_request <= 4.0 for g in naive.globals_)
    assert view.why(naive)[0].startswith(f"line {read}:") and "32-way" in view.why(naive)[0]
    assert Trace.from_json(naive.to_json()) == naive


def _padded() -> str:
    """The padded layout, with the buffer one word per row larger (the exercise's buffer leaves no room for it)."""
    words = "constexpr int TILE_WORDS = TILE * TILE;"
    src = ch04("return r * (TILE + 1) + c;")
    assert words in src
    return src.replace(words, "constexpr int TILE_WORDS = TILE * (TILE + 1);")


def test_padded_transpose_shows_none() -> None:
    tr = _transpose(_padded())
    assert tr.shared and all(s.conflicts == 0 and s.ways == 1 for s in tr.shared)
    assert sum(s.executions for s in tr.shared) == 256
    assert view.why(tr) == []
    loops = {m.first_line: m for m in tr.loops}
    src = "\n".join(tr.source_lines)
    second = loops[_line(src, "for (int j = threadIdx.y; j < TILE; j += ROWS) {") + 6]
    assert second.iterations == 4 and dict(second.per_iteration) == {"ld.shared": 1.0, "st.global": 1.0}
    text = view.text(tr)
    assert "no bank conflict" in text and re.search(r"loop at line \d+ \(4 iterations per warp\)", text)
    one = _transpose(_padded(), blocks=1)  # sampling: the first block only
    assert one.blocks_traced == 1 and sum(s.executions for s in one.shared) == 256 // 4


def test_bad_input_is_named() -> None:
    with pytest.raises(ValueError, match="exercise id"):
        tklab.trace("no such thing")
    with pytest.raises(ValueError, match="kernel=, grid="):
        tklab.trace(CH04)
    with pytest.raises(FileNotFoundError):
        tklab.trace("missing.cu")


RING = (ROOT / "solutions" / "ch07_tma_ring" / "ch07_tma_ring.cu").read_text()
LATENCY = 600  # the trace's logical TMA latency (tklab.trace's default tma_latency)


def _ring(stages: int) -> Trace:
    from tklab import emulate

    m, n, rows = 128, 64, 16  # 8 tiles of 16 x 64 floats, one block: 1 producer warp + 4 consumer warps
    a = np.arange(m * n, dtype=np.float32).reshape(m, n)
    out = np.zeros_like(a)
    tr = tklab.trace(RING, kernel="ring_copy", grid=(1,), block=(tma_copy.RING_THREADS,),
                     args=(emulate.tensor_map(a, (rows, 64), swizzle=0), out, m, n),
                     shared_mem=stages * rows * 256 + 1024, options=(f"-DSTAGES={stages}", f"-DROWS={rows}"),
                     name="ch07_tma_ring.cu", tma_latency=LATENCY)
    assert np.array_equal(out, a)
    return tr


def _in_flight(tr: Trace) -> int:
    """The most TMA loads issued and not yet complete at once (the timeline's issue/complete instants)."""
    marks = sorted([(e.t, 1) for e in tr.events if e.kind == "tma_issue"] +
                   [(e.t, -1) for e in tr.events if e.kind == "tma_complete"], key=lambda x: (x[0], x[1]))
    most = now = 0
    for _t, d in marks:
        now += d
        most = max(most, now)
    return most


def _consumer_waits(tr: Trace) -> dict[int, list[int]]:
    full = _line("\n".join(tr.source_lines), answer("ch07_tma_ring", "wait("))
    out: dict[int, list[int]] = {}
    for e in tr.events:
        if e.kind == "mbarrier_wait" and e.line == full:
            out.setdefault(e.warp, []).append(e.duration)
    return out


def test_one_stage_ring_consumers_wait_on_every_tile() -> None:
    tr = _ring(1)
    waits = _consumer_waits(tr)
    assert sorted(waits) == [1, 2, 3, 4]  # the four consumer warps, each its own timeline
    for warp, ds in waits.items():
        assert len(ds) == 8 and all(d >= LATENCY * 0.9 for d in ds), (warp, ds)  # every tile: a whole load
    assert _in_flight(tr) == 1


def test_three_stage_ring_overlaps() -> None:
    one, three = _ring(1), _ring(3)
    assert _in_flight(three) == 3  # three loads in flight at once
    for warp, ds in _consumer_waits(three).items():
        long_waits = [d for d in ds if d >= LATENCY / 2]
        assert len(ds) == 8 and len(long_waits) <= 3, (warp, ds)  # only when the ring runs dry
    total = {n: sum(sum(ds) for ds in _consumer_waits(t).values()) for n, t in ((1, one), (3, three))}
    assert total[3] < total[1] / 2


def test_ch10_trace_draws_each_warpgroups_wgmma_schedule() -> None:
    """chapter 10's kernel (the solution, through the sandboxed child): each consumer warpgroup issues
    wgmma groups and retires them at its waits; S_j and P.V_{j-1} overlap, so two groups are in flight."""
    tr = tklab.trace("ch10_flash", path=ROOT / "solutions" / "ch10_flash" / "ch10_flash.cu")
    per_wg: dict[int, list] = {}
    for e in tr.events:
        if e.block == 0 and e.kind in ("wgmma_issue", "wgmma_retire"):
            per_wg.setdefault(e.warp // 4, []).append(e)
    assert len(per_wg) >= 2  # two consumer warpgroups, each with its own schedule
    for wg, evs in per_wg.items():
        first_warp = [e for e in evs if e.warp == 4 * wg]
        kinds = [e.kind for e in sorted(first_warp, key=lambda e: (e.t, e.kind != "wgmma_retire"))]
        assert "wgmma_issue" in kinds and "wgmma_retire" in kinds
        depth = most = 0
        for k in kinds:
            depth += 1 if k == "wgmma_issue" else -1
            most = max(most, depth)
        assert most == 2, (wg, kinds[:12])
    assert any(m.per_iteration and dict(m.per_iteration).get("wgmma", 0) > 0 for m in tr.loops)
