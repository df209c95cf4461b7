"""The drills: one hardware rule each, the learner's answer checked against the course's models.

Each entry is ``drill(...)`` (``tklab.grading.drills``): the learner's function name and parameters, the
domain it is checked on (every case, or a fixed sample of a large domain) and the rule, which asks the
model the chapter measured against the hardware (``tklab.models``, the attention block map) or, where
the rule is an encoding the tile library compiles (the wgmma descriptor, the setmaxnreg split), repeats
that encoding from its header. The solutions are ``solutions/drills/<id>.py``; hints beside them.
"""

from __future__ import annotations

import functools
import itertools
import math
from typing import Any

import numpy as np

from ...models import banks, layouts, occupancy
from ..drills import drill
from ..spec_kit import Exercise


def _sectors(stride: int, itemsize: int) -> int:
    return len({(lane * stride * itemsize) // 32 for lane in range(32)})


def _bank_passes(stride: int) -> int:
    return banks.wavefronts([lane * stride * 4 for lane in range(32)], 4)


def _padded_pitch(cols: int, itemsize: int) -> int:
    """The narrowest row pitch (elements) ≥ cols whose column reads by a warp take one pass per phase."""
    for pitch in itertools.count(cols):
        column = [lane * pitch * itemsize for lane in range(32)]
        if banks.wavefronts(column, itemsize) == banks.analyze(column, itemsize).ideal:
            return pitch
    raise AssertionError("unreachable")


def _tma_bytes(rows: int, cols: int, itemsize: int, swizzle: int) -> tuple[int, int]:
    mode = f"{swizzle}B" if swizzle else "none"
    try:
        layouts.tma_box_offset(0, 0, box_cols=cols, itemsize=itemsize, swizzle=mode)
        second_row = layouts.tma_box_offset(1, 0, box_cols=cols, itemsize=itemsize, swizzle=mode)
    except ValueError:
        return (-1, -1)
    pitch = layouts.swizzle(second_row, mode)  # where row 1 starts, the XOR undone: the row pitch
    return (rows * cols * itemsize, rows * pitch)


def _mbarrier_passes(arrivals: int, count: int, parity: int) -> int:
    """try_wait.parity(p) returns once the phase of parity p has completed: the current phase (number
    arrivals // count, still collecting arrivals) must have the other parity."""
    return int(((arrivals // count) & 1) != parity)


#: The descriptor's fields as the PTX ISA's table gives them: (first bit, width in bits). The three addresses are
#: in 16-byte units (their low 4 bits dropped); cuda/tk/hopper/descriptor.cuh encodes the same (the GPU tests of
#: wgmma hold it correct). Written as a table, not as the drill's answer, so the rule does not print it.
_FIELDS = {"address": (0, 14), "lbo": (16, 14), "sbo": (32, 14), "swizzle": (62, 2)}
_SWIZZLE_MODES = (0, 128, 64, 32)  # the 2-bit code of each mode is its index


def _descriptor(address: int, lbo: int, sbo: int, swizzle: int) -> int:
    values = {"address": address // 16, "lbo": lbo // 16, "sbo": sbo // 16, "swizzle": _SWIZZLE_MODES.index(swizzle)}
    return sum((values[name] % (1 << width)) << first for name, (first, width) in _FIELDS.items())


def _register_split(producers: int, consumers: int, producer_regs: int) -> int:
    """The largest setmaxnreg value (24..256, a multiple of 8) the consumers may take: every warpgroup's
    128 threads' registers fit the 65,536 of the register file (cuda/tk/ops/warpgroup/scope.cuh)."""
    best = 0
    for c in range(24, 257, 8):
        if (producers * producer_regs + consumers * c) * 128 <= 65536:
            best = c
    return best


def _block_kind(i: int, j: int, seq: int, block_rows: int, block_keys: int, causal: int) -> int:
    from ...kernels import attention

    return int(attention.block_map(seq, block_rows, block_keys, bool(causal))[i, j])


@functools.cache
def _visiting_key_blocks(seq: int, block_keys: int, causal: int) -> tuple[int, ...]:
    """Per query block of 64 rows, how many key blocks the block map does not skip (one map per shape, not
    one per row asked about)."""
    from ...kernels import attention

    return tuple(int(n) for n in (attention.block_map(seq, 64, block_keys, bool(causal)) != attention.SKIPPED).sum(1))


def _dq_shares(row: int, seq: int, block_keys: int, causal: int) -> int:
    """Chapter 11's backward: key block j adds a share into every row of each query block (64 rows) it
    visits, and it visits those the block map does not skip."""
    return _visiting_key_blocks(seq, block_keys, causal)[row // 64]


def _dq_domain() -> list[tuple[int, ...]]:
    out = []
    for seq, bk, causal in itertools.product((1, 77, 200, 1000, 4097), (32, 64, 128, 176), (0, 1)):
        rows = sorted(set(range(0, seq, 13)) | {seq - 1, min(63, seq - 1), min(64, seq - 1)})
        out += [(r, seq, bk, causal) for r in rows]
    return out


def _block_domain() -> list[tuple[int, ...]]:
    out = []
    for seq, br, bc, causal in itertools.product((64, 100, 128, 200), (64, 128), (32, 64, 128), (0, 1)):
        for i in range(math.ceil(seq / br)):
            out += [(i, j, seq, br, bc, causal) for j in range(math.ceil(seq / bc))]
    return out


def _sample(rng_seed: int, n: int, *choices: Any) -> list[tuple[int, ...]]:
    rng = np.random.default_rng(rng_seed)
    arrays = [np.asarray(c) for c in choices]  # once: ``choice`` of a range builds its array on every call
    return [tuple(int(rng.choice(a)) for a in arrays) for _ in range(n)]


_MMA_A = layouts.fragment("mma.m16n8k16", "A")
_LDMATRIX = layouts.fragment("ldmatrix.x4")
_RT = layouts.fragment("rt.16x16", "row")

DRILLS: dict[str, Exercise] = {d.id: d for d in (
    drill(id="ch02_sectors", chapter="02", title="Sectors per request of a strided warp access",
          function="sectors", params=("stride", "itemsize"),
          domain=lambda: list(itertools.product(range(0, 34), (1, 2, 4, 8, 16))), rule=_sectors),
    drill(id="ch03_blocks_per_sm", chapter="03", title="Blocks per SM: registers, threads, shared memory",
          function="blocks_per_sm", params=("registers", "threads", "smem_bytes"),
          domain=lambda: list(itertools.product((32, 40, 64, 72, 96, 128, 168, 255), (64, 96, 128, 256, 384, 512,
                                                1024), (0, 16384, 49152, 100000))),
          rule=lambda r, t, s: occupancy.occupancy(r, t, s).blocks_per_sm),
    drill(id="ch04_bank_passes", chapter="04", title="Wavefronts of a strided shared-memory read",
          function="bank_passes", params=("stride",), domain=lambda: [(s,) for s in range(65)], rule=_bank_passes),
    drill(id="ch04_padding", chapter="04", title="The padding that makes a column read conflict-free",
          function="padded_pitch", params=("cols", "itemsize"),
          domain=lambda: list(itertools.product(range(1, 97), (4, 8))), rule=_padded_pitch),
    drill(id="ch05_mma_owner", chapter="05", title="mma.sync's A fragment: which lane holds an element",
          function="a_owner", params=("row", "col"), width=2,
          domain=lambda: list(itertools.product(range(16), range(16))), rule=_MMA_A.owner),
    drill(id="ch05_ldmatrix", chapter="05", title="ldmatrix.x4: what each lane receives",
          function="ldmatrix_element", params=("lane", "i"), width=3,
          domain=lambda: list(itertools.product(range(32), range(8))), rule=_LDMATRIX.coords),
    drill(id="ch06_rt_layout", chapter="06", title="The register tile's layout: a lane's pairs",
          function="rt_element", params=("lane", "i"), width=2,
          domain=lambda: list(itertools.product(range(32), range(8))), rule=_RT.coords),
    drill(id="ch07_mbarrier_parity", chapter="07", title="An mbarrier's phase after n arrivals",
          function="wait_returns", params=("arrivals", "count", "parity"),
          domain=lambda: list(itertools.product(range(13), range(1, 5), (0, 1))), rule=_mbarrier_passes),
    drill(id="ch07_tma_box", chapter="07", title="A TMA box: the bytes it brings and the shared memory it spans",
          function="tma_box_bytes", params=("rows", "cols", "itemsize", "swizzle"), width=2,
          domain=lambda: list(itertools.product((1, 8, 64, 256), (8, 16, 24, 32, 64, 128), (1, 2, 4),
                                                (0, 32, 64, 128))), rule=_tma_bytes),
    drill(id="ch08_descriptor", chapter="08", title="A wgmma shared-memory descriptor, field by field",
          function="descriptor", params=("address", "lbo", "sbo", "swizzle"), wide=True,
          domain=lambda: _sample(8, 300, range(0, 228 * 1024, 16), (16, 128, 1024, 8192), (128, 256, 512, 1024, 2048),
                                 (0, 32, 64, 128)), rule=_descriptor),
    drill(id="ch08_register_split", chapter="08", title="A setmaxnreg split that fits the register file",
          function="consumer_registers", params=("producers", "consumers", "producer_regs"),
          domain=lambda: list(itertools.product((1, 2), (1, 2, 3, 4), (24, 32, 40, 56, 64, 96, 128))),
          rule=_register_split),
    drill(id="ch09_block_kind", chapter="09", title="Causal attention: skipped, full or masked blocks",
          function="block_kind", params=("i", "j", "seq", "block_rows", "block_keys", "causal"),
          domain=_block_domain, rule=_block_kind),
    drill(id="ch10_wgmma_owner", chapter="10", title="wgmma's accumulator: which thread holds a score",
          function="d_owner", params=("row", "col", "n"), width=2,
          domain=lambda: [(r, c, n) for n in (8, 64, 256) for r in range(64) for c in range(n)],
          rule=lambda r, c, n: layouts.fragment(f"wgmma.m64n{n}k16", "D").owner(r, c)),
    drill(id="ch11_dq_shares", chapter="11", title="dQ over key blocks: how many shares land on a row",
          function="dq_shares", params=("row", "seq", "block_keys", "causal"), domain=_dq_domain, rule=_dq_shares),
)}
