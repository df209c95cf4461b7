"""A mischievous student's ch01 files against check's isolation, at every sandbox level this machine has.

Each planted file is the chapter-1 solution with something done at import time: forge a passing verdict,
leave a detached process behind holding the output pipe, write outside its folder, read the grader's
environment or the solutions, eat memory or disk. The run must not be fooled, must end on time with
nothing left running, and must say how it was isolated."""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

import pytest
from answers import answer

from tklab import sandbox
from tklab.grading.check import EXIT_FAILED, check, main
from tklab.grading.runner import run_isolated

ROOT = Path(__file__).resolve().parent.parent
SOLUTION = (ROOT / "solutions" / "ch01_naive_matmul" / "ch01_naive_matmul.py").read_text()
WRONG = SOLUTION.replace(answer("ch01_naive_matmul", "C["), answer("ch01_naive_matmul", "C[") + " + 1.0")
LEVELS = ["process", "bubblewrap"]
#: The time limit of a run where the limit is not what a test tests: far above a run of chapter 01 (seconds),
#: so a loaded 2-core machine does not miss it; a test of the limit itself sets its own.
RUN_SECONDS = 120


@pytest.fixture(params=LEVELS)
def level(request, monkeypatch):
    monkeypatch.setenv("TKLAB_SANDBOX", request.param)
    if sandbox.isolation().level != request.param:
        pytest.skip(f"no {request.param} here: {sandbox.isolation().describe()}")
    return request.param


def _plant(folder: Path, prelude: str, body: str = SOLUTION) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    f = folder / "ch01_naive_matmul.py"
    f.write_text(prelude + "\n" + body)
    return f


def _alive(token: str) -> list[int]:
    """pids whose command line mentions ``token``."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if token.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                    found.append(int(entry))
            except OSError:
                pass
    return found


# ---- the verdict cannot be forged ----------------------------------------------------------------

FORGE = """\
import json, os, sys
claim = json.dumps({"ok": True, "passed": True, "status": "ok", "cases": [], "error": None})
for i, a in enumerate(sys.argv):  # the old result-file path was on the command line
    if a in ("--out", "--result") and i + 1 < len(sys.argv):
        open(sys.argv[i + 1], "w").write(claim)
for name in ("result.json", "../result.json", "verdict.json"):
    try:
        open(name, "w").write(claim)
    except OSError:
        pass
for fd in range(3, 256):  # every open descriptor: the parent's channel among them
    try:
        os.write(fd, claim.encode())
        os.write(fd, b"\\x00\\x00\\x00\\x2a" + b'{"type": "done", "nbytes": 0, "ok": true}')
    except OSError:
        pass
print("PASSED")
os._exit(0)
"""


def test_a_file_that_writes_a_passing_verdict_everywhere_fails(tmp_path, level, capsys):
    f = _plant(tmp_path, FORGE, WRONG)
    res = check(f, timeout=RUN_SECONDS)
    assert res.passed is False and res.verdict == "FAILED", res
    assert "may import only numba, numpy and math" in res.compile_error, res  # refused before it runs
    assert main([str(f), "--timeout", str(RUN_SECONDS)]) == EXIT_FAILED
    assert "FAILED" in capsys.readouterr().out
    out = run_isolated("ch01_naive_matmul", f, mode="sim", timeout=RUN_SECONDS)  # the sandbox's own layer, run anyway
    assert out.status in ("error", "crashed") and out.evidence.value == "not-established", out.message


def test_the_same_file_without_the_forgery_is_judged_on_its_outputs(tmp_path, level):
    assert check(_plant(tmp_path / "right", ""), timeout=RUN_SECONDS).passed is True
    wrong = check(_plant(tmp_path / "wrong", "", WRONG), timeout=RUN_SECONDS)
    assert wrong.passed is False and wrong.run_status == "wrong" and wrong.mismatch["wrong"] > 0


# ---- time limits hold for the whole tree ------------------------------------------------------------

def _detached_sleep(token: str, *, new_session: bool = True, clear_env: bool = False) -> str:
    return f"""\
import os, subprocess
subprocess.Popen(["sleep", "{token}"], start_new_session={new_session}, env={{}} if {clear_env} else None)
"""


def _daemon(token: str) -> str:  # double fork + setsid: the grandchild is reparented away at once
    return f"""\
import os
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execvp("sleep", ["sleep", "{token}"])
    os._exit(0)
os.wait()
"""


def _token() -> str:
    return f"40{uuid.uuid4().int % 10**8}.5"  # a unique duration, so the test finds exactly its sleep


def test_a_detached_process_holding_the_output_does_not_hold_the_check(tmp_path, level):
    token = _token()
    f = _plant(tmp_path, _detached_sleep(token))
    t = time.monotonic()
    out = run_isolated("ch01_naive_matmul", f, mode="sim", timeout=RUN_SECONDS)
    took = time.monotonic() - t
    assert out.status == "ok", out.message  # the kernel is right; the sleep is the mischief
    # a run that waited for the sleep would end only at the limit; half of it leaves a loaded machine its start-up
    assert took < RUN_SECONDS / 2, f"took {took:.1f} s: the run waited for the sleep holding its stdout"
    assert not _alive(token), "the detached sleep outlived the check"


@pytest.mark.parametrize("how", ["session", "daemon"])
def test_time_limit_is_wall_clock_for_the_whole_tree(tmp_path, level, how):
    token = _token()
    prelude = _detached_sleep(token) if how == "session" else _daemon(token)
    f = _plant(tmp_path, prelude + "while True:\n    pass\n")
    t = time.monotonic()
    out = run_isolated("ch01_naive_matmul", f, mode="sim", timeout=3)
    took = time.monotonic() - t
    assert out.status == "timeout" and "no result within 3 s, while importing" in out.message, out.message
    assert "every process it started" in out.message
    assert took < 10, f"a 3 s limit took {took:.1f} s"
    assert not _alive(token), "a process of the run outlived its time limit"


def test_a_process_with_a_cleared_environment_still_dies_in_the_sandbox(tmp_path, level):
    token = _token()
    f = _plant(tmp_path, _detached_sleep(token, clear_env=True) + "import time\ntime.sleep(1)\n")
    run_isolated("ch01_naive_matmul", f, mode="sim", timeout=RUN_SECONDS)
    left = _alive(token)
    for pid in left:  # clean up what the weaker level cannot catch, then say so
        os.kill(pid, 9)
    if level == "bubblewrap":
        assert not left, "the PID namespace should have ended every process"
    elif left:
        pytest.xfail("without bubblewrap a process that clears its environment and leaves the session escapes "
                     "(the report says the filesystem and processes are not fenced off)")


# ---- the filesystem, the environment, the limits --------------------------------------------------------

def _writes_outside(outside: Path, original: Path) -> str:
    return f"""\
