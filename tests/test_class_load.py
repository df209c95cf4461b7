"""A class through nbgrader, one hostile student per attack (issue 39, item 6): the whole round trip of
tests/test_nbgrade.py (release, fetch, submit, collect, ``tklab nbgrade autograde``, feedback, the exported sheet)
with the ordinary students handing in an attempt at chapter 01 -- the solution, the untouched exercise, a planted
mistake of ``solutions/ch01_naive_matmul/planted.toml`` or a benign variant applied to the solution -- and one
student per attack that reaches the nbgrader path.

Two classes, the same tests (issue 44, item 7): ``make test`` grades the class of 13 on every commit -- every hostile
student below, a plain solution (the one the linker's links point at), one planted mistake and one benign variant --
and ``make test-full`` the class of 40 (marker ``test_full``): 13 solutions, 8 untouched exercises, every planted
mistake and every benign variant beside the same hostile students, the same path at the size of a class. The
hostile students are:

* mallory: a cell that makes every check cell print a pass (test_nbgrade's ``TAMPER``);
* trudy: a daemon that rewrites the gradebook after autograde, and a cell printing classmates' submissions;
* eve: a cell printing the solutions, the git history, the exchange, classmates' autograded notebooks and feedback;
* forker: a cell that forks until it is refused (1500 at most); hog: a cell that allocates until refused (6 GiB
  at most); flood: a cell printing 17 MB (one line of 8 MiB, then 100 000 lines); sleeper: a cell that starts a
  process and sleeps past nbgrader's cell time limit;
* fifo: the exercise file in the submission folder is a FIFO; linker: the notebook and the exercise file there
  are links to a classmate's; badjson: the notebook handed in is not JSON.

Every student's exercise file and notebook holds a secret of their own. Expected scores come from what each attempt
is (the solution and the benign variants every point, the untouched exercise only its compile, a planted mistake
everything but its output), never from a table. The whole run's wall time is printed (``-s`` shows it), a note,
not an assertion.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import redirect_stdout
from dataclasses import dataclass, field
from pathlib import Path

import pytest

pytest.importorskip("nbgrader", reason="nbgrader is in the dev extra (pip install -e '.[dev]')")

import planted  # noqa: E402
from nbgrader.api import Gradebook  # noqa: E402
from test_nbgrade import EX, FILE, TAMPER, _alive, _released, _student, _trudy_cells  # noqa: E402

from tklab import nbgrade, specs  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
NB = f"{EX}.ipynb"
#: nbgrader's time limit per cell in this class (its option, passed through by ``tklab nbgrade autograde``), and for
#: a cell's last output after its reply (``iopub_timeout``, 4 s by default): what stops the sleeper, and what every
#: other cell must keep within. nbgrader's default; the fork bomb (about a thousand forks before the limit refuses
#: them) and the output flood took more than 10 s, and the flood's output more than 4 s to drain, on a loaded 2-core
#: machine, which failed their notebooks.
CELL_SECONDS = 30
#: The limit of each student's check (``--timeout``): not what these tests test, so far above what the check of
#: chapter 01 takes (a few seconds), for a loaded 2-core machine.
CHECK_SECONDS = 120
SOLUTION = planted.solution(EX).read_text()
STUB = (ROOT / "exercises" / FILE).read_text()

# -- the class --------------------------------------------------------------------------------------------------------

_SUITE = planted.load(EX)
#: {student: what their exercise file is}: the hostile students (what their notebook does is below), in every class.
HOSTILE = {"mallory": STUB, "trudy": STUB, "eve": SOLUTION, "forker": SOLUTION, "hog": SOLUTION, "flood": SOLUTION,
           "sleeper": SOLUTION, "fifo": SOLUTION, "linker": SOLUTION, "badjson": SOLUTION}
FORK_MOST, HOG_MOST_MIB = 1500, 6144


def _attempt(m: planted.Mutation) -> tuple[str, tuple[str, str]]:
    return f"m_{m.name}", ("benign" if m.benign else "mistake", planted.apply(SOLUTION, m))


@dataclass(frozen=True)
class Roster:
    """One class: what each ordinary student hands in ({student: (kind, text of the exercise file)}), the hostile
    students, a secret of each (in their exercise file and their notebook: it must show up nowhere else), and the
    numbers in the command lines of what the hostile cells start (``sleep N``), to find them afterwards."""

    ordinary: dict[str, tuple[str, str]]
    hostile: dict[str, str] = field(default_factory=lambda: dict(HOSTILE))
    secret: dict[str, str] = field(default_factory=dict)
    daemon_token: str = field(default_factory=lambda: f"4097{uuid.uuid4().int % 10**6}.5")
    fork_token: str = field(default_factory=lambda: f"4096{uuid.uuid4().int % 10**6}.5")
    sleep_token: str = field(default_factory=lambda: f"4095{uuid.uuid4().int % 10**6}.5")

    def __post_init__(self) -> None:
        self.secret.update({s: f"secret-{s}-{uuid.uuid4().hex}" for s in self.students})

    @property
    def students(self) -> list[str]:
        return [*self.ordinary, *self.hostile]

    def kind(self, student: str) -> str:
        if student in self.ordinary:
            return self.ordinary[student][0]
        if student in ("fifo", "linker"):
            return "refused"
        return "untouched" if self.hostile[student] == STUB else "solution"


def _roster(size: str) -> Roster:
    """The class of 40 (``full``), or the class of 13 (``small``): the hostile students, the solution the linker's
    links point at (sol01; mallory and trudy hand in the untouched exercise, the other hostile students the
    solution), the suite's first planted mistake and its first benign variant."""
    if size == "full":
        return Roster({**{f"sol{i:02d}": ("solution", SOLUTION) for i in range(1, 14)},
                       **{f"stub{i:02d}": ("untouched", STUB) for i in range(1, 9)},
                       **dict(_attempt(m) for m in _SUITE)})
    first = [next(m for m in _SUITE if m.benign is benign) for benign in (False, True)]
    return Roster({"sol01": ("solution", SOLUTION), **dict(_attempt(m) for m in first)})


