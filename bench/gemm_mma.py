"""The warp-level mma.sync GEMM (solutions/gemm_mma_tiles.cu): check it, time it against cuBLAS, sanitize it.

    python bench/gemm_mma.py                      # checks, then 4096^3 timings, report in bench/results/
    python bench/gemm_mma.py --sanitize 256 256 128   # one small GEMM, to run under compute-sanitizer

The solution's tile sizes are macros, so the script also times a few variants (-D overrides) beside it;
cuBLAS (torch.matmul, bf16) runs in the same process, alternating with ours, so the ratio is what counts.
The report bench/results/gemm_mma_<date>.md records device, commit and date (pass --commit where the
working tree has no .git, e.g. on a lent GPU machine).
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "solutions" / "gemm_mma_tiles.cu"
sys.path.insert(0, str(ROOT))

import tklab  # noqa: E402
from tklab import gemm, recorded  # noqa: E402
from tklab.run.arrays import bf16_to_float32, poisoned, to_bf16_bits  # noqa: E402
from tklab.run.bench import bench  # noqa: E402

#: The solution's tile configuration: its file's #define defaults (the file is their one home; -D overrides all six).
SOLUTION = gemm.mma_tiles_options()
VARIANTS: dict[str, dict[str, int]] = {
    "solution: {BM}x{BN}x{BK}, {WARPS_M}x{WARPS_N} warps, {STAGES} stages".format(**SOLUTION): {},
    "4 stages": {"STAGES": 4},
    "128x256x32, 2x4 warps, 3 stages": {"BN": 256, "WARPS_N": 4},
    "128x128x64, 2x2 warps, 2 stages": {"BK": 64, "STAGES": 2},
}


class Gemm:
    """One compiled configuration of the kernel and how to launch it."""

    def __init__(self, overrides: dict[str, int], arch: str | None = None):
        self.cfg = {**SOLUTION, **overrides}
        opts = tuple(f"-DGEMM_{k}={v}" for k, v in self.cfg.items())
        self.module = tklab.compile(SOURCE.read_text(), arch=arch or tklab.run.gpu.arch(), options=opts,
                                    name="gemm_mma_tiles.cu")
        self.kernel = self.module["gemm_mma_tiles"]
        facts = gemm.launch_facts(self.module)  # the kernel's own threads and shared bytes
        self.threads, self.shared = facts["threads"], facts["shared_bytes"]

    def fits(self, m: int, n: int, k: int) -> bool:
        return m % self.cfg["BM"] == 0 and n % self.cfg["BN"] == 0 and k % self.cfg["BK"] == 0

    def launcher(self, a: Any, b: Any, c: Any) -> Any:
        (m, k), n = a.shape, b.shape[1]
        if not self.fits(m, n, k):
            raise ValueError(f"{m}x{n}x{k} is not a multiple of the block tile {self.cfg}")
        grid, args = (n // self.cfg["BN"], m // self.cfg["BM"]), (a, b, c, m, n, k)
        return self.kernel.prepare(grid, self.threads, args, shared_mem=self.shared)  # pack once, launch cheaply


def rel_error(c: Any, a: Any, b: Any) -> float:
    """||C - A B||_F / ||A B||_F, reference in float64 (torch, on the GPU)."""
    import torch

    ref = a.double() @ b.double()
    return float(torch.linalg.norm(c.double() - ref) / torch.linalg.norm(ref))


def check(g: Gemm, shapes: list[tuple[int, int, int]]) -> list[tuple[tuple[int, int, int], float]]:
    """Fresh random inputs, output poisoned with NaN; NaN left anywhere makes the error NaN."""
    import torch

    out = []
    for m, n, k in shapes:
        if not g.fits(m, n, k):
            continue
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        g.launcher(a, b, c)()
        torch.cuda.synchronize()
        out.append(((m, n, k), rel_error(c, a, b)))
    return out


def batched_ms(fn: Any, reps: int = 20) -> float:
    """Per-call time of `reps` back-to-back calls per event pair: Python's launch cost overlaps the
    previous call instead of landing between the events."""
    return bench(fn, batch=reps, flush_l2=False, ceilings=False, progress=False).ms


def benchmark(gemms: dict[str, Gemm], n: int, rounds: int = 2) -> list[dict[str, Any]]:
    import torch

    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(n, n, device="cuda", dtype=torch.bfloat16)
    flops = 2.0 * n**3
    cublas = lambda: torch.matmul(a, b, out=c)  # noqa: E731
    rows = []
    for r in range(rounds):
        contenders = {"cuBLAS (torch.matmul)": cublas, **{k: g.launcher(a, b, c) for k, g in gemms.items()}}
        for name, fn in contenders.items():
            res = bench(fn, flops=flops, name=name, progress=False)
            rows.append({"round": r, "name": name, "ms": res.ms, "tflops": res.tflops,
                         "batched_tflops": flops / batched_ms(fn) / 1e9})
    return rows


def report(gemms: dict[str, Gemm], checks: dict[str, list], rows: list[dict[str, Any]], n: int, commit: str) -> str:
    import torch

    now = datetime.datetime.now()
    best = {}
    for r in rows:
        best.setdefault(r["name"], []).append(r["batched_tflops"])
    cublas = statistics.median(best["cuBLAS (torch.matmul)"])
    lines = [
        f"# gemm_mma (warp-level mma.sync GEMM) vs cuBLAS — {now.date().isoformat()}",
        "",
        f"- device: {torch.cuda.get_device_name()} ({tklab.run.gpu.arch()}), torch {torch.__version__}",
        f"- commit: {commit}; date: {now.isoformat(timespec='seconds')}; script: bench/gemm_mma.py",
        f"- NVRTC: {recorded.nvrtc()} (its ptxas schedules the kernels' SASS)",
        "- C = A·B, bf16 in, fp32 accumulate, bf16 out; A row-major M×K, B row-major K×N.",
        "",
        "## kernels",
        "",
        "| variant | registers | spill bytes | dynamic smem (B) | threads |",
        "|---|---|---|---|---|",
        *[f"| {k} | {g.kernel.registers} | {g.kernel.spill_bytes} | {g.shared} | {g.threads} |"
          for k, g in gemms.items()],
        "",
        "## correctness (fresh random inputs, output poisoned with NaN, float64 reference)",
        "",
        "| variant | M×N×K | rel. Frobenius error |",
        "|---|---|---|",
        *[f"| {k} | {m}×{nn}×{kk} | {e:.2e} |" for k, cs in checks.items() for (m, nn, kk), e in cs],
        "",
        f"## speed at {n}³",
        "",
        "tklab.run.bench: median, one call per event pair, L2 flushed before each. batched: 20 back-to-back calls "
        "per event pair, median of 9 (no Python launch gap). Rounds alternate all contenders.",
        "",
        "| round | contender | ms (tklab.bench) | TFLOP/s (tklab.bench) | TFLOP/s (batched) "
        "| vs cuBLAS (batched, median of rounds) |",
        "|---|---|---|---|---|---|",
        *[f"| {r['round']} | {r['name']} | {r['ms']:.4f} | {r['tflops']:.0f} | {r['batched_tflops']:.0f} | "
          f"{r['batched_tflops'] / cublas:.2f} |" for r in rows],
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sanitize", nargs=3, type=int, metavar=("M", "N", "K"),
                   help="run the solution once at M x N x K on host-made inputs and check it (for compute-sanitizer)")
    p.add_argument("--size", type=int, default=4096)
    p.add_argument("--commit", help="commit id for the report (default: git rev-parse)")
    p.add_argument("--out", type=Path, help="folder for the report (default bench/results)")
    args = p.parse_args()

    if args.sanitize:  # CuPy + numpy only: quick to start under the sanitizer
        import cupy as cp
        import numpy as np

        m, n, k = args.sanitize
        rng = np.random.default_rng()
        a = rng.standard_normal((m, k)).astype(np.float32)
        b = rng.standard_normal((k, n)).astype(np.float32)
        a, b = to_bf16_bits(a), to_bf16_bits(b)
        c = poisoned(cp, (m, n), cp.uint16)
        Gemm({}).launcher(cp.asarray(a), cp.asarray(b), c)()
        cp.cuda.runtime.deviceSynchronize()
        ref = bf16_to_float32(a).astype(np.float64) @ bf16_to_float32(b)
        err = np.linalg.norm(bf16_to_float32(c.get()) - ref) / np.linalg.norm(ref)
        print(f"sanitize run {m}x{n}x{k}: rel. error {err:.2e}")
        sys.exit(0 if err < 1e-2 else 1)

    gemms = {name: Gemm(o) for name, o in VARIANTS.items()}
    shapes = [(128, 128, 32), (256, 384, 96), (384, 512, 1024), (1024, 256, 4096), (4096, 4096, 4096)]
    checks = {name: check(g, shapes) for name, g in gemms.items()}
    for name, cs in checks.items():
        for shape, err in cs:
            print(f"check {name} {shape}: rel. error {err:.2e} {'ok' if err < 1e-2 else 'FAIL'}")
    rows = benchmark(gemms, args.size)
    text = report(gemms, checks, rows, args.size, args.commit or recorded.commit())
    out_dir = args.out or ROOT / "bench" / "results"
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"gemm_mma_{datetime.date.today().isoformat()}.md"
    path.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
