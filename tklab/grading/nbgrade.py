"""The exercises as nbgrader assignments, with every verdict computed where the learner's code cannot reach it.

Instructors who run nbgrader keep their workflow (``generate_assignment``, release, students fetch and
submit, ``collect``, the formgrader, ``generate_feedback``); tklab adds two commands:

* ``python -m tklab nbgrade assignments --course DIR [--exercises ch02 ...]`` writes, for each exercise,
  ``DIR/source/<exercise id>/`` with the learner's exercise file (as ``python -m tklab exercises`` makes
  it) and a notebook whose cells are read-only: what to do, the check's full report, and one autograded
  test cell per check of ``tklab.check`` (it compiles, each static check, the output is right, and, when
  given points, the speed target), each worth its points (``--points-*``).
* ``python -m tklab nbgrade collect <exercise id> --course DIR`` is ``nbgrader collect`` that does not follow
  what students left in the exchange's inbound folder: a link (to a classmate's submission, say), a FIFO or a device
  there is left out and named with its student (``nbcollect``; exit 1), everything else is collected as nbgrader does.
* ``python -m tklab nbgrade autograde <exercise id> --course DIR`` grades the submissions. First, for each student,
  the check runs on the submitted exercise file in a separate process, the learner's kernel in
  ``tklab.grading.sandbox`` (exactly as ``tklab grade`` does), and the points of every check are computed from its
  result and kept in ``DIR/tklab_verdicts/``, outside every submission (the submitted file is read by ``intake``, a
  child with limits; ``--jobs`` checks at once). Then ``nbgrader autograde`` (``--jobs`` processes, each a share of
  the class) runs on copies ``intake`` made of each submission's notebook, exercise file and nbgrader's two files
  (``stage_submissions``: nbgrader never opens what a student left in ``submitted/``; a notebook refused or not JSON
  is replaced by the released one), told not to overwrite the learner's file with the released copy and to keep at
  most 64 KiB of a cell's output (``nbkernel.BoundedExecute``), every notebook executed by a kernel started in the
  sandbox a check's run gets (``nbkernel``: it sees a copy of that student's file and the verdict kept for it, nothing
  of the course, the exchange or the grader's, and every process it started dies with it); its test cells show the
  verdicts kept for the submitted file. Last, the score of every tklab cell in the gradebook is set to the points
  computed outside the notebook, and any cell whose score in the executed notebook differed is named (a notebook cell
  that tampered with the result shows up here). A notebook nbgrader could not run (its kernel died) costs only that
  student's autograded notebook: everyone's points are written, and the student is named (exit 1).

Why outside: ``nbgrader autograde`` runs the submitted notebook in one kernel, cells the student added
included, so anything computed in that kernel can be changed by the student's code (an exception hook
that swallows failures makes every test cell "pass"). Here the student's work is the exercise file, which
the kernel never imports or runs; the check that judges it runs in its own process, the learner's kernel
sandboxed beneath it, and the gradebook gets the points that process's verdict gives. What remains (said
in docs/CLASSROOM.md): the feedback notebook's cell outputs come from the student's kernel, so a tampered
notebook can show "✔" beside a score of 0 (the score is right, and ``autograde`` names the cell); and
plain ``nbgrader autograde`` (without this command) runs notebooks in kernels of the grader's own user and
computes the verdicts there, which is only as trustworthy as that kernel.

Each test cell calls ``verdict(exercise, check)``: it prints ``✔ …`` when the check passed (full points) and
``✘ …`` on stderr when it failed or could not be established (nbgrader gives a cell with stderr output
0 points). Where ``TKLAB_NBGRADE_VERDICTS`` is set (by ``autograde``), the verdict is the one kept for this
exact file (by its SHA-256); otherwise (a learner running the notebook, ``nbgrader validate``) the cell
runs ``python -m tklab check`` on the file in a separate process, once per version of the file.

Public API: ``Points``, ``Item``, ``items(spec, points)``, ``judge(result, item)``, ``score(result, ...)``,
``source_notebook(spec, points)``, ``write_assignments(course, ids, points)``, ``verdict(exercise, check)``,
``report(exercise)``, ``compute_verdicts``, ``stage_submissions``, ``apply_scores``, ``autograde``, ``main(argv)``.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import specs

#: Set by ``autograde`` for nbgrader's kernels: the folder of verdicts computed outside the notebooks.
VERDICTS_ENV = "TKLAB_NBGRADE_VERDICTS"
#: Where ``autograde`` keeps the verdicts, inside the course folder (never inside a submission).
VERDICTS_DIR = "tklab_verdicts"
_SCHEMA = 3  # nbgrader's cell metadata schema


class NbgradeError(ValueError):
    """A course folder or a request that cannot be worked on (the message says what to do)."""


# ---- what is graded, and how many points ---------------------------------------------------------

@dataclass(frozen=True)
class Points:
    """Points per check: compiling, each static check, a right output, the speed target (0: no cell)."""

    compiles: float = 1.0
    static: float = 1.0
    correct: float = 5.0
    speed: float = 0.0


@dataclass(frozen=True)
class Item:
    """One graded check of an exercise: its cell's grade id is ``<exercise>-<slug>``."""

    slug: str
    title: str
    kind: str  # compiles, static, correct, speed
    static_name: str = ""


