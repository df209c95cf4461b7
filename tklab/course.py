"""Helpers the chapters share: a same-run comparison with the library, the results table, and two small
models (occupancy, the main loop of a kernel's SASS) that lessons explain and tests check.

Why these live here: every chapter measures its kernel against cuBLAS *in the same run* (a shared GPU
is noisy; the ratio is what carries over), records it under a key like ``"ch02.tiled_fp32"``, and ends
with the table of every chapter's recorded results so far. One helper keeps those records uniform, so
the table can read any chapter's entry, including chapters written later.

A comparison record (``compare`` writes it; anything with at least ``tflops`` is shown) holds::

    {"tflops": .., "ms": .., "library_tflops": .., "library_ms": .., "ceiling_tflops": ..,
     "ceiling": "fp32_simt", "label": "shared-memory tiling, 32×32"}

Public API: ``compare(key, kernel, library, *, flops, label, peak="fp32_simt", verify=None)``,
``comparison(...)``, ``results(*, upto=None, labels=None) -> Results``, ``EXPECTED``,
``occupancy(registers, threads, smem_bytes=0) -> Occupancy`` (the occupancy calculator's per-quadrant rule),
``pooled_register_blocks(...)``, ``quadrant_figure(registers, threads)``, ``main_loop(sass) -> list[str]``,
``ffma_share(sass) -> float``, ``numba_sass(path, name, ndims)``, ``verify_matmul(c, a, b)``,
``numba_gpu_ready()``, ``plots()``, ``bf16_random(shape)``, ``bf16_to_float32(x)``, ``cublas_bf16(a, b, c)``
(bf16 on CuPy, the tensor-core baseline).
"""

from __future__ import annotations

import functools
import html
import re
import subprocess
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from . import ceilings, gpu, recorded
from .arrays import array_module, bf16_random, bf16_to_float32, isclose  # noqa: F401 - chapters call course.bf16_random

# Kernels chapters 00-03 record, so the table can show what is still missing on a machine without a GPU.
EXPECTED: dict[str, str] = {
    "ch01.naive_numba": "naive, numba.cuda, one thread per element (exercise reference)",
    "ch02.naive_uncoalesced": "naive CUDA C, threads along rows (uncoalesced)",
    "ch02.naive_coalesced": "naive CUDA C, threads along columns (coalesced)",
    "ch02.tiled_fp32": "shared-memory tiling, 32×32 tiles (exercise reference)",
    "ch03.blocktile_1d": "1D register blocking, 8 results per thread",
    "ch03.regblock_float4": "2D register blocking 8×8, float4 loads (exercise reference)",
    "ch05.mma_gemm": "mma.sync + ldmatrix, 128×128 block, 64×64 per warp",
    "ch06.gemm_mma_tiles": "tk tiles: mma.sync + ldmatrix, 3-stage cp.async, 128×128 block",
}


# ---- same-run comparison ---------------------------------------------------------------------------
def comparison(kernel_ms: float, library_ms: float, flops: float, *, label: str,
               ceiling_tflops: float | None, ceiling: str) -> dict[str, Any]:
    """The record ``compare`` stores: rates from the two median times, and the ceiling they are read against."""
    if kernel_ms <= 0 or library_ms <= 0:
        raise ValueError("times must be positive")
    out: dict[str, Any] = {
        "label": label,
        "tflops": flops / (kernel_ms * 1e-3) / 1e12,
        "ms": kernel_ms,
        "library_tflops": flops / (library_ms * 1e-3) / 1e12,
        "library_ms": library_ms,
        "ceiling": ceiling,
    }
    if ceiling_tflops:
        out["ceiling_tflops"] = ceiling_tflops
    return out


def compare(key: str, kernel: Callable[[], Any], library: Callable[[], Any], *, flops: float, label: str,
            peak: str = "fp32_simt", verify: Callable[[], Any] | None = None) -> recorded.Recorded:
    """Time ``kernel`` and ``library`` in the same run (GPU) or show the recorded pair (no GPU).

    ``verify`` runs first and should raise when the kernel's output is wrong: a fast wrong kernel is
    never recorded. ``peak`` names the ceiling (``"fp32_simt"`` or ``"bf16_tensor"``).
    """

    def run() -> dict[str, Any]:
        from .bench import bench

        if verify is not None:
            verify()
        k = bench(kernel, flops=flops, peak=peak, name=key)
        lib = bench(library, flops=flops, peak=peak, name="library")
        try:
            c = ceilings.for_device(gpu.name())
            ceiling_tflops = getattr(c, f"{peak}_tflops", None)
        except Exception:  # noqa: BLE001 - an unknown GPU just has no ceiling column
            ceiling_tflops = None
        return comparison(k.ms, lib.ms, flops, label=label, ceiling_tflops=ceiling_tflops, ceiling=peak)

    return recorded.measure(key, run)


