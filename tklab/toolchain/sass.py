"""What the compiler made of a kernel: SASS, resource usage, instruction mix. No GPU needed.

SASS comes from ``cuobjdump -sass`` on the cubin; resources from ``cuobjdump -res-usage`` and from
ptxas's verbose report in the NVRTC log (the only place spill bytes are stated). The instruction
histogram counts base opcodes (``LDG.E.128`` counts as ``LDG``; the full forms are kept too), so a
learner can ask "are the tensor cores used?" as ``hist["HGMMA"] > 0``.

``main_loop`` finds a kernel's hot loop in its SASS (the backward branch whose body holds the most
FFMA/HMMA/HGMMA), which lessons read instruction by instruction; ``loops`` gives every loop's body with
operands (``tklab.toolchain.schedule`` reads where instructions lie between two waits).

Public API: ``disassemble(cubin) -> dict[kernel, sass]``, ``resource_usage(cubin)``,
``parse_ptxas_log(log)``, ``histogram(sass)``, ``instructions(sass)``, ``parsed(sass)``, ``loops(sass)``,
``main_loop(sass)``, ``ffma_share(sass)``, ``Resources``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import struct
import subprocess
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from . import locate


@dataclass(frozen=True)
class Resources:
    """Per-kernel resources. ``spill_bytes`` = spill stores + spill loads reported by ptxas."""

    registers: int = 0
    shared_bytes: int = 0  # static shared memory; dynamic shared memory is chosen at launch
    stack_bytes: int = 0
    local_bytes: int = 0
    spill_stores: int = 0
    spill_loads: int = 0
    barriers: int = 0
    from_ptxas: bool = True  # False: the compiler's log had no ptxas report, so spill counts are unknown (0)

    @property
    def spill_bytes(self) -> int:
        return self.spill_stores + self.spill_loads


def _run(tool: str, args: list[str], cubin: bytes) -> str:
    with tempfile.TemporaryDirectory(prefix="tklab-") as d:
        path = Path(d) / "module.cubin"
        path.write_bytes(cubin)
        out = subprocess.run([locate.binary(tool), *args, str(path)], capture_output=True, text=True,
                             check=False)
    if out.returncode != 0:
        raise RuntimeError(f"{tool} failed: {out.stderr.strip() or out.stdout.strip()}")
    return out.stdout


_FUNC = re.compile(r"^\s*Function : (\S+)\s*$", re.M)


def disassemble(cubin: bytes) -> dict[str, str]:
    """SASS text per kernel, in the order cuobjdump prints them. Kept in the compile cache under the cubin's digest
    and the disassembler's (``_SASS_CACHE``): a module the cache returns again, or another program that compiled to
    the same bytes, costs a file read instead of a disassembly (a third of a second and more)."""
    path = _sass_entry(cubin)
    if path is not None:
        with contextlib.suppress(OSError, ValueError):
            kept = json.loads(path.read_text())
            if isinstance(kept, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in kept.items()):
                return kept
    result = _disassemble(cubin)
    if path is not None:
        with contextlib.suppress(OSError):  # a cache that cannot be written costs only the next disassembly
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
            try:
                with os.fdopen(fd, "w") as f:
                    json.dump(result, f)
                os.replace(tmp, path)  # readers see a whole entry or none
            finally:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
    return result


#: The compile cache's folder of disassemblies, one JSON file per (cubin, disassembler).
_SASS_CACHE = "sass"


def _sass_entry(cubin: bytes) -> Path | None:
    """Where the disassembly of ``cubin`` is kept (None: the compile cache is off): the digest covers the cubin and
    the disassembler that read it (its path, size and time), so another CUDA version disassembles again."""
    from . import cache

    if not cache.enabled():
        return None
    try:
        tool = Path(locate.binary("cuobjdump"))
        st = tool.stat()
    except (OSError, locate.ToolchainError):
        return None
    h = hashlib.sha256(cubin)
    h.update(f"\0{tool}\0{st.st_size}\0{st.st_mtime_ns}".encode())
    k = h.hexdigest()
    return cache.cache_dir() / _SASS_CACHE / k[:2] / f"{k}.json"


def _disassemble(cubin: bytes) -> dict[str, str]:
    text = _run("cuobjdump", ["-sass"], cubin)
    marks = list(_FUNC.finditer(text))
    result: dict[str, str] = {}
    for i, m in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(text)
        body = text[m.start():end]
        # Drop the hex encodings (/* 0x... */ on their own lines) that make SASS hard to read.
        lines = [ln for ln in body.splitlines() if not re.match(r"^\s*/\* 0x[0-9a-f]+ \*/\s*$", ln)]
        result[m.group(1)] = "\n".join(lines).rstrip() + "\n"
    return result


_RES = re.compile(r"Function (\S+):\s*\n\s*(.*)")

#: Shared memory the system reserves in every block (CUDA's reservedSharedMemPerBlock, 1 KiB from sm_80 on), outside
#: what a block may ask for: the opt-in limit of sm_90 (232448 B) is its 228 KiB less this. A cubin for sm_90 or later
#: lays it out at the start of each kernel's shared window (section ``.nv.shared.reserved.0``; a kernel's
#: ``.nv.shared.<name>`` section then holds it before the kernel's own variables), so ``cuobjdump -res-usage`` counts
#: it in SHARED: a kernel with dynamic shared memory only reads 1024 there, where ptxas -v says 0 and the driver's
#: static size (CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES) and limit leave it out. ``resource_usage`` takes it off.
RESERVED_SHARED = 1024


def resource_usage(cubin: bytes) -> dict[str, dict[str, int]]:
    """``cuobjdump -res-usage``: {kernel: {"REG": .., "STACK": .., "SHARED": .., "LOCAL": ..}}. SHARED is the kernel's
    own static shared memory, as ptxas and the driver count it: without the system's reserved kilobyte that a cubin
    for sm_90 or later includes (``RESERVED_SHARED``; on the H200 it made tklab refuse a launch of 232448 B dynamic,
    the most a block may have, as 1024 B over)."""
    text = _run("cuobjdump", ["-res-usage"], cubin)
    reserved = RESERVED_SHARED if _has_reserved_shared(cubin) else 0
    result: dict[str, dict[str, int]] = {}
    for m in _RES.finditer(text):
        fields = {k: int(v) for k, v in re.findall(r"([A-Z]+(?:\[\d+\])?):(\d+)", m.group(2))}
        if "SHARED" in fields and fields["SHARED"] >= reserved:
            fields["SHARED"] -= reserved
        result[m.group(1)] = fields
    return result


def _has_reserved_shared(cubin: bytes) -> bool:
    """Whether the cubin (ELF64) lays out the system's reserved shared memory: a ``.nv.shared.reserved.*`` section."""
    return any(name.startswith(".nv.shared.reserved.") for name in _section_names(cubin))


