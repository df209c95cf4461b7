"""Red team, issue 39: a hostile class against the grader. The class folder is the students', so each attack here
is one a student can mount by what they put in their own folder: a folder that is a link to a classmate's, a FIFO
where the grader expects a file, a hint state that claims what the grader cannot know, a folder that takes for
ever to read. Each test failed on the grader that read the class folder itself (the commit before
``tklab.grading.intake``) and passes now.

Most tests stand a recording fake in for the checker (``grade._check_in_subprocess``): what is under test is what
the grader reads and hands on, not a verdict.
"""

from __future__ import annotations

import csv
import os
import stat
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

import tklab.grading.grade as g
from tklab.grading import intake
from tklab.paths import solution

ROOT = Path(__file__).resolve().parent.parent
FILE = "ch01_naive_matmul.py"
EX = "ch01_naive_matmul"
SOLUTION = solution(FILE).read_text()
STUB = (ROOT / "exercises" / FILE).read_text()


class Recorder:
    """Stands in for the checker: keeps each file it is handed (path and content) and passes the solution."""

    def __init__(self) -> None:
        self.seen: list[tuple[Path, str]] = []

    def __call__(self, exercise: str, path: Path, **_: object) -> dict:
        text = path.read_text()
        self.seen.append((path, text))
        return {"compiled": True, "passed": text == SOLUTION, "summary": "checked", "established": "fake"}


def _class(root: Path) -> Path:
    cls = root / "class"
    (cls / "alice").mkdir(parents=True)
    (cls / "alice" / FILE).write_text(SOLUTION)
    os.chmod(cls / "alice", 0o700)  # her folder is hers; a link to it must not make it another student's
    return cls


def _grade(cls: Path, out: Path, monkeypatch) -> tuple[dict[tuple[str, str], dict[str, str]], Recorder]:
    rec = Recorder()
    monkeypatch.setattr(g, "_check_in_subprocess", rec)
    assert g.main(["--class", str(cls), "--out", str(out), "--exercises", "ch01", "--no-run"]) == 0
    with open(out, newline="") as f:
        return {(r["student"], r["exercise"]): r for r in csv.DictReader(f)}, rec


# ---- links --------------------------------------------------------------------------------------------------

def test_a_student_folder_that_is_a_link_to_a_classmates_is_refused(tmp_path, monkeypatch):
    """``class/mallory -> alice`` gave mallory alice's ``yes``: only links leading out of the class were refused."""
    cls = _class(tmp_path)
    (cls / "mallory").symlink_to("alice", target_is_directory=True)
    sheet, rec = _grade(cls, tmp_path / "g.csv", monkeypatch)
    assert sheet["alice", EX]["correct"] == "yes"
    row = sheet["mallory", EX]
    assert row["correct"] == "refused" and "is a link to alice" in row["message"], row
    assert "a folder of their own" in row["message"]
    assert len(rec.seen) == 1  # alice's file was checked once: as alice's


def test_an_exercise_file_that_is_a_link_inside_the_students_folder_is_refused(tmp_path, monkeypatch):
    """Even within the student's own folder: the link could be repointed between the look and the read."""
    cls = _class(tmp_path)
    (cls / "mallory" / "src").mkdir(parents=True)
    (cls / "mallory" / "src" / "mine.py").write_text(STUB)
    (cls / "mallory" / FILE).symlink_to(cls / "mallory" / "src" / "mine.py")
    sheet, rec = _grade(cls, tmp_path / "g.csv", monkeypatch)
    row = sheet["mallory", EX]
    assert row["correct"] == "refused" and f"{FILE} is a link to" in row["message"], row


# ---- only regular files, with a size cap and a time limit ------------------------------------------------------

def _special_files(folder: Path) -> dict[str, str]:
    """{student: what their ch01 file is}: a FIFO, a character device (as root), a socket, a sparse 1 GB file."""
    made = {}
    (folder / "fifo").mkdir()
    os.mkfifo(folder / "fifo" / FILE)
    made["fifo"] = "is a FIFO, not a regular file"
    try:
        (folder / "dev").mkdir()
        os.mknod(folder / "dev" / FILE, stat.S_IFCHR | 0o644, os.makedev(1, 5))  # /dev/zero's numbers
        made["dev"] = "is a device, not a regular file"
    except PermissionError:
        pass
    import socket

    (folder / "sock").mkdir()
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(folder / "sock" / FILE))
    s.close()
    made["sock"] = "is a socket, not a regular file"
    (folder / "huge").mkdir()
    with open(folder / "huge" / FILE, "wb") as f:
        f.truncate(1 << 30)
    made["huge"] = "1048576 KB; an exercise file is a few KB"
    return made


def test_only_regular_files_of_a_few_kb_are_read(tmp_path, monkeypatch):
    """A FIFO, a device or a socket named like the exercise was "missing" (or, opened, would block or stream for
    ever); now each is refused saying what it is, and nothing of it reaches the checker."""
    cls = _class(tmp_path)
    made = _special_files(cls)
    t = time.monotonic()
    sheet, rec = _grade(cls, tmp_path / "g.csv", monkeypatch)
    assert time.monotonic() - t < 30
    for student, words in made.items():
        row = sheet[student, EX]
        assert row["correct"] == "refused" and words in row["message"], row
    assert [p.parent.name for p, _ in rec.seen] == ["alice"]