def _static_label(chk: Any) -> str:
    return getattr(chk, "name", "") or f"SASS has {chk.what}"


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def items(spec: specs.Exercise, points: Points = Points()) -> list[tuple[Item, float]]:
    """The checks of an exercise that earn points, in the order the check reports them."""
    out = [(Item("compiles", "it compiles", "compiles"), points.compiles)]
    for chk in spec.static:
        label = _static_label(chk)
        out.append((Item("static-" + _slug(label), label, "static", label), points.static))
    out.append((Item("correct", "its output is right (run on fresh random inputs, compared by the checker)",
                     "correct"), points.correct))
    if spec.bench is not None and spec.bench.target is not None and points.speed > 0:
        out.append((Item("speed", f"it meets the speed target ({spec.bench.target:.2f}× {spec.bench.baseline_name})",
                         "speed"), points.speed))
    return [(it, p) for it, p in out if p > 0]


def judge(result: dict[str, Any], item: Item) -> tuple[bool | None, str]:
    """(passed, why) of one check in a ``CheckResult.to_dict()`` (or a grader's crash record): True, False,
    or None when it could not be established here (no GPU: the output could not be run)."""
    summary = " ".join(str(result.get("summary", "")).split())
    if item.kind == "compiles":
        if result.get("compiled"):
            return True, f"for {result['arch']}: {result.get('resources', '')}" if result.get("arch") else "yes"
        return False, summary or "it does not compile"
    if not result.get("compiled"):
        return False, f"not checked: {summary or 'the file does not compile'}"
    if item.kind == "static":
        for s in result.get("static", []):
            if s.get("name") == item.static_name:
                return bool(s.get("ok")), str(s.get("detail", ""))
        first_bad = next((s for s in result.get("static", []) if not s.get("ok")), None)
        if first_bad is not None:
            return False, f"not checked: {first_bad['name']}: {first_bad.get('detail', '')}"
        return False, "not checked (this check did not report it)"
    status = result.get("run_status")
    established = result.get("established", "not-established")
    if item.kind == "correct":
        if status == "ok" and established != "not-established":
            return True, str(result.get("run_message") or "correct")
        if status in ("wrong", "error", "crashed", "timeout"):
            return False, summary or str(result.get("run_message", ""))
        return None, ("NOT VERIFIED: " + (str(result.get("run_message")) or "nothing could run it here") +
                      "; grade on a machine with a GPU (or with a C++ compiler for the CPU emulation)")
    speed = result.get("speed") or {}
    ratio, target = speed.get("ratio"), speed.get("target")
    if isinstance(ratio, (int, float)) and isinstance(target, (int, float)):
        how = f"{ratio:.2f}× {speed.get('baseline', 'the library')} (target {target:.2f}×)"
        return (ratio >= target), how
    return None, "NOT VERIFIED: its speed was not measured here (it needs a GPU)"


def score(result: dict[str, Any], spec: specs.Exercise, cells: Sequence[tuple[str, Item, float]]
          ) -> dict[str, dict[str, Any]]:
    """{grade id: {points, max, passed, detail}} for the graded cells ``cells`` (grade id, item, points)."""
    out = {}
    for grade_id, item, max_points in cells:
        passed, detail = judge(result, item)
        out[grade_id] = {"points": max_points if passed else 0.0, "max": max_points, "passed": passed,
                         "detail": detail, "title": item.title}
    return out


# ---- the assignment ------------------------------------------------------------------------------

def exercise_text(spec: specs.Exercise) -> str:
    """The learner's starting file, generated from the solution (never the instructor's edited copy)."""
    from .exercises import stub

    return stub(spec)


def _meta(grade_id: str, *, grade: bool = False, points: float = 0.0) -> dict[str, Any]:
    m: dict[str, Any] = {"grade": grade, "grade_id": grade_id, "locked": True, "schema_version": _SCHEMA,
                         "solution": False, "task": False}
    if grade:
        m["points"] = points
    return m