def _section_names(cubin: bytes) -> list[str]:
    """The ELF64 (little-endian) cubin's section names; none for bytes that are no such ELF file."""
    if len(cubin) < 64 or cubin[:5] != b"\x7fELF\x02":
        return []
    try:
        (shoff,) = struct.unpack_from("<Q", cubin, 0x28)
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
        strings = struct.unpack_from("<Q", cubin, shoff + shstrndx * shentsize + 0x18)[0]  # its sh_offset
        names = []
        for i in range(shnum):
            (at,) = struct.unpack_from("<I", cubin, shoff + i * shentsize)
            names.append(cubin[strings + at:cubin.index(b"\0", strings + at)].decode(errors="replace"))
        return names
    except (struct.error, ValueError):
        return []


_ENTRY = re.compile(r"Compiling entry function '([^']+)'")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers(?:, used (\d+) barriers)?")


def parse_ptxas_log(log: str) -> dict[str, dict[str, int]]:
    """ptxas ``-v`` lines in the NVRTC log → {kernel: {stack, spill_stores, spill_loads, registers}}."""
    result: dict[str, dict[str, int]] = {}
    current: str | None = None
    for line in log.splitlines():
        if m := _ENTRY.search(line):
            current = m.group(1)
            result[current] = {}
        elif current and (m := _FRAME.search(line)):
            result[current].update(stack=int(m.group(1)), spill_stores=int(m.group(2)),
                                   spill_loads=int(m.group(3)))
        elif current and (m := _USED.search(line)):
            result[current].update(registers=int(m.group(1)), barriers=int(m.group(2) or 0))
            if sm := re.search(r"(\d+) bytes smem", line):
                result[current]["smem"] = int(sm.group(1))
            else:
                result[current]["smem"] = 0
    return result


