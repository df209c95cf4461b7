"""Instructor mode over tests/data/class_sample: solutions, blanks, a crasher, a hang, a compile error."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from tklab import gpu
from tklab.grade import FIELDS, find_submissions, grade, main, summary

SAMPLE = Path(__file__).resolve().parent / "data" / "class_sample"
ON_GPU = gpu.available()
IDS = ["ch01_naive_matmul", "ch02_smem_tiling"]


@pytest.fixture(scope="module")
def sheet(tmp_path_factory) -> dict[tuple[str, str], dict[str, str]]:
    out = tmp_path_factory.mktemp("grades") / "grades.csv"
    # The simulator finishes the real ch01 runs in a few seconds; dave's never ends and costs the limit.
    assert main(["--class", str(SAMPLE), "--out", str(out), "--exercises", "ch01", "ch02", "--timeout", "10",
                 "--no-bench"]) == 0
    with open(out, newline="") as f:
        reader = csv.DictReader(f)
        assert tuple(reader.fieldnames or ()) == FIELDS
        rows = list(reader)
    return {(r["student"], r["exercise"]): r for r in rows}


def test_one_row_per_student_and_exercise(sheet):
    assert sorted(sheet) == sorted((s, e) for s in ("alice", "bob", "carol", "dave") for e in IDS)


def test_solutions_are_correct(sheet):
    assert sheet["alice", "ch01_naive_matmul"]["correct"] == "yes"
    row = sheet["alice", "ch02_smem_tiling"]
    assert row["compiled"] == "yes"
    assert row["correct"] == ("yes" if ON_GPU else "not run")


def test_blanks_compile_and_fail(sheet):
    for ex in IDS:
        row = sheet["bob", ex]
        assert (row["compiled"], row["correct"]) == ("yes", "no"), row
    assert "shared memory" in sheet["bob", "ch02_smem_tiling"]["message"]


def test_crasher_is_reported_and_does_not_stop_the_rest(sheet):
    row = sheet["carol", "ch01_naive_matmul"]
    assert row["correct"] == "no" and "crashed" in row["message"] and "SIGABRT" in row["message"]
    row = sheet["carol", "ch02_smem_tiling"]
    if ON_GPU:
        assert row["correct"] == "no" and "ILLEGAL_ADDRESS" in row["message"]
    else:
        assert row["correct"] == "not run"  # its static checks pass: the fault needs a GPU to show


def test_hang_times_out_and_compile_error_is_named(sheet):
    row = sheet["dave", "ch01_naive_matmul"]
    assert row["correct"] == "no" and "no result within 10 s" in row["message"]
    row = sheet["dave", "ch02_smem_tiling"]
    assert (row["compiled"], row["correct"]) == ("no", "no")
    assert "colum" in row["message"] and ":13: error" in row["message"]


def test_summary_counts(sheet):
    from tklab.grade import Row

    rows = [Row(**r) for r in sheet.values()]
    text = summary(rows)
    line = next(ln for ln in text.splitlines() if ln.startswith("ch01_naive_matmul"))
    assert line.split()[1:4] == ["4", "4", "1"]  # submitted, compiled, correct
    assert "alice 1" in text or "alice 2" in text


def test_missing_files_and_backups(tmp_path):
    (tmp_path / "erin" / "work").mkdir(parents=True)
    (tmp_path / "erin" / "work" / "ch05_mma.cu.bak-20260101-000000").write_text("old")
    (tmp_path / "erin" / "work" / "ch05_mma.cu").write_text("// not even a kernel\n")
    (tmp_path / "frank").mkdir()
    assert set(find_submissions(tmp_path / "erin", ["ch05_mma", "ch02_smem_tiling"])) == {"ch05_mma"}
    rows = grade(tmp_path, timeout=10, run=False, progress=False)
    by = {(r.student, r.exercise): r for r in rows}
    assert set(by) == {("erin", "ch05_mma"), ("frank", "ch05_mma")}  # only exercises someone handed in
    assert by["frank", "ch05_mma"].correct == "missing"
    assert by["erin", "ch05_mma"].correct == "no" and "no kernel named mma_16x16x16" in by["erin", "ch05_mma"].message


def test_bad_class_folder(tmp_path, capsys):
    assert main(["--class", str(tmp_path / "nope")]) == 2
    assert "not a folder" in capsys.readouterr().err
