"""An nbgrader round trip with the exercises as assignments, verdicts computed outside the notebooks.

The instructor writes the assignment (``tklab nbgrade assignments``), generates and releases it with
nbgrader; three students fetch it through nbgrader's exchange, work and submit: alice hands in the
solution, bob the untouched exercise, and mallory the untouched exercise with a cell added to her
notebook that makes every check cell print a pass. The instructor collects, grades with ``tklab nbgrade
autograde`` (the check outside the notebook, then ``nbgrader autograde``, then the points into the
gradebook) and generates feedback. Scores are read back from nbgrader's gradebook, and nbgrader's own
``determine_grade`` scores the cells of the notebooks that were run.

Exercise ch01 (numba) runs here as its PTX (numba-cuda compiles it), interpreted on the CPU: real verdicts on a CPU.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

nbgrader = pytest.importorskip("nbgrader", reason="nbgrader is in the dev extra (pip install -e '.[dev]')")

from nbgrader import utils as nbutils  # noqa: E402
from nbgrader.api import Gradebook  # noqa: E402
from nbgrader.apps import NbGraderAPI  # noqa: E402
from nbgrader.auth import Authenticator  # noqa: E402
from nbgrader.coursedir import CourseDirectory  # noqa: E402
from nbgrader.exchange.default import ExchangeFetchAssignment, ExchangeSubmit  # noqa: E402
from traitlets.config import Config  # noqa: E402

from tklab import nbgrade, specs  # noqa: E402
from tklab.paths import solution  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
EX = "ch01_naive_matmul"
FILE = "ch01_naive_matmul.py"
TAMPER = ("# added by the student: every check cell now prints a pass\n"
          "import tklab.grading.nbgrade as _n\n_n.verdict = lambda exercise, check: print('✔ trust me')\n")
#: In alice's file only: what a classmate must never see.
SECRET = f"# alice-{uuid.uuid4().hex}"
#: A unique sleep-like duration in trudy's daemon's command line, to find it.
TOKEN = f"4099{uuid.uuid4().int % 10**6}"
#: trudy's added cells (issue 39): a daemon that waits for autograde to finish, then rewrites the gradebook; and a
#: cell that prints classmates' submissions into her notebook, which feedback hands back to her.
DAEMON = """\
import os, sqlite3, sys, time
course, ex, token, who = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
done = os.path.join(course, "autograded", who, ex, ex + ".ipynb")
end = time.time() + 120
while time.time() < end and not os.path.exists(done):
    time.sleep(0.2)
time.sleep(2)  # autograde has written her notebook and goes on to the gradebook: let it finish, then
db = sqlite3.connect(os.path.join(course, "gradebook.db"))
db.execute("UPDATE grade SET auto_score = 100")
db.commit()
open(os.path.join(course, "pwned-by-trudy"), "w").write("rewrote the gradebook")
"""


def _trudy_cells(course: Path, exchange: Path, token: str = TOKEN, who: str = "trudy") -> list[str]:
    spawn = (f"import os, sys\nargs = [sys.executable, '-c', {DAEMON!r}, {str(course)!r}, {EX!r}, {token!r}, "
             f"{who!r}]\n"
             "if os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        os.execv(sys.executable, args)\n"
             "    os._exit(0)\nos.wait()\nprint('a daemon is waiting for autograde to finish')\n")
    peek = (f"import glob, os\nfor pattern in ({str(course / 'submitted' / '*' / EX / FILE)!r}, "
            f"{str(exchange / '*' / 'inbound' / '*' / FILE)!r}, {str(course / 'tklab_verdicts' / '*' / '*')!r}):\n"
            "    for f in glob.glob(pattern):\n        print(f, open(f).read())\n"
            "print('looked at', os.getcwd(), sorted(os.listdir('.')))\n")
    return [spawn, peek]


def _config(course: Path, exchange: Path, **extra: str) -> Config:
    cfg = Config()
    cfg.CourseDirectory.root = str(course)
    cfg.CourseDirectory.course_id = "tklab"
    cfg.Exchange.root = str(exchange)
    cfg.Exchange.cache = str(exchange.parent / "cache")
    for key, value in extra.items():
        section, name = key.split("__")
        cfg[section][name] = value
    return cfg


def _api(course: Path, exchange: Path) -> NbGraderAPI:
    cfg = _config(course, exchange)
    return NbGraderAPI(coursedir=CourseDirectory(config=cfg), config=cfg)


def _student(home: Path, exchange: Path, who: str, action: str) -> None:
    """What a student's Assignment List does: fetch into, or submit from, their home (nbgrader's exchange)."""
    cfg = _config(home, exchange, Exchange__assignment_dir=str(home))
    coursedir = CourseDirectory(config=cfg, assignment_id=EX, student_id=who)
    cls = {"fetch": ExchangeFetchAssignment, "submit": ExchangeSubmit}[action]
    cls(coursedir=coursedir, authenticator=Authenticator(config=cfg), config=cfg).start()


def _run_notebook(path: Path) -> Any:
    """Run a notebook in its folder (as a student does, or nbgrader validate), and return it with outputs."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=300, allow_errors=True, resources={"metadata": {"path": str(path.parent)}}).execute()
    return nb