def combine_resources(res_usage: dict[str, int], ptxas: dict[str, int]) -> Resources:
    return Resources(
        registers=res_usage.get("REG", ptxas.get("registers", 0)),
        shared_bytes=res_usage.get("SHARED", 0),
        stack_bytes=res_usage.get("STACK", ptxas.get("stack", 0)),
        local_bytes=res_usage.get("LOCAL", 0),
        spill_stores=ptxas.get("spill_stores", 0),
        spill_loads=ptxas.get("spill_loads", 0),
        barriers=ptxas.get("barriers", 0),
        from_ptxas="spill_stores" in ptxas,
    )


#: One SASS line: its address, full opcode (after an optional predicate) and operands.
_LINE = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)*)(.*)")
_TARGET = re.compile(r"\b(?:0x)?([0-9a-f]+)\s*;")


def parsed(sass: str) -> list[tuple[int, str, str]]:
    """(address, full opcode, operands) of every instruction, in program order; the operands run to the end of
    the line (``" gsb0, 0x1 ; /* 0x... */"``), a predicate (``@P0``) is dropped."""
    return [(int(m.group(1), 16), m.group(2), m.group(3)) for m in _LINE.finditer(sass)]


def instructions(sass: str) -> list[str]:
    """Full opcodes (with modifiers) in program order, e.g. ``["LDG.E.128", "FFMA", ...]``."""
    return [op for _, op, _ in parsed(sass)]


def histogram(sass: str, *, full: bool = False) -> Counter[str]:
    """Count instructions by base opcode (``full=True``: with modifiers, e.g. ``LDG.E.128``)."""
    ops = instructions(sass)
    return Counter(ops if full else (op.split(".", 1)[0] for op in ops))


def loops(sass: str) -> list[list[tuple[int, str, str]]]:
    """Every loop's body, as ``parsed`` gives its instructions, in the order of their branches.

    A loop in SASS is a branch (``BRA``) to an earlier address; its body runs from that address to the
    branch. A "body" that holds an EXIT is not a loop: it is an out-of-line retry (an mbarrier wait placed
    after the kernel's end) jumping back into the code.
    """
    instrs = parsed(sass)
    bodies = []
    for i, (addr, op, rest) in enumerate(instrs):
        if op.split(".")[0] != "BRA":
            continue
        m = _TARGET.search(rest)
        if not m:
            continue
        target = int(m.group(1), 16)
        if target >= addr:
            continue
        start = next((j for j, (a, _, _) in enumerate(instrs) if a >= target), None)
        if start is None:
            continue
        body = instrs[start:i + 1]
        if any(o.split(".")[0] == "EXIT" for _, o, _ in body):
            continue
        bodies.append(body)
    return bodies


def main_loop(sass: str) -> list[str]:
    """Opcodes of the kernel's hot loop: the loop (``loops``) whose body holds the most FFMA/HMMA/HGMMA, the
    shortest of those that tie. Returns [] when the kernel has no loop."""
    best: list[tuple[int, str, str]] = []
    best_score = (-1, 0)
    for body in loops(sass):
        math = sum(o.split(".")[0] in ("FFMA", "HMMA", "HGMMA") for _, o, _ in body)
        score = (math, -len(body))
        if score > best_score:
            best_score, best = score, body
    return [o for _, o, _ in best]


def ffma_share(sass: str) -> float:
    """FFMA instructions over all instructions in the main loop (0 when there is no loop)."""
    body = main_loop(sass)
    return sum(o.split(".")[0] == "FFMA" for o in body) / len(body) if body else 0.0
