"""One NVRTC compile, called directly through ``cuda.bindings``: source and options in, log, PTX and cubin out.

Why a module of its own, importing nothing of tklab: it is also a script. Grading runs it as ``python -I
nvrtc_call.py`` in a child that limits itself first (``limit_self``: address space, CPU time, no core, dies with
its parent), so a learner's file that makes NVRTC take gigabytes or minutes costs that child, not the checking
process (``tklab.grading.bounded_compile``); loading no tklab keeps the child's start to the interpreter's and
NVRTC's own. ``tklab.compile`` calls ``compile_raw`` in its own process.

The child reads a JSON job on stdin (``source``, ``program``, ``options``, ``name_expressions``, ``limits``) and
answers on stdout: one JSON line (``ok``, ``log``, ``lowered``, ``seconds``, ``ptx_bytes``, ``cubin_bytes``), then
the PTX and the cubin, raw.

Public API: ``compile_raw(source, program, options, name_expressions) -> dict``, ``limit_self(limits)``.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from typing import Any


def _read(prog: Any, size_fn: Any, get_fn: Any, ok: Any, what: str, *, strip: bool = True) -> bytes:
    """Copy one of NVRTC's outputs (log, PTX, cubin) into Python bytes.

    NVRTC writes into the buffer it is given, so the buffer must be fresh and mutable: a ``bytearray``.
    The common ``b" " * size`` is a trap: for ``size == 1`` (an empty log) CPython returns its shared,
    cached ``b" "`` object, NVRTC writes a NUL into it, and every later ``" ".encode()`` in the process
    yields ``b"\\x00"`` (seen on the H200: print separators and a torch schema broke).
    """
    size = ok(size_fn(prog), f"{what} size")
    buf = bytearray(size)
    ok(get_fn(prog, buf), what)
    return bytes(buf).rstrip(b"\0") if strip else bytes(buf)


def compile_raw(source: str, program: str, options: Sequence[str], name_expressions: Sequence[str]) -> dict[str, Any]:
    """NVRTC on ``source``: {ok, log, ptx (str), cubin (bytes), lowered {expression: name}, seconds}; ``ok`` False
    (with the log) when NVRTC rejected the source. A failure of NVRTC itself raises ``RuntimeError``."""
    from cuda.bindings import nvrtc

    def ok(result: Any, what: str) -> Any:
        err, *rest = result
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise RuntimeError(f"{what}: {nvrtc.nvrtcGetErrorString(err)[1].decode()}")
        return rest[0] if len(rest) == 1 else rest

    start = time.perf_counter()
    prog = ok(nvrtc.nvrtcCreateProgram(source.encode(), program.encode(), 0, [], []), "nvrtcCreateProgram")
    try:
        for expr in name_expressions:
            ok(nvrtc.nvrtcAddNameExpression(prog, expr.encode()), f"name expression {expr!r}")
        encoded = [o.encode() for o in options]
        (status,) = nvrtc.nvrtcCompileProgram(prog, len(encoded), encoded)
        log = _read(prog, nvrtc.nvrtcGetProgramLogSize, nvrtc.nvrtcGetProgramLog, ok, "log").decode(errors="replace")
        if status != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            return {"ok": False, "log": log, "seconds": time.perf_counter() - start}
        cubin = _read(prog, nvrtc.nvrtcGetCUBINSize, nvrtc.nvrtcGetCUBIN, ok, "cubin", strip=False)
        ptx = _read(prog, nvrtc.nvrtcGetPTXSize, nvrtc.nvrtcGetPTX, ok, "ptx")
        lowered = {}
        for expr in name_expressions:
            low = ok(nvrtc.nvrtcGetLoweredName(prog, expr.encode()), f"lowered name of {expr!r}")
            lowered[expr] = low.decode() if isinstance(low, bytes) else str(low)
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    return {"ok": True, "cubin": cubin, "ptx": ptx.decode(), "log": log, "lowered": lowered,
            "seconds": time.perf_counter() - start}


def limit_self(limits: dict[str, int]) -> None:
    """In the child, before NVRTC sees the source: ``memory`` (address space, bytes), ``cpu_seconds``; no core
    dump; killed when its parent dies."""
    import ctypes
    import resource
    import signal

    wanted = [(resource.RLIMIT_CORE, 0)]
    if limits.get("memory"):
        wanted.append((resource.RLIMIT_AS, int(limits["memory"])))
    if limits.get("cpu_seconds"):
        wanted.append((resource.RLIMIT_CPU, int(limits["cpu_seconds"])))
    for which, value in wanted:
        try:
            resource.setrlimit(which, (value, value))
        except (ValueError, OSError):
            pass
    try:
        ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (AttributeError, OSError):
        pass


def _child_main() -> int:
    job = json.loads(sys.stdin.buffer.read())
    limit_self(job.get("limits") or {})
    try:
        out = compile_raw(job["source"], job["program"], job["options"], job["name_expressions"])
    except MemoryError:
        print("out of memory (MemoryError)", file=sys.stderr)
        return 4
    except RuntimeError as e:
        head = {"ok": False, "error": str(e), "log": ""}
        sys.stdout.buffer.write(json.dumps(head).encode() + b"\n")
        return 0
    ptx = out.pop("ptx", "").encode()
    cubin = out.pop("cubin", b"")
    head = {**out, "ptx_bytes": len(ptx), "cubin_bytes": len(cubin)}
    sys.stdout.buffer.write(json.dumps(head).encode() + b"\n" + ptx + cubin)
    sys.stdout.buffer.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(_child_main())
