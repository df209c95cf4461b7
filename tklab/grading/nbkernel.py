"""The kernel ``nbgrader autograde`` runs a submitted notebook in: started in the sandbox a learner's check runs in.

Why: ``nbgrader autograde`` executes each submitted notebook, cells the student added included, in a kernel of the
grader's own user. A cell there left a daemon that rewrote the gradebook after autograde had exited, and another
printed classmates' submissions into its output, which ``generate_feedback`` handed back (issue 39). So ``tklab
nbgrade autograde`` has nbgrader start its kernels through this module (``kernelspec``): each kernel runs in
``tklab.grading.sandbox`` as a check's run does -- bubblewrap where the machine has it (no network, its own PID
namespace, a private ``/tmp``, the course folder, the exchange, the solutions, the workbook's other folders and
the grader's secrets hidden), as an unprivileged user, with limits -- in a fresh folder that holds only what the
notebook needs: a copy of the student's exercise file (``intake``: a regular file, no link followed), the
verdict the grader computed for that file, and a copy of the exercise's spec (``solutions/<id>/spec.py``, the
registry's folder there: ``TKLAB_SOLUTIONS``). The kernel binds its ZeroMQ sockets in a folder of its own bound into
the sandbox (transport ``ipc``: there is no network inside); the launcher binds the endpoints nbgrader connects to,
out of the sandbox's sight, and relays every message (``_Relay``), refusing unread any frame past ``MESSAGE_BYTES``
(nbgrader decoded a 200 MB ``print`` whole before any output cap applied). When the kernel ends (nbgrader shuts it
down after the notebook), every process it started is killed before this launcher exits, so before nbgrader records
the notebook's grades; and nothing in the sandbox can reach the gradebook anyway. When nbgrader itself is killed, the
launcher sees its parent gone and does the same (the kernel lived on to ``KERNEL_SECONDS``).

The launcher, on the grader's side: ``python -m tklab.grading.nbkernel -f CONNECTION [kernel arguments]``,
started by jupyter_client in the autograded notebook's folder, told the job by ``JOB_VAR`` (``job_env``). Inside
the sandbox: ``python -m tklab.grading.nbkernel --inside -f CONNECTION ...`` drops to its user, limits itself and
runs ipykernel.

``BoundedExecute`` is the preprocessor nbgrader executes the notebooks with (in place of its ``Execute``): it keeps
at most 64 KiB of a cell's outputs and 1 MiB of a notebook's, as they arrive.

Public API: ``KERNEL_NAME``, ``kernelspec(folder)``, ``job_env(...)``, ``BoundedExecute``, ``main(argv)``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..paths import REPO

#: The kernelspec's name (``--Execute.kernel_name``).
KERNEL_NAME = "tklab-sandboxed"
#: Environment variable (JSON) with the launcher's job: exercise, file name, verdicts folder, hidden folders, seconds.
JOB_VAR = "TKLAB_NBKERNEL_JOB"
#: Environment variable (JSON) with the limits the kernel sets on itself inside.
_LIMITS_VAR = "TKLAB_NBKERNEL_LIMITS"
#: Wall-clock seconds one notebook's kernel may live (nbgrader's own limit is per cell).
KERNEL_SECONDS = 600.0


def kernelspec(folder: Path) -> str:
    """Write ``folder/kernels/<KERNEL_NAME>/kernel.json`` (``folder`` goes on ``JUPYTER_PATH``); returns its name."""
    spec = {"argv": [sys.executable, "-m", "tklab.grading.nbkernel", "-f", "{connection_file}"],
            "display_name": "Python 3 (tklab grading sandbox)", "language": "python", "interrupt_mode": "signal",
            "env": {"PYTHONPATH": str(REPO)}}
    target = folder / "kernels" / KERNEL_NAME
    target.mkdir(parents=True, exist_ok=True)
    (target / "kernel.json").write_text(json.dumps(spec, indent=1))
    return KERNEL_NAME


def job_env(*, exercise: str, filename: str, verdicts: Path, hide: Sequence[Path],
            seconds: float = KERNEL_SECONDS) -> dict[str, str]:
    """The environment variable that tells each launcher what to hand its kernel and what to hide."""
    return {JOB_VAR: json.dumps({"exercise": exercise, "file": filename, "verdicts": str(verdicts),
                                 "hide": [str(h) for h in hide], "seconds": seconds})}


def _connection(args: Sequence[str]) -> Path:
    for i, a in enumerate(args):
        if a == "-f" and i + 1 < len(args):
            return Path(args[i + 1])
        if a.startswith("--f="):
            return Path(a[4:])
    raise SystemExit("tklab.grading.nbkernel: no connection file (-f)")


def _stage(work: Path, job: dict, notebook_dir: Path) -> None:
    """The kernel's folder: the student's exercise file (copied by ``intake``) and the grader's verdict for it."""
    from . import intake

    copies, _ = intake.fetch(notebook_dir.parent, notebook_dir.name, {job["file"]: job["file"]}, work)
    kept = work / "verdicts" / job["exercise"]
    kept.mkdir(parents=True)
    from . import specs

    spec_file = specs.spec_file(job["exercise"])  # the notebook's test cells look the exercise up; solutions/ is hidden
    if spec_file is not None:
        (work / "solutions" / job["exercise"]).mkdir(parents=True)
        shutil.copyfile(spec_file, work / "solutions" / job["exercise"] / specs.SPEC_FILE)
    copy = copies.get(job["file"])
    if copy is not None:
        sha = hashlib.sha256(copy.read_bytes()).hexdigest()
        record = Path(job["verdicts"]) / job["exercise"] / f"{sha}.json"
        if record.is_file():
            shutil.copyfile(record, kept / record.name)


