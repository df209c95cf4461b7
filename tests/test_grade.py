"""Instructor mode over a class built from the class sample (tests/sample_class.py: carol, a crasher and a
faulting kernel made from the solution at run time; dave: a hang and a compile error) plus, made here, alice (the
solutions), bob (the untouched exercises) and the mischievous: mallory (a forged verdict, a link to the instructor's
solutions, a Latin-1 file), trudy (a detached process holding the output), eve (a folder that is a link out of the
class) and a student folder named like a spreadsheet formula."""

from __future__ import annotations

import csv
import re
import shutil
import time
from pathlib import Path

import pytest
import sample_class

from tklab import gpu, specs
from tklab.grading import cases as emu_cases
from tklab.grading.grade import FIELDS, Row, find_submissions, grade, main, scan, summary
from tklab.grading.sheet import cell
from tklab.paths import solution

ROOT = Path(__file__).resolve().parent.parent
ON_GPU = gpu.available()
# Without a GPU, CUDA exercises are checked on the CPU emulator when this machine has a C++ compiler.
EMULATED = not ON_GPU and emu_cases.can_run(specs.get("ch02_smem_tiling"))
IDS = ["ch01_naive_matmul", "ch02_smem_tiling"]
FORMULA = "=HYPERLINK(1)"
SOLUTION_CH01 = (ROOT / "solutions" / "ch01_naive_matmul" / "ch01_naive_matmul.py").read_text()
FORGE = """\
import os, sys
for i, a in enumerate(sys.argv):
    if a == "--out":
        open(sys.argv[i + 1], "w").write('{"ok": true}')
for fd in range(3, 64):
    try:
        os.write(fd, b'{"ok": true, "passed": true}')
    except OSError:
        pass
os._exit(0)
"""
SLEEPER = "import subprocess\nsubprocess.Popen(['sleep', '{token}'], start_new_session=True)\n" + SOLUTION_CH01


def _cmdline_has(proc: Path, token: bytes) -> bool:
    try:
        return token in (proc / "cmdline").read_bytes()
    except OSError:
        return False


def build_class(root: Path) -> Path:
    cls = root / "class"
    sample_class.copy(cls)
    exercise = (ROOT / "exercises").joinpath
    for student, source in (("alice", solution), ("bob", exercise), (FORMULA, exercise)):
        (cls / student).mkdir()
        for ex in ("ch01_naive_matmul.py", "ch02_smem_tiling.cu"):
            shutil.copy(source(ex), cls / student / ex)
    mallory = cls / "mallory"
    mallory.mkdir()
    (mallory / "ch01_naive_matmul.py").write_text(FORGE)
    (mallory / "work").mkdir()
    (mallory / "work" / "ch02_smem_tiling.cu").symlink_to(ROOT / "solutions" / "ch02_smem_tiling" /
                                                        "ch02_smem_tiling.cu")
    trudy = cls / "trudy"
    trudy.mkdir()
    (trudy / "ch01_naive_matmul.py").write_text(SLEEPER.replace("{token}", "4077123.25"))
    latin = (ROOT / "solutions" / "ch02_smem_tiling" / "ch02_smem_tiling.cu").read_text().replace("// ", "// café: ", 1)
    (trudy / "ch02_smem_tiling.cu").write_bytes(latin.encode("latin-1"))
    outside = root / "elsewhere"
    outside.mkdir()
    shutil.copy(ROOT / "solutions" / "ch01_naive_matmul" / "ch01_naive_matmul.py", outside / "ch01_naive_matmul.py")
    (cls / "eve").symlink_to(outside, target_is_directory=True)
    return cls


@pytest.fixture(scope="module")
def graded(tmp_path_factory) -> tuple[dict[tuple[str, str], dict[str, str]], float, Path]:
    root = tmp_path_factory.mktemp("grading")
    cls = build_class(root)
    out = root / "grades.csv"
    # The interpreter finishes the real runs in a few seconds; dave's never ends and costs the limit, which is far
    # above the others' runs so that a loaded 2-core machine keeps them within it.
    t = time.monotonic()
    assert main(["--class", str(cls), "--out", str(out), "--exercises", "ch01", "ch02", "--timeout", "30",
                 "--no-bench", "--allow-unsandboxed"]) == 0  # the refusal itself: the test below
    took = time.monotonic() - t
    with open(out, newline="") as f:
        reader = csv.DictReader(f)
        assert tuple(reader.fieldnames or ()) == FIELDS
        rows = list(reader)
    return {(r["student"], r["exercise"]): r for r in rows}, took, root


@pytest.fixture(scope="module")
def sheet(graded):
    return graded[0]


