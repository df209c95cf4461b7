"""Chapter 08's GEMM progression against cuBLAS: every step, checked, then timed three ways, three rounds.

The kernels and their launches live in ``tklab.kernels.gemm`` (one ``Step`` per row of the chapter's table). Run
``python bench/gemm_wgmma.py`` on an H100/H200: it checks every step on fresh random inputs against a
float64 reference (tile multiples for steps 1-2; awkward shapes such as 1000³ and 4096x4000x1032 for the
persistent steps), then times cuBLAS (torch.matmul) and each step at 4096³ and 8192³ in the same run and
writes ``bench/results/gemm_wgmma_<date>_<commit>.md`` (and ``--json``). ``--shapes issue27`` (or MxNxK ...)
times issue 27's shape set instead of --sizes (non-multiples of the tile, small and LLM-like problems); the
stream-K variants (``--steps 5_cluster,6_stream_k,...``) are timed beside step 5. ``--check-only`` skips timing;
``--sanitize STEP M N K`` runs one small GEMM of one step (for compute-sanitizer). On a machine without
the git history set GIT_COMMIT to the commit being measured.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import tklab  # noqa: E402
from tklab import gemm, recorded  # noqa: E402

#: Extra variants timed beside the steps (knobs the chapter discusses).
VARIANTS = gemm.VARIANTS
#: Candidates for closing the 4096³ gap, timed only when named with --steps (bench/notes/gemm_wgmma.md has
#: what each tests and what it measured).
EXPERIMENTS: dict[str, gemm.Step] = {
    "5_cluster_s3_c4": gemm.STEPS["5_cluster"].with_options("-DSTAGES=3", "-DC_BUFFERS=4", name="5_cluster_s3_c4"),
    "4_l2_order_s3_c4": gemm.STEPS["4_l2_order"].with_options("-DSTAGES=3", "-DC_BUFFERS=4", name="4_l2_order_s3_c4"),
    "5_cluster_group4": gemm.STEPS["5_cluster"].with_options("-DGROUP_M=4", name="5_cluster_group4"),
    "5_cluster_group16": gemm.STEPS["5_cluster"].with_options("-DGROUP_M=16", name="5_cluster_group16"),
    # stream-K with longer runs per block (fewer, larger pieces; the default is 8 K-slices)
    "6_stream_k_min16": gemm.VARIANTS["6_stream_k"].with_options("-DSK_MIN_SLICES=16", name="6_stream_k_min16"),
    "6_stream_k_min4": gemm.VARIANTS["6_stream_k"].with_options("-DSK_MIN_SLICES=4", name="6_stream_k_min4"),
    # one wgmma group left running per consumer (the next slice's products queued while this one's stage waits)
    "5_cluster_if1": gemm.STEPS["5_cluster"].with_options("-DIN_FLIGHT=1", name="5_cluster_if1"),
    "6_stream_k_if1": gemm.VARIANTS["6_stream_k"].with_options("-DIN_FLIGHT=1", name="6_stream_k_if1"),
}

TILE_SHAPES = [(128, 256, 64), (256, 512, 192), (384, 768, 1024), (1024, 256, 2048), (2048, 4096, 512)]
AWKWARD_SHAPES = [(1000, 1000, 1000), (4096, 4000, 1032), (1, 8, 8), (129, 264, 72), (3000, 256, 8), (4096, 4096, 4096)]


def shapes_for(s: gemm.Step) -> list[tuple[int, int, int]]:
    """The shapes a step is checked on: tile multiples it accepts, plus awkward ones for the persistent steps."""
    ok = []
    for m, n, k in TILE_SHAPES + (AWKWARD_SHAPES if s.persistent else []):
        try:
            gemm.check_shapes(s, m, n, k)
            ok.append((m, n, k))
        except ValueError:
            pass
    return ok


def check(s: gemm.Step, shapes: list[tuple[int, int, int]]) -> list[dict[str, Any]]:
    """Run step ``s`` at each shape on fresh random inputs (C poisoned with NaN); errors vs float64."""
    import torch

    out = []
    for m, n, k in shapes:
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        gemm.prepare(a, b, c, step=s)()
        torch.cuda.synchronize()
        e = gemm.errors(c, a, b)
        out.append({"step": s.name, "shape": [m, n, k], "rel": e.rel, "unwritten": e.unwritten,
                    "first_wrong": e.first_wrong, "ok": e.ok()})
    return out


def compile_facts(steps: dict[str, gemm.Step]) -> list[dict[str, Any]]:
    """Registers, spills, SASS counts and ptxas serialization warnings of every step (CPU work)."""
    facts = []
    for name, s in steps.items():
        k = gemm.compiled(s)
        warnings = [ln.strip() for ln in k.module.log.splitlines() if "C75" in ln]
        facts.append({"step": name, "options": list(s.options), "registers": k.registers, "spill": k.spill_bytes,
                      **{op: k.histogram.get(op, 0) for op in ("HGMMA", "UTMALDG", "UTMASTG")},
                      **gemm.launch_facts(k.module), "serialization_warnings": warnings})
    return facts


def report(checks: list[dict[str, Any]], timing: dict[str, Any] | None, facts: list[dict[str, Any]]) -> str:
    """The markdown report: device, commit, compile facts, correctness, the progression table, raw rows."""
    import torch

    lines = [f"# Chapter 08 GEMM progression vs cuBLAS — {datetime.date.today().isoformat()}", "",
             f"- device: {torch.cuda.get_device_name()} ({tklab.run.gpu.arch()}), torch {torch.__version__}",
             f"- commit: {recorded.commit()}; date: {datetime.datetime.now().isoformat(timespec='seconds')}",
             f"- NVRTC: {recorded.nvrtc()} (its ptxas schedules the kernels' SASS)", "",
             "## compile facts", "", "| step | options | regs | spill | HGMMA | UTMALDG | UTMASTG | threads | "
             "shared B | cluster | C75xx |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {f['step']} | {' '.join(f['options'])} | {f['registers']} | {f['spill']} | {f['HGMMA']} | "
              f"{f['UTMALDG']} | {f['UTMASTG']} | {f['threads']} | {f['shared_bytes']} | {f['cluster']} | "
              f"{len(f['serialization_warnings'])} |" for f in facts]
    lines += ["", "## correctness (fresh random inputs, C poisoned with NaN, float64 reference)", "",
              "| step | M×N×K | rel. error | unwritten | verdict |", "|---|---|---|---|---|"]
    lines += [f"| {c['step']} | {'×'.join(map(str, c['shape']))} | {c['rel']:.2e} | {c['unwritten']} | "
              f"{'ok' if c['ok'] else 'FAIL ' + c['first_wrong']} |" for c in checks]
    if not checks:
        lines += ["", "(not checked in this run: --skip-check)"]
    if timing:
        lines += ["", "## speed", "", gemm.METHOD_TEXT, "", gemm.table(timing), "", "### raw rows (TFLOP/s)", "",
                  "| n³ or M×N×K | round | who | host µs | bench | graph | batched |", "|---|---|---|---|---|---|---|"]
        lines += [f"| {r['n']} | {r['round']} | {r['who']} | {r['host_us']:.0f} | {r['bench']:.0f} | "
                  f"{r['graph']:.0f} | {r['batched']:.0f} |" for r in timing["rows"]]
    return "\n".join(lines) + "\n"


def parse_shapes(items: list[str], p: argparse.ArgumentParser) -> list[int | tuple[int, int, int]]:
    """--shapes: "MxNxK" problems and named sets (gemm.SHAPES), in the order given; n x n x n becomes n."""
    out: list[int | tuple[int, int, int]] = []
    for item in items or ["issue27"]:
        if item in gemm.SHAPES:
            out += [m if m == n == k else (m, n, k) for m, n, k in gemm.SHAPES[item]]
            continue
        parts = item.lower().split("x")
        if len(parts) != 3 or not all(x.isdigit() and int(x) > 0 for x in parts):
            p.error(f"--shapes: {item!r} is neither MxNxK (e.g. 4096x4000x1032) nor a set ({', '.join(gemm.SHAPES)})")
        m, n, k = map(int, parts)
        out.append(m if m == n == k else (m, n, k))
    return out


def timed(problems: list[int | tuple[int, int, int]], args: argparse.Namespace,
          steps: dict[str, gemm.Step]) -> dict[str, Any]:
    """gemm.progression one problem at a time, printing each problem's table (and saving the JSON so far) as it
    is measured: a run cut short by a time limit still leaves what it measured."""
    result: dict[str, Any] | None = None
    for shape in problems:
        part = gemm.progression((shape,), args.rounds, steps, args.target_ms)
        if result is None:
            result = part
        else:
            result["sizes"] += part["sizes"]
            result["rows"] += part["rows"]
        print(gemm.table(part), flush=True)
        if args.json:
            args.json.write_text(json.dumps({"timing": result}, indent=1))
    assert result is not None
    return result


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--check-only", action="store_true")
    p.add_argument("--skip-check", action="store_true", help="time without the float64 checks first (for a rerun "
                   "of kernels already checked at this commit)")
    p.add_argument("--sanitize", nargs=4, metavar=("STEP", "M", "N", "K"))
    p.add_argument("--sizes", nargs="*", type=int, default=[4096, 8192])
    p.add_argument("--shapes", nargs="*", default=None, metavar="MxNxK|SET",
                   help=f"time these problems instead of --sizes: MxNxK, or a set ({', '.join(gemm.SHAPES)}: "
                   "4096³, 8192³, 4000³, 2048³, 1000³, 4096x4000x1032 and LLM-like layers)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--target-ms", type=float, default=150.0, help="device time per measurement (tklab.bench)")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    p.add_argument("--json", type=Path, help="also write the raw results here")
    p.add_argument("--steps", default="", help="comma-separated steps, variants or EXPERIMENTS (default: steps "
                   "and variants)")
    args = p.parse_args()
    known = dict(gemm.STEPS) | VARIANTS | EXPERIMENTS
    names = [x.strip() for x in args.steps.split(",") if x.strip()] or list(dict(gemm.STEPS) | VARIANTS)
    unknown = [x for x in names if x not in known]
    if unknown:
        p.error(f"unknown steps {unknown}; known: {', '.join(known)}")
    steps = {x: known[x] for x in names}
    if args.sanitize:
        name, *mnk = args.sanitize
        ((res,),) = [check(steps[name], [tuple(int(x) for x in mnk)])]  # type: ignore[list-item]
        print(f"sanitize run {name} {mnk}: {res}")
        return 0 if res["ok"] else 1
    facts = compile_facts(steps)
    checks = [] if args.skip_check else [c for s in steps.values() for c in check(s, shapes_for(s))]
    for c in checks:
        print(f"check {c['step']} {c['shape']}: rel {c['rel']:.2e} {'ok' if c['ok'] else 'FAIL'}")
    problems = parse_shapes(args.shapes, p) if args.shapes is not None else list(args.sizes)
    timing = None if args.check_only else timed(problems, args, steps)
    text = report(checks, timing, facts)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"gemm_wgmma_{datetime.date.today().isoformat()}_{recorded.commit()}.md"
    path.write_text(text)
    if args.json:
        args.json.write_text(json.dumps({"facts": facts, "checks": checks, "timing": timing}, indent=1))
    print(text)
    return 0 if all(c["ok"] for c in checks) else 1


if __name__ == "__main__":
    raise SystemExit(main())
