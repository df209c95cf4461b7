"""FlashAttention forward: chapters 09 and 10's kernels against PyTorch's SDPA backends, on the GPU.

    python bench/flash_fwd.py                                the course's variants: check, then bench
    python bench/flash_fwd.py check  [--variants NAME ...]   correctness of each variant (child processes)
    python bench/flash_fwd.py bench  [--variants NAME ...]   TFLOP/s vs SDPA flash / cuDNN / efficient
    python bench/flash_fwd.py run --variant NAME --d 128 --n 8192 [--causal]   one launch (for ncu, sanitizers)

``check`` runs every variant on awkward sequence lengths (1, 77, 128, 1000, 4097), causal and not, d = 64
and 128, on fresh random inputs with the output poisoned, against a float64 reference; also on inputs
with large logits (where a naive softmax overflows) and on the [batch, seq, heads, d] memory layout. Each
variant runs in its own process with a time limit, so a hang or a fault is reported, not fatal.
``bench`` times the configurations of ``shared/anchors.md`` (16k tokens per batch, hidden 2048) for every
variant, the SDPA backends and FlashAttention-4 (when ``flash_attn.cute`` imports: an optional extra; the
report says when it is absent) in the same run, ``--rounds`` rounds in rotating order, and writes
``bench/results/flash_fwd_<date>_<commit>.md`` (and .json). Set GIT_COMMIT on machines without git.

How it times (``--method``): ``device`` (the default) measures device work the way a model calls attention:
batches of back-to-back calls with CUDA events around each batch, no L2 flush, so a library's host-side
dispatch (SDPA's Python and backend selection) overlaps the GPU's work instead of landing in its time;
each contender's host dispatch per call is measured separately and reported beside it. ``single`` is the
old method (L2 flushed, one call between events): it charges host dispatch to the call. The SM clock
(``nvidia-smi``) is logged beside every timing: the libraries move 10-15 % between runs, so only same-run,
same-round ratios count.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tklab import attention, recorded  # noqa: E402

#: name -> (kernel, options over attention.DEFAULTS, head dims it runs at). Chapter 10's progression is
#: the "ch10" rows; the others try block shapes.
VARIANTS: dict[str, tuple[str, dict[str, int], tuple[int, ...]]] = {
    "ch09 tiles": ("tiles", {}, (64, 128)),
    "ch09 tiles 32x32": ("tiles", {"WARP_ROWS": 32, "BC": 32}, (128,)),
    "ch09 tiles 32x64": ("tiles", {"WARP_ROWS": 32, "BC": 64}, ()),  # the default now (kept for old reports)
    "ch09 tiles 16x64": ("tiles", {"WARP_ROWS": 16, "BC": 64}, (64, 128)),
    "ch09 tiles 32x96": ("tiles", {"WARP_ROWS": 32, "BC": 96}, (64,)),
    "ch09 tiles 32x128": ("tiles", {"WARP_ROWS": 32, "BC": 128}, (64,)),
    "ch10 plain": ("hopper", {"SCHEDULE": 0, "BC": 128}, (64, 128)),
    "ch10 overlap": ("hopper", {"SCHEDULE": 1, "BC": 128}, (64, 128)),
    "ch10 ping-pong": ("hopper", {"SCHEDULE": 2, "BC": 128}, (64, 128)),
    "ch10 ping-pong 3 stages": ("hopper", {"SCHEDULE": 2, "BC": 128, "STAGES": 3}, (64, 128)),
    "ch10 overlap BC=176": ("hopper", {"SCHEDULE": 1, "BC": 176}, (128,)),
    "ch10 ping-pong BC=176": ("hopper", {"SCHEDULE": 2, "BC": 176}, (128,)),
    "ch10 ping-pong BC=192": ("hopper", {"SCHEDULE": 2, "BC": 192}, (128,)),
    "ch10 ping-pong 2x192": ("hopper", {"SCHEDULE": 2, "CONSUMERS": 2, "BC": 192}, (64,)),
    "ch10 ping-pong 2x128": ("hopper", {"SCHEDULE": 2, "CONSUMERS": 2, "BC": 128}, (64,)),
    # short sequences at d=64: 128-row query blocks (N = 1024 is 8 of them; 192-row blocks leave a third of
    # the last one empty), and the next item's loads under this one's epilogue
    "ch10 persistent 2x128": ("hopper", {"PERSISTENT": 1, "SCHEDULE": 2, "CONSUMERS": 2, "BC": 128}, (64,)),
    "ch10 defaults": ("hopper", {}, (64, 128)),  # attention.DEFAULTS as they stand (the baseline of each option)
    # the defaults (attention.DEFAULTS, per head dimension) on a grid of one block per SM: PERSISTENT builds
    # solutions/variants/ch10_persistent.cu (the chapter's kernel plus a patch). The consumer index from a shuffle
    # (the old "uniform" variants, bench/results/flash_fwd_bench_*.md) is in every build now.
    "ch10 persistent": ("hopper", {"PERSISTENT": 1}, (64, 128)),
    # PERSISTENT=2: a causal run's items ranked by cost over every head, dealt in a snake (tk::longest_first).
    # Slower than the defaults on the H200 in causal runs at both head dimensions; the same order on a block per
    # item ("ch10 flat longest-first" in the bench/results/flash_fwd_bench_*.md report that ran both) measured
    # the same (docs/ROADMAP.md, chapter 10's next steps).
    "ch10 persistent longest-first": ("hopper", {"PERSISTENT": 2}, (64, 128)),
    "ch10 persistent longest-first BC=128": ("hopper", {"PERSISTENT": 2, "BC": 128}, (128,)),
    # PERSISTENT=3: PERSISTENT=1's order (L2-sized sections of heads, heaviest first) on a block per item: the
    # GPU deals them as SMs free up, so a causal grid ends on the last section's lightest items
    "ch10 flat sections": ("hopper", {"PERSISTENT": 3}, (64, 128)),
    # the defaults with K_j handed back right after the wait for S_j, before the softmax: the planted mistake
    # below, which is how the kernel once read; ptxas then waits for P V before the exponentials
    "ch10 defaults, K released before the softmax": ("hopper", {}, (64, 128)),
    # the softmax's options (solutions/variants/ch10_softmax_split.cu) over the defaults: EXP2_SPLIT=n exponentiates n
    # of each 8 scores by a cubic on the FMA pipe instead of MUFU (d = 64 is MUFU-bound after the tensor pipe);
    # MASK_SPLIT=1 runs the blocks without a mask through a loop without the mask code
    "ch10 split exp2 1/8": ("hopper", {"EXP2_SPLIT": 1}, (64, 128)),
    "ch10 split exp2 2/8": ("hopper", {"EXP2_SPLIT": 2}, (64, 128)),
    "ch10 split exp2 3/8": ("hopper", {"EXP2_SPLIT": 3}, (64,)),
    "ch10 split mask": ("hopper", {"MASK_SPLIT": 1}, (64, 128)),
    # FA4's 128-key blocks at d = 128: the default key block won over 128 with the mask in every block's code
    "ch10 split mask BC=128": ("hopper", {"MASK_SPLIT": 1, "BC": 128}, (128,)),
    "ch10 split mask + exp2 1/8": ("hopper", {"MASK_SPLIT": 1, "EXP2_SPLIT": 1}, (64, 128)),
    "ch10 split mask + exp2 2/8": ("hopper", {"MASK_SPLIT": 1, "EXP2_SPLIT": 2}, (64, 128)),
}
#: "@base" variants: chapter 10's kernel and the tile library as another commit had them, compiled in this process
#: beside today's (an A/B with rounds interleaved). `python bench/flash_fwd.py base REV` unpacks REV's cuda/ and
#: kernel into bench/_base/ (untracked: it travels with the working tree to a GPU machine without git history).
BASE_DIR = ROOT / "bench" / "_base"
for _name in ("ch10 defaults", "ch10 ping-pong"):
    VARIANTS[_name + " @base"] = VARIANTS[_name]

#: Variants whose source is the shipped kernel with one planted mistake of its exercise applied
#: (solutions/<exercise>/planted.toml, tests/planted.py): a way the kernel could be written, measured beside the
#: shipped variant it differs from (exercise, mutation, that variant).
PLANTED = {"ch10 defaults, K released before the softmax": ("ch10_flash", "k_released_before_the_softmax",
                                                            "ch10 defaults")}
#: What a plain run (and `make gpu-check`) measures: each chapter's kernel and chapter 10's progression.
COURSE = ["ch09 tiles", "ch10 plain", "ch10 overlap", "ch10 ping-pong", "ch10 ping-pong BC=176", "ch10 persistent"]
SDPA = ("sdpa flash", "sdpa cudnn", "sdpa efficient")
#: (d, N, causal) of the anchors table; batch = 16384 / N, heads = 2048 / d.
CONFIGS = [(d, n, c) for d in (128, 64) for n in (4096, 8192) for c in (False, True)]
#: Shapes nobody tuned for (issue 27): short and long sequences, many heads, lengths off the block size.
UNTUNED = "64,1024,0,16,16;64,1024,1,16,16;128,2048,1;128,2048,0;128,16384,1;128,32768,1;64,16384,1;" \
          "128,1000,0,8,16;64,4097,1,4,32"


def unpack_base(rev: str) -> Path:
    """REV's cuda/ and chapter 10's kernel into BASE_DIR (what the "@base" variants compile), with the kernel's
    includes made absolute so that they reach REV's headers, not today's."""
    import shutil

    if BASE_DIR.exists():
        shutil.rmtree(BASE_DIR)
    BASE_DIR.mkdir(parents=True)
    sha = subprocess.run(["git", "rev-parse", "--short", rev], cwd=ROOT, capture_output=True, text=True, check=True)
    archive = subprocess.run(["git", "archive", rev, "cuda", "solutions/ch10_flash/ch10_flash.cu"], cwd=ROOT,
                             capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(BASE_DIR)], input=archive, check=True)
    (BASE_DIR / "REV").write_text(sha.stdout.strip() + "\n")
    return BASE_DIR


def base_source() -> str:
    kernel = BASE_DIR / "solutions" / "ch10_flash" / "ch10_flash.cu"
    if not kernel.exists():
        raise FileNotFoundError(f"{kernel} is missing: run `python bench/flash_fwd.py base REV` first (with git)")
    text = re.sub(r'#include "(tk[^"]*)"', lambda m: f'#include "{BASE_DIR / "cuda" / m.group(1)}"',
                  kernel.read_text())
    # A kernel from before PERSISTENT and UNIFORM left the chapter's options refuses to compile without them:
    # today's meaning (the chapter's grid, the shuffled consumer index), unless the build passes its own.
    return ("#ifndef PERSISTENT\n#define PERSISTENT 0\n#endif\n#ifndef UNIFORM\n#define UNIFORM 1\n#endif\n"
            + text) if "defined(UNIFORM)" in text else text


def base_rev() -> str:
    return (BASE_DIR / "REV").read_text().strip() if (BASE_DIR / "REV").exists() else "none"


def source_text(name: str) -> str | None:
    """The source a variant compiles when it is not the shipped kernel (``PLANTED``, "@base"), else None."""
    if name.endswith(" @base"):
        return base_source()
    if name not in PLANTED:
        return None
    sys.path.insert(0, str(ROOT / "tests"))
    import planted

    exercise, mutation, _ = PLANTED[name]
    chosen = next(m for m in planted.load(exercise) if m.name == mutation)
    return planted.apply(planted.solution(exercise).read_text(), chosen)


def softmax_under_pv(name: str, d: int) -> str:
    """What the SASS of a variant's build does with the key loop's exponentials (tklab.toolchain.overlap), for the
    report: the build measured is the one read."""
    from tklab.toolchain import overlap

    kernel, opts, _ = VARIANTS[name]
    if kernel != "hopper":
        return "–"
    try:
        k = attention.compiled(attention.build(kernel, d, source_text=source_text(name), **opts))
        o = overlap.softmax_under_pv(k.sass)
    except Exception as e:  # noqa: BLE001 - no disassembler here: the report says so
        return f"not read ({type(e).__name__}: {str(e)[:80]})"
    return f"{o.under} of {o.total}" if o.loop else "no key loop"


def _out_dirs() -> list[Path]:
    dirs = [ROOT / "bench" / "results"]
    if os.environ.get("OUT"):
        dirs.append(Path(os.environ["OUT"]))
    return dirs


def recorded_date(report: Path) -> str:
    """When a report was written, as its own header records it (``- commit: ...; date: <ISO date and time>``, in the
    .md beside the .json): reports are ordered by that, never by file name (which ends in a commit hash)."""
    m = re.search(r"^- commit: .*; date: (\S+)$", report.with_suffix(".md").read_text(), re.M)
    if not m:
        raise ValueError(f"{report.with_suffix('.md').name}: no '- commit: ...; date: ...' line in its header")
    return m.group(1)


def default_variant(d: int) -> str | None:
    """The variant of chapter 10's kernel whose options are ``attention.DEFAULTS`` at head dimension d."""
    for name, (kernel, opts, dims) in VARIANTS.items():
        if kernel == "hopper" and d in dims and name not in PLANTED \
                and attention.build(kernel, d, **opts) == attention.build(kernel, d):
            return name
    return None


