"""Reading a class folder that the students control: in a child process with limits, never in the grader.

Why: a class folder is written by the students, so everything in it is hostile input. Read by the grader
itself, a FIFO named like a file blocks the grader for ever (and keeps the sheet locked), a folder that is a
link to a classmate's (``class/mallory -> alice``) hands one student another's work, and a huge tree, a
device or a hung network file system costs the whole class. Here every look at the class folder happens in
a short-lived child (``python -I -S intake.py``: the standard library only, no tklab, no site packages) that
limits itself first thing (address space, CPU time, file size, no core, dies with the grader), and the
grader gives it a wall-clock limit per student. What comes back is names and copies, never a path the
grader then opens in the student's folder.

* ``survey(class_dir, filenames)``: the class roster and, per student, the files named after an exercise.
  A student folder that is a link, of any kind, is refused; hidden entries are skipped. In a student's
  folder (walked without following a link, at most ``MAX_ENTRIES`` entries and ``MAX_DEPTH`` levels) a file
  counts only when it is a regular file (not a link, FIFO, device or socket) of at most ``MAX_FILE_BYTES``;
  anything else named like an exercise is refused, saying what it is; a linked folder is not followed
  (noted). No file is opened. A student whose folder cannot be read within ``STUDENT_SECONDS`` is refused
  ("stopped after N s") and a fresh child reads the others.
* ``fetch(class_dir, student, files, dest)``: copies that student's files into ``dest`` (a fresh folder the
  grader owns), each opened from the student's folder down without following any link on the way (``openat``
  with ``O_NOFOLLOW``; a file swapped for a link or a FIFO since the survey is refused, and ``O_NONBLOCK``
  keeps a FIFO from blocking), checked again to be a regular file, at most ``MAX_FILE_BYTES`` read. The
  grader then checks its own copy.

Names travel as ``os.fsdecode`` strings (bytes that are not UTF-8 survive as surrogates), so a folder called
anything at all keeps its name.

Public API: ``Survey``, ``Folder``, ``survey(class_dir, filenames, students=None)``, ``fetch(...)``,
``IntakeError``, and the limits ``MAX_FILE_BYTES``, ``MAX_ENTRIES``, ``MAX_DEPTH``, ``STUDENT_SECONDS``.
"""

from __future__ import annotations

import errno
import json
import os
import selectors
import stat
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

#: A learner's exercise file is a few KB; the checker refuses more than this (``check.MAX_SOURCE_BYTES``).
MAX_FILE_BYTES = 512 * 1024
#: Entries looked at in one student's folder before the walk stops (a generated tree is not hand-in work).
MAX_ENTRIES = 20_000
#: Folder levels below a student's folder that are walked.
MAX_DEPTH = 24
#: Student folders in a class folder; more is not a class (a student flooding a shared drop folder).
MAX_STUDENTS = 100_000
#: Wall-clock seconds for reading one student's folder (the survey) or copying their files (fetch).
STUDENT_SECONDS = 20.0
#: Limits the child sets on itself before it reads anything.
_ADDRESS_SPACE = 1 << 30
_CPU_SECONDS = 600


class IntakeError(RuntimeError):
    """The class folder itself cannot be read (the message says why); single students are refused instead."""


@dataclass
class Folder:
    """What one student's folder holds: ``found`` {file name: path relative to the folder}, ``refused``
    {file name: why}, ``notes`` (linked folders not followed, a walk cut short), ``dirs`` (its top folders)."""

    found: dict[str, str] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    dirs: list[str] = field(default_factory=list)


@dataclass
class Survey:
    """A class folder: ``folders`` {student: Folder} and ``refused`` {student: why the whole folder is refused}."""

    folders: dict[str, Folder] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)

    @property
    def roster(self) -> list[str]:
        return sorted([*self.folders, *self.refused])


# ---- in the child (standard library only: this file runs as a script) ---------------------------------------

