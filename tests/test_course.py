"""tklab.course: the results table reads any chapter's records; and the models chapters use beside it (occupancy,
the SASS main loop, numba readiness)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tklab import course, numba_compat, occupancy, recorded, sass


def _write(path: Path, entries: dict) -> None:
    path.write_text(json.dumps({k: {"values": v, "device": "NVIDIA H200", "date": "2026-12-01", "commit": "abc"}
                                for k, v in entries.items()}))


def test_comparison_rates_from_times() -> None:
    flops = 2 * 4096**3
    rec = course.comparison(10.0, 2.5, flops, label="k", ceiling_tflops=51.0, ceiling="fp32_simt")
    assert rec["tflops"] == pytest.approx(flops / 0.010 / 1e12)
    assert rec["library_tflops"] == pytest.approx(4 * rec["tflops"])
    assert rec["ceiling_tflops"] == 51.0 and rec["label"] == "k"
    assert "ceiling_tflops" not in course.comparison(1.0, 1.0, flops, label="k", ceiling_tflops=None,
                                                     ceiling="fp32_simt")
    with pytest.raises(ValueError):
        course.comparison(0.0, 1.0, flops, label="k", ceiling_tflops=None, ceiling="fp32_simt")


def test_results_table_reads_records(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "recorded.json"
    monkeypatch.setenv("TKLAB_RECORD_FILE", str(path))
    _write(path, {
        "ch02.tiled_fp32": {"tflops": 10.2, "library_tflops": 40.8, "ceiling_tflops": 51.0, "label": "tiled"},
        "ch05.mma_bf16": {"tflops": 354.0, "library_tflops": 708.0, "ceiling": "bf16_tensor", "label": "mma <b>"},
        "ch00.copy": {"tbps": 4.1},  # no FLOP rate: not a table row
    })
    table = course.results()
    by_key = {r.key: r for r in table.rows}
    assert "ch00.copy" not in by_key
    tiled = by_key["ch02.tiled_fp32"]
    assert tiled.of_library == pytest.approx(0.25) and tiled.of_ceiling == pytest.approx(0.2)
    assert tiled.kernel == "tiled" and "H200" in tiled.origin
    # no stored ceiling: read against the named kind of the known H200 ceilings
    assert by_key["ch05.mma_bf16"].of_ceiling == pytest.approx(0.5)
    # expected but missing records are listed as such, in chapter order
    assert by_key["ch01.naive_numba"].tflops is None and by_key["ch01.naive_numba"].origin == "not recorded yet"
    chapters = [r.chapter for r in table.rows]
    assert chapters == sorted(chapters)
    page = table._repr_html_()
    assert "mma &lt;b&gt;" in page and "mma <b>" not in page
    assert "| 02 | tiled | 10.20 | 20.0 % | 25.0 % |" in str(table)
    assert all(int(r.chapter) <= 2 for r in course.results(upto=2).rows)
    assert course.results(expected=[], upto=1).rows == []


def test_results_without_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TKLAB_RECORD_FILE", str(tmp_path / "missing.json"))
    assert str(course.results(expected=[])) == "no results recorded yet"
    assert len(course.results().rows) == len(course.EXPECTED)


def test_compare_shows_recorded_without_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "recorded.json"
    monkeypatch.setenv("TKLAB_RECORD_FILE", str(path))
    monkeypatch.setattr("tklab.run.gpu.available", lambda: False)
    _write(path, {"ch03.x": {"tflops": 30.0, "library_tflops": 50.0}})

    def never() -> None:
        raise AssertionError("must not run without a GPU")

    rec = course.compare("ch03.x", never, never, flops=1.0, label="x", verify=never)
    assert not rec.live and rec["tflops"] == 30.0
    assert course.compare("ch03.y", never, never, flops=1.0, label="y").values is None
    assert recorded.load("ch03.y").values is None


@pytest.mark.parametrize(("regs", "threads", "smem", "blocks", "limit"), [
    (32, 1024, 0, 2, "warps"),  # 32 warps per block, 64 per SM (registers would also allow exactly 2)
    (128, 256, 0, 2, "registers"),  # 128 × 32 × 8 warps = 32768 registers per block
    (255, 128, 0, 2, "registers"),  # 255 × 32 = 8160 → 8192 per warp (256-register chunks) × 4 warps
    (33, 256, 0, 6, "registers"),  # 33 × 32 = 1056 → 1280 per warp × 8 = 10240; 65536 / 10240 = 6.4
    (16, 32, 0, 32, "blocks"),  # tiny blocks: the 32-blocks-per-SM cap
    (32, 256, 100 * 1024, 2, "shared memory"),  # 100 KB + 1 KB reserve per block; 228 KB per SM
])
def test_occupancy(regs: int, threads: int, smem: int, blocks: int, limit: str) -> None:
    occ = occupancy.occupancy(regs, threads, smem)
    assert (occ.blocks_per_sm, occ.limit) == (blocks, limit)
    assert occ.blocks_per_sm == min(occ.by.values())
    assert occ.warps_per_sm == blocks * (threads // 32)
    assert occ.fraction == pytest.approx(occ.warps_per_sm / 64)


def test_occupancy_rejects_impossible() -> None:
    with pytest.raises(ValueError):
        occupancy.occupancy(256, 128)
    with pytest.raises(ValueError):
        occupancy.occupancy(32, 2048)


_SASS = """
        /*0000*/                   LDC R1, c[0x0][0x28] ;
        /*0010*/                   MOV R2, RZ ;
        /*0020*/                   LDS.128 R4, [R3] ;
        /*0030*/                   FFMA R2, R4, R5, R2 ;
        /*0040*/                   FFMA R2, R6, R7, R2 ;
        /*0050*/                   IADD3 R3, R3, 0x10, RZ ;
        /*0060*/               @P0 BRA 0x20 ;
        /*0070*/                   ISETP.NE.AND P1, PT, R9, RZ, PT ;
        /*0080*/                   IADD3 R9, R9, -0x1, RZ ;
        /*0090*/               @P1 BRA 0x70 ;
        /*00a0*/                   STG.E desc[UR4][R10.64], R2 ;
        /*00b0*/                   EXIT ;
        /*00c0*/                   BRA 0xc0;