def covers_the_anchors(rows: list[dict[str, Any]]) -> bool:
    """Whether a bench report times every configuration of ``CONFIGS`` with chapter 09's kernel, chapter 10's
    defaults, SDPA cuDNN and SDPA flash in the same rounds: a report chapter 10's table can be read from."""
    for d, n, causal in CONFIGS:
        who = {r["who"] for r in rows if (r["d"], r["n"], r["causal"]) == (d, n, causal)}
        if not {"ch09 tiles", "sdpa cudnn", "sdpa flash"} <= who or not ({default_variant(d), "ch10 defaults"} & who):
            return False
    return True


def latest_report(folder: Path | None = None) -> Path:
    """The newest bench report, by the date recorded inside it, that covers every anchor configuration."""
    found = recorded.newest((folder or ROOT / "bench" / "results").glob("flash_fwd_bench_*.json"),
                            lambda p: recorded_date(p) if covers_the_anchors(json.loads(p.read_text())) else None)
    if found is None:
        raise FileNotFoundError("no flash_fwd bench report covers every anchor configuration yet")
    return found


def _inputs(b: int, h: int, n: int, d: int, *, layout: str = "bhnd", logit_scale: float = 1.0) -> tuple[Any, ...]:
    import torch

    def one() -> Any:
        if layout == "bnhd":  # the memory order of a projection's output, seen as [b, h, n, d]
            return torch.randn(b, n, h, d, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
        return torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16)

    q, k, v = one(), one(), one()
    if logit_scale != 1.0:
        q = (q.float() * logit_scale).to(torch.bfloat16)
    return q, k, v