def test_a_fifo_named_like_the_hint_state_does_not_stall_the_class(tmp_path):
    """``.hints.json`` as a FIFO: the grader read hint files itself and blocked for ever, grading nobody after her
    and keeping the sheet locked. The grader runs in a process of its own here, so the old hang is a timeout."""
    cls = _class(tmp_path)
    (cls / "mallory" / "exercises").mkdir(parents=True)
    os.mkfifo(cls / "mallory" / "exercises" / ".hints.json")
    (cls / "mallory" / "exercises" / FILE).write_text(STUB)
    (cls / "zed").mkdir()
    (cls / "zed" / FILE).write_text(SOLUTION)
    out = tmp_path / "g.csv"
    script = textwrap.dedent(f"""
        import tklab.grading.grade as g
        g._check_in_subprocess = lambda ex, path, **k: {{"compiled": True, "passed": True, "summary": "ok"}}
        raise SystemExit(g.main(["--class", {str(cls)!r}, "--out", {str(out)!r}, "--exercises", "ch01", "--no-run"]))
    """)
    try:
        proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=ROOT)
    except subprocess.TimeoutExpired:
        pytest.fail("grade blocked on a FIFO in a student's folder")
    assert proc.returncode == 0, proc.stderr[-2000:]
    with open(out, newline="") as f:
        rows = {r["student"]: r for r in csv.DictReader(f)}
    assert set(rows) == {"alice", "mallory", "zed"} and rows["zed"]["correct"] == "yes"


def test_a_folder_that_cannot_be_read_in_time_is_refused_and_the_others_are_graded(tmp_path, monkeypatch):
    """A student's folder that takes longer than the limit to read (a network file system that hangs, a huge
    tree) costs that student's rows only: the reader is stopped and a fresh one reads the rest."""
    cls = _class(tmp_path)
    for who in ("mallory", "zed"):
        (cls / who).mkdir()
        (cls / who / FILE).write_text(SOLUTION)
    slow = tmp_path / "slow_intake.py"  # the real reader, made to hang in mallory's folder
    slow.write_text(textwrap.dedent(f"""
        import runpy, time
        g = runpy.run_path({str(Path(intake.__file__))!r}, run_name="intake")
        real = g["_walk_student"]
        def hangs(class_fd, name, filenames):
            if name == "mallory":
                time.sleep(600)
            return real(class_fd, name, filenames)
        g["_child_survey"].__globals__["_walk_student"] = hangs
        raise SystemExit(g["_child_main"]())
    """))
    monkeypatch.setattr(intake, "_command", lambda: [sys.executable, "-I", "-S", str(slow)])
    monkeypatch.setattr(intake, "STUDENT_SECONDS", 2.0)
    monkeypatch.setattr(intake.survey, "__kwdefaults__", {"seconds": 2.0})
    t = time.monotonic()
    sheet, rec = _grade(cls, tmp_path / "g.csv", monkeypatch)
    assert time.monotonic() - t < 30
    assert sheet["mallory", EX]["correct"] == "refused" and "took longer than 2 s" in sheet["mallory", EX]["message"]
    assert sheet["alice", EX]["correct"] == sheet["zed", EX]["correct"] == "yes"


# ---- every read in a child ------------------------------------------------------------------------------------

_WATCHED: list[Path] = []
_EVENTS: list[tuple[str, str]] = []


def _audit(event: str, args: tuple) -> None:
    if not _WATCHED or event not in ("open", "os.scandir", "os.listdir", "os.walk"):
        return
    target = args[0] if args else None
    if isinstance(target, (str, bytes, os.PathLike)):
        path = os.path.abspath(os.fsdecode(target))
        if any(path == str(w) or path.startswith(str(w) + os.sep) for w in _WATCHED):
            _EVENTS.append((event, path))


sys.addaudithook(_audit)  # (an audit hook stays for the process: it records only while _WATCHED is set)


def test_the_grader_never_opens_or_lists_the_class_folder_itself(tmp_path, monkeypatch):
    """Every read of the students' data happens in a child with limits: the grading process opens no file and
    lists no folder under the class folder, and the checker is handed a copy the grader owns."""
    cls = _class(tmp_path)
    (cls / "mallory" / "exercises").mkdir(parents=True)
    (cls / "mallory" / "exercises" / FILE).write_text(STUB)
    (cls / "mallory" / "exercises" / ".hints.json").write_text('{"ch01_naive_matmul": {"seen": 3}}')
    rec = Recorder()
    monkeypatch.setattr(g, "_check_in_subprocess", rec)
    _WATCHED.append(cls.resolve())
    try:
        assert g.main(["--class", str(cls), "--out", str(tmp_path / "g.csv"), "--exercises", "ch01",
                       "--no-run"]) == 0
    finally:
        _WATCHED.clear()
    assert _EVENTS == [], _EVENTS
    assert sorted(text == SOLUTION for _, text in rec.seen) == [False, True]
    assert all(cls.resolve() not in p.resolve().parents for p, _ in rec.seen), rec.seen


def test_the_hint_level_is_not_taken_from_the_students_folder(tmp_path, monkeypatch):
    """The ``hint_level`` column came from ``.hints.json`` in the student's folder, which the student writes: a
    student who read the answer could claim level 0. The grader has no record of its own, so it says unknown."""
    cls = _class(tmp_path)
    for who, seen in (("alice", 3), ("mallory", 0)):
        (cls / who / "exercises").mkdir(parents=True, exist_ok=True)
        (cls / who / "exercises" / ".hints.json").write_text(f'{{"{EX}": {{"seen": {seen}}}}}')
    (cls / "mallory" / FILE).write_text(SOLUTION)
    sheet, _ = _grade(cls, tmp_path / "g.csv", monkeypatch)
    assert sheet["alice", EX]["hint_level"] == sheet["mallory", EX]["hint_level"] == "unknown"


# ---- the reader itself ---------------------------------------------------------------------------------------