def verify_matmul(c: Any, a: Any, b: Any, *, tol: float = 1e-4) -> float:
    """Check ``c == a @ b`` against a float64 reference; return the worst error relative to max |reference|.

    Raises AssertionError naming the first wrong element (NaN counts as wrong, which is why GPU cells
    fill outputs with NaN before a launch: an element the kernel never wrote cannot pass).
    """
    xp = array_module(c)
    ref = xp.matmul(a.astype(xp.float64), b.astype(xp.float64))
    err = xp.abs(c.astype(xp.float64) - ref)
    scale = float(xp.abs(ref).max()) or 1.0
    bad = ~isclose(c, ref, rtol=0.0, atol=tol * scale)
    if bool(bad.any()):
        where = tuple(int(i) for i in xp.argwhere(bad)[0])
        raise AssertionError(f"wrong result at C{list(where)}: got {float(c[where])!r}, "
                             f"expected {float(ref[where])!r} (tolerance {tol:g} × max |C| = {tol * scale:.3g})")
    return float(err.max()) / scale


# ---- the tensor-core baseline ---------------------------------------------------------------------------
def cublas_bf16(a: Any, b: Any, c: Any) -> Callable[[], None]:
    """A function running ``c = a @ b`` with cuBLAS (bf16 in and out, fp32 accumulation) on row-major
    uint16 CuPy arrays: the library baseline of the tensor-core chapters.

    cuBLAS is column-major; a row-major C = A·B is the column-major Cᵀ = Bᵀ·Aᵀ, so B goes first.
    """
    import cupy as cp
    import numpy as np
    from cupy_backends.cuda.libs import cublas

    (m, k), n = a.shape, b.shape[1]
    if b.shape[0] != k or c.shape != (m, n):
        raise ValueError(f"cublas_bf16: shapes {a.shape} @ {b.shape} -> {c.shape} do not match")
    handle = cp.cuda.device.get_cublas_handle()
    one, zero = np.ones(1, np.float32), np.zeros(1, np.float32)
    cuda_r_16bf, cublas_compute_32f, cublas_gemm_default = 14, 68, -1  # cudaDataType / cublasComputeType_t

    def run() -> None:
        cublas.setPointerMode(handle, cublas.CUBLAS_POINTER_MODE_HOST)  # alpha, beta live on the host
        cublas.gemmEx(handle, cublas.CUBLAS_OP_N, cublas.CUBLAS_OP_N, n, m, k,
                      one.ctypes.data, b.data.ptr, cuda_r_16bf, n, a.data.ptr, cuda_r_16bf, k,
                      zero.ctypes.data, c.data.ptr, cuda_r_16bf, n, cublas_compute_32f, cublas_gemm_default)

    return run


# ---- the results table -------------------------------------------------------------------------------
@dataclass
class Row:
    """One line of the results table; numbers are None where unknown."""

    chapter: str
    key: str
    kernel: str
    tflops: float | None
    of_ceiling: float | None
    of_library: float | None
    origin: str


def _chapter(key: str) -> str:
    m = re.match(r"ch(\d+)", key)
    return m.group(1) if m else "?"


def _row(key: str, values: dict[str, Any] | None, origin: str, labels: dict[str, str]) -> Row:
    label = labels.get(key) or (values or {}).get("label") or EXPECTED.get(key) or key.split(".", 1)[-1]
    if values is None:
        return Row(_chapter(key), key, str(label), None, None, None, origin)
    tflops = values.get("tflops")
    ceiling_tflops = values.get("ceiling_tflops")
    if ceiling_tflops is None and tflops is not None:
        kind = values.get("ceiling", "fp32_simt")
        ceiling_tflops = getattr(ceilings.KNOWN["H200"], f"{kind}_tflops", None)
    lib = values.get("library_tflops")
    return Row(_chapter(key), key, str(label), tflops,
               tflops / ceiling_tflops if tflops is not None and ceiling_tflops else None,
               tflops / lib if tflops is not None and lib else None, origin)


def _all_records() -> dict[str, Any]:
    return {key: {"values": r.values, "device": r.device, "date": r.date, "commit": r.commit}
            for key, r in recorded.all_records().items()}


