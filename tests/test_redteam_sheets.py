"""Red team against the grade sheets (issue 24, item 5): names that collide, two graders on one ``--out``,
an edited shard manifest, Ctrl-C in the middle of a class.

Most tests stand a recording fake in for the checker (``grade._check_in_subprocess``): what is under test
is the sheet (names, lock, resume, merge), not a verdict, and a real check costs seconds. The Ctrl-C test
runs the real grader, checker and sandboxed child, and interrupts them while a learner's file runs.
"""

from __future__ import annotations

import csv
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

import tklab.grading.grade as g
from tklab.grading.grade_shards import MergeError, manifest_path, merge
from tklab.grading.sheet import GradeError, OutLock, escape_name, refuse_lookalikes, unescape_name
from tklab.grading.sheet import _start_time as _start

ROOT = Path(__file__).resolve().parent.parent
FILE = "ch01_naive_matmul.py"
EX = "ch01_naive_matmul"
#: Folder names as bytes: each must get its own row, written so that it reads back as itself.
ODD = [b"x\ny", b"x y", b"x\\ny", b"\tlead", b"trail\r", b"a,b", b'say "hi"', b"=SUM(A1)", b"'=SUM(A1)", b"\\=SUM(A1)",
       b"-1", b"+1", b"@me", b"caf\xc3\xa9", b"latin\xe9", b"\xff\xfe", b"nbsp\xc2\xa0x", b"plain"]


def _class(root: Path, names: list[bytes], content: str = "# a learner's file\n") -> Path:
    cls = root / "class"
    cls.mkdir()
    for n in names:
        folder = os.path.join(os.fsencode(cls), n)
        os.mkdir(folder)
        Path(os.fsdecode(folder), FILE).write_text(content)
    return cls


class FakeChecker:
    """Stands in for the checker: records who was checked; raises KeyboardInterrupt at call ``stop_at``."""

    def __init__(self, stop_at: int | None = None):
        self.calls: list[str] = []
        self.stop_at = stop_at

    def __call__(self, exercise: str, path: Path, **_: object) -> dict:
        if self.stop_at is not None and len(self.calls) == self.stop_at:
            self.stop_at = None
            raise KeyboardInterrupt  # Ctrl-C while this check is in flight
        self.calls.append(path.parent.name)
        return {"compiled": True, "passed": True, "summary": f"checked {path.parent.name}", "established": "fake"}


def _sheet(out: Path) -> list[dict[str, str]]:
    with open(out, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


# ---- names ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("raw", ODD, ids=repr)
def test_every_odd_name_is_written_reversibly_as_one_printable_line_and_no_formula(raw):
    name = os.fsdecode(raw)
    text = escape_name(name)
    assert os.fsencode(unescape_name(text)) == raw
    assert text.isprintable() and text[:1] not in "=+-@\t\r"


def test_no_two_names_share_a_cell_and_forged_escapes_are_refused():
    cells = [escape_name(os.fsdecode(n)) for n in ODD]
    assert len(set(cells)) == len(ODD)
    for bad in ("a\\qb", "\\", "x\\x4", "=1", "a\nb"):  # not a cell escape_name writes
        with pytest.raises(ValueError):
            unescape_name(bad)


def test_odd_names_are_kept_distinct_and_an_interrupted_class_resumes_grading_everyone_once(tmp_path, monkeypatch,
                                                                                             capsys):
    cls = _class(tmp_path, ODD)
    out = tmp_path / "grades.csv"
    first = FakeChecker(stop_at=5)
    monkeypatch.setattr(g, "_check_in_subprocess", first)
    assert g.main(["--class", str(cls), "--out", str(out), "--exercises", "ch01", "--no-run"]) == 130
    assert "Run the same command again to resume" in capsys.readouterr().err
    assert len(_sheet(out)) == 5  # what finished is kept
    second = FakeChecker()
    monkeypatch.setattr(g, "_check_in_subprocess", second)
    assert g.main(["--class", str(cls), "--out", str(out), "--exercises", "ch01", "--no-run"]) == 0
    assert "resuming" in capsys.readouterr().err
    rows = _sheet(out)
    graded = [os.fsencode(unescape_name(r["student"])) for r in rows]
    assert sorted(graded) == sorted(ODD)  # everyone exactly once: none collapsed, none lost, none twice
    assert sorted(first.calls + second.calls) == sorted(os.fsdecode(n) for n in ODD)  # each checked once
    raw = out.read_bytes()
    assert raw.count(b"\n") == len(ODD) + 1 and b",=" not in raw and b"\n=" not in raw  # one line each, no formula


@pytest.mark.parametrize("pair", [(b"Ana", b"ana"), (b"caf\xc3\xa9", b"cafe\xcc\x81"), (b"\xef\xbc\xa1x", b"Ax")],
                         ids=["case", "composed-decomposed", "fullwidth"])
def test_names_that_read_as_one_are_refused_before_anything_is_graded(tmp_path, monkeypatch, capsys, pair):
    cls = _class(tmp_path, [*pair, b"zed"])
    out = tmp_path / "grades.csv"
    fake = FakeChecker()
    monkeypatch.setattr(g, "_check_in_subprocess", fake)
    assert g.main(["--class", str(cls), "--out", str(out), "--no-run"]) == 2
    err = capsys.readouterr().err
    assert "read as the same name" in err and "rename one" in err
    assert not fake.calls and not out.exists()
    with pytest.raises(GradeError):
        refuse_lookalikes([os.fsdecode(n) for n in pair])


# ---- one writer, nothing twice ---------------------------------------------------------------------

HOLD = """\
import sys, time
from pathlib import Path
from tklab.grading.sheet import OutLock
OutLock(Path(sys.argv[1])).acquire()
print("held", flush=True)
time.sleep(120)
"""


def test_a_second_grader_on_one_out_is_refused_naming_the_holder_and_a_dead_holders_lock_is_taken_over(
        tmp_path, monkeypatch, capsys):
    cls = _class(tmp_path, [b"ann", b"ben"])
    out = tmp_path / "grades.csv"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(out)], stdout=subprocess.PIPE, env=env, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        fake = FakeChecker()
        monkeypatch.setattr(g, "_check_in_subprocess", fake)
        assert g.main(["--class", str(cls), "--out", str(out), "--no-run"]) == 2
        err = capsys.readouterr().err
        assert "being written by another grader" in err and f"pid {holder.pid}" in err and "grades.csv.lock" in err
        assert not fake.calls and not out.exists()  # refused before anything is graded or written
    finally:
        holder.kill()  # dies without releasing: its lock file stays, naming it
        holder.wait()
    assert json.loads((tmp_path / "grades.csv.lock").read_text())["pid"] == holder.pid
    assert g.main(["--class", str(cls), "--out", str(out), "--no-run"]) == 0
    assert f"stale lock of a grader that is gone (pid {holder.pid}" in capsys.readouterr().err
    assert [r["student"] for r in _sheet(out)] == ["ann", "ben"] and not (tmp_path / "grades.csv.lock").exists()