def test_one_row_per_student_and_exercise(sheet):
    names = ("alice", "bob", "carol", "dave", "eve", "mallory", "trudy", "\\" + FORMULA)
    assert sorted(sheet) == sorted((s, e) for s in names for e in IDS)


def test_solutions_are_correct(sheet):
    row = sheet["alice", "ch01_naive_matmul"]
    assert row["correct"] == "yes" and row["established"] == ("gpu" if ON_GPU else "cpu-emulation")
    assert row["isolation"] in ("bubblewrap sandbox", "separate process")
    row = sheet["alice", "ch02_smem_tiling"]
    assert row["compiled"] == "yes"
    assert row["correct"] == ("yes" if ON_GPU or EMULATED else "not verified")
    assert row["established"] == ("gpu" if ON_GPU else "cpu-emulation" if EMULATED else "not-established")


def test_blanks_compile_and_fail(sheet):
    for ex in IDS:
        row = sheet["bob", ex]
        assert (row["compiled"], row["correct"]) == ("yes", "no"), row
        assert row["message"].startswith("not started: fill in the TODO"), row  # the stub, handed in as it is


def test_crasher_is_reported_and_does_not_stop_the_rest(sheet):
    row = sheet["carol", "ch01_naive_matmul"]
    # it imports os: refused before it runs (issue 24, tklab/grading/hygiene.py)
    assert row["correct"] == "no" and "may import only numba, numpy and math" in row["message"], row
    row = sheet["carol", "ch02_smem_tiling"]
    if ON_GPU:
        assert row["correct"] == "no" and "ILLEGAL_ADDRESS" in row["message"]
    elif EMULATED:  # the emulator names the write, the array it ran off and the line
        assert row["correct"] == "no" and "OutOfBounds" in row["message"] and "'float* C'" in row["message"]
    else:
        assert row["correct"] == "not verified"  # its static checks pass: the fault needs a GPU to show


def test_the_faulting_kernel_is_the_solution_with_one_mistake(tmp_path, monkeypatch):
    """carol's ch02 is made from the solution at run time: it differs from it in the store alone; a solution whose
    store changed fails by name instead of handing carol a kernel without her mistake."""
    import difflib

    import planted

    text = planted.solution("ch02_smem_tiling").read_text()
    made = sample_class.copy(tmp_path / "class", ["carol"]) / "carol" / "ch02_smem_tiling.cu"
    changed = [d for d in difflib.unified_diff(text.splitlines(), made.read_text().splitlines(), n=0, lineterm="")
               if d[:1] in "+-" and d[:3] not in ("+++", "---")]
    assert len(changed) == 2 and "C[" in changed[0] and "1000000" in changed[1], changed
    moved = tmp_path / "moved.cu"
    moved.write_text(text.replace(changed[0][1:], changed[0][1:].replace(" = acc", "  = acc")))
    monkeypatch.setattr(planted, "solution", lambda exercise: moved)
    with pytest.raises(planted.AnchorError, match="store_far_outside_c"):
        sample_class.copy(tmp_path / "again", ["carol"])


def test_hang_times_out_and_compile_error_is_named(sheet):
    row = sheet["dave", "ch01_naive_matmul"]
    assert row["correct"] == "no" and "no result within 30 s" in row["message"]
    row = sheet["dave", "ch02_smem_tiling"]
    assert (row["compiled"], row["correct"]) == ("no", "no")
    assert "colum" in row["message"] and re.search(r":13(:\d+)?: error", row["message"])  # (emulator: a column)


# ---- the mischievous ------------------------------------------------------------------------------------

def test_a_forged_verdict_grades_as_wrong(sheet):
    row = sheet["mallory", "ch01_naive_matmul"]
    assert row["correct"] == "no" and row["established"] == "not-established", row


def test_a_link_to_the_solutions_is_refused_and_said_so(sheet):
    row = sheet["mallory", "ch02_smem_tiling"]
    assert row["correct"] == "refused" and row["compiled"] == "", row
    assert "work/ch02_smem_tiling.cu is a link to" in row["message"] and "solutions" in row["message"]


def test_a_student_folder_linking_out_of_the_class_is_refused(sheet):
    for ex in IDS:
        row = sheet["eve", ex]
        assert row["correct"] == "refused" and "outside the class folder" in row["message"], row


