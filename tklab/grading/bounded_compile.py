"""NVRTC for a learner's file, in a child with limits: a compile that blows up is stopped and named.

Why: NVRTC runs no learner code, but what it is asked to compile is the learner's. One line --
``__device__ char big[100000000] = {1};`` -- makes it hold 1.5 GB and write a 100 MB cubin; a larger array,
deep template instantiation or a long constexpr evaluation takes gigabytes or minutes. In the checking process
(which grades the next student next) that has no bound. Here every compile a check makes while ``bounded()`` is
in force runs NVRTC in a child (``tklab.toolchain.nvrtc_call`` as a script: no tklab imported, so it starts as fast
as Python and NVRTC do) that limits itself before NVRTC reads the source: ``MEMORY`` of address space,
``CPU_SECONDS`` of CPU time; the parent gives it ``WALL_SECONDS`` and reads at most ``OUTPUT_BYTES`` of PTX
and cubin. A compile that exceeds one is a ``CompileLimitExceeded`` (a ``CompileError``, so every caller reports
it as the file's compile error): "the compile exceeded 4 GiB of memory and was stopped".

The cache is untouched: ``tklab.compile`` computes the key, looks in the cache and stores the entry in this
process as before (``compiler.nvrtc_elsewhere``); only the NVRTC call moves. So a module compiled here has the
same key, and the run gets the same PTX.

Public API: ``bounded()``, ``nvrtc_in_child(source, program, options, name_expressions)``,
``CompileLimitExceeded``, ``limits()`` and its defaults ``MEMORY``, ``CPU_SECONDS``, ``WALL_SECONDS``,
``OUTPUT_BYTES``.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from typing import Any

from ..toolchain import compiler, nvrtc_call

#: Address space for NVRTC (a chapter-10 kernel peaks at about 0.4 GB of it); ``$TKLAB_COMPILE_MEMORY_MIB``.
MEMORY = 4 << 30
#: CPU seconds for one compile (the course's largest file takes a few); ``$TKLAB_COMPILE_CPU_SECONDS``.
CPU_SECONDS = 120
#: Wall-clock seconds for one compile, the child's start included (at least the CPU limit).
WALL_SECONDS = 180.0
#: PTX and cubin together (a course kernel's are well under 1 MiB); ``$TKLAB_COMPILE_OUTPUT_MIB``.
OUTPUT_BYTES = 32 << 20
_ERR_TAIL = 16 << 10


def _setting(name: str, default: int, scale: int = 1) -> int:
    """A limit from the grader's environment (a course with an unusually large kernel raises it), else the default."""
    try:
        value = int(os.environ.get(name, "").strip() or 0)
    except ValueError:
        value = 0
    return value * scale if value > 0 else default


def limits() -> tuple[int, int, float, int]:
    """(memory bytes, CPU seconds, wall-clock seconds, output bytes) in force now."""
    cpu = _setting("TKLAB_COMPILE_CPU_SECONDS", CPU_SECONDS)
    return (_setting("TKLAB_COMPILE_MEMORY_MIB", MEMORY, 1 << 20), cpu, max(WALL_SECONDS, cpu + 30.0),
            _setting("TKLAB_COMPILE_OUTPUT_MIB", OUTPUT_BYTES, 1 << 20))


class CompileLimitExceeded(compiler.CompileError):
    """The compile went past a limit and was stopped; ``str(e)`` says which."""

    def __init__(self, why: str, source: str, program: str):
        self.why = why
        super().__init__(why, source, program)

    def _render(self) -> str:
        return f"compiling {self.program} was stopped: {self.why}"


def _gib(n: int) -> str:
    return f"{n / (1 << 30):g} GiB" if n >= 1 << 30 else f"{n >> 20} MiB"


def _memory_words(text: str) -> bool:
    return any(w in text for w in ("out of memory", "Memory allocation failure", "bad_alloc", "MemoryError",
                                   "Cannot allocate memory"))


