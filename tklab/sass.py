"""What the compiler made of a kernel: SASS, resource usage, instruction mix. No GPU needed.

SASS comes from ``cuobjdump -sass`` on the cubin; resources from ``cuobjdump -res-usage`` and from
ptxas's verbose report in the NVRTC log (the only place spill bytes are stated). The instruction
histogram counts base opcodes (``LDG.E.128`` counts as ``LDG``; the full forms are kept too), so a
learner can ask "are the tensor cores used?" as ``hist["HGMMA"] > 0``.

Public API: ``disassemble(cubin) -> dict[kernel, sass]``, ``resource_usage(cubin)``,
``parse_ptxas_log(log)``, ``histogram(sass)``, ``Resources``.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from . import toolchain


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
        out = subprocess.run([toolchain.binary(tool), *args, str(path)], capture_output=True, text=True,
                             check=False)
    if out.returncode != 0:
        raise RuntimeError(f"{tool} failed: {out.stderr.strip() or out.stdout.strip()}")
    return out.stdout


_FUNC = re.compile(r"^\s*Function : (\S+)\s*$", re.M)


def disassemble(cubin: bytes) -> dict[str, str]:
    """SASS text per kernel, in the order cuobjdump prints them."""
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


def resource_usage(cubin: bytes) -> dict[str, dict[str, int]]:
    """``cuobjdump -res-usage``: {kernel: {"REG": .., "STACK": .., "SHARED": .., "LOCAL": ..}}."""
    text = _run("cuobjdump", ["-res-usage"], cubin)
    result: dict[str, dict[str, int]] = {}
    for m in _RES.finditer(text):
        fields = dict(re.findall(r"([A-Z]+(?:\[\d+\])?):(\d+)", m.group(2)))
        result[m.group(1)] = {k: int(v) for k, v in fields.items()}
    return result


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


_INSTR = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)*)")


def instructions(sass: str) -> list[str]:
    """Full opcodes (with modifiers) in program order, e.g. ``["LDG.E.128", "FFMA", ...]``."""
    return _INSTR.findall(sass)


def histogram(sass: str, *, full: bool = False) -> Counter[str]:
    """Count instructions by base opcode (``full=True``: with modifiers, e.g. ``LDG.E.128``)."""
    ops = instructions(sass)
    return Counter(ops if full else (op.split(".", 1)[0] for op in ops))
