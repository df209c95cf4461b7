"""tklab.profile without a GPU: the messages (no GPU, no ncu, no counter permission, timeout, a child that
cannot re-create the launch), recorded profiles for chapters, and the whole ncu plumbing driven through a
stand-in ``ncu`` executable.

The stand-in (written below) is a small Python script: it answers ``--version``/``--query-metrics``/
``--list-sections``, logs the profile command it was given, and then, as told by ``FAKE_NCU_MODE``, writes a
report, reports ERR_NVGPUCTRPERM as ncu does, hangs, or really runs the child process it was asked to
profile. ``--import`` prints a HAND-MADE sample from tests/data/ncu/handmade (ncu's layout, invented numbers).
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import tklab
from tklab import gpu, launch
from tklab.profile import Missing, ProfileResult, ProfileUnavailable, ncu, parse, store

HANDMADE = Path(__file__).parent / "data" / "ncu" / "handmade"
ROOT = Path(__file__).resolve().parent.parent

FAKE_NCU = r'''#!{python}
import json, os, subprocess, sys, time
args = sys.argv[1:]
if args == ["--version"]:
    print("NVIDIA (R) Nsight Compute Command Line Profiler\nCopyright (c) 2018-2025 NVIDIA Corporation")
    print("Version 2025.3.1.0 (build 36398880) (public-release)")
    sys.exit(0)
if args == ["--query-metrics"] or args == ["--list-sections"]:
    listing = os.environ.get("FAKE_NCU_LISTING" if args == ["--query-metrics"] else "FAKE_NCU_SECTIONS")
    if listing:  # else it says nothing: tklab then asks only for metrics known to work
        sys.stdout.write(open(listing).read())
    sys.exit(0)
if "--import" in args:
    sys.stdout.write(open(os.environ["FAKE_NCU_CSV"]).read())
    sys.exit(0)
child = args[args.index("--force-overwrite") + 1:]
recipe_dir = child[-1]
with open(os.environ["FAKE_NCU_LOG"], "a") as log:
    log.write(json.dumps({{"argv": args, "recipe": os.path.exists(os.path.join(recipe_dir, "recipe.json")),
                          "cubin": os.path.exists(os.path.join(recipe_dir, "kernel.cubin")),
                          "env_lc_all": os.environ.get("LC_ALL")}}) + "\n")
mode = os.environ.get("FAKE_NCU_MODE", "ok")
print("==PROF== Connected to process 4242")
if mode == "ok":
    open(args[args.index("--export") + 1], "wb").write(b"NVIDIA Nsight Compute report stand-in")
    print("==PROF== Report: profile.ncu-rep")
elif mode == "badmetric" and "sm__pipe_tensor_cycles_active" in args[args.index("--metrics") + 1]:
    print("==ERROR== Failed to find metric regex:^sm__pipe_tensor_cycles_active\\.(sum|avg|min|max)$")
    sys.exit(1)
elif mode == "metricerror" and "dram__bytes_read.sum" in args[args.index("--metrics") + 1]:
    print("==ERROR== The metric list is not valid for this device")
    sys.exit(1)
elif mode in ("badmetric", "metricerror"):
    open(args[args.index("--export") + 1], "wb").write(b"report")
elif mode == "perm":
    print("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance "
          "Counters on the target device 0. For instructions on enabling permissions and to get more "
          "information see https://developer.nvidia.com/ERR_NVGPUCTRPERM")
    sys.exit(1)
elif mode == "sleep":
    open(os.environ["FAKE_NCU_LOG"] + ".pid", "w").write(str(os.getpid()))
    time.sleep(60)
elif mode == "child":
    code = subprocess.call(child)
    if code:
        print("==WARNING== No kernels were profiled.")
    sys.exit(0)
'''


@pytest.fixture
def fake_ncu(tmp_path, monkeypatch):
    exe = tmp_path / "bin" / "ncu"
    exe.parent.mkdir()
    exe.write_text(FAKE_NCU.format(python=sys.executable))
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    log = tmp_path / "ncu_log.jsonl"
    monkeypatch.setenv("TKLAB_NCU", str(exe))
    monkeypatch.setenv("FAKE_NCU_LOG", str(log))
    monkeypatch.setenv("FAKE_NCU_CSV", str(HANDMADE / "smem_fp32_raw_base.csv"))
    monkeypatch.setenv("TKLAB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("TKLAB_PROFILE_FILE", str(tmp_path / "profiles.json"))
    monkeypatch.delenv("TKLAB_RECORD", raising=False)
    ncu.version.cache_clear()

    def calls() -> list[dict]:
        return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

    return calls


@pytest.fixture
def on_gpu(monkeypatch):
    """This machine pretends to have an H200: only the checks before any driver call see it."""
    monkeypatch.setattr(gpu, "available", lambda: True)
    monkeypatch.setattr(gpu, "name", lambda: "NVIDIA H200")


@pytest.fixture(scope="module")
def kernel() -> tklab.Kernel:
    src = 'extern "C" __global__ void smem_matmul(int n, float a) { if (n < 0) asm volatile("trap;"); }'
    return tklab.compile(src, arch="sm_90a", name="profile_run_test.cu")["smem_matmul"]


def _run(kernel: tklab.Kernel) -> launch.Prepared:
    """A prepared launch with scalar arguments only (nothing to copy from device memory)."""
    args = (np.int32(4096), np.float32(1.0))
    return launch.Prepared(kernel.display_name, None, (128, 128, 1), (32, 32, 1), 0, 0,
                           [a.tobytes() for a in args], args, kernel)


def _recorded_sample(key: str) -> ProfileResult:
    rec = parse.parse_csv((HANDMADE / "smem_fp32_raw_base.csv").read_text())[0]
    r = ProfileResult(kernel="smem_matmul", metrics=rec.metrics, device="NVIDIA H200", flops=2.0 * 4096**3,
                      date="2026-12-01", commit="abc1234", ncu_version="2025.3.1.0")
    store.save(key, r)
    return r


# ---- no GPU, no ncu ----------------------------------------------------------------------------------------
def test_without_a_gpu_the_error_says_so(monkeypatch) -> None:
    monkeypatch.setattr(gpu, "available", lambda: False)
    with pytest.raises(ProfileUnavailable, match="needs an NVIDIA GPU, and this machine has none") as e:
        tklab.profile(None)
    assert e.value.reason == "no-gpu"
    assert e.value._render_traceback_() == [f"ProfileUnavailable: {e.value}"]  # no stack in a notebook


def test_without_ncu_the_error_says_where_to_get_it(monkeypatch, on_gpu, tmp_path) -> None:
    monkeypatch.setenv("TKLAB_NCU", str(tmp_path / "nowhere" / "ncu"))
    with pytest.raises(ProfileUnavailable, match="TKLAB_NCU=.*nowhere/ncu is not an executable file") as e:
        tklab.profile(None)
    assert e.value.reason == "no-ncu"
    monkeypatch.delenv("TKLAB_NCU")
    monkeypatch.setenv("PATH", str(tmp_path))
    for var in ("CUDA_HOME", "CUDA_PATH"):
        monkeypatch.delenv(var, raising=False)
    if ncu.find_ncu() is not None:
        pytest.skip(f"this machine has ncu at {ncu.find_ncu()}")
    with pytest.raises(ProfileUnavailable, match=r"ncu\) is not installed here.*TKLAB_NCU=/path/to/ncu"):
        tklab.profile(None)


def test_find_ncu_looks_on_path(monkeypatch, tmp_path) -> None:
    exe = tmp_path / "ncu"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    monkeypatch.delenv("TKLAB_NCU", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert ncu.find_ncu() == str(exe)


def test_a_chapter_cell_without_gpu_shows_the_recorded_profile(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("TKLAB_PROFILE_FILE", str(tmp_path / "profiles.json"))
    monkeypatch.setattr(gpu, "available", lambda: False)
    saved = _recorded_sample("ch02.tiled_fp32")
    shown = tklab.profile(None, key="ch02.tiled_fp32")
    assert isinstance(shown, ProfileResult) and not shown.live
    assert shown.metrics == saved.to_record()["metrics"] and shown.limiter == saved.limiter
    assert shown.origin == ("recorded on NVIDIA H200, 2026-12-01, commit abc1234, ncu 2025.3.1.0 "
                            "(this machine has no GPU)")
    missing = tklab.profile(None, key="ch03.regblock_float4")
    assert isinstance(missing, Missing)
    assert "ch03.regblock_float4" in str(missing) and "needs an NVIDIA GPU" in str(missing)
    assert "run this notebook on a GPU" in missing._repr_html_()


def test_bad_arguments_are_named(on_gpu, fake_ncu, kernel) -> None:
    with pytest.raises(ValueError, match="flops must be positive"):
        tklab.profile(_run(kernel), flops=0)
    with pytest.raises(ValueError, match="peak must be"):
        tklab.profile(_run(kernel), peak="fp64")
    with pytest.raises(TypeError, match=r"kernel.prepare\(grid, block, args\)\), not a function"):
        tklab.profile(lambda: None)
    with pytest.raises(ValueError, match="nothing to profile"):
        tklab.profile(None)


# ---- through a stand-in ncu --------------------------------------------------------------------------------
def test_profile_end_to_end_through_ncu(monkeypatch, on_gpu, fake_ncu, kernel, tmp_path) -> None:
    monkeypatch.setenv("TKLAB_RECORD", "1")
    report = tmp_path / "kept" / "smem.ncu-rep"
    r = tklab.profile(_run(kernel), flops=2.0 * 4096**3, key="ch02.tiled_fp32", label="tiled", report=report)
    assert isinstance(r, ProfileResult) and r.live and r.device == "NVIDIA H200"
    assert (r.kernel, r.label, r.grid, r.block, r.peak) == ("smem_matmul", "tiled", (128, 128, 1), (32, 32, 1),
                                                            "fp32_simt")
    assert r.ncu_version == "2025.3.1.0" and r.limiter.kind == "shared"
    assert r.raw_csv == (HANDMADE / "smem_fp32_raw_base.csv").read_text()
    assert report.read_bytes() == b"NVIDIA Nsight Compute report stand-in" and r.report_path == str(report)
    (call,) = fake_ncu()
    argv = call["argv"]
    assert call["recipe"] and call["cubin"] and call["env_lc_all"] == "C"
    for flag, value in (("--clock-control", "none"), ("--launch-skip", "2"), ("--launch-count", "1"),
                        ("--kernel-name", "regex:^smem_matmul$"), ("--kernel-name-base", "mangled")):
        assert argv[argv.index(flag) + 1] == value
    child = argv[argv.index("--force-overwrite") + 1:]
    assert child[:3] == [sys.executable, "-m", "tklab.profile.child"]
    assert not Path(child[3]).exists()  # the recipe folder (with its copy of the arguments) is gone
    # --query-metrics said nothing here, so only the metrics known to work were requested.
    assert argv[argv.index("--metrics") + 1].split(",") == list(ncu.KNOWN_GOOD)
    # Recorded for the chapter, with the metrics as ncu reported them.
    again = store.load("ch02.tiled_fp32")
    assert again is not None and again.metrics == r.to_record()["metrics"] and again.commit == r.commit
    assert again.limiter == r.limiter


def _listing(tmp_path: Path) -> None:
    """What `ncu --query-metrics` and `--list-sections` print on a GPU that has every metric tklab asks for."""
    bases = sorted({m.split(".", 1)[0] for m in ncu.WANTED_METRICS} | {f"pad__metric_{i}" for i in range(50)})
    (tmp_path / "metrics.txt").write_text("Metric Name   Metric Description\n"
                                          + "".join(f"{b}   # something\n" for b in bases))
    (tmp_path / "sections.txt").write_text("Identifier   Display Name   Enabled   Filename\n"
                                           + "".join(f"{x}   {x}   yes   {x}.section\n" for x in ncu.WANTED_SECTIONS))


def test_a_metric_ncu_refuses_is_dropped_and_the_rest_kept(monkeypatch, on_gpu, fake_ncu, kernel, tmp_path) -> None:
    _listing(tmp_path)
    monkeypatch.setenv("FAKE_NCU_LISTING", str(tmp_path / "metrics.txt"))
    monkeypatch.setenv("FAKE_NCU_SECTIONS", str(tmp_path / "sections.txt"))
    monkeypatch.setenv("FAKE_NCU_MODE", "badmetric")
    r = tklab.profile(_run(kernel))
    assert r.live and r.limiter.kind == "shared"
    first, second = (c["argv"] for c in fake_ncu())
    asked = [a["argv"][a["argv"].index("--metrics") + 1].split(",") for a in fake_ncu()]
    assert asked[0] == list(ncu.WANTED_METRICS)
    assert asked[1] == [m for m in ncu.WANTED_METRICS if not m.startswith("sm__pipe_tensor_cycles_active.")]
    sections = [first[i + 1] for i, a in enumerate(first) if a == "--section"]
    assert sections == sorted(ncu.WANTED_SECTIONS) and second.count("--section") == len(sections)
    # Both listings were cached: a second profile asks ncu only for its version once per process.
    assert json.loads((tmp_path / "cache" / "ncu_queries.json").read_text()).keys() == {
        f"metrics|{ncu.find_ncu()}|2025.3.1.0|NVIDIA H200", f"sections|{ncu.find_ncu()}|2025.3.1.0"}


def test_other_metric_complaints_fall_back_to_the_known_good_set(monkeypatch, on_gpu, fake_ncu, kernel,
                                                                   tmp_path) -> None:
    _listing(tmp_path)
    monkeypatch.setenv("FAKE_NCU_LISTING", str(tmp_path / "metrics.txt"))
    monkeypatch.setenv("FAKE_NCU_MODE", "metricerror")
    tklab.profile(_run(kernel))
    asked = [c["argv"][c["argv"].index("--metrics") + 1].split(",") for c in fake_ncu()]
    assert len(asked) == 2 and asked[1] == list(ncu.KNOWN_GOOD)


def test_nothing_is_recorded_unless_asked(on_gpu, fake_ncu, kernel) -> None:
    tklab.profile(_run(kernel), key="ch02.tiled_fp32")
    assert store.load("ch02.tiled_fp32") is None


def test_counter_permission_error(monkeypatch, on_gpu, fake_ncu, kernel) -> None:
    monkeypatch.setenv("FAKE_NCU_MODE", "perm")
    with pytest.raises(ProfileUnavailable, match="NVreg_RestrictProfilingToAdminUsers=0") as e:
        tklab.profile(_run(kernel))
    assert e.value.reason == "permission" and "ERR_NVGPUCTRPERM" in str(e.value)
    _recorded_sample("ch02.tiled_fp32")
    shown = tklab.profile(_run(kernel), key="ch02.tiled_fp32")
    assert isinstance(shown, ProfileResult) and not shown.live
    assert shown.origin.endswith("(GPU counters may not be read here)")


def test_a_profile_that_hangs_is_stopped(monkeypatch, on_gpu, fake_ncu, kernel, tmp_path) -> None:
    monkeypatch.setenv("FAKE_NCU_MODE", "sleep")
    start = time.monotonic()
    with pytest.raises(ProfileUnavailable, match="did not finish within 2 s") as e:
        tklab.profile(_run(kernel), timeout=2)
    assert e.value.reason == "timeout" and time.monotonic() - start < 30
    pid = int((tmp_path / "ncu_log.jsonl.pid").read_text())
    with pytest.raises(ProcessLookupError):  # the stand-in ncu was killed with its process group
        for _ in range(50):
            os.kill(pid, 0)
            time.sleep(0.1)


def test_a_child_that_cannot_recreate_the_launch_is_reported(monkeypatch, on_gpu, fake_ncu, kernel) -> None:
    """The stand-in really runs the child; on this machine it has no GPU, so re-creating the launch fails."""
    monkeypatch.setenv("FAKE_NCU_MODE", "child")
    with pytest.raises(ProfileUnavailable, match="re-creating the launch in the profiled process failed: "
                                                 "CudaError: No CUDA GPU") as e:
        tklab.profile(_run(kernel))
    assert e.value.reason == "failed"


def test_child_usage() -> None:
    done = subprocess.run([sys.executable, "-m", "tklab.profile.child"], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert done.returncode == 2 and "usage: python -m tklab.profile.child RECIPE_DIR" in done.stderr


# ---- what to ask ncu for ---------------------------------------------------------------------------------
def test_metrics_are_requested_only_when_ncu_knows_them() -> None:
    known = {"gpu__time_duration", "dram__bytes_read", "smsp__average_warps_issue_stalled_barrier_per_issue_active",
             "my__metric"}
    got = ncu.metrics_to_request(known, extra=["dram__bytes_read.sum", "my__metric.sum"])
    assert got == ["gpu__time_duration.sum", "dram__bytes_read.sum",
                   "smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio", "my__metric.sum"]
    with pytest.raises(ValueError, match="no metric 'my__metrc.sum'"):  # a misspelt name the user asked for
        ncu.metrics_to_request(known, extra=["my__metrc.sum"])
    assert ncu.metrics_to_request(set(), extra=["my__metric.sum"]) == [*ncu.KNOWN_GOOD, "my__metric.sum"]


def test_metrics_asked_for_by_name_are_collected_checked_and_kept(monkeypatch, on_gpu, fake_ncu, kernel,
                                                                  tmp_path) -> None:
    _listing(tmp_path)
    monkeypatch.setenv("FAKE_NCU_LISTING", str(tmp_path / "metrics.txt"))
    with pytest.raises(ValueError, match="no metric 'pad__metric_x.sum'"):
        tklab.profile(_run(kernel), metrics=["pad__metric_x.sum"])
    assert fake_ncu() == []  # refused before anything ran
    r = tklab.profile(_run(kernel), metrics=["pad__metric_7.sum"])
    (call,) = fake_ncu()
    assert call["argv"][call["argv"].index("--metrics") + 1].split(",")[-1] == "pad__metric_7.sum"
    assert r.keep == ("pad__metric_7.sum",)


def test_reading_ncu_listings() -> None:
    metrics = ("Device NVIDIA H200 (GH100)\n------------------------------------------------------------\n"
               "Metric Name                                Metric Description\n"
               "dram__bytes_read                           # of bytes read from DRAM\n"
               "sm__pipe_tensor_op_gmma_cycles_active      # of cycles where the GMMA pipe was active\n")
    assert ncu.parse_metric_list(metrics) == {"dram__bytes_read", "sm__pipe_tensor_op_gmma_cycles_active"}
    sections = ("Identifier               Display Name           Enabled  Filename\n"
                "ComputeWorkloadAnalysis  Compute Workload Analysis  yes  .../ComputeWorkloadAnalysis.section\n"
                "WarpStateStats           Warp State Statistics  yes  .../WarpStateStats.section\n")
    assert {"ComputeWorkloadAnalysis", "WarpStateStats"} <= ncu.parse_section_list(sections)


def test_classify_ncu_failures() -> None:
    assert ncu.classify(0, "==PROF== Disconnected from process 1") is None
    assert ncu.classify(0, "==WARNING== No kernels were profiled.").reason == "failed"
    bad = ncu.classify(9, "==ERROR== Failed to profile kernel")
    assert bad.reason == "failed" and "exit 9" in str(bad) and "Failed to profile kernel" in str(bad)