def _sockets_to(folder: Path, ids: tuple[int, int] | None, *, back: bool) -> None:
    """Let the kernel's user make its sockets in ``folder`` (``back=False``), or, after it ended, take the folder
    back and remove whatever that user left in it."""
    if ids is None:
        return
    if not back:
        os.chown(folder, ids[0], -1)
        return
    with contextlib.suppress(OSError):
        os.chown(folder, os.getuid(), -1)
    with contextlib.suppress(OSError):
        for entry in os.scandir(folder):
            if entry.stat(follow_symlinks=False).st_uid == ids[0]:
                with contextlib.suppress(OSError):
                    if entry.is_dir(follow_symlinks=False):
                        shutil.rmtree(entry.path, ignore_errors=True)
                    else:
                        os.unlink(entry.path)


def _kernel_pids(box: object) -> list[int]:
    """The sandboxed kernel's own processes (its interrupt goes to them, not to bubblewrap's). Matched on the
    arguments, not on a word in the command line: bubblewrap's command line holds the kernel's whole command too, and
    a SIGINT to bubblewrap ended the sandbox, so nbgrader's interrupt of a cell past its time limit killed the kernel
    and failed the notebook (tests/test_class_load.py, the sleeper)."""
    from .sandbox import _run_processes

    proc = getattr(box, "proc", None)
    if proc is None:
        return []
    found = []
    for pid in _run_processes(proc.pid, box.token.encode()):  # type: ignore[attr-defined]
        with contextlib.suppress(OSError):
            if Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[1:4] == _INSIDE:
                found.append(pid)
    return found


#: The kernel's arguments after the interpreter, as ``launch`` starts it.
_INSIDE = [b"-m", b"tklab.grading.nbkernel", b"--inside"]

#: The largest frame of a message the launcher takes from the kernel (a notebook keeps no more output than this).
MESSAGE_BYTES = 1 << 20
_CHANNELS = ("shell", "control", "stdin", "hb")


