"""The challenges' class leaderboard (issue 42, item 2; ``tklab.grading.leaderboard``): a sample class made here is
graded through the real ``python -m tklab grade`` on the CPU (correctness verdicts, the ``device`` and ``submitted``
columns the leaderboard reads), its sheet's rows parse into a leaderboard, and a sheet with GPU rows constructed here
(no GPU on this machine) ranks as it must: each student's best passing ratio, equal ratios by submission time,
failing and CPU-only rows listed but never ranked, another GPU's ratios ranked apart, a malformed sheet refused
naming the row."""

from __future__ import annotations

import csv
import os
import time
from pathlib import Path

import planted
import pytest

from tklab.grading import cases as emu_cases
from tklab.grading import leaderboard, specs
from tklab.grading.grade import main as grade_main
from tklab.grading.leaderboard import LeaderboardError, board, csv_text, markdown, read_sheets
from tklab.grading.leaderboard import main as board_main
from tklab.grading.sheet import FIELDS, Row

ROOT = Path(__file__).resolve().parent.parent
GEMM = "ch08_challenge_gemm_skinny"
SWA = "ch10_challenge_swa"
H200 = "NVIDIA H200"
CAN_EMULATE = emu_cases.can_run(specs.get("ch02_smem_tiling"))


def _write_sheet(path: Path, rows: list[dict[str, str]]) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()
        for r in rows:
            w.writerow({k: r.get(k, "") for k in FIELDS})
    return path


def _gpu_row(student: str, ratio: str, submitted: str, *, exercise: str = GEMM, correct: str = "yes",
             device: str = H200, established: str = "gpu") -> dict[str, str]:
    return {"student": student, "exercise": exercise, "compiled": "yes", "correct": correct, "speed_ratio": ratio,
            "message": "correct" if correct == "yes" else "C[3, 5]: 1.5 instead of 2.0", "established": established,
            "isolation": "bubblewrap sandbox", "hint_level": "unknown", "device": device, "submitted": submitted}


# ---- the sheet carries what the leaderboard needs -------------------------------------------------------------

def test_the_sheet_has_the_leaderboards_columns() -> None:
    assert {"speed_ratio", "device", "submitted", "established", "correct"} <= set(FIELDS)
    assert FIELDS == tuple(Row.__dataclass_fields__)


# ---- a sample class graded through `tklab grade` on the CPU ---------------------------------------------------

@pytest.fixture(scope="module")
def graded_class(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, dict[str, str]]]:
    """ana: the reference solution; ben: the starting file as handed out (correct, plain); cy: a planted mistake
    (a stage read before it landed); dee: nothing. Each file's time as the class folder holds it is set here."""
    if not CAN_EMULATE:
        pytest.skip("no C++ compiler for the CPU emulator")
    root = tmp_path_factory.mktemp("challenge_class")
    cls = root / "class"
    files = {"ana": (ROOT / specs.get(GEMM).solution).read_text(),
             "ben": (ROOT / "exercises" / specs.get(GEMM).exercise_file).read_text(),
             "cy": planted.mutated_file(next(m for m in planted.load(GEMM) if m.name == "no_wait_for_the_stage"),
                                        root / "mutated").read_text()}
    for i, (student, text) in enumerate(files.items()):
        (cls / student).mkdir(parents=True)
        f = cls / student / f"{GEMM}.cu"
        f.write_text(text)
        os.utime(f, (1_800_000_000 + 60 * i, 1_800_000_000 + 60 * i))
    (cls / "dee").mkdir()
    out = root / "grades.csv"
    assert grade_main(["--class", str(cls), "--out", str(out), "--exercises", GEMM, "--timeout", "120",
                       "--no-bench", "--allow-unsandboxed"]) == 0
    with open(out, newline="", encoding="utf-8") as f:
        rows = {r["student"]: r for r in csv.DictReader(f)}
    return out, rows