def _scores(nb: Any) -> dict[str, float]:
    """nbgrader's own scoring of each graded cell of a run notebook."""
    return {c.metadata.nbgrader["grade_id"]: nbutils.determine_grade(c)[0] for c in nb.cells if nbutils.is_grade(c)}


@pytest.fixture(scope="module")
def course(tmp_path_factory) -> Iterator[dict]:
    root = tmp_path_factory.mktemp("nbgrade")
    course, exchange = root / "course", root / "exchange"
    course.mkdir()
    exchange.mkdir()
    # nbgrader runs `alembic` from PATH: this Python's, as in a JupyterHub image
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PATH", os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
        yield _course(root, course, exchange)


def _released(root: Path, course: Path, exchange: Path) -> NbGraderAPI:
    """A course folder with ch01 written, generated and released through the exchange; returns nbgrader's API."""
    (course / "nbgrader_config.py").write_text(
        f"c = get_config()\nc.CourseDirectory.course_id = 'tklab'\nc.Exchange.root = {str(exchange)!r}\n"
        f"c.Exchange.cache = {str(root / 'cache')!r}\n")
    assert nbgrade.main(["assignments", "--course", str(course), "--exercises", "ch01"]) == 0
    api = _api(course, exchange)
    for step in (api.generate_assignment, api.release_assignment):
        result = step(EX)
        assert result["success"], result.get("log", "") + result.get("error", "")
    return api


def _course(root: Path, course: Path, exchange: Path) -> dict:
    api = _released(root, course, exchange)
    homes = {}
    for who in ("alice", "bob", "mallory", "trudy"):
        home = root / "home" / who
        home.mkdir(parents=True)
        _student(home, exchange, who, "fetch")
        homes[who] = home / EX
    (homes["alice"] / FILE).write_text(solution(FILE).read_text() + f"\n{SECRET}\n")
    import nbformat

    nb = nbformat.read(homes["mallory"] / f"{EX}.ipynb", as_version=4)
    nb.cells.insert(1, nbformat.v4.new_code_cell(TAMPER))
    nbformat.write(nb, homes["mallory"] / f"{EX}.ipynb")
    nb = nbformat.read(homes["trudy"] / f"{EX}.ipynb", as_version=4)
    for i, code in enumerate(_trudy_cells(course, exchange)):
        nb.cells.insert(1 + i, nbformat.v4.new_code_cell(code))
    nbformat.write(nb, homes["trudy"] / f"{EX}.ipynb")
    # alice runs her notebook before submitting (no verdicts here: each cell's check runs beside it)
    validated = _run_notebook(homes["alice"] / f"{EX}.ipynb")
    for who in homes:
        _student(homes[who].parent, exchange, who, "submit")
    result = api.collect(EX)
    assert result["success"], result.get("log", "")
    return {"course": course, "exchange": exchange, "homes": homes, "api": api, "validated": validated}


@pytest.fixture(scope="module")
def autograded(course: dict) -> dict:
    import io
    from contextlib import redirect_stdout

    from tklab.grading.sandbox import grading_problem

    out = io.StringIO()
    unsandboxed = ["--allow-unsandboxed"] if grading_problem() else []  # a test machine without bubblewrap
    with redirect_stdout(out):
        # each check's limit: far above what a check of chapter 01 takes, for a loaded machine (not what this tests)
        status = nbgrade.main(["autograde", EX, "--course", str(course["course"]), "--timeout", "120", *unsandboxed])
    return {"status": status, "out": out.getvalue()}


