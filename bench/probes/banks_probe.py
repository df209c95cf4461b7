"""Measure shared-memory wavefronts of one warp-wide access, pattern by pattern, with Nsight Compute.

Each probe launch is ONE warp executing ONE shared-memory instruction (a load or store of 1, 2, 4, 8 or
16 bytes per lane, or an ``ldmatrix``/``stmatrix``) at byte offsets read from a table, so the per-kernel
counters ``l1tex__data_pipe_lsu_wavefronts_mem_shared_op_{ld,st}`` describe exactly that instruction.
Per-kernel baselines (the same kernel with the access switched off) are measured and subtracted.

    python3 bench/probes/banks_probe.py --ncu [--out bench/results/banks_h200.json] [--budget-s 240]
    python3 bench/probes/banks_probe.py --list        # the patterns and the model's predictions (CPU)

``--ncu`` re-invokes this script under ``ncu --csv --page raw`` in chunks (``--child``), parses the CSV
and writes the table. Launch order maps rows to patterns; each launch also gets a grid size derived from
its index (extra blocks exit at once) so the mapping is checked, not assumed.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

from tklab.models.layouts import swizzle  # noqa: E402

SMEM = 128 * 1024  # dynamic shared memory of every probe (large strides need room)
WIDTHS = (1, 2, 4, 8, 16)
CORE_METRICS = [
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
    "smsp__inst_executed_op_shared_ld.sum",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",
    "smsp__inst_executed_op_shared_st.sum",
]
# Kept only if `ncu --query-metrics` lists them on this GPU (an unknown name would abort the whole run).
OPTIONAL_METRICS = [
    "l1tex__data_pipe_lsu_wavefronts_mem_shared.sum",
    "smsp__inst_executed_op_ldsm.sum",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ldsm.sum",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ldsm.sum",
    "smsp__inst_executed_op_stsm.sum",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_stsm.sum",
]


@dataclass
class Pattern:
    """One warp-wide access: ``offsets[lane]`` in bytes, -1 for a lane that does not take part."""

    name: str
    group: str
    op: str  # "ld", "st", "ldmatrix", "stmatrix"
    width: int  # bytes per lane (ldmatrix/stmatrix: 16 per row address)
    offsets: list[int]
    num: int = 1  # ldmatrix/stmatrix: x1, x2, x4
    trans: bool = False
    measured: dict[str, int] = field(default_factory=dict)

    @property
    def kernel(self) -> str:
        if self.op in ("ld", "st"):
            return f"probe_{self.op}{self.width}"
        return f"probe_{self.op}_x{self.num}{'_trans' if self.trans else ''}"

    def key(self) -> tuple:
        return (self.op, self.width, tuple(self.offsets), self.num, self.trans)


# --------------------------------------------------------------------------------------------- kernels
# One inline-PTX access per width. PTX has no 8-bit registers: a 16-bit register carries a byte.
_LD = {
    1: ('unsigned short h = 0; if (o >= 0) asm volatile("ld.shared.u8 %0, [%1];" : "=h"(h) : "r"(a) : "memory");'
        ' v0 = h;'),
    2: ('unsigned short h = 0; if (o >= 0) asm volatile("ld.shared.u16 %0, [%1];" : "=h"(h) : "r"(a) : "memory");'
        ' v0 = h;'),
    4: 'if (o >= 0) asm volatile("ld.shared.u32 %0, [%1];" : "=r"(v0) : "r"(a) : "memory");',
    8: 'if (o >= 0) asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];" : "=r"(v0), "=r"(v1) : "r"(a) : "memory");',
    16: ('if (o >= 0) asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"'
         ' : "=r"(v0), "=r"(v1), "=r"(v2), "=r"(v3) : "r"(a) : "memory");'),
}
_ST = {
    1: 'if (o >= 0) asm volatile("st.shared.u8 [%0], %1;" :: "r"(a), "h"((unsigned short)t) : "memory");',
    2: 'if (o >= 0) asm volatile("st.shared.u16 [%0], %1;" :: "r"(a), "h"((unsigned short)t) : "memory");',
    4: 'if (o >= 0) asm volatile("st.shared.u32 [%0], %1;" :: "r"(a), "r"(t) : "memory");',
    8: 'if (o >= 0) asm volatile("st.shared.v2.u32 [%0], {%1, %2};" :: "r"(a), "r"(t), "r"(t) : "memory");',
    16: ('if (o >= 0) asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};"'
         ' :: "r"(a), "r"(t), "r"(t), "r"(t), "r"(t) : "memory");'),
}


def kernel_source() -> str:
    """All probe kernels: one shared-memory instruction each, guarded by ``enable`` (0 = baseline)."""
    head = r"""
