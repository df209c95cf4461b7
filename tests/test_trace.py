"""tklab.trace: the learner's own kernel as the emulator saw it (issue 29), on the CPU.

Each case is the smallest launch that shows the behaviour; compiled modules are cached (TKLAB_CACHE_DIR)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import tklab
from tklab.emulate.toolchain import NoCompiler, find
from tklab.trace import view
from tklab.trace.model import Trace

ROOT = Path(__file__).resolve().parent.parent
CH04 = (ROOT / "solutions" / "ch04_swizzle.cu").read_text()
ANSWER = "return r * TILE + (c ^ r);"


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


def _transpose(src: str) -> Trace:
    m = n = 64
    a = np.arange(m * n, dtype=np.float32).reshape(m, n)
    out = np.zeros((n, m), np.float32)
    tr = tklab.trace(src, kernel="transpose", grid=(2, 2), block=(32, 8), args=(a, out, m, n),
                     name="ch04_swizzle.cu")
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
    write is conflict-free; global accesses are 4 sectors per request (32 lanes x 4 B)."""
    src = naive.source_lines
    read = _line("\n".join(src), "out[oy * M + ox] = tile[")
    worst = naive.shared[0]
    assert worst.line == read and worst.op == "ld"
    # Every warp-wide load of a column: 32 wavefronts (ideal 1), one per element (the exercise's first case,
    # a multiple of 32 each way: all lanes active); one load and one store per element of the matrix.
    assert (worst.wavefronts, worst.ideal, worst.ways) == (32 * worst.executions, worst.executions, 32)
    assert worst.colliding[0] == tuple(range(32))
    store = next(s for s in naive.shared if s.op == "st")
    assert store.conflicts == 0 and store.executions == worst.executions
    assert {g.sectors_per_request for g in naive.globals_} == {4.0}
    assert view.why(naive)[0].startswith(f"line {read}:") and "32-way" in view.why(naive)[0]
    assert Trace.from_json(naive.to_json()) == naive


def test_padded_transpose_shows_none() -> None:
    tr = _transpose(ch04("return r * (TILE + 1) + c;"))
    assert tr.shared and all(s.conflicts == 0 and s.ways == 1 for s in tr.shared)
    assert sum(s.executions for s in tr.shared) == 256
    assert view.why(tr) == []
    loops = {m.first_line: m for m in tr.loops}
    src = "\n".join(tr.source_lines)
    second = loops[_line(src, "for (int j = threadIdx.y; j < TILE; j += ROWS) {") + 6]
    assert second.iterations == 4 and dict(second.per_iteration) == {"ld.shared": 1.0, "st.global": 1.0}
    text = view.text(tr)
    assert "no bank conflict" in text and re.search(r"loop at line \d+ \(4 iterations per warp\)", text)


def test_bad_input_is_named() -> None:
    with pytest.raises(ValueError, match="exercise id"):
        tklab.trace("no such thing")
    with pytest.raises(ValueError, match="kernel=, grid="):
        tklab.trace(CH04)
    with pytest.raises(FileNotFoundError):
        tklab.trace("missing.cu")
