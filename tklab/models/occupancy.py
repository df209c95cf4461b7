"""How many blocks of a kernel fit on one SM, and why: the CUDA occupancy calculator's rules for Hopper.

The register rule is the one lessons get wrong: a warp's registers come from the slice of ONE quadrant
(sub-partition) of the register file, so leftovers in one quadrant cannot serve a warp of another.
``occupancy`` follows ``cuda_occupancy.h``; ``pooled_register_blocks`` is the naive one-pool count, kept so
a lesson can show the difference; ``quadrant_figure`` draws the four quadrants filled with warps.

Public API: ``SMLimits``, ``HOPPER``, ``Occupancy``, ``occupancy(registers, threads, smem_bytes=0)``,
``pooled_register_blocks(registers, threads)``, ``quadrant_figure(registers, threads)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class SMLimits:
    """Per-SM limits of compute capability 9.0 (H100/H200), as the CUDA occupancy calculator uses them."""

    registers: int = 65536
    quadrants: int = 4  # the register file is four separate slices, one per quadrant (sub-partition)
    registers_per_block: int = 65536  # the most one block may hold (the launch fails beyond it)
    max_registers_per_thread: int = 255
    register_unit: int = 256  # registers are handed to a warp in chunks of 256 (8 per thread)
    max_warps: int = 64
    max_blocks: int = 32
    smem_bytes: int = 228 * 1024  # shared memory an SM can give to blocks
    smem_reserved_per_block: int = 1024  # the system keeps 1 KB per resident block
    smem_unit: int = 128

    @property
    def registers_per_quadrant(self) -> int:
        return self.registers // self.quadrants


HOPPER = SMLimits()


@dataclass(frozen=True)
class Occupancy:
    """How many blocks of a kernel fit on one SM, and which resource runs out first."""

    blocks_per_sm: int
    warps_per_sm: int
    limit: str  # "registers", "shared memory", "warps" or "blocks"
    by: dict[str, int]  # blocks allowed by each resource
    registers_per_warp: int = 0  # after rounding up to the allocation unit
    warps_per_quadrant: int = 0  # how many such warps one quadrant's register slice holds

    @property
    def fraction(self) -> float:
        """Resident warps over the SM's maximum (what profilers call occupancy)."""
        return self.warps_per_sm / HOPPER.max_warps


def _round_up(x: int, unit: int) -> int:
    return -(-x // unit) * unit


def occupancy(registers: int, threads: int, smem_bytes: int = 0, limits: SMLimits = HOPPER) -> Occupancy:
    """Blocks per SM for a kernel using ``registers`` per thread, ``threads`` per block, ``smem_bytes`` per block.

    The register rule is the CUDA occupancy calculator's (``cuda_occupancy.h``): a warp's registers come
    from the slice of *one* quadrant, 65,536 / 4 = 16,384 registers, so each quadrant holds
    ⌊16,384 / registers-per-warp⌋ warps, the SM four times that, and blocks are counted from those warps.
    Registers left over in one quadrant cannot serve a warp of another, which is why this can be fewer
    blocks than ⌊65,536 / registers-per-block⌋. A block needing more than 65,536 registers (counting its
    warps rounded up to a multiple of 4, as the hardware's launch check does) cannot launch: 0 blocks.
    """
    if not 1 <= registers <= limits.max_registers_per_thread:
        raise ValueError(f"registers per thread must be 1..{limits.max_registers_per_thread}, got {registers}")
    if threads < 1 or threads > 1024:
        raise ValueError(f"threads per block must be 1..1024, got {threads}")
    if smem_bytes < 0:
        raise ValueError(f"shared memory per block must be >= 0 bytes, got {smem_bytes}")
    warps = -(-threads // 32)
    per_warp = _round_up(registers * 32, limits.register_unit)
    per_quadrant = limits.registers_per_quadrant // per_warp
    launchable = per_warp * _round_up(warps, limits.quadrants) <= limits.registers_per_block
    smem = _round_up(smem_bytes, limits.smem_unit) + limits.smem_reserved_per_block
    by = {  # on a tie the first named wins: the hard caps before the resources a kernel chooses
        "warps": limits.max_warps // warps,
        "blocks": limits.max_blocks,
        "registers": per_quadrant * limits.quadrants // warps if launchable else 0,
        "shared memory": limits.smem_bytes // smem if smem_bytes else limits.max_blocks,
    }
    limit = min(by, key=lambda k: by[k])
    blocks = by[limit]
    return Occupancy(blocks, blocks * warps, limit, by, per_warp, per_quadrant)


def pooled_register_blocks(registers: int, threads: int, limits: SMLimits = HOPPER) -> int:
    """Blocks per SM if the 65,536 registers were one pool (they are not: see :func:`occupancy`).

    Kept so a lesson can show the difference the four quadrants make.
    """
    per_warp = _round_up(registers * 32, limits.register_unit)
    return limits.registers // (per_warp * -(-threads // 32))


def quadrant_figure(registers: int, threads: int, *, title: str | None = None, ax: Any = None) -> Any:
    """The four register-file quadrants of one SM, filled with a kernel's warps as the hardware places them.

    Warps of the resident blocks are dealt to quadrants round-robin (warp w of the SM to quadrant w % 4);
    each quadrant is a column 16,384 registers tall, each warp a box of its rounded-up register count,
    coloured by block; what is left at the top of a column is too small for one more warp.
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    occ = occupancy(registers, threads)
    lim = HOPPER
    warps = -(-threads // 32)
    if ax is None:
        _, ax = plt.subplots(figsize=(6.4, 3.4))
    colors = plt.get_cmap("tab20").colors
    height = lim.registers_per_quadrant
    for q in range(lim.quadrants):
        ax.add_patch(Rectangle((q, 0), 0.9, height, facecolor="#f4f4f4", edgecolor="#555", lw=1))
        ax.text(q + 0.45, height * 1.02, f"quadrant {q}", ha="center", va="bottom", fontsize=9)
    filled = [0] * lim.quadrants
    for w in range(occ.warps_per_sm):
        q, block = w % lim.quadrants, w // warps
        y = filled[q]
        ax.add_patch(Rectangle((q + 0.05, y), 0.8, occ.registers_per_warp, facecolor=colors[block % 20],
                               edgecolor="white", lw=1))
        if occ.registers_per_warp >= 1200:
            ax.text(q + 0.45, y + occ.registers_per_warp / 2, f"block {block}, warp {w % warps}"
                    if occ.registers_per_warp >= 2400 else f"b{block}", ha="center", va="center", fontsize=8)
        filled[q] += occ.registers_per_warp
    for q in range(lim.quadrants):
        left = height - filled[q]
        if left:
            ax.text(q + 0.45, filled[q] + left / 2, f"{left} left", ha="center", va="center", fontsize=8,
                    color="#a00")
    ax.set_xlim(-0.1, lim.quadrants)
    ax.set_ylim(0, height * 1.12)
    ax.set_xticks([])
    ax.set_yticks(range(0, height + 1, 4096))
    ax.set_ylabel("registers (32-bit)")
    pooled = pooled_register_blocks(registers, threads)
    ax.set_title(title or f"{registers} registers × {threads} threads: {occ.registers_per_warp} per warp, "
                 f"{occ.warps_per_quadrant} warps per quadrant → {occ.by['registers']} blocks "
                 f"(one pool would say {pooled})", fontsize=10)
    return ax
