"""Profile each chapter's main kernel with ``tklab.profile`` (Nsight Compute) and keep what ncu said.

    python bench/profile_samples.py                 # on a GPU box with ncu; also run by `make gpu-check`
    python bench/profile_samples.py --only ch02.tiled_fp32,ch08.gemm_wgmma

For every kernel below: the profile's raw CSV (``ncu --import ... --csv --page raw --print-units base``,
exactly as printed) goes to ``<out>/ncu/<key>.csv`` (committed as ``tests/data/ncu/h200/``, where the parser
tests read it), the parsed profile to ``<out>/profiles.json`` (committed as ``bench/results/profiles.json``:
what the chapters show without a GPU), and a summary to ``<out>/profile_samples_<date>.md``. ``<out>`` is
``$OUT`` if set (then copy the three into the repository), else the repository itself.

Inputs are fresh random data at each chapter's benchmark size; kernels are the reference solutions (and
the chapter 04/05 kernels written in their notebooks, read from the notebook's string constants). Without
ncu, or without permission to read counters, it says so and exits 0: that is the machine, not a bug.
"""

from __future__ import annotations

import argparse
import ast
import datetime as dt
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

import tklab  # noqa: E402
from tklab import specs  # noqa: E402
from tklab.profile import ProfileUnavailable, ncu, unavailable  # noqa: E402

N = 4096


def _notebook_strings(notebook: str) -> dict[str, str]:
    """String constants assigned at the top level of a notebook's code cells (kernel sources)."""
    cells = json.loads((ROOT / "notebooks" / notebook).read_text())["cells"]
    found: dict[str, str] = {}
    for cell in cells:
        if cell["cell_type"] != "code":
            continue
        try:
            tree = ast.parse("".join(cell["source"]))
        except SyntaxError:  # %%tk cells and other magics
            continue
        for node in tree.body:
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and \
                    isinstance(node.value.value, str):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        found[target.id] = node.value.value
    return found


def _spec_launch(exercise: str, dims: dict[str, int] | None = None) -> Any:
    """The reference solution of an exercise, prepared at its benchmark size (as the exercise check runs it)."""
    import cupy as cp

    spec = specs.get(exercise)
    dims = dims or (spec.bench.dims if spec.bench is not None else spec.cases[0])
    mod = tklab.compile((ROOT / spec.solution).read_text(), arch=tklab.run.gpu.arch(), name=Path(spec.solution).name,
                        options=spec.options)
    arrays = {k: cp.asarray(v) for k, v in spec.inputs(np.random.default_rng(19), dims).items()}
    for name, (shape, dtype) in spec.outputs(dims).items():
        arrays[name] = cp.full(shape, np.nan, dtype=dtype)
    shape = spec.launch(dims)
    return mod[spec.kernel].prepare(shape.grid, shape.block, spec.args(arrays, dims), shared_mem=shape.shared_mem)


def _bf16(shape: tuple[int, int]) -> Any:
    from tklab import course

    return course.bf16_random(shape)


