"""The Hopper GEMM (solutions/gemm_wgmma.cu) from Python, and its benchmark against cuBLAS.

``gemm(a, b)`` runs the kernel on torch or CuPy bf16 matrices (C = A @ B, A: M x K, B: K x N, both
row-major); shapes that are not multiples of the block tile raise ``ValueError`` before anything runs.

Run ``python bench/gemm_wgmma.py`` on an H100/H200: it checks the kernel at a few shapes, times it and
cuBLAS (torch.matmul) at 4096^3 and 8192^3 in the same run, and writes
``bench/results/gemm_wgmma_<date>.md`` with the device, commit and date. ``--check-only`` skips timing;
``--sanitize M N K`` runs one small GEMM (for compute-sanitizer). On a machine without the git history
set GIT_COMMIT to the commit being measured.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "solutions" / "gemm_wgmma.cu"
sys.path.insert(0, str(ROOT))

import tklab  # noqa: E402
from tklab import launch, tma  # noqa: E402
from tklab.bench import bench as tk_bench  # noqa: E402

# Must match the constants at the top of solutions/gemm_wgmma.cu.
BM, BN, BK, STAGES, CONSUMERS = 128, 256, 64, 4, 2
THREADS = (CONSUMERS + 1) * 128
STAGE_BYTES = (BM * BK + BK * BN) * 2
SHARED_BYTES = STAGES * STAGE_BYTES + 1024  # + slack to align the first stage to 1024 bytes


def check_shapes(m: int, n: int, k: int) -> None:
    """Raise ValueError unless the kernel handles M x N x K (multiples of its 128 x 256 x 64 tile)."""
    bad = [f"{name}={v} is not a multiple of {t}" for name, v, t in (("M", m, BM), ("N", n, BN), ("K", k, BK))
           if v <= 0 or v % t]
    if bad:
        raise ValueError("gemm_wgmma handles shapes that are multiples of its block tile (M: 128, N: 256, "
                         f"K: 64): {'; '.join(bad)}. Pad the matrices with zeros, or use torch.matmul.")


#: Variants the benchmark compares (compile-time -D options of the solution); the first is the default.
VARIANTS: dict[str, tuple[str, ...]] = {"in_flight=0": (), "in_flight=1": ("-DIN_FLIGHT=1",)}


@functools.cache
def kernel(arch: str = "sm_90a", options: tuple[str, ...] = ()) -> Any:
    """The compiled kernel (cached on disk by tklab.compile)."""
    return tklab.compile(SOURCE.read_text(), arch=arch, name="gemm_wgmma.cu", options=options)["gemm"]


def _shape(x: Any) -> tuple[int, int]:
    if len(x.shape) != 2:
        raise ValueError(f"gemm_wgmma multiplies matrices; got shape {tuple(x.shape)}")
    return int(x.shape[0]), int(x.shape[1])


def _problem(a: Any, b: Any) -> tuple[int, int, int]:
    """(M, N, K) of A @ B, after checking that the kernel handles it."""
    (m, k), (k2, n) = _shape(a), _shape(b)
    if k != k2:
        raise ValueError(f"inner dimensions differ: A is {m} x {k}, B is {k2} x {n}")
    check_shapes(m, n, k)
    return m, n, k


def prepare(a: Any, b: Any, out: Any, *, dtype: str | None = None, options: tuple[str, ...] = ()) -> Any:
    """Check shapes and build the tensor maps once; returns ``run(stream=None)`` that launches the kernel.

    ``a``/``b``/``out`` are torch CUDA tensors (bf16) or CuPy arrays (dtype='bfloat16' for uint16 ones).
    """
    m, n, k = _problem(a, b)
    if _shape(out) != (m, n):
        raise ValueError(f"out must be {m} x {n}, got {tuple(out.shape)}")
    map_a = tma.tensor_map(a, (BM // CONSUMERS, BK), dtype=dtype)  # one consumer's 64 x 64 slice of A
    map_b = tma.tensor_map(b, (BK, BN), dtype=dtype)               # 64 x 256 of B, in 64-column panels
    k_fn, grid, args = kernel(options=options), ((m // BM) * (n // BN),), (map_a, map_b, out, m, n, k)

    prepared: dict[Any, Any] = {}  # packed once per stream: per-call host cost stays a few microseconds

    def run(stream: Any = None) -> None:
        key = launch._stream_handle(stream)
        if key not in prepared:
            prepared[key] = k_fn.prepare(grid, (THREADS,), args, shared_mem=SHARED_BYTES, stream=stream)
        prepared[key]()

    return run


def gemm(a: Any, b: Any, out: Any = None, *, dtype: str | None = None) -> Any:
    """C = A @ B in bf16 (fp32 accumulation) with the wgmma kernel; A: M x K, B: K x N, row-major.

    ``out`` (M x N, same kind as ``a``) is written in place when given.
    """
    if out is None:
        m, n, _ = _problem(a, b)
        if hasattr(a, "new_empty"):  # torch
            out = a.new_empty((m, n))
        else:
            import cupy as cp

            out = cp.empty((m, n), dtype=a.dtype)
    prepare(a, b, out, dtype=dtype)()
    return out


# ---------------------------------------------------------------------------------------------------
def _rel_error(c: Any, a: Any, b: Any) -> float:
    """‖C - A·B‖_F / ‖A·B‖_F with the reference in float64 on the GPU (torch)."""
    import torch

    ref = a.double() @ b.double()
    return float(torch.linalg.norm(c.double() - ref) / torch.linalg.norm(ref))


Shape = tuple[int, int, int]


def check(shapes: list[Shape], options: tuple[str, ...] = ()) -> list[tuple[Shape, float]]:
    """Run the kernel at each shape on fresh random inputs, output poisoned with NaN; relative errors."""
    import torch

    results = []
    for m, n, k in shapes:
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        prepare(a, b, c, options=options)()
        torch.cuda.synchronize()
        results.append(((m, n, k), _rel_error(c, a, b)))
    return results


def _commit() -> str:
    """The commit measured: $GIT_COMMIT (the device machine's copy has no .git), else git's HEAD."""
    if os.environ.get("GIT_COMMIT"):
        return os.environ["GIT_COMMIT"]
    try:
        out = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, check=False)
        return out.stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def _batched_ms(fn: Any, reps: int = 20) -> float:
    """Per-call time of `reps` back-to-back calls per event pair (launch cost overlaps the GPU's work)."""
    return tk_bench(fn, batch=reps, flush_l2=False, ceilings=False, progress=False).ms


def _graphed(fn: Any) -> Any:
    """fn captured once in a CUDA graph; replaying it costs the host a few µs instead of a Python launch."""
    import torch

    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        fn(side)  # warm-up outside the capture (module load, cuBLAS handle)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=side):
        fn(side)
    return graph.replay


def _host_us(fn: Any, calls: int = 50) -> float:
    """Host time to enqueue one call (the GPU stays busy, so this is launch overhead alone)."""
    import time

    import torch

    fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(calls):
        fn()
    host = (time.perf_counter() - t) / calls * 1e6
    torch.cuda.synchronize()
    return host


def benchmark(sizes: list[int], variants: dict[str, tuple[str, ...]], repeats: int = 3) -> list[dict[str, Any]]:
    """TFLOP/s of cuBLAS (torch.matmul) and each kernel variant at n^3, `repeats` rounds, three methods.

    "bench": tklab.bench on the Python call (one call per event pair, L2 flushed before each: includes
    the host launch cost whenever the GPU has drained); "graph": tklab.bench on a CUDA-graph replay of
    the call (same flushing, launch cost gone); "batched": 20 back-to-back calls per event pair.
    """
    import torch

    rows = []
    for n in sizes:
        a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
        c = torch.empty(n, n, device="cuda", dtype=torch.bfloat16)
        c_ref = torch.empty(n, n, device="cuda", dtype=torch.bfloat16)
        contenders = {"cuBLAS": lambda stream=None, a=a, b=b, c_ref=c_ref: torch.matmul(a, b, out=c_ref)}
        contenders |= {name: prepare(a, b, c, options=opts) for name, opts in variants.items()}
        graphs = {name: _graphed(fn) for name, fn in contenders.items()}
        flops = 2.0 * n**3
        for r in range(repeats):
            for name, fn in contenders.items():
                row = {"n": n, "round": r, "who": name, "host_us": _host_us(fn)}
                row["bench"] = tk_bench(fn, flops=flops, progress=False).tflops
                row["graph"] = tk_bench(graphs[name], flops=flops, progress=False).tflops
                row["batched"] = flops / _batched_ms(fn) / 1e9
                rows.append(row)
    return rows


def _row(r: dict[str, Any], ref: dict[str, Any]) -> str:
    ratios = " | ".join(f"{r[m] / ref[m]:.3f}" for m in ("bench", "graph", "batched"))
    return (f"| {r['n']}³ | {r['round']} | {r['who']} | {r['host_us']:.0f} | {r['bench']:.0f} | {r['graph']:.0f} | "
            f"{r['batched']:.0f} | {ratios} |")


def write_report(checks: list, rows: list[dict[str, Any]], note: str = "") -> Path:
    """bench/results/gemm_wgmma_<date>.md: device, commit, date, the error checks and the timing table."""
    import torch

    today = datetime.date.today().isoformat()
    k = kernel()
    variants = ", ".join(f"{name} {' '.join(opts) or '(default)'}" for name, opts in VARIANTS.items())
    lines = [
        f"# gemm_wgmma vs cuBLAS — {today}",
        "",
        f"- device: {torch.cuda.get_device_name()} ({tklab.gpu.arch()}), torch {torch.__version__}",
        f"- commit: {_commit()}; date: {datetime.datetime.now().isoformat(timespec='seconds')}",
        f"- kernel: {BM}x{BN}x{BK} block tile, {STAGES} stages, 1 producer + {CONSUMERS} consumer warpgroups; "
        f"variants: {variants}; "
        f"{k.registers} registers at entry, {k.spill_bytes} spill bytes, {SHARED_BYTES} B dynamic shared memory",
        "- cuBLAS = torch.matmul bf16 (out= preallocated); both timed in the same run, alternating; tensor "
        "maps built once outside the timed calls",
        "",
        "## correctness (fresh random inputs, output poisoned with NaN, float64 reference)",
        "",
        "| M | N | K | rel. Frobenius error |",
        "|---|---|---|---|",
        *[f"| {m} | {n} | {kk} | {e:.2e} |" for (m, n, kk), e in checks],
        "",
        "## speed",
        "",
        "TFLOP/s. bench: tklab.bench on the Python call (one call per event pair, L2 flushed before each; "
        "includes the host launch cost when the GPU has drained). graph: the same on a CUDA-graph replay of the "
        "call (launch cost gone). batched: 20 back-to-back calls per event pair, median of 7. host µs: time "
        "to enqueue one call from Python. Ratios are to cuBLAS in the same round.",
        "",
        "| size | round | who | host µs | bench | graph | batched | bench ratio | graph ratio | batched ratio |",
        "|---|---|---|---|---|---|---|---|---|---|",
        *[_row(r, next(x for x in rows if x["n"] == r["n"] and x["round"] == r["round"] and x["who"] == "cuBLAS"))
          for r in rows],
    ]
    if note:
        lines += ["", "## summary", "", note]
    path = ROOT / "bench" / "results" / f"gemm_wgmma_{today}.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--check-only", action="store_true")
    p.add_argument("--sanitize", nargs=3, type=int, metavar=("M", "N", "K"))
    p.add_argument("--sizes", nargs="*", type=int, default=[4096, 8192])
    p.add_argument("--out", type=Path, help="also copy the report here")
    args = p.parse_args()
    if args.sanitize:
        ((shape, err),) = check([tuple(args.sanitize)])
        print(f"sanitize run {shape}: rel. error {err:.2e}")
        return
    shapes = [(128, 256, 64), (256, 512, 128), (384, 768, 1024), (1024, 256, 4096), (2048, 4096, 512),
              (4096, 4096, 4096)]
    checks = check(shapes)
    notes = []
    for name, opts in list(VARIANTS.items())[1:]:  # the other variants must be right too
        worst = max(e for _, e in check(shapes, opts))
        notes.append(f"variant {name}: worst rel. error over the same shapes {worst:.2e}")
    for shape, err in checks:
        print(f"check {shape}: rel. error {err:.2e} {'ok' if err < 1e-2 else 'FAIL'}")
    if args.check_only:
        return
    rows = benchmark(args.sizes, VARIANTS)
    default = next(iter(VARIANTS))
    for n in args.sizes:
        for method in ("bench", "graph", "batched"):
            ratios = [r[method] / ref[method] for r in rows for ref in rows
                      if r["n"] == ref["n"] == n and r["round"] == ref["round"] and r["who"] == default
                      and ref["who"] == "cuBLAS"]
            notes.append(f"{n}³ {method}: {default} / cuBLAS = {min(ratios):.3f} .. {max(ratios):.3f}")
    path = write_report(checks, rows, "\n".join(f"- {x}" for x in notes))
    if args.out:
        args.out.write_text(path.read_text())
    print(path.read_text())


if __name__ == "__main__":
    main()