# ---- check ---------------------------------------------------------------------------------------------
CHECK_SHAPES = [(1, 2, 1), (1, 2, 77), (2, 2, 128), (1, 3, 1000), (1, 1, 4097)]


def check_one(name: str, d: int) -> list[dict[str, Any]]:
    """Every check shape of one variant at head dimension d; one row per case."""
    import torch

    kernel, opts, _ = VARIANTS[name]
    cases: list[tuple[Any, ...]] = [(b, h, n, c, "bhnd", 1.0) for b, h, n in CHECK_SHAPES for c in (False, True)]
    cases += [(1, 2, 1000, c, "bhnd", 30.0) for c in (False, True)]  # logits in the thousands
    cases += [(2, 3, 300, c, "bnhd", 1.0) for c in (False, True)]
    cases = [(*case, None) for case in cases]  # sms: None = the GPU's own
    if opts.get("PERSISTENT"):  # few blocks, so that each walks many items (ring, phases and Q tiles carry over)
        cases += [(b, h, n, c, "bhnd", 1.0, sms) for b, h, n, sms in ((2, 3, 1000, 5), (1, 1, 4097, 3), (3, 5, 77, 2))
                  for c in (False, True)]
    rows = []
    for b, h, n, causal, layout, ls, sms in cases:
        q, k, v = _inputs(b, h, n, d, layout=layout, logit_scale=ls)
        o = torch.full_like(q, float("nan"))
        lse = torch.full((b, h, n), float("nan"), device="cuda")
        attention.prepare(q, k, v, o, lse, causal=causal, kernel=kernel, sms=sms, source_text=source_text(name),
                          **opts)()
        torch.cuda.synchronize()
        e = attention.errors(o, lse, q, k, v, causal=causal)
        rows.append({"variant": name, "d": d, "shape": [b, h, n], "causal": causal, "layout": layout, "sms": sms,
                     "logit_scale": ls, "o_rel": e.o_rel, "lse_max_abs": e.lse_max_abs, "unwritten": e.unwritten,
                     "first_wrong": e.first_wrong, "ok": e.ok()})
    return rows


