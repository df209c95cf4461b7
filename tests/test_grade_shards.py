"""Sharded grading (``grade --shard I/N`` + ``grade-merge``): shards merged are the sheet one run writes.

A small class is graded once whole and once as three shards, with the same ``--seed`` (so a wrong
result's message, which quotes the first wrong element of random inputs, is the same both times); the
merged sheet must equal the single run's byte for byte, but for the heap address an out-of-bounds
message quotes. The
verdicts are real on this CPU: ch01 runs in numba's simulator and ch02 in the CPU emulation. Then the
merge is handed broken sets of shards and must refuse each with a message that names the problem.
"""

from __future__ import annotations

import csv
import json
import re
import shutil
from pathlib import Path

import pytest
import sample_class

from tklab.grading.grade import main as grade_main
from tklab.grading.grade_shards import code_fingerprint, deal, manifest_path, merge, parse_shard
from tklab.grading.grade_shards import main as merge_main
from tklab.paths import solution

ROOT = Path(__file__).resolve().parent.parent
FORMULA = "=HYPERLINK(1)"
# --allow-unsandboxed: this machine may have no bubblewrap (refusal itself: test_grade.py)
# --timeout: no run here hangs, so the limit is not what is tested: far above a run, for a loaded 2-core machine
ARGS = ["--exercises", "ch01", "ch02", "--timeout", "120", "--no-bench", "--seed", "1234", "--allow-unsandboxed"]


def build_class(root: Path) -> Path:
    """alice (solutions), bob (the untouched ch01), carol (a crash and an out-of-bounds write), a student
    named like a formula, frank (nothing handed in), and eve (a folder linking out of the class)."""
    cls = sample_class.copy(root / "class", ["carol"])  # her ch02 made from the solution (tests/sample_class.py)
    exercise = (ROOT / "exercises").joinpath
    for student, source, files in (("alice", solution, ("ch01_naive_matmul.py", "ch02_smem_tiling.cu")),
                                   ("bob", exercise, ("ch01_naive_matmul.py",)),
                                   (FORMULA, exercise, ("ch01_naive_matmul.py",))):
        (cls / student).mkdir()
        for name in files:
            shutil.copy(source(name), cls / student / name)
    (cls / "frank").mkdir()
    (root / "elsewhere").mkdir()
    (cls / "eve").symlink_to(root / "elsewhere", target_is_directory=True)
    return cls


@pytest.fixture(scope="module")
def graded(tmp_path_factory) -> tuple[Path, Path, list[Path]]:
    root = tmp_path_factory.mktemp("shards")
    cls = build_class(root)
    single = root / "single.csv"
    assert grade_main(["--class", str(cls), "--out", str(single), *ARGS]) == 0
    shards = []
    for i in range(3):
        out = root / "shards" / f"shard-{i}.csv"
        out.parent.mkdir(exist_ok=True)
        assert grade_main(["--class", str(cls), "--out", str(out), "--shard", f"{i}/3", *ARGS]) == 0
        shards.append(out)
    return root, single, shards


def same_but_addresses(a: str, b: str) -> bool:
    hexes = re.compile(r"0x[0-9a-f]{8,}")
    return hexes.sub("0x…", a) == hexes.sub("0x…", b)


def rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_shards_merged_are_the_single_run(graded):
    root, single, shards = graded
    merged = root / "merged.csv"
    assert merge_main(["--out", str(merged), *map(str, reversed(shards))]) == 0  # given in any order
    # Byte for byte, but for the heap address a fault message quotes (it differs between any two runs).
    assert same_but_addresses(merged.read_text(), single.read_text())
    assert len(rows(merged)) == 12 and merged.read_text().count("0x") == 1
    sheet = {(r["student"], r["exercise"]): r for r in rows(single)}
    # the verdicts are real ones (run on this CPU), not "not verified"
    assert sheet["alice", "ch01_naive_matmul"]["correct"] == "yes"
    assert (sheet["alice", "ch02_smem_tiling"]["correct"], sheet["alice", "ch02_smem_tiling"]["established"]) in (
        ("yes", "cpu-emulation"), ("yes", "gpu"))
    verdicts = {(s, ex[:4]): r["correct"] for (s, ex), r in sheet.items()}
    assert verdicts["bob", "ch01"] == "no" and verdicts["bob", "ch02"] == "missing"
    assert verdicts["carol", "ch01"] == "no" and verdicts["carol", "ch02"] == "no"
    assert verdicts["frank", "ch02"] == "missing" and verdicts["eve", "ch01"] == "refused"
    assert ("\\" + FORMULA, "ch02_smem_tiling") in sheet  # in the whole class's exercise set, though not handed in