def _limit_self() -> None:
    """First thing in the child: bounds that hold whatever the folder holds."""
    import ctypes
    import resource
    import signal

    for which, value in ((resource.RLIMIT_AS, _ADDRESS_SPACE), (resource.RLIMIT_CPU, _CPU_SECONDS),
                         (resource.RLIMIT_FSIZE, MAX_FILE_BYTES), (resource.RLIMIT_CORE, 0)):
        try:
            resource.setrlimit(which, (value, value))
        except (ValueError, OSError):
            pass
    try:
        ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG: dies with the grader
    except (AttributeError, OSError):
        pass


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def _kind(mode: int) -> str:
    return ("a FIFO" if stat.S_ISFIFO(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
            else "a socket" if stat.S_ISSOCK(mode) else "a folder" if stat.S_ISDIR(mode) else "not a regular file")


def _link_text(dir_fd: int, name: str) -> str:
    try:
        return os.readlink(name, dir_fd=dir_fd)
    except OSError:
        return "?"


class _Stop(Exception):
    """The walk of one folder has looked at enough."""


def _walk_student(class_fd: int, name: str, filenames: set[str]) -> dict:
    """One student's folder, walked from file descriptors without following a link; names and sizes only."""
    folder = Folder()
    hits: dict[str, list[str]] = {}
    seen = 0
    stack = [(os.open(name, _DIR_FLAGS, dir_fd=class_fd), "", 0)]
    try:
        while stack:
            fd, rel, depth = stack.pop()
            try:
                with os.scandir(fd) as entries:
                    listing = sorted(entries, key=lambda e: e.name)
                for entry in listing:
                    seen += 1
                    if seen > MAX_ENTRIES:
                        folder.notes.append(f"more than {MAX_ENTRIES} entries: the rest was not looked at")
                        raise _Stop
                    path = rel + entry.name
                    mode = entry.stat(follow_symlinks=False).st_mode
                    if stat.S_ISLNK(mode):
                        if entry.name in filenames:
                            folder.refused.setdefault(entry.name, f"refused: {path} is a link to "
                                                      f"{_link_text(fd, entry.name)}; hand in the file itself")
                        else:
                            folder.notes.append(f"{path} (a link)")
                        continue
                    if stat.S_ISDIR(mode):
                        if depth == 0:
                            folder.dirs.append(entry.name)
                        if depth + 1 < MAX_DEPTH:
                            try:
                                stack.append((os.open(entry.name, _DIR_FLAGS, dir_fd=fd), path + "/", depth + 1))
                            except OSError as e:
                                folder.notes.append(f"{path} (not readable: {e.strerror})")
                        continue
                    if entry.name not in filenames:
                        continue
                    size = entry.stat(follow_symlinks=False).st_size
                    if not stat.S_ISREG(mode):
                        folder.refused.setdefault(entry.name, f"refused: {path} is {_kind(mode)}, not a regular "
                                                  "file; hand in the file itself")
                    elif size > MAX_FILE_BYTES:
                        folder.refused.setdefault(entry.name, f"refused: {path} is {size // 1024} KB; an exercise "
                                                  f"file is a few KB (the limit is {MAX_FILE_BYTES // 1024} KB)")
                    else:
                        hits.setdefault(entry.name, []).append(path)
            finally:
                os.close(fd)
    except _Stop:
        pass
    finally:
        for fd_left, _, _ in stack:
            os.close(fd_left)
    folder.found = {n: min(ps, key=lambda p: (p.count("/"), p)) for n, ps in hits.items()}
    folder.refused = {n: why for n, why in folder.refused.items() if n not in folder.found}
    return {"found": folder.found, "refused": folder.refused, "notes": folder.notes, "dirs": sorted(folder.dirs)}


def _emit(record: dict) -> None:
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


def _child_survey(job: dict) -> None:
    root, filenames = job["root"], set(job["filenames"])
    class_fd = os.open(root, _DIR_FLAGS)
    names = job.get("students")
    if names is None:
        roster, refused = [], {}
        with os.scandir(class_fd) as entries:
            for entry in entries:
                if len(roster) + len(refused) >= MAX_STUDENTS:
                    _emit({"error": f"more than {MAX_STUDENTS} entries in the class folder"})
                    return
                if entry.name.startswith("."):
                    continue
                st = entry.stat(follow_symlinks=False)
                if stat.S_ISLNK(st.st_mode):
                    target = _link_text(class_fd, entry.name)
                    where = os.path.realpath(os.path.join(root, entry.name))
                    inside = os.path.commonpath([os.path.realpath(root), where]) == os.path.realpath(root)
                    if not os.path.isdir(where):
                        continue  # a link to a file: not a student folder, as a plain file is not
                    refused[entry.name] = (
                        f"refused: the folder {entry.name} is a link to {target}"
                        + (", another folder of the class: every student hands in a folder of their own"
                           if inside else ", outside the class folder")
                        + "; copy the work in instead")
                elif stat.S_ISDIR(st.st_mode):
                    roster.append(entry.name)
        _emit({"roster": sorted(roster), "refused": refused})
        names = sorted(roster)
    for name in names:
        _emit({"student": name, "started": True})
        try:
            _emit({"student": name, **_walk_student(class_fd, name, filenames)})
        except OSError as e:
            _emit({"student": name, "error": f"refused: the folder {name} cannot be read ({e.strerror or e})"})


def _open_below(root: str, parts: Sequence[str]) -> int:
    """A descriptor of ``root/parts...`` opened one component at a time, no link followed on the way."""
    fd = os.open(root, _DIR_FLAGS)
    try:
        for part in parts[:-1]:
            nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = nxt
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
        return os.open(parts[-1], flags, dir_fd=fd)
    finally:
        os.close(fd)


def _child_fetch(job: dict) -> None:
    root = os.path.join(job["root"], job["student"])
    dest = job["dest"]
    for filename, rel in job["files"].items():
        parts = rel.split("/")
        try:
            fd = _open_below(root, parts)
        except OSError as e:
            why = ("is a link or sits below one (not followed)" if e.errno in (errno.ELOOP, errno.ENOTDIR)
                   else f"cannot be opened ({e.strerror or e})")
            _emit({"file": filename, "why": f"refused: {rel} {why}; hand in the file itself"})
            continue
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                _emit({"file": filename, "why": f"refused: {rel} is {_kind(st.st_mode)}, not a regular file"})
                continue
            data = os.read(fd, MAX_FILE_BYTES + 1)
            if len(data) > MAX_FILE_BYTES:
                _emit({"file": filename, "why": f"refused: {rel} is more than {MAX_FILE_BYTES // 1024} KB; an "
                       "exercise file is a few KB"})
                continue
        except OSError as e:
            _emit({"file": filename, "why": f"refused: {rel} cannot be read ({e.strerror or e})"})
            continue
        finally:
            os.close(fd)
        target = os.path.join(dest, *parts)
        os.makedirs(os.path.dirname(target), mode=0o700, exist_ok=True)
        with open(target, "wb") as out:
            out.write(data)
        os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))  # the submission's time travels with the copy
        _emit({"file": filename, "copied": rel})