def check(names: list[str], timeout: float) -> list[dict[str, Any]]:
    """check_one for every variant and d, each in a child process that may hang or crash."""
    rows: list[dict[str, Any]] = []
    for name in names:
        for d in VARIANTS[name][2]:
            cmd = [sys.executable, __file__, "check-one", "--variant", name, "--d", str(d)]
            t = time.time()
            try:
                out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
                lines = [json.loads(x) for x in out.stdout.splitlines() if x.startswith("{")]
                if out.returncode or not lines:
                    rows.append({"variant": name, "d": d, "ok": False,
                                 "error": (out.stderr or out.stdout).strip()[-800:]})
                rows += lines
            except subprocess.TimeoutExpired:
                rows.append({"variant": name, "d": d, "ok": False, "error": f"timed out after {timeout:.0f} s (hang?)"})
            bad = [r for r in rows if r["variant"] == name and r["d"] == d and not r["ok"]]
            worst = max((r.get("o_rel", 0.0) for r in rows if r["variant"] == name and r["d"] == d), default=0.0)
            print(f"check {name:26s} d={d:3d}: {'ok' if not bad else f'{len(bad)} FAILED'} "
                  f"(worst o rel {worst:.1e}, {time.time() - t:.0f} s)", flush=True)
            for r in bad[:3]:
                print("    ", {k: r[k] for k in r if k in ("shape", "causal", "layout", "logit_scale", "sms", "error",
                                                         "first_wrong", "o_rel", "unwritten")}, flush=True)
    return rows