// Probe kernels: a single warp, a single shared-memory instruction at per-lane offsets off[lane]
// (off < 0: the lane sits out). Extra blocks return at once: the grid size only tags the launch.
#define PROBE_PROLOGUE                                                   \
  extern __shared__ __align__(1024) unsigned char smem[];               \
  if (blockIdx.x != 0 || !enable) return;                               \
  const int o = off[threadIdx.x];                                       \
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(smem)) + (o < 0 ? 0 : o);
"""
    parts = [head]
    for w in WIDTHS:
        parts.append(f"""
extern "C" __global__ void __launch_bounds__(32) probe_ld{w}(const int* __restrict__ off,
                                                           unsigned* __restrict__ out, int enable) {{
  PROBE_PROLOGUE
  unsigned v0 = 0, v1 = 0, v2 = 0, v3 = 0;
  {_LD[w]}
  out[threadIdx.x] = v0 ^ v1 ^ v2 ^ v3;
}}
extern "C" __global__ void __launch_bounds__(32) probe_st{w}(const int* __restrict__ off,
                                                           unsigned* __restrict__ out, int enable) {{
  PROBE_PROLOGUE
  const unsigned t = threadIdx.x;
  {_ST[w]}
  (void)out;
}}
""")
    for num in (1, 2, 4):
        regs = ", ".join(f"%{i}" for i in range(num))
        outs = ", ".join(f'"=r"(r[{i}])' for i in range(num))
        for trans in (False, True):
            t = ".trans" if trans else ""
            parts.append(f"""
extern "C" __global__ void __launch_bounds__(32) probe_ldmatrix_x{num}{'_trans' if trans else ''}(
    const int* __restrict__ off, unsigned* __restrict__ out, int enable) {{
  PROBE_PROLOGUE  // lanes past 8*num give no row address (o < 0 → a = base; ignored by the hardware)
  unsigned r[4] = {{0, 0, 0, 0}};
  asm volatile("ldmatrix.sync.aligned.m8n8.x{num}{t}.shared.b16 {{{regs}}}, [%{num}];"
               : {outs} : "r"(a) : "memory");
  out[threadIdx.x] = r[0] ^ r[1] ^ r[2] ^ r[3];
}}
""")
        ins = ", ".join(f"%{i + 1}" for i in range(num))
        srcs = ", ".join(['"r"(a)'] + [f'"r"(t + {i})' for i in range(num)])
        parts.append(f"""
