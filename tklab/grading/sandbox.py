"""Running a learner's code (untrusted) in the strongest sandbox this machine offers.

Why: ``check`` and ``grade`` run code they did not write. It must not be able to write where it likes,
read the grader's environment, leave processes behind, outlive its time limit or exhaust the machine.

Levels, strongest first (``Isolation.level`` says which one a run got, and every report shows it):

* ``bubblewrap``: the ``bwrap`` program (Debian/Ubuntu package ``bubblewrap``) with new user, PID,
  network, IPC and UTS namespaces. The filesystem is read-only except the run's fresh working folder and
  a private ``/tmp``; chosen folders (the solutions, the class folder) are hidden, and so is every folder of
  the workbook checkout but the package and the tile library (its git history, the tests' copies of solutions:
  ``unseen``); there is no network; and every process of the run dies with it (the kernel ends a PID
  namespace as a whole).
* ``process``: no sandbox program here (or ``TKLAB_SANDBOX=process``). A fresh working folder, a clean
  environment, its own session; on exit and at the time limit every process of the run is killed: its
  session and process group, its descendants as last seen, and any process carrying the run's token in
  its environment. A root grader's child hides the same folders in a mount namespace of its own before it
  drops to its user (``HIDE_VAR``; where the container allows mounts, else the report lists what was not).

At both levels the child limits itself before it loads any learner code (``apply_limits``: address
space, processes, file size, CPU time; no new privileges; it dies with its parent), the time limit is
wall-clock for the whole tree, and a grader running as root runs the code as an unprivileged user when
``nobody`` can read the Python installation; where it cannot (Python under ``/root``), bubblewrap lays empty
folders over what keeps others out, binds back only Python, and the child drops to that user itself first
thing (``drop_privileges``), so the run is unprivileged outside the sandbox too; without bubblewrap it
runs as root, and the report says so. ``TKLAB_SANDBOX=process`` forces the weaker level (for debugging a
sandbox problem).

Per run, not per process or per user (issue 39), where the grader is root: each run is a user of its own
(``uids``: a uid leased for the run's life, so concurrent runs neither share a process limit nor can signal one
another), its processes live in a cgroup of their own (``rungroup``: memory and process count bounded for all of
them together, and one kill ends them whatever they did to their session or environment), and what it writes is
bounded in all (``runfolder``: its folder a tmpfs of ``Limits.disk`` bytes; bubblewrap's private ``/tmp`` too).
The report names the cgroup, or says there is none.

Grading a class needs more than a learner's own check: ``grading_problem()`` says why this machine's
isolation would let learner code reach the grader (root without a user to drop to, or the grader's own
user without bubblewrap), for ``grade`` to refuse.

Public API: ``Limits``, ``Isolation``, ``Sandbox``, ``Finished``, ``apply_limits(limits)``,
``isolation(gpu=False)``, ``limits_for(limits)``, ``grading_problem(gpu=False)``, ``refusal(allow)``,
``adopt_orphans(on=True)``, ``drop_privileges()`` (the child's first step).
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import functools
import json
import os
import pwd
import resource
import selectors
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from ..paths import REPO
from . import rungroup, uids, unseen

TOKEN_VAR = "TKLAB_SANDBOX_TOKEN"
#: How often the supervisor of a run without a cgroup measures what the run's processes hold (``Sandbox._held``).
SAMPLE_SECONDS = 0.1
_PACKAGE_PARENT = REPO
_UNPRIVILEGED = "nobody"


@dataclass(frozen=True)
class Limits:
    """What one run may use. ``memory`` (address space) is None on a GPU: the driver reserves far more
    address space than it uses, so an address-space limit would stop CUDA itself."""

    wall_seconds: float = 60.0
    memory: int | None = 4 << 30
    processes: int = 1024
    file_size: int = 256 << 20
    cpu_seconds: int | None = None
    #: what the run may write in all (its private /tmp; its folder too where the grader is root: ``runfolder``)
    disk: int | None = 1 << 30

    def describe(self) -> str:
        mem = f"{self.memory >> 20} MiB address space" if self.memory else "memory not limited (GPU driver)"
        procs = f"{self.processes} processes" if self.processes else "processes not counted"
        disk = f", {self.disk >> 20} MiB written in all" if self.disk else ""
        return (f"{self.wall_seconds:g} s wall clock for all its processes, {mem}, {self.file_size >> 20} MiB "
                f"per file{disk}, {procs}")

    def to_json(self) -> str:
        return json.dumps(asdict(self))


@dataclass(frozen=True)
class Isolation:
    """How a run was isolated, for the report."""

    level: str  # "bubblewrap" or "process"
    user: str  # "nobody (uid 65534)" or "root (uid 0)" ...
    notes: tuple[str, ...] = ()

    def describe(self) -> str:
        what = {"bubblewrap": "bubblewrap sandbox (read-only filesystem except a fresh folder, no network, "
                              "own PID namespace)",
                "process": "separate process (fresh folder, clean environment, own session; the filesystem "
                           "and network are not fenced off: install bubblewrap for that)"}[self.level]
        extra = "; ".join(self.notes)
        return f"{what}, as {self.user}" + (f"; {extra}" if extra else "")


@dataclass
class Finished:
    """How the supervised tree ended."""

    returncode: int | None
    timed_out: bool
    seconds: float
    killed: int = 0  # processes of the run still alive at the end, killed
    oom_kills: int = 0  # processes the kernel killed because the run's cgroup ran out of memory
    #: bytes the run's processes held together when the supervisor stopped it for memory (no cgroup: ``_held``)
    memory_held: int = 0


# ---- in the child ----------------------------------------------------------------------------------

def apply_limits(limits: Limits) -> list[str]:
    """Limit this process (and what it starts) before any untrusted code runs; returns what was not applied."""
    skipped = []
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl  # Linux only
        pr_set_pdeathsig, pr_set_no_new_privs = 1, 38
        if prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0) != 0:
            skipped.append("die-with-parent")
        if prctl(pr_set_no_new_privs, 1, 0, 0, 0) != 0:
            skipped.append("no-new-privileges")
    except (AttributeError, OSError):
        skipped += ["die-with-parent", "no-new-privileges"]
    wanted = [(resource.RLIMIT_FSIZE, limits.file_size), (resource.RLIMIT_CORE, 0)]
    if limits.memory:
        wanted.append((resource.RLIMIT_AS, limits.memory))
    if limits.cpu_seconds:
        wanted.append((resource.RLIMIT_CPU, limits.cpu_seconds))
    if limits.processes:
        wanted.append((resource.RLIMIT_NPROC, limits.processes))
    for which, value in wanted:
        try:
            soft, hard = resource.getrlimit(which)
            value = value if hard == resource.RLIM_INFINITY else min(value, hard)
            resource.setrlimit(which, (value, value))
        except (ValueError, OSError):
            skipped.append(_LIMIT_NAMES.get(which, str(which)))
    return skipped


_LIMIT_NAMES = {resource.RLIMIT_FSIZE: "file size", resource.RLIMIT_CORE: "core dumps",
                resource.RLIMIT_AS: "address space", resource.RLIMIT_CPU: "CPU time",
                resource.RLIMIT_NPROC: "process count"}


# ---- in the parent: what this machine offers ---------------------------------------------------------

def _unprivileged_ids() -> tuple[int, int] | None:
    try:
        pw = pwd.getpwnam(_UNPRIVILEGED)
    except KeyError:
        return None
    return pw.pw_uid, pw.pw_gid


def _probe(argv: Sequence[str], ids: tuple[int, int] | None) -> bool:
    kwargs: dict = {}
    if ids is not None:
        kwargs.update(user=ids[0], group=ids[1], extra_groups=[])
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "PYTHONPATH": str(_PACKAGE_PARENT), "HOME": "/",
           "PYTHONDONTWRITEBYTECODE": "1"}
    try:
        return subprocess.run(list(argv), cwd="/", env=env, capture_output=True, timeout=60,
                              start_new_session=True, **kwargs).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


@functools.cache
def _run_user() -> tuple[tuple[int, int] | None, str, tuple[str, ...]]:
    """(uid, gid) to drop to, how to name the user, notes. Only a root grader drops privileges."""
    if os.getuid() != 0:
        try:
            me = pwd.getpwuid(os.getuid()).pw_name
        except KeyError:
            me = "?"
        return None, f"your own user ({me}, uid {os.getuid()})", ()
    ids = _unprivileged_ids()
    if ids is None:
        return None, "root (uid 0)", (f"there is no user {_UNPRIVILEGED!r} to run as",)
    if not _probe([sys.executable, "-c", "import numpy, tklab.grading.child"], ids):
        return None, "root (uid 0)", (f"{_UNPRIVILEGED} cannot read this Python installation ({sys.prefix})",)
    return ids, f"{_UNPRIVILEGED} (uid {ids[0]})", ()


#: Environment variable telling the child to drop to ``uid:gid`` first thing (set inside bubblewrap only).
DROP_VAR = "TKLAB_SANDBOX_DROP"
_NAMESPACES = ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try"]


def _python_paths() -> set[Path]:
    """What the child's Python needs to read: the installation, the package, ``sys.path``."""
    return {Path(p).resolve() for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
                                        Path(sys.executable).resolve().parent, _PACKAGE_PARENT, *sys.path)
            if p and Path(p).is_absolute() and Path(p).exists()}


