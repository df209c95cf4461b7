"""Reading ncu's CSV (raw and details pages, any --print-units), on the samples in tests/data/ncu.

The samples in tests/data/ncu/handmade/ are MADE BY HAND in ncu's documented layout, not measured (see
tests/data/ncu/README.md); real H200 output lands in tests/data/ncu/h200/ and is checked at the end.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tklab.profile import parse
from tklab.profile.result import ProfileResult, read_here

DATA = Path(__file__).parent / "data" / "ncu"
HANDMADE = DATA / "handmade"
ROOT = Path(__file__).resolve().parent.parent


def _one(name: str, kernel: str | None = None) -> parse.KernelRecord:
    return parse.select(parse.parse_csv((HANDMADE / name).read_text()), kernel)


def test_raw_page_in_base_units() -> None:
    rec = _one("smem_fp32_raw_base.csv")
    assert (rec.id, rec.kernel, rec.grid, rec.block) == ("0", "smem_matmul", (128, 128, 1), (32, 32, 1))
    assert rec.metrics["gpu__time_duration.sum"] == pytest.approx(15_620_352e-9)
    assert rec.units["gpu__time_duration.sum"] == "second"
    assert rec.metrics["dram__bytes_read.sum"] == 402_653_184.0 and rec.units["dram__bytes_read.sum"] == "byte"
    assert rec.metrics["sm__cycles_elapsed.avg.per_second"] == pytest.approx(1_755_012_345.67)
    assert rec.metrics["device__attribute_display_name"] == "NVIDIA H200"  # text stays text
    assert rec.number("device__attribute_display_name") is None
    assert rec.metrics["l1tex__data_pipe_lsu_wavefronts_mem_shared.sum.pct_of_peak_sustained_elapsed"] == 87.04


def test_raw_page_with_scaled_units_and_console_chatter() -> None:
    text = (HANDMADE / "wgmma_raw_auto.csv").read_text()
    assert text.startswith("==PROF==")  # ncu's own lines around the table are skipped
    rec = _one("wgmma_raw_auto.csv")
    m = rec.metrics
    assert m["gpu__time_duration.sum"] == pytest.approx(198.5e-6)
    assert m["dram__bytes_read.sum"] == pytest.approx(125.83e6)
    assert m["lts__t_bytes.sum"] == pytest.approx(2.15e9)
    assert m["sm__cycles_elapsed.avg.per_second"] == pytest.approx(1.76e9)
    assert rec.units["sm__cycles_elapsed.avg.per_second"] == "cycle/second"
    assert m["sm__cycles_elapsed.avg"] == pytest.approx(349_360)
    assert m["smsp__pcsamp_warps_issue_stalled_wait"] == 12_100.0


def test_details_page() -> None:
    rec = _one("tiny_details.csv")
    assert rec.kernel == "mma_16x16x16" and rec.grid == (1, 1, 1) and rec.block == (32, 1, 1)
    assert rec.metrics["gpu__time_duration.sum"] == pytest.approx(3.14e-6)
    assert rec.metrics["dram__bytes_read.sum"] == pytest.approx(1540.0)
    assert rec.metrics["smsp__average_warp_latency_issue_stalled_long_scoreboard"] == 412.0


def test_two_launches_need_a_name() -> None:
    recs = parse.parse_csv((HANDMADE / "transpose_two_kernels_raw_base.csv").read_text())
    assert [r.kernel for r in recs] == ["fill_nan", "transpose"]
    assert "dram__bytes_write.sum" not in recs[0].metrics  # an empty cell is no value, not zero
    with pytest.raises(LookupError, match="2 launches.*fill_nan, transpose"):
        parse.select(recs)
    assert parse.select(recs, "transpose").id == "1"
    with pytest.raises(LookupError, match="no launch of 'gemm'.*fill_nan, transpose"):
        parse.select(recs, "gemm")


def test_select_matches_a_demangled_signature() -> None:
    recs = [parse.KernelRecord("0", "void gemm<128, 2>(const float *, float *, int)"),
            parse.KernelRecord("1", "void gemm_small<64>(float *)")]
    assert parse.select(recs, "gemm").id == "0"


@pytest.mark.parametrize(("value", "unit", "expected"), [
    (1.5, "msecond", (1.5e-3, "second")),
    (2.0, "usecond", (2.0e-6, "second")),
    (3.0, "Kbyte", (3000.0, "byte")),
    (1.0, "Kibyte", (1024.0, "byte")),
    (2.5, "Tbyte/second", (2.5e12, "byte/second")),
    (1.98, "cycle/nsecond", (1.98e9, "cycle/second")),
    (1.5, "Mhz", (1.5e6, "cycle/second")),
    (7.0, "Kwavefront", (7000.0, "wavefront")),
    (55.5, "%", (55.5, "%")),
    (64.0, "register/thread", (64.0, "register/thread")),
    (4.0, "furlong", (4.0, "furlong")),  # unknown units pass through unchanged
])
def test_units_become_base_units(value: float, unit: str, expected: tuple[float, str]) -> None:
    got = parse.to_base(value, unit)
    assert got[1] == expected[1] and got[0] == pytest.approx(expected[0])


def test_numbers_text_and_missing_values() -> None:
    text = ('"ID","Kernel Name","a__x.sum","a__y","a__z","a__w"\n'
            '"","","byte","","",""\n'
            '"0","k","1,234.5","n/a","(256, 1, 1)","-2.5e-3"\n')
    m = parse.parse_csv(text)[0].metrics
    assert m == {"a__x.sum": 1234.5, "a__z": "(256, 1, 1)", "a__w": -2.5e-3}


def test_not_ncu_output_is_refused() -> None:
    with pytest.raises(ValueError, match="not Nsight Compute CSV"):
        parse.parse_csv('"name","value"\n"x","1"\n')
    assert parse.parse_csv("==ERROR== ERR_NVGPUCTRPERM\n") == []


# ---- real samples, once bench/profile_samples.py has run on the H200 --------------------------------------
REAL = sorted((DATA / "h200").glob("*.csv"))


@pytest.mark.parametrize("path", REAL, ids=[p.stem for p in REAL])
def test_real_h200_samples_parse_and_match_the_recorded_profiles(path: Path) -> None:
    records = parse.parse_csv(path.read_text())
    assert len(records) == 1, "one profiled launch per sample"
    rec = records[0]
    assert rec.number("gpu__time_duration.sum") and rec.number("gpu__time_duration.sum") > 0
    stored = json.loads((ROOT / "bench" / "results" / "profiles.json").read_text())[path.stem]
    kept = {k: v for k, v in rec.metrics.items() if read_here(k) or k in stored.get("keep", [])}
    assert stored["metrics"] == kept  # the record keeps what the result reads; JSON keeps floats exactly
    result = ProfileResult.from_record(path.stem, stored)
    assert result.limiter.kind != "unknown", f"{path.stem}: the counters collected name no limiter"
