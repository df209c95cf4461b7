"""The ceilings a kernel is measured against: peak rates of known GPUs.

Two kinds of number live here, and each says which it is:
- ``measured``: read on a real card with a library (cuBLAS, a device-to-device copy) — what a kernel
  can realistically reach. H200 figures: the project's lent H200 (driver 580.159.04, CUDA 13.0, torch
  2.11): cuBLAS as recorded in ``shared/anchors.md`` (each figure's label says when); the copy is chapter 00's
  ceilings cell as recorded in ``bench/results/recorded.json`` (key ``ch00.ceilings``), the one bandwidth every chapter
  quotes (``tests/test_chapter_claims.py`` holds this value to that record and the prose to this value).
- ``datasheet``: the vendor's peak — a bound nothing reaches.

For an unknown GPU, ``for_device(name, measure_copy=...)`` asks the caller to measure copy bandwidth
once (``tklab.bench`` does, with a CuPy copy) and keeps it in the tklab cache folder; compute ceilings
are then unknown (None) rather than guessed. This module measures nothing itself: it is data.

Public API: ``Ceilings``, ``KNOWN``, ``DATASHEET``, ``H200_COPY_TBPS``, ``for_device(name=None, measure_copy=None)``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from .. import paths
from . import gpu


@dataclass(frozen=True)
class Ceilings:
    """Rates in TFLOP/s and TB/s. ``source`` says where each number came from."""

    name: str
    bf16_tensor_tflops: float | None  # dense bf16, fp32 accumulate
    fp32_simt_tflops: float | None  # plain FFMA, no tensor cores
    copy_tbps: float | None  # device-to-device copy, bytes read + written
    source: dict[str, str] = field(default_factory=dict)

    def fraction(self, *, tflops: float | None = None, tbps: float | None = None,
                 kind: str = "bf16_tensor") -> dict[str, float]:
        """Achieved over ceiling, for the rates given."""
        out: dict[str, float] = {}
        peak = getattr(self, f"{kind}_tflops", None)
        if tflops is not None and peak:
            out[f"of {kind} peak"] = tflops / peak
        if tbps is not None and self.copy_tbps:
            out["of copy bandwidth"] = tbps / self.copy_tbps
        return out


_MEASURED_H200 = "measured on the lent H200, 2026-11-29 (cuBLAS; shared/anchors.md)"
#: A 1 GiB cupy device-to-device copy (bytes read + written), timed by chapter 00's ceilings cell on the lent
#: H200: bench/results/recorded.json, key ch00.ceilings (copy_tbps 4.237 there, rounded here; the record keeps
#: its device, date and commit, and tests/test_chapter_claims.py holds this value to it).
H200_COPY_TBPS = 4.24
_COPY_H200 = "1 GiB device-to-device copy on the lent H200, 2026-12-01 (recorded.json: ch00.ceilings, dbbee88)"

KNOWN: dict[str, Ceilings] = {
    "H200": Ceilings("NVIDIA H200", 708.0, 51.0, H200_COPY_TBPS,
                     {"bf16_tensor_tflops": "cuBLAS 4096³ " + _MEASURED_H200,
                      "fp32_simt_tflops": "cuBLAS fp32 without TF32, 4096³ " + _MEASURED_H200,
                      "copy_tbps": _COPY_H200}),
    # H100 SXM: the same SMs and clocks as the H200, less bandwidth (3.35 TB/s datasheet). The compute
    # ceilings are the H200 measurements (same chip); copy scaled by the datasheet bandwidth ratio.
    "H100": Ceilings("NVIDIA H100", 708.0, 51.0, H200_COPY_TBPS * 3.35 / 4.8,
                     {"bf16_tensor_tflops": "H200 measurement (same SMs)",
                      "fp32_simt_tflops": "H200 measurement (same SMs)",
                      "copy_tbps": "H200 measurement × datasheet bandwidth ratio 3.35/4.8"}),
}

DATASHEET = {"H100": {"bf16_tensor_tflops": 989.0, "fp32_simt_tflops": 67.0, "hbm_tbps": 3.35},
             "H200": {"bf16_tensor_tflops": 989.0, "fp32_simt_tflops": 67.0, "hbm_tbps": 4.8}}


def for_device(name: str | None = None, measure_copy: Callable[[], float] | None = None) -> Ceilings:
    """Ceilings for the named GPU (default: this machine's).

    An unknown GPU gets the copy rate measured on it before (cached), else ``measure_copy()`` (TB/s) if
    given, else no ceilings at all (None each).
    """
    if name is None:
        name = gpu.name()
    for key, ceilings in KNOWN.items():
        if key in name:
            return ceilings
    path = paths.cache_dir() / "ceilings.json"
    try:
        saved = json.loads(path.read_text())
    except (OSError, ValueError):
        saved = {}
    if name in saved:
        return Ceilings(**saved[name])
    if measure_copy is None:
        return Ceilings(name, None, None, None)
    result = Ceilings(name, None, None, round(measure_copy(), 2),
                      {"copy_tbps": "measured by tklab on this GPU (cupy copy)"})
    saved[name] = asdict(result)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(saved, indent=1))
    return result