def test_each_student_is_in_exactly_one_shard(graded):
    _, single, shards = graded
    owned = [json.loads(manifest_path(s).read_text())["students"] for s in shards]
    everyone = sorted({r["student"] for r in rows(single)})
    assert sorted(s for o in owned for s in o) == sorted(["alice", "bob", "carol", "eve", "frank", "\\" + FORMULA])
    assert len(everyone) == 6 and max(map(len, owned)) - min(map(len, owned)) <= 1
    roster = ["zoe", "adam", "mia", "ben", "ida", "leo", "eva"]
    deals = [deal(roster, i, 3) for i in range(3)]
    assert deals == [deal(list(reversed(roster)), i, 3) for i in range(3)]  # the listing order does not matter
    assert sorted(sum(deals, [])) == sorted(roster)
    for s in shards:
        m = json.loads(manifest_path(s).read_text())
        assert m["complete"] and m["rows"] == 2 * len(m["students"]) and m["code"] == code_fingerprint()


def _copy(shards: list[Path], where: Path) -> list[Path]:
    where.mkdir()
    out = []
    for s in shards:
        shutil.copy(s, where / s.name)
        shutil.copy(manifest_path(s), manifest_path(where / s.name))
        out.append(where / s.name)
    return out


def _edit_manifest(shard: Path, **changes: object) -> None:
    path = manifest_path(shard)
    m = json.loads(path.read_text())
    m.update(changes)
    path.write_text(json.dumps(m))


@pytest.mark.parametrize("breakage, message", [
    ("missing", "shard(s) 1/3 missing"),
    ("duplicate", "shard 2/3 is given twice"),
    ("roster", "a different class roster"),
    ("options", "different grading options"),
    ("code", "a different version of tklab"),
    ("count", "a different number of shards"),
    ("unfinished", "did not finish"),
    ("row-missing", "row(s) missing"),
    ("row-foreign", "does not own"),
    ("row-twice", "appears twice"),
    ("not-a-shard", "not a shard written by"),
])
def test_merge_refuses_what_would_not_be_the_single_run(graded, tmp_path, breakage, message):
    _, single, shards = graded
    s = _copy(shards, tmp_path / "s")
    given = list(s)
    if breakage == "missing":
        given = [s[0], s[2]]
    elif breakage == "duplicate":
        dup = tmp_path / "again.csv"
        shutil.copy(s[2], dup)
        shutil.copy(manifest_path(s[2]), manifest_path(dup))
        given.append(dup)
    elif breakage == "roster":
        _edit_manifest(s[1], roster_sha256="0" * 64)
    elif breakage == "options":
        _edit_manifest(s[1], options={"timeout": 99.0})
    elif breakage == "code":
        _edit_manifest(s[2], code="feedfeedfeedfeed")
    elif breakage == "count":
        _edit_manifest(s[1], shards=4)
    elif breakage == "unfinished":
        _edit_manifest(s[0], complete=False)
    elif breakage.startswith("row-"):
        lines = s[0].read_text().splitlines(keepends=True)
        if breakage == "row-missing":
            lines.pop()
        elif breakage == "row-twice":
            lines.append(lines[-1])
        else:
            theirs = s[1].read_text().splitlines(keepends=True)
            lines.append(theirs[-1])
        s[0].write_text("".join(lines))
    elif breakage == "not-a-shard":
        given = [single, *s]
    out = tmp_path / "merged.csv"
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        merge(given, out)
    assert not out.exists()  # refused before anything is written


def test_merge_keeps_an_existing_sheet(graded, tmp_path, capsys):
    _, _, shards = graded
    out = tmp_path / "grades.csv"
    out.write_text("precious\n")
    assert merge_main(["--out", str(out), *map(str, shards)]) == 2
    assert "exists" in capsys.readouterr().err and out.read_text() == "precious\n"
    assert merge_main(["--out", str(out), "--replace", *map(str, shards)]) == 0
    assert [p.read_text() for p in tmp_path.glob("grades.csv.bak-*")] == ["precious\n"]


def test_shard_options_are_checked_before_grading(graded, tmp_path, capsys):
    root, _, shards = graded
    cls = root / "class"
    for bad in ("3/3", "1", "-1/2", "a/b", "0/0"):
        assert grade_main(["--class", str(cls), "--out", str(tmp_path / "x.csv"), f"--shard={bad}"]) == 2
        assert "expected I/N" in capsys.readouterr().err
    assert grade_main(["--class", str(cls), "--shard", "0/2"]) == 2
    assert "--shard needs --out" in capsys.readouterr().err
    # resuming a shard's sheet as another shard, or after the class changed, is refused
    again = tmp_path / "shard-0.csv"
    shutil.copy(shards[0], again)
    shutil.copy(manifest_path(shards[0]), manifest_path(again))
    assert grade_main(["--class", str(cls), "--out", str(again), "--shard", "1/3", *ARGS]) == 2
    assert "is shard 0/3, not 1/3" in capsys.readouterr().err
    (cls / "newcomer").mkdir()
    try:
        assert grade_main(["--class", str(cls), "--out", str(again), "--shard", "0/3", *ARGS]) == 2
        assert "roster changed" in capsys.readouterr().err
    finally:
        (cls / "newcomer").rmdir()
    assert parse_shard("7/8") == (7, 8)
