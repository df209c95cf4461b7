"""The GPU measurements chapters 00-04 cite, in one command on an H100/H200 (about 3-5 minutes).

    PYTHONPATH=$PWD python3 bench/probes/chapters_probe.py [--skip notebooks,ncu,occupancy]

1. notebooks: runs chapters 00 and 04 with ``TKLAB_RECORD=1`` into a copy of ``bench/results/recorded.json``:
   chapter 00's bytes-in-flight sweep (vector add with 8, 16, 32, 64 bytes of loads in flight per thread,
   against a copy in the same run: Little's law, shown) and chapter 04's transposes, five interleaved
   rounds each (the run-to-run spread that padded vs swizzled falls within).
2. ncu: Nsight Compute counters the chapters quote: chapter 02's tiled kernel (shared-memory wavefronts per
   warp-wide FFMA, how busy the shared-memory pipe and the FMA pipe are) and chapter 04's naive and padded
   transposes (wavefronts per shared load instruction: the model says 32 and 1).
3. occupancy: ``tests/test_occupancy_gpu.py``, ``tklab.models.occupancy`` against the driver's own answer.

Everything lands in ``$OUT`` (``bench/results/`` when unset): ``recorded.json`` (copy it over
``bench/results/recorded.json``), ``ncu_chapters_h200.json`` (copy it to ``bench/results/``), the executed
notebooks, logs, and ``summary.txt``, which is also printed.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tklab import recorded  # noqa: E402

OUT = Path(os.environ.get("OUT") or ROOT / "bench" / "results")

NOTEBOOKS = ("00_the_machine.ipynb", "04_banks_swizzling.ipynb")

# A kernel launched once after a warm-up, for ncu to profile: (name, kernel regex, Python source, metrics).
_TILED = """
import cupy as cp, tklab
from tklab import gpu
k = tklab.compile(open("solutions/ch02_smem_tiling/ch02_smem_tiling.cu").read(), arch=gpu.arch())["smem_matmul"]
n = 2048
a, b = cp.random.random((n, n), dtype=cp.float32), cp.random.random((n, n), dtype=cp.float32)
c = cp.empty((n, n), cp.float32)
for _ in range(2):
    k((n // 32, n // 32), (32, 32), (a, b, c, n, n, n))
cp.cuda.Device().synchronize()
"""
_TRANSPOSE = """
import cupy as cp, json, tklab
from tklab import gpu
nb = json.load(open("notebooks/04_banks_swizzling.ipynb"))
src = next("".join(c["source"]) for c in nb["cells"] if "TRANSPOSE = r" in "".join(c["source"]))
scope = {}
exec(src.split("naive_padded = ")[0], scope)
mod = tklab.compile(scope["TRANSPOSE"], arch=gpu.arch())
n = 4096
x = cp.random.random((n, n), dtype=cp.float32)
out = cp.empty((n, n), cp.float32)
for name in ("transpose_naive", "transpose_padded"):
    for _ in range(2):
        mod[name]((n // 32, n // 32), (32, 8), (x, out, n, n))
cp.cuda.Device().synchronize()
"""
SHARED = ["l1tex__data_pipe_lsu_wavefronts_mem_shared.sum", "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
          "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum", "smsp__inst_executed_op_shared_ld.sum",
          "smsp__inst_executed_op_shared_st.sum"]
PROFILES = [
    ("ch02.smem_matmul", "smem_matmul", _TILED,
     [*SHARED, "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum",
      "l1tex__data_pipe_lsu_wavefronts_mem_shared.sum.pct_of_peak_sustained_elapsed",
      "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active",
      "sm__warps_active.avg.pct_of_peak_sustained_active"]),
    ("ch04.transpose", "transpose_", _TRANSPOSE, SHARED),
]


def run_notebooks(log: list[str]) -> None:
    import nbformat
    from nbclient import NotebookClient

    record = OUT / "recorded.json"
    if record.resolve() != (ROOT / "bench" / "results" / "recorded.json").resolve():
        shutil.copy(ROOT / "bench" / "results" / "recorded.json", record)
    os.environ.update(TKLAB_RECORD="1", TKLAB_RECORD_FILE=str(record), TKLAB_COMMIT=recorded.commit())
    for name in NOTEBOOKS:
        start = time.perf_counter()
        nb = nbformat.read(ROOT / "notebooks" / name, as_version=4)
        try:
            NotebookClient(nb, timeout=600, kernel_name="python3",
                           resources={"metadata": {"path": str(ROOT / "notebooks")}}).execute()
            verdict = "ran"
        except Exception as e:  # noqa: BLE001 - a failing cell is reported, the other steps still run
            verdict = f"FAILED: {type(e).__name__}: {str(e).splitlines()[-1][:300] if str(e) else ''}"
        nbformat.write(nb, OUT / f"executed_{name}")
        log.append(f"notebook {name}: {verdict} in {time.perf_counter() - start:.0f} s")
    data = json.loads(record.read_text())
    for key in ("ch00.bytes_in_flight", "ch04.transpose"):
        entry = data.get(key)
        log.append(f"  {key}: " + (json.dumps(entry["values"], default=float) if entry else "not recorded"))


def _ncu() -> str:
    found = shutil.which("ncu") or next((str(p) for p in (Path("/usr/local/cuda/bin/ncu"),) if p.exists()), None)
    if not found:
        raise RuntimeError("ncu not found on PATH or in /usr/local/cuda/bin")
    return found


def run_ncu(log: list[str]) -> None:
    ncu = _ncu()
    result: dict = {"what": "Nsight Compute counters the chapters quote (bench/probes/chapters_probe.py)",
                    "device": _device(), "commit": recorded.commit(),
                    "date": dt.datetime.now(dt.timezone.utc).isoformat(),
                    "kernels": {}}
    for key, regex, source, metrics in PROFILES:
        cmd = [ncu, "--csv", "--metrics", ",".join(metrics), "--kernel-name", f"regex:{regex}",
               "--launch-skip", "1", "--launch-count", "1" if key.startswith("ch02") else "3",
               sys.executable, "-c", source]
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
        (OUT / f"ncu_{key}.log").write_text(done.stdout + done.stderr)
        rows = list(csv.DictReader(line for line in done.stdout.splitlines() if line.startswith('"')))
        kernels: dict[str, dict[str, float]] = {}
        for row in rows:
            value = row.get("Metric Value", "").replace(",", "")
            try:
                kernels.setdefault(row["Kernel Name"], {})[row["Metric Name"]] = float(value)
            except (KeyError, ValueError):
                continue
        if not kernels:
            log.append(f"ncu {key}: no counters (exit {done.returncode}); see ncu_{key}.log")
            continue
        for name, m in kernels.items():
            derived = {}
            ffma = m.get("smsp__sass_thread_inst_executed_op_ffma_pred_on.sum")
            if ffma:
                derived["shared_wavefronts_per_warp_ffma"] = m["l1tex__data_pipe_lsu_wavefronts_mem_shared.sum"] / (
                    ffma / 32)
            lds = m.get("smsp__inst_executed_op_shared_ld.sum")
            if lds:
                derived["load_wavefronts_per_shared_load"] = m[
                    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum"] / lds
            result["kernels"][f"{key}:{name.split('(')[0]}"] = {"metrics": m, "derived": derived}
            log.append(f"ncu {key} {name.split('(')[0]}: " + ", ".join(f"{k}={v:.3g}" for k, v in derived.items())
                       + "".join(f", {k.split('__')[1].split('.')[0]}={v:.3g}%" for k, v in m.items() if "pct" in k))
    (OUT / "ncu_chapters_h200.json").write_text(json.dumps(result, indent=1) + "\n")


def _device() -> str:
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,clocks.max.sm", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def run_occupancy(log: list[str]) -> None:
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "gpu",
                           "tests/test_occupancy_gpu.py"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    (OUT / "occupancy_gpu.log").write_text(done.stdout + done.stderr)
    log.append("occupancy vs the driver: " + (done.stdout.strip().splitlines() or ["no output"])[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--skip", default="", help="comma-separated: notebooks, ncu, occupancy")
    skip = set(filter(None, ap.parse_args().skip.split(",")))
    OUT.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now().isoformat(timespec="seconds")
    log = [f"chapters_probe on {_device()}, commit {recorded.commit()}, {now}"]
    for name, step in (("occupancy", run_occupancy), ("ncu", run_ncu), ("notebooks", run_notebooks)):
        if name in skip:
            continue
        start = time.perf_counter()
        try:
            step(log)
        except Exception as e:  # noqa: BLE001 - report and go on: one command, every result it can get
            log.append(f"{name}: FAILED: {type(e).__name__}: {e}")
        log.append(f"({name}: {time.perf_counter() - start:.0f} s)")
    summary = "\n".join(log)
    (OUT / "summary.txt").write_text(summary + "\n")
    print(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
