"""bench/wgmma_descriptors.py's finding on this toolchain (compiled for sm_90a, no GPU): descriptors built from the
tile for every K-slice cost uniform instructions before every HGMMA, two of them UMOVs of the constant high word;
64-bit bases built once before the loop cost none of those UMOVs and a fraction of the uniform work. In chapters 10
and 11's own loops ptxas rebuilt them anyway and the gain was a few instructions (docs/ROADMAP.md, chapter 11)."""

from __future__ import annotations

from pathlib import Path

import pytest
from scripts import load_script

pytestmark = pytest.mark.nvrtc
BENCH = load_script(Path(__file__).resolve().parent.parent / "bench" / "wgmma_descriptors.py", "wgmma_descriptors")


def test_bases_built_once_spare_the_uniform_work_per_hgmma() -> None:
    r = BENCH.measure()
    library, once = r["library (per slice, in mma_ABt)"], r["the bases once, before the loop"]
    assert library["hgmma"] and once["hgmma"]
    assert library["umov"] >= library["hgmma"]  # the high words put back before the products
    assert once["umov"] == 0
    assert once["uniform"] / once["hgmma"] < library["uniform"] / library["hgmma"] / 2