@pytest.fixture(scope="module", params=[pytest.param("small", id="class_of_13"),
                                        pytest.param("full", id="class_of_40", marks=pytest.mark.test_full)])
def roster(request: pytest.FixtureRequest) -> Roster:
    return _roster(request.param)


def _cells(course: Path, exchange: Path, r: Roster) -> dict[str, list[str]]:
    """The code cells each hostile student adds to their notebook."""
    peek = (f"import glob, os, subprocess\nfor pattern in ({str(course / '*' / '*' / EX / '*')!r}, "
            f"{str(exchange / '*' / '*' / '*' / '*')!r}, '/tmp/*/*', '/tmp/*'):\n"
            "    for f in glob.glob(pattern):\n        try:\n            print(f, open(f, errors='replace').read())\n"
            "        except OSError as e:\n            print(f, e)\n"
            f"for f in ({str(ROOT / 'solutions' / EX / FILE)!r}, {str(ROOT / '.git' / 'HEAD')!r}, "
            f"{str(course / 'gradebook.db')!r}):\n    try:\n"
            "        print('READ', f, open(f, errors='replace').read())\n"
            "    except OSError as e:\n        print('DENIED', f, e)\n"
            f"r = subprocess.run(['git', '-C', {str(ROOT)!r}, 'show', 'HEAD:solutions/{EX}/{FILE}'], "
            "capture_output=True, text=True)\nprint('git:', r.returncode, r.stdout[-2000:], r.stderr[-300:])\n"
            "print('eve looked')\n")
    forks = (f"import os\nkids = 0\ntry:\n    for _ in range({FORK_MOST}):\n        pid = os.fork()\n"
             "        if pid == 0:\n"
             f"            os.execv('/bin/sleep', ['sleep', {r.fork_token!r}])\n        kids += 1\n"
             "except OSError as e:\n    print('FORKS REFUSED after', kids, e.strerror)\nelse:\n"
             "    print('FORKED', kids)\n")
    hog = (f"blocks = []\ntry:\n    for _ in range({HOG_MOST_MIB // 64}):\n        blocks.append(b'x' * (64 << 20))\n"
           "    print('HOG HELD', len(blocks) * 64, 'MiB')\nexcept MemoryError:\n"
           "    print('HOG REFUSED at', len(blocks) * 64, 'MiB')\ndel blocks\n")
    flood = ("import sys\nsys.stdout.write('y' * (8 << 20) + '\\n')\nfor i in range(100_000):\n"
             "    print('flood', i, 'x' * 80)\nprint('FLOOD DONE')\n")
    sleep = (f"import subprocess, time\nsubprocess.Popen(['sleep', {r.sleep_token!r}])\nprint('SLEEPING', flush=True)\n"
             "time.sleep(3600)\n")
    return {"mallory": [TAMPER], "trudy": _trudy_cells(course, exchange, r.daemon_token, "trudy"), "eve": [peek],
            "forker": [forks], "hog": [hog], "flood": [flood], "sleeper": [sleep]}


