"""How accurate are the tile library's fast special functions (tk/common/fast_math.cuh)? Measured on the GPU.

    python bench/fast_math_accuracy.py        # prints a table; writes bench/results/fast_math_<date>.md

Each function runs on 2^24 inputs spread over the range softmax uses, against float64 NumPy on the very
float32 inputs the GPU saw: exp2 on [-126, 0] and [0, 16] (relative error), log2 on [2^-20, 2^20]
(absolute error near 1, where the result is near 0; relative elsewhere) and rcp on [2^-20, 2^20].
"""

from __future__ import annotations

import datetime
import os
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import tklab  # noqa: E402
from tklab import recorded  # noqa: E402

SRC = r"""
#include "tk.cuh"
extern "C" __global__ void fast_math(const float* x, float* e, float* l, float* r, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { e[i] = tk::fast::exp2(x[i]); l[i] = tk::fast::log2(x[i]); r[i] = tk::fast::rcp(x[i]); }
}
"""


def measure(n: int = 1 << 24) -> list[tuple[str, str, float]]:
    import cupy as cp

    k = tklab.compile(SRC, name="fast_math.cu")["fast_math"]
    rng = np.random.default_rng(0)
    rows = []
    ranges = {"exp2 on [-126, 0]": (-126, 0, "lin"), "exp2 on [0, 16]": (0, 16, "lin"),
              "log2 on [2^-20, 2^20]": (-20, 20, "log"), "rcp on [2^-20, 2^20]": (-20, 20, "log")}
    for label, (lo, hi, kind) in ranges.items():
        x = rng.uniform(lo, hi, n) if kind == "lin" else np.exp2(rng.uniform(lo, hi, n))
        x = x.astype(np.float32)
        dx = cp.asarray(x)
        outs = [cp.empty_like(dx) for _ in range(3)]
        k(((n + 255) // 256,), (256,), (dx, *outs, n))
        e, lg, r = (o.get().astype(np.float64) for o in outs)
        xd = x.astype(np.float64)
        if label.startswith("exp2"):
            ref = np.exp2(xd)
            rows.append((label, "max relative error", float(np.max(np.abs(e - ref) / ref))))
        elif label.startswith("log2"):
            ref = np.log2(xd)
            near = np.abs(xd - 1) < 0.5
            rows.append((label, "max absolute error for x in (0.5, 1.5)", float(np.max(np.abs(lg - ref)[near]))))
            rows.append((label, "max relative error elsewhere", float(np.max((np.abs(lg - ref) / np.abs(ref))[~near]))))
        else:
            ref = 1.0 / xd
            rows.append((label, "max relative error", float(np.max(np.abs(r - ref) / ref))))
    return rows


def main() -> None:
    rows = measure()
    lines = [f"# fast_math accuracy — {datetime.date.today().isoformat()}", "",
             f"- device: {tklab.run.gpu.name()}; commit: {os.environ.get('GIT_COMMIT', 'see git log')}; "
             f"NVRTC {recorded.nvrtc()}", "",
             "| function | measure | value | in units of 2^-23 (float32 ulp at 1) |", "|---|---|---|---|"]
    lines += [f"| {f} | {m} | {v:.3e} | {v / 2**-23:.2f} |" for f, m, v in rows]
    text = "\n".join(lines) + "\n"
    print(text)
    for folder in [ROOT / "bench" / "results", *([Path(os.environ["OUT"])] if os.environ.get("OUT") else [])]:
        (folder / f"fast_math_{datetime.date.today().isoformat()}.md").write_text(text)


if __name__ == "__main__":
    main()