extern "C" __global__ void __launch_bounds__(32) probe_stmatrix_x{num}(const int* __restrict__ off,
                                                                     unsigned* __restrict__ out, int enable) {{
  PROBE_PROLOGUE
  const unsigned t = threadIdx.x;
  asm volatile("stmatrix.sync.aligned.m8n8.x{num}.shared.b16 [%0], {{{ins}}};" :: {srcs} : "memory");
  (void)out;
}}
""")
    return "".join(parts)


# -------------------------------------------------------------------------------------------- patterns
def _lanes(f) -> list[int]:
    return [int(f(lane)) for lane in range(32)]


STRIDES = list(range(0, 34)) + [48, 64, 96, 128, 256]


def _core(op: str) -> list[Pattern]:
    """Strides, broadcasts and partial broadcasts for every width."""
    out = []
    for w in (4, 16, 8, 2, 1):
        for s in STRIDES:
            if op == "st" and w in (1, 2) and s not in (*range(0, 9), 16, 17, 31, 32, 33, 64, 128):
                continue
            out.append(Pattern(f"stride {s}", "stride", op, w, _lanes(lambda i, s=s, w=w: i * s * w)))
        row = 128 // w  # elements per 128-byte row of banks
        for k in (2, 4, 8, 16, 32):
            out.append(Pattern(f"lane//{k}", "broadcast", op, w, _lanes(lambda i, k=k, w=w: (i // k) * w)))
        for k in (2, 4, 8, 16):
            out.append(Pattern(f"lane%{k}", "broadcast", op, w, _lanes(lambda i, k=k, w=w: (i % k) * w)))
        out.append(Pattern("halves one row apart", "broadcast", op, w,
                           _lanes(lambda i, w=w, row=row: ((i % 16) + (i // 16) * row) * w)))
        out.append(Pattern("quarters one row apart", "broadcast", op, w,
                           _lanes(lambda i, w=w, row=row: ((i % 8) + (i // 8) * row) * w)))
        out.append(Pattern("pairs same word, stride 32 words", "broadcast", op, w,
                           _lanes(lambda i, w=w: (i // 2) * 128 + (i % 2) * w * (w < 4))))
    return out


def _diagnostics(op: str) -> list[Pattern]:
    """Patterns that tell 'per quarter/half warp' processing from 'whole warp, banks permitting'."""
    q16 = {
        "quarters share banks: q0+q1 fill one row, q2+q3 the next":
            lambda i: ((i % 8) % 4 + 4 * ((i // 8) % 2) + 8 * (i // 16)) * 16,
        "q0==q2, q1==q3, q0/q1 one row apart": lambda i: ((i % 8) + 8 * ((i // 8) % 2)) * 16,
        "8-way inside each quarter, quarters on own banks": lambda i: (8 * (i % 8) + (i // 8)) * 16,
        "8-way in quarter 0 only": lambda i: (8 * (i % 8)) * 16 if i < 8 else (64 + i) * 16,
        "four lanes per chunk": lambda i: (i // 4) * 16,
        "quarter q reads row q, reversed": lambda i: (8 * (i // 8) + 7 - (i % 8)) * 16,
        "2-way pairs across quarters": lambda i: ((i % 8) + 8 * (i // 16)) * 16,
        "q0 and q3 conflict, q1/q2 broadcast": lambda i: ((i % 8) * 8 if i < 8 or i >= 24 else 3) * 16,
    }
    h8 = {
        "halves share banks: h0 low banks, h1 high banks": lambda i: ((i % 16) % 8 + 8 * (i // 16)) * 8,
        "h0==h1 one row": lambda i: (i % 16) * 8,
        "8-way inside each half, halves on own banks": lambda i: (16 * (i % 8) + (i // 8)) * 8,
        "4-way inside half 0 only": lambda i: (16 * (i % 4) + i // 4) * 8 if i < 16 else (48 + i) * 8,
        "quarter-like: lanes 0-7 row 0 low, 8-15 row 1 high": lambda i: ((i % 8) + 24 * ((i // 8) % 2)
                                                                           + 32 * (i // 16)) * 8,
    }
    # Loads of 8/16 bytes pair up their phases (halves→warp, quarters→half warp) when every quad of
    # lanes asks for at most 2 distinct addresses; these tell which quads / which halves must qualify.
    quad = (0, 1, 1, 0)
    merge16 = {
        "quads (a,b,b,a)": lambda i: 2 * (i // 4) + quad[i % 4],
        "quads (a,a,a,b)": lambda i: 2 * (i // 4) + (i % 4 == 3),
        "quads (a,a,b,c), all quads the same": lambda i: (0, 0, 1, 2)[i % 4],
        "half 0 pairs, half 1 stride 1": lambda i: i // 2 if i < 16 else 16 + i,
        "half 0 stride 1, half 1 pairs": lambda i: i if i < 16 else 32 + i // 2,
        "pairs, but quad 7 has 3 addresses": lambda i: i // 2 if i < 28 else (14, 14, 15, 16)[i % 4],
        "pairs, but quad 0 has 3 addresses": lambda i: i // 2 if i >= 4 else (0, 0, 1, 20)[i],
        "quads (a,a,b,b) one row apart per quarter": lambda i: (i // 2) % 4 + 8 * (i // 8),
    }
    merge8 = {
        "quads (a,b,b,a)": lambda i: 2 * (i // 4) + quad[i % 4],
        "quads (a,a,b,c), all quads the same": lambda i: (0, 0, 1, 2)[i % 4],
        "half 0 pairs, half 1 stride 1": lambda i: i // 2 if i < 16 else 16 + i,
        "pairs, but quad 7 has 3 addresses": lambda i: i // 2 if i < 28 else (14, 14, 15, 16)[i % 4],
        "quads (a,a,b,b), halves 16 units apart": lambda i: (i // 2) % 8 + 16 * (i // 16),
    }
    out = [Pattern(n, "merge rule", op, 16, _lanes(lambda i, f=f: 16 * f(i))) for n, f in merge16.items()]
    out += [Pattern(n, "merge rule", op, 8, _lanes(lambda i, f=f: 8 * f(i))) for n, f in merge8.items()]
    out.append(Pattern("quads (a,b,-,-)", "merge rule", op, 16,
                       _lanes(lambda i: 16 * (2 * (i // 4) + i % 4) if i % 4 < 2 else -1)))
    out.append(Pattern("quads (a,b,c,-)", "merge rule", op, 16,
                       _lanes(lambda i: 16 * (3 * (i // 4) + i % 4) if i % 4 < 3 else -1)))
    out.append(Pattern("quads (a,b,-,-)", "merge rule", op, 8,
                       _lanes(lambda i: 8 * (2 * (i // 4) + i % 4) if i % 4 < 2 else -1)))
    out += [Pattern(n, "diagnostic", op, 16, _lanes(f)) for n, f in q16.items()]
    out += [Pattern(n, "diagnostic", op, 8, _lanes(f)) for n, f in h8.items()]
    for w in (1, 2):  # sub-word accesses: bytes of one word are one broadcast
        out.append(Pattern("same word, different bytes, 32 rows", "subword", op, w,
                           _lanes(lambda i, w=w: (i // (4 // w)) * 128 + (i % (4 // w)) * w)))
        out.append(Pattern("two lanes per word, words stride 2", "subword", op, w,
                           _lanes(lambda i, w=w: (i // 2) * 8 + (i % 2) * w)))
    return out


def _tiles(op: str) -> list[Pattern]:
    """Row and column walks of bf16 tiles: plain, padded and swizzled (32B/64B/128B)."""
    out = []
    # 16x16 bf16 tile, rows of 32 bytes.
    out.append(Pattern("16x16 bf16 column walk, 2B", "tile16", op, 2, _lanes(lambda i: (i % 16) * 32 + (i // 16) * 2)))
    out.append(Pattern("16x16 bf16 column walk, 4B pairs", "tile16", op, 4,
                       _lanes(lambda i: (i % 16) * 32 + (i // 16) * 4)))
    out.append(Pattern("16x16 bf16 column walk, 16B", "tile16", op, 16,
                       _lanes(lambda i: (i % 16) * 32 + (i // 16) * 16)))
    out.append(Pattern("16x16 bf16 mma-A fragment pairs", "tile16", op, 4,
                       _lanes(lambda i: (i // 4) * 32 + (i % 4) * 4)))
    # Tiles whose rows are 32, 64 or 128 bytes, under each swizzle that fits.
    for pitch, modes in ((128, ("none", "32B", "64B", "128B")), (64, ("none", "32B", "64B")), (32, ("none", "32B"))):
        cols = pitch // 2
        for mode in modes:
            def sw(o: int, mode=mode) -> int:
                return swizzle(o, mode)
            tag = f"{32 if pitch == 32 else 64}x{cols} bf16, {mode} swizzle"
            for w in (16, 4):
                out.append(Pattern(f"{tag}: column walk {w}B", "swizzle", op, w,
                                   _lanes(lambda i, p=pitch, sw=sw: sw(i * p))))
            if pitch == 128:
                out.append(Pattern(f"{tag}: column walk 16B chunk 3", "swizzle", op, 16,
                                   _lanes(lambda i, sw=sw: sw(i * 128 + 48))))
                out.append(Pattern(f"{tag}: row walk 16B", "swizzle", op, 16,
                                   _lanes(lambda i, sw=sw: sw((i // 8) * 128 + (i % 8) * 16))))
                out.append(Pattern(f"{tag}: column walk 2B", "swizzle", op, 2,
                                   _lanes(lambda i, sw=sw: sw(i * 128 + 2))))
                out.append(Pattern(f"{tag}: 16x16 subtile, ldmatrix-like 16B", "swizzle", op, 16,
                                   _lanes(lambda i, sw=sw: sw((i % 16) * 128 + (i // 16) * 16))))
    # Padded rows.
    for cols, pad in ((64, 1), (64, 2), (64, 4), (64, 8), (32, 8), (16, 8)):
        pitch = 2 * (cols + pad)
        tag = f"{cols}-col bf16 + {pad} pad"
        if pitch % 16 == 0:
            out.append(Pattern(f"{tag}: column walk 16B", "padding", op, 16, _lanes(lambda i, p=pitch: i * p)))
        if pitch % 8 == 0:
            out.append(Pattern(f"{tag}: column walk 8B", "padding", op, 8, _lanes(lambda i, p=pitch: i * p)))
        if pitch % 4 == 0:
            out.append(Pattern(f"{tag}: column walk 4B", "padding", op, 4, _lanes(lambda i, p=pitch: i * p)))
        out.append(Pattern(f"{tag}: column walk 2B", "padding", op, 2, _lanes(lambda i, p=pitch: i * p)))
    return out


def _random(op: str, seed: int) -> list[Pattern]:
    """Seeded random permutations and random aligned offsets (small regions force broadcasts)."""
    rng = random.Random(seed)
    out = []
    for w, nperm, nrand in ((16, 4, 12), (8, 4, 12), (4, 3, 8), (2, 2, 5), (1, 2, 5)):
        for i in range(nperm):
            perm = list(range(32))
            rng.shuffle(perm)
            out.append(Pattern(f"permutation #{i}", "random", op, w, [p * w for p in perm]))
        for i in range(nrand):
            region = (256, 512, 1024, 4096)[i % 4]
            out.append(Pattern(f"random in {region} B #{i}", "random", op, w,
                               [rng.randrange(region // w) * w for _ in range(32)]))
    return out


def _inactive(op: str) -> list[Pattern]:
    """Partial warps: lanes that sit out (offset -1) must not count."""
    m = []
    m.append(Pattern("lanes 0-15, stride 32 words", "inactive", op, 4, _lanes(lambda i: i * 128 if i < 16 else -1)))
    m.append(Pattern("even lanes, stride 1", "inactive", op, 4, _lanes(lambda i: -1 if i % 2 else i * 4)))
    m.append(Pattern("lane 5 only", "inactive", op, 4, _lanes(lambda i: 20 if i == 5 else -1)))
    m.append(Pattern("lanes 0-7, stride 1", "inactive", op, 16, _lanes(lambda i: i * 16 if i < 8 else -1)))
    m.append(Pattern("lanes 0,8,16,24 one row apart", "inactive", op, 16, _lanes(lambda i: -1 if i % 8 else i * 16)))
    m.append(Pattern("lanes 0-15, stride 1", "inactive", op, 16, _lanes(lambda i: i * 16 if i < 16 else -1)))
    m.append(Pattern("lanes 16-31, chunk lane%8", "inactive", op, 16,
                     _lanes(lambda i: (i % 8) * 16 if i >= 16 else -1)))
    m.append(Pattern("lanes 0-15, stride 1", "inactive", op, 8, _lanes(lambda i: i * 8 if i < 16 else -1)))
    m.append(Pattern("lanes 0-7 and 16-23, unit lane%8", "inactive", op, 8,
                     _lanes(lambda i: (i % 8) * 8 if (i % 16) < 8 else -1)))
    m.append(Pattern("odd lanes, stride 16 units", "inactive", op, 8, _lanes(lambda i: i * 128 if i % 2 else -1)))
    return m


def _matrix(op: str, seed: int) -> list[Pattern]:
    """ldmatrix / stmatrix: row addresses from lanes 0..8*num-1, 16 bytes each."""
    rng = random.Random(seed)
    out = []

    def pat(name: str, group: str, num: int, rows: list[int], trans: bool = False) -> Pattern:
        return Pattern(name, group, op, 16, rows[: 8 * num] + [-1] * (32 - 8 * num), num, trans)

    for num in (1, 2, 4):
        pitches = (16, 32, 64, 128, 144, 256) if op == "ldmatrix" else (16, 64, 128, 144)
        for p in pitches:
            out.append(pat(f"x{num} rows {p} B apart", "matrix pitch", num, [i * p for i in range(32)]))
    sw = lambda o: swizzle(o, "128B")  # noqa: E731
    tile_a = [(i % 16) * 128 + (i // 16) * 16 for i in range(32)]
    out.append(pat("x4 16x16 of a 64-col bf16 tile", "matrix tile", 4, tile_a))
    out.append(pat("x4 16x16 of a 64-col bf16 tile, 128B swizzle", "matrix tile", 4, [sw(o) for o in tile_a]))
    out.append(pat("x4 16x16 bf16 tile (32 B rows)", "matrix tile", 4,
                   [(i % 16) * 32 + (i // 16) * 16 for i in range(32)]))
    out.append(pat("x4 4 matrices side by side in one 64 B row set", "matrix tile", 4,
                   [(i % 8) * 128 + (i // 8) * 16 for i in range(32)]))
    out.append(pat("x2 16 rows of a 64-col tile", "matrix tile", 2, [(i % 16) * 128 for i in range(32)]))
    if op == "ldmatrix":
        out.append(pat("x4 rows 128 B apart (.trans)", "matrix pitch", 4, [i * 128 for i in range(32)], True))
        out.append(pat("x4 rows 16 B apart (.trans)", "matrix pitch", 4, [i * 16 for i in range(32)], True))
        out.append(pat("x4 64-col tile, 128B swizzle (.trans)", "matrix tile", 4, [sw(o) for o in tile_a], True))
        out.append(pat("x1 rows 144 B apart (.trans)", "matrix pitch", 1, [i * 144 for i in range(32)], True))
        for num in (1, 4):
            out.append(pat(f"x{num} all rows one address", "matrix broadcast", num, [256] * 32))
        out.append(pat("x4 matrices 0,1 same rows; 2,3 same rows", "matrix broadcast", 4,
                       [(i % 8) * 16 + (i // 16) * 128 for i in range(32)]))
        out.append(pat("x2 matrix 1 = matrix 0", "matrix broadcast", 2, [(i % 8) * 16 for i in range(32)]))
        out.append(pat("x4 each matrix 8 rows 2-way", "matrix pitch", 4,
                       [(i % 8 // 2) * 16 + (i % 2) * 128 + (i // 8) * 256 for i in range(32)]))
    for i in range(4 if op == "ldmatrix" else 2):
        num = (4, 1, 2, 4)[i]
        out.append(pat(f"x{num} random rows #{i}", "matrix random", num, [rng.randrange(256) * 16 for _ in range(32)]))
    return out


def patterns(seed: int = 20261129) -> list[Pattern]:
    """Every probe pattern, in priority order (loads first), duplicates removed."""
    groups = [_core("ld"), _diagnostics("ld"), _matrix("ldmatrix", seed + 1), _tiles("ld"),
              _random("ld", seed), _inactive("ld"),
              _core("st"), _diagnostics("st"), _matrix("stmatrix", seed + 2), _tiles("st"),
              _random("st", seed + 3), _inactive("st")]
    seen: set[tuple] = set()
    out = []
    for p in (p for g in groups for p in g):
        assert len(p.offsets) == 32 and max(p.offsets) + p.width <= SMEM, p
        if p.key() not in seen:
            seen.add(p.key())
            out.append(p)
    return out


def kernels_used(pats: list[Pattern]) -> list[str]:
    return sorted({p.kernel for p in pats})


# ------------------------------------------------------------------------------------------ child side
def child(args: argparse.Namespace) -> None:
    """Launch the patterns [start, stop) in order (this process is the one ncu profiles)."""
    import cupy as cp
    import numpy as np

    spec = json.loads(Path(args.patterns).read_text())
    pats = [Pattern(**p) for p in spec["patterns"]]
    mod = common.load(Path(args.cubin).read_bytes())
    fns = {}
    for name in kernels_used(pats):
        fn = mod.get_function(name)
        fn.max_dynamic_shared_size_bytes = SMEM
        fns[name] = fn
    out = cp.zeros(32, dtype=cp.uint32)
    one, zero = np.int32(1), np.int32(0)
    dev = [cp.asarray(np.array(p.offsets, dtype=np.int32)) for p in pats]
    cp.cuda.runtime.deviceSynchronize()
    if args.baseline:
        for name in kernels_used(pats):
            fns[name]((1,), (32,), (dev[0], out, zero), shared_mem=SMEM)
    for i in range(args.start, args.stop):
        fns[pats[i].kernel]((grid_of(i),), (32,), (dev[i], out, one), shared_mem=SMEM)
    cp.cuda.runtime.deviceSynchronize()


def grid_of(index: int) -> int:
    """The grid size that tags launch ``index`` (blocks past the first exit at once)."""
    return 1 + index % 13


# ----------------------------------------------------------------------------------------- parent side
def available_metrics(ncu: str) -> list[str]:
    text = subprocess.run([ncu, "--query-metrics"], capture_output=True, text=True, timeout=120).stdout
    keep = [m for m in OPTIONAL_METRICS if re.search(rf"^{re.escape(m.rsplit('.', 1)[0])}\b", text, re.M)]
    return CORE_METRICS + keep


def parse_csv(text: str) -> list[dict[str, str]]:
    """Rows of ``ncu --csv --page raw`` output (the units row and tool chatter dropped)."""
    lines = [ln for ln in text.splitlines() if ln.startswith('"')]
    rows = list(csv.reader(io.StringIO("\n".join(lines))))
    if not rows:
        return []
    header = rows[0]
    out = []
    for r in rows[1:]:
        d = dict(zip(header, r, strict=False))
        if d.get("ID", "").strip().isdigit():
            out.append(d)
    return out


def number(s: str) -> int | None:
    s = s.replace(",", "").strip()
    try:
        return int(round(float(s)))
    except ValueError:
        return None


def find_ncu() -> str | None:
    """Nsight Compute's command line, if this machine has it."""
    for cand in (shutil.which("ncu"), "/usr/local/cuda/bin/ncu"):
        if cand and Path(cand).exists():
            return cand
    return None