def test_a_file_swapped_for_a_link_after_the_survey_is_not_followed(tmp_path):
    """The copy opens each component from the student's folder down with O_NOFOLLOW: a file (or a folder on its
    way) replaced by a link between the look and the copy is refused, not read through."""
    cls = _class(tmp_path)
    (cls / "mallory" / "work").mkdir(parents=True)
    (cls / "mallory" / "work" / FILE).write_text(STUB)
    seen = intake.survey(cls, [FILE])
    assert seen.folders["mallory"].found == {FILE: f"work/{FILE}"}
    (cls / "mallory" / "work").rename(cls / "mallory" / "old")
    (cls / "mallory" / "work").symlink_to(cls / "alice", target_is_directory=True)
    copies, refused = intake.fetch(cls, "mallory", seen.folders["mallory"].found, tmp_path / "copy")
    assert copies == {} and "is a link or sits below one" in refused[FILE]
    (cls / "mallory" / "work").unlink()
    (cls / "mallory" / "work").mkdir()
    os.mkfifo(cls / "mallory" / "work" / FILE)  # now a FIFO: the copy does not block on it
    copies, refused = intake.fetch(cls, "mallory", seen.folders["mallory"].found, tmp_path / "copy")
    assert copies == {} and "is a FIFO" in refused[FILE]


def test_nbgrade_reads_submissions_through_the_same_reader(tmp_path):
    """``nbgrade autograde``'s first step finds each submitted file the same way: a FIFO (or a link) in place
    of the exercise file is refused by name, and nothing is checked."""
    from tklab.grading import nbgrade

    course = tmp_path / "course"
    assert nbgrade.main(["assignments", "--course", str(course), "--exercises", "ch01"]) == 0
    sub = course / "submitted"
    (sub / "mallory" / EX).mkdir(parents=True)
    os.mkfifo(sub / "mallory" / EX / FILE)
    (sub / "trudy" / EX).mkdir(parents=True)
    (sub / "trudy" / EX / FILE).symlink_to(solution(FILE))
    t = time.monotonic()
    verdicts = nbgrade.compute_verdicts(course, EX, progress=False)
    assert time.monotonic() - t < 20
    assert "is a FIFO" in verdicts["mallory"]["summary"] and verdicts["mallory"]["sha256"] == ""
    assert "is a link to" in verdicts["trudy"]["summary"] and "solutions" in verdicts["trudy"]["summary"]
    assert all(s["points"] == 0 for v in verdicts.values() for s in v["scores"].values())


# ---- the solutions through .git (and every other copy in the workbook) ------------------------------------------

PEEK = """\
import os, subprocess, sys
sys.path.insert(0, {repo!r})
from tklab.grading.sandbox import drop_privileges
print("MISSED", drop_privileges())  # the child's first step, as ``python -m tklab.grading.child`` takes it
repo = {repo!r}
for what in (".git/HEAD", "solutions/ch10_flash/ch10_flash.cu", "tests/data/class_sample/dave/ch02_smem_tiling.cu",
             "tklab/grading/sandbox.py"):
    try:
        with open(os.path.join(repo, what)) as f:
            print("READ", what, len(f.read()))
    except OSError as e:
        print("DENIED", what, type(e).__name__)
try:
    out = subprocess.run(["git", "-C", repo, "show", "HEAD:solutions/ch10_flash/ch10_flash.cu"], capture_output=True,
                         text=True, timeout=20, env={{"PATH": "/usr/bin:/bin", "HOME": os.getcwd()}})
    print("GIT", out.returncode, "BEGIN SOLUTION" in out.stdout)
except OSError as e:
    print("GIT", "unavailable", e)
"""


@pytest.fixture(params=["process", "bubblewrap"])
def level(request, monkeypatch):
    """Each sandbox level this machine has (the one it lacks is skipped)."""
    from tklab.grading import sandbox

    monkeypatch.setenv("TKLAB_SANDBOX", request.param)
    if sandbox.isolation().level != request.param:
        pytest.skip(f"no {request.param} here: {sandbox.isolation().describe()}")
    return request.param


def _peek(tmp_path: Path) -> str:
    """Run ``PEEK`` the way the runner runs its child: a fresh folder handed over, the solutions and the compile
    cache hidden, a clean environment, the sandbox this machine offers."""
    from tklab.grading.sandbox import Limits, Sandbox, limits_for
    from tklab.toolchain import cache

    work = tmp_path / "run"
    work.mkdir()
    box = Sandbox(work, hide=[ROOT / "solutions", cache.cache_dir()], limits=limits_for(Limits(wall_seconds=60)))
    box.hand_over()
    out = bytearray()
    box.start([sys.executable, "-c", PEEK.format(repo=str(ROOT))],
              {"PATH": "/usr/bin:/bin", "HOME": str(work), "PYTHONDONTWRITEBYTECODE": "1"})
    assert box.proc is not None and box.proc.stdout is not None
    fin = box.supervise({box.proc.stdout.fileno(): out.extend})
    text = out.decode("utf-8", "replace")
    assert fin.returncode == 0, text
    return text


@pytest.mark.skipif(not (ROOT / ".git").exists(), reason="not a git checkout")
def test_a_run_cannot_read_the_solutions_through_git_or_any_other_copy(tmp_path, level):
    """``git show HEAD:`` of a solution's path from inside a run printed the solution: ``.git`` was readable.
    Now the checkout's folders other than the package and the tile library are hidden (the history, the tests'
    copies of solutions), at both levels; the package stays readable."""
    import shutil

    text = _peek(tmp_path)
    assert "MISSED []" in text, text
    for what in (".git/HEAD", "solutions/ch10_flash/ch10_flash.cu",
                 "tests/data/class_sample/dave/ch02_smem_tiling.cu"):
        assert f"DENIED {what}" in text, text
    assert "READ tklab/grading/sandbox.py" in text, text
    if shutil.which("git"):
        assert "GIT" in text and "GIT 0 True" not in text, text


