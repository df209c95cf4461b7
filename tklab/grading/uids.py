"""A user id of its own for each run a root grader starts, so that concurrent runs cannot reach one another.

Why: every run of a root grader used to become ``nobody``. Runs at the same time then shared one user: one
student's processes counted against the other's process limit (``RLIMIT_NPROC`` counts a user's processes, so a
fork bomb starved a classmate's compile), and at the process level one run could signal or read the other's
processes and files. Here each run leases a uid (and a gid of the same number) from a block no account uses,
held by an ``flock`` on a file named after it for as long as the run lives: no two live runs share one, and a
grader that is killed gives its leases back with its file descriptors. The user has no groups and no home;
world-readable files are all it can read, as ``nobody``'s (the grader checks ``nobody`` can read Python first).

The block: ``TKLAB_SANDBOX_UIDS=FIRST:COUNT`` (default ``FIRST_UID:COUNT``, far above login users, container
uid ranges and systemd's dynamic users). Leases are kept in ``/run/tklab-uids`` (``$TMPDIR`` when there is no
``/run``), a folder only root may write.

Public API: ``Lease``, ``lease() -> Lease``, ``FIRST_UID``, ``COUNT``.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import random
from dataclasses import dataclass
from pathlib import Path

#: The default block: 2^30 plus, below the 2^31 some tools mishandle and above every range in common use.
FIRST_UID = 1_073_741_824 + 424_242
COUNT = 4096


class LeaseError(RuntimeError):
    """No uid could be leased (the block is full, or its folder cannot be made)."""


@dataclass
class Lease:
    """A uid (and gid) held for one run; ``release()`` when the run's processes are gone."""

    uid: int
    gid: int
    _fd: int

    def release(self) -> None:
        if self._fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = -1


def _block() -> tuple[int, int]:
    raw = os.environ.get("TKLAB_SANDBOX_UIDS", "").strip()
    if raw:
        try:
            first, count = (int(x) for x in raw.split(":"))
            if first >= 1000 and count > 0:
                return first, count
        except ValueError:
            pass
    return FIRST_UID, COUNT


def _folder() -> Path:
    base = Path("/run") if Path("/run").is_dir() and os.access("/run", os.W_OK) else Path(os.environ.get(
        "TMPDIR", "/tmp"))
    folder = base / "tklab-uids"
    folder.mkdir(mode=0o700, exist_ok=True)
    st = folder.lstat()
    if st.st_uid != os.getuid() or st.st_mode & 0o022 or folder.is_symlink():
        raise LeaseError(f"{folder} is not a folder of this user's alone")
    return folder


def lease() -> Lease:
    """A uid no other live run holds (tried from a random place in the block, so graders rarely collide)."""
    first, count = _block()
    folder = _folder()
    start = random.randrange(count)
    for i in range(count):
        uid = first + (start + i) % count
        fd = os.open(folder / str(uid), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue
        return Lease(uid, uid, fd)
    raise LeaseError(f"all {count} uids of {first}:{count} are held by runs")