@dataclass
class Measurement:
    patterns: list[Pattern]  # those measured, with .measured filled in
    metrics: list[str]
    baseline: dict[str, dict[str, int]]
    skipped: int  # patterns left out (budget or a failed chunk)
    log: str  # ncu's raw CSV output, all chunks


def measure(pats: list[Pattern], *, budget_s: float = 240.0, chunk: int = 150) -> Measurement:
    """Run ``pats`` under ncu, ``chunk`` launches per ncu process, stopping before ``budget_s`` runs out."""
    ncu = find_ncu()
    if ncu is None:
        raise RuntimeError("ncu (Nsight Compute) is not on this machine; the bank table needs its counters")
    metrics = available_metrics(ncu)
    tmp = Path(tempfile.mkdtemp(prefix="banks_probe_"))
    cubin = tmp / "probes.cubin"
    cubin.write_bytes(common.build_cubin(kernel_source(), "banks_probe.cu"))
    pfile = tmp / "patterns.json"
    pfile.write_text(json.dumps({"patterns": [asdict(p) for p in pats]}))
    start_all = time.time()
    baseline: dict[str, dict[str, int]] = {}
    done, per_pattern = 0, None
    logs: list[str] = []
    ok: list[int] = []
    while done < len(pats):
        stop = min(len(pats), done + chunk)
        elapsed = time.time() - start_all
        if per_pattern is not None and elapsed + 8 + per_pattern * (stop - done) > budget_s:
            stop = done + max(0, int((budget_s - elapsed - 8) / per_pattern))
            if stop <= done:
                print(f"budget reached: {len(pats) - done} patterns not measured", flush=True)
                break
        log = tmp / f"ncu_{done}.csv"
        cmd = [ncu, "--clock-control", "none", "--csv", "--page", "raw", "--metrics", ",".join(metrics),
               "-k", "regex:^probe_", "--log-file", str(log), sys.executable, __file__, "--child",
               "--patterns", str(pfile), "--cubin", str(cubin), "--start", str(done), "--stop", str(stop)]
        nbase = 0
        if not baseline:
            cmd.append("--baseline")
            nbase = len(kernels_used(pats))
        t0 = time.time()
        res = subprocess.run(cmd, capture_output=True, text=True)
        text = log.read_text() if log.exists() else ""
        logs.append(text)
        rows = parse_csv(text)
        if res.returncode != 0 or len(rows) != nbase + (stop - done):
            # Keep going: the rows of this chunk stay unmeasured (and out of the table).
            print(f"chunk {done}:{stop} failed (exit {res.returncode}, {len(rows)} rows for "
                  f"{nbase + stop - done} launches):\n{res.stdout[-2000:]}\n{res.stderr[-2000:]}\n{text[-2000:]}",
                  flush=True)
            done = stop
            continue
        for r in rows[:nbase]:
            baseline[r["Kernel Name"].split("(")[0]] = {m: number(r.get(m, "")) or 0 for m in metrics}
        for i, r in zip(range(done, stop), rows[nbase:], strict=True):
            p = pats[i]
            kname = r["Kernel Name"].split("(")[0]
            grid = r.get("Grid Size", "")
            if kname != p.kernel or (grid and not grid.strip("()").startswith(f"{grid_of(i)},")):
                raise RuntimeError(f"launch {i}: ncu row is {kname} {grid}, expected {p.kernel} grid {grid_of(i)}")
            raw = {m: number(r.get(m, "")) for m in metrics}
            base = baseline.get(p.kernel, {})
            p.measured = {m: (v - base.get(m, 0)) if v is not None else None for m, v in raw.items()}
            ok.append(i)
        per_pattern = (time.time() - t0) / max(1, stop - done)
        print(f"chunk {done}:{stop} in {time.time() - t0:.1f} s ({per_pattern * 1000:.0f} ms/pattern)", flush=True)
        done = stop
    return Measurement([pats[i] for i in ok], metrics, baseline, len(pats) - len(ok), "\n".join(logs))