class _Relay:
    """The kernel's ZeroMQ channels, relayed by the launcher between nbgrader (which connects to the endpoints its
    connection file names, bound here) and the kernel (which binds endpoints of its own in a folder bound into the
    sandbox, the only sockets it can reach).

    Why: nbgrader decodes every message its kernel sends before any cap on a cell's output applies, so one ``print`` of
    200 MB became 200 MB of JSON decoded in the grader. Here each socket towards the kernel refuses a frame larger than
    ``MESSAGE_BYTES`` before it is read (ZeroMQ's ``MAXMSGSIZE``: the peer is dropped and reconnects), and nbgrader gets
    a note in the cell's output instead, naming the bound. The kernel cannot bypass the relay: nbgrader's endpoints
    are in a folder the sandbox does not show."""

    def __init__(self, front: dict, back: dict) -> None:
        import zmq

        self.zmq = zmq
        self.ctx = zmq.Context()
        self.front, self.back, self.key = front, back, str(front.get("key", ""))
        self.scheme = str(front.get("signature_scheme", "hmac-sha256"))
        self.pairs: list[tuple[Any, Any]] = []
        self.endpoints: list[str] = []  # each pair's endpoint towards the kernel
        self.dropped = 0
        self._parent: dict | None = None
        self._lost: str | None = None  # the execute request whose messages a drop may have taken
        self._idle: set[str] = set()  # the requests whose "idle" status has reached nbgrader
        self._idle_due = 0.0  # when to tell nbgrader the kernel is idle, if the kernel's own word was lost
        self._stop = threading.Event()
        ident = os.urandom(16).hex().encode()  # one identity for shell and stdin: the kernel's input requests
        for name in _CHANNELS:  # go to the shell's sender on the stdin socket
            f = self.ctx.socket(zmq.ROUTER)
            f.bind(self._endpoint(front, name))
            b = self.ctx.socket(zmq.DEALER)
            b.setsockopt(zmq.MAXMSGSIZE, MESSAGE_BYTES)
            b.setsockopt(zmq.LINGER, 0)
            if name in ("shell", "stdin"):
                b.setsockopt(zmq.IDENTITY, ident)
            b.connect(self._endpoint(back, name))
            self.pairs.append((f, b))
            self.endpoints.append(self._endpoint(back, name))
        self.pub = self.ctx.socket(zmq.XPUB)
        self.pub.bind(self._endpoint(front, "iopub"))
        self.sub = self.ctx.socket(zmq.XSUB)
        self.sub.setsockopt(zmq.MAXMSGSIZE, MESSAGE_BYTES)
        self.sub.connect(self._endpoint(back, "iopub"))
        self.pairs.append((self.pub, self.sub))
        self.endpoints.append(self._endpoint(back, "iopub"))
        self.monitors = [b.get_monitor_socket(zmq.EVENT_DISCONNECTED) for _, b in self.pairs]
        self.thread = threading.Thread(target=self._run, name="tklab-kernel-relay", daemon=True)

    @staticmethod
    def _endpoint(info: dict, name: str) -> str:
        return f"ipc://{info['ip']}-{info[name + '_port']}"

    def start(self) -> None:
        self.thread.start()

    @staticmethod
    def _parts(frames: list) -> tuple[dict, dict]:
        """(header, parent header) of a message ({} where a part is not a small JSON object)."""
        out = []
        try:
            at = next(i for i, f in enumerate(frames) if len(f) == 9 and bytes(f) == b"<IDS|MSG>")
        except StopIteration:
            return {}, {}
        for part in frames[at + 2:at + 4]:
            value: Any = {}
            if len(part) < 1 << 16:
                with contextlib.suppress(ValueError, UnicodeDecodeError):
                    value = json.loads(bytes(part))
            out.append(value if isinstance(value, dict) else {})
        return (out + [{}, {}])[0], (out + [{}, {}])[1]

    def _remember(self, frames: list) -> None:
        """The header of the last execute request nbgrader sent: the parent of a note in that cell's output."""
        header, _ = self._parts(frames)
        if header.get("msg_type") == "execute_request":
            self._parent = header

    def _heard(self, frames: list, channel: str) -> None:
        """Watch the kernel's word on a request a drop may have cut short: its reply (then nbgrader waits for "idle",
        which the drop may have taken) and its "idle" status."""
        if self._lost is None:
            return
        header, parent = self._parts(frames)
        if parent.get("msg_id") != self._lost:
            return
        if channel == "iopub" and header.get("msg_type") == "status":
            self._idle.add(self._lost)
        elif channel == "shell" and header.get("msg_type") == "execute_reply":
            self._idle_due = time.monotonic() + 0.5

    def _idle_if_lost(self) -> None:
        """Half a second after the reply to a request whose messages were cut, and no "idle" seen for it: say it, as
        the kernel did (nbgrader fails a notebook whose kernel never said it was idle after a cell)."""
        if not self._idle_due or time.monotonic() < self._idle_due or self._parent is None:
            return
        self._idle_due = 0.0
        if self._lost not in self._idle:
            self._send("status", {"execution_state": "idle"}, b"status")

    def _send(self, kind: str, content: dict, topic: bytes) -> None:
        from jupyter_client.session import Session

        session = Session(key=self.key.encode(), signature_scheme=self.scheme, username="tklab-grader")
        session.send(self.pub, kind, content, parent={"header": self._parent}, ident=topic)

    def _note(self, alive: bool) -> None:
        if not alive or self._parent is None:
            return
        self.dropped += 1
        self._lost = self._parent["msg_id"]
        text = (f"[output cut by the grader: the kernel sent a message of more than {MESSAGE_BYTES >> 20} MiB, which "
                "the grader does not read]\n")
        self._send("stream", {"name": "stderr", "text": text}, b"stream.stderr")

    def _run(self) -> None:
        zmq = self.zmq
        poller = zmq.Poller()
        ends = {}
        for f, b in self.pairs:
            poller.register(f, zmq.POLLIN)
            poller.register(b, zmq.POLLIN)
            ends[f], ends[b] = b, f
        for m in self.monitors:
            poller.register(m, zmq.POLLIN)
        while not self._stop.is_set():
            try:
                ready = dict(poller.poll(100))
            except zmq.ZMQError:
                return
            for sock in ready:
                if sock in ends:
                    frames = sock.recv_multipart(copy=False)
                    if sock is self.pairs[0][0]:  # nbgrader's shell requests
                        self._remember(frames)
                    elif sock is self.pairs[0][1]:
                        self._heard(frames, "shell")
                    elif sock is self.sub:
                        self._heard(frames, "iopub")
                    ends[sock].send_multipart(frames, copy=False)
                else:  # a socket towards the kernel was dropped: an oversized frame (or the kernel's end)
                    from zmq.utils.monitor import recv_monitor_message

                    recv_monitor_message(sock)
                    time.sleep(0.05)
                    alive = self.alive()
                    if alive:  # ZeroMQ does not reconnect after a refused frame: connect again (subscriptions too)
                        b, where = self.pairs[self.monitors.index(sock)][1], self.endpoints[self.monitors.index(sock)]
                        with contextlib.suppress(zmq.ZMQError):
                            b.disconnect(where)
                        b.connect(where)
                    self._note(alive)
            self._idle_if_lost()

    def alive(self) -> bool:
        return True

    def close(self) -> None:
        self._stop.set()
        if self.thread.is_alive():
            self.thread.join(timeout=2)
        for _, b in self.pairs:
            with contextlib.suppress(Exception):
                b.disable_monitor()
        self.ctx.destroy(linger=0)