def _installation() -> set[Path]:
    """The Python installation the child runs on (prefixes, the interpreter's folder, site-packages): unlike
    ``_python_paths`` not this process's ``sys.path``, which may hold folders the child never imports from."""
    import sysconfig

    paths = sysconfig.get_paths()
    return {Path(p).resolve() for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
                                        Path(sys.executable).resolve().parent, paths.get("purelib"),
                                        paths.get("platlib")) if p and Path(p).exists()}


def _closed_folders(paths: set[Path]) -> list[Path]:
    """The folders above ``paths`` that keep other users out (no o+x, e.g. ``/root``), outermost only."""
    found = set()
    for p in paths:
        for a in reversed([*p.parents, p][:-1] if p.is_file() else [*p.parents]):
            if a != Path("/") and not _reachable_by_others(a):
                found.add(a)
                break
    return sorted(found)


@functools.cache
def _drop_inside() -> tuple[int, int] | None:
    """A root grader whose ``nobody`` cannot read this Python (it sits under ``/root``, say): bubblewrap, run
    as root without a user namespace, lays an empty folder over each closed folder, binds back read-only
    only what Python needs, and the child drops to ``nobody`` itself before it reads anything of the
    learner's. Then the run is unprivileged outside the sandbox too (a user namespace mapping uid 65534 to
    the caller would leave it root outside). None where that does not apply."""
    if os.getuid() != 0 or _run_user()[0] is not None:
        return None
    return _unprivileged_ids()