@dataclass
class Results:
    """The results table; shows as HTML in a notebook and as a markdown table in text."""

    rows: list[Row]

    def _cells(self, row: Row) -> list[str]:
        def pct(x: float | None) -> str:
            return "—" if x is None else f"{100 * x:.1f} %"

        return [row.chapter, row.kernel, "—" if row.tflops is None else f"{row.tflops:.2f}",
                pct(row.of_ceiling), pct(row.of_library), row.origin]

    HEADER = ("chapter", "kernel", "TFLOP/s", "% of ceiling", "% of library", "device/date")

    def __str__(self) -> str:
        if not self.rows:
            return "no results recorded yet"
        lines = ["| " + " | ".join(self.HEADER) + " |", "|" + "---|" * len(self.HEADER)]
        lines += ["| " + " | ".join(self._cells(r)) + " |" for r in self.rows]
        return "\n".join(lines)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        if not self.rows:
            return "<p>no results recorded yet</p>"
        head = "".join(f"<th>{h}</th>" for h in self.HEADER)
        body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in self._cells(r)) + "</tr>"
                       for r in self.rows)
        return f"<table><tr>{head}</tr>{body}</table>"


def results(*, upto: int | None = None, labels: dict[str, str] | None = None,
            expected: Iterable[str] | None = None) -> Results:
    """Every recorded kernel result of chapters ≤ ``upto``, plus expected ones not recorded yet.

    Records without ``tflops`` (bandwidth measurements, ceilings) are left out: the table compares
    matmul-like kernels by FLOP rate. ``labels`` overrides the kernel column for some keys.
    """
    labels = labels or {}
    records = _all_records()
    keys = {k for k, v in records.items() if isinstance(v, dict) and "tflops" in v.get("values", {})}
    keys |= set(EXPECTED if expected is None else expected)
    if upto is not None:
        keys = {k for k in keys if _chapter(k).isdigit() and int(_chapter(k)) <= upto}
    order = list(EXPECTED) if expected is None else list(expected)
    keys_sorted = sorted(keys, key=lambda k: (_chapter(k), order.index(k) if k in order else len(order), k))
    rows = []
    for key in keys_sorted:
        entry = records.get(key)
        if entry is None:
            rows.append(_row(key, None, "not recorded yet", labels))
        else:
            origin = f"{entry.get('device', '?')}, {entry.get('date', '?')}"
            rows.append(_row(key, entry.get("values", {}), origin, labels))
    return Results(rows)


# ---- occupancy ---------------------------------------------------------------------------------------
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


# ---- reading SASS --------------------------------------------------------------------------------------
_LINE = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)*)(.*)")
_TARGET = re.compile(r"\b(?:0x)?([0-9a-f]+)\s*;")


def _parsed(sass: str) -> list[tuple[int, str, str]]:
    out = []
    for line in sass.splitlines():
        if m := _LINE.search(line):
            out.append((int(m.group(1), 16), m.group(2), m.group(3)))
    return out


def main_loop(sass: str) -> list[str]:
    """Opcodes of the kernel's hot loop: the backward branch's body that holds the most FFMA/HMMA/HGMMA.

    A loop in SASS is a branch (``BRA``) to an earlier address; its body runs from that address to the
    branch. A "body" that holds an EXIT is not a loop: it is an out-of-line retry (an mbarrier wait placed
    after the kernel's end) jumping back into the code. Returns [] when the kernel has no loop.
    """
    instrs = _parsed(sass)
    best: tuple[int, int] | None = None
    best_score = (-1, 0)
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
        body = [o.split(".")[0] for _, o, _ in instrs[start:i + 1]]
        if "EXIT" in body:
            continue
        math = sum(o in ("FFMA", "HMMA", "HGMMA") for o in body)
        score = (math, -len(body))
        if score > best_score:
            best_score, best = score, (start, i)
    if best is None:
        return []
    return [o for _, o, _ in instrs[best[0]:best[1] + 1]]


def ffma_share(sass: str) -> float:
    """FFMA instructions over all instructions in the main loop (0 when there is no loop)."""
    body = main_loop(sass)
    return sum(o.split(".")[0] == "FFMA" for o in body) / len(body) if body else 0.0


# ---- numba on a real GPU -------------------------------------------------------------------------------
_NUMBA_PROBE = """
import numpy as np
from tklab import numba_compat
cuda = numba_compat.cuda(simulate=False)

@cuda.jit
def probe(a):
    a[cuda.grid(1)] = 1.0

a = cuda.device_array(32, dtype=np.float32)
probe[1, 32](a)
assert (a.copy_to_host() == 1.0).all()
"""