def _child_main() -> int:
    _limit_self()
    job = json.loads(sys.stdin.read())
    {"survey": _child_survey, "fetch": _child_fetch}[job["op"]](job)
    return 0


# ---- in the grader --------------------------------------------------------------------------------------------

def _command() -> list[str]:
    """The child: this file as a script, isolated (``-I``: no environment, no user site, no current folder on
    the path; ``-S``: no site packages), so it imports nothing of tklab's and starts in milliseconds."""
    return [sys.executable, "-I", "-S", str(Path(__file__).resolve())]


def _lines(job: dict, *, seconds_per_line: float) -> Iterator[dict | None]:
    """Start a child on ``job``; yield each JSON line it prints, or None once a line took longer than
    ``seconds_per_line`` (the child is then killed). Ends when the child is done."""
    proc = subprocess.Popen(_command(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True, cwd="/", env={"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8"})
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    try:
        proc.stdin.write(json.dumps(job).encode())
        proc.stdin.close()
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ)
        pending = b""
        deadline = time.monotonic() + seconds_per_line
        while True:
            if b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                deadline = time.monotonic() + seconds_per_line
                yield json.loads(line)
                continue
            left = deadline - time.monotonic()
            if left <= 0 or not sel.select(timeout=left):
                yield None
                return
            chunk = os.read(proc.stdout.fileno(), 1 << 16)
            if not chunk:
                return
            pending += chunk
            if len(pending) > 64 << 20:
                raise IntakeError("the class folder's listing is larger than 64 MiB")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
        proc.wait()
        proc.stdout.close()
        proc.stderr.close()