def _blanked_home() -> list[Path]:
    """A grader that is not root: its home, where its credentials live (``~/.git-credentials``, tokens, keys),
    for bubblewrap to blank like a closed folder; empty for root (whose home its run's user cannot enter) and for
    a home under ``/tmp`` (the sandbox's own ``/tmp`` covers it)."""
    if os.getuid() == 0:
        return []
    try:
        home = Path.home().resolve()
    except (KeyError, RuntimeError, OSError):
        return []
    return [home] if home.is_dir() and home != Path("/") and Path("/tmp") not in home.parents else []


def _bwrap_overlays() -> list[str]:
    """Folders laid over with an empty tmpfs, with what Python needs bound back: those that keep ``nobody`` out
    (``_drop_inside``), and the home of a grader that is not root (``_blanked_home``)."""
    needed = _python_paths()
    blank = _closed_folders(needed) if _drop_inside() is not None else []
    blank += [h for h in _blanked_home() if not any(b == h or b in h.parents for b in blank)]
    out: list[str] = []
    for closed in blank:
        out += ["--perms", "0755", "--tmpfs", str(closed)]
        inside = sorted(p for p in needed if closed in p.parents)
        made: set[Path] = set()
        for p in inside:
            if not any(q in p.parents for q in inside):
                for d in reversed(p.parents):  # the folders on the way, readable by others (bwrap makes them 0700)
                    if closed in d.parents and d not in made:
                        made.add(d)
                        out += ["--perms", "0755", "--dir", str(d)]
                out += ["--ro-bind", str(p), str(p)]
    return out


def _bwrap_user_args(ids: tuple[int, int] | None = None) -> list[str]:
    """Namespaces and user: a root grader that can hand the run to ``nobody`` (or an ordinary user) gets
    every namespace; a root grader whose ``nobody`` cannot read Python has the child drop to it inside
    (``_drop_inside``; no user namespace, where uid 65534 could not exist); without ``nobody`` at all the run
    is uid 65534 inside a user namespace (root outside, and the report says so)."""
    if os.getuid() == 0 and not _run_user()[0]:
        ids = ids or _drop_inside()
        if ids is not None:
            return [*_NAMESPACES, "--setenv", DROP_VAR, f"{ids[0]}:{ids[1]}"]
        return ["--unshare-all", "--unshare-user", "--uid", "65534", "--gid", "65534"]
    return ["--unshare-all"]


#: Environment variable naming (JSON) the folders a root child hides in a mount namespace of its own before it
#: drops to its user (the process level, where no bubblewrap does it: ``unseen.hide_here``).
HIDE_VAR = "TKLAB_SANDBOX_HIDE"


#: Environment variable naming the read-only copy of the run's inputs that the child copies into its bounded folder
#: first thing (``Sandbox.bounds_folder``).
SEED_VAR = "TKLAB_SANDBOX_SEED"
#: Where that copy is, inside the sandbox.
_SEED = "/tmp/.tklab-run-inputs"


def _fill_from_seed() -> None:
    """Copy the run's inputs (``SEED_VAR``) into the working folder, a tmpfs of the run's disk budget."""
    seed = os.environ.pop(SEED_VAR, "")
    if not seed:
        return
    try:
        shutil.copytree(seed, ".", symlinks=True, dirs_exist_ok=True)
    except (OSError, shutil.Error) as e:
        raise SystemExit(f"the run's inputs do not fit in its folder ({e})") from None


def drop_privileges() -> list[str]:
    """In the child, first thing: fill the working folder from the run's inputs (``SEED_VAR``: a grader that is not
    root), hide what ``HIDE_VAR`` names (a root child at the process level), then become the user ``DROP_VAR`` names.
    Returns what could not be hidden."""
    _fill_from_seed()
    hide = os.environ.pop(HIDE_VAR, "")
    missed = unseen.hide_here(json.loads(hide)) if hide and os.getuid() == 0 else []
    want = os.environ.pop(DROP_VAR, "")
    if not want or os.getuid() != 0:
        return missed
    uid, gid = (int(x) for x in want.split(":"))
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)
    if os.getuid() != uid or os.geteuid() != uid:
        raise SystemExit("could not drop privileges")
    return missed


@functools.cache
def _bwrap_probe() -> str | None:
    """The bwrap path if it can start a sandbox here (user namespaces may be switched off), else None."""
    exe = shutil.which("bwrap")
    if exe is None:
        return None
    check = "import numpy, tklab.grading.child"
    if _drop_inside() is not None:
        check = ("import os; from tklab.grading.sandbox import drop_privileges; drop_privileges(); "
                 "assert os.getuid() != 0; import numpy, tklab.grading.child")
    ok = _probe([exe, "--ro-bind", "/", "/", *_bwrap_overlays(), "--dev", "/dev", "--proc", "/proc",
                 *_bwrap_user_args(), "--die-with-parent", "--new-session", sys.executable, "-c", check],
                _run_user()[0])
    return exe if ok else None