def _watch_parent(parent: int) -> None:
    """Stop this launcher (SIGTERM: its kernel's processes are killed on the way out) when its parent, nbgrader, is
    gone: killed, nbgrader's kernel manager cannot shut the kernel down, and the kernel lived on until its own time
    limit (``KERNEL_SECONDS``). Polled by a thread, as nbgrader may start its kernels from a thread whose end a
    ``PR_SET_PDEATHSIG`` would take for nbgrader's."""
    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.2)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="tklab-kernel-parent", daemon=True).start()


def launch(args: Sequence[str]) -> int:
    """The grader's side: stage the kernel's folder, start it in the sandbox, supervise it, kill what is left."""
    from .sandbox import Limits, Sandbox, adopt_orphans, limits_for

    job = json.loads(os.environ[JOB_VAR])
    conn = _connection(args)
    info = json.loads(conn.read_text())
    if info.get("transport") != "ipc" or not Path(info.get("ip", "")).is_absolute():
        raise SystemExit("tklab.grading.nbkernel: the kernel must use transport ipc with an absolute path (there is "
                         "no network in the sandbox); run `python -m tklab nbgrade autograde`, which sets both")
    parent = os.getppid()
    adopt_orphans()
    work = Path(tempfile.mkdtemp(prefix="tklab-kernel-"))
    sockets = Path(tempfile.mkdtemp(prefix="tklab-kernel-sockets-"))  # the kernel's own endpoints (``_Relay``)
    box = None
    relay = None
    try:
        signal.signal(signal.SIGTERM, _stop)
        _watch_parent(parent)
        _stage(work, job, Path.cwd())
        inner = dict(info, ip=str(sockets / "k"))
        (work / "connection.json").write_text(json.dumps(inner))
        for sub in ("tmp", "ipython", "runtime"):
            (work / sub).mkdir()
        limits = limits_for(Limits(wall_seconds=float(job["seconds"])))
        box = Sandbox(work, hide=[Path(h) for h in job["hide"]], limits=limits, binds=[sockets])
        box.hand_over()
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(work), "TMPDIR": str(work / "tmp"),
               "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "PYTHONPATH": str(REPO), "PYTHONNOUSERSITE": "1",
               "PYTHONDONTWRITEBYTECODE": "1", "IPYTHONDIR": str(work / "ipython"), "MPLCONFIGDIR": str(work / "tmp"),
               "JUPYTER_RUNTIME_DIR": str(work / "runtime"), "TKLAB_NBGRADE_VERDICTS": str(work / "verdicts"),
               "TKLAB_SOLUTIONS": str(work / "solutions"),  # the registry's folder: a copy of this exercise's spec
               "NBGRADER_EXECUTION": os.environ.get("NBGRADER_EXECUTION", "autograde"),
               _LIMITS_VAR: limits.to_json()}
        rest = [a for i, a in enumerate(args) if a != "-f" and not a.startswith("--f=")
                and not (i > 0 and args[i - 1] == "-f")]
        _sockets_to(sockets, box.run_ids(), back=False)

        def interrupt(signum: int, frame: object) -> None:
            for pid in _kernel_pids(box):
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGINT)

        signal.signal(signal.SIGINT, interrupt)
        relay = _Relay(info, inner)
        started = box
        relay.alive = lambda: started.proc is not None and started.proc.poll() is None  # type: ignore[method-assign]
        relay.start()
        box.start([sys.executable, *(a.decode() for a in _INSIDE), "-f", str(work / "connection.json"), *rest], env)
        assert box.proc is not None and box.proc.stdout is not None
        fin = box.supervise({box.proc.stdout.fileno(): lambda b: sys.stderr.buffer.write(b)})
        return 0 if fin.returncode in (0, None) else 1
    except KeyboardInterrupt:
        return 1
    finally:
        if box is not None:
            box.kill()  # every process of the kernel, before nbgrader goes on to the grades
            _sockets_to(sockets, box.run_ids(), back=True)
        if relay is not None:
            relay.close()
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(sockets, ignore_errors=True)