def survey(class_dir: str | os.PathLike[str], filenames: Sequence[str], students: Sequence[str] | None = None,
           *, seconds: float = STUDENT_SECONDS) -> Survey:
    """The roster of ``class_dir`` and each student's files named in ``filenames`` (see the module docstring).
    ``students``: only these folders (the roster is then not listed). ``IntakeError`` when the class folder
    itself cannot be read."""
    root = os.path.abspath(os.fspath(class_dir))
    out = Survey()
    todo: list[str] | None = list(students) if students is not None else None
    while todo is None or todo:
        job = {"op": "survey", "root": root, "filenames": list(filenames), "students": todo}
        before = None if todo is None else len(todo)
        current: str | None = None
        stopped = False
        for record in _lines(job, seconds_per_line=seconds):
            if record is None:
                stopped = True
                break
            if "roster" in record:
                out.refused.update(record["refused"])
                todo = list(record["roster"])
                continue
            if "student" not in record:
                raise IntakeError(f"{root}: {record.get('error', record)}")
            name = record["student"]
            if record.get("started"):
                current = name
                continue
            current = None
            assert todo is not None
            todo.remove(name)
            if "error" in record:
                out.refused[name] = record["error"]
            else:
                out.folders[name] = Folder(record["found"], record["refused"], record["notes"], record["dirs"])
        if todo is None:
            raise IntakeError(f"{root}: the class folder could not be listed"
                              + (f" within {seconds:g} s" if stopped else " (is it a readable folder?)"))
        if current is None and todo and before == len(todo):
            current = todo[0]  # the reader died between folders without a word: the next one is refused
        if current is not None:
            out.refused[current] = (f"refused: reading the folder {current} took longer than {seconds:g} s (stopped)"
                                    if stopped else f"refused: reading the folder {current} stopped the reader")
            todo.remove(current)
    return out


def fetch(class_dir: str | os.PathLike[str], student: str, files: Mapping[str, str], dest: str | os.PathLike[str],
          *, seconds: float = STUDENT_SECONDS) -> tuple[dict[str, Path], dict[str, str]]:
    """Copy ``files`` ({file name: path relative to the student's folder}, from ``survey``) of ``student`` into
    ``dest``; returns ({file name: the copy}, {file name: why refused})."""
    dest = Path(dest)
    copies: dict[str, Path] = {}
    refused: dict[str, str] = {}
    if not files:
        return copies, refused
    job = {"op": "fetch", "root": os.path.abspath(os.fspath(class_dir)), "student": student, "files": dict(files),
           "dest": str(dest)}
    for record in _lines(job, seconds_per_line=seconds):
        if record is None:
            break
        if "copied" in record:
            copies[record["file"]] = dest.joinpath(*record["copied"].split("/"))
        else:
            refused[record["file"]] = record["why"]
    for filename, rel in files.items():
        if filename not in copies and filename not in refused:
            refused[filename] = f"refused: {rel} could not be copied within {seconds:g} s (stopped)"
    return copies, refused


if __name__ == "__main__":
    raise SystemExit(_child_main())