def _bwrap_works() -> str | None:
    """``_bwrap_probe()``, probed again when the bwrap it found has since been removed (a long lab session)."""
    exe = _bwrap_probe()
    if exe is not None and not os.access(exe, os.X_OK):
        _bwrap_probe.cache_clear()
        exe = _bwrap_probe()
    return exe


_bwrap_works.cache_clear = _bwrap_probe.cache_clear  # type: ignore[attr-defined]  # tests reset it by this name


def isolation(gpu: bool = False) -> Isolation:
    """What a run started now would get on this machine."""
    ids, user, notes = _run_user()
    forced = os.environ.get("TKLAB_SANDBOX", "").strip().lower()
    if forced not in ("", "process", "bubblewrap"):
        notes += (f"TKLAB_SANDBOX={forced!r} is not 'process' or 'bubblewrap'; ignored",)
    if forced != "process" and _bwrap_works():
        if os.getuid() == 0 and not ids:
            if _drop_inside() is not None:
                user = f"{_UNPRIVILEGED} (uid {_drop_inside()[0]}), dropped to inside the sandbox"  # type: ignore[index]
                notes = tuple(n for n in notes if "cannot read" not in n)
            else:
                user = "uid 65534 without capabilities inside the sandbox (root outside it)"
        return Isolation("bubblewrap", user, notes)
    if forced == "bubblewrap":
        notes += ("TKLAB_SANDBOX=bubblewrap, but bwrap is missing or cannot start a sandbox here",)
    elif forced != "process":
        notes += ("no bubblewrap here (`apt install bubblewrap` for a real sandbox)",)
    if os.getuid() == 0 and ids is None:
        notes += ("the code runs as root and could lift its own limits",)
    return Isolation("process", user, notes)


def refusal(allow_unsandboxed: bool) -> str | None:
    """Why grading must not start here (``grade`` and ``nbgrade autograde`` alike), or None: the
    grading problem of this machine unless the instructor passed ``--allow-unsandboxed``."""
    problem = grading_problem()
    if problem and not allow_unsandboxed:
        return f"refusing to grade: {problem}. --allow-unsandboxed grades anyway"
    return None


def grading_problem(gpu: bool = False) -> str | None:
    """Why grading a class here would let learner code reach the grader (None: the isolation holds).

    Grading refuses (unless told otherwise) when the code would run as root, or as the grader's own user
    without bubblewrap: then it could write the grader's files, the compile cache and the sheets, read
    what the grader can, and print it into an error message that lands in a sheet."""
    iso = isolation(gpu)
    ids = _run_user()[0]
    if os.getuid() == 0 and ids is None and iso.level == "bubblewrap" and _drop_inside() is not None:
        return None
    if os.getuid() == 0 and ids is None:
        where = "inside bubblewrap, but root outside it" if iso.level == "bubblewrap" else "without a sandbox"
        why = next((n for n in iso.notes if "cannot read" in n or "no user" in n), "")
        return (f"learner code would run as root ({where}){': ' + why if why else ''}; make the Python installation "
                f"readable by {_UNPRIVILEGED!r} (or grade as an ordinary user with bubblewrap installed)")
    if iso.level == "process" and ids is None:
        return ("no bubblewrap here, so learner code would run as you, able to write your files, the compile cache "
                "and the sheets: install bubblewrap (`apt install bubblewrap`) or grade as root with a readable "
                f"Python installation (the code then runs as {_UNPRIVILEGED!r})")
    return None


@functools.cache
def _nproc_per_namespace() -> bool:
    """Whether ``RLIMIT_NPROC`` counts a user namespace's processes apart from its creator's (Linux 5.14 and later:
    the count is kept per user namespace and uid, ``ucounts``). Then a run in a user namespace of its own, as a grader
    that is not root starts it in bubblewrap, has a process limit of its own though it is the grader's uid outside:
    neither the grader's processes nor a concurrent run's count against it."""
    release = os.uname().release.split(".")
    try:
        return (int(release[0]), int("".join(c for c in release[1] if c.isdigit()) or 0)) >= (5, 14)
    except (IndexError, ValueError):
        return False


def process_limit_problem() -> str | None:
    """Why a run started now gets no process limit of its own (None: it gets one)."""
    if _run_user()[0] is not None or (_drop_inside() is not None and isolation().level == "bubblewrap"):
        return None
    if os.getuid() == 0:
        return "the run is root (no unprivileged user to run as): root is exempt from the process limit"
    if isolation().level != "bubblewrap":
        return ("the run is the grader's own user without a user namespace (no bubblewrap): the limit would count the "
                "grader's processes too")
    if not _nproc_per_namespace():
        return (f"this kernel ({os.uname().release}) counts processes per user, not per user namespace (Linux 5.14 and "
                "later do): the limit would count the grader's processes too")
    return None


def limits_for(limits: Limits) -> Limits:
    """``limits`` as this machine can apply them: a process count only where it counts the run's processes alone
    (``process_limit_problem``): a user of the run's own (root grader), or a user namespace of the run's own on a
    kernel that counts processes per namespace (a grader that is not root, in bubblewrap)."""
    if process_limit_problem() is not None:
        return dataclasses.replace(limits, processes=0)
    return limits