def source_notebook(spec: specs.Exercise, points: Points = Points()) -> Any:
    """The instructor's (source) notebook of one exercise: read-only instructions, a report cell, one
    autograded cell per check. Returns an ``nbformat`` notebook."""
    import nbformat.v4 as nbf

    graded = items(spec, points)
    total = sum(p for _, p in graded)
    rows = "\n".join(f"| {it.title} | {p:g} |" for it, p in graded)
    ex = spec.id
    intro = (
        f"# {spec.title}\n\n"
        f"Your work is the file **`{spec.filename}`** in this folder (from chapter {spec.chapter or ex[2:4]} of the "
        f"workbook). Open it, fill in the TODOs and save it. Then run the cells below: the first shows the full "
        f"report of `tklab.check`; each of the others is one check, worth its points ({total:g} in all):\n\n"
        f"| check | points |\n|---|---|\n{rows}\n\n"
        "Submit the assignment when you are done. The grader runs the same check on the file you submitted, in a "
        "separate process, outside this notebook: the cells below show you what it will find, but it is the "
        "grader's own run that scores your work. Do not rename the file or the notebook, and keep the kernel's "
        "name the exercise gives.")
    nb = nbf.new_notebook()
    nb.metadata["kernelspec"] = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
    nb.metadata["language_info"] = {"name": "python"}
    nb.metadata["tklab"] = {"exercise": ex, "file": spec.filename}
    cells = [nbf.new_markdown_cell(intro, metadata={"nbgrader": _meta(f"{ex}-intro")}),
             nbf.new_code_cell(f"# The full report of the check on {spec.filename} (it runs once per version of "
                               f"the file)\nfrom tklab.grading.nbgrade import report\nreport({ex!r})",
                               metadata={"nbgrader": _meta(f"{ex}-report")})]
    for it, p in graded:
        cells.append(nbf.new_code_cell(
            f"# {p:g} point{'s' if p != 1 else ''}: {it.title}\nfrom tklab.grading.nbgrade import verdict\n"
            f"verdict({ex!r}, {it.slug!r})",
            metadata={"nbgrader": _meta(f"{ex}-{it.slug}", grade=True, points=p),
                      "tklab": {"exercise": ex, "item": it.slug}}))
    for cell in cells:  # stable ids: the same exercise and points always write the same notebook
        cell["id"] = cell.metadata["nbgrader"]["grade_id"][-64:]
    nb.cells = cells
    return nb


def write_assignments(course: Path, exercise_ids: Sequence[str], points: Points = Points()) -> list[Path]:
    """``course/source/<id>/`` for each exercise; an existing file that differs is never overwritten
    (``NbgradeError`` names it, and nothing is written)."""
    import nbformat

    planned: dict[Path, str] = {}
    for ex in exercise_ids:
        spec = specs.get(ex)
        folder = course / "source" / ex
        planned[folder / f"{ex}.ipynb"] = nbformat.writes(source_notebook(spec, points)) + "\n"
        planned[folder / spec.filename] = exercise_text(spec)
    clashes = [p for p, text in planned.items() if p.exists() and p.read_text() != text]
    if clashes:
        raise NbgradeError("these files exist and differ from what would be written (edited by hand?): "
                           + ", ".join(str(p) for p in clashes) + "; nothing was written: move them aside first")
    for p, text in planned.items():
        p.parent.mkdir(parents=True, exist_ok=True)
        if not p.exists():
            p.write_text(text)
    return sorted(planned)


def graded_cells(notebook: Path) -> tuple[str, list[tuple[str, Item, float]]]:
    """(exercise id, [(grade id, item, points)]) of a tklab source notebook, read from its cells."""
    import nbformat

    nb = nbformat.read(notebook, as_version=4)
    ex = nb.metadata.get("tklab", {}).get("exercise")
    if not ex:
        raise NbgradeError(f"{notebook} is not a notebook written by `tklab nbgrade assignments`")
    known = {it.slug: it for it, _ in items(specs.get(ex), Points(speed=1.0))}
    cells = []
    for cell in nb.cells:
        meta, mine = cell.metadata.get("nbgrader", {}), cell.metadata.get("tklab", {})
        if meta.get("grade") and mine.get("item"):
            if mine["item"] not in known:
                raise NbgradeError(f"{notebook}: check {mine['item']!r} is not one of {ex}'s checks in this tklab "
                                   f"({', '.join(known)}); regenerate the assignment")
            cells.append((meta["grade_id"], known[mine["item"]], float(meta["points"])))
    return ex, cells


# ---- in the notebook ------------------------------------------------------------------------------

