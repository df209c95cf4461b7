"""The grade sheet's format, shared by ``grade`` (writes it) and ``grade_shards`` (merges shards of it).

Why a module of its own: both sides must agree on the columns, on how a student's name is written and on
who may write a sheet; neither imports the other for it (``grade`` → ``grade_shards`` → ``sheet``).

What a sheet guarantees:

* **Names are kept distinct.** A student's name is the folder's name, whatever it holds: newlines, tabs,
  commas, quotes, a leading ``=``, bytes that are not UTF-8. ``escape_name`` writes it reversibly
  (``unescape_name`` gives the folder's name back, byte for byte through ``os.fsencode``): a backslash
  escapes ``\\``, ``\\n``, ``\\t``, ``\\r``, other unprintable characters (``\\u00a0``), bytes that are not
  UTF-8 (``\\xff``) and a first character a spreadsheet would run as a formula (``\\=``). Two folders never
  share a cell. Names a reader would take for one (equal after Unicode NFKC and case folding, e.g. ``Ana``
  and ``ana``, or an ``é`` composed and decomposed) are refused before anything is graded
  (``refuse_lookalikes``).
* **One writer.** ``OutLock`` holds ``<out>.lock`` (an ``flock`` plus who holds it: pid, host, start) for as
  long as a sheet is written; a second grader on the same ``--out`` is refused with the holder's name. A
  lock left by a grader that died is taken over (the kernel released its ``flock``; on this host its pid
  is checked too) and said so.
* **Nothing twice, nothing half.** Every cell is one line (messages lose control characters, names are
  escaped), rows are appended and flushed one by one; a resumed sheet whose last row was cut off by a
  kill has that row dropped (it is graded again), and a sheet holding a row twice is refused.

Public API: ``Row``, ``FIELDS``, ``GradeError``, ``escape_name``, ``unescape_name``, ``cell``,
``lookalike_key``, ``refuse_lookalikes``, ``OutLock``, ``LockedError``, ``read_rows``, ``Sheet``.
"""

from __future__ import annotations

import contextlib
import csv
import fcntl
import json
import os
import re
import socket
import sys
import time
import unicodedata
from collections.abc import Iterable
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import IO


@dataclass
class Row:
    """One line of the grade sheet (``student`` is the folder's name itself; the sheet holds it escaped)."""

    student: str
    exercise: str
    compiled: str
    correct: str
    speed_ratio: str
    message: str
    established: str = ""
    isolation: str = ""
    #: the hint level the student had reached for this exercise: ``unknown`` in a graded row, since the only
    #: record of it is the hint state in the student's own folder, which the student writes (``grade._row``)
    hint_level: str = ""
    #: the GPU the speed was measured on (empty where nothing was timed): ratios are compared on one device only
    device: str = ""
    #: when the file was submitted: its modification time in the class folder (UTC, ISO 8601), as the grader's intake
    #: copied it; the leaderboard breaks equal ratios by it (``tklab.grading.leaderboard``)
    submitted: str = ""


FIELDS = tuple(f.name for f in fields(Row))


class GradeError(ValueError):
    """Grading cannot start (an output that cannot be written, a sheet that cannot be resumed)."""


class LockedError(GradeError):
    """Another grader holds the sheet."""


# ---- names ---------------------------------------------------------------------------------------

_FORMULA = ("=", "+", "-", "@")
_NAMED = {"\\": "\\\\", "\n": "\\n", "\t": "\\t", "\r": "\\r"}
_UNNAMED = {v[1]: k for k, v in _NAMED.items()}
_ESCAPE = re.compile(r"\\(?:x([0-9a-f]{2})|u([0-9a-f]{4})|U([0-9a-f]{8})|(.))", re.DOTALL)


def escape_name(name: str) -> str:
    """The cell a student's name is written as: printable, one line, no formula, reversible."""
    out = []
    for ch in name:
        o = ord(ch)
        if ch in _NAMED:
            out.append(_NAMED[ch])
        elif 0xDC80 <= o <= 0xDCFF:  # a byte that is not UTF-8, as os.fsdecode keeps it
            out.append(f"\\x{o - 0xDC00:02x}")
        elif not ch.isprintable():
            out.append(f"\\u{o:04x}" if o <= 0xFFFF else f"\\U{o:08x}")
        else:
            out.append(ch)
    text = "".join(out)
    return "\\" + text if text[:1] in _FORMULA else text


