"""``nbgrader collect`` without following what a student leaves in the exchange's inbound folder.

Why: students can write the exchange's inbound folder, and nbgrader's collect copies a submission with
``shutil.copytree``, which follows links: a link a student left in her submission to a classmate's submitted file
(or to any file the grader can read) was copied into ``submitted/`` as a regular file under her name (issue 39). From
there on tklab's checks and nbgrader's run see only a regular file, so the link must be refused at collect.

``SafeCollect`` is nbgrader's default collect with its copy replaced: every entry of a submission is looked at without
following links (``lstat``); a folder is walked, a regular file is opened with ``O_NOFOLLOW`` and checked to be
regular on the descriptor it was read through (so a file swapped for a link or a FIFO between the look and the read is
refused too), and anything else -- a link, a FIFO, a device, a socket -- is left out and named. nbgrader's own rules
(``CourseDirectory.ignore``, ``include``, ``max_file_size``, ``max_dir_size``) still apply. ``tklab nbgrade collect``
runs ``nbgrader collect`` with it (``--ExchangeFactory.collect``) and names every student whose submission held
such an entry.

Public API: ``SafeCollect``, ``REFUSED``, ``collect(course, assignment, ...)``.
"""

from __future__ import annotations

import contextlib
import fnmatch
import os
import re
import stat
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

#: The start of the log line naming one refused entry (``collect`` reads them back from nbgrader's log).
REFUSED = "tklab refused"


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISLNK, "a link"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a device"),
                       (stat.S_ISBLK, "a device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def _collect_class() -> type:
    from nbgrader.exchange.default.collect import ExchangeCollect

    class SafeCollect(ExchangeCollect):  # type: ignore[misc, valid-type]
        """nbgrader's collect, copying a submission without following anything in it (see the module)."""

        def do_copy(self, src: str, dest: str, log: Any = None) -> None:
            student = Path(src).name.rsplit("+", 3)[0]
            cd = self.coursedir
            budget = [1000 * float(cd.max_dir_size)]
            refused: list[str] = []
            self._copy_folder(Path(src), Path(dest), Path(src), student, refused, budget)
            for line in refused:
                self.log.error(line)

        def _refuse(self, refused: list[str], student: str, top: Path, path: Path, why: str) -> None:
            target = ""
            with contextlib.suppress(OSError):
                target = f" -> {os.readlink(path)}"
            refused.append(f"{REFUSED}: {student}: {path.relative_to(top.parent)}{target} is {why}: left out of "
                           "their collected submission (hand in the file itself)")

        def _skipped(self, name: str, size: int) -> bool:
            cd = self.coursedir
            if cd.ignore and any(fnmatch.fnmatch(name, g) for g in cd.ignore):
                return True
            if cd.include and not any(fnmatch.fnmatch(name, g) for g in cd.include):
                return True
            if cd.max_file_size and size > 1000 * float(cd.max_file_size):
                self.log.warning(f"Ignoring file too large '{name}' (see config option CourseDirectory.max_file_size)")
                return True
            return False

        def _copy_folder(self, src: Path, dest: Path, top: Path, student: str, refused: list[str],
                         budget: list[float]) -> None:
            st = os.lstat(src)
            if not stat.S_ISDIR(st.st_mode):
                self._refuse(refused, student, top, src, _kind(st.st_mode))
                return
            dest.mkdir(parents=True, exist_ok=True)
            for entry in sorted(os.scandir(src), key=lambda e: e.name):
                path = Path(entry.path)
                try:
                    st = os.lstat(path)
                except OSError:
                    continue
                if stat.S_ISDIR(st.st_mode):
                    if not self._skipped(entry.name, 0):
                        self._copy_folder(path, dest / entry.name, top, student, refused, budget)
                elif not stat.S_ISREG(st.st_mode):
                    self._refuse(refused, student, top, path, _kind(st.st_mode))
                elif not self._skipped(entry.name, st.st_size):
                    self._copy_file(path, dest / entry.name, top, student, refused, budget)

        def _copy_file(self, src: Path, dest: Path, top: Path, student: str, refused: list[str],
                       budget: list[float]) -> None:
            try:
                fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
            except OSError as e:
                why = "a link" if os.path.islink(src) else f"unreadable ({e.strerror})"
                self._refuse(refused, student, top, src, why)
                return
            with os.fdopen(fd, "rb") as f:
                st = os.fstat(f.fileno())
                if not stat.S_ISREG(st.st_mode):
                    self._refuse(refused, student, top, src, _kind(st.st_mode))
                    return
                budget[0] -= st.st_size
                if budget[0] < 0:
                    self.log.error("Directory size is too big")
                    raise RuntimeError(f"{student}'s submission is larger than CourseDirectory.max_dir_size")
                with open(dest, "wb") as out:
                    while chunk := f.read(1 << 20):
                        out.write(chunk)
            os.utime(dest, ns=(st.st_atime_ns, st.st_mtime_ns))

    SafeCollect.__module__, SafeCollect.__qualname__ = __name__, "SafeCollect"
    return SafeCollect


def __getattr__(name: str) -> Any:
    """``SafeCollect``, made on first use (nbgrader imports it by name)."""
    if name == "SafeCollect":
        cls = _collect_class()
        globals()[name] = cls
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def collect(course: Path, assignment: str, extra: Sequence[str] = ()) -> tuple[int, list[str]]:
    """``nbgrader collect`` in the course folder (its nbgrader_config.py applies) with ``SafeCollect``; returns
    (nbgrader's exit status, the lines naming each refused entry)."""
    cmd = [sys.executable, "-m", "nbgrader", "collect", assignment,
           f"--ExchangeFactory.collect={__name__}.SafeCollect", *extra]
    proc = subprocess.run(cmd, cwd=course, capture_output=True, text=True)
    log = proc.stdout + proc.stderr
    refused = [m.group(0) for m in re.finditer(rf"{re.escape(REFUSED)}: .*", log)]
    if proc.returncode != 0:
        print(log, file=sys.stderr)
    return proc.returncode, refused