def _stop(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


#: What nbgrader keeps of one cell's outputs, and of one notebook's, as they arrive (``BoundedExecute``).
CELL_OUTPUT_BYTES = 64 << 10
NOTEBOOK_OUTPUT_BYTES = 1 << 20


def _bounded_execute() -> type:
    """nbgrader's ``Execute`` preprocessor, keeping at most ``CELL_OUTPUT_BYTES`` of each cell's outputs and
    ``NOTEBOOK_OUTPUT_BYTES`` of the notebook's as the messages arrive: past either, the rest of the cell's output is
    dropped and one line on stderr says so. nbgrader's own ``LimitOutput`` runs after the whole notebook was held in
    the grader's memory and counts lines: one line of 8 MiB went into the autograded notebook and the feedback."""
    from nbformat.v4 import new_output
    from nbgrader.preprocessors import Execute

    class BoundedExecute(Execute):  # type: ignore[misc, valid-type]
        def preprocess(self, nb: Any, resources: Any = None, km: Any = None) -> Any:
            self._kept: dict[int, int] = {}
            self._cut: set[int] = set()
            return super().preprocess(nb, resources, km)

        def output(self, outs: list, msg: dict, display_id: str | None, cell_index: int) -> Any:
            content = msg.get("content", {})
            text = content.get("text") if msg.get("msg_type") == "stream" else None
            size = len(text) if isinstance(text, str) else len(json.dumps(content, default=str))
            if cell_index in self._cut or (self._kept.get(cell_index, 0) + size > CELL_OUTPUT_BYTES
                                           or sum(self._kept.values()) + size > NOTEBOOK_OUTPUT_BYTES):
                if cell_index not in self._cut:
                    self._cut.add(cell_index)
                    outs.append(new_output("stream", name="stderr", text=(
                        f"[output cut by the grader: a cell keeps at most {CELL_OUTPUT_BYTES >> 10} KiB of output, a "
                        f"notebook {NOTEBOOK_OUTPUT_BYTES >> 10} KiB]\n")))
                return None
            self._kept[cell_index] = self._kept.get(cell_index, 0) + size
            return super().output(outs, msg, display_id, cell_index)

    BoundedExecute.__module__, BoundedExecute.__qualname__ = __name__, "BoundedExecute"
    return BoundedExecute


def __getattr__(name: str) -> Any:
    """``BoundedExecute``, made on first use (nbgrader imports it by name; the kernel's side never needs nbgrader)."""
    if name == "BoundedExecute":
        cls = _bounded_execute()
        globals()[name] = cls
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def inside(args: Sequence[str]) -> None:
    """In the sandbox: become the run's user, limit, and be an ipykernel on the connection file."""
    from .sandbox import Limits, apply_limits, drop_privileges

    drop_privileges()
    limits = os.environ.pop(_LIMITS_VAR, "")
    if limits:
        apply_limits(Limits(**json.loads(limits)))
    from ipykernel.kernelapp import IPKernelApp

    IPKernelApp.launch_instance(argv=list(args))


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["--inside"]:
        inside(args[1:])
        return 0
    return launch(args)


if __name__ == "__main__":
    raise SystemExit(main())
