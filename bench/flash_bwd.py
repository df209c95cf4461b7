"""FlashAttention backward: chapter 11's kernel against SDPA's backward (cuDNN, FlashAttention-2) and
FlashAttention-4's (when importable), in the same run, on the GPU.

    python bench/flash_bwd.py                     check (float64 autograd on awkward shapes), then bench
    python bench/flash_bwd.py check               correctness only
    python bench/flash_bwd.py bench [--configs 128,8192,0;64,4096,1] [--rounds 3] [--variants all]
    python bench/flash_bwd.py bench --configs 64,4096,0;64,4096,1 --variants "ch11 dQ TMA reduce,ch11 ping-pong"
    python bench/flash_bwd.py run --d 128 --n 8192 [--causal] [--options PINGPONG=0,STAGES=3] [--who cudnn]
                                                  one backward after a warm-up, between cudaProfilerStart/Stop
                                                  (for ncu / compute-sanitizer; bench/ncu_flash_bwd.sh)

What is timed is the backward alone, as a model calls it: dQ, dK, dV from a retained forward. The
libraries through ``torch.autograd.grad(out, (q, k, v), dO, retain_graph=True)`` (their own preprocess
and dQ passes included), ours through ``attention_bwd.prepare(...)`` (its three kernels). Each contender
is called back to back in batches with CUDA events around each batch (no L2 flush, no per-call sync:
device time of a training step's backward; median of 3 batches), 3 rounds in rotating order; the SM clock is read with
nvidia-smi after every round, so a throttled round shows. FLOPs: 2.5x the forward's 4·B·H·N²·d, halved
for causal (the anchors' count). Writes ``bench/results/flash_bwd_<date>_<commit>.md`` (and .json; also
into $OUT when set). Set GIT_COMMIT on machines without git.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tklab import recorded  # noqa: E402
from tklab.kernels import attention, attention_bwd  # noqa: E402

#: (d, N, causal) of the anchors' backward table; batch = 16384 / N, heads = 2048 / d.
CONFIGS = [(d, n, c) for d in (128, 64) for n in (4096, 8192) for c in (False, True)]
CHECK_SHAPES = [(1, 2, 1), (2, 2, 77), (1, 2, 128), (1, 3, 1000), (1, 1, 4097)]


def _out_dirs() -> list[Path]:
    dirs = [ROOT / "bench" / "results"]
    if os.environ.get("OUT"):
        dirs.append(Path(os.environ["OUT"]))
    return dirs


def sm_clock() -> str:
    """The SM clock now (MHz) as nvidia-smi reports it, or why not."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,clocks.max.sm,temperature.gpu,power.draw",
                              "--format=csv,noheader"], capture_output=True, text=True, timeout=20)
        return out.stdout.strip().splitlines()[0] if out.stdout.strip() else out.stderr.strip()[:80]
    except (OSError, subprocess.SubprocessError) as e:
        return f"nvidia-smi failed: {e}"


def _inputs(b: int, h: int, n: int, d: int, *, layout: str = "bhnd", logit_scale: float = 1.0) -> list[Any]:
    import torch

    def one() -> Any:
        if layout == "bnhd":
            return torch.randn(b, n, h, d, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
        return torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16)

    q, k, v, do = one(), one(), one(), one()
    if logit_scale != 1.0:
        q = (q.float() * logit_scale).to(torch.bfloat16)
    return [q, k, v, do]