def unescape_name(text: str) -> str:
    """The folder's name a sheet's cell stands for (``ValueError`` for a cell ``escape_name`` cannot write)."""
    def one(m: re.Match[str]) -> str:
        byte, u4, u8, other = m.groups()
        if byte:
            return chr(0xDC00 + int(byte, 16))
        if u4 or u8:
            return chr(int(u4 or u8, 16))
        if other in _UNNAMED:
            return _UNNAMED[other]
        if other in _FORMULA and m.start() == 0:
            return other
        raise ValueError(f"{text!r}: '\\{other}' is not an escape of a tklab grade sheet")

    name = _ESCAPE.sub(one, text)
    if escape_name(name) != text:
        raise ValueError(f"{text!r} is not a name as a tklab grade sheet writes it")
    return name


def cell(value: str) -> str:
    """A message cell: one line of printable text that a spreadsheet shows as text, never runs."""
    text = "".join(ch if ch.isprintable() else " " for ch in str(value))
    return "'" + text if text[:1] in _FORMULA else text


def lookalike_key(name: str) -> str:
    """What a reader sees of a name: Unicode compatibility form, case folded (bytes that are not UTF-8 kept)."""
    return unicodedata.normalize("NFKC", name).casefold()


def refuse_lookalikes(names: Iterable[str]) -> None:
    """``GradeError`` naming every group of student folders that a reader (or a gradebook) would take for
    one student; nothing is graded until they are renamed."""
    groups: dict[str, list[str]] = {}
    for n in names:
        groups.setdefault(lookalike_key(n), []).append(n)
    clashes = [g for g in groups.values() if len(g) > 1]
    if clashes:
        def show(g: list[str]) -> str:
            same = len({escape_name(n) for n in g}) < len(g)  # e.g. é composed and decomposed
            return " and ".join(ascii(n) if same else repr(escape_name(n)) for n in g)

        shown = "; ".join(show(g) for g in clashes)
        raise GradeError(f"student folders that read as the same name (they differ only in case or Unicode form): "
                         f"{shown}; a sheet or gradebook would take them for one student: rename one of each "
                         "(e.g. add -2) and grade again; nothing was graded")


# ---- one writer ----------------------------------------------------------------------------------

def _start_time(pid: int) -> str:
    """The process's start (clock ticks since boot), to tell a live holder from a reused pid."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


def _describe(holder: dict) -> str:
    return (f"pid {holder.get('pid', '?')} on host {holder.get('host', '?')}, since {holder.get('since', '?')}"
            f" ({holder.get('command', '?')})")


class OutLock:
    """``<out>.lock``: held (``flock``) by the one process writing ``out``; it names its holder."""

    def __init__(self, out: Path, what: str = "--out"):
        self.out, self.what = out, what
        self.path = out.with_name(out.name + ".lock")
        self.fd: int | None = None
        self.took_over: str = ""  # who left a stale lock, when one was found

    def acquire(self) -> OutLock:
        while True:
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as e:
                raise GradeError(f"{self.what} {self.out}: cannot create its lock {self.path} ({e.strerror})") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                holder = self._holder(fd)
                os.close(fd)
                raise LockedError(f"{self.what} {self.out} is being written by another grader ({_describe(holder)}); "
                                  f"wait for it to finish, or give another {self.what}. Nothing was graded "
                                  f"(lock: {self.path})") from None
            try:  # the file locked must still be the one at the path (a finishing holder removes it)
                same = os.path.samestat(os.fstat(fd), os.stat(self.path))
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        old = self._holder(fd)
        if old.get("pid"):
            alive = (old.get("host") == socket.gethostname() and old.get("pid") != os.getpid()
                     and old.get("start") and _start_time(int(old["pid"])) == old.get("start"))
            if alive:  # a file system that ignores flock: the process itself says it lives
                os.close(fd)
                raise LockedError(f"{self.what} {self.out} is being written by another grader ({_describe(old)}), "
                                  f"which is still running; nothing was graded (lock: {self.path})")
            self.took_over = _describe(old)
        me = {"pid": os.getpid(), "host": socket.gethostname(), "start": _start_time(os.getpid()),
              "since": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "command": " ".join(sys.argv)[:300]}
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(me) + "\n").encode(), 0)
        self.fd = fd
        return self

    @staticmethod
    def _holder(fd: int) -> dict:
        try:
            data = json.loads(os.pread(fd, 4096, 0) or b"{}")
            return data if isinstance(data, dict) else {}
        except (OSError, ValueError):
            return {}

    def release(self) -> None:
        if self.fd is None:
            return
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)  # while still holding it: a waiting grader then retries on a fresh file
        os.close(self.fd)
        self.fd = None

    def __enter__(self) -> OutLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


# ---- reading and writing --------------------------------------------------------------------------

def read_rows(path: Path) -> list[dict[str, str]]:
    """A sheet's rows as written (names escaped); ``ValueError`` saying why it is not a sheet of this version."""
    try:
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            if tuple(reader.fieldnames or ()) != FIELDS:
                raise ValueError(f"{path}: not a tklab grade sheet of this version (columns {reader.fieldnames})")
            rows = list(reader)
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise ValueError(f"{path}: cannot be read as a grade sheet ({e})") from None
    for i, r in enumerate(rows, start=2):
        if None in r or any(r[k] is None for k in FIELDS):
            raise ValueError(f"{path}: line {i} does not have the sheet's {len(FIELDS)} columns")
    return rows


