"""Red team, issue 39: the nbgrader path's last holes.

* ``nbgrader collect`` followed a link a student left in the exchange's inbound folder: mallory's submission held
  links to alice's submitted files, and collect copied alice's work into ``submitted/mallory`` as regular files.
  ``tklab nbgrade collect`` leaves links out and names the student and the link.
* A kernel outlived a killed nbgrader: its launcher was not told and kept the kernel (and its sandbox) until the
  kernel's own limit of 600 s. Now the launcher stops when nbgrader is gone, and nbgrader when ``tklab nbgrade`` is.
* One huge output message was decoded by nbgrader before the output cap applied: a ``print`` of 200 MB is one
  message of 200 MB, read and decoded in the grader. The launcher relays the kernel's messages and refuses a frame
  past ``nbkernel.MESSAGE_BYTES`` before reading it; the cell's output says so.

Exercise ch01 (numba) as in tests/test_nbgrade.py, whose course helpers this file uses.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("nbgrader", reason="nbgrader is in the dev extra (pip install -e '.[dev]')")

from test_nbgrade import EX, FILE, _alive, _released, _student  # noqa: E402

from tklab import nbgrade  # noqa: E402
from tklab.grading import nbkernel  # noqa: E402
from tklab.paths import solution  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
#: In alice's file only.
SECRET = f"# alice-{uuid.uuid4().hex}"
#: The sleeper's kernel starts `sleep TOKEN`, to find it.
TOKEN = f"4097{uuid.uuid4().int % 10**6}"
FLOOD_MIB = 200
SLEEPER = (f"import subprocess, time\nsubprocess.Popen(['sleep', {TOKEN!r}])\nprint('SLEEPING', flush=True)\n"
           "time.sleep(300)\n")
FLOOD = f"import sys\nsys.stdout.write('z' * ({FLOOD_MIB} << 20))\nsys.stdout.flush()\n"
AFTER = "print('AFTER THE FLOOD')\n"


@pytest.fixture(scope="module")
def course(tmp_path_factory) -> Iterator[dict]:
    """ch01 released; alice, mallory, the sleeper and the flooder fetch it and submit; mallory then swaps her
    submitted notebook and file in the exchange for links to alice's."""
    import nbformat

    root = tmp_path_factory.mktemp("redteam-nbgrade")
    course, exchange = root / "course", root / "exchange"
    course.mkdir()
    exchange.mkdir()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PATH", os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
        _released(root, course, exchange)
        homes = {}
        for who in ("alice", "mallory", "sleeper", "flooder"):
            home = root / "home" / who
            home.mkdir(parents=True)
            _student(home, exchange, who, "fetch")
            homes[who] = home / EX
        (homes["alice"] / FILE).write_text(solution(FILE).read_text() + f"\n{SECRET}\n")
        for who, cells in (("sleeper", [SLEEPER]), ("flooder", [FLOOD, AFTER])):
            nb = nbformat.read(homes[who] / f"{EX}.ipynb", as_version=4)
            for i, code in enumerate(cells):
                nb.cells.insert(1 + i, nbformat.v4.new_code_cell(code))
            nbformat.write(nb, homes[who] / f"{EX}.ipynb")
        for who in homes:
            _student(homes[who].parent, exchange, who, "submit")
        inbound = exchange / "tklab" / "inbound"
        alice = next(inbound.glob(f"alice+{EX}+*"))
        mallory = next(inbound.glob(f"mallory+{EX}+*"))
        for name in (FILE, f"{EX}.ipynb"):
            (mallory / name).unlink()
            (mallory / name).symlink_to(alice / name)
        yield {"course": course, "exchange": exchange, "root": root, "alice": alice, "mallory": mallory}