def _why_stopped(returncode: int | None, err: str, cpu: float) -> str:
    """What limit a child that gave no answer ran into, as the learner reads it."""
    memory_limit, cpu_limit, _, _ = limits()
    memory = f"the compile exceeded {_gib(memory_limit)} of memory (a huge array initialiser, or template or " \
             "constexpr work that grows without bound?)"
    cpu_time = f"the compile exceeded {cpu_limit} s of CPU time (deep template recursion, or a loop unrolled " \
               "over a huge bound?)"
    if returncode == -signal.SIGXCPU or cpu >= cpu_limit - 0.5:
        return cpu_time
    if _memory_words(err) or returncode in (-signal.SIGABRT, -signal.SIGSEGV, -signal.SIGBUS, -signal.SIGKILL):
        return memory  # (SIGKILL short of the CPU limit: the kernel's out-of-memory killer)
    tail = err.strip().splitlines()[-1] if err.strip() else f"exit {returncode}"
    return f"NVRTC stopped without an answer ({tail})"


def nvrtc_in_child(source: str, program: str, options: list[str], name_expressions: Sequence[str]
                   ) -> dict[str, Any]:
    """``nvrtc_call.compile_raw`` in a limited child (see the module docstring); ``CompileLimitExceeded`` when it
    ran past a limit."""
    memory, cpu, wall, output = limits()
    job = {"source": source, "program": program, "options": list(options), "name_expressions": list(name_expressions),
           "limits": {"memory": memory, "cpu_seconds": cpu}}
    start = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-I", nvrtc_call.__file__], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    out, err = bytearray(), bytearray()
    stopped = ""
    try:
        proc.stdin.write(json.dumps(job).encode())
        proc.stdin.close()
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ, out)
        sel.register(proc.stderr, selectors.EVENT_READ, err)
        open_pipes = 2
        while open_pipes:
            left = start + wall - time.monotonic()
            if left <= 0:
                stopped = f"the compile took longer than {wall:g} s"
                break
            for key, _ in sel.select(timeout=min(left, 1.0)):
                chunk = os.read(key.fileobj.fileno(), 1 << 20)  # type: ignore[union-attr]
                if not chunk:
                    sel.unregister(key.fileobj)
                    open_pipes -= 1
                    continue
                key.data.extend(chunk)
                if key.data is err:
                    del err[:-_ERR_TAIL]
            if len(out) > output + (1 << 20):
                stopped = f"the compile's output (PTX and cubin) exceeded {_gib(output)}"
                break
        sel.close()
    finally:
        with contextlib.suppress(ProcessLookupError):  # not yet reaped, so the number is still the child's
            os.killpg(proc.pid, signal.SIGKILL)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        proc.stdout.close()
        proc.stderr.close()
    if stopped:
        raise CompileLimitExceeded(stopped, source, program)
    head, _, body = bytes(out).partition(b"\n")
    try:
        answer = json.loads(head) if head else None
    except ValueError:
        answer = None
    if answer is None:
        raise CompileLimitExceeded(_why_stopped(proc.returncode, err.decode(errors="replace"),
                                                usage.ru_utime + usage.ru_stime), source, program)
    if answer.get("error"):
        raise RuntimeError(answer["error"])
    if not answer["ok"]:
        if not answer["log"].strip() and _memory_words(err.decode(errors="replace")):  # ptxas ran out: no log
            raise CompileLimitExceeded(_why_stopped(None, "out of memory", 0.0), source, program)
        return answer
    n_ptx, n_cubin = int(answer.pop("ptx_bytes")), int(answer.pop("cubin_bytes"))
    if n_ptx + n_cubin > output:
        raise CompileLimitExceeded(f"the compile's output (PTX and cubin) exceeded {_gib(output)}", source, program)
    answer["ptx"], answer["cubin"] = body[:n_ptx].decode(), body[n_ptx:n_ptx + n_cubin]
    return answer


@contextlib.contextmanager
def bounded() -> Iterator[None]:
    """Within the block, every NVRTC compile that misses the cache runs in a limited child (``nvrtc_in_child``)."""
    with compiler.nvrtc_elsewhere(nvrtc_in_child):
        yield