def run_ncu(args: argparse.Namespace) -> None:
    pats = patterns()
    if args.limit:
        pats = pats[: args.limit]
    print(f"{len(pats)} patterns", flush=True)
    m = measure(pats, budget_s=args.budget_s, chunk=args.chunk)
    print(f"metrics: {m.metrics}; {m.skipped} patterns not measured", flush=True)
    write_table(args, m.patterns, m.metrics, m.baseline)
    if args.log_dir:
        Path(args.log_dir).mkdir(parents=True, exist_ok=True)
        Path(args.log_dir, "banks_ncu_raw.csv").write_text(m.log)


def summary(p: Pattern) -> dict:
    """One row of the table: the pattern and what ncu counted for it (baseline subtracted)."""
    return _summary(p)


def _summary(p: Pattern) -> dict:
    m = p.measured
    side = "st" if p.op in ("st", "stmatrix") else "ld"
    return {
        "name": p.name, "group": p.group, "op": p.op, "width": p.width, "num": p.num, "trans": p.trans,
        "offsets": p.offsets,
        "wavefronts": m.get(f"l1tex__data_pipe_lsu_wavefronts_mem_shared_op_{side}.sum"),
        "conflicts": m.get(f"l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_{side}.sum"),
        "instructions": m.get(f"smsp__inst_executed_op_shared_{side}.sum"),
        "raw": m,
    }


