"""What a learner's run must not see of the workbook: every copy of the solutions beyond ``solutions/`` itself.

Why: the sandbox hid ``solutions/`` but left the repository's ``.git`` readable, so ``git show
HEAD:`` of a solution's path from inside a run printed the solution (issue 39). The history is not the only
copy: planted-mistake suites, recorded traces and class samples under ``tests/``, chapter notebooks, bench
results. So in a checkout of the workbook a run sees only what it needs -- the ``tklab`` package, the tile
library (``cuda/``) and the Python it runs on -- and every other top-level folder of the checkout is hidden,
with the git folders a worktree's ``.git`` file points to (its own and the common one), wherever they live.
Installed as a package (no checkout around it), only git folders are hidden.

The sandbox (``tklab.grading.sandbox``) lays an empty, read-only folder over each: bubblewrap in its mount
namespace; at the process level a root grader's child in a mount namespace of its own before it drops to its
user (``hide_here``).

Public API: ``git_dirs(repo)``, ``workbook_extras(repo, needed)``, ``hide_here(paths) -> list[str]``.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Iterable
from pathlib import Path

#: What a run needs of the checkout: the package and the tile library (the emulator's practice build reads it).
NEEDED = ("tklab", "cuda")


def _pointed(git_file: Path) -> Path | None:
    """The folder a worktree's (or submodule's) ``.git`` file names with ``gitdir: PATH``."""
    try:
        text = git_file.read_text(errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("gitdir:"):
            target = Path(line.split(":", 1)[1].strip())
            return (git_file.parent / target).resolve() if not target.is_absolute() else target.resolve()
    return None


def git_dirs(repo: Path) -> list[Path]:
    """The git folders holding ``repo``'s history: ``.git`` itself, or the folders its ``.git`` file points to
    (a worktree's own and, through ``commondir``, the main repository's object store)."""
    dot = repo / ".git"
    if dot.is_dir() and not dot.is_symlink():
        return [dot]
    found: list[Path] = []
    own = _pointed(dot) if dot.is_file() else dot.resolve() if dot.is_symlink() else None
    if own is not None and own.is_dir():
        found.append(own)
        try:
            common = (own / "commondir").read_text().strip()
            shared = (own / common).resolve() if not Path(common).is_absolute() else Path(common).resolve()
            if shared.is_dir() and shared != own:
                found.append(shared)
        except OSError:
            pass
    return found


def workbook_extras(repo: Path, needed: Iterable[Path]) -> list[Path]:
    """The top-level folders of a workbook checkout that a run does not need (every one but ``NEEDED`` and those
    that hold a path in ``needed``: a virtual environment inside the checkout), plus the git folders. Only git
    folders when ``repo`` is not a checkout (tklab installed among other packages)."""
    extras = git_dirs(repo)
    if not ((repo / "pyproject.toml").is_file() and (repo / "tklab").is_dir()):
        return extras
    inside = [p for p in needed if repo in p.parents]
    try:
        entries = sorted(repo.iterdir())
    except OSError:
        return extras
    for entry in entries:
        if entry.name in NEEDED or entry.is_symlink() or not entry.is_dir():
            continue
        if any(p == entry or entry in p.parents for p in inside):
            continue
        if entry not in extras:
            extras.append(entry)
    return extras


_CLONE_NEWNS = 0x00020000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 1, 2, 4, 8
_MS_REC, _MS_PRIVATE = 0x4000, 1 << 18


def hide_here(paths: Iterable[str]) -> list[str]:
    """In a root child before it drops to its user: a mount namespace of its own, and an empty read-only tmpfs
    over each folder of ``paths``. Returns what could not be done (no ``CAP_SYS_ADMIN``, as in many containers)."""
    paths = [p for p in paths if os.path.isdir(p)]
    if not paths:
        return []
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return ["hidden folders (no libc)"]
    if libc.unshare(_CLONE_NEWNS) != 0:
        return [f"hidden folders (unshare: {os.strerror(ctypes.get_errno())})"]
    if libc.mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None) != 0:
        return [f"hidden folders (mount: {os.strerror(ctypes.get_errno())})"]
    missed = []
    flags = _MS_RDONLY | _MS_NOSUID | _MS_NODEV | _MS_NOEXEC
    for p in paths:
        if libc.mount(b"tmpfs", os.fsencode(p), b"tmpfs", flags, b"size=4k,mode=0555") != 0:
            missed.append(p)
    return [f"hiding {', '.join(missed)} (mount: {os.strerror(ctypes.get_errno())})"] if missed else []