class Sheet:
    """The CSV grade sheet, written row by row (so a crash loses nothing), resumable, locked while open.

    ``Sheet(None)`` writes to stdout. For a file: the folder must exist and be writable, and no other
    grader may hold it (checked before any grading); an existing sheet is resumed, unless ``restart``
    (then it is kept as a backup). ``close()`` (or leaving the ``with``) releases the lock.
    """

    def __init__(self, out: Path | None, *, restart: bool = False):
        self.out = out
        self.done: list[Row] = []
        self.backup: Path | None = None
        self.notes: list[str] = []
        self.lock: OutLock | None = None
        self._handle: IO[str] | None = None
        if out is None:
            return
        if out.is_dir():
            raise GradeError(f"--out {out} is a folder; give a file name, e.g. {out / 'grades.csv'}")
        parent = out.parent if str(out.parent) else Path(".")
        if not parent.is_dir():
            raise GradeError(f"--out {out}: the folder {parent} does not exist; nothing was graded")
        if not os.access(parent, os.W_OK) or (out.exists() and not os.access(out, os.W_OK)):
            raise GradeError(f"--out {out}: cannot write there; nothing was graded")
        self.lock = OutLock(out).acquire()
        try:
            if self.lock.took_over:
                self.notes.append(f"a stale lock of a grader that is gone ({self.lock.took_over}) was taken over")
            if out.exists() and out.stat().st_size:
                if restart:
                    self.backup = out.with_name(f"{out.name}.bak-{time.strftime('%Y%m%d-%H%M%S')}")
                    out.rename(self.backup)
                else:
                    self._drop_cut_row(out)
                    self.done = self._read(out)
        except BaseException:
            self.close()
            raise

    def _drop_cut_row(self, out: Path) -> None:
        """A grader killed while writing a row leaves it without its newline: drop it (it is graded again)."""
        data = out.read_bytes()
        if data.endswith(b"\n"):
            return
        keep = data.rfind(b"\n") + 1
        if keep == 0:
            return  # not even a header: _read says what it is
        with open(out, "r+b") as f:
            f.truncate(keep)
        self.notes.append(f"dropped an unfinished last row of {out.name} (the grader was stopped while writing it): "
                          "it is graded again")

    @staticmethod
    def _read(out: Path) -> list[Row]:
        try:
            raw = read_rows(out)
        except ValueError as e:
            raise GradeError(f"--out {e}; use another --out, or --restart to set it aside") from None
        rows, seen = [], set()
        for r in raw:
            try:
                name = unescape_name(r["student"])
            except ValueError as e:
                raise GradeError(f"--out {out}: {e}; use another --out, or --restart to set it aside") from None
            key = (name, r["exercise"])
            if key in seen:
                raise GradeError(f"--out {out} holds {r['student']!r} / {r['exercise']} twice (written by two "
                                 "graders at once?); --restart grades everyone again, keeping it as a backup")
            seen.add(key)
            rows.append(Row(**{**{k: r[k] or "" for k in FIELDS}, "student": name}))
        return rows

    def graded(self) -> set[tuple[str, str]]:
        """(student, exercise) pairs already in the sheet (folder names, unescaped)."""
        return {(r.student, r.exercise) for r in self.done}

    def __enter__(self) -> Sheet:
        if self.out is None:
            self._handle = sys.stdout
            fresh = True
        else:
            fresh = not (self.out.exists() and self.out.stat().st_size)
            self._handle = open(self.out, "a", newline="", encoding="utf-8")  # noqa: SIM115 - closed in close()
        self._writer = csv.DictWriter(self._handle, fieldnames=FIELDS)
        if fresh:
            self._writer.writeheader()
        self._handle.flush()
        return self

    def write(self, row: Row) -> None:
        """Append one row as one line, at once (a single write of the whole line), and flush it."""
        assert self._handle is not None
        values = {k: cell(v) for k, v in asdict(row).items()}
        values["student"] = escape_name(row.student)
        line = _Line()
        csv.DictWriter(line, fieldnames=FIELDS).writerow(values)
        self._handle.write(line.text)
        self._handle.flush()

    def close(self) -> None:
        if self._handle is not None and self._handle is not sys.stdout:
            self._handle.close()
        self._handle = None
        if self.lock is not None:
            self.lock.release()
            self.lock = None

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Line:
    """A file-like that keeps what csv writes, so a row goes out in one write."""

    def __init__(self) -> None:
        self.text = ""

    def write(self, s: str) -> int:
        self.text += s
        return len(s)
