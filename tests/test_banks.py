"""tklab.models.banks against the H200 table that ncu measured (bench/results/banks_h200.json), row by row."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest

from tklab import banks

TABLE = Path(__file__).resolve().parents[1] / "bench" / "results" / "banks_h200.json"


@pytest.fixture(scope="module")
def table() -> dict:
    return json.loads(TABLE.read_text())


def _groups() -> list[str]:
    rows = json.loads(TABLE.read_text())["rows"]
    return sorted({f"{r['op']}:{r['group']}" for r in rows})


def test_table_says_where_it_came_from(table: dict) -> None:
    m = table["machine"]
    assert "H200" in m["device"] and m["driver"] and len(m["commit"]) == 40 and m["date"][:4].isdigit()
    for metric in ("l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
                   "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum"):
        assert metric in table["metrics"]
    # The probe subtracts a baseline per kernel; a non-zero one would mean the kernel touches shared
    # memory outside the probed instruction and every row would be suspect.
    assert all(v == 0 for base in table["baseline"].values() for v in base.values())


def test_table_covers_the_pattern_families(table: dict) -> None:
    rows = table["rows"]
    for op in ("ld", "st"):
        for w in banks.WIDTHS:
            strides = {int(r["name"].split()[1]) for r in rows
                       if r["op"] == op and r["width"] == w and r["group"] == "stride"}
            need = {0, 1, 2, 3, 4, 8, 16, 32, 33} if w < 4 and op == "st" else set(range(34)) | {64, 128, 256}
            assert need <= strides, (op, w, sorted(need - strides))
    groups = {r["group"] for r in rows}
    assert {"broadcast", "swizzle", "padding", "tile16", "random", "inactive", "matrix pitch"} <= groups
    assert len(rows) >= 700


def test_each_probe_was_one_instruction(table: dict) -> None:
    # ldmatrix/stmatrix are not counted by smsp__inst_executed_op_shared_* (ncu has _op_ldsm for them).
    for r in table["rows"]:
        if r["op"] in ("ld", "st"):
            assert r["instructions"] == 1, r["name"]
        elif r["op"] == "ldmatrix" and "smsp__inst_executed_op_ldsm.sum" in r["raw"]:
            assert r["raw"]["smsp__inst_executed_op_ldsm.sum"] == 1, r["name"]


@pytest.mark.parametrize("group", _groups())
def test_model_matches_every_measured_row(table: dict, group: str) -> None:
    """Wavefronts and ncu's bank-conflict count, exactly, for every row of the group."""
    wrong = []
    for r in table["rows"]:
        if f"{r['op']}:{r['group']}" != group:
            continue
        got = banks.predict_row(r)
        if got != (r["wavefronts"], r["conflicts"]):
            wrong.append(f"{r['op']} w={r['width']} {r['name']!r}: measured {r['wavefronts']}/{r['conflicts']}, "
                         f"model {got[0]}/{got[1]}")
    assert not wrong, "\n".join(wrong[:10])


def test_anchor_facts() -> None:
    """The lead's anchors, 4-byte words: stride 1 → 1, 2 → 2, 32 → 32, 33 → 1."""
    for stride, expect in ((1, 1), (2, 2), (32, 32), (33, 1)):
        assert banks.wavefronts([4 * stride * lane for lane in range(32)], 4) == expect


