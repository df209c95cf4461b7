"""A compiler call under a memory limit where ``RLIMIT_AS`` is not enforced (macOS): its process tree's
resident memory is read with ``ps`` (on Linux and macOS alike) every few hundredths of a second, and the
tree (its own process group) is killed once it holds more than the limit.

Public API: ``run(argv, *, seconds, memory) -> Watched``, ``tree_rss(root) -> int``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass

POLL_SECONDS = 0.05


@dataclass
class Watched:
    """How the call ended: its return code, output, and whether it was stopped for time or memory."""

    returncode: int
    stdout: str
    stderr: str
    timed_out: bool = False
    peak_bytes: int = 0
    over_memory: bool = False


def tree_rss(root: int) -> int:
    """Bytes resident in ``root`` and its descendants (0 when ``ps`` cannot say)."""
    try:
        out = subprocess.run(["ps", "-A", "-o", "pid=,ppid=,rss="], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for line in out.stdout.splitlines():
        parts = line.split()
        if len(parts) != 3 or not all(p.isdigit() for p in parts):
            continue
        pid, ppid, kb = map(int, parts)
        children.setdefault(ppid, []).append(pid)
        rss[pid] = kb * 1024
    total, todo, seen = 0, [root], set()
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        total += rss.get(pid, 0)
        todo += children.get(pid, [])
    return total


def run(argv: list[str], *, seconds: float, memory: int) -> Watched:
    """Run ``argv`` (stdin closed) with a wall-clock and a resident-memory limit on its whole tree."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err, start_new_session=True)
        start, peak, why = time.monotonic(), 0, ""
        while proc.poll() is None:
            peak = max(peak, tree_rss(proc.pid))
            if peak > memory:
                why = "memory"
            elif time.monotonic() - start > seconds:
                why = "time"
            if why:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    proc.kill()
                proc.wait()
                break
            time.sleep(POLL_SECONDS)
        out.seek(0)
        err.seek(0)
        return Watched(proc.returncode, out.read().decode(errors="replace"), err.read().decode(errors="replace"),
                       timed_out=why == "time", peak_bytes=peak, over_memory=why == "memory")