_memo: dict[tuple[str, str, bool], dict[str, Any]] = {}


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _result(exercise: str, *, bench: bool) -> tuple[dict[str, Any] | None, str]:
    """(check result, why not) for the exercise's file beside the notebook."""
    spec = specs.get(exercise)
    path = Path.cwd() / spec.filename
    if not path.is_file():
        return None, f"there is no {spec.filename} beside this notebook (it is your work: do not rename it)"
    sha = _sha256(path)
    kept = os.environ.get(VERDICTS_ENV)
    if kept:
        record = Path(kept) / exercise / f"{sha}.json"
        if not record.is_file():
            return None, (f"the grader computed no verdict for this {spec.filename} (SHA-256 {sha[:12]}…): it is not "
                          "the file that was submitted")
        return json.loads(record.read_text())["result"], ""
    key = (exercise, sha, bench)
    if key not in _memo:
        cmd = [sys.executable, "-m", "tklab.grading.check", "--json", "--exercise", exercise, str(path)]
        if not bench:
            cmd.append("--no-bench")
        proc = subprocess.run(cmd, capture_output=True, text=True)
        line = next((ln for ln in reversed(proc.stdout.splitlines()) if ln.startswith("{")), None)
        if line is None:
            tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            return None, f"the check did not run (exit {proc.returncode}): {tail}"
        _memo[key] = json.loads(line)
    return _memo[key], ""


def verdict(exercise: str, check: str) -> None:
    """One graded check, for a test cell: ``✔ …`` (full points), or ``✘ …`` on stderr (no points)."""
    it = next((it for it, _ in items(specs.get(exercise), Points(speed=1.0)) if it.slug == check), None)
    if it is None:
        print(f"✘ {check}: not a check of {exercise} in this version of tklab", file=sys.stderr)
        return
    result, why = _result(exercise, bench=it.kind == "speed")
    if result is None:
        print(f"✘ {it.title}: {why}", file=sys.stderr)
        return
    passed, detail = judge(result, it)
    if passed:
        print(f"✔ {it.title}: {detail}")
    else:  # nbgrader gives a test cell that wrote to stderr no points
        print(f"{'✘' if passed is False else '?'} {it.title}: {detail}", file=sys.stderr)


def report(exercise: str) -> Any:
    """The check's full report on the exercise file beside the notebook (a ``CheckResult``), or a line
    saying why there is none."""
    from .spec_kit import StaticResult
    from .verdict import CheckResult

    result, why = _result(exercise, bench=False)
    if result is None:
        print(why)
        return None
    fields = CheckResult.__dataclass_fields__
    res = CheckResult(**{k: v for k, v in result.items() if k in fields and k != "static"})
    res.static = [StaticResult(**s) for s in result.get("static", [])]
    return res


# ---- outside the notebooks: autograde ------------------------------------------------------------

def _submissions(course: Path, assignment: str, filename: str, students: Sequence[str] | None
                 ) -> dict[str, tuple[str, str]]:
    """{student: (path of ``filename`` relative to their submitted folder, or "", why it is not there)} for every
    submission of ``assignment``, read by ``intake`` (a child with limits: the submissions are the students')."""
    from . import intake

    base = course / "submitted"
    if not base.is_dir():
        raise NbgradeError(f"{base} does not exist: collect the submissions first (`nbgrader collect {assignment}`)")
    try:
        seen = intake.survey(base, [filename])
    except intake.IntakeError as e:
        raise NbgradeError(str(e)) from None
    found: dict[str, tuple[str, str]] = {name: ("", why) for name, why in seen.refused.items()}
    for name, folder in seen.folders.items():
        if assignment not in folder.dirs:
            continue
        rel = folder.found.get(filename, "")
        if rel and rel != f"{assignment}/{filename}":
            found[name] = ("", f"{filename} is not beside the notebook (found {rel})")
        elif not rel:
            found[name] = ("", folder.refused.get(filename) or f"no {filename} in the submission")
        else:
            found[name] = (rel, "")
    if students:
        unknown = [s for s in students if s not in found]
        if unknown:
            raise NbgradeError(f"no submission of {assignment} from {', '.join(unknown)} in {base}")
        found = {s: found[s] for s in students}
    if not found:
        raise NbgradeError(f"no submission of {assignment} in {base}")
    return dict(sorted(found.items()))