def test_the_class_gets_its_correctness_verdicts(graded_class) -> None:
    _, rows = graded_class
    assert rows["ana"]["correct"] == "yes" and rows["ana"]["established"] == "cpu-emulation", rows["ana"]
    assert rows["ben"]["correct"] == "yes" and rows["ben"]["message"].startswith("not started"), rows["ben"]
    assert rows["cy"]["correct"] == "no", rows["cy"]
    assert rows["dee"]["correct"] == "missing"
    assert all(r["speed_ratio"] == "" and r["device"] == "" for r in rows.values())  # no GPU: nothing timed


def test_the_sheet_records_when_each_file_was_submitted(graded_class) -> None:
    _, rows = graded_class
    assert rows["ana"]["submitted"] == time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(1_800_000_000))
    assert rows["cy"]["submitted"] == time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(1_800_000_120))
    assert rows["dee"]["submitted"] == ""


def test_the_graded_sheet_parses_into_a_leaderboard_that_ranks_nobody_without_a_gpu(graded_class, tmp_path) -> None:
    out, _ = graded_class
    entries = board(read_sheets([out]))
    standing = {e.student: e for e in entries}
    assert set(standing) == {"ana", "ben", "cy"}  # dee submitted nothing: not listed
    assert not any(e.rank for e in entries)
    assert standing["ana"].status == standing["ben"].status == "correct, no ratio"
    assert standing["cy"].status == "failed"
    md, table = tmp_path / "board.md", tmp_path / "board.csv"
    assert board_main([str(out), "--md", str(md), "--csv", str(table)]) == 0
    assert f"## {GEMM}" in md.read_text() and "- cy: failed" in md.read_text()
    assert list(csv.reader(table.open()))[0] == list(leaderboard.COLUMNS)


# ---- ranking (GPU rows made here) ------------------------------------------------------------------------------

def test_best_passing_ratio_per_student_ties_by_submission_and_failures_not_ranked(tmp_path) -> None:
    first = _write_sheet(tmp_path / "monday.csv", [
        _gpu_row("ana", "0.812", "2026-12-01T10:00:00Z"),
        _gpu_row("ben", "0.900", "2026-12-01T12:00:00Z"),
        _gpu_row("cy", "0.900", "2026-12-01T11:00:00Z"),  # the same ratio as ben, submitted earlier
        _gpu_row("dan", "1.400", "2026-12-01T09:00:00Z", correct="no"),  # fast and wrong: never ranked
        _gpu_row("eve", "", "2026-12-01T09:30:00Z", established="cpu-emulation", device=""),  # no ratio
        _gpu_row("fay", "0.950", "2026-12-01T08:00:00Z", device="NVIDIA H100 80GB HBM3"),  # another GPU
        _gpu_row("gus", "0.700", "", ),  # no submission time: last among equals, still ranked
    ])
    second = _write_sheet(tmp_path / "friday.csv", [
        _gpu_row("ana", "0.950", "2026-12-05T10:00:00Z"),  # ana's best: ranked with it
        _gpu_row("ben", "0.850", "2026-12-05T10:00:00Z"),  # worse than ben's first: the first counts
        _gpu_row("dan", "0.600", "2026-12-05T10:00:00Z"),  # dan's right this time
        _gpu_row("hal", "0.700", "2026-12-04T10:00:00Z"),  # equal to gus, and submitted
    ])
    entries = board(read_sheets([first, second]))
    h200 = [(e.rank, e.student, e.ratio) for e in entries if e.rank and e.device == H200]
    assert h200 == [(1, "ana", 0.95), (2, "cy", 0.9), (3, "ben", 0.9), (4, "hal", 0.7), (5, "gus", 0.7),
                    (6, "dan", 0.6)]
    assert [(e.rank, e.student) for e in entries if e.rank and e.device != H200] == [(1, "fay")]
    unranked = {e.student: e.status for e in entries if not e.rank}
    assert unranked == {"eve": "correct, no ratio"}  # dan is ranked by his right answer, not listed as failed too
    assert next(e for e in entries if e.student == "ana").sheet.endswith("friday.csv")
    text = markdown(entries)
    assert text.index("| 1 | ana | 0.950×") < text.index("| 2 | cy | 0.900×") < text.index("| 3 | ben | 0.900×")
    assert "on NVIDIA H100 80GB HBM3:" in text and "- eve: correct, no ratio" in text
    assert f"\n{GEMM},1,ana,0.950,{H200},2026-12-05T10:00:00Z,ranked," in csv_text(entries)