# ---- check -------------------------------------------------------------------------------------------------
def check() -> list[dict[str, Any]]:
    """Our forward + backward (both dQ modes, and CHECK_VARIANTS) against float64 autograd of PyTorch's math
    attention."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    cases = [(b, h, n, d, c, "bhnd", 1.0) for b, h, n in CHECK_SHAPES for d in (64, 128) for c in (False, True)]
    cases += [(1, 2, 1000, d, c, "bhnd", 8.0) for d in (64, 128) for c in (False, True)]  # large logits
    cases += [(2, 3, 300, 128, c, "bnhd", 1.0) for c in (False, True)]
    rows = []
    for b, h, n, d, causal, layout, ls in cases:
        q, k, v, do = _inputs(b, h, n, d, layout=layout, logit_scale=ls)
        o, lse = attention.flash_fwd(q, k, v, causal=causal)
        qd, kd, vd = (x.detach().double().requires_grad_() for x in (q, k, v))
        with sdpa_kernel(SDPBackend.MATH):
            out = torch.nn.functional.scaled_dot_product_attention(qd, kd, vd, is_causal=causal)
        ref = torch.autograd.grad(out, (qd, kd, vd), do.double())
        for opts in [{"DQ_MODE": 0}, {"DQ_MODE": 1}, {"DQ_MODE": 2}, *CHECK_VARIANTS[d]]:
            grads = attention_bwd.flash_bwd(q, k, v, o, lse, do, causal=causal, **opts)
            errs = [attention_bwd.grad_errors(nm, g.double().cpu().numpy(), r.cpu().numpy())
                    for nm, g, r in zip(("dq", "dk", "dv"), grads, ref, strict=True)]
            mode = opts.get("DQ_MODE", attention_bwd.DEFAULTS[d]["DQ_MODE"])
            label = ",".join(f"{key}={val}" for key, val in opts.items())
            row = {"shape": [b, h, n, d], "causal": causal, "layout": layout, "logit_scale": ls, "dq_mode": mode,
                   "options": label, "ok": all(e.ok() for e in errs), "errors": [str(e) for e in errs],
                   "worst_rel": max(e.rel for e in errs)}
            rows.append(row)
            print(f"check {row['shape']} causal={int(causal)} {layout} x{ls:g} {label}: "
                  f"{'ok' if row['ok'] else 'FAILED'} ({'; '.join(row['errors'])})", flush=True)
    return rows


def determinism(n: int = 4097, d: int = 128, runs: int = 5) -> list[dict[str, Any]]:
    """Run the same backward several times: how many elements of dQ (summed by atomic additions in an
    order the blocks' timing decides, DQ_MODE 0 and 1; in a fixed order from slots, DQ_MODE 2; by reduce-adds in
    turns, DETERMINISTIC=1) and of dK, dV (each written by one block) differ bit for bit."""
    import torch

    q, k, v, do = _inputs(2, 4, n, d)
    o, lse = attention.flash_fwd(q, k, v, causal=False)
    rows = []
    for opts in ({"DQ_MODE": 0}, {"DQ_MODE": 1}, {"DQ_MODE": 2}, {"DETERMINISTIC": 1}):
        mode = opts.get("DQ_MODE", 1)
        first = attention_bwd.flash_bwd(q, k, v, o, lse, do, **opts)
        differ = [0, 0, 0]
        for _ in range(runs - 1):
            again = attention_bwd.flash_bwd(q, k, v, o, lse, do, **opts)
            for j in range(3):
                differ[j] = max(differ[j], int((again[j].view(torch.int16) != first[j].view(torch.int16)).sum()))
        rows.append({"dq_mode": mode, "options": ",".join(f"{key}={val}" for key, val in opts.items()),
                     "shape": [2, 4, n, d], "runs": runs, "dq_elements_differing": differ[0],
                     "dk_elements_differing": differ[1], "dv_elements_differing": differ[2],
                     "elements": first[0].numel()})
        print(f"determinism {rows[-1]['options']}: {rows[-1]}", flush=True)
    return rows


# ---- bench -------------------------------------------------------------------------------------------------
def _fa4() -> Any:
    """FlashAttention-4's flash_attn_func ([b, n, h, d] inputs), or None when it is not installed."""
    try:
        from flash_attn.cute import flash_attn_func  # type: ignore[import-not-found]
    except Exception as e:  # noqa: BLE001 - any import failure means: not here
        print(f"  FlashAttention-4 not importable ({type(e).__name__}: {str(e)[:100]}); skipped", flush=True)
        return None
    return flash_attn_func