def test_a_live_holder_is_refused_even_where_flock_is_not_honoured(tmp_path):
    out = tmp_path / "g.csv"
    lock = OutLock(out).acquire()
    try:  # flock: exclusive even between two opens in one process
        with pytest.raises(GradeError, match="being written by another grader"):
            OutLock(out).acquire()
    finally:
        lock.release()
    assert not (tmp_path / "g.csv.lock").exists()  # released: the lock file is gone
    # A file system that ignores flock (the holder's lock file is all there is): its pid, alive, is enough.
    other = subprocess.Popen(["sleep", "60"])
    try:
        holder = {"pid": other.pid, "host": socket.gethostname(), "start": _start(other.pid), "since": "now",
                  "command": "tklab grade"}
        (tmp_path / "g.csv.lock").write_text(json.dumps(holder))
        with pytest.raises(GradeError, match=f"pid {other.pid} .* which is still running"):
            OutLock(out).acquire()
    finally:
        other.kill()
        other.wait()
    lock = OutLock(out).acquire()  # now it is gone: taken over, and said so
    assert f"pid {other.pid}" in lock.took_over
    lock.release()


def test_a_row_cut_by_a_kill_is_graded_again_and_a_sheet_with_a_row_twice_is_refused(tmp_path, monkeypatch, capsys):
    cls = _class(tmp_path, [b"ann", b"ben"])
    out = tmp_path / "grades.csv"
    monkeypatch.setattr(g, "_check_in_subprocess", FakeChecker())
    assert g.main(["--class", str(cls), "--out", str(out), "--no-run"]) == 0
    whole = out.read_bytes()
    out.write_bytes(whole[:-9])  # killed while writing ben's row
    again = FakeChecker()
    monkeypatch.setattr(g, "_check_in_subprocess", again)
    assert g.main(["--class", str(cls), "--out", str(out), "--no-run"]) == 0
    assert "dropped an unfinished last row" in capsys.readouterr().err
    assert again.calls == ["ben"] and out.read_bytes() == whole
    lines = whole.splitlines(keepends=True)
    out.write_bytes(b"".join([*lines, lines[-1]]))
    assert g.main(["--class", str(cls), "--out", str(out), "--no-run"]) == 2
    assert "'ben' / ch01_naive_matmul twice" in capsys.readouterr().err


# ---- shards ---------------------------------------------------------------------------------------

@pytest.fixture
def shards(tmp_path, monkeypatch) -> list[Path]:
    cls = _class(tmp_path, [b"ann", b"ben", b"cy", b"x\ny"])
    monkeypatch.setattr(g, "_check_in_subprocess", FakeChecker())
    outs = []
    for i in range(2):
        out = tmp_path / f"shard-{i}.csv"
        assert g.main(["--class", str(cls), "--out", str(out), "--shard", f"{i}/2", "--no-run"]) == 0
        outs.append(out)
    return outs