def cgroup_problem() -> str:
    """Why a run started now gets no cgroup of its own (``rungroup.RunGroup.create`` returned None), in words: what
    each cgroup version here lacks."""
    if os.environ.get("TKLAB_NO_CGROUP", "") in ("1", "true", "yes"):
        return "TKLAB_NO_CGROUP is set"
    mounts = rungroup._mounts()
    own = rungroup._own_paths()
    v1 = {c: rungroup._join(m, root, own.get(c, "/")) for root, m, kind, opts in mounts if kind == "cgroup"
          for c in ("memory", "pids") if c in opts}
    unified = next((rungroup._join(m, root, own.get("", "/")) for root, m, kind, _ in mounts if kind == "cgroup2"),
                   None)
    why = []
    if "memory" in v1 and "pids" in v1:
        closed = [str(d) for d in v1.values() if not os.access(d, os.W_OK)]
        why.append(f"cgroup v1: uid {os.getuid()} may not write {', '.join(closed)}" if closed else
                   "cgroup v1: a group could not be made")
    if unified is None:
        why.append("no cgroup v2 hierarchy is mounted")
        return "; ".join(why)
    wanted = {"memory", "pids"}
    try:
        available = set((unified / "cgroup.controllers").read_text().split())
        handed = set((unified / "cgroup.subtree_control").read_text().split())
    except OSError as e:
        why.append(f"cgroup v2: {unified} cannot be read ({e.strerror})")
        return "; ".join(why)
    if not wanted <= available:
        why.append(f"cgroup v2: this process's cgroup {unified} has no {' or '.join(sorted(wanted - available))} "
                   "controller (none was delegated to this user: systemd's Delegate=)")
    elif not wanted <= handed:
        why.append(f"cgroup v2: {unified} does not hand memory and pids to its children (cgroup.subtree_control: "
                   f"{' '.join(sorted(handed)) or 'empty'})")
    elif not os.access(unified, os.W_OK):
        why.append(f"cgroup v2: uid {os.getuid()} may not write {unified}")
    else:
        why.append("cgroup v2: a group could not be made")
    return "; ".join(why)


# ---- the process tree ---------------------------------------------------------------------------------

def _private_homes() -> list[Path]:
    """Folders of the grader's home that hold credentials: hidden in the sandbox."""
    home = Path.home()
    return [home / d for d in (".ssh", ".gnupg", ".aws", ".config", ".docker", ".kube", ".netrc.d")]


def _reachable_by_others(path: Path) -> bool:
    """Whether a user other than the owner may walk down to ``path`` (every folder above it: o+x)."""
    try:
        return all(os.stat(p).st_mode & 0o001 for p in [*reversed(path.parents), path])
    except OSError:
        return False


def _stat(pid: int) -> tuple[int, int, int, int] | None:
    """(ppid, pgrp, session, starttime) of a live process, or None if it is gone (or a zombie)."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rfind(")") + 2:].split()
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[1]), int(fields[2]), int(fields[3]), int(fields[19])


def _has_token(pid: int, token: bytes) -> bool:
    try:
        return token in Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False


_PR_SET_CHILD_SUBREAPER = 36
_adopting = False


def adopt_orphans(on: bool = True) -> bool:
    """Make this process the reaper of its descendants' orphans (Linux ``PR_SET_CHILD_SUBREAPER``), so a
    daemon a run leaves behind (double fork, ``setsid``, cleared environment) becomes this process's child
    and dies with the run at the ``process`` level too. For a process that does nothing but check (``python
    -m tklab.grading.check``, which ``grade`` and ``nbgrade`` start): every child of it that appears during a
    run, other than the run itself, is taken for the run's. Returns whether it is on."""
    global _adopting
    try:
        ok = ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1 if on else 0, 0, 0, 0) == 0
    except (AttributeError, OSError):
        ok = False
    _adopting = bool(on and ok)
    return _adopting


def _children_of(pid: int) -> set[int]:
    out = set()
    with contextlib.suppress(OSError):
        for entry in os.listdir("/proc"):
            if entry.isdigit() and (st := _stat(int(entry))) is not None and st[0] == pid:
                out.add(int(entry))
    return out