def test_the_git_folders_of_a_worktree_are_found(tmp_path):
    """A worktree's ``.git`` is a file naming its folder inside the main repository, whose ``commondir`` names the
    object store: both are hidden, wherever they live."""
    from tklab.grading import unseen

    main = tmp_path / "main" / ".git"
    (main / "worktrees" / "wt").mkdir(parents=True)
    (main / "worktrees" / "wt" / "commondir").write_text("../..\n")
    wt = tmp_path / "wt"
    wt.mkdir()
    (wt / ".git").write_text(f"gitdir: {main / 'worktrees' / 'wt'}\n")
    assert unseen.git_dirs(wt) == [main / "worktrees" / "wt", main]
    assert unseen.git_dirs(tmp_path / "main") == [main]


# ---- compiles bounded -------------------------------------------------------------------------------------------

CH02 = (ROOT / "solutions" / "ch02_smem_tiling" / "ch02_smem_tiling.cu").read_text()
nvrtc = pytest.mark.nvrtc


def _ch02(folder: Path, prelude: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "ch02_smem_tiling.cu").write_text(prelude + CH02)
    return folder / "ch02_smem_tiling.cu"


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    """A compile cache of the test's own: every compile here misses it, so NVRTC really runs."""
    monkeypatch.setenv("TKLAB_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


@nvrtc
@pytest.mark.parametrize("prelude, limit, words", [
    # one line, no directive: 1.5 GB and a 100 MB cubin in NVRTC (before: in the checking process)
    ("__device__ char big[100000000] = {1};\n", ("TKLAB_COMPILE_MEMORY_MIB", "768"),
     "the compile exceeded 768 MiB of memory"),
    ("__device__ char big[20000000] = {1};\n", ("TKLAB_COMPILE_OUTPUT_MIB", "8"),
     "the compile's output (PTX and cubin) exceeded 8 MiB"),
    ("__device__ char big[100000000] = {1};\n", ("TKLAB_COMPILE_CPU_SECONDS", "1"),
     "the compile exceeded 1 s of CPU time"),
], ids=["memory", "output", "cpu"])
def test_a_compile_that_blows_up_is_stopped_with_a_verdict_naming_the_limit(tmp_path, fresh_cache, monkeypatch,
                                                                           prelude, limit, words):
    """NVRTC compiled the learner's file in the checking process with no limit. Now it runs in a child that limits
    itself; a compile past a limit is the file's compile error, naming it, and the check goes on to the next."""
    from tklab.grading.check import check

    monkeypatch.setenv(*limit)
    t = time.monotonic()
    res = check("ch02", _ch02(tmp_path / "m", prelude), run=False)
    assert time.monotonic() - t < 60
    assert res.passed is False and not res.compiled and words in res.compile_error, res.compile_error
    assert "was stopped" in res.compile_error


@nvrtc
def test_a_bounded_compile_is_cached_under_the_same_key_with_the_same_ptx(tmp_path, fresh_cache):
    """Only the NVRTC call moves: the key, the cache entry and the module are what an in-process compile makes, so
    the emulated run interprets the PTX the static checks read; a compile error reads the same too."""
    from tklab.grading import bounded_compile, specs
    from tklab.toolchain import cache, compiler

    spec = specs.get("ch02_smem_tiling")
    with bounded_compile.bounded():
        bounded = compiler.compile(CH02, arch="sm_90a", name="x.cu", options=spec.options)
    assert not bounded.cached and cache.load(bounded.key)["ptx"] == bounded.ptx
    cache.clear()
    plain = compiler.compile(CH02, arch="sm_90a", name="x.cu", options=spec.options)
    assert (plain.key, plain.ptx, plain.cubin) == (bounded.key, bounded.ptx, bounded.cubin)
    broken = CH02 + "\n__global__ void oops() { undefined_name(); }\n"
    with pytest.raises(compiler.CompileError) as in_process:
        compiler.compile(broken, arch="sm_90a", name="x.cu", options=spec.options)
    with bounded_compile.bounded(), pytest.raises(compiler.CompileError) as in_child:
        compiler.compile(broken, arch="sm_90a", name="x.cu", options=spec.options)
    assert str(in_child.value) == str(in_process.value) and in_child.value.diagnostics


# ---- limits per run -------------------------------------------------------------------------------------------

def _run_program(tmp_path: Path, code: str, limits, tag: str = "run"):
    """Start ``code`` in a Sandbox as the runner starts its child (its first steps: drop_privileges, then the
    limits); returns (box, output bytes) once it is started; ``_finish`` collects it."""
    from tklab.grading.sandbox import Sandbox

    work = tmp_path / tag
    work.mkdir()
    box = Sandbox(work, limits=limits)
    box.hand_over()
    prelude = (f"import sys\nsys.path.insert(0, {str(ROOT)!r})\nfrom tklab.grading.sandbox import Limits, "
               f"apply_limits, drop_privileges\ndrop_privileges()\napply_limits(Limits(**{limits.__dict__!r}))\n")
    box.start([sys.executable, "-c", prelude + code], {"PATH": "/usr/bin:/bin", "HOME": str(work)})
    return box


def _finish(box) -> tuple[str, object]:
    out = bytearray()
    fin = box.supervise({box.proc.stdout.fileno(): out.extend})
    return out.decode("utf-8", "replace"), fin


FILL = """\
import os
written = 0
try:
    for i in range(8):
        with open(os.path.join({where!r}, f"fill-{{i}}.bin"), "wb") as f:
            for _ in range(16):
                f.write(bytes(1 << 20))
                written += 1 << 20
    print("WROTE", written >> 20)
except OSError as e:
    print("STOPPED", written >> 20, e.strerror)
"""


def test_a_run_cannot_write_more_than_its_budget_in_all(tmp_path, level, monkeypatch):
    """``RLIMIT_FSIZE`` bounds each file: 600 MiB went into three files under a 256 MiB limit. A root grader's run
    folder is now a tmpfs of ``runner.RUN_DISK`` bytes (its /tmp in bubblewrap too); a grader that is not root gets
    the same from bubblewrap (the folder a tmpfs inside the sandbox, filled by the child): 128 MiB in eight files of
    16 MiB stop at the 64 MiB budget."""
    from tklab.grading import runner

    if os.getuid() != 0 and level == "process":
        pytest.skip("a grader that is not root bounds the run's folder through bubblewrap only (it cannot mount)")
    monkeypatch.setattr(runner, "RUN_DISK", 64 << 20, raising=False)
    places = ["."] + (["/tmp"] if level == "bubblewrap" else [])  # (the process level has the host's /tmp)
    for where in places:
        f = tmp_path / where.strip("/.").replace("/", "_") / FILE
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(FILL.format(where=where) + SOLUTION)
        out = runner.run_isolated(EX, f, mode="sim", timeout=60)
        assert "STOPPED" in out.output and "No space left" in out.output, (where, out.output[-500:])
        stopped = int(out.output.split("STOPPED", 1)[1].split()[0])
        assert stopped <= 64, (where, out.output[-300:])


def test_concurrent_runs_do_not_share_a_user_or_a_process_limit(tmp_path, level):
    """Every run of a root grader was ``nobody``: one run holding its process limit left a concurrent one unable to
    start a process (RLIMIT_NPROC counts a user's processes). Now each run of a root grader has a uid of its own; the
    runs of a grader that is not root are its uid, each in a user namespace of its own, where the kernel counts the
    run's processes apart (Linux 5.14 and later), so they get a process limit too (it had none)."""
    from tklab.grading.sandbox import Limits, limits_for, process_limit_problem

    limits = limits_for(Limits(wall_seconds=60, processes=24))
    if not limits.processes:
        pytest.skip(f"no process limit can apply here: {process_limit_problem()}")
    hog = ("import os, time\nkids = 0\ntry:\n    for _ in range(64):\n        if os.fork() == 0:\n"
           "            time.sleep(30)\n            os._exit(0)\n        kids += 1\nexcept OSError:\n    pass\n"
           "print('HOG', os.getuid(), kids, flush=True)\ntime.sleep(6)\n")
    a = _run_program(tmp_path, hog, limits, "a")
    time.sleep(3)  # a holds its whole process limit
    b = _run_program(tmp_path, "import os\nkids = 0\ntry:\n    for _ in range(4):\n        pid = os.fork()\n"
                     "        if pid == 0:\n            os._exit(0)\n        os.waitpid(pid, 0)\n        kids += 1\n"
                     "except OSError as e:\n    print('REFUSED', e.strerror)\nprint('OTHER', os.getuid(), kids)\n",
                     limits, "b")
    out_b, _ = _finish(b)
    out_a, _ = _finish(a)
    uid_a, uid_b = int(out_a.split("HOG")[1].split()[0]), int(out_b.split("OTHER")[1].split()[0])
    if os.getuid() == 0:
        assert uid_a != uid_b and 0 not in (uid_a, uid_b), (out_a, out_b)
    else:  # the grader's uid, in two user namespaces
        assert uid_a == uid_b == os.getuid(), (out_a, out_b)
    assert 0 < int(out_a.split("HOG")[1].split()[1]) < 24, out_a  # the hog was bounded by its own limit
    assert "OTHER" in out_b and out_b.split("OTHER")[1].split()[1] == "4", out_b


def _cgroups_here() -> bool:
    from tklab.grading import rungroup

    g = rungroup.RunGroup.create(f"tklab-probe-{os.getpid()}", memory=1 << 30, processes=64)
    if g is None:
        return False
    g.remove()
    return True


cgroups = pytest.mark.skipif(not _cgroups_here(), reason="this grader may not make cgroups (not root, or a "
                             "container without a writable cgroup hierarchy)")


@cgroups
def test_a_runs_processes_share_one_memory_bound(tmp_path, level):
    """The address-space limit is per process: four processes of 200 MiB each fit under 512 MiB apiece. The run's
    cgroup bounds them together: the kernel stops the run, and the report says it was memory. Each child holds its
    block until all four have one (or 10 s have passed: a child the kernel stopped never says it has one), so the
    800 MiB are held at once however the children are scheduled; without that hold, on a loaded 2-core machine one
    child could finish before the next had touched its block, and the run stayed under the bound (seen once in CI)."""
    from tklab.grading.sandbox import Limits, limits_for

    hogs = ("import os, select\nready_r, ready_w = os.pipe()\ngo_r, go_w = os.pipe()\npids = []\n"
            "for _ in range(4):\n    pid = os.fork()\n    if pid == 0:\n        os.close(go_w)\n"
            "        block = bytearray(200 << 20)\n        for i in range(0, len(block), 4096):\n"
            "            block[i] = 1\n        os.write(ready_w, b'x')\n        os.read(go_r, 1)\n"
            "        os._exit(0)\n    pids.append(pid)\n"
            "held = 0\nwhile held < 4 and select.select([ready_r], [], [], 10)[0]:\n"
            "    held += len(os.read(ready_r, 4))\nos.close(go_w)\nprint('HELD', held)\n"
            "codes = [os.waitpid(p, 0)[1] for p in pids]\nprint('CHILDREN', codes)\n")
    box = _run_program(tmp_path, hogs, limits_for(Limits(wall_seconds=60, memory=512 << 20)))
    out, fin = _finish(box)
    assert fin.oom_kills > 0 or fin.returncode not in (0,), out
    assert "CHILDREN [0, 0, 0, 0]" not in out, out


def test_without_a_cgroup_a_runs_processes_share_one_memory_bound_sampled(tmp_path, level, monkeypatch):
    """A grader with no cgroup of its own (one that is not root, with none delegated to it; here forced with
    ``TKLAB_NO_CGROUP``): the address-space limit is per process, so four processes of 200 MiB each held 800 MiB under
    512 MiB apiece. The supervisor measures what the run's processes hold together and stops the run past its bound,
    and the report says why there is no cgroup and how memory is bounded instead. (A burst shorter than the sampling
    interval escapes the measure: the per-process limit still caps each process.)"""
    from tklab.grading.sandbox import SAMPLE_SECONDS, Limits, limits_for

    monkeypatch.setenv("TKLAB_NO_CGROUP", "1")
    hogs = ("import os, time\npids = []\nfor _ in range(4):\n    pid = os.fork()\n    if pid == 0:\n"
            "        block = bytearray(200 << 20)\n        for i in range(0, len(block), 4096):\n"
            "            block[i] = 1\n        time.sleep(20)\n        os._exit(0)\n    pids.append(pid)\n"
            "codes = [os.waitpid(p, 0)[1] for p in pids]\nprint('CHILDREN', codes)\n")
    box = _run_program(tmp_path, hogs, limits_for(Limits(wall_seconds=60, memory=512 << 20)))
    assert "TKLAB_NO_CGROUP is set" in box.describe_group() and f"every {SAMPLE_SECONDS:g} s" in box.describe_group()
    t = time.monotonic()
    out, fin = _finish(box)
    assert "CHILDREN" not in out and not fin.timed_out and time.monotonic() - t < 15, (out, fin)
    assert 512 << 20 < fin.memory_held < 1 << 30 and fin.oom_kills >= 4, fin
    held = ("import os, time\nblock = bytearray(300 << 20)\nfor i in range(0, len(block), 4096):\n    block[i] = 1\n"
            "print('HELD', flush=True)\n")  # one process under the bound: untouched
    out, fin = _finish(_run_program(tmp_path, held, limits_for(Limits(wall_seconds=60, memory=512 << 20)), "one"))
    assert "HELD" in out and fin.returncode == 0 and not fin.memory_held, (out, fin)


@cgroups
def test_a_daemon_with_no_session_and_no_environment_dies_with_the_run_at_the_process_level(tmp_path, monkeypatch):
    """The process level's hole: double fork, setsid, a cleared environment (no token), and no checker adopting
    orphans. The run's cgroup holds it anyway, and the kill ends it."""
    from tklab.grading.runner import run_isolated

    monkeypatch.setenv("TKLAB_SANDBOX", "process")
    token = f"4098{uuid.uuid4().int % 10**6}.5"
    daemon = (f"import os\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
              f"        os.execve('/bin/sleep', ['sleep', '{token}'], {{}})\n    os._exit(0)\nos.wait()\n")
    f = tmp_path / FILE
    f.write_text(daemon + SOLUTION)
    out = run_isolated(EX, f, mode="sim", timeout=120)  # a limit far above the run: not what this tests
    left = [p for p in Path("/proc").iterdir() if p.name.isdigit() and _cmdline_has(p, token)]
    for p in left:
        os.kill(int(p.name), 9)
    assert out.status == "ok" and not left, (out.message, left)
    assert "a cgroup of its own" in out.isolation


def _cmdline_has(proc: Path, token: str) -> bool:
    try:
        return token.encode() in (proc / "cmdline").read_bytes()
    except OSError:
        return False


def test_a_graders_home_is_blanked_for_a_grader_that_is_not_root(tmp_path, monkeypatch):
    """A grader that is not root left its home readable to its runs (``~/.git-credentials``): bubblewrap now lays an
    empty tmpfs over it and binds back only what Python needs from it (a virtual environment there). Held on the
    arguments bubblewrap gets (this machine's grader is root; the run as such is not started here)."""
    from tklab.grading import sandbox

    home = Path("/srv/graders/ann")  # not under /tmp (the sandbox's own /tmp covers a home there anyway)
    venv = home / "course" / ".venv"
    monkeypatch.setattr(sandbox.os, "getuid", lambda: 1000)
    monkeypatch.setattr(sandbox.Path, "home", classmethod(lambda cls: home))
    monkeypatch.setattr(sandbox.Path, "is_dir", lambda self: True)
    monkeypatch.setattr(sandbox, "_drop_inside", lambda: None)
    monkeypatch.setattr(sandbox, "_python_paths", lambda: {venv, Path("/usr/lib/python3")})
    args = sandbox._bwrap_overlays()
    assert "--tmpfs" in args and args[args.index("--tmpfs") + 1] == str(home), args
    assert ["--ro-bind", str(venv), str(venv)] == args[-3:], args
    monkeypatch.setattr(sandbox.os, "getuid", lambda: 0)
    assert str(home) not in sandbox._bwrap_overlays()  # a root grader's home is closed to its runs' users already


def test_a_run_cannot_read_the_graders_home(tmp_path, level):
    """The real run, not only bubblewrap's arguments: a file in the grader's home (where ``~/.git-credentials`` would
    be) cannot be read from a run. A root grader's home is closed to its runs' users; a grader that is not root has it
    blanked by bubblewrap. A setup grading refuses (the code would run as the grader itself) is not held here."""
    from tklab.grading.sandbox import grading_problem

    problem = grading_problem()
    if problem:
        pytest.skip(f"grading refuses this setup ({problem})")
    home = Path.home()
    if os.getuid() != 0 and Path("/tmp") in home.resolve().parents:
        pytest.skip("the grader's home is under /tmp, which the sandbox replaces anyway")
    secret = home / f".tklab-redteam-{uuid.uuid4().hex}"
    secret.write_text("TOKEN-" + uuid.uuid4().hex)
    try:
        from tklab.grading.sandbox import Limits, limits_for

        code = (f"try:\n    print('READ', open({str(secret)!r}).read())\nexcept OSError as e:\n"
                f"    print('REFUSED', e.strerror)\n")
        out, fin = _finish(_run_program(tmp_path, code, limits_for(Limits(wall_seconds=60))))
    finally:
        secret.unlink()
    assert fin.returncode == 0 and "REFUSED" in out and "TOKEN-" not in out, out


#: The per-run tests a root grader runs again as a user that is not root (``test_..._for_a_grader_that_is_not_root``).
_NOT_ROOT_TESTS = ("test_a_run_cannot_write_more_than_its_budget_in_all",
                   "test_concurrent_runs_do_not_share_a_user_or_a_process_limit",
                   "test_without_a_cgroup_a_runs_processes_share_one_memory_bound_sampled",
                   "test_a_run_cannot_read_the_graders_home",
                   "test_a_run_cannot_read_the_solutions_through_git_or_any_other_copy")
_NOT_ROOT_USER = "tkgrader"


def _as_user_script(user: str, argv: list[str]) -> list[str]:
    """A command that runs ``argv`` as ``user`` (root only), in a mount namespace where the folders that keep other
    users out of this Python and the workbook (``/root``, say) are blanked and what is needed is bound back: the grader
    that is not root must be able to run the same installation."""
    import shlex

    from tklab.grading import sandbox

    needed = {*sandbox._installation(), ROOT}
    closed = sandbox._closed_folders(needed)
    lines = ["set -e", "stage=$(mktemp -d /tmp/.tklab-as-user-XXXXXX)"]
    back = []
    for c in closed:
        inside = sorted(p for p in needed if c in p.parents)
        inside = [p for p in inside if not any(q in p.parents for q in inside)]
        for p in inside:
            lines.append(f"mkdir $stage/{len(back)}; mount --bind {shlex.quote(str(p))} $stage/{len(back)}")
            back.append((c, p, len(back)))
    for c in closed:
        lines.append(f"mount -t tmpfs -o mode=755 tmpfs {shlex.quote(str(c))}")
    for _c, p, i in back:
        lines.append(f"mkdir -p {shlex.quote(str(p))}; mount --bind $stage/{i} {shlex.quote(str(p))}; "
                     f"umount $stage/{i}")
    import shutil

    lines.append("rm -r $stage")  # (empty now: what it held is mounted in place)
    lines.append(f"exec {shutil.which('runuser')} -u {user} -- {shlex.join(argv)}")
    return [str(shutil.which("unshare")), "--mount", "--propagation", "private", "sh", "-c", "\n".join(lines)]


def run_pytest_as_not_root(pytest_args: list[str], *, timeout: float) -> str:
    """Run pytest with ``pytest_args`` as the throwaway user ``_NOT_ROOT_USER`` (made with ``useradd`` if missing),
    through ``runuser`` in a private mount namespace (``_as_user_script``); its output, after asserting it passed.
    Skips where this grader is not root (the tests ran as one already) or the tools are missing."""
    import pwd
    import shutil

    if os.getuid() != 0:
        pytest.skip("this grader is not root: the tests above ran as one")
    missing = [t for t in ("useradd", "runuser", "unshare", "bwrap") if shutil.which(t) is None]
    if missing:
        pytest.skip(f"no {', '.join(missing)} here: cannot run the tests as a user that is not root")
    try:
        pwd.getpwnam(_NOT_ROOT_USER)
    except KeyError:
        subprocess.run(["useradd", "-m", _NOT_ROOT_USER], check=True, capture_output=True)
    pw = pwd.getpwnam(_NOT_ROOT_USER)
    argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "0", "-q", "-rA", *pytest_args]
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": pw.pw_dir, "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1"}
    proc = subprocess.run(_as_user_script(_NOT_ROOT_USER, ["env", *(f"{k}={v}" for k, v in env.items()), *argv]),
                          cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-4000:]
    return log