def _claim(shards: list[Path], student: str, *, roster: bool = False) -> None:
    """Edit shard 0 to claim ``student`` of shard 1: its manifest, and the rows moved across."""
    m0, m1 = (json.loads(manifest_path(s).read_text()) for s in shards)
    m0["students"].append(student)
    m1["students"].remove(student)
    if roster:  # and reorder the roster so the deal would agree (its fingerprint then does not)
        m0["roster"] = m1["roster"] = sorted(m0["roster"], key=lambda s: s != student)
    for s, m in zip(shards, (m0, m1), strict=True):
        manifest_path(s).write_text(json.dumps(m))
    rows1 = shards[1].read_text().splitlines(keepends=True)
    moved = [ln for ln in rows1 if ln.startswith(student + ",")]
    shards[1].write_text("".join(ln for ln in rows1 if ln not in moved))
    shards[0].write_text(shards[0].read_text() + "".join(moved))


def test_merged_shards_keep_odd_names(shards, tmp_path):
    rows = merge(shards, tmp_path / "merged.csv")
    assert [unescape_name(r["student"]) for r in rows] == ["ann", "ben", "cy", "x\ny"]


@pytest.mark.parametrize("roster", [False, True], ids=["students", "students-and-roster"])
def test_an_edited_manifest_claiming_another_shards_student_is_refused(shards, tmp_path, roster):
    _claim(shards, "ben", roster=roster)
    out = tmp_path / "merged.csv"
    message = "not the one it fingerprinted" if roster else "claims 'ben', shard 1/2's student, for shard 0/2"
    with pytest.raises(MergeError, match=message):
        merge(shards, out)
    assert not out.exists()


# ---- Ctrl-C ---------------------------------------------------------------------------------------

# a learner's kernel that never ends (it passes the file rules: only numba, a @cuda.jit function)
SLOW = "from numba import cuda\n\n\n@cuda.jit\ndef matmul(A, B, C):\n    while True:\n        C[0, 0] = 0\n"
GRADER = """\
import signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)  # as at a terminal, even where SIGINT was ignored
from tklab.grading.grade import main
raise SystemExit(main(sys.argv[1:]))
"""


def _children(pid: int) -> dict[int, str]:
    """{pid: start time} of every descendant of ``pid`` now."""
    parent: dict[int, int] = {}
    start: dict[int, str] = {}
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                fields = (p / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            parent[int(p.name)], start[int(p.name)] = int(fields[1]), fields[19]
    found, todo = {}, [pid]
    while todo:
        q = todo.pop()
        for c, pp in parent.items():
            if pp == q and c not in found:
                found[c] = start[c]
                todo.append(c)
    return found


def _alive(pid: int, start: str) -> bool:
    """Running (not a zombie) and the same process (its start time), not a reused pid."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return fields[19] == start and fields[0] not in ("Z", "X")


def test_ctrl_c_mid_grade_stops_the_check_in_flight_keeps_the_sheet_and_resume_grades_everyone_once(tmp_path):
    cls = tmp_path / "class"
    (cls / "bea").mkdir(parents=True)
    (cls / "bea" / FILE).write_text(SLOW)
    (cls / "cal").mkdir()  # hands in nothing: a row without a check
    out = tmp_path / "grades.csv"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    args = ["--class", str(cls), "--out", str(out), "--exercises", "ch01", "--no-bench"]
    grader = subprocess.Popen([sys.executable, "-c", GRADER, *args, "--timeout", "300"], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    tree: dict[int, str] = {}
    while time.monotonic() < deadline:  # until the learner's file runs: the checker and its child started
        tree = _children(grader.pid)
        # the sheet is open (its header written) and a check's child runs: grading is under way (a fresh clone
        # first builds the emulator's runtime in a child of its own, before the sheet is opened)
        if out.exists() and len(tree) >= 2 and any(b"tklab.grading.child" in Path(f"/proc/{p}/cmdline").read_bytes()
                                                   for p in tree if _alive(p, tree[p])):
            break
        time.sleep(0.2)
    else:
        grader.kill()
        pytest.fail(f"the check never started: {grader.communicate()}")
    time.sleep(1.0)
    grader.send_signal(signal.SIGINT)
    _, err = grader.communicate(timeout=60)
    assert grader.returncode == 130, err
    assert "interrupted" in err and "Run the same command again to resume" in err
    for _ in range(50):  # a process killed takes a moment to go
        left = [p for p, s in tree.items() if _alive(p, s)]
        if not left:
            break
        time.sleep(0.1)
    assert not left, f"still running after Ctrl-C: {left}"  # the checker and the learner's run stopped
    assert _sheet(out) == []  # nothing half-graded was written
    assert not (tmp_path / "grades.csv.lock").exists()
    proc = subprocess.run([sys.executable, "-c", GRADER, *args, "--timeout", "2"], env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    rows = _sheet(out)
    assert sorted((r["student"], r["exercise"]) for r in rows) == [("bea", EX), ("cal", EX)]
    bea = next(r for r in rows if r["student"] == "bea")
    assert bea["correct"] == "no" and "no result within 2 s" in bea["message"]
