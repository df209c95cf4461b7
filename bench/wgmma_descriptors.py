"""What the wgmma descriptors cost in a loop's SASS, three ways of building them (no GPU: compiled for sm_90a).

    python bench/wgmma_descriptors.py

Why: chapter 11's parked backward step spends 160 of its 530 instructions on the uniform datapath, 56 of them
``UMOV``s that put a descriptor's constant high word back before every HGMMA (docs/ROADMAP.md). A loop of nothing
but products shows where that comes from and what avoids it: the library's way (each K-slice's descriptor built from
the tile, inside ``warpgroup::mma_*``), one 64-bit base per tile built each step with the slices as 64-bit adds, and
the bases built once before the loop (what a kernel could do for its stages and buffers). Prints the loop's length,
its HGMMA and its uniform instructions per HGMMA for each; the SASS is NVRTC's of this machine's toolchain.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import tklab  # noqa: E402
from tklab.toolchain.loop_events import hot_loop  # noqa: E402

#: A warpgroup's loop of products over two pairs of 64 x 64 bf16 tiles (the stage alternating, as in a ring of 2).
SOURCE = r'''
#include "tk.cuh"
using namespace tk;
extern "C" __global__ void __launch_bounds__(128) products(float* out, int n) {
    __shared__ st_bf<64, 64> a[2], b[2];
    rt_fl<16, 64> d;
    zero(d);
    BEFORE
    for (int i = 0; i < n; ++i) {
        STEP
    }
    warpgroup::mma_async_wait<0>(d);
    out[threadIdx.x] = d.tiles[0][0].data[0].x;
}
'''
_ISSUE = ("wgmma::fence_operands(d); wgmma::fence();"
          "for (int k = 0; k < 4; ++k) wgmma::instr<bf16, 64>::ss<false, false>(d, A + 2 * k, B + 2 * k, true);"
          "wgmma::commit_group(); wgmma::fence_operands(d); warpgroup::mma_async_wait<1>();")
_DESC = "wgmma::descriptor<wgmma::major::k>"
#: name -> (code before the loop, the loop's body); slice k of a K-major 128-byte-swizzled bf16 tile is 2 k further
#: in the descriptor's 16-byte units (descriptor.cuh)
VARIANTS: dict[str, tuple[str, str]] = {
    "library (per slice, in mma_ABt)": (
        "", "warpgroup::mma_ABt(d, a[i & 1], b[i & 1], true); warpgroup::mma_async_wait<1>();"),
    "a 64-bit base per tile each step": (
        "", f"const uint64_t A = {_DESC}(a[i & 1], 0), B = {_DESC}(b[i & 1], 0);" + _ISSUE),
    "the bases once, before the loop": (
        f"const uint64_t da[2] = {{{_DESC}(a[0], 0), {_DESC}(a[1], 0)}},"
        f" db[2] = {{{_DESC}(b[0], 0), {_DESC}(b[1], 0)}};",
        "const uint64_t A = da[i & 1], B = db[i & 1];" + _ISSUE),
}


def measure() -> dict[str, dict[str, int]]:
    """name -> {"loop": instructions, "hgmma": ..., "uniform": ..., "umov": ...} of the compiled loop."""
    out = {}
    for name, (before, step) in VARIANTS.items():
        module = tklab.compile(SOURCE.replace("BEFORE", before).replace("STEP", step), arch="sm_90a",
                               name="wgmma_descriptors.cu")
        loop = hot_loop(module["products"].sass)
        ops = Counter(op.split(".")[0] for op, _ in loop)
        out[name] = {"loop": len(loop), "hgmma": ops["HGMMA"],
                     "uniform": sum(n for op, n in ops.items() if op.startswith("U")), "umov": ops["UMOV"]}
    return out


def main() -> int:
    print(f"{'descriptors':34} {'loop':>5} {'HGMMA':>6} {'uniform / HGMMA':>16} {'UMOV / HGMMA':>13}")
    for name, r in measure().items():
        per = {k: r[k] / r["hgmma"] for k in ("uniform", "umov")}
        print(f"{name:34} {r['loop']:5} {r['hgmma']:6} {per['uniform']:16.2f} {per['umov']:13.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