def test_the_per_run_limits_hold_for_a_grader_that_is_not_root():
    """Issue 39, item 4 for a grader that is not root: a root test run (this machine's) proved the per-run limits only
    for root. Here it runs the per-run tests again as a throwaway user (``useradd``), through ``runuser``: the run's
    writes bounded in all, a process limit of its own (its user namespace), its memory bounded in all without a
    cgroup, the grader's home unreadable; each must pass at the bubblewrap level (such a grader grades at no other: at
    the process level the code would run as the grader itself, and grading refuses)."""
    pytest_args = [str(Path(__file__).resolve()), "-k", f"({' or '.join(_NOT_ROOT_TESTS)}) and bubblewrap"]
    log = run_pytest_as_not_root(pytest_args, timeout=400)
    for name in _NOT_ROOT_TESTS:
        assert f"PASSED tests/test_redteam_class.py::{name}[bubblewrap]" in log, (name, log[-4000:])


def test_the_cgroup_a_run_gets_is_found_on_a_v2_tree_and_its_absence_explained(tmp_path, monkeypatch):
    """Detection, on a cgroup v2 tree laid out in a folder: a grader's cgroup that does not hand memory and pids to
    its children gives no group, and the report's reason says so; one that hands them gives a v2 group with the run's
    bounds written; a cgroup with no such controller (none delegated to the grader) is named as such."""
    import shutil

    from tklab.grading import rungroup, sandbox

    tree = tmp_path / "cgroup"
    own = tree / "user.slice" / "grader"
    own.mkdir(parents=True)
    monkeypatch.setattr(rungroup, "_mounts", lambda: [("/", tree, "cgroup2", set())])
    monkeypatch.setattr(rungroup, "_own_paths", lambda: {"": "/user.slice/grader"})
    monkeypatch.delenv("TKLAB_NO_CGROUP", raising=False)
    (own / "cgroup.controllers").write_text("cpu io memory pids\n")
    (own / "cgroup.subtree_control").write_text("cpu\n")
    assert rungroup.RunGroup.create("run", memory=1 << 30, processes=64) is None
    assert "does not hand memory and pids to its children (cgroup.subtree_control: cpu)" in sandbox.cgroup_problem()
    (own / "cgroup.subtree_control").write_text("memory pids\n")
    group = rungroup.RunGroup.create("run", memory=1 << 30, processes=64)
    assert group is not None and group.version == 2 and group.dirs == [own / "run"]
    assert (own / "run" / "memory.max").read_text() == str(1 << 30) and (own / "run" / "pids.max").read_text() == "64"
    shutil.rmtree(own / "run")
    (own / "cgroup.controllers").write_text("cpu io\n")
    (own / "cgroup.subtree_control").write_text("")
    assert "has no memory or pids controller (none was delegated" in sandbox.cgroup_problem()


