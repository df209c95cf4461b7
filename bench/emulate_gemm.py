"""How long the CPU emulator takes for a 128x128x128 tile-library GEMM (and its build), on this machine.

    python bench/emulate_gemm.py [--repeat 3]     # writes bench/results/emulate_gemm_<date>_<commit>.md

Times, for chapter 06's tiles_gemm and the gemm_mma_tiles / gemm_wgmma solutions: the first build with an
empty cache (runtime library and precompiled prelude included, as on a learner's first check), a build
of a new source once those exist, a cached build, and one launch with and without the race detector
(median of --repeat). The issue's target: a 128^3 GEMM emulates in under 10 s on a 2-core machine.
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from compile_time import cpu_name  # noqa: E402 - bench/ is this script's folder

from tklab import gemm, recorded  # noqa: E402
from tklab.run.arrays import bf16_to_float32, to_bf16_bits  # noqa: E402

KERNELS = {  # name -> (source, kernel, (m, n, k), launch(mod_kernel, a, b, c))
    "ch06 tiles_gemm": ("solutions/ch06_tiles/ch06_tiles.cu", "tiles_gemm", (128, 128, 128)),
    "gemm_mma_tiles": ("solutions/gemm_mma_tiles.cu", "gemm_mma_tiles", (128, 128, 128)),
    "gemm_wgmma": ("solutions/gemm_wgmma.cu", "gemm", (128, 256, 128)),
}


def _launch(emu, name: str, kernel, m: int, n: int, k: int, race: bool) -> float:
    rng = np.random.default_rng(0)
    a = to_bf16_bits(rng.uniform(-1, 1, (m, k)).astype(np.float32))
    b = to_bf16_bits(rng.uniform(-1, 1, (k, n)).astype(np.float32))
    t = time.perf_counter()
    if name == "ch06 tiles_gemm":
        c = np.full((m, n), np.nan, np.float32)
        kernel((n // 128, m // 128), (128,), (a, b, c, m, n, k), race=race)
        got = c.astype(np.float64)
    elif name == "gemm_mma_tiles":
        c = np.zeros((m, n), np.uint16)
        tile, facts = gemm.mma_tiles_options(), gemm.launch_facts(kernel.module)  # the file's tile, its launch
        kernel((n // tile["BN"], m // tile["BM"]), (facts["threads"],), (a, b, c, m, n, k),
               shared_mem=facts["shared_bytes"], race=race)
        got = bf16_to_float32(c).astype(np.float64)
    else:
        c = np.zeros((m, n), np.uint16)
        step, facts = gemm.STEPS["2_warp_specialised"], gemm.launch_facts(kernel.module)  # gemm_wgmma.cu
        maps = [emu.tensor_map(x, box, dtype="bfloat16") for x, box in zip((a, b), gemm.tma_boxes(step), strict=True)]
        kernel(gemm.tile_grid(step, m, n), (facts["threads"],), (*maps, c, m, n, k), shared_mem=facts["shared_bytes"],
               race=race)
        got = bf16_to_float32(c).astype(np.float64)
    dt = time.perf_counter() - t
    ref = bf16_to_float32(a).astype(np.float64) @ bf16_to_float32(b)
    if not np.allclose(got, ref, rtol=2e-2, atol=2e-2):
        raise RuntimeError(f"{name}: wrong result under emulation")
    return dt


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as cache:
        os.environ["TKLAB_CACHE_DIR"] = cache  # cold: nothing built yet
        from tklab import emulate

        cc = emulate.compiler()
        for i, (name, (src, kname, (m, n, k))) in enumerate(KERNELS.items()):
            text = (ROOT / src).read_text()
            t = time.perf_counter()
            mod = emulate.compile(text, name=Path(src).name)
            build = time.perf_counter() - t
            t = time.perf_counter()
            emulate.compile(text, name=Path(src).name)
            cached = time.perf_counter() - t
            kernel = mod[kname]
            with_race = statistics.median(_launch(emulate, name, kernel, m, n, k, True) for _ in range(args.repeat))
            without = statistics.median(_launch(emulate, name, kernel, m, n, k, False) for _ in range(args.repeat))
            rows.append((name, f"{m}x{n}x{k}", ("first build (cold cache)" if i == 0 else "build"), build, cached,
                         with_race, without))
            print(f"{name} {m}x{n}x{k}: build {build:.2f} s, cached {cached:.3f} s, run {with_race:.3f} s "
                  f"(race detector on), {without:.3f} s (off)", flush=True)
    now = datetime.datetime.now(datetime.timezone.utc)
    commit = recorded.commit()
    out = ROOT / "bench" / "results" / f"emulate_gemm_{now:%Y-%m-%d}_{commit}.md"
    lines = [f"# CPU emulation of tile-library GEMMs ({now:%Y-%m-%d %H:%M UTC}, commit {commit})", "",
             f"Machine: {cpu_name()}, {os.cpu_count()} cores; compiler {cc.description}; one worker thread "
             f"(the default); median of {args.repeat} launches.", "",
             "| kernel | M×N×K | build | build (s) | cached build (s) | launch, race detector on (s) | off (s) |",
             "|---|---|---|---|---|---|---|"]
    for name, shape, kind, build, cached, on, off in rows:
        lines.append(f"| {name} | {shape} | {kind} | {build:.2f} | {cached:.3f} | {on:.3f} | {off:.3f} |")
    lines += ["", "The first build includes the emulator runtime and the precompiled CUDA prelude (once per "
              "machine and compiler); later sources pay only their own compile."]
    out.write_text("\n".join(lines) + "\n")
    print(f"written {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
