"""Emulated vs GPU outputs for every CUDA solution of the course, on the same inputs (run on an H200).

    python bench/emulate_crosscheck.py            # writes $OUT/emulate_crosscheck_<date>_<commit>.{json,md}

Each solution runs twice on one machine with a GPU: on the GPU (tklab.compile, CuPy) and on the CPU
emulator (tklab.emulate, NumPy), on identical inputs, at sizes the emulator handles in seconds. Two input
kinds per solution: small integers, where every product and sum is exact in the kernel's arithmetic, so
the two outputs must be equal bit for bit; and the exercise's own random inputs, where they must agree
within the check's tolerance. Without $OUT the results go to bench/results/. Needs a C++ compiler
(g++ or clang++) for the emulator; the script says so and stops if there is none.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tklab import attention, gemm, recorded, specs  # noqa: E402
from tklab.grading import spec_kit  # noqa: E402
from tklab.run.arrays import to_bf16_bits  # noqa: E402

Arrays = dict[str, np.ndarray]


def _ints(rng: np.random.Generator, shape: tuple[int, ...], lo: int = -3, hi: int = 3) -> np.ndarray:
    return rng.integers(lo, hi + 1, size=shape).astype(np.float32)


# ---- the exercises (spec-driven) -----------------------------------------------------------------------------
def _spec_case(exercise: str, dims: dict[str, int], integer: bool) -> tuple[Callable[[Any], Arrays], Any]:
    spec = specs.get(exercise)
    src = (ROOT / spec.solution).read_text()
    rng = np.random.default_rng(11)
    host = spec.inputs(rng, dims)
    if integer:  # same shapes and dtypes, small integers: every product and sum is exact
        host = {k: (to_bf16_bits(_ints(rng, v.shape)) if v.dtype == np.uint16 else
                    _ints(rng, v.shape).astype(v.dtype)) for k, v in host.items()}

    def run(target: Any) -> Arrays:
        import tklab
        from tklab import emulate

        xp = np if target == "cpu" else __import__("cupy")
        arrays = {k: xp.asarray(v) for k, v in host.items()}
        for name, (shape, dtype) in spec.outputs(dims).items():
            arrays[name] = xp.full(shape, np.nan, dtype=dtype)
        shape = spec.launch(dims)
        if target == "cpu":
            from tklab.grading import emulated as exercise

            k = emulate.compile(src, arch="sm_90a", name=spec.filename, options=spec.options)[spec.kernel]
            with exercise._cpu_tensor_maps():  # specs that build TMA maps get the emulator's
                args = spec.args(arrays, dims)
        else:
            k = tklab.compile(src, name=spec.filename, options=spec.options)[spec.kernel]
            args = spec.args(arrays, dims)
        k(shape.grid, shape.block, args, shared_mem=shape.shared_mem)
        return {n: (arrays[n] if target == "cpu" else xp.asnumpy(arrays[n])) for n in spec.outputs(dims)}

    return run, spec


# ---- the library GEMMs and attention -------------------------------------------------------------------------
def _gemm_case(which: str, m: int, n: int, k: int, integer: bool) -> Callable[[Any], Arrays]:
    rng = np.random.default_rng(12)
    make = (lambda s: to_bf16_bits(_ints(rng, s, -2, 2))) if integer else \
        (lambda s: to_bf16_bits(rng.uniform(-1, 1, s).astype(np.float32)))
    a, b = make((m, k)), make((k, n))

    def run(target: Any) -> Arrays:
        import tklab
        from tklab import emulate

        if which == "gemm_mma_tiles":
            src = (ROOT / "solutions" / "gemm_mma_tiles.cu").read_text()
            mod = tklab.compile(src, arch="sm_90a", name="gemm_mma_tiles.cu")  # its launch, as the kernel declares it
            tile, facts = gemm.mma_tiles_options(), gemm.launch_facts(mod)
            grid, block, smem = (n // tile["BN"], m // tile["BM"]), (facts["threads"],), facts["shared_bytes"]
            if target == "cpu":
                c = np.zeros((m, n), np.uint16)
                emulate.compile(src, name="gemm_mma_tiles.cu")["gemm_mma_tiles"](
                    grid, block, (a, b, c, m, n, k), shared_mem=smem)
                return {"C": c}
            import cupy as cp

            c = cp.zeros((m, n), cp.uint16)
            tklab.compile(src, name="gemm_mma_tiles.cu")["gemm_mma_tiles"](
                grid, block, (cp.asarray(a), cp.asarray(b), c, m, n, k), shared_mem=smem)
            return {"C": cp.asnumpy(c)}
        step = gemm.STEPS["2_warp_specialised"]  # solutions/gemm_wgmma.cu
        facts = gemm.launch_facts(gemm.compiled(step).module)
        grid, block, smem = gemm.tile_grid(step, m, n), (facts["threads"],), facts["shared_bytes"]
        src = step.path.read_text()
        if target == "cpu":
            c = np.zeros((m, n), np.uint16)
            maps = [emulate.tensor_map(x, box, dtype="bfloat16") for x, box in zip((a, b), gemm.tma_boxes(step),
                                                                                   strict=True)]
            emulate.compile(src, name=step.source)["gemm"](grid, block, (*maps, c, m, n, k), shared_mem=smem)
            return {"C": c}
        import cupy as cp

        from tklab import tma

        ga, gb, c = cp.asarray(a), cp.asarray(b), cp.zeros((m, n), cp.uint16)
        maps = [tma.tensor_map(x, box, dtype="bfloat16") for x, box in zip((ga, gb), gemm.tma_boxes(step), strict=True)]
        tklab.compile(src, arch="sm_90a", name=step.source)["gemm"](grid, block, (*maps, c, m, n, k), shared_mem=smem)
        return {"C": cp.asnumpy(c)}

    return run


def _flash_case(kernel: str, d: int, n: int, causal: bool) -> Callable[[Any], Arrays]:
    rng = np.random.default_rng(13)
    b, h = 1, 2
    q, k, v = (to_bf16_bits(rng.standard_normal((b, h, n, d)).astype(np.float32)) for _ in range(3))
    cfg = attention.build(kernel, d)

    def run(target: Any) -> Arrays:
        if target != "cpu":
            import cupy as cp

            o, lse = attention.flash_fwd(cp.asarray(q), cp.asarray(k), cp.asarray(v), causal=causal, kernel=kernel)
            return {"O": cp.asnumpy(o), "L": cp.asnumpy(lse)}
        from tklab import emulate

        o, lse = np.zeros((b, h, n, d), np.uint16), np.zeros((b, h, n), np.float32)
        mod = emulate.compile(cfg.source.read_text(), name=cfg.source.name, options=cfg.options)
        scale = np.float32(1 / np.sqrt(d))
        if kernel == "tiles":
            args = (q, k, v, o, lse, h, n, h * n * d, n * d, d, scale, int(causal))
        else:
            bc = cfg.option("BC")
            maps = [emulate.tensor_map(x, (rows, d), dtype="bfloat16")
                    for x, rows in ((q, 64), (k, bc), (v, bc), (o, 64))]
            args = (*maps, lse, h, n, scale, int(causal))
        mod["flash_fwd"](((n + cfg.block_rows - 1) // cfg.block_rows, h, b), (cfg.threads,), args,
                         shared_mem=cfg.shared_bytes)
        return {"O": o, "L": lse}

    return run


def _as_float(name: str, x: np.ndarray) -> np.ndarray:
    if x.dtype == np.uint16:  # bf16 bits
        return (x.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return x.astype(np.float64)


def _detail(row: dict[str, Any]) -> str:
    if row.get("error"):
        return row["error"]
    parts = []
    for out, v in row["outputs"].items():
        parts.append(f"{out}: bit-equal" if v["bit_equal"] else f"{out}: max diff {v['max_abs_diff']:.3g}")
    return "; ".join(parts)


def main() -> int:
    from tklab import emulate, gpu

    out_dir = Path(os.environ.get("OUT") or ROOT / "bench" / "results")
    out_dir.mkdir(parents=True, exist_ok=True)
    if not gpu.available():
        print("no GPU here: this script compares the emulator with a GPU")
        return 2
    try:
        cc = emulate.compiler()
    except emulate.NoCompiler as e:
        print(f"no C++ compiler for the emulator on this machine: {e}")
        return 2
    jobs: list[tuple[str, str, Callable[[Any], Arrays], float, float]] = []
    from tklab.grading import emulated as exercise

    # Every CUDA exercise, at the cases the emulator runs in a check; integer inputs where the maths is exact.
    exact = {"ch02_smem_tiling", "ch03_register_blocking", "ch04_swizzle", "ch05_mma", "ch06_tiles", "ch07_tma_ring"}
    cuda = [specs.get(i) for i in specs.all_ids() if specs.get(i).language == "cuda"]
    exercises = [(s.id, d) for s in cuda for d in exercise.cases(s)]
    for ex, dims in exercises:
        for integer in ((True, False) if ex in exact else (False,)):
            run, spec = _spec_case(ex, dims, integer)
            jobs.append((f"{ex} {spec_kit.dims_text(dims)}", "integers" if integer else "random", run, spec.rtol,
                         spec.atol))
    for integer in (True, False):
        kind = "integers" if integer else "random"
        jobs.append(("gemm_mma_tiles 256x256x128", kind, _gemm_case("gemm_mma_tiles", 256, 256, 128, integer),
                     1e-2, 1e-2))
        jobs.append(("gemm_wgmma 256x512x192", kind, _gemm_case("gemm_wgmma", 256, 512, 192, integer), 1e-2, 1e-2))
    for kernel, d, n, causal in [("tiles", 64, 77, True), ("tiles", 128, 200, False), ("hopper", 64, 200, True),
                                 ("hopper", 128, 130, False)]:
        jobs.append((f"flash_fwd {kernel} d={d} n={n}{' causal' if causal else ''}", "random",
                     _flash_case(kernel, d, n, causal), 2e-2, 2e-2))
    rows = []
    for name, kind, run, rtol, atol in jobs:
        row: dict[str, Any] = {"solution": name, "inputs": kind}
        try:
            t = time.perf_counter()
            g = run("gpu")
            row["gpu_s"] = time.perf_counter() - t
            t = time.perf_counter()
            e = run("cpu")
            row["emulated_s"] = time.perf_counter() - t
            outs = {}
            for out in g:
                gf, ef = _as_float(out, g[out]), _as_float(out, e[out])
                same = bool(np.array_equal(g[out], e[out], equal_nan=True))
                with np.errstate(invalid="ignore"):
                    close = bool(np.all(np.abs(gf - ef) <= atol + rtol * np.abs(gf)))
                outs[out] = {"bit_equal": same, "within_tolerance": close,
                             "max_abs_diff": float(np.nanmax(np.abs(gf - ef))) if gf.size else 0.0,
                             "mismatched_bits": int(np.count_nonzero(g[out] != e[out]))}
            row["outputs"] = outs
            row["ok"] = all(o["bit_equal"] if kind == "integers" else o["within_tolerance"] for o in outs.values())
        except Exception as ex:  # noqa: BLE001 - one failing solution is a row, not the end of the report
            row["ok"] = False
            row["error"] = f"{type(ex).__name__}: {ex}"[:2000]
        rows.append(row)
        print(f"{'ok  ' if row['ok'] else 'FAIL'} {name} ({kind}): {_detail(row)}", flush=True)
    now = datetime.datetime.now(datetime.timezone.utc)
    meta = {"device": gpu.name(), "commit": recorded.commit(), "nvrtc": recorded.nvrtc(),
            "date": now.strftime("%Y-%m-%d %H:%M UTC"),
            "compiler": cc.description, "host": platform.processor() or platform.machine()}
    stem = out_dir / f"emulate_crosscheck_{now:%Y-%m-%d}_{meta['commit']}"
    stem.with_suffix(".json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    lines = [f"# Emulated vs GPU outputs ({meta['device']}, {meta['commit']}, {meta['date']})", "",
             f"Emulator compiler: {meta['compiler']}. Integer inputs must match bit for bit; random inputs within "
             "the check's tolerance.", "", "| solution | inputs | result | detail |", "|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['solution']} | {r['inputs']} | {'ok' if r['ok'] else 'FAIL'} | {_detail(r)} |")
    stem.with_suffix(".md").write_text("\n".join(lines) + "\n")
    passed = sum(r["ok"] for r in rows)
    print(f"\n{passed}/{len(rows)} agree; written {stem}.md and .json")
    return 0 if passed == len(rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