def _edit_notebook(path: Path, secret: str, code: list[str]) -> None:
    """The student's notebook with a markdown cell holding their secret, then their code cells, after the intro."""
    import nbformat

    nb = nbformat.read(path, as_version=4)
    added = [nbformat.v4.new_markdown_cell(f"my notes ({secret})")]
    added += [nbformat.v4.new_code_cell(c) for c in code]
    for i, cell in enumerate(added):
        cell["id"] = f"student-{i}"
    nb.cells[1:1] = added
    nbformat.write(nb, path)


@pytest.fixture(scope="module")
def klass(tmp_path_factory, roster: Roster) -> Iterator[dict]:
    r = roster
    root = tmp_path_factory.mktemp(f"class{len(r.students)}")
    course, exchange = root / "course", root / "exchange"
    course.mkdir()
    exchange.mkdir()
    runtime = root / "runtime"  # the kernels' connection files: every launcher's command line names this folder
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PATH", os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
        mp.setenv("JUPYTER_RUNTIME_DIR", str(runtime))
        t0 = time.monotonic()
        api = _released(root, course, exchange)
        cells = _cells(course, exchange, r)
        homes = {}
        for who in r.students:
            home = root / "home" / who
            home.mkdir(parents=True)
            _student(home, exchange, who, "fetch")
            homes[who] = home / EX
            text = r.ordinary[who][1] if who in r.ordinary else r.hostile[who]
            (homes[who] / FILE).write_text(f"{text}\n# {r.secret[who]}\n")
            _edit_notebook(homes[who] / NB, r.secret[who], cells.get(who, []))
        (homes["badjson"] / NB).write_text('{"cells": [{"cell_type": "markdown", "source": "' + r.secret["badjson"])
        for who in r.students:
            _student(homes[who].parent, exchange, who, "submit")
        result = api.collect(EX)
        assert result["success"], result.get("log", "")
        sub = course / "submitted"
        (sub / "fifo" / EX / FILE).unlink()
        os.mkfifo(sub / "fifo" / EX / FILE)
        for name in (FILE, NB):
            (sub / "linker" / EX / name).unlink()
            (sub / "linker" / EX / name).symlink_to(sub / "sol01" / EX / name)
        yield {"root": root, "course": course, "exchange": exchange, "api": api, "homes": homes,
               "runtime": runtime, "setup_seconds": time.monotonic() - t0}


def _gradebook(course: Path, students: list[str]) -> dict[str, dict[str, float | None]]:
    """{student: {grade id: autograde score}} as nbgrader's gradebook holds it."""
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        return {s: {g.name: g.auto_score for g in gb.find_submission_notebook(EX, EX, s).grades}
                for s in students}