def compute_verdicts(course: Path, assignment: str, *, students: Sequence[str] | None = None,
                     timeout: float = 60.0, bench: bool = False, progress: bool = True, jobs: int = 1
                     ) -> dict[str, dict[str, Any]]:
    """Check each student's submitted exercise file outside any notebook; keep each verdict in
    ``course/tklab_verdicts/<exercise>/<sha256>.json``. Returns {student: {sha256, scores, summary}}.

    The file checked is a copy ``intake`` made (a regular file, no link followed) in a folder the grader owns.
    ``jobs`` checks run at once (each in its own process tree, sandbox and user, as one check alone); one at a time
    whenever the speed is measured, so no check's timing shares the machine with another's."""
    from concurrent.futures import ThreadPoolExecutor

    from .grade import _check_in_subprocess, _copied

    ex, cells = graded_cells(course / "source" / assignment / f"{assignment}.ipynb")
    spec = specs.get(ex)
    bench = bench or any(item.kind == "speed" for _, item, _ in cells)  # a speed cell needs the timing
    store = course / VERDICTS_DIR / ex
    store.mkdir(parents=True, exist_ok=True)
    submitted = course / "submitted"

    def one(student: str, rel: str, why: str) -> dict[str, Any]:
        result: dict[str, Any] = {"compiled": False, "passed": False, "summary": why}
        sha = ""
        with _copied(submitted, student, {ex: rel} if rel else {}) as (staged, copies, problems):
            path = copies.get(ex)
            if rel and path is None:
                result["summary"] = problems.get(ex, f"{spec.filename} could not be read")
            elif path is not None:
                if progress:
                    print(f"  {student}: checking {spec.filename} …", file=sys.stderr, flush=True)
                sha = _sha256(path)
                result = _check_in_subprocess(ex, path, timeout=timeout, run=True, bench=bench,
                                              hide=[course, staged], cwd=staged)
                record = store / f".{sha}.{threading.get_ident()}.tmp"  # two students may hand in the same file
                record.write_text(json.dumps({"exercise": ex, "sha256": sha, "student": student, "result": result},
                                             default=str) + "\n")
                os.replace(record, store / f"{sha}.json")
        return {"sha256": sha, "scores": score(result, spec, cells),
                "summary": " ".join(str(result.get("summary", "")).split())}

    todo = _submissions(course, assignment, spec.filename, students)
    with ThreadPoolExecutor(max_workers=1 if bench else max(1, jobs)) as pool:
        done = {student: pool.submit(one, student, rel, why) for student, (rel, why) in todo.items()}
        return {student: f.result() for student, f in done.items()}


def _exchange_folders(course: Path) -> list[Path]:
    """The exchange's folders (every student's inbound submissions, the released files) and nbgrader's cache, as
    nbgrader's configuration names them (the course's ``nbgrader_config.py`` over the user's and the system's)."""
    from jupyter_core.paths import jupyter_config_path, jupyter_data_dir
    from traitlets.config import Config
    from traitlets.config.loader import ConfigFileNotFound, PyFileConfigLoader

    cfg = Config()
    for folder in [*reversed(jupyter_config_path()), str(course)]:
        with contextlib.suppress(ConfigFileNotFound):
            cfg.merge(PyFileConfigLoader("nbgrader_config.py", path=folder).load_config())
    exchange = cfg.Exchange
    found = [Path(str(exchange.root)) if "root" in exchange else Path("/srv/nbgrader/exchange"),
             Path(str(exchange.cache)) if "cache" in exchange else Path(jupyter_data_dir()) / "nbgrader_cache"]
    return [p for p in found if p.is_dir()]


#: nbgrader's files in a submission besides the notebook and the exercise file (its submit writes both; its
#: autograde reads the time, its release_feedback the secret).
_NBGRADER_FILES = ("timestamp.txt", "submission_secret.txt")


def stage_submissions(course: Path, assignment: str, filename: str, dest: Path, students: Sequence[str] | None = None
                      ) -> dict[str, str]:
    """What nbgrader autogrades: ``dest/<student>/<assignment>/`` with copies of the notebook, the exercise file and
    nbgrader's own files of each submission, made by ``intake`` (regular files of at most 512 KB, no link followed),
    so nbgrader never opens what a student put in ``submitted/``: a FIFO there failed their notebook, which failed the
    whole run, and a link handed nbgrader a classmate's notebook to autograde (and feed back) as theirs. A notebook
    that is refused, missing or not JSON is replaced by the released one: its cells are the assignment's, read-only,
    and the student's work is the exercise file. Returns {student: why their notebook was replaced}."""
    import nbformat

    from . import intake

    notebook = f"{assignment}.ipynb"
    wanted = [notebook, filename, *_NBGRADER_FILES]
    try:
        seen = intake.survey(course / "submitted", wanted, students)
    except intake.IntakeError as e:
        raise NbgradeError(str(e)) from None
    released = course / "release" / assignment / notebook  # nbgrader's release folder (its default name)
    if not released.is_file():
        released = course / "source" / assignment / notebook
    replaced: dict[str, str] = {}
    for student, folder in sorted(seen.folders.items()):
        if assignment not in folder.dirs:
            continue
        where = {n: rel for n, rel in folder.found.items() if rel == f"{assignment}/{n}"}
        copies, refused = intake.fetch(course / "submitted", student, where, dest / student)
        (dest / student / assignment).mkdir(parents=True, exist_ok=True)
        why = refused.get(notebook) or folder.refused.get(notebook) or ("" if notebook in copies else
                                                                          f"no {notebook} in the submission")
        if notebook in copies:
            try:
                nbformat.reads(copies[notebook].read_text(encoding="utf-8"), as_version=4)
            except Exception as e:  # noqa: BLE001 - whatever nbformat cannot read, nbgrader cannot either
                why = f"{notebook} is not a notebook ({type(e).__name__}: {' '.join(str(e).split())[:120]})"
        if why:
            shutil.copyfile(released, dest / student / assignment / notebook)
            replaced[student] = f"{why}; autograded with the released notebook (the cells they added are not run)"
    return replaced


