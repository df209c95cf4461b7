"""The reports of chapters 07-08's GPU runs, on made-up inputs (CPU): the progression table and ratios, the
records the notebooks show, and bench/ch07_ch08_gpu.py's summary, step filter and merge. The numbers here
are test data, not measurements."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest
from scripts import load_script

from tklab import gemm

ROOT = Path(__file__).resolve().parent.parent


def _script() -> ModuleType:
    return load_script(ROOT / "bench" / "ch07_ch08_gpu.py", "ch07_ch08_gpu")


def _progression(final_ratio: float) -> dict:
    rows = []
    for n, base in ((4096, 700.0), (8192, 670.0)):
        for r in range(3):
            for who, f in (("cuBLAS", 1.0), ("2_warp_specialised", 0.9), (gemm.FINAL, final_ratio)):
                x = base * f * (1 + 0.01 * r)
                rows.append({"n": n, "round": r, "who": who, "host_us": 20.0, "bench": x * 0.95, "graph": x,
                             "batched": x * 1.01})
    labels = {"cuBLAS": "cuBLAS bf16 (torch.matmul)", "2_warp_specialised": gemm.STEPS["2_warp_specialised"].label,
              gemm.FINAL: gemm.STEPS[gemm.FINAL].label}
    return {"sizes": [4096, 8192], "rounds": 3, "methods": list(gemm.METHODS), "rows": rows, "labels": labels}


def test_ratios_pair_each_round_with_cublas_of_the_same_round() -> None:
    p = _progression(1.05)
    assert gemm.ratios(p, gemm.FINAL, 4096, "graph") == pytest.approx([1.05] * 3)
    assert gemm.ratios(p, "2_warp_specialised", 8192, "bench") == pytest.approx([0.9] * 3)
    assert gemm.ratios(p, "nobody", 4096, "graph") == []


def test_table_has_a_row_per_contender_and_size() -> None:
    text = gemm.table(_progression(1.05))
    lines = text.splitlines()
    assert len(lines) == 2 + 3 * 2
    assert "1.050–1.050" in text and "0.900–0.900" in text and "| 4096 | 707 |" in text  # median of 700, 707, 714


def test_records_are_course_comparisons_at_4096() -> None:
    rec = gemm.records(_progression(1.05))
    assert set(rec) == {"2_warp_specialised", gemm.FINAL}
    r = rec[gemm.FINAL]
    assert r["tflops"] == pytest.approx(707 * 1.05) and r["library_tflops"] == pytest.approx(707)
    assert r["ceiling"] == "bf16_tensor" and "4096³ (graph)" in r["label"]


def _fake_run(final_ratio: float, cluster_ok: bool = True) -> dict:
    gemm_case = {"step": "2_warp_specialised", "shape": [128, 256, 64], "rel": 1e-3, "unwritten": 0,
                 "first_wrong": "", "ok": True}
    cluster_case = dict(gemm_case, step=gemm.FINAL, ok=cluster_ok, first_wrong="" if cluster_ok else "C[0, 0]")
    ring = {"rows": 16384, "cols": 8192, "rounds": 3, "stages": [1, 2], "gbps": [1000.0, 2000.0],
            "gbps_all": [[1000.0] * 3, [2000.0] * 3], "device_copy_gbps": 4000.0, "stage_kb": 16, "blocks": 132}
    ways = {"rows": 16384, "cols": 8192, "rounds": 3} | {f"{k}_gbps": 3000.0 for k in
                                                          ("per_thread", "cp_async", "tma", "device_copy")}

    def part(result: dict) -> dict:
        return {"status": "done", "seconds": 1.0, "result": result}

    ex = {"ch08_wgmma": {"passed": True, "run": "ok", "speed": {"ratio": 0.5, "target": 0.4}}}
    return {"commit": "abc", "sanitizers": {"memcheck": "done; ERROR SUMMARY: 0 errors"}, "parts": {
        "check_copy": part({"copy": [{"kernel": "tma", "shape": [64, 64], "ok": True}], "exercises": {}}),
        "check_gemm": part({"gemm": [gemm_case], "exercises": ex}),
        "check_cluster": part({"gemm": [cluster_case]}),
        "time_copy": part({"ways": ways, "ring": ring}),
        "time_gemm": part(_progression(final_ratio))}}


def test_summary_says_whether_the_goal_is_met_and_lists_failures() -> None:
    s = _script()
    met = s._summary(_fake_run(1.02), "abc", "NVIDIA H200")
    assert "goal" in met and "MET" in met and "failed: 0" in met and "exercise ch08_wgmma: passed=True" in met
    assert "ring (132 blocks, 16 KB stages): 1: 1000, 2: 2000; device copy 4000" in met
    missed = s._summary(_fake_run(0.97, cluster_ok=False), "abc", "NVIDIA H200")
    assert "not met" in missed and "FAIL" in missed and "failed: 1" in missed


def test_only_steps_whose_checks_passed_are_timed() -> None:
    s = _script()
    assert s._passed_steps(_fake_run(1.0)) == ["2_warp_specialised", gemm.FINAL]
    assert s._passed_steps(_fake_run(1.0, cluster_ok=False)) == ["2_warp_specialised"]
    hung = _fake_run(1.0)
    hung["parts"]["check_cluster"] = {"status": "TIMEOUT after 60 s (killed)", "seconds": 60, "result": None}
    assert gemm.FINAL not in s._passed_steps(hung)


def test_recorded_fragment_and_merge(tmp_path: Path) -> None:
    s = _script()
    rec = s._recorded(_fake_run(1.02), "NVIDIA H200", "abc")
    assert {"ch07.copy_ways", "ch07.ring_stages", "ch08.progression", f"ch08.{gemm.FINAL}"} <= set(rec)
    assert all(set(v) == {"values", "device", "date", "commit"} for v in rec.values())
    frag, target = tmp_path / "frag.json", tmp_path / "recorded.json"
    frag.write_text(json.dumps(rec))
    target.write_text(json.dumps({"ch06.old": {"values": {}, "device": "x", "date": "y", "commit": "z"}}))
    assert s.merge(frag, target) == sorted(rec)
    merged = json.loads(target.read_text())
    assert "ch06.old" in merged and merged["ch08.progression"]["values"]["sizes"] == [4096, 8192]
    frag.write_text(json.dumps({"ch08.x": {"tflops": 1}}))
    with pytest.raises(ValueError, match="not a recorded.json fragment"):
        s.merge(frag, target)
