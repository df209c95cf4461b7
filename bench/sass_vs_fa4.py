"""Our attention kernels' hot loops beside FlashAttention-4's, instruction by instruction, without a GPU.

Why: the speed goal is set by FlashAttention-4 (FA4) on the H200, and device time is scarce. FA4's Hopper kernels
are CuTe-DSL Python that its package can compile on a machine without a GPU (fake tensors, ``CUTE_DSL_ARCH``), so
the machine code the H200 runs can be read here, beside ours: what each loop iteration issues (its length, wgmma,
exponentials, shared loads and stores and their width, uniform-datapath work, barriers and waits) and in what
order. That points a measurement at the right place; it is no timing (a count says nothing of stalls).

Two steps, two interpreters (FA4 needs torch and nvidia-cutlass-dsl; tklab's environment has neither):

    python -m venv /tmp/fa4cpu && /tmp/fa4cpu/bin/pip install nvidia-cutlass-dsl==4.8.1 \\
        nvidia-cutlass-dsl-libs-cu13==4.8.1 torch einops "apache-tvm-ffi>=0.1.11,<0.2" \\
        && /tmp/fa4cpu/bin/pip install --no-deps flash-attn-4==4.0.0b36 quack-kernels==0.6.5
    /tmp/fa4cpu/bin/python bench/sass_vs_fa4.py compile-fa4 --out /tmp/fa4_cubins
    python bench/sass_vs_fa4.py compare --fa4 /tmp/fa4_cubins            # writes bench/results/sass_vs_fa4_*.md

``compile-fa4`` imports nothing from tklab; ``compare`` nothing from FA4 (it reads the cubins and the tile sizes
saved beside them).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CASES = [(d, causal) for d in (128, 64) for causal in (False, True)]


# ---- step 1, in FA4's environment ------------------------------------------------------------------------
def compile_fa4(out: Path) -> None:
    """FA4's SM90 forward and backward for each case, compiled for sm_90a from fake tensors (each in a process of
    its own: CuTe DSL reads its environment once); the main kernel's cubin of each as
    ``{fwd,bwd}_d{d}_c{causal}.cubin`` and FA4's tile sizes in ``tiles.json``."""
    out.mkdir(parents=True, exist_ok=True)
    tiles: dict[str, Any] = {"flash_attn_4": _version("flash-attn-4"), "cutlass_dsl": _version("nvidia-cutlass-dsl")}
    for d, causal in CASES:
        for kind in ("fwd", "bwd"):
            key = f"{kind}_d{d}_c{int(causal)}"
            dump = out / f"dump_{key}"
            dump.mkdir(exist_ok=True)
            env = os.environ | {"FLASH_ATTENTION_ARCH": "sm_90",  # which kernel family FA4 picks
                                "CUTE_DSL_ARCH": "sm_90a",  # what CuTe DSL compiles for
                                "FLASH_ATTENTION_NUM_SMS": "132",  # the H200's SMs (FA4's heuristics read it)
                                "CUTE_DSL_KEEP": "cubin", "CUTE_DSL_DUMP_DIR": str(dump)}
            done = subprocess.run([sys.executable, __file__, "compile-fa4-one", kind, str(d), str(int(causal))],
                                  env=env, capture_output=True, text=True)
            if done.returncode:
                raise SystemExit(f"{key}: FA4's compile failed:\n{done.stderr[-3000:]}")
            tiles[key] = json.loads(done.stdout.strip().splitlines()[-1])
            main = [p for p in dump.glob("*.cubin") if ("FlashAttentionForwardSm90" if kind == "fwd"
                                                         else "FlashAttentionBackwardSm90") in p.name]
            if len(main) != 1:
                raise SystemExit(f"{key}: expected one main-kernel cubin in {dump}, got {main}")
            (out / f"{key}.cubin").write_bytes(main[0].read_bytes())
    (out / "tiles.json").write_text(json.dumps(tiles, indent=1))
    print(f"wrote {len(CASES) * 2} cubins and tiles.json to {out}")