@functools.cache
def numba_gpu_ready(timeout: float = 300.0) -> bool:
    """Can numba.cuda compile and run a kernel on this machine's GPU? False without a GPU.

    Why a real attempt in a child process: numba needs NVVM and libdevice (a CUDA toolkit, or the
    ``nvidia-nvvm`` wheel) to compile for a GPU, and once ``numba.cuda`` is imported its mode cannot
    change; probing outside lets a notebook fall back to the simulator before it imports numba.cuda.
    """
    if not gpu.available():
        return False
    try:
        done = subprocess.run([sys.executable, "-c", _NUMBA_PROBE], capture_output=True, text=True,
                              timeout=timeout, check=False)
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


# ---- figures -----------------------------------------------------------------------------------------
FIGURE_STYLE: dict[str, Any] = {
    "figure.dpi": 100,  # 1 inch of figure = 100 CSS pixels in the notebook
    "font.size": 10,
    "axes.titlesize": 11,
    "axes.labelsize": 10,
    "xtick.labelsize": 9,
    "ytick.labelsize": 9,
    "legend.fontsize": 9,
    "text.antialiased": True,
    "lines.antialiased": True,
    "patch.antialiased": True,
    "savefig.bbox": "tight",
}


def plots() -> None:
    """Figures as sharp PNGs with readable text, stored in the notebook.

    Why PNG and not SVG: JupyterLab renders SVG (and HTML with SVG inside) only in notebooks the reader
    has *trusted*, and a fresh clone is not trusted, so stored SVG figures showed up as
    ``<Figure size ...>``. PNG is shown everywhere. "retina" draws at twice the pixel density and tells
    the browser the logical size, so text stays sharp on high-resolution screens.
    """
    import matplotlib as mpl

    mpl.rcParams.update(FIGURE_STYLE)
    try:
        from IPython import get_ipython
        from matplotlib.figure import Figure
        from matplotlib_inline.backend_inline import set_matplotlib_formats
    except ImportError:  # outside IPython there is nothing to configure
        return
    shell = get_ipython()
    if shell is None:
        return
    set_matplotlib_formats("retina")
    png = shell.display_formatter.formatters["image/png"]
    retina = png.lookup_by_type(Figure)
    png.for_type(Figure, lambda fig: _compact(retina(fig)))


def _compact(shown: Any) -> Any:
    """IPython's retina PNG (bytes or base64 text, alone or with size metadata), with a 256-colour palette."""
    import base64

    from .widgets.raster import compact_png

    data, meta = shown if isinstance(shown, tuple) else (shown, None)
    if isinstance(data, str):
        data = base64.b64encode(compact_png(base64.b64decode(data))).decode("ascii")
    elif isinstance(data, bytes):
        data = compact_png(data)
    return data if meta is None else (data, meta)


# ---- numba's machine code ------------------------------------------------------------------------------
_NUMBA_SASS = r"""
import importlib.util, json, os, sys
os.environ["NUMBA_ENABLE_CUDASIM"] = "0"
from tklab import numba_compat
numba_compat.patch()
from numba import cuda, types
path, name, ndims, cc = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), sys.argv[4]
spec = importlib.util.spec_from_file_location("_numba_source", path)
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
sig = tuple(types.Array(types.float32, n, "C") for n in ndims)
ptx, _ = cuda.compile_ptx(getattr(module, name).py_func, sig, cc=tuple(int(c) for c in cc))
sys.stdout.write(ptx)
"""


def numba_sass(path: str, name: str, ndims: Iterable[int], *, arch: str = "sm_90") -> str:
    """SASS of the numba.cuda kernel ``name`` in the file ``path``, for float32 C-ordered array arguments.

    numba compiles Python to PTX with NVVM (no GPU needed); nvJitLink turns the PTX into machine code and
    cuobjdump prints it, exactly as for CUDA C kernels. It runs in a child process because a notebook that
    already uses numba's simulator cannot switch numba back to compiling for a GPU.
    """
    import json

    from cuda.bindings import nvjitlink

    from . import sass

    cc = arch.removeprefix("sm_").rstrip("a")
    done = subprocess.run([sys.executable, "-c", _NUMBA_SASS, str(path), name, json.dumps(list(ndims)), cc],
                          capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"numba could not compile {name} to PTX: {done.stderr.strip().splitlines()[-1:]}")
    ptx = done.stdout.encode()
    handle = nvjitlink.create(2, [f"-arch={arch}", "-O3"])
    try:
        nvjitlink.add_data(handle, nvjitlink.InputType.PTX, ptx, len(ptx), f"{name}.ptx")
        nvjitlink.complete(handle)
        cubin = bytearray(nvjitlink.get_linked_cubin_size(handle))
        nvjitlink.get_linked_cubin(handle, cubin)
    finally:
        nvjitlink.destroy(handle)
    return "\n".join(sass.disassemble(bytes(cubin)).values())