def test_autograde_refuses_where_learner_code_could_reach_the_grader(course, monkeypatch, capsys):
    """As `grade` does: without a sandbox (or as root with no user to drop to) nothing is run or scored."""
    from tklab.grading import sandbox

    monkeypatch.setattr(sandbox, "grading_problem", lambda gpu=False: "no bubblewrap here (test)")
    called = []
    monkeypatch.setattr(nbgrade, "autograde", lambda *a, **k: called.append(a) or 0)
    assert nbgrade.main(["autograde", EX, "--course", str(course["course"])]) == 2
    assert "refusing to grade: no bubblewrap here (test)" in capsys.readouterr().err and not called
    assert nbgrade.main(["autograde", EX, "--course", str(course["course"]), "--allow-unsandboxed"]) == 0
    assert len(called) == 1


def test_the_assignment_is_the_exercise_with_one_autograded_cell_per_check(course):
    release = course["course"] / "release" / EX
    assert sorted(p.name for p in release.iterdir()) == sorted([f"{EX}.ipynb", FILE])
    assert (release / FILE).read_text() == (ROOT / "exercises" / FILE).read_text()  # the learner's starting file
    import nbformat

    nb = nbformat.read(release / f"{EX}.ipynb", as_version=4)
    graded = {c.metadata.nbgrader["grade_id"]: c.metadata.nbgrader["points"] for c in nb.cells if nbutils.is_grade(c)}
    statics = [nbgrade._static_label(c) for c in specs.get(EX).static]
    assert graded == {f"{EX}-compiles": 1.0, **{f"{EX}-static-{nbgrade._slug(s)}": 1.0 for s in statics},
                      f"{EX}-correct": 5.0}
    assert all(nbutils.is_locked(c) for c in nb.cells)  # the student edits the file, not these cells


def test_a_student_running_the_notebook_gets_the_checks(course):
    scores = _scores(course["validated"])
    assert scores == {f"{EX}-compiles": 1.0, f"{EX}-static-writes-its-output": 1.0, f"{EX}-correct": 5.0}, scores
    text = json.dumps([c.get("outputs") for c in course["validated"].cells])
    assert "correct on" in text and "fresh random input" in text


def test_autograde_scores_come_from_the_check_outside_the_notebook(course, autograded):
    assert autograded["status"] == 0, autograded["out"]
    with Gradebook(f"sqlite:///{course['course'] / 'gradebook.db'}") as gb:
        totals = {s: (gb.find_submission(EX, s).score, gb.find_submission(EX, s).max_score)
                  for s in ("alice", "bob", "mallory")}
        mallory = {g.name: g.auto_score for g in gb.find_submission_notebook(EX, EX, "mallory").grades}
    assert totals == {"alice": (7.0, 7.0), "bob": (1.0, 7.0), "mallory": (1.0, 7.0)}, totals
    assert mallory[f"{EX}-correct"] == 0.0 and mallory[f"{EX}-compiles"] == 1.0
    # ... although mallory's notebook, as nbgrader ran it, claims every check passed:
    import nbformat

    ran = nbformat.read(course["course"] / "autograded" / "mallory" / EX / f"{EX}.ipynb", as_version=4)
    assert set(_scores(ran).values()) == {1.0, 5.0} and "trust me" in json.dumps([c.get("outputs") for c in ran.cells])
    assert f"mallory: {EX}-correct: the executed notebook scored 5, the check outside it 0" in autograded["out"]
    assert "alice:" in autograded["out"] and "alice: " + EX not in autograded["out"]  # alice's cells agreed
    bob_ran = nbformat.read(course["course"] / "autograded" / "bob" / EX / f"{EX}.ipynb", as_version=4)
    assert _scores(bob_ran)[f"{EX}-correct"] == 0.0  # an honest notebook shows the outside verdict


def test_verdicts_are_kept_outside_every_submission(course, autograded):
    kept = list((course["course"] / nbgrade.VERDICTS_DIR / EX).glob("*.json"))
    assert len(kept) == 2  # bob and mallory handed in the same (untouched) file: one verdict for that content
    for record in kept:
        d = json.loads(record.read_text())
        assert d["result"]["established"] == "cpu-emulation" and record.stem == d["sha256"]