def _transpose_naive() -> Any:
    import cupy as cp

    src = _notebook_strings("04_banks_swizzling.ipynb")["TRANSPOSE"]
    k = tklab.compile(src, arch=tklab.run.gpu.arch(), name="transpose.cu")["transpose_naive"]
    m = n = 8192
    x = cp.random.default_rng(4).standard_normal((m, n), dtype=cp.float32)
    out = cp.empty((n, m), cp.float32)
    return k.prepare(((n + 31) // 32, (m + 31) // 32), (32, 8), (x, out, m, n))


def _mma_gemm() -> Any:
    import cupy as cp

    strings = _notebook_strings("05_tensor_cores_mma.ipynb")
    k = tklab.compile(strings["PTX"] + strings["GEMM"], arch=tklab.run.gpu.arch(), name="gemm_mma.cu")["gemm_mma"]
    a, b, c = _bf16((N, N)), _bf16((N, N)), cp.full((N, N), 0xFFFF, cp.uint16)
    return k.prepare((N // 128, N // 128), 128, (a, b, c, N, N, N))


def _gemm_mma_tiles() -> Any:
    import cupy as cp

    sys.path.insert(0, str(ROOT / "bench"))
    import gemm_mma  # bench/gemm_mma.py: the solution's launch shape

    a, b, c = _bf16((N, N)), _bf16((N, N)), cp.full((N, N), 0xFFFF, cp.uint16)
    return gemm_mma.Gemm({}).launcher(a, b, c)


def _gemm_wgmma() -> Any:
    import cupy as cp

    from tklab import gemm  # the chapter-08 kernels and their launches

    a, b, c = _bf16((N, N)), _bf16((N, N)), cp.full((N, N), 0xFFFF, cp.uint16)
    return gemm.prepare(a, b, c, step="2_warp_specialised")


def _flash(kernel: str) -> Any:
    """The chapter 09/10 FlashAttention forward at the chapters' profile size: d=128, N=8192, 2 × 16 heads."""
    import torch

    from tklab import attention

    q, k, v = (torch.randn(2, 16, 8192, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    o, lse = torch.empty_like(q), torch.empty(2, 16, 8192, device="cuda")
    return attention.prepare(q, k, v, o, lse, kernel=kernel)


def _flash_flops() -> float:
    from tklab import attention

    return attention.flops(2, 16, 8192, 128)


MATMUL = 2.0 * N**3
#: key → (label, make the prepared launch, flops, peak). Keys are the chapters' result keys.
KERNELS: dict[str, tuple[str, Callable[[], Any], float | None, str]] = {
    "ch02.tiled_fp32": ("shared-memory tiling, 32×32 tiles, 4096³ fp32", lambda: _spec_launch("ch02_smem_tiling"),
                        MATMUL, "fp32_simt"),
    "ch03.regblock_float4": ("2D register blocking 8×8, float4, 4096³ fp32",
                             lambda: _spec_launch("ch03_register_blocking"), MATMUL, "fp32_simt"),
    "ch04.transpose_naive": ("transpose through a 32×32 tile, no padding, 8192²", _transpose_naive, None,
                             "fp32_simt"),
    "ch04.transpose_swizzled": ("transpose through an XOR-swizzled tile, 8192²", lambda: _spec_launch("ch04_swizzle"),
                                None, "fp32_simt"),
    "ch05.mma_tile": ("one warp, one 16×16×16 tile, 2 × mma.sync", lambda: _spec_launch("ch05_mma"), 2.0 * 16**3,
                      "bf16_tensor"),
    "ch05.mma_gemm": ("mma.sync + ldmatrix GEMM, 128×128 block, 4096³ bf16", _mma_gemm, MATMUL, "bf16_tensor"),
    "ch06.tiles_gemm": ("tk tiles GEMM, one stage, fp32 out, 4096³", lambda: _spec_launch("ch06_tiles"), MATMUL,
                        "bf16_tensor"),
    "ch06.gemm_mma_tiles": ("tk tiles: mma.sync + ldmatrix, 3-stage cp.async, 4096³ bf16", _gemm_mma_tiles, MATMUL,
                            "bf16_tensor"),
    "ch08.gemm_wgmma": ("wgmma + TMA, warp-specialised, 128×256 block, 4096³ bf16", _gemm_wgmma, MATMUL,
                        "bf16_tensor"),
    "ch09.flash_tiles": ("chapter 09 kernel, d=128, N=8192", lambda: _flash("tiles"), _flash_flops(),
                         "bf16_tensor"),
    "ch10.flash_hopper": ("chapter 10 kernel, d=128, N=8192", lambda: _flash("hopper"), _flash_flops(),
                          "bf16_tensor"),
}


def _sh(cmd: list[str]) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="comma-separated keys (default: all)")
    ap.add_argument("--budget-s", type=float, default=280.0, help="start no new profile after this many seconds")
    ap.add_argument("--keep-reports", action="store_true", help="also keep each .ncu-rep (large) in <out>/reports")
    args = ap.parse_args()
    start = time.monotonic()
    out = Path(os.environ["OUT"]) if os.environ.get("OUT") else None
    csv_dir = (out / "ncu") if out else ROOT / "tests" / "data" / "ncu" / "h200"
    profiles = (out / "profiles.json") if out else ROOT / "bench" / "results" / "profiles.json"
    summary_dir = out or ROOT / "bench" / "results"
    problem = unavailable()
    if problem is not None:
        print(f"SKIPPED: {problem}")
        return 0
    os.environ["TKLAB_RECORD"] = "1"
    os.environ["TKLAB_PROFILE_FILE"] = str(profiles)
    csv_dir.mkdir(parents=True, exist_ok=True)
    keys = [k.strip() for k in args.only.split(",") if k.strip()] or list(KERNELS)
    unknown = [k for k in keys if k not in KERNELS]
    if unknown:
        raise SystemExit(f"unknown keys {unknown}; known: {', '.join(KERNELS)}")
    exe = ncu.find_ncu()
    print(f"ncu {ncu.version(exe)} at {exe}; {tklab.run.gpu.name()}", flush=True)
    rows, failures, skipped = [], [], []
    for key in keys:
        if time.monotonic() - start > args.budget_s:
            skipped.append(key)
            continue
        label, make, flops, peak = KERNELS[key]
        t0 = time.monotonic()
        try:
            run = make()
            report = (summary_dir / "reports" / f"{key}.ncu-rep") if args.keep_reports else None
            r = tklab.profile(run, flops=flops, peak=peak, key=key, label=label, report=report)
        except ProfileUnavailable as e:
            if e.reason == "permission":
                print(f"SKIPPED: {e}")
                return 0
            failures.append((key, str(e)))
            print(f"{key}: FAILED: {e}", flush=True)
            continue
        except Exception as e:  # noqa: BLE001 - one kernel's failure must not hide the others
            failures.append((key, f"{type(e).__name__}: {e}"))
            print(f"{key}: FAILED: {type(e).__name__}: {e}", flush=True)
            continue
        (csv_dir / f"{key}.csv").write_text(r.raw_csv or "")
        rate = f"{r.tflops:.1f}" if r.tflops else "—"
        dram = f"{r.dram_tbps:.2f}" if r.dram_tbps is not None else "—"
        rows.append(f"| {key} | {r.kernel} | {r.ms:.4g} | {rate} | {dram} | {r.limiter.sentence} |")
        print(f"{key}: {r.ms:.4g} ms, {rate} TFLOP/s, {dram} TB/s DRAM ({time.monotonic() - t0:.0f} s)\n"
              f"    {r.limiter.sentence}", flush=True)
    smi = _sh(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"])
    commit = os.environ.get("TKLAB_COMMIT") or _sh(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"]) or "?"
    today = dt.date.today().isoformat()
    lines = [f"# Chapter kernels under Nsight Compute — {today}", "",
             f"- device, driver: {smi or tklab.run.gpu.name()}; ncu {ncu.version(exe)} (--clock-control none)",
             f"- commit: {commit}; script: bench/profile_samples.py; {time.monotonic() - start:.0f} s",
             "- one launch each, after 2 warm-up launches; ncu flushes caches before each replay pass", "",
             "| key | kernel | ms (under ncu) | TFLOP/s | DRAM TB/s | limiter |", "|---|---|---|---|---|---|",
             *rows]
    if failures:
        lines += ["", "## failed", "", *[f"- {k}: {msg.splitlines()[0]}" for k, msg in failures]]
    if skipped:
        lines += ["", f"Not profiled (time budget {args.budget_s:.0f} s spent): {', '.join(skipped)}"]
    summary_dir.mkdir(parents=True, exist_ok=True)
    path = summary_dir / f"profile_samples_{today}.md"
    path.write_text("\n".join(lines) + "\n")
    print(f"\nwrote {path}, {profiles}, {csv_dir}/*.csv")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