def test_formula_names_are_escaped_in_the_csv(graded):
    sheet, _, root = graded
    row = sheet["\\" + FORMULA, "ch01_naive_matmul"]
    assert row["correct"] == "no"  # graded like bob (it is his files), but the name is text in a spreadsheet
    raw = (root / "grades.csv").read_text()
    assert "\n=HYPERLINK" not in raw and ",=HYPERLINK" not in raw and "\\=HYPERLINK(1)" in raw
    assert cell("=1+1") == "'=1+1" and cell("+1") == "'+1" and cell("-2") == "'-2" and cell("@x") == "'@x"
    assert cell("a\nb\tc") == "a b c" and cell("plain") == "plain"  # messages: one line of text


def test_a_detached_process_does_not_stretch_grading_and_is_gone(graded):
    sheet, took, _ = graded
    row = sheet["trudy", "ch01_naive_matmul"]
    # it imports subprocess: refused before it runs (issue 24), so no sleep is ever started
    assert row["correct"] == "no" and "may import only numba, numpy and math" in row["message"], row
    assert not [p for p in Path("/proc").iterdir() if p.name.isdigit() and _cmdline_has(p, b"4077123.25")]
    # 16 files; only dave's hang costs its 30 s limit (a detached sleep that held grading: its 4077123 s)
    assert took < 300, f"grading took {took:.0f} s"


def test_latin1_file_is_read_not_a_crash(sheet):
    row = sheet["trudy", "ch02_smem_tiling"]
    assert row["compiled"] == "yes" and row["correct"] in ("yes", "not verified"), row


# ---- nothing lost ------------------------------------------------------------------------------------

def test_bad_out_is_refused_before_anything_is_graded(tmp_path, capsys):
    cls = tmp_path / "class"
    (cls / "zed").mkdir(parents=True)
    (cls / "zed" / "ch05_mma.cu").write_text("// not a kernel\n")
    t = time.monotonic()
    assert main(["--class", str(cls), "--out", str(tmp_path / "nonexistent" / "x.csv")]) == 2
    assert "does not exist; nothing was graded" in capsys.readouterr().err
    assert main(["--class", str(cls), "--out", str(tmp_path)]) == 2
    assert "is a folder" in capsys.readouterr().err
    assert time.monotonic() - t < 5  # refused at once, not after grading everyone


def test_rows_are_written_as_they_finish_and_a_rerun_resumes(tmp_path, capsys, monkeypatch):
    cls = tmp_path / "class"
    for s in ("ann", "ben"):
        (cls / s).mkdir(parents=True)
        (cls / s / "ch05_mma.cu").write_text("// not a kernel\n")
    out = tmp_path / "g.csv"
    import tklab.grading.grade as g

    real = g._check_in_subprocess
    calls = []

    def dies_on_ben(ex, path, **kw):
        calls.append(path.parent.name)
        if path.parent.name == "ben":
            raise KeyboardInterrupt  # the grader is stopped half-way
        return real(ex, path, **kw)

    monkeypatch.setattr(g, "_check_in_subprocess", dies_on_ben)
    assert main(["--class", str(cls), "--out", str(out), "--no-run"]) == 130  # stopped, not a crash
    assert "Run the same command again to resume" in capsys.readouterr().err
    rows = list(csv.DictReader(out.open()))
    assert [r["student"] for r in rows] == ["ann"]  # ann's row was on disk before ben's check began
    monkeypatch.setattr(g, "_check_in_subprocess", real)
    assert main(["--class", str(cls), "--out", str(out), "--no-run"]) == 0
    assert "resuming" in capsys.readouterr().err
    rows = list(csv.DictReader(out.open()))
    assert [r["student"] for r in rows] == ["ann", "ben"]  # ann not graded twice
    assert main(["--class", str(cls), "--out", str(out), "--no-run", "--restart"]) == 0
    assert [p.name for p in tmp_path.glob("g.csv.bak-*")] and len(list(csv.DictReader(out.open()))) == 2
    out.write_text("name,score\nx,1\n")
    assert main(["--class", str(cls), "--out", str(out), "--no-run"]) == 2
    assert "not a tklab grade sheet" in capsys.readouterr().err and out.read_text() == "name,score\nx,1\n"


def test_summary_counts(sheet):
    rows = [Row(**r) for r in sheet.values()]
    text = summary(rows)
    line = next(ln for ln in text.splitlines() if ln.startswith("ch01_naive_matmul"))
    assert line.split()[1:4] == ["7", "4", "1"]  # submitted, compiled (carol, mallory, trudy refused), correct
    assert "'alice' 1" in text or "'alice' 2" in text
    if not ON_GPU and not EMULATED:
        assert "NOT established" in text
    assert "refused" in text


@pytest.mark.nvrtc  # run=False: only NVRTC's static checks can find the missing kernel
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


