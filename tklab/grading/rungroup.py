"""One cgroup per run: every process a run starts counted, bounded and killed together.

Why: resource limits are per process (``RLIMIT_AS``, ``RLIMIT_FSIZE``) or per user (``RLIMIT_NPROC``), so a run
that forks ten processes holds ten times the memory, and a process that leaves its session and clears its
environment can escape the kill at the process level. A cgroup holds every process the run starts, whatever it
does to its session: its memory is bounded as a whole (its ``/tmp`` pages included, being tmpfs), its process
count too, and one kill ends all of it. The report says whether a run had one (``describe``), and a run the
kernel stopped for memory says so (``oom_kills``).

Where it works: the cgroup v1 ``memory`` and ``pids`` hierarchies (a child of this process's own cgroup in each),
or cgroup v2 where this process's cgroup hands ``memory`` and ``pids`` to its children. That takes a grader that
may write there: root outside a locked-down container, or a delegated v2 subtree. Elsewhere ``create`` returns
None and the per-process limits are all there is.

Public API: ``RunGroup.create(name, memory=..., processes=...)``, ``RunGroup``: ``add_tree(pid)``, ``kill()``,
``oom_kills()``, ``peak_memory()``, ``remove()``, ``describe()``; ``stop_all(processes)``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Iterable
from pathlib import Path


def _mounts() -> list[tuple[str, Path, str, set[str]]]:
    """(root within the hierarchy, mount point, file system type, super options) of each cgroup mount."""
    found = []
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return []
    for line in lines:
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 3 or tail[0] not in ("cgroup", "cgroup2"):
            continue
        found.append((fields[3], Path(fields[4]), tail[0], set(tail[2].split(","))))
    return found


def _own_paths() -> dict[str, str]:
    """{controller or "": this process's cgroup path} from ``/proc/self/cgroup``."""
    out: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            for c in controllers.split(",") if controllers else [""]:
                out[c] = path
    return out


def _join(mount: Path, root: str, path: str) -> Path:
    rel = os.path.relpath(path, root) if path.startswith(root) else path.lstrip("/")
    return mount if rel == "." else mount / rel.lstrip("/")


def _write(path: Path, value: str) -> bool:
    try:
        path.write_text(value)
        return True
    except OSError:
        return False


def stop_all(processes: Callable[[], Iterable[int]]) -> None:
    """SIGSTOP every process ``processes()`` names, again until it names no new one, before any is killed: killed one
    by one, in whatever order they are found, a kill could end a process another waits on (a shell's ``sleep``) and
    let that one run its next command (a write) before its own kill arrives. A stopped process runs nothing more;
    SIGKILL still ends it."""
    stopped: set[int] = set()
    for _ in range(20):
        new = set(processes()) - stopped
        if not new:
            return
        for pid in new:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGSTOP)
        stopped |= new


