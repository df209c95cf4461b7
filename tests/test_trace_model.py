"""The trace's data (tklab.trace.model), its source view and the parent's parsing, without running anything."""

from __future__ import annotations

import json

import pytest

from tklab.grading import specs
from tklab.grading import traced as exercise
from tklab.trace import view
from tklab.trace.analyze import loops_of, sectors, shared_cost, ways_and_colliding
from tklab.trace.model import Event, GlobalInstr, LoopMix, Sample, SharedInstr, Trace

SRC = ["__global__ void k(float* x) {", "  for (int i = 0; i < 4; ++i) {", "    s[i * 32 + t] = x[t];", "  }", "}"]


def _trace(**kw: object) -> Trace:
    column = [32 * lane * 4 for lane in range(32)]  # a column of a 32-wide float tile: one bank
    acc = shared_cost(column, "ld", 4)
    assert acc is not None
    ways, colliding = ways_and_colliding(acc)
    base = dict(kernel="k", source_name="k.cu", grid=(1, 1, 1), block=(32, 1, 1),
                shared=(SharedInstr(3, SRC[2].strip(), "ld", "ld.shared.b32", 4, 4, 4 * acc.wavefronts,
                                    4 * acc.ideal, ways, colliding, (Sample(tuple(column), 4, acc.wavefronts),)),),
                globals_=(GlobalInstr(3, SRC[2].strip(), "ld", 4, 4, 16),),
                events=(Event(0, 0, 5, "barrier_wait", 105, 0, 3),),
                loops=(LoopMix(2, 4, SRC[1].strip(), 4.0, (("ld.shared", 1.0),)),), blocks_traced=1,
                source_lines=tuple(SRC))
    base.update(kw)
    return Trace(**base)  # type: ignore[arg-type]


def test_json_round_trip_and_a_foreign_schema_is_refused() -> None:
    tr = _trace()
    assert Trace.from_json(tr.to_json()) == tr
    d = json.loads(tr.to_json())
    d["schema"] = 99
    with pytest.raises(ValueError, match="schema 1"):
        Trace.from_json(json.dumps(d))
    with pytest.raises(ValueError, match="schema"):
        Trace.from_json("[1, 2]")


def test_the_bank_model_gives_the_column_read_32_ways() -> None:
    tr = _trace()
    s = tr.shared[0]
    assert (s.per_request, s.conflicts, s.ways, s.colliding[0]) == (32.0, 4 * 31, 32, tuple(range(32)))
    assert sectors([4 * lane for lane in range(32)], 4) == 4  # 128 contiguous bytes: 4 sectors
    assert sectors([128 * lane for lane in range(32)], 4) == 32  # one per lane


def test_source_view_puts_the_worst_line_first_and_escapes_html() -> None:
    tr = _trace()
    notes = view.line_notes(tr)
    assert notes[0].line == 3 and "32-way bank conflict" in notes[0].notes[0]
    assert "lanes 0-31 share a bank" in notes[0].notes[0]
    assert view.why(tr)[0].startswith("line 3:")
    evil = _trace(source_lines=tuple(SRC[:2]) + ("<script>alert(1)</script>",) + tuple(SRC[3:]),
                  shared=(tr.shared[0].__class__(**{**tr.shared[0].__dict__, "text": "<script>alert(1)</script>"}),))
    assert "<script>" not in view.html(evil) and "&lt;script&gt;" in view.html(evil)


def test_loops_are_found_by_their_braces() -> None:
    assert loops_of(SRC) == [(2, 4)]
    assert loops_of(["for (;;) x();", "y();"]) == [(1, 1)]


def test_the_parent_refuses_a_trace_of_another_file() -> None:
    spec = specs.get("ch04_swizzle")
    tr = _trace(source_name="ch04_swizzle.cu")
    assert exercise.parse(tr.to_json().encode(), spec, "\n".join(SRC), "ch04_swizzle.cu") == tr
    with pytest.raises(ValueError, match="does not describe the file"):
        exercise.parse(tr.to_json().encode(), spec, "other source", "ch04_swizzle.cu")
    with pytest.raises(ValueError, match="larger than"):
        exercise.parse(b" " * (exercise.MAX_BYTES + 1), spec, "", "ch04_swizzle.cu")