#: Our variants: name -> options over attention_bwd.DEFAULTS. The first two run by default (--variants
#: all adds the rest).
VARIANTS: dict[str, dict[str, int]] = {
    "ch11 dQ atomicAdd": {"DQ_MODE": 0},
    "ch11 default": {},  # attention_bwd.build's default: at d = 128 the ping-pong variant, at d = 64 the chapter's
    # the chapter's kernel (d = 128's default until ping-pong ran ahead of it)
    "ch11 dQ TMA reduce": {"DQ_MODE": 1, "PINGPONG": 0},
    "ch11 dQ slots (deterministic)": {"DQ_MODE": 2},  # a slot per key block, summed in order by the last pass
    "ch11 1 consumer": {"CONSUMERS": 1},
    "ch11 3 stages": {"STAGES": 3},
    "ch11 uniform": {"UNIFORM": 1},  # the consumer index warp-uniform: no R2UR before each wgmma (d=128's default)
    "ch11 not uniform": {"UNIFORM": 0},  # d=128's default until UNIFORM=1 measured faster there
    "ch11 dQ lagged": {"DQ_LAG": 1},  # d = 128: dQ one step late, the consumers no longer meet twice a step
    "ch11 ping-pong": {"PINGPONG": 1},  # the consumers take turns issuing (d = 128: with the lagged dQ)
    # S^T = K Q^T, P^T and dS^T the register A operand of dV and dK; 128-query steps at d = 64, 64 at d = 128
    "ch11 swapAB": {"SWAPAB": 1},
    "ch11 swapAB uniform": {"SWAPAB": 1, "UNIFORM": 1},  # its wgmma descriptors in uniform registers (d=128's default)
    "ch11 swapAB not uniform": {"SWAPAB": 1, "UNIFORM": 0},  # d = 64's default
    "ch11 swapAB dQ by consumers": {"SWAPAB": 1, "DQ_WRITER": 0},  # no dQ writer warp: each consumer sends its own
    "ch11 swapAB uniform dQ by consumers": {"SWAPAB": 1, "UNIFORM": 1, "DQ_WRITER": 0},  # the writer's A/B at d=128
    "ch11 swapAB 80": {"SWAPAB": 1, "QSTEP": 80},  # d = 128 only: 80-query steps, dQ^T stored transposed
    # the chapter's kernel with dQ the same bit for bit: the key blocks add each step's dQ in turns (no O(N^2) slots)
    "ch11 deterministic": {"DETERMINISTIC": 1},
    # solutions/variants/ch11_step_options.cu: dQ's part issued before dK and stored for the writer while dK runs
    # (DQ_UNDER_DK=1, the chapter's order now, so "ch11 dQ under dK" is the default now, kept for the
    # reports that name it; DQ_UNDER_DK=0 is the order before), L and D loaded early (STATS_EARLY). The chapter's
    # kernel: dQ parked in register order with 16-byte stores (DQ_FRAGMENTS, its default at d = 128; at d = 64
    # "ch11 dQ fragments" turns it on, "ch11 dQ as tile" off at d = 128)
    "ch11 dQ under dK": {"DQ_UNDER_DK": 1},
    "ch11 dQ after dK": {"DQ_UNDER_DK": 0},
    "ch11 dQ fragments": {"DQ_FRAGMENTS": 1},
    "ch11 dQ as tile": {"DQ_FRAGMENTS": 0},  # dQ's part at its (row, column) in a swizzled tile: d = 64's default
    "ch11 dQ under dK + fragments": {"DQ_UNDER_DK": 1, "DQ_FRAGMENTS": 1},
    "ch11 dQ under dK + fragments 80": {"DQ_UNDER_DK": 1, "DQ_FRAGMENTS": 1, "QSTEP": 80},  # d = 128 only
    "ch11 dQ under dK + fragments deterministic": {"DQ_UNDER_DK": 1, "DQ_FRAGMENTS": 1, "DETERMINISTIC": 1},
    "ch11 stats early": {"STATS_EARLY": 1},  # L and D loaded before the waits for S^T and dP^T
    "ch11 FA4 step": {"DQ_UNDER_DK": 1, "DQ_FRAGMENTS": 1, "STATS_EARLY": 1},  # all three
    "ch11 FA4 step 80": {"DQ_UNDER_DK": 1, "DQ_FRAGMENTS": 1, "STATS_EARLY": 1, "QSTEP": 80},  # d = 128 only
}
#: Options checked against float64 autograd besides the two dQ modes, per head dimension.
CHECK_VARIANTS: dict[int, list[dict[str, int]]] = {64: [{"PINGPONG": 1}, {"STAGES": 3}, {"SWAPAB": 1},
                                                        {"SWAPAB": 1, "UNIFORM": 1}, {"DETERMINISTIC": 1},
                                                        {"DQ_UNDER_DK": 1, "DQ_FRAGMENTS": 1, "STATS_EARLY": 1}],
                                                   128: [{"PINGPONG": 0}, {"UNIFORM": 0}, {"SWAPAB": 1},
                                                         {"SWAPAB": 1, "UNIFORM": 0}, {"SWAPAB": 1, "QSTEP": 80},
                                                         {"DQ_FRAGMENTS": 0},
                                                         {"DETERMINISTIC": 1},
                                                         {"DQ_UNDER_DK": 1, "DQ_FRAGMENTS": 1, "STATS_EARLY": 1},
                                                         {"DQ_UNDER_DK": 1, "DQ_FRAGMENTS": 1, "STATS_EARLY": 1,
                                                          "QSTEP": 80}]}