"""


def test_main_loop_picks_the_loop_with_the_math() -> None:
    body = sass.main_loop(_SASS)
    assert body == ["LDS.128", "FFMA", "FFMA", "IADD3", "BRA"]
    assert sass.ffma_share(_SASS) == pytest.approx(2 / 5)
    assert sass.main_loop("        /*0000*/  EXIT ;") == []
    assert sass.ffma_share("") == 0.0


def test_main_loop_on_a_compiled_kernel() -> None:
    import tklab

    src = r"""
    extern "C" __global__ void dot(const float* a, const float* b, float* out, int n) {
      float acc = 0.f;
      for (int i = threadIdx.x; i < n; i += blockDim.x) acc += a[i] * b[i];
      out[threadIdx.x] = acc;
    }"""
    mod = tklab.compile(src, arch="sm_90a")
    body = sass.main_loop(mod.sass)
    assert "FFMA" in body and body[-1].startswith("BRA")
    assert 0 < sass.ffma_share(mod.sass) < 1


def test_verify_matmul_finds_the_first_wrong_element() -> None:
    import numpy as np

    rng = np.random.default_rng(0)
    a = rng.standard_normal((24, 40)).astype(np.float32)
    b = rng.standard_normal((40, 16)).astype(np.float32)
    c = a @ b
    assert course.verify_matmul(c, a, b) < 1e-5
    c[3, 5] = np.nan  # an element a kernel never wrote
    with pytest.raises(AssertionError, match=r"C\[3, 5\]"):
        course.verify_matmul(c, a, b)
    c = a @ b
    c[7, 1] += 1.0
    with pytest.raises(AssertionError, match=r"C\[7, 1\]"):
        course.verify_matmul(c, a, b)


def test_numba_gpu_ready_is_false_without_a_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess

    numba_compat.numba_gpu_ready.cache_clear()
    monkeypatch.setattr("tklab.run.gpu.available", lambda: False)

    def no_child(*args: object, **kwargs: object) -> None:
        raise AssertionError("no probe process without a GPU")

    monkeypatch.setattr(subprocess, "run", no_child)
    try:
        assert numba_compat.numba_gpu_ready() is False
    finally:
        numba_compat.numba_gpu_ready.cache_clear()


def test_numba_gpu_ready_reports_a_failed_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess

    numba_compat.numba_gpu_ready.cache_clear()
    monkeypatch.setattr("tklab.run.gpu.available", lambda: True)
    monkeypatch.setattr(subprocess, "run",
                        lambda *a, **k: subprocess.CompletedProcess(a, 1, "", "libNVVM cannot be found"))
    try:
        assert numba_compat.numba_gpu_ready() is False
    finally:
        numba_compat.numba_gpu_ready.cache_clear()