def _sheet(course: Path) -> dict[str, tuple[float, float]]:
    """{student: (score, max score)} from ``nbgrader export`` (the sheet an instructor hands on)."""
    out = course / "grades.csv"
    out.unlink(missing_ok=True)
    proc = subprocess.run([sys.executable, "-m", "nbgrader", "export", f"--CourseDirectory.root={course}",
                           f"--CsvExportPlugin.to={out}"], cwd=course, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(out, newline="") as f:
        return {r["student_id"]: (float(r["score"]), float(r["max_score"])) for r in csv.DictReader(f)
                if r["assignment"] == EX}


@pytest.fixture(scope="module")
def graded(klass: dict, roster: Roster, request: pytest.FixtureRequest) -> dict:
    from tklab.grading.sandbox import grading_problem

    course = klass["course"]
    out = io.StringIO()
    unsandboxed = ["--allow-unsandboxed"] if grading_problem() else []
    spans: dict[str, list[tuple[float, float]]] = {}

    def timed(name: str, step):  # the benchmark note's phases: the checks, nbgrader's runs of the notebooks
        def run(*args, **kwargs):
            t = time.monotonic()
            try:
                return step(*args, **kwargs)
            finally:
                spans.setdefault(name, []).append((t, time.monotonic()))
        return run

    def took(name: str) -> float:  # the wall time of a phase whose calls overlap (nbgrader's shares run at once)
        total, end = 0.0, float("-inf")
        for a, b in sorted(spans.get(name, [])):
            total += max(0.0, b - max(a, end))
            end = max(end, b)
        return total

    t0 = time.monotonic()
    with pytest.MonkeyPatch.context() as mp, redirect_stdout(out):
        mp.setenv("PATH", os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
        mp.setenv("JUPYTER_RUNTIME_DIR", str(klass["runtime"]))
        mp.setattr(nbgrade, "compute_verdicts", timed("checks", nbgrade.compute_verdicts))
        mp.setattr(nbgrade, "run_nbgrader_autograde", timed("nbgrader", nbgrade.run_nbgrader_autograde))
        status = nbgrade.main(["autograde", EX, "--course", str(course), "--timeout", str(CHECK_SECONDS), *unsandboxed,
                               f"--Execute.timeout={CELL_SECONDS}", f"--Execute.iopub_timeout={CELL_SECONDS}"])
    seconds = time.monotonic() - t0
    ended = time.monotonic()
    book, sheet = _gradebook(course, roster.students), _sheet(course)
    t1 = time.monotonic()
    result = klass["api"].generate_feedback(EX)
    feedback_seconds = time.monotonic() - t1
    load = os.getloadavg()
    note = (f"\n[class load] {len(roster.students)} students on {os.cpu_count()} cores (load average {load[0]:.1f}, "
            f"{load[1]:.1f}, {load[2]:.1f}): setup (release, fetch, edit, submit, collect) "
            f"{klass['setup_seconds']:.1f} s, tklab nbgrade autograde {seconds:.1f} s (the checks "
            f"{took('checks'):.1f} s, nbgrader running the notebooks {took('nbgrader'):.1f} s in "
            f"{len(spans.get('nbgrader', []))} process(es): "
            f"{', '.join(f'{b - a:.1f} s' for a, b in spans.get('nbgrader', []))}), "
            f"generate_feedback {feedback_seconds:.1f} s")
    print(f"{note}\n{out.getvalue()}", file=sys.stderr)  # (shown with the test's output when it fails)
    with request.config.pluginmanager.getplugin("capturemanager").global_and_fixture_disabled():
        print(note, file=sys.stderr)  # the benchmark note, shown when it passes too
    return {"status": status, "out": out.getvalue(), "seconds": seconds, "ended": ended, "book": book,
            "sheet": sheet, "feedback": result}


# -- what each attempt deserves ---------------------------------------------------------------------------------------

def _deserves(kind: str, cells: list[tuple[str, nbgrade.Item, float]]) -> dict[str, float]:
    """{grade id: points} an attempt of this kind must get, from what the attempt is: the solution and a benign variant
    pass every check; the untouched exercise compiles and fails the static check its spec names (``untouched``) and
    its output; a planted mistake compiles, still writes C (asserted of each below), and its run must catch it; a
    refused file earns nothing."""
    untouched_fails = specs.get(EX).untouched[0]
    out = {}
    for grade_id, item, points in cells:
        ok = {"solution": True, "benign": True, "refused": False,
              "untouched": item.kind == "compiles" or (item.kind == "static" and item.static_name != untouched_fails),
              "mistake": item.kind in ("compiles", "static")}[kind]
        out[grade_id] = points if ok else 0.0
    return out


@pytest.fixture(scope="module")
def cells(klass: dict) -> list[tuple[str, nbgrade.Item, float]]:
    return nbgrade.graded_cells(klass["course"] / "source" / EX / NB)[1]


def test_the_class_is_a_spread_of_attempts(roster: Roster):
    students = roster.students
    kinds = [roster.kind(s) for s in students]
    assert len(set(students)) == len(students) and set(roster.hostile) == set(HOSTILE)
    assert {"solution", "untouched", "mistake", "benign", "refused"} <= set(kinds)
    if len(students) == 40:  # the full class: every planted mistake and benign variant of the suite
        assert {f"m_{m.name}" for m in _SUITE} <= set(roster.ordinary) and kinds.count("mistake") >= 4
    else:
        assert len(students) == 13
    for who, (kind, text) in roster.ordinary.items():  # a planted mistake keeps writing C: the static check passes
        if kind == "mistake":
            assert text != SOLUTION and re.search(r"\bC\[[^\]]+\]\s*\+?=", text), who


def test_every_ordinary_student_is_graded_with_the_score_their_attempt_deserves(roster, graded, cells):
    assert graded["status"] == 0, graded["out"][-4000:]
    book, students, kind = graded["book"], roster.students, roster.kind
    wrong = {s: (book[s], _deserves(kind(s), cells)) for s in students if book[s] != _deserves(kind(s), cells)}
    assert not wrong, json.dumps(wrong, indent=1) + "\n" + graded["out"][-4000:]
    most = sum(p for _, _, p in cells)
    assert graded["sheet"] == {s: (sum(_deserves(kind(s), cells).values()), most) for s in students}


def _ran(course: Path, who: str, *, graded_only: bool = False) -> str:
    """The outputs of a student's notebook as nbgrader ran it (its autograded copy); of its graded cells only, one
    line each, with ``graded_only``."""
    import nbformat
    from nbgrader import utils as nbutils

    nb = nbformat.read(course / "autograded" / who / EX / NB, as_version=4)
    if graded_only:
        return "\n".join(json.dumps(c.outputs, ensure_ascii=False) for c in nb.cells if nbutils.is_grade(c))
    return json.dumps([c.get("outputs") for c in nb.cells if c.cell_type == "code"], ensure_ascii=False)


def test_the_tampering_cell_changes_no_score_and_is_named(klass, graded):
    assert "trust me" in _ran(klass["course"], "mallory")
    assert f"mallory: {EX}-correct: the executed notebook scored 5, the check outside it 0" in graded["out"]


def test_a_daemon_and_the_cells_hostile_processes_are_gone_and_bounded(roster, klass, graded, cells):
    course = klass["course"]
    time.sleep(max(0.0, graded["ended"] + 5 - time.monotonic()))  # the daemon acts 2 s after her notebook
    left = {t: _alive(t) for t in (roster.daemon_token, roster.fork_token, roster.sleep_token, str(klass["runtime"]))}
    for pids in left.values():
        for pid in pids:
            os.kill(pid, 9)
    assert not any(left.values()), left
    assert not (course / "pwned-by-trudy").exists()
    from tklab.grading.sandbox import Limits, limits_for

    forks = _ran(course, "forker")
    if limits_for(Limits()).processes:  # the kernel is a user of its own here, so its processes are counted
        assert "FORKS REFUSED after" in forks, forks[-2000:]
        assert int(forks.split("FORKS REFUSED after")[1].split()[0]) < FORK_MOST
    hog = _ran(course, "hog")
    assert "HOG REFUSED at" in hog, hog[-2000:]
    assert int(hog.split("HOG REFUSED at")[1].split()[0]) < HOG_MOST_MIB
    sleeper = _ran(course, "sleeper")
    assert "SLEEPING" in sleeper and "KeyboardInterrupt" in sleeper, sleeper[-2000:]  # interrupted at the limit
    graded_cells = _ran(course, "sleeper", graded_only=True).splitlines()  # ... and the cells after it ran
    assert len(graded_cells) == len(cells) and all("✔" in c for c in graded_cells), graded_cells


def test_an_output_flood_is_cut_short(klass, graded):
    ran = klass["course"] / "autograded" / "flood" / EX / NB
    html = klass["course"] / "feedback" / "flood" / EX / f"{EX}.html"
    assert ran.stat().st_size < 2 << 20 and html.stat().st_size < 3 << 20, (ran.stat().st_size, html.stat().st_size)
    assert "output cut by the grader" in _ran(klass["course"], "flood")


def test_a_fifo_a_link_and_a_broken_notebook_are_refused_by_name(klass, graded):
    out = graded["out"]
    assert re.search(r"^fifo: 0 / \S+ .*is a FIFO", out, re.M), out[-3000:]
    assert re.search(r"^linker: 0 / \S+ .*is a link", out, re.M), out[-3000:]
    assert re.search(r"badjson: .*not a notebook", out), out[-3000:]


def test_nothing_of_one_student_appears_in_anothers_output(roster, klass, graded):
    assert graded["feedback"]["success"], graded["feedback"].get("log", "")[-3000:]
    course, students, secret = klass["course"], roster.students, roster.secret
    own_seen = 0
    for who in students:
        texts = []
        for f in (course / "autograded" / who / EX / NB, course / "feedback" / who / EX / f"{EX}.html"):
            if f.exists():
                texts.append(f.read_text(errors="replace"))
        text = "\n".join(texts)
        others = [s for s in students if s != who and secret[s] in text]
        assert not others, f"{who}'s notebook or feedback holds the secret of {others}"
        own_seen += secret[who] in text
    assert own_seen >= len(students) - 3  # (each notebook holds its own: the search finds what is there)
    printed = "".join(o.get("text", "") for o in json.loads(_ran(course, "eve"))[0])  # her cell's output
    eve = [line for line in printed.splitlines() if line.startswith(("READ", "DENIED", "git:", "eve looked"))]
    assert eve[-1] == "eve looked" and [w.split()[0] for w in eve[:3]] == ["DENIED"] * 3, eve
    assert eve[3].startswith("git:") and not eve[3].startswith("git: 0"), eve


def test_the_gradebook_and_the_sheet_are_unchanged_afterwards(roster, klass, graded):
    time.sleep(max(0.0, graded["ended"] + 5 - time.monotonic()))
    assert _gradebook(klass["course"], roster.students) == graded["book"]
    assert _sheet(klass["course"]) == graded["sheet"]