DEFAULT_VARIANTS = ["ch11 default", "ch11 dQ TMA reduce"]


def contenders(q: Any, k: Any, v: Any, do: Any, causal: bool, variants: list[str] = DEFAULT_VARIANTS
               ) -> dict[str, Any]:
    """name -> run() computing dQ, dK, dV once (the forward already done and retained)."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    out: dict[str, Any] = {}
    o, lse = attention.flash_fwd(q, k, v, causal=causal)
    dq, dk, dv = (torch.empty_like(q) for _ in range(3))
    for name in variants:
        try:
            out[name] = attention_bwd.prepare(q, k, v, o, lse, do, dq, dk, dv, causal=causal, **VARIANTS[name])
        except ValueError as e:  # e.g. a variant that does not fit in shared memory
            print(f"  {name}: {e}", flush=True)
    leaves = [x.detach().clone().requires_grad_() for x in (q, k, v)]
    for name, backend in (("sdpa cudnn", SDPBackend.CUDNN_ATTENTION), ("sdpa flash (FA2)", SDPBackend.FLASH_ATTENTION)):
        try:
            with sdpa_kernel(backend):
                y = torch.nn.functional.scaled_dot_product_attention(*leaves, is_causal=causal)

            def run(y: Any = y) -> Any:
                return torch.autograd.grad(y, leaves, do, retain_graph=True)

            run()
            out[name] = run
        except RuntimeError as e:
            print(f"  {name} unavailable: {str(e)[:120]}", flush=True)
    fa4 = _fa4()
    if fa4 is not None:
        try:
            lv = [x.detach().transpose(1, 2).contiguous().requires_grad_() for x in (q, k, v)]  # [b, n, h, d]
            res = fa4(*lv, causal=causal)
            y4 = res[0] if isinstance(res, tuple) else res
            do4 = do.transpose(1, 2).contiguous()

            def run4() -> Any:
                return torch.autograd.grad(y4, lv, do4, retain_graph=True)

            run4()
            out["FlashAttention-4"] = run4
        except Exception as e:  # noqa: BLE001 - FA4 may refuse a configuration: report, go on
            print(f"  FlashAttention-4 failed: {type(e).__name__}: {str(e)[:160]}", flush=True)
    return out


def time_batches(fn: Any, *, batch_ms: float = 40.0, batches: int = 3) -> float:
    """Median ms per call over `batches` batches of back-to-back calls (at least 2 per batch, about
    `batch_ms` each), CUDA events around each batch. Sized so that 8 configurations x 5 contenders x 3
    rounds stay within about two minutes on an H200."""
    import torch

    for _ in range(2):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    reps = max(2, int(batch_ms / max(start.elapsed_time(end), 1e-3)))
    per_call = []
    for _ in range(batches):
        start.record()
        for _ in range(reps):
            fn()
        end.record()
        end.synchronize()
        per_call.append(start.elapsed_time(end) / reps)
    return statistics.median(per_call)


def bench(rounds: int, configs: list[tuple[int, int, bool]], variants: list[str] = DEFAULT_VARIANTS
          ) -> list[dict[str, Any]]:
    rows = []
    for d, n, causal in configs:
        b, h = 16384 // n, 2048 // d
        q, k, v, do = _inputs(b, h, n, d)
        fl = attention_bwd.flops(b, h, n, d, causal)
        runs = contenders(q, k, v, do, causal, variants)
        names = list(runs)
        for r in range(rounds):
            order = names[r % len(names):] + names[:r % len(names)]  # rotate who goes first
            for who in order:
                ms = time_batches(runs[who])
                rows.append({"d": d, "n": n, "causal": causal, "batch": b, "heads": h, "round": r, "who": who,
                             "ms": ms, "tflops": fl / ms / 1e9})
            clock = sm_clock()
            for x in rows[-len(order):]:
                x["sm_clock"] = clock
            print(f"  d={d} n={n} causal={int(causal)} round {r}: " + ", ".join(
                f"{x['who']} {x['tflops']:.0f}" for x in rows[-len(order):]) + f"  [clock, max, temp, power: {clock}]",
                flush=True)
        del runs
    return rows


def ratio_table(rows: list[dict[str, Any]]) -> list[str]:
    lines = ["| d | N | causal | who | TFLOP/s (min–max over rounds) | / cuDNN (same round, min–max) |",
             "|---|---|---|---|---|---|"]
    for d, n, causal in sorted({(x["d"], x["n"], x["causal"]) for x in rows}, key=lambda t: (-t[0], t[1], t[2])):
        sel = [x for x in rows if (x["d"], x["n"], x["causal"]) == (d, n, causal)]
        base = {x["round"]: x["tflops"] for x in sel if x["who"] == "sdpa cudnn"}
        for who in dict.fromkeys(x["who"] for x in sel):
            mine = {x["round"]: x["tflops"] for x in sel if x["who"] == who}
            rs = [mine[r] / base[r] for r in mine if r in base]
            ratio = f"{min(rs):.2f}–{max(rs):.2f}" if rs else "–"
            lines.append(f"| {d} | {n} | {'yes' if causal else 'no'} | {who} | "
                         f"{min(mine.values()):.0f}–{max(mine.values()):.0f} | {ratio} |")
    return lines


def write_report(body: list[str], data: Any) -> Path:
    import torch

    today = datetime.date.today().isoformat()
    head = [f"# FlashAttention backward, {today}", "",
            f"- device: {torch.cuda.get_device_name()}, torch {torch.__version__}, "
            f"cuDNN {torch.backends.cudnn.version()}",
            f"- commit: {recorded.commit()}; date: {datetime.datetime.now().isoformat(timespec='seconds')}",
            f"- NVRTC: {recorded.nvrtc()} (its ptxas schedules the kernels' SASS)",
            f"- SM clock at start (MHz now, max; °C; W): {sm_clock()}",
            "- written by `python bench/flash_bwd.py " + " ".join(sys.argv[1:]) + "`", ""]
    stem = f"flash_bwd_{today}_{recorded.commit()}"
    for folder in _out_dirs():
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{stem}.md").write_text("\n".join(head + body) + "\n")
        (folder / f"{stem}.json").write_text(json.dumps(data, indent=1))
    return _out_dirs()[0] / f"{stem}.md"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("what", nargs="?", default="all", choices=["all", "check", "bench", "run"])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--configs", default="all", help="'all' or e.g. 128,8192,0;64,4096,1")
    p.add_argument("--d", type=int, default=128)
    p.add_argument("--n", type=int, default=8192)
    p.add_argument("--causal", action="store_true")
    p.add_argument("--options", default="", help="run: kernel options over DEFAULTS, e.g. PINGPONG=0,STAGES=3")
    p.add_argument("--who", default="ch11", choices=["ch11", "cudnn", "fa2", "fa4"],
                   help="run: whose backward (the libraries through torch.autograd.grad, as the bench times them)")
    p.add_argument("--variants", default="default", help=f"'default' ({DEFAULT_VARIANTS}), 'all', or names "
                   f"separated by commas from {list(VARIANTS)}")
    args = p.parse_args()
    variants = (DEFAULT_VARIANTS if args.variants == "default" else list(VARIANTS) if args.variants == "all"
                else [v.strip() for v in args.variants.split(",")])
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        p.error(f"unknown variant(s) {unknown}; known: {list(VARIANTS)}")
    status, body, data = 0, [], {}
    if args.what in ("check", "all"):
        rows = check()
        bad = [r for r in rows if not r["ok"]]
        body += [f"## Check: {len(rows)} cases against float64 autograd, {len(bad)} failed", "",
                 "| shape [b, h, n, d] | causal | layout | logit scale | options | ok | errors |",
                 "|---|---|---|---|---|---|---|"]
        body += [f"| {r['shape']} | {int(r['causal'])} | {r['layout']} | {r['logit_scale']:g} | {r['options']} | "
                 f"{'yes' if r['ok'] else 'NO'} | {'; '.join(r['errors'])} |" for r in rows]
        det = determinism()
        body += ["", "Run to run (same inputs, 5 runs, most elements differing from the first run):", "",
                 "| DQ_MODE | shape | dQ | dK | dV | of elements |", "|---|---|---|---|---|---|"]
        body += [f"| {r['dq_mode']} | {r['shape']} | {r['dq_elements_differing']} | {r['dk_elements_differing']} | "
                 f"{r['dv_elements_differing']} | {r['elements']} |" for r in det]
        body.append("")
        data["check"], data["determinism"] = rows, det
        status = 1 if bad else 0
    if args.what in ("bench", "all"):
        configs = CONFIGS if args.configs == "all" else [
            (int(a), int(b), bool(int(c))) for a, b, c in (x.split(",") for x in args.configs.split(";"))]
        rows = bench(args.rounds, configs, variants)
        body += ["## Bench", "", "FLOPs: 2.5 × 4·B·H·N²·d (halved for causal); 16k tokens per batch, hidden 2048; "
                 "back-to-back calls, CUDA events around batches, median of 3 batches; rounds in rotating order.",
                 "", *ratio_table(rows)]
        data["bench"] = rows
        print("\n".join(ratio_table(rows)))
    if args.what in ("check", "bench", "all"):
        print(write_report(body, data))
    if args.what == "run":
        import torch

        b, h = max(1, 16384 // args.n), 2048 // args.d
        q, k, v, do = _inputs(b, h, args.n, args.d)
        opts = {key: int(val) for key, val in (x.split("=") for x in args.options.split(",") if x)}
        if args.who == "ch11":
            o, lse = attention.flash_fwd(q, k, v, causal=args.causal)
            runs = {"ch11": attention_bwd.prepare(q, k, v, o, lse, do, *(torch.empty_like(q) for _ in range(3)),
                                                  causal=args.causal, **opts)}
        else:
            names = {"cudnn": "sdpa cudnn", "fa2": "sdpa flash (FA2)", "fa4": "FlashAttention-4"}
            runs = {key: val for key, val in contenders(q, k, v, do, args.causal, []).items()
                    if key == names[args.who]}
            if not runs:
                print(f"{args.who} is not available here")
                return 1
        (run,) = runs.values()
        run()  # warm-up (compiles, autotunes) outside the profiled range
        torch.cuda.synchronize()
        torch.cuda.profiler.start()  # ncu --profile-from-start off profiles this call's kernels only (whatever thread
        run()  # launches them: autograd's backward runs on a thread of its own, outside an NVTX range here)
        torch.cuda.profiler.stop()
        torch.cuda.synchronize()
        print("ran", args.who, [b, h, args.n, args.d], "causal" if args.causal else "", opts)
    return status


if __name__ == "__main__":
    sys.exit(main())