def test_feedback_shows_the_gradebooks_scores(course, autograded):
    result = course["api"].generate_feedback(EX)
    assert result["success"], result.get("log", "")
    html = {s: (course["course"] / "feedback" / s / EX / f"{EX}.html").read_text() for s in ("alice", "mallory")}
    assert "Score: 7.0 / 7.0" in html["alice"]
    # mallory's feedback has her notebook's outputs (her "✔ trust me"), but the gradebook's scores beside them
    assert "Score: 1.0 / 7.0" in html["mallory"] and "Score: 0.0 / 5.0" in html["mallory"]


def test_assignments_never_overwrite_an_instructors_edit(tmp_path, capsys):
    course = tmp_path / "c"
    assert nbgrade.main(["assignments", "--course", str(course), "--exercises", "ch01"]) == 0
    assert nbgrade.main(["assignments", "--course", str(course), "--exercises", "ch01"]) == 0  # unchanged: fine
    edited = course / "source" / EX / FILE
    edited.write_text(edited.read_text() + "# my note\n")
    assert nbgrade.main(["assignments", "--course", str(course), "--exercises", "ch01", "--points-correct", "9"]) == 2
    err = capsys.readouterr().err
    assert "exist and differ" in err and str(edited) in err and edited.read_text().endswith("# my note\n")


@pytest.mark.nvrtc  # the cells other than "correct" are NVRTC's static checks
def test_a_check_that_could_not_run_earns_nothing_and_says_not_verified(tmp_path):
    from tklab.grading.check import check

    f = tmp_path / "ch02_smem_tiling.cu"
    shutil.copy(ROOT / "solutions" / "ch02_smem_tiling" / "ch02_smem_tiling.cu", f)
    result = check("ch02_smem_tiling", f, run=False).to_dict()  # static checks only: correctness unknown
    spec = specs.get("ch02_smem_tiling")
    cells = [(f"x-{it.slug}", it, p) for it, p in nbgrade.items(spec)]
    scored = nbgrade.score(result, spec, cells)
    assert scored["x-correct"]["points"] == 0.0 and scored["x-correct"]["passed"] is None
    assert "NOT VERIFIED" in scored["x-correct"]["detail"]
    assert all(s["passed"] for k, s in scored.items() if k != "x-correct")


def _alive(token: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if token.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                    found.append(int(entry))
            except OSError:
                pass
    return found


def test_a_students_notebook_leaves_nothing_running_and_sees_no_classmate(course, autograded):
    """trudy's notebook started a daemon that waits for autograde to finish and then rewrites the gradebook, and a
    cell that prints classmates' submissions (issue 39: both worked when nbgrader ran notebooks as the grader). Her
    kernel runs in the sandbox: the daemon is gone when autograde returns, the gradebook keeps the check's points,
    and neither her executed notebook nor her feedback holds anything of alice's."""
    import nbformat

    assert autograded["status"] == 0, autograded["out"]
    left = _alive(TOKEN)
    deadline = time.monotonic() + 6
    while left and time.monotonic() < deadline:  # (an escaped daemon acts 2 s after her notebook is written)
        time.sleep(0.5)
        left = _alive(TOKEN)
    for pid in left:
        os.kill(pid, 9)
    assert not left, "trudy's daemon outlived autograde"
    assert not (course["course"] / "pwned-by-trudy").exists()
    with Gradebook(f"sqlite:///{course['course'] / 'gradebook.db'}") as gb:
        trudy = gb.find_submission(EX, "trudy")
        assert (trudy.score, trudy.max_score) == (1.0, 7.0)
        assert gb.find_submission(EX, "alice").score == 7.0
    ran = nbformat.read(course["course"] / "autograded" / "trudy" / EX / f"{EX}.ipynb", as_version=4)
    outputs = json.dumps([c.get("outputs") for c in ran.cells])
    assert "a daemon is waiting" in outputs and "looked at" in outputs  # her cells ran
    assert SECRET not in outputs and "alice" not in outputs, outputs[:2000]
    result = course["api"].generate_feedback(EX, "trudy")
    assert result["success"], result.get("log", "")
    html = (course["course"] / "feedback" / "trudy" / EX / f"{EX}.html").read_text()
    assert SECRET not in html and "Score: 1.0 / 7.0" in html