def _v2_group_problem() -> str | None:
    """Why no run here gets a cgroup v2 group of its own (None: one does)."""
    from tklab.grading import rungroup, sandbox

    if not Path("/sys/fs/cgroup/cgroup.controllers").exists():
        controllers = Path("/sys/fs/cgroup/unified/cgroup.controllers")
        what = (f"cgroup v2 only as a side hierarchy ({controllers.parent}, controllers: "
                f"{controllers.read_text().strip() or 'none'})" if controllers.exists() else "no cgroup v2 hierarchy")
        return f"{what}; memory and pids are on cgroup v1 here, which the other cgroup tests exercise"
    g = rungroup.RunGroup.create(f"tklab-probe-{os.getpid()}", memory=1 << 30, processes=64)
    if g is None:
        return sandbox.cgroup_problem()
    version = g.version
    g.remove()
    return None if version == 2 else f"a cgroup v{version} group is made here, not v2"


@pytest.mark.skipif(_v2_group_problem() is not None, reason=f"no cgroup v2 group here: {_v2_group_problem()}")
def test_under_cgroup_v2_a_runs_processes_share_one_memory_and_process_bound(tmp_path, level):
    """The per-run accounting under cgroup v2 (the other cgroup tests ran on v1 hierarchies): four processes of
    200 MiB under 512 MiB apiece are stopped by the run's 512 MiB group, and a fork bomb stops at the run's process
    bound (the group's pids.max, as the uid's limit)."""
    from tklab.grading.sandbox import Limits, limits_for

    hogs = ("import os\npids = []\nfor _ in range(4):\n    pid = os.fork()\n    if pid == 0:\n"
            "        block = bytearray(200 << 20)\n        for i in range(0, len(block), 4096):\n"
            "            block[i] = 1\n        os._exit(0)\n    pids.append(pid)\n"
            "codes = [os.waitpid(p, 0)[1] for p in pids]\nprint('CHILDREN', codes)\n")
    box = _run_program(tmp_path, hogs, limits_for(Limits(wall_seconds=60, memory=512 << 20)))
    assert "a cgroup of its own (v2" in box.describe_group()
    out, fin = _finish(box)
    assert fin.oom_kills > 0 and "CHILDREN [0, 0, 0, 0]" not in out, (out, fin)
    bomb = ("import os, time\nkids = 0\ntry:\n    for _ in range(200):\n        if os.fork() == 0:\n"
            "            time.sleep(20)\n            os._exit(0)\n        kids += 1\nexcept OSError:\n    pass\n"
            "print('KIDS', kids, flush=True)\n")
    box = _run_program(tmp_path, bomb, limits_for(Limits(wall_seconds=60, processes=32)), "bomb")
    assert (box.group.dirs[0] / "pids.max").read_text().strip() == "32"
    out, fin = _finish(box)
    assert "KIDS" in out and int(out.split("KIDS")[1].split()[0]) < 32, out


