"""Re-measure a sample of the bank table under ncu on this GPU and compare with the table and the model."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tklab import banks

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench" / "probes"))


@pytest.mark.gpu
@pytest.mark.hopper
def test_sample_reproduces_table() -> None:
    import banks_probe as bp  # noqa: PLC0415 - bench/probes is not a package

    if bp.find_ncu() is None:
        pytest.skip("ncu (Nsight Compute) is not installed here")
    table = json.loads((ROOT / "bench" / "results" / "banks_h200.json").read_text())
    recorded = {(r["op"], r["width"], tuple(r["offsets"]), r["num"], r["trans"]): r for r in table["rows"]}
    sample = [p for p in bp.patterns() if p.key() in recorded][::12]  # ~60 launches, every group
    m = bp.measure(sample, budget_s=120)
    assert m.skipped == 0
    for p in m.patterns:
        row, rec = bp.summary(p), recorded[p.key()]
        assert (row["wavefronts"], row["conflicts"]) == (rec["wavefronts"], rec["conflicts"]), p.name
        assert banks.predict_row(row) == (row["wavefronts"], row["conflicts"]), p.name
