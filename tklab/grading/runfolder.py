"""A run's working folder with a size: what a run may write there is bounded in all, not per file.

Why: ``RLIMIT_FSIZE`` bounds each file (256 MiB), so a run wrote 600 MiB in three files and could fill the
grader's disk with more. A root grader makes the folder a tmpfs of ``size`` bytes (mounted, in its own mount
namespace's view, before it writes the run's inputs into it): a write past it fails with "No space left on
device", and its pages count against the run's cgroup where it has one (``rungroup``). Without the privilege to
mount (an ordinary grader, a container without ``CAP_SYS_ADMIN``) it is a plain folder, and ``bounded`` says so.
The sandbox's private ``/tmp`` is bounded the same way by bubblewrap (``--size``).

Public API: ``make(prefix, size) -> Path``, ``bounded(path) -> bool``, ``remove(path)``.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import tempfile
from pathlib import Path

_MS_NOSUID, _MS_NODEV = 2, 4
_MNT_DETACH = 2
_mounted: set[str] = set()


def make(prefix: str, size: int | None) -> Path:
    """A fresh folder (mode 0700); a tmpfs of ``size`` bytes where this process may mount one."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    if size and os.getuid() == 0 and os.environ.get("TKLAB_NO_RUN_TMPFS", "") not in ("1", "true", "yes"):
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            if libc.mount(b"tmpfs", os.fsencode(folder), b"tmpfs", _MS_NOSUID | _MS_NODEV,
                          f"size={size},mode=0700".encode()) == 0:
                _mounted.add(str(folder))
    return folder


def bounded(folder: Path) -> bool:
    """Whether ``folder`` is one of ``make``'s size-bounded tmpfs folders."""
    return str(folder) in _mounted


def remove(folder: Path) -> None:
    """Unmount (if mounted) and delete the folder and what the run left in it."""
    if str(folder) in _mounted:
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).umount2(os.fsencode(folder), _MNT_DETACH)
        _mounted.discard(str(folder))
    shutil.rmtree(folder, ignore_errors=True)