def compile_fa4_one(kind: str, d: int, causal: bool) -> None:
    """One case through FA4's own entry point under torch's fake tensors (nothing runs); prints its tile sizes."""
    import torch
    from flash_attn.cute import interface as fa4
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        q, k, v, do = (torch.empty(2, 4096, 2048 // d, d, dtype=torch.bfloat16, device="cuda") for _ in range(4))
        if kind == "fwd":
            fa4._flash_attn_fwd(q, k, v, causal=causal)
            cfg = fa4._tile_size_fwd_sm90(d, d, causal, False)
            print(json.dumps({"rows": cfg.m_block_size, "keys": cfg.n_block_size}))
        else:
            lse = torch.empty(2, 2048 // d, 4096, dtype=torch.float32, device="cuda")
            fa4._flash_attn_bwd(q, k, v, torch.empty_like(q), do, lse, causal=causal)
            bcfg = fa4._tile_size_bwd_sm90(d, d, causal, False)
            print(json.dumps({"queries": bcfg.m_block_size, "keys": bcfg.n_block_size}))


def _version(dist: str) -> str:
    from importlib.metadata import version

    return version(dist)


# ---- step 2, in tklab's environment ----------------------------------------------------------------------
# The loop's reading (events in order, counts by kind) is tklab.toolchain.loop_events: notebooks use it too.
def ours(kind: str, d: int, causal: bool, options: dict[str, int]) -> tuple[list[tuple[str, str]], int, int]:
    """Our kernel's hot loop, and the work one iteration of one warp does: (rows, keys) for the forward (its 16
    query rows x BC keys), (keys, queries) for the backward (its 16 keys x QSTEP queries)."""
    import tklab
    from tklab.toolchain import loop_events

    if kind == "fwd":
        from tklab import attention

        cfg = attention.build("hopper", d, **options)
        sass = tklab.compile(cfg.text(), arch="sm_90a", name=cfg.source.name, options=cfg.options)["flash_fwd"].sass
        return loop_events.hot_loop(sass), 16, cfg.option("BC")
    from tklab.kernels import attention_bwd

    b = attention_bwd.build(d, **options)
    sass = tklab.compile(attention_bwd.source(b), arch="sm_90a", name=attention_bwd.source_name(b),
                         options=b.options)["flash_bwd"].sass
    return loop_events.hot_loop(sass), 16, b.qstep


def compare(fa4_dir: Path, out: Path | None, variants: dict[str, dict[str, dict[str, int]]]) -> Path:
    from tklab.toolchain import loop_events
    from tklab.toolchain.loop_events import GROUPS
    from tklab.toolchain.sass import disassemble

    tiles = json.loads((fa4_dir / "tiles.json").read_text())
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()
    today = datetime.date.today().isoformat()
    lines = [f"# Hot loops beside FlashAttention-4's, {today}", "",
             f"- commit: {commit}{' (+ uncommitted changes)' if dirty else ''}; no GPU: every kernel compiled for "
             f"sm_90a on the CPU and disassembled (ours by NVRTC, FA4 {tiles['flash_attn_4']} by CuTe DSL "
             f"{tiles['cutlass_dsl']} from fake tensors)",
             "- written by `python bench/sass_vs_fa4.py compare` (the module's docstring has both steps)",
             "- one iteration of one warp's main loop: the forward's key block (its 16 query rows x the block's keys),"
             " the backward's query step (its 16 keys x the step's queries). `per 1k` = loop instructions per 1024 "
             "score elements of that work. A static count: a branch's both sides are in it (our kernels decide "
             "causal masking at run time, FA4 compiles a kernel per case), and it says nothing of stalls.", ""]
    head = ["kernel", "who", "work", "loop", "per 1k", *GROUPS, "16-byte st"]  # GROUPS: loop_events' kinds
    for kind in ("fwd", "bwd"):
        lines += [f"## {'Forward' if kind == 'fwd' else 'Backward'}", "", "| " + " | ".join(head) + " |",
                  "|" + "---|" * len(head)]
        orders: list[str] = []
        for d, causal in CASES:
            key = f"{kind}_d{d}_c{int(causal)}"
            sass = next(iter(disassemble((fa4_dir / f"{key}.cubin").read_bytes()).values()))
            loop, t = loop_events.hot_loop(sass), tiles[key]
            work = 16 * (t["keys"] if kind == "fwd" else t["queries"])
            rows = [("FlashAttention-4", loop, work)]
            for name, opts in variants[kind].items():
                try:
                    ol, a, b = ours(kind, d, causal, opts)
                except ValueError:  # an option for the other head dimension (QSTEP=80 at d = 128 only)
                    continue
                rows.append((name, ol, a * b))
            for who, lp, w in rows:
                p = loop_events.counts(lp)
                lines.append(f"| {kind} d={d}{' causal' if causal else ''} | {who} | 16x{w // 16} | {p['loop']} | "
                             f"{1024 * p['loop'] / w:.0f} | " + " | ".join(str(p[g]) for g in GROUPS)
                             + f" | {p['16-byte st']} |")
                orders.append(f"- {kind} d={d}{' causal' if causal else ''}, {who}: `{loop_events.events(lp)}`")
        lines += ["", "Order of events in the loop (runs merged; `mma64r`: a wgmma of N = 64 with A from registers):",
                  "", *orders, ""]
    path = out or ROOT / "bench" / "results" / f"sass_vs_fa4_{today}_{commit}.md"
    path.write_text("\n".join(lines))
    return path


#: Our builds beside FA4's: the defaults and the options written to close the gap (timed: bench/results/flash_bwd_*).
VARIANTS = {"fwd": {"ch10 default": {}, "ch10 MASK_SPLIT=1": {"MASK_SPLIT": 1}},
            "bwd": {"ch11 default": {}, "ch11 DQ_UNDER_DK=1": {"DQ_UNDER_DK": 1},  # = the default since 12-05
                    "ch11 DQ_UNDER_DK=0 (dK first, before 12-05)": {"DQ_UNDER_DK": 0},
                    "ch11 FA4 step (DQ_UNDER_DK, DQ_FRAGMENTS, STATS_EARLY)":
                        {"DQ_UNDER_DK": 1, "DQ_FRAGMENTS": 1, "STATS_EARLY": 1},
                    "ch11 QSTEP=80": {"QSTEP": 80},
                    "ch11 FA4 step, QSTEP=80": {"DQ_UNDER_DK": 1, "DQ_FRAGMENTS": 1, "STATS_EARLY": 1, "QSTEP": 80}}}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("compile-fa4", help="in FA4's environment: FA4's SM90 kernels for sm_90a, from fake tensors")
    c.add_argument("--out", type=Path, required=True)
    one = sub.add_parser("compile-fa4-one", help=argparse.SUPPRESS)
    one.add_argument("kind", choices=["fwd", "bwd"])
    one.add_argument("d", type=int)
    one.add_argument("causal", type=int)
    m = sub.add_parser("compare", help="in tklab's environment: the table, from those cubins and our builds")
    m.add_argument("--fa4", type=Path, required=True)
    m.add_argument("--out", type=Path)
    args = p.parse_args()
    if args.cmd == "compile-fa4":
        compile_fa4(args.out)
    elif args.cmd == "compile-fa4-one":
        compile_fa4_one(args.kind, args.d, bool(args.causal))
    else:
        sys.path.insert(0, str(ROOT))
        print(compare(args.fa4, args.out, VARIANTS))


if __name__ == "__main__":
    main()