# A run that leaves a process behind is told so in its report ("N processes the run left behind were stopped"); a
# run whose last process is still on its way out when its pipes close (a loaded machine: a class checking at once)
# is not: that process finishes within the sandbox's grace (it was reported as left behind before the grace). A
# sleeper that outlives the run is the planted case, a helper that exits 0.1 s after the run's child the benign one.
# In bubblewrap the run has a pid namespace of its own: when its first process exits the kernel ends the others, so
# even the sleeper is no process left behind there.
LEFT_BEHIND = """\
import os, sys, time
if os.fork() == 0:
    os.close(1)  # the pipe closes with the child, as a well-behaved helper's does
    time.sleep({seconds})
    os._exit(0)
print("CHILD DONE", flush=True)
"""


@pytest.mark.parametrize("seconds,reported", [(30, 1), (0.1, 0)], ids=["sleeper_outlives_the_run", "helper_exiting"])
def test_only_a_process_that_outlives_the_run_is_reported_left_behind(tmp_path, level, seconds, reported):
    from tklab.grading.sandbox import Limits, limits_for

    box = _run_program(tmp_path, LEFT_BEHIND.format(seconds=seconds), limits_for(Limits(wall_seconds=60)))
    started = time.monotonic()
    out, fin = _finish(box)
    assert "CHILD DONE" in out and fin.killed == (reported if level == "process" else 0), (out, fin)
    assert time.monotonic() - started < 10  # the sleeper was killed, not waited for