def write_table(args: argparse.Namespace, pats: list[Pattern], metrics: list[str], baseline: dict) -> None:
    table = {
        "what": "shared-memory wavefronts of one warp-wide access, measured with ncu (bench/probes/banks_probe.py)",
        "machine": common.machine(args.commit),
        "metrics": metrics,
        "baseline": baseline,
        "rows": [_summary(p) for p in pats],
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(table, indent=None, separators=(",", ":")) + "\n")
    print(f"wrote {len(pats)} rows to {args.out}", flush=True)
    try:
        from tklab import banks
    except ImportError:
        return
    bad = 0
    for row in table["rows"]:
        pred = banks.predict_row(row)
        if pred != (row["wavefronts"], row["conflicts"]):
            bad += 1
            if bad <= 25:
                print(f"  model differs: {row['op']} w={row['width']} {row['name']!r}: measured "
                      f"{row['wavefronts']}/{row['conflicts']}, model {pred}")
    print(f"model vs measured: {len(table['rows']) - bad}/{len(table['rows'])} rows agree", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ncu", action="store_true", help="measure every pattern under ncu and write the table")
    ap.add_argument("--list", action="store_true", help="print the patterns (and the model's predictions)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--baseline", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--patterns", help=argparse.SUPPRESS)
    ap.add_argument("--cubin", help=argparse.SUPPRESS)
    ap.add_argument("--start", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--stop", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--out", default=str(common.ROOT / "bench/results/banks_h200.json"))
    ap.add_argument("--log-dir", default=None, help="also keep ncu's raw CSV here")
    ap.add_argument("--budget-s", type=float, default=240.0, help="stop starting new chunks after this")
    ap.add_argument("--chunk", type=int, default=150, help="patterns per ncu invocation")
    ap.add_argument("--limit", type=int, default=0, help="only the first N patterns (quick checks)")
    ap.add_argument("--commit", default=None)
    args = ap.parse_args()
    if args.child:
        child(args)
    elif args.ncu:
        run_ncu(args)
    else:
        pats = patterns()
        by_op: dict[str, int] = {}
        for p in pats:
            by_op[p.op] = by_op.get(p.op, 0) + 1
        print(f"{len(pats)} patterns: {by_op}")
        if args.list:
            for p in pats:
                print(f"{p.op:9s} w={p.width:2d} x{p.num}{'t' if p.trans else ' '} {p.group:16s} {p.name}")


if __name__ == "__main__":
    main()