@pytest.fixture(scope="module")
def collected(course: dict) -> dict:
    import contextlib
    import io

    err, out = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        mp.setenv("PATH", os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
        status = nbgrade.main(["collect", EX, "--course", str(course["course"])])
    return {"status": status, "err": err.getvalue(), "out": out.getvalue()}


def test_collect_leaves_out_a_link_to_a_classmates_submission_and_names_it(course, collected):
    """mallory's submission in the exchange holds links to alice's notebook and file: ``nbgrader collect`` copied
    alice's work in under mallory's name. ``tklab nbgrade collect`` leaves both links out, names mallory and each link
    (with where it led), exits 1, and collects everyone else as nbgrader does."""
    submitted = course["course"] / "submitted"
    assert collected["status"] == 1, collected
    for name in (FILE, f"{EX}.ipynb"):
        line = next((ln for ln in collected["err"].splitlines() if f"mallory+{EX}" in ln and f"/{name} ->" in ln), "")
        assert line.startswith("error: tklab refused: mallory: ") and str(course["alice"] / name) in line, \
            collected["err"]
        assert "is a link" in line
        assert not (submitted / "mallory" / EX / name).exists()
    assert SECRET in (submitted / "alice" / EX / FILE).read_text()
    mine = [p for p in (submitted / "mallory").rglob("*") if p.is_file()]
    assert all(SECRET not in p.read_text(errors="replace") for p in mine), mine
    for who in ("sleeper", "flooder"):
        assert (submitted / who / EX / f"{EX}.ipynb").is_file() and not (submitted / who / EX / FILE).is_symlink()


def _grader(course: Path, student: str) -> subprocess.Popen:
    """nbgrader autograde of one student's notebook in its sandboxed kernel, as ``tklab nbgrade autograde`` runs it
    (its step 2), in a process of its own."""
    code = ("import sys\nfrom pathlib import Path\nfrom tklab.grading import nbgrade\n"
            "proc, _ = nbgrade.run_nbgrader_autograde(Path(sys.argv[1]), sys.argv[2], sys.argv[3])\n"
            "print(proc.stdout, proc.stderr, file=sys.stderr)\nsys.exit(proc.returncode)\n")
    env = dict(os.environ, PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
               PYTHONPATH=str(ROOT))
    return subprocess.Popen([sys.executable, "-c", code, str(course), EX, student], cwd=course, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def _tree(pid: int) -> dict[int, int]:
    """{pid: start time} of ``pid``'s live descendants."""
    from tklab.grading import rungroup
    from tklab.grading.sandbox import _stat

    return {p: st[3] for p in rungroup._descendants(pid) if (st := _stat(p)) is not None}


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


@pytest.mark.parametrize("killed", ["nbgrader", "tklab nbgrade"])
def test_a_kernel_dies_with_a_killed_nbgrader(course, collected, killed):
    """The sleeper's cell runs for 5 minutes. nbgrader (or the ``tklab nbgrade`` above it) is killed mid-run: within a
    few seconds no process it started is left -- kernel launcher, sandbox, kernel, the kernel's own child. Before, the
    launcher never learnt that nbgrader was gone and kept the kernel to its 600 s limit."""
    from tklab.grading.sandbox import _stat

    grader = _grader(course["course"], "sleeper")
    left: dict[int, int] = {}
    try:
        deadline = time.monotonic() + 150
        while not _alive(TOKEN) and time.monotonic() < deadline and grader.poll() is None:
            time.sleep(0.2)
        assert _alive(TOKEN), grader.communicate(timeout=5)[0].decode(errors="replace")[-3000:]
        tree = _tree(grader.pid)
        kernels = [p for p in tree if b"tklab.grading.nbkernel" in _cmdline(p)]
        assert kernels, tree
        if killed == "nbgrader":
            target = next(p for p in tree if b"nbgrader\0autograde" in _cmdline(p))
            tree.pop(target)
        else:
            target = grader.pid
        os.kill(target, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            left = {p: s for p, s in tree.items() if (st := _stat(p)) is not None and st[3] == s}
            if not left and not _alive(TOKEN):
                break
            time.sleep(0.2)
        assert not left and not _alive(TOKEN), {p: _cmdline(p)[:200] for p in left}
    finally:
        for p in [*left, *_alive(TOKEN)]:
            with __import__("contextlib").suppress(OSError):
                os.kill(p, signal.SIGKILL)
        if grader.poll() is None:
            grader.kill()
        grader.wait()


def _hwm(pid: int) -> int:
    """The peak resident memory of a live process (VmHWM), in bytes; 0 once it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) << 10
    except (OSError, ValueError):
        pass
    return 0


def test_one_huge_output_message_is_refused_before_the_grader_reads_it(course, collected):
    """The flooder's cell writes 200 MB in one message. nbgrader decoded all of it (and held it) before the output
    cap applied. Now the launcher refuses the frame unread: nbgrader and every launcher stay below 200 MB at their peak
    (nbgrader, when it read the message, peaked at about 730 MB), the cell's output says the message was cut, and the
    next cell runs."""
    import nbformat

    grader = _grader(course["course"], "flooder")
    peaks: dict[int, int] = {}
    while grader.poll() is None:
        for p in _tree(grader.pid):
            line = _cmdline(p)
            if (b"nbgrader\0autograde" in line or b"tklab.grading.nbkernel" in line) and b"--inside" not in line \
                    and b"bwrap" not in line:
                peaks[p] = max(peaks.get(p, 0), _hwm(p))
        time.sleep(0.05)
    log = grader.stdout.read().decode(errors="replace") if grader.stdout else ""
    assert grader.returncode == 0, log[-3000:]
    # below the message's own size: it was never held whole (nbgrader alone is about 135 MB here)
    assert peaks and max(peaks.values()) < FLOOD_MIB << 20, {p: v >> 20 for p, v in peaks.items()}
    ran = nbformat.read(course["course"] / "autograded" / "flooder" / EX / f"{EX}.ipynb", as_version=4)
    outputs = json.dumps([c.get("outputs") for c in ran.cells])
    assert f"a message of more than {nbkernel.MESSAGE_BYTES >> 20} MiB" in outputs, outputs[:2000]
    assert "zzzz" not in outputs and "AFTER THE FLOOD" in outputs
    assert len(outputs) < 2 * nbkernel.NOTEBOOK_OUTPUT_BYTES


def test_the_kernel_path_holds_for_a_grader_that_is_not_root():
    """The kernel's sandbox for a grader that is not root (its folder a tmpfs filled inside the sandbox, its sockets
    relayed): a root test run runs the kill and flood tests again as a throwaway user (as
    ``test_redteam_class.test_the_per_run_limits_hold_for_a_grader_that_is_not_root`` does for the per-run tests)."""
    from test_redteam_class import run_pytest_as_not_root

    wanted = ("test_a_kernel_dies_with_a_killed_nbgrader[nbgrader]",
              "test_one_huge_output_message_is_refused_before_the_grader_reads_it")
    log = run_pytest_as_not_root([f"{Path(__file__).resolve()}::{name}" for name in wanted], timeout=500)
    for name in wanted:
        assert f"PASSED tests/test_redteam_nbgrade.py::{name}" in log, (name, log[-4000:])
