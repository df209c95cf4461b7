"""How long the CPU emulator takes for the Hopper chapters' solutions, per TMA completion order, on this machine.

    python bench/emulate_async_times.py [--repeat 3] [--git REF]   # prints a table (median run seconds)

For ch07 (TMA ring), ch08 (wgmma GEMM) and ch10 (FlashAttention forward), the exercise's emulable cases (what
``tklab.check`` runs without a GPU) and one larger case each, launched as the check launches them, under each
``tma_order``; the build is timed once (a warm cache: the runtime library and the prelude exist). With ``--git
REF`` the same is measured for a checkout of REF in a temporary worktree, under the same load, to compare
before and after a change of the emulator. The issue's target: the ch10 check stays well under 60 s on a
2-core machine.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NAMES = {"ch07": "ch07_tma_ring", "ch08": "ch08_wgmma", "ch10": "ch10_flash"}
LARGER = {"ch07": {"M": 3000, "N": 1000}, "ch08": {"M": 128, "N": 512, "K": 320},
          "ch10": {"B": 1, "H": 2, "N": 512, "causal": 1}}

CHILD = r"""
import json, statistics, sys, time
import numpy as np
from tklab.grading import specs
from tklab.grading import emulated as exercise
import tklab.emulate as emu
names, larger, repeat = json.loads(sys.argv[1])
orders = list(getattr(emu, "TMA_ORDERS", {"(one order)": 0}))
for key, exercise_name in names.items():
    spec = specs.get(exercise_name)
    t = time.perf_counter()
    source = open(spec.solution).read()
    kernel = emu.compile(source, arch="sm_90a", name=spec.filename, options=spec.options)[spec.kernel]
    build = time.perf_counter() - t
    for order in orders:
        per_case = []
        for dims in exercise.cases(spec) + [larger[key]]:
            times = []
            for _ in range(repeat):
                host = spec.inputs(np.random.default_rng(3), dims)
                arrays = dict(host)
                for name, (shape, dtype) in spec.outputs(dims).items():
                    arrays[name] = np.zeros(shape, dtype=dtype)
                shape = spec.launch(dims)
                with exercise._cpu_tensor_maps():
                    args = spec.args(arrays, dims)
                kw = {} if order == "(one order)" else {"tma_order": order}
                t = time.perf_counter()
                kernel(shape.grid, shape.block, args, shared_mem=shape.shared_mem, time_limit=600, **kw)
                times.append(time.perf_counter() - t)
            per_case.append(statistics.median(times))
        print(json.dumps({"chapter": key, "order": order, "build_s": build, "check_cases_s": sum(per_case[:-1]),
                          "larger_s": per_case[-1]}), flush=True)
"""


def measure(tree: Path, repeat: int) -> list[dict]:
    import json

    env = dict(os.environ, PYTHONPATH=str(tree))
    out = subprocess.run([sys.executable, "-c", CHILD, json.dumps([NAMES, LARGER, repeat])], cwd=tree, env=env,
                         capture_output=True, text=True, check=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--git", help="also measure this git ref (e.g. main) in a temporary worktree")
    args = ap.parse_args()
    trees = [("this tree", ROOT)]
    tmp = None
    if args.git:
        tmp = tempfile.mkdtemp(prefix="tklab-bench-")
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", tmp, args.git], check=True,
                       capture_output=True)
        trees.insert(0, (args.git, Path(tmp)))
    try:
        print(f"{'tree':>10} {'chapter':>7} {'tma_order':>11} {'build s':>8} {'check cases s':>14} {'larger s':>9}")
        for label, tree in trees:
            for r in measure(tree, args.repeat):
                print(f"{label:>10} {r['chapter']:>7} {r['order']:>11} {r['build_s']:8.1f} {r['check_cases_s']:14.2f} "
                      f"{r['larger_s']:9.2f}")
    finally:
        if tmp:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", tmp], capture_output=True)
    print(f"({time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main()