def test_wide_accesses_have_their_own_rules() -> None:
    # A warp reading one 16-byte value: quarter-warps pair up (rule 2), so 2 wavefronts, not 1 or 4.
    assert banks.wavefronts([0] * 32, 16) == 2
    assert banks.wavefronts([0] * 32, 16, store=True) == 4
    assert banks.wavefronts([0] * 32, 8) == 1
    assert banks.wavefronts([0] * 32, 8, store=True) == 2
    # Addresses that depend on lane bits 0 and 1 both: no pairing, one wavefront per quarter...
    assert banks.wavefronts([16 * (lane % 4) for lane in range(32)], 16) == 4
    assert banks.wavefronts([16 * (lane // 4 * 2 + (lane % 4 in (1, 2))) for lane in range(32)], 16) == 4
    # ...on one of them only: quarters pair up.
    assert banks.wavefronts([16 * (lane // 2) for lane in range(32)], 16) == 2
    assert banks.wavefronts([16 * (lane % 2) for lane in range(32)], 16) == 2


def test_rule_2_is_needed_by_the_data(table: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the phase merge the model must disagree with some measured rows (the test can fail)."""
    monkeypatch.setattr(banks, "MERGE_LANE_BITS", ())
    wrong = [r for r in table["rows"] if banks.predict_row(r) != (r["wavefronts"], r["conflicts"])]
    assert len(wrong) >= 10 and all(r["op"] == "ld" and r["width"] in (8, 16) for r in wrong)


def test_schedule_is_a_valid_one(table: dict) -> None:
    """Each wavefront: one word per bank; each active lane's words served exactly once."""
    for r in table["rows"][::7]:
        offs = [None if o < 0 else o for o in r["offsets"]]
        if r["op"] in ("ldmatrix", "stmatrix"):
            acc = banks.analyze_matrix(offs[: 8 * r["num"]], r["num"], store=r["op"] == "stmatrix")
        else:
            acc = banks.analyze(offs, r["width"], store=r["op"] == "st")
        served: dict[int, list[int]] = defaultdict(list)
        for wave in acc.waves:
            words: dict[int, int] = {}
            for q in wave.requests:
                assert words.setdefault(q.bank, q.word) == q.word, "two words from one bank in a wavefront"
                assert q.word % banks.BANKS == q.bank
                served[q.lane].append(q.word)
        for lane, o in enumerate(acc.offsets):
            if o is None:
                assert lane not in served
            else:
                assert sorted(served[lane]) == list(range(o // 4, (o + acc.width - 1) // 4 + 1))
        assert len(acc.grid()) == acc.wavefronts and all(len(row) == 32 for row in acc.grid())


def test_sub_word_lanes_share_a_word() -> None:
    # 32 lanes reading 32 consecutive bytes use 8 words of 8 banks: one wavefront.
    acc = banks.analyze(list(range(32)), 1)
    assert acc.wavefronts == 1 and len(acc.waves[0].banks) == 8


def test_inactive_lanes_cost_nothing() -> None:
    assert banks.wavefronts([None] * 32, 4) == 0
    assert banks.wavefronts([128 * lane if lane < 4 else None for lane in range(32)], 4) == 4


def test_matrix_model() -> None:
    rows = [128 * i for i in range(32)]
    assert banks.analyze_matrix(rows, 4).wavefronts == 32
    assert banks.analyze_matrix([144 * i for i in range(32)], 4).wavefronts == 4
    assert banks.analyze_matrix(rows[:8], 1).conflicts == 7


@pytest.mark.parametrize(
    ("offsets", "width", "message"),
    [
        ([0] * 31, 4, "need 32 offsets"),
        ([4 * i for i in range(31)] + [6], 4, "lane 31: offset 6 is not a multiple of the access width 4"),
        ([0] * 32, 3, "width 3 is not a shared-memory access size"),
        ([0] * 31 + [-8], 8, "lane 31: offset -8 is negative"),
        ([0] * 31 + ["x"], 4, "not a whole byte offset"),
    ],
)
def test_bad_patterns_say_what_is_wrong(offsets: list, width: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        banks.analyze(offsets, width)


def test_bad_matrix_patterns() -> None:
    with pytest.raises(ValueError, match="move 1, 2 or 4 matrices"):
        banks.analyze_matrix([0] * 24, 3)
    with pytest.raises(ValueError, match=r"\.x2 needs 16 row addresses"):
        banks.analyze_matrix([0] * 8, 2)


def test_fractional_offsets_are_refused_not_truncated():
    import numpy as np

    with pytest.raises(ValueError, match="lane 1: offset 4.5 is not a whole byte offset"):
        banks.wavefronts([i * 4.5 for i in range(32)], 4)
    # whole numbers in any form are fine: floats that are whole, numpy integers
    assert banks.wavefronts([float(4 * i) for i in range(32)], 4) == 1
    assert banks.wavefronts(list(np.arange(32, dtype=np.int64) * 4), 4) == 1
