"""What the chapters share: each kernel against the library in the same run, and the results table.

Why one module: every chapter measures its kernel against cuBLAS *in the same run* (a shared GPU is
noisy; the ratio is what carries over), records it under a key like ``"ch02.tiled_fp32"``, and ends with
the table of every chapter's recorded results so far. One helper keeps those records uniform, so the
table can read any chapter's entry, including chapters written later.

A comparison record (``compare`` writes it; anything with at least ``tflops`` is shown) holds::

    {"tflops": .., "ms": .., "library_tflops": .., "library_ms": .., "ceiling_tflops": ..,
     "ceiling": "fp32_simt", "label": "shared-memory tiling, 32×32"}

Public API: ``compare(key, kernel, library, *, flops, label, peak="fp32_simt", verify=None)`` (the record
also holds ``sm_clock_mhz``, the SM clock just after the timings, where nvidia-smi tells it), ``sm_clock_mhz()``,
``comparison(...)``, ``verify_matmul(c, a, b)``, ``results(*, upto=None, labels=None) -> Results``,
``EXPECTED``.

The notebooks reach a few helpers that live elsewhere through ``course`` too (one import per chapter; the
stored notebooks call them so): ``occupancy``, ``pooled_register_blocks``, ``quadrant_figure``, ``HOPPER``
(``tklab.models.occupancy``), ``main_loop``, ``ffma_share`` (``tklab.toolchain.sass``), ``numba_gpu_ready``,
``numba_sass`` (``tklab.toolchain.numba_compat``), ``plots`` (``tklab.widgets.figures``), ``bf16_random``,
``bf16_to_float32`` (``tklab.run.arrays``), ``cublas_bf16`` (``tklab.run.baselines``).
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from .. import recorded
from ..recorded import comparison
from ..run import ceilings, gpu
from ..run.arrays import array_module, isclose

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
def sm_clock_mhz(device: int = 0) -> int | None:
    """The SM clock right now (``nvidia-smi``), logged beside a timing: a GPU under sustained load may run
    below its boost clock, and a ratio of two runs at different clocks says more about the clock than the
    kernels. None where nvidia-smi is missing or says nothing useful."""
    import subprocess

    try:
        out = subprocess.run(["nvidia-smi", f"--id={device}", "--query-gpu=clocks.sm", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=10, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    return parse_clock(out)


def parse_clock(text: str) -> int | None:
    """The first whole number of nvidia-smi's answer (MHz), or None ("[N/A]", an error message)."""
    m = re.match(r"\s*(\d+)\s*$", text.splitlines()[0] if text.strip() else "")
    return int(m.group(1)) if m else None


def compare(key: str, kernel: Callable[[], Any], library: Callable[[], Any], *, flops: float, label: str,
            peak: str = "fp32_simt", verify: Callable[[], Any] | None = None) -> recorded.Recorded:
    """Time ``kernel`` and ``library`` in the same run (GPU) or show the recorded pair (no GPU).

    ``verify`` runs first and should raise when the kernel's output is wrong: a fast wrong kernel is
    never recorded. ``peak`` names the ceiling (``"fp32_simt"`` or ``"bf16_tensor"``).
    """

    def run() -> dict[str, Any]:
        from ..run.bench import bench

        if verify is not None:
            verify()
        k = bench(kernel, flops=flops, peak=peak, name=key)
        lib = bench(library, flops=flops, peak=peak, name="library")
        try:
            c = ceilings.for_device(gpu.name())
            ceiling_tflops = getattr(c, f"{peak}_tflops", None)
        except Exception:  # noqa: BLE001 - an unknown GPU just has no ceiling column
            ceiling_tflops = None
        out = comparison(k.ms, lib.ms, flops, label=label, ceiling_tflops=ceiling_tflops, ceiling=peak)
        if (clock := sm_clock_mhz()) is not None:
            out["sm_clock_mhz"] = clock  # right after the timings: the clock they ran at, or close to it
        return out

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