def run_nbgrader_autograde(course: Path, assignment: str, student: str | Sequence[str] | None = None,
                           extra: Sequence[str] = ()) -> tuple[subprocess.CompletedProcess[str], dict[str, str]]:
    """``nbgrader autograde`` in the course folder (so its nbgrader_config.py applies) on copies of the submissions
    (``stage_submissions``), the learner's file not overwritten by the released copy, every notebook executed by a
    kernel in the sandbox (``nbkernel``): it sees a copy of the student's own file and the verdict kept for it,
    nothing of the course, the exchange or the grader's, and its processes are killed when it ends; nbgrader keeps
    at most 64 KiB of a cell's output (``nbkernel.BoundedExecute``). ``student``: one student (nbgrader's
    ``--student``), a share of the class (only theirs are staged, so nbgrader finds only theirs), or None (everyone).
    Returns (nbgrader's process, {student: why their notebook was replaced})."""
    from nbgrader.converters.autograde import Autograde
    from nbgrader.preprocessors import Execute

    from . import nbkernel

    ex = graded_cells(course / "source" / assignment / f"{assignment}.ipynb")[0]
    spec = specs.get(ex)
    scratch = Path(tempfile.mkdtemp(prefix="tklab-nbgrade-"))
    try:
        staged = scratch / "submitted"
        staged.mkdir(mode=0o700)
        replaced = stage_submissions(course, assignment, spec.filename, staged,
                                     [student] if isinstance(student, str) else student)
        name = nbkernel.kernelspec(scratch)
        # nbgrader's ends of the kernels' ZeroMQ sockets (one kernel at a time), bound by the kernel's launcher, which
        # relays them to the kernel's own (``nbkernel._Relay``): out of the sandbox's sight, the grader's alone
        (scratch / "sockets").mkdir(mode=0o700)
        env = dict(os.environ)
        env["JUPYTER_PATH"] = os.pathsep.join(p for p in (str(scratch), env.get("JUPYTER_PATH", "")) if p)
        env[VERDICTS_ENV] = str((course / VERDICTS_DIR).resolve())
        env.update(nbkernel.job_env(exercise=ex, filename=spec.filename, verdicts=(course / VERDICTS_DIR).resolve(),
                                    hide=[course.resolve(), *_exchange_folders(course)]))
        keep = json.dumps({assignment: [spec.filename]})
        steps = Autograde.class_traits()["autograde_preprocessors"].default()
        steps = [f"{nbkernel.__name__}.BoundedExecute" if p is Execute else f"{p.__module__}.{p.__name__}"
                 for p in steps]
        cmd = [sys.executable, "-m", "nbgrader", "autograde", assignment, "--force",
               f"--CourseDirectory.root={course.resolve()}", f"--CourseDirectory.submitted_directory={staged}",
               f"--Autograde.exclude_overwriting={keep}", *(f"--Autograde.autograde_preprocessors={p}" for p in steps),
               f"--Execute.kernel_name={name}", "--KernelManager.transport=ipc",
               f"--KernelManager.ip={scratch / 'sockets' / 'kernel'}"]
        if isinstance(student, str):
            cmd.append(f"--student={student}")
        return subprocess.run([*cmd, *extra], cwd=course, env=env, capture_output=True, text=True,
                              preexec_fn=_die_with_parent), replaced
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _die_with_parent() -> None:
    """In nbgrader's process before it starts: SIGTERM when this process ends, so a killed ``tklab nbgrade`` takes
    nbgrader with it, and nbgrader's kernels follow (their launchers stop with their parent: ``nbkernel``)."""
    import ctypes
    import signal

    with contextlib.suppress(AttributeError, OSError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG


def apply_scores(course: Path, assignment: str, verdicts: dict[str, dict[str, Any]], *, db_url: str | None = None
                 ) -> list[str]:
    """Set each tklab cell's autograde score in the gradebook to the points computed outside the notebook;
    returns a line for every cell whose score in the executed notebook differed."""
    from nbgrader.api import Gradebook, MissingEntry

    url = db_url or f"sqlite:///{(course / 'gradebook.db').resolve()}"
    differed = []
    with Gradebook(url) as gb:
        for student, v in verdicts.items():
            for grade_id, s in v["scores"].items():
                try:
                    g = gb.find_grade(grade_id, assignment, assignment, student)
                except MissingEntry:
                    differed.append(f"{student}: {grade_id}: not in the gradebook (did nbgrader autograde this "
                                    "submission?); its points were not recorded")
                    continue
                if g.auto_score is not None and float(g.auto_score) != s["points"]:
                    differed.append(f"{student}: {grade_id}: the executed notebook scored {g.auto_score:g}, the "
                                    f"check outside it {s['points']:g}; the gradebook keeps {s['points']:g}")
                g.auto_score = s["points"]
                g.needs_manual_grade = g.manual_score is not None  # a grader's earlier score still wants a look
            gb.db.commit()
    return differed


def _run_notebooks(course: Path, assignment: str, names: list[str], named: bool, extra: Sequence[str], jobs: int
                   ) -> list[tuple[subprocess.CompletedProcess[str], dict[str, str]]]:
    """nbgrader's runs of the notebooks (``run_nbgrader_autograde``), in order. One job: one run for the class, or one
    per student ``named`` on the command line (nbgrader's --student takes one name, or a glob). More jobs: the
    students dealt into that many shares, each share one nbgrader process, the shares at once. A notebook's run is
    mostly its kernel's start and a cell's wait (a cell past nbgrader's time limit waits it out), so two processes
    keep two cores busy where one left one idle; each kernel is in a sandbox of its own with a user of its own
    (``nbkernel``, ``uids``), the gradebook is nbgrader's database, which takes one writer at a time, and the
    verdicts were computed before (no timing shares the machine)."""
    from concurrent.futures import ThreadPoolExecutor

    shares = [names[i::jobs] for i in range(min(jobs, len(names)))]
    if len(shares) <= 1:
        return [run_nbgrader_autograde(course, assignment, who, extra) for who in (names if named else [None])]
    with ThreadPoolExecutor(max_workers=len(shares)) as pool:
        return list(pool.map(lambda share: run_nbgrader_autograde(course, assignment, share, extra), shares))


def autograde(course: Path, assignment: str, *, students: Sequence[str] | None = None, timeout: float = 60.0,
              bench: bool = False, extra: Sequence[str] = (), db_url: str | None = None, jobs: int = 1) -> int:
    """The three steps (see the module docstring); prints a summary. Exit status: 0 done, 1 nbgrader
    failed, 3 done but some correctness could not be established here (no GPU, no emulator)."""
    verdicts = compute_verdicts(course, assignment, students=students, timeout=timeout, bench=bench, jobs=jobs)
    replaced: dict[str, str] = {}
    failed: list[str] = []
    for proc, notes in _run_notebooks(course, assignment, list(verdicts), bool(students), extra, jobs):
        replaced.update(notes)
        if proc.returncode != 0:
            log = proc.stdout + proc.stderr
            print(log, file=sys.stderr)
            # One notebook nbgrader could not run (its kernel died) made it exit 1, and no score of the class was
            # written: the failed students are named, the others' (and their check's) points are recorded.
            names = re.findall(r"There was an error processing assignment '[^']*' for student '([^']*)'", log)
            if not names:
                print(f"error: nbgrader autograde failed (exit {proc.returncode}); the verdicts are kept in "
                      f"{course / VERDICTS_DIR}", file=sys.stderr)
                return 1
            failed += names
    differed = apply_scores(course, assignment, verdicts, db_url=db_url)
    unverified = 0
    for student, v in verdicts.items():
        got = sum(s["points"] for s in v["scores"].values())
        most = sum(s["max"] for s in v["scores"].values())
        unverified += sum(s["passed"] is None for s in v["scores"].values())
        print(f"{student}: {got:g} / {most:g}  {v['summary']}")
    for student, why in replaced.items():
        print(f"note: {student}: {why}")
    for line in differed:
        print(f"note: {line}")
    if failed:
        print(f"error: nbgrader could not autograde the notebook of {', '.join(failed)} (its log is on stderr): the "
              "points of the check on their file are in the gradebook, but they have no autograded notebook, so no "
              "feedback", file=sys.stderr)
        return 1
    if unverified:
        print(f"{unverified} check(s) could not be established on this machine (NOT VERIFIED, 0 points): grade on a "
              "machine with a GPU, or with a C++ compiler for the CPU emulation")
        return 3
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m tklab nbgrade assignments|autograde ...``; exit 2 on a usage error."""
    ap = argparse.ArgumentParser(prog="python -m tklab nbgrade", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    a = sub.add_parser("assignments", help="write source/<exercise>/ for nbgrader generate_assignment")
    a.add_argument("--course", type=Path, required=True, help="the nbgrader course folder")
    a.add_argument("--exercises", nargs="*", default=None, help="exercise ids or prefixes (default: all)")
    for name, default in (("compiles", 1.0), ("static", 1.0), ("correct", 5.0), ("speed", 0.0)):
        what = "each static check" if name == "static" else name
        why = "; 0: no speed cell, as speed needs the grader to have a GPU" if name == "speed" else ""
        a.add_argument(f"--points-{name}", type=float, default=default, help=f"points for {what} (default "
                       f"{default:g}{why})")
    c = sub.add_parser("collect", help="nbgrader collect, refusing links (and FIFOs, devices) students left in the "
                       "exchange's inbound folder; further arguments go to nbgrader collect (--update, --student ...)")
    c.add_argument("assignment", help="the assignment (an exercise id)")
    c.add_argument("--course", type=Path, default=Path("."), help="the nbgrader course folder (default: here)")
    g = sub.add_parser("autograde", help="check the submissions outside the notebooks, run nbgrader autograde, "
                       "write the points into the gradebook")
    g.add_argument("assignment", help="the assignment (an exercise id)")
    g.add_argument("--course", type=Path, default=Path("."), help="the nbgrader course folder (default: here)")
    g.add_argument("--student", action="append", default=None, help="only this student (repeatable)")
    g.add_argument("--timeout", type=float, default=60.0, help="seconds for each run of a learner's kernel")
    g.add_argument("--db", default=None, help="the gradebook's database URL, when nbgrader_config.py sets "
                   "CourseDirectory.db_url (default: sqlite:///<course>/gradebook.db, nbgrader's own default)")
    g.add_argument("--jobs", type=int, default=min(4, os.cpu_count() or 1), help="checks run at once, and nbgrader "
                   "processes running shares of the notebooks (default: the CPUs, at most 4; checks one at a time "
                   "where the speed is measured)")
    g.add_argument("--bench", action="store_true", help="time against the library even without a speed cell "
                   "(an assignment with a speed cell is always timed; timing needs a GPU)")
    g.add_argument("--allow-unsandboxed", action="store_true",
                   help="grade even where learner code could reach the grader (no bubblewrap, or root with no user "
                        "to drop to), as `python -m tklab grade --allow-unsandboxed`; for a trusted class or a test")
    args, extra = ap.parse_known_args(list(sys.argv[1:] if argv is None else argv))
    try:
        if args.command == "assignments":
            if extra:
                ap.error(f"unrecognized arguments: {' '.join(extra)}")
            ids = [specs.find(e).id for e in args.exercises] if args.exercises else specs.all_ids()
            pts = Points(args.points_compiles, args.points_static, args.points_correct, args.points_speed)
            if min(pts.compiles, pts.static, pts.correct, pts.speed) < 0:
                raise NbgradeError("points cannot be negative")
            for p in write_assignments(args.course, ids, pts):
                print(f"wrote {p}")
            print(f"next: cd {args.course} && nbgrader generate_assignment <exercise id>; grade with "
                  "`python -m tklab nbgrade autograde <exercise id>`")
            return 0
        if args.command == "collect":
            from . import nbcollect

            status, refused = nbcollect.collect(args.course, args.assignment, extra)
            for line in refused:
                print(f"error: {line}", file=sys.stderr)
            if status != 0:
                print(f"error: nbgrader collect failed (exit {status})", file=sys.stderr)
                return 1
            if refused:
                many = "entries" if len(refused) != 1 else "entry"
                print(f"error: {len(refused)} {many} of the exchange's inbound folder refused (named above); "
                      "everything else was collected", file=sys.stderr)
                return 1
            print(f"collected {args.assignment}; nothing refused")
            return 0
        if args.jobs < 1:
            raise NbgradeError(f"--jobs {args.jobs}: at least one check must run at a time")
        from .sandbox import refusal

        refused = refusal(args.allow_unsandboxed)
        if refused:
            raise NbgradeError(refused)
        from .route import practice_only

        practice = practice_only([specs.get(args.assignment)])
        if practice:
            raise NbgradeError(practice)
        return autograde(args.course, args.assignment, students=args.student, timeout=args.timeout,
                         bench=args.bench, extra=extra, db_url=args.db, jobs=args.jobs)
    except (NbgradeError, KeyError) as e:
        print(f"error: {e.args[0] if e.args else e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