import os
for target in ({str(outside / 'pwned.txt')!r}, {str(original / 'pwned.txt')!r}):
    try:
        with open(target, "w") as fh:
            fh.write("pwned")
        print("WROTE", target)
    except OSError as e:
        print("REFUSED", target, type(e).__name__)
print("CWD", os.getcwd(), sorted(os.listdir(".")))
"""


def test_writes_outside_the_run_folder_are_refused_or_reported(tmp_path, level):
    outside = tmp_path / "outside"
    outside.mkdir(mode=0o755)
    student = tmp_path / "class" / "mallory"
    f = _plant(student, _writes_outside(outside, student))
    out = run_isolated("ch01_naive_matmul", f, mode="sim", timeout=RUN_SECONDS)
    assert out.status == "ok", out.message
    assert "CWD" in out.output and "tklab-run-" in out.output and str(student) not in out.output.split("CWD")[1]
    iso = sandbox.isolation()
    if iso.level == "process" and not iso.user.startswith("nobody"):
        assert "not fenced off" in out.isolation  # the report says what this level does not do
        pytest.skip("runs as the grader's own user without a sandbox: writes are not fenced off here")
    assert not (outside / "pwned.txt").exists() and not (student / "pwned.txt").exists(), out.output
    assert out.output.count("REFUSED") == 2


def test_the_environment_is_clean(tmp_path, level, monkeypatch):
    monkeypatch.setenv("TKLAB_TEST_SECRET", "hunter2")
    f = _plant(tmp_path, "import os\nprint('ENV', sorted(os.environ))\nprint('SECRET', os.environ.get("
               "'TKLAB_TEST_SECRET'))\n")
    out = run_isolated("ch01_naive_matmul", f, mode="sim", timeout=RUN_SECONDS)
    assert out.status == "ok", out.message
    assert "hunter2" not in out.output and "SECRET None" in out.output
    env_line = next(ln for ln in out.output.splitlines() if ln.startswith("ENV"))
    assert env_line.count(",") < 20, env_line  # a handful of variables, not the grader's dozens


def test_the_solutions_are_hidden_in_the_sandbox(tmp_path, level):
    target = ROOT / "solutions" / "ch01_naive_matmul" / "ch01_naive_matmul.py"
    f = _plant(tmp_path, f"import os\nprint('SEES', os.path.exists({str(target)!r}))\n")
    out = run_isolated("ch01_naive_matmul", f, mode="sim", timeout=RUN_SECONDS)
    assert out.status == "ok", out.message
    if level == "bubblewrap":
        assert "SEES False" in out.output
    else:
        assert "SEES" in out.output  # readable without a sandbox: the report says the filesystem is open


def test_memory_and_file_size_are_limited(tmp_path, level):
    big = _plant(tmp_path / "mem", "hog = bytearray(16 << 30)\n")
    out = run_isolated("ch01_naive_matmul", big, mode="sim", timeout=RUN_SECONDS)
    assert out.status in ("error", "crashed") and "MemoryError" in out.message + out.output, out.message
    disk = _plant(tmp_path / "disk", "open('big.bin', 'wb').write(bytes(300 << 20))\n")
    out = run_isolated("ch01_naive_matmul", disk, mode="sim", timeout=RUN_SECONDS)
    assert out.status == "error" and "File too large" in out.message, out.message
    assert "4096 MiB address space" in out.isolation and "256 MiB per file" in out.isolation


def test_the_report_names_the_isolation_level(tmp_path, level):
    res = check(_plant(tmp_path, ""), timeout=RUN_SECONDS)
    assert res.passed is True
    assert res.isolation.startswith("bubblewrap sandbox" if level == "bubblewrap" else "separate process")
    assert "s wall clock" in res.isolation  # the detail, for graders (and --json) ...
    said = "where it ran: in a sandbox" if level == "bubblewrap" else "where it ran: in a separate process"
    assert said in repr(res) and "wall clock" not in repr(res)  # ... the report says it in the learner's words


def test_without_bubblewrap_the_report_says_what_is_not_fenced_off(monkeypatch):
    monkeypatch.delenv("TKLAB_SANDBOX", raising=False)
    monkeypatch.setattr(sandbox.shutil, "which", lambda name: None)
    sandbox._bwrap_works.cache_clear()
    try:
        iso = sandbox.isolation()
        assert iso.level == "process"
        assert "apt install bubblewrap" in iso.describe() and "not fenced off" in iso.describe()
    finally:
        sandbox._bwrap_works.cache_clear()