def _run_processes(root: int, token: bytes, *, descendants: bool = True,
                   known_children: set[int] | None = None) -> dict[int, int]:
    """{pid: starttime} of the run's processes: descendants of ``root`` (only while ``root`` is not yet
    reaped: afterwards its number may belong to someone else), its session and group (a number in use as
    a session or group id is never handed out again), and token bearers; with ``known_children`` (this
    process adopts orphans), also every child of this process not in it, and their descendants."""
    table: dict[int, tuple[int, int, int, int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:  # no /proc (macOS): the session and process group are what can be killed
        return {}
    for entry in entries:
        if entry.isdigit():
            st = _stat(int(entry))
            if st is not None:
                table[int(entry)] = st
    children: dict[int, list[int]] = {}
    for pid, (ppid, *_rest) in table.items():
        children.setdefault(ppid, []).append(pid)
    found: set[int] = set()
    me = os.getpid()
    adopted = [] if known_children is None else [p for p in children.get(me, []) if p != root
                                                 and p not in known_children]
    found.update(adopted)
    stack = ([root] if descendants else []) + adopted
    while stack:
        pid = stack.pop()
        for child in children.get(pid, []):
            if child not in found:
                found.add(child)
                stack.append(child)
    for pid, (_ppid, pgrp, sid, _start) in table.items():
        if pid == me:
            continue
        if pgrp == root or sid == root or _has_token(pid, token):
            found.add(pid)
    if root in table:
        found.add(root)
    return {pid: table[pid][3] for pid in found if pid in table and pid != me}


class Sandbox:
    """One run: a fresh working folder, the isolation this machine offers, a supervised process tree.

    ``confine=False`` is for a trusted child (tklab's own checker, run by ``grade``): no sandbox and no
    change of user, but the same supervision: its own session, a wall-clock limit, the whole tree killed.
    """

    def __init__(self, workdir: Path, *, gpu: bool = False, hide: Sequence[Path] = (), limits: Limits = Limits(),
                 confine: bool = True, binds: Sequence[Path] = ()):
        self.workdir = Path(workdir)
        self.binds = [Path(b).resolve() for b in binds]  # besides workdir, what the run may write (a kernel's sockets)
        self.gpu, self.limits, self.confine = gpu, limits, confine
        self.isolation = isolation(gpu) if confine else Isolation("process", "the grader's user", ("trusted",))
        extras = unseen.workbook_extras(_PACKAGE_PARENT, _installation()) if confine else []
        self.hide = [Path(h).resolve() for h in (*hide, *_private_homes(), *extras)]
        self.token = uuid.uuid4().hex
        self.proc: subprocess.Popen[bytes] | None = None
        self._seen: dict[int, int] = {}
        self._known: set[int] | None = None
        self.group: rungroup.RunGroup | None = None
        self._group_text = ""
        self.oom_kills = 0
        self.lease: uids.Lease | None = None
        self.ids = (_run_user()[0] or (_drop_inside() if self.isolation.level == "bubblewrap" else None)) \
            if confine else None
        if self.ids is not None and os.getuid() == 0:  # a user of its own for this run (uids.py)
            with contextlib.suppress(uids.LeaseError, OSError):
                self.lease = uids.lease()
                self.ids = (self.lease.uid, self.lease.gid)
                inside = ", dropped to inside the sandbox" if "dropped to inside" in self.isolation.user else ""
                self.isolation = Isolation(self.isolation.level, f"uid {self.ids[0]}, an unprivileged user of its "
                                           f"own for this run{inside}", self.isolation.notes)

    # -- setup ---------------------------------------------------------------------------------------
    def run_ids(self) -> tuple[int, int] | None:
        """(uid, gid) the code runs as when that is not the grader's own user (None: it is)."""
        return self.ids

    def hand_over(self) -> None:
        """Give the working folder to the user the code runs as (after the parent has written into it)."""
        ids = self.run_ids()
        if ids is None:
            return
        for dirpath, dirnames, filenames in os.walk(self.workdir):
            for name in [dirpath, *(os.path.join(dirpath, n) for n in dirnames + filenames)]:
                os.chown(name, *ids, follow_symlinks=False)

    def _bwrap_argv(self, argv: Sequence[str]) -> list[str]:
        exe = _bwrap_works()
        assert exe is not None
        work = str(self.workdir.resolve())
        tmp = Path("/tmp")
        keep = [Path(work), Path(sys.prefix).resolve(), Path(sys.executable).resolve(), _PACKAGE_PARENT / "tklab"]
        # The sandbox gets a /tmp of its own; what Python needs from the real /tmp (a venv or a clone there)
        # is bound back, read-only.
        needed = {Path(p).resolve() for p in (sys.prefix, sys.base_prefix, sys.exec_prefix,
                                              Path(sys.executable).resolve().parent, _PACKAGE_PARENT, *sys.path)
                  if p and Path(p).is_absolute() and Path(p).exists()}
        under_tmp = sorted(p for p in needed if tmp in p.parents and Path(work) not in (p, *p.parents))
        binds = [p for p in under_tmp if not any(q in p.parents for q in under_tmp)]
        out = [exe, "--ro-bind", "/", "/", *_bwrap_overlays(), "--proc", "/proc"]
        out += ["--dev-bind", "/dev", "/dev"] if self.gpu else ["--dev", "/dev"]
        size = ["--size", str(self.limits.disk)] if self.limits.disk else []
        out += ["--perms", "1777", *size, "--tmpfs", "/tmp"]  # the run's own /tmp, bounded, writable by its user
        made: set[Path] = set()
        for b in binds:
            for d in reversed(b.parents):  # the folders on the way, passable by the run's user (bwrap: 0700)
                if tmp in d.parents and d not in made:
                    made.add(d)
                    out += ["--perms", "0755", "--dir", str(d)]
            out += ["--ro-bind", str(b), str(b)]
        as_other = _run_user()[0] is not None or _drop_inside() is not None
        for h in self.hide:
            if as_other and not _reachable_by_others(h):
                continue  # the run's user cannot get there anyway (and bwrap, as that user, could not mount it)
            if tmp in h.parents and not any(b == h or b in h.parents for b in binds):
                continue  # under /tmp and not bound back: hidden already
            if h.is_dir() and not any(k == h or h in k.parents for k in keep):
                out += ["--tmpfs", str(h)]
        for b in self.binds:
            for d in reversed(b.parents):
                if tmp in d.parents and d not in made:
                    made.add(d)
                    out += ["--perms", "0755", "--dir", str(d)]
            out += ["--bind", str(b), str(b)]
        if self.bounds_folder():
            # the folder a tmpfs inside the sandbox (in the bounded /tmp when it is under /tmp, so that the folder and
            # /tmp share one budget), filled by the child from a read-only view of what the grader wrote
            if tmp in Path(work).parents:
                out += ["--perms", "0700", "--dir", work]
            else:
                out += ["--size", str(self.limits.disk), "--perms", "0700", "--tmpfs", work]
            out += ["--ro-bind", work, _SEED, "--setenv", SEED_VAR, _SEED]
        else:
            out += ["--bind", work, work]
        out += ["--chdir", work, *_bwrap_user_args(self.ids), "--die-with-parent",
                "--new-session", "--setenv", TOKEN_VAR, self.token]
        return out + list(argv)

    def bounds_folder(self) -> bool:
        """Whether the run's folder is bounded by bubblewrap: a grader that is not root (which cannot mount the folder
        itself, ``runfolder``) and a folder that is not a mount already. What the run writes there and in ``/tmp`` then
        counts against ``Limits.disk`` in all (one tmpfs, or two when the folder is not under ``/tmp``)."""
        return (self.confine and self.isolation.level == "bubblewrap" and bool(self.limits.disk)
                and os.getuid() != 0 and not os.path.ismount(self.workdir))

    def _hidden_here(self) -> list[Path]:
        """The folders to hide at the process level: those of ``hide`` that hold nothing the run needs."""
        keep = [self.workdir.resolve(), *_installation(), _PACKAGE_PARENT / "tklab"]
        return [h for h in self.hide if h.is_dir() and not any(k == h or h in k.parents for k in keep)
                and h != _PACKAGE_PARENT]

    def start(self, argv: Sequence[str], env: Mapping[str, str], pass_fds: Sequence[int] = ()) -> None:
        """Start ``argv`` (the child) in the sandbox, stdout and stderr merged into one pipe."""
        ids = self.ids if self.confine and _run_user()[0] is not None else None
        env = dict(env)
        env[TOKEN_VAR] = self.token
        command = self._bwrap_argv(argv) if self.isolation.level == "bubblewrap" else list(argv)
        kwargs: dict = {}
        if self.confine and self.isolation.level == "process" and os.getuid() == 0:
            # no bubblewrap: the child (root until its first step) hides what the run may not see in a mount
            # namespace of its own, then drops to the run's user itself (drop_privileges)
            env[HIDE_VAR] = json.dumps([str(h) for h in self._hidden_here()])
            if ids is not None:
                env[DROP_VAR] = f"{ids[0]}:{ids[1]}"
                ids = None
        if ids is not None:
            kwargs.update(user=ids[0], group=ids[1], extra_groups=[])
        self.started = time.monotonic()
        self._known = _children_of(os.getpid()) if _adopting else None
        self.proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, env=env, cwd=self.workdir, start_new_session=True,
                                     pass_fds=tuple(pass_fds), **kwargs)
        if self.confine:  # (the runner's child waits for its key, written after this: no learner code runs yet)
            self.group = rungroup.RunGroup.create(f"tklab-{self.token}", memory=self.limits.memory,
                                                  processes=self.limits.processes or 1024)
            if self.group is not None:
                self.group.add_tree(self.proc.pid)
                self._group_text = self.group.describe()
            elif self.samples_memory():
                self._group_text = (f"no cgroup of its own ({cgroup_problem()}): the grader measures what its "
                                    f"processes hold together every {SAMPLE_SECONDS:g} s and stops the run past "
                                    f"{(self.limits.memory or 0) >> 20} MiB")

    def describe_group(self) -> str:
        """The run's cgroup, or how its memory is bounded in all without one, for the report ("" neither)."""
        return self._group_text

    # -- supervision ---------------------------------------------------------------------------------
    def supervise(self, readers: Mapping[int, Callable[[bytes], None]], *, grace: float = 0.5) -> Finished:
        """Feed output to ``readers`` ({fd: callback}) until the child exits (then ``grace`` seconds for
        what is still in the pipes) or the wall-clock limit; then kill every process of the run.

        A process the child left behind that keeps a pipe open cannot hold this up: after the child's exit
        the pipes get ``grace`` seconds, not until they close.
        """
        assert self.proc is not None and self.proc.stdout is not None
        deadline = self.started + self.limits.wall_seconds
        sel = selectors.DefaultSelector()
        for fd in readers:
            os.set_blocking(fd, False)
            sel.register(fd, selectors.EVENT_READ)
        open_fds = set(readers)
        timed_out = False
        exited_at: float | None = None
        token = self.token.encode()
        last_scan = last_sample = 0.0
        sample = self.samples_memory()
        held = 0
        while open_fds:
            now = time.monotonic()
            if self.proc.poll() is not None and exited_at is None:
                exited_at = now
            if exited_at is not None and now - exited_at > grace:
                break
            if exited_at is None and now >= deadline:
                timed_out = True
                break
            if sample and exited_at is None and now - last_sample >= SAMPLE_SECONDS:
                last_sample = now
                held = self._held()
                if held > (self.limits.memory or 0):
                    break
                held = 0
            if now - last_scan > 0.25 and self.isolation.level == "process" and exited_at is None:
                self._seen.update(_run_processes(self.proc.pid, token, known_children=self._known))
                last_scan = now
            limit = min(deadline, exited_at + grace if exited_at is not None else deadline)
            for key, _ in sel.select(timeout=max(0.0, min(0.1, limit - now))):
                fd = key.fd
                try:
                    data = os.read(fd, 1 << 16)
                except BlockingIOError:
                    continue
                except OSError:
                    data = b""
                if not data:
                    sel.unregister(fd)
                    open_fds.discard(fd)
                    continue
                readers[fd](data)
        sel.close()
        while not timed_out and not held and exited_at is None and self.proc.poll() is None:
            # every pipe closed: wait for the exit, within the limit (and, without a cgroup, the memory bound)
            if time.monotonic() >= deadline:
                timed_out = True
                break
            try:
                self.proc.wait(timeout=max(0.0, min(SAMPLE_SECONDS, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                if sample and (held := self._held()) <= (self.limits.memory or 0):
                    held = 0
        alive = len(self._run_tree()) if held else 0
        killed = self.kill()
        code = None if timed_out else self.proc.returncode
        if code is not None and code > 128 and self.isolation.level == "bubblewrap":
            code = -(code - 128)  # bwrap reports a child killed by signal N as exit 128 + N
        if held:
            self.oom_kills = max(self.oom_kills, alive)
        return Finished(code, timed_out, time.monotonic() - self.started, killed, self.oom_kills, held)

    def samples_memory(self) -> bool:
        """Whether the supervisor bounds the run's memory in all by sampling it (``_held``): a confined run with a
        memory bound and no cgroup of its own (a grader that is not root, where none was delegated to it)."""
        return self.confine and self.group is None and bool(self.limits.memory)

    def _run_tree(self) -> set[int]:
        """The run's live processes: the started process's descendants (at the bubblewrap level every process of the
        run, its daemons too: they are the PID namespace's, whose first process descends from it) and those seen at
        the process level."""
        assert self.proc is not None
        tree = rungroup._descendants(self.proc.pid) | set(self._seen)
        if self.proc.poll() is None:
            tree.add(self.proc.pid)
        return {p for p in tree if _stat(p) is not None}

    def _held(self) -> int:
        """Bytes the run's processes hold now: their proportional set sizes summed (a page shared by several counts
        once in all), or their resident sizes where the proportional one cannot be read."""
        total = 0
        for pid in self._run_tree():
            try:
                for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                    if line.startswith("Pss:"):
                        total += int(line.split()[1]) << 10
                        break
            except (OSError, ValueError, IndexError):
                with contextlib.suppress(OSError, ValueError, IndexError):
                    total += int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        return total

    #: How long a run that has exited gets for its last processes to finish exiting on their own before the ones
    #: still there are killed and reported as left behind: on a loaded machine (a class checking at once) a
    #: process of the run can still be on its way out when the run's pipes close, and was reported as left behind.
    EXIT_GRACE_SECONDS = 0.25

    def _left(self, token: bytes) -> dict[int, int]:
        """{pid: starttime} of the run's processes other than the child, alive now (the /proc walk)."""
        alive = dict(self._seen)
        alive.update(_run_processes(self.proc.pid, token, descendants=self.proc.returncode is None,
                                    known_children=self._known))
        return {p: s for p, s in alive.items() if (st := _stat(p)) is not None and st[3] == s and p != self.proc.pid}

    def _after_exits(self, still_there: Callable[[], set[int]]) -> set[int]:
        """The processes ``still_there`` names, once a run that has exited gave them EXIT_GRACE_SECONDS to finish
        exiting (nothing waits while the child still runs: then it is the run's end that is forced)."""
        left = still_there()
        if self.proc.poll() is None:
            return left
        deadline = time.monotonic() + self.EXIT_GRACE_SECONDS
        while left and time.monotonic() < deadline:
            time.sleep(0.02)
            left = still_there()
        return left

    def _stop_all(self, token: bytes) -> None:
        """SIGSTOP the child and every process of the run before any is killed (``rungroup.stop_all`` says why)."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(self.proc.pid, signal.SIGSTOP)
        rungroup.stop_all(lambda: self._left(token))

    def kill(self) -> int:
        """Kill every process of the run; returns how many were still alive."""
        if self.proc is None:
            return 0
        token = self.token.encode()
        killed = 0
        if self.group is not None:  # every process of the run, wherever its session or environment went
            self.oom_kills = self.group.oom_kills()
            alive = self._after_exits(lambda: self.group.pids() - {self.proc.pid})
            self.group.kill()
            killed = len(alive)  # (the child itself is not counted: it is the run)
        else:
            self._after_exits(lambda: set(self._left(token)))
            self._stop_all(token)
        if self.proc.returncode is None:  # (once the child is reaped, its number is not ours to signal)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        for _ in range(50):
            alive = self._left(token)
            if self.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    self.proc.kill()
            if not alive and self.proc.poll() is not None:
                break
            for pid in alive:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
                    killed += 1
            self._seen = {}
            time.sleep(0.02)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)
        if self._known is not None:  # adopted orphans we killed: reap them (no zombies), by number only
            for pid in _children_of(os.getpid()) - self._known - {self.proc.pid}:
                with contextlib.suppress(ChildProcessError, OSError):
                    os.waitpid(pid, os.WNOHANG)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        if self.group is not None:
            self.group.remove()
            self.group = None
        if self.lease is not None:  # its processes are gone: the uid may serve another run
            self.lease.release()
            self.lease = None
        return killed