def test_a_failing_row_alone_is_listed_as_failed_and_never_ranked(tmp_path) -> None:
    sheet = _write_sheet(tmp_path / "s.csv", [_gpu_row("dan", "3.000", "2026-12-01T09:00:00Z", correct="no"),
                                             _gpu_row("ana", "0.5", "2026-12-01T09:00:00Z", exercise=SWA)])
    entries = board(read_sheets([sheet]))
    assert [(e.exercise, e.student, e.rank, e.status) for e in entries] == [(SWA, "ana", 1, "ranked"),
                                                                           (GEMM, "dan", None, "failed")]


def test_rows_of_other_exercises_are_left_out(tmp_path) -> None:
    sheet = _write_sheet(tmp_path / "s.csv", [_gpu_row("ana", "0.9", "2026-12-01T09:00:00Z", exercise="ch08_wgmma")])
    assert read_sheets([sheet]) == [] and leaderboard.is_challenge(GEMM) and not leaderboard.is_challenge("ch08_wgmma")


# ---- malformed sheets ------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("cell", "value", "says"), [
    ("speed_ratio", "fast", "speed_ratio 'fast' is not a number"),
    ("speed_ratio", "-1", "speed_ratio '-1' is not a positive number"),
    ("submitted", "yesterday", "submitted 'yesterday' is not a time"),
    ("correct", "maybe", "correct is 'maybe'"),
])
def test_a_malformed_row_is_refused_naming_it(tmp_path, capsys, cell: str, value: str, says: str) -> None:
    rows = [_gpu_row("ana", "0.9", "2026-12-01T09:00:00Z"), {**_gpu_row("ben", "0.8", "2026-12-01T09:00:00Z"),
                                                              cell: value}]
    sheet = _write_sheet(tmp_path / "bad.csv", rows)
    with pytest.raises(LeaderboardError) as e:
        read_sheets([sheet])
    assert f"{sheet}, line 3 ('ben' / {GEMM}): {says}" in str(e.value)
    assert board_main([str(sheet)]) == 2 and "line 3" in capsys.readouterr().err


def test_a_file_that_is_not_a_grade_sheet_is_refused(tmp_path) -> None:
    other = tmp_path / "other.csv"
    other.write_text("name,score\nana,3\n")
    with pytest.raises(LeaderboardError, match="not a tklab grade sheet of this version"):
        read_sheets([other])
    short = tmp_path / "short.csv"
    short.write_text(",".join(FIELDS) + "\nana,ch08_challenge_gemm_skinny,yes\n")
    with pytest.raises(LeaderboardError, match="line 2 does not have the sheet's"):
        read_sheets([short])


def test_it_reads_only_the_sheet(tmp_path, monkeypatch) -> None:
    """The leaderboard is the sheet's: nothing under a student's folder (or anywhere but the sheet) is opened."""
    sheet = _write_sheet(tmp_path / "s.csv", [_gpu_row("ana", "0.9", "2026-12-01T09:00:00Z")])
    opened: list[str] = []
    real_open = open

    def spy(path, *a, **k):  # noqa: ANN001, ANN002, ANN003 - the builtin's own signature
        opened.append(str(path))
        return real_open(path, *a, **k)

    monkeypatch.setattr("builtins.open", spy)
    board(read_sheets([sheet]))
    assert opened == [str(sheet)]