class RunGroup:
    """The cgroup(s) of one run: ``dirs`` (one per v1 hierarchy, or the v2 one)."""

    def __init__(self, dirs: list[Path], version: int, memory: int | None, processes: int):
        self.dirs, self.version, self.memory, self.processes = dirs, version, memory, processes

    @classmethod
    def create(cls, name: str, *, memory: int | None, processes: int) -> RunGroup | None:
        """A fresh cgroup named ``name`` with these bounds, or None where this process may not make one."""
        if os.environ.get("TKLAB_NO_CGROUP", "") in ("1", "true", "yes"):
            return None
        own = _own_paths()
        mounts = _mounts()
        v1 = {c: _join(m, root, own.get(c, "/")) for root, m, kind, opts in mounts if kind == "cgroup"
              for c in ("memory", "pids") if c in opts}
        if "memory" in v1 and "pids" in v1:
            return cls._made([v1["memory"] / name, v1["pids"] / name], 1, memory, processes)
        unified = next((_join(m, root, own.get("", "/")) for root, m, kind, _ in mounts if kind == "cgroup2"), None)
        if unified is not None:
            try:
                wanted = set((unified / "cgroup.subtree_control").read_text().split())
            except OSError:
                wanted = set()
            if {"memory", "pids"} <= wanted:
                return cls._made([unified / name], 2, memory, processes)
        return None

    @classmethod
    def _made(cls, dirs: list[Path], version: int, memory: int | None, processes: int) -> RunGroup | None:
        made: list[Path] = []
        try:
            for d in dirs:
                d.mkdir()
                made.append(d)
        except OSError:
            for d in made:
                with contextlib.suppress(OSError):
                    d.rmdir()
            return None
        group = cls(made, version, memory, processes)
        if not group._limit():
            group.remove()
            return None
        return group

    def _file(self, v1: str, v2: str) -> Path:
        if self.version == 2:
            return self.dirs[0] / v2
        return next((d / v1 for d in self.dirs if (d / v1).exists()), self.dirs[0] / v1)

    def _limit(self) -> bool:
        ok = True
        if self.memory:
            ok &= _write(self._file("memory.limit_in_bytes", "memory.max"), str(self.memory))
            swap = self._file("memory.memsw.limit_in_bytes", "memory.swap.max")
            if swap.exists():
                _write(swap, str(self.memory) if self.version == 1 else "0")
        if self.processes:
            ok &= _write(self._file("pids.max", "pids.max"), str(self.processes))
        return ok

    def pids(self) -> set[int]:
        found: set[int] = set()
        for d in self.dirs:
            with contextlib.suppress(OSError, ValueError):
                found.update(int(x) for x in (d / "cgroup.procs").read_text().split())
        return found

    def add_tree(self, root: int) -> None:
        """Put ``root`` and its descendants in the group (the parent first: what it forks later is born inside)."""
        for _ in range(5):
            tree = [root, *sorted(_descendants(root))]
            missing = [p for p in tree if p not in self.pids()]
            if not missing:
                return
            for pid in missing:
                for d in self.dirs:
                    _write(d / "cgroup.procs", str(pid))

    def kill(self) -> int:
        """SIGKILL every process in the group until it is empty; returns how many were killed."""
        killed = 0
        if self.version == 2 and _write(self.dirs[0] / "cgroup.kill", "1"):
            killed = len(self.pids())
        stop_all(self.pids)  # without cgroup.kill: all stopped first, so none acts between the kills
        for _ in range(200):
            left = self.pids()
            if not left:
                break
            for pid in left:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
                    killed += 1
            time.sleep(0.01)
        return killed

    def oom_kills(self) -> int:
        """Processes the kernel killed because the group ran out of memory."""
        try:
            text = self._file("memory.oom_control", "memory.events").read_text()
        except OSError:
            return 0
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
        return 0

    def peak_memory(self) -> int | None:
        with contextlib.suppress(OSError, ValueError):
            return int(self._file("memory.max_usage_in_bytes", "memory.peak").read_text())
        return None

    def remove(self) -> None:
        for d in self.dirs:
            for _ in range(50):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    self.kill()
                    time.sleep(0.02)

    def describe(self) -> str:
        mem = f"{self.memory >> 20} MiB of memory" if self.memory else "memory not bounded"
        return f"a cgroup of its own (v{self.version}: {mem} for all its processes, {self.processes} processes)"


def _descendants(root: int) -> set[int]:
    children: dict[int, list[int]] = {}
    with contextlib.suppress(OSError):
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                with contextlib.suppress(OSError, IndexError, ValueError):
                    raw = Path(f"/proc/{entry}/stat").read_text()
                    ppid = int(raw[raw.rfind(")") + 2:].split()[1])
                    children.setdefault(ppid, []).append(int(entry))
    out: set[int] = set()
    stack = [root]
    while stack:
        for c in children.get(stack.pop(), []):
            if c not in out:
                out.add(c)
                stack.append(c)
    return out
