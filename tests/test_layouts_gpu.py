"""Re-run the fragment / TMA probes on this GPU: the outputs must equal the committed table bit for bit."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench" / "probes"))


@pytest.fixture(scope="module")
def table() -> dict:
    return json.loads((ROOT / "bench" / "results" / "layouts_h200.json").read_text())


@pytest.mark.gpu
@pytest.mark.hopper
def test_mma_reproduces(table: dict) -> None:
    import layouts_probe as lp

    assert lp.run_mma() == table["mma"]


@pytest.mark.gpu
@pytest.mark.hopper
def test_ldmatrix_stmatrix_reproduce(table: dict) -> None:
    import layouts_probe as lp

    lds, sts = lp.run_matrix()
    assert lds == table["ldmatrix"] and sts == table["stmatrix"]


@pytest.mark.gpu
@pytest.mark.hopper
def test_wgmma_reproduces(table: dict) -> None:
    import layouts_probe as lp

    assert lp.run_wgmma() == table["wgmma"]


@pytest.mark.gpu
@pytest.mark.hopper
def test_tma_reproduces(table: dict) -> None:
    import layouts_probe as lp

    assert lp.run_tma() == table["tma"]