# ---- bench ---------------------------------------------------------------------------------------------
def _sdpa(which: str, q: Any, k: Any, v: Any, causal: bool) -> Any:
    return attention.sdpa(q, k, v, causal=causal, backend=which.split()[-1])


FA4 = "flash-attn-4"
CONTENDERS = (*SDPA, FA4)


def _fa4(q: Any, k: Any, v: Any, causal: bool) -> Any:
    """FlashAttention-4's forward (``flash_attn.cute``, its sm90 path on Hopper) on the same inputs, laid out
    [batch, seq, heads, d] once outside the timing; raises ImportError where it is not installed."""
    from flash_attn.cute import flash_attn_func

    qt, kt, vt = (x.transpose(1, 2).contiguous() for x in (q, k, v))
    return lambda: flash_attn_func(qt, kt, vt, causal=causal)


def sm_clock_mhz() -> int | None:
    """The GPU's current SM clock (MHz) from nvidia-smi, or None where it cannot be read."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm", "--format=csv,noheader,nounits", "-i",
                              os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0]],
                             capture_output=True, text=True, timeout=10)
        return int(out.stdout.split()[0]) if out.returncode == 0 and out.stdout.strip() else None
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return None


#: back-to-back calls between one pair of CUDA events (method "device")
BATCH = 20


def host_dispatch_us(fn: Any, calls: int = BATCH) -> float:
    """Host time to issue one call (µs): ``calls`` back-to-back calls on an idle queue, no synchronisation
    inside, so this is the Python and driver work before the GPU sees the kernel, not the kernel."""
    import torch

    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(calls):
        fn()
    spent = time.perf_counter() - t
    torch.cuda.synchronize()
    return spent / calls * 1e6


def time_one(fn: Any, flops: float, method: str) -> float:
    """Median ms per call of ``fn`` by ``method`` (see the module docstring)."""
    from tklab.run.bench import bench as tk_bench

    if method == "device":
        return tk_bench(fn, flops=flops, target_ms=150, progress=False, ceilings=False, batch=BATCH,
                        flush_l2=False).ms
    return tk_bench(fn, flops=flops, target_ms=150, progress=False, ceilings=False).ms


def bench(names: list[str], rounds: int, configs: list[tuple[int, ...]],
          method: str = "device") -> list[dict[str, Any]]:
    """Every contender on every (d, N, causal[, batch, heads]) config; batch and heads default to the anchors'
    16k tokens per batch and 2048 hidden."""
    import torch

    rows = []
    for d, n, causal, *bh in configs:
        causal = bool(causal)
        b, h = bh if bh else (max(1, 16384 // n), 2048 // d)
        q, k, v = _inputs(b, h, n, d)
        o, lse = torch.empty_like(q), torch.empty(b, h, n, device="cuda")
        fl = attention.flops(b, h, n, d, causal)
        contenders: dict[str, Any] = {}
        for who in CONTENDERS:
            try:
                fn = _fa4(q, k, v, causal) if who == FA4 else _sdpa(who, q, k, v, causal)
                fn()
                contenders[who] = fn
            except ImportError as e:
                print(f"  {who} not installed here ({e}); the report says so", flush=True)
            except RuntimeError as e:  # a backend that refuses this configuration
                print(f"  {who} unavailable for d={d} n={n} causal={causal}: {str(e)[:120]}", flush=True)
        for name in names:
            kernel, opts, dims = VARIANTS[name]
            if d not in dims:
                continue
            try:
                contenders[name] = attention.prepare(q, k, v, o, lse, causal=causal, kernel=kernel,
                                                     source_text=source_text(name), **opts)
            except Exception as e:  # noqa: BLE001 - report and go on with the others
                print(f"  {name}: {e}", flush=True)
        order = list(contenders)
        host = {who: host_dispatch_us(fn) for who, fn in contenders.items()}
        for r in range(rounds):
            shift = r % len(order)  # rotate who goes first, so no contender always meets a cold or hot GPU
            for who in order[shift:] + order[:shift]:
                clock = sm_clock_mhz()
                ms = time_one(contenders[who], fl, method)
                rows.append({"d": d, "n": n, "causal": causal, "batch": b, "heads": h, "round": r, "who": who,
                             "ms": ms, "tflops": fl / ms / 1e9, "method": method, "sm_clock_mhz": clock,
                             "sm_clock_after_mhz": sm_clock_mhz(), "host_us": host[who]})
        for who in contenders:
            best = max(x["tflops"] for x in rows if (x["d"], x["n"], x["causal"], x["who"]) == (d, n, causal, who))
            print(f"  d={d} n={n} causal={int(causal)} {who:26s} {best:6.0f} TFLOP/s "
                  f"(host dispatch {host[who]:.0f} µs/call)", flush=True)
    return rows


def _ratio_table(rows: list[dict[str, Any]], names: list[str]) -> list[str]:
    """Per configuration: each contender's median over rounds, its same-round ratios to cuDNN, FA2 and FA4,
    its host dispatch and the SM clocks seen while it ran."""
    import statistics

    refs = (("sdpa cudnn", "cuDNN"), ("sdpa flash", "FA2"), (FA4, "FA4"))
    ratio_heads = " | ".join(f"/ {t} (per round)" for _, t in refs)
    lines = [f"| d | N | causal | B×H | who | TFLOP/s (median of rounds) | {ratio_heads} | host dispatch µs/call | "
             "SM clock MHz |",
             "|---|---|---|---|---|---|" + "---|" * len(refs) + "---|---|"]
    def key(x: dict[str, Any]) -> tuple[int, int, bool, int, int]:
        return x["d"], x["n"], x["causal"], x.get("batch", 0), x.get("heads", 0)

    for d, n, causal, b, h in sorted({key(x) for x in rows}, key=lambda t: (-t[0], t[1], t[2], t[3])):
        sel = [x for x in rows if key(x) == (d, n, causal, b, h)]
        for who in [*CONTENDERS, *names]:
            mine = {x["round"]: x["tflops"] for x in sel if x["who"] == who}
            if not mine:
                continue
            cells = []
            for ref, _ in refs:
                base = {x["round"]: x["tflops"] for x in sel if x["who"] == ref}
                rs = [mine[r] / base[r] for r in mine if r in base]
                cells.append(f"{min(rs):.2f}–{max(rs):.2f} (median {statistics.median(rs):.2f})" if rs else "–")
            med = statistics.median(mine.values())
            mine_rows = [x for x in sel if x["who"] == who]
            host = mine_rows[0].get("host_us")
            clocks = [c for x in mine_rows for c in (x.get("sm_clock_mhz"), x.get("sm_clock_after_mhz")) if c]
            clock = f"{min(clocks)}–{max(clocks)}" if clocks else "not read"
            host_cell = f"{host:.0f}" if host is not None else "–"
            lines.append(f"| {d} | {n} | {'yes' if causal else 'no'} | {b}×{h} | {who} | {med:.0f} | "
                         + " | ".join(cells) + f" | {host_cell} | {clock} |")
    if not any(x["who"] == FA4 for x in rows):
        lines += ["", "FlashAttention-4 was not installed on this machine (optional: `pip install "
                  "\"flash-attn-4[cu13]\"`, or shared/tools/fa4_wheels.sh offline): its columns are empty."]
    return lines


def _schedule_table(rows: list[dict[str, Any]], names: list[str]) -> list[str]:
    """Per Hopper variant measured: its key loop's exponentials issued under P·V in the SASS of the build that
    ran (tklab.toolchain.overlap); and each planted variant against the shipped one it differs from, same round."""
    import statistics

    measured = [(name, d) for name in names for d in VARIANTS[name][2] if VARIANTS[name][0] == "hopper"
                and any(x["who"] == name and x["d"] == d for x in rows)]
    if not measured:
        return []
    lines = ["", "The key loop's exponentials (MUFU.EX2) issued while a wgmma group runs, in the SASS of each build "
             "measured (tklab.toolchain.overlap):", "", "| variant | d | under P·V |", "|---|---|---|"]
    lines += [f"| {name} | {d} | {softmax_under_pv(name, d)} |" for name, d in measured]
    pairs = [(name, PLANTED[name][2]) for name in names if name in PLANTED and PLANTED[name][2] in names]
    for planted_name, base in pairs:
        lines += ["", f"{base} / {planted_name}, same round (> 1: the shipped kernel is faster):", "",
                  "| d | N | causal | per round | median |", "|---|---|---|---|---|"]
        for d, n, causal in sorted({(x["d"], x["n"], x["causal"]) for x in rows}, key=lambda t: (-t[0], t[1], t[2])):
            sel = [x for x in rows if (x["d"], x["n"], x["causal"]) == (d, n, causal)]
            a = {x["round"]: x["tflops"] for x in sel if x["who"] == base}
            b = {x["round"]: x["tflops"] for x in sel if x["who"] == planted_name}
            rs = [a[r] / b[r] for r in sorted(a) if r in b]
            if rs:
                lines.append(f"| {d} | {n} | {'yes' if causal else 'no'} | {', '.join(f'{r:.3f}' for r in rs)} | "
                             f"{statistics.median(rs):.3f} |")
    return lines


def write_report(kind: str, body: list[str], data: Any) -> Path:
    import torch

    today = datetime.date.today().isoformat()
    head = [f"# FlashAttention forward — {kind}, {today}", "",
            f"- device: {torch.cuda.get_device_name()}, torch {torch.__version__}, "
            f"cuDNN {torch.backends.cudnn.version()}",
            f"- commit: {recorded.commit()}; date: {datetime.datetime.now().isoformat(timespec='seconds')}",
            f"- NVRTC: {recorded.nvrtc()} (its ptxas schedules the kernels' SASS)",
            f"- '@base' variants: the kernel and headers of {base_rev()} (bench/_base/)",
            "- written by `python bench/flash_fwd.py " + " ".join(sys.argv[1:]) + "`", ""]
    stem = f"flash_fwd_{kind}_{today}_{recorded.commit()}"
    for folder in _out_dirs():
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{stem}.md").write_text("\n".join(head + body) + "\n")
        (folder / f"{stem}.json").write_text(json.dumps(data, indent=1))
    return _out_dirs()[0] / f"{stem}.md"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("what", nargs="?", default="all", choices=["all", "check", "check-one", "bench", "run", "base"])
    p.add_argument("rev", nargs="?", help="base: the commit whose kernel and headers the '@base' variants compile")
    p.add_argument("--variants", nargs="*", help=f"default: every variant (check, bench) or {COURSE} (all)")
    p.add_argument("--variant")
    p.add_argument("--d", type=int, default=128)
    p.add_argument("--n", type=int, default=8192)
    p.add_argument("--causal", action="store_true")
    p.add_argument("--b", type=int, help="batch for run (default 16384 / n)")
    p.add_argument("--h", type=int, help="heads for run (default 2048 / d)")
    p.add_argument("--no-check", action="store_true", help="run: skip the float64 comparison (sanitizers)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--timeout", type=float, default=180)
    p.add_argument("--configs", default="all", help="'all' (the anchors), 'untuned', or e.g. "
                   "128,8192,0;64,1024,1,16,16 (d,N,causal[,batch,heads])")
    p.add_argument("--method", default="device", choices=["device", "single"],
                   help="device: back-to-back batches, host dispatch reported apart (default); single: one "
                        "call between events after an L2 flush (the old method)")
    args = p.parse_args()
    if args.variants is None:
        args.variants = COURSE if args.what == "all" else list(VARIANTS)
    unknown = [v for v in [*args.variants, args.variant] if v and v not in VARIANTS]
    if unknown:
        p.error(f"unknown variant(s) {unknown}; known: {list(VARIANTS)}")
    status = 0
    if args.what == "base":
        if not args.rev:
            p.error("base: name the commit, e.g. `python bench/flash_fwd.py base HEAD~1`")
        print(f"unpacked {args.rev} into {unpack_base(args.rev)}")
        return 0
    if args.what == "check-one":
        for row in check_one(args.variant, args.d):
            print(json.dumps(row), flush=True)
    elif args.what in ("check", "all"):
        rows = check(args.variants, args.timeout)
        failed = sorted({(r["variant"], r["d"]) for r in rows if not r["ok"]})
        body = ["| variant | d | cases | failed | worst o rel. error | worst lse abs. error |",
                "|---|---|---|---|---|---|"]
        for name in args.variants:
            for d in VARIANTS[name][2]:
                sel = [r for r in rows if r["variant"] == name and r["d"] == d]
                body.append(f"| {name} | {d} | {len(sel)} | {sum(not r['ok'] for r in sel)} | "
                            f"{max((r.get('o_rel', 0) for r in sel), default=0):.1e} | "
                            f"{max((r.get('lse_max_abs', 0) for r in sel), default=0):.1e} |")
        path = write_report("check", body, rows)
        print(f"{path}: {len(rows)} cases, failed variants: {failed or 'none'}")
        if failed:
            status = 1
    if args.what in ("bench", "all"):
        spec = UNTUNED if args.configs == "untuned" else args.configs
        configs = CONFIGS if spec == "all" else [tuple(int(v) for v in x.split(",")) for x in spec.split(";")]
        bad = [c for c in configs if len(c) not in (3, 5)]
        if bad:
            p.error(f"--configs: each config is d,N,causal or d,N,causal,batch,heads; got {bad}")
        rows = bench(args.variants, args.rounds, configs, args.method)
        how = (f"batches of {BATCH} back-to-back calls with CUDA events around each batch, no L2 flush (device "
               "time, the way a model calls attention); host dispatch per call measured apart"
               if args.method == "device" else "one call between CUDA events after an L2 flush (host dispatch "
               "included)")
        body = ["FLOPs counted as 4·B·H·N²·d (halved for causal); 16k tokens per batch, hidden 2048; "
                f"tklab.bench: {how}; median per round; every contender in the same run, rounds in rotating "
                "order; SM clock from nvidia-smi before and after each timing.", "",
                *_ratio_table(rows, args.variants), *_schedule_table(rows, args.variants)]
        path = write_report("bench", body, rows)
        print("\n".join(body[2:]))
        print(path)
    if args.what == "run":  # one launch of one variant, for ncu / compute-sanitizer
        import torch

        kernel, opts, _ = VARIANTS[args.variant]
        b, h = args.b or max(1, 16384 // args.n), args.h or 2048 // args.d
        q, k, v = _inputs(b, h, args.n, args.d)
        o, lse = torch.empty_like(q), torch.empty(b, h, args.n, device="cuda")
        attention.prepare(q, k, v, o, lse, causal=args.causal, kernel=kernel, source_text=source_text(args.variant),
                          **opts)()
        torch.cuda.synchronize()
        checked = not args.no_check and b * h * args.n * args.n <= 2**31
        print(args.variant, attention.errors(o, lse, q, k, v, causal=args.causal) if checked else "ran")
    return status


if __name__ == "__main__":
    sys.exit(main())