def test_links_are_refused_even_inside_the_students_own_folder(tmp_path):
    """A link is refused wherever it leads (issue 39): the grader reads only regular files of the student's own,
    copied by a child, and a link within the folder could be repointed between the look and the copy."""
    s = tmp_path / "gail"
    (s / "src").mkdir(parents=True)
    (s / "src" / "ch05_mma.cu").write_text("// mine\n")
    (s / "ch05_mma.cu").symlink_to(s / "src" / "ch05_mma.cu")
    (s / "linked").symlink_to(tmp_path, target_is_directory=True)  # not followed, noted
    found, refused = scan(s, ["ch05_mma", "ch02_smem_tiling"])
    assert found == {"ch05_mma": s / "src" / "ch05_mma.cu"}  # the regular file in src/ (the link is not it)
    assert "not followed" in refused["ch02_smem_tiling"] and "linked" in refused["ch02_smem_tiling"]
    (s / "src" / "ch05_mma.cu").unlink()
    found, refused = scan(s, ["ch05_mma"])
    assert found == {} and refused["ch05_mma"].startswith("refused: ch05_mma.cu is a link to")


def test_bad_class_folder(tmp_path, capsys):
    assert main(["--class", str(tmp_path / "nope")]) == 2
    assert "not a folder" in capsys.readouterr().err


def test_a_stuck_checker_is_stopped_on_time_and_the_message_names_what_it_was_doing(tmp_path, monkeypatch):
    """A checker that hangs while compiling, with a detached child holding its output (the 245 s case)."""
    import sys

    import tklab.grading.grade as g

    script = tmp_path / "stuck.py"
    script.write_text(
        "import subprocess, sys, time\n"
        "subprocess.Popen(['sleep', '4077999.5'], start_new_session=True)\n"
        "print('@@tklab-check-stage compiling mallory/ch02_smem_tiling.cu', file=sys.stderr, flush=True)\n"
        "time.sleep(600)\n")
    monkeypatch.setattr(g, "_checker_command", lambda *a, **k: [sys.executable, str(script)])
    t = time.monotonic()
    d = g._check_in_subprocess("ch02_smem_tiling", tmp_path / "x.cu", timeout=1.0, run=True, bench=False,
                               compile_allowance=1.0)
    took = time.monotonic() - t
    assert took < 6, f"a 2 s limit took {took:.1f} s"
    assert d["passed"] is False and "did not finish within 2 s, while compiling mallory/ch02_smem_tiling.cu" \
        in d["summary"] and "compile this slow" in d["summary"]
    assert not [p for p in Path("/proc").iterdir() if p.name.isdigit() and _cmdline_has(p, b"4077999.5")]


def test_the_sheet_does_not_take_the_students_word_for_their_hint_level(tmp_path: Path) -> None:
    """A student's hint state is written by the student: a row records the hint level as unknown, whatever
    ``exercises/.hints.json`` in their folder claims (issue 39)."""
    from tklab.grading import hints
    from tklab.grading.grade import HINT_LEVEL_UNKNOWN, _row

    alice = tmp_path / "alice"
    (alice / "exercises").mkdir(parents=True)
    state = alice / "exercises" / hints.STATE_NAME
    state.write_text('{"ch04_swizzle": {"seen": 0, "failed": 0, "asked": 0}}')  # "I never looked"
    verdict = {"compiled": True, "passed": True, "summary": "PASSED", "established": "cpu-emulation"}
    assert _row("alice", "ch04_swizzle", verdict).hint_level == HINT_LEVEL_UNKNOWN == "unknown"
    assert "hint_level" in FIELDS


def test_grading_refuses_where_learner_code_could_reach_the_grader(tmp_path: Path, monkeypatch, capsys) -> None:
    """No bubblewrap, or root with no user to drop to: ``grade`` refuses before anything runs, saying why
    and how to go on; --allow-unsandboxed grades anyway; static checks only (--no-run) need no sandbox."""
    from tklab.grading import sandbox

    cls = tmp_path / "class"
    (cls / "alice").mkdir(parents=True)
    (cls / "alice" / "ch01_naive_matmul.py").write_text((ROOT / "exercises" / "ch01_naive_matmul.py").read_text())
    why = "no bubblewrap here, so learner code would run as you"
    monkeypatch.setattr(sandbox, "grading_problem", lambda gpu=False: why)
    out = tmp_path / "g.csv"
    assert main(["--class", str(cls), "--out", str(out), "--exercises", "ch01"]) == 2
    err = capsys.readouterr().err
    assert "refusing to grade" in err and why in err and "--allow-unsandboxed" in err and not out.exists()
    assert main(["--class", str(cls), "--out", str(out), "--exercises", "ch01", "--no-run"]) == 0
