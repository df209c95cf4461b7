"""Train a tiny GPT twice from the same seed -- once with the course's attention (chapter 10's forward,
chapter 11's backward), once with PyTorch's SDPA -- and compare the loss curves (GPU, H100/H200).

    python bench/train_tiny_gpt.py [--steps 300] [--text FILE] [--tolerance 0.05]
                                   [--control auto|cudnn|flash|efficient|rerun] [--seeds K]
                                   [--profile [--profile-steps 5]]

The text: by default generated here (deterministic from the seed, the same on every machine and commit):
sentences of small arithmetic ("seventeen plus 4 is 21.") that a character model can learn, so the loss
falls far in a few hundred steps; ``--text`` trains on a file instead (e.g. README.md). Model: 4 layers,
8 heads of d = 64 (d_model 512), context 256, character vocabulary, bf16 autocast, AdamW. Both runs
draw the same initial weights and the same batches; only the attention differs. Writes
``bench/results/train_tiny_gpt_<date>_<commit>.json`` (the curves, per-step ms, the deviations) and a .md
summary, also into $OUT when set. Exit status 1 when the course's curve differs from SDPA's by more than
``--tolerance`` (nats, on a 10-step moving average): a criterion chosen before measuring, not a result;
exit status 2 when the run cannot start (no PyTorch, no CUDA GPU, not an sm_90 one).

The control (every run): SDPA trained a second time, same seed, same text, same batches, but pinned to
another of its fused backends, and its deviation from the first SDPA run taken the same way (same smoothing,
same steps). It asks "how far apart do two correct attentions drift on this curve?": the loss sits on a
plateau near 1.4 nats and then drops suddenly; if a rounding-level difference in the attention moves the step
of that drop, the max over 10-step averages reads it as a large deviation that no bias causes. The control
measures that instead of assuming it. Why another fused backend (``--control auto``): FlashAttention-2
(SDPA's ``FLASH_ATTENTION``) and cuDNN's fused attention (``CUDNN_ATTENTION``) are of the course's kernel's
kind -- online softmax over bf16 inputs, fp32 accumulation, P rounded to bf16 for P·V, the score matrix never
stored -- written independently, so they differ from each other as the course's kernel differs from either:
in tiling and in the order of the sums. ``auto`` takes the one of the two that SDPA did not choose for the
first run (read with ``torch._fused_sdp_choice`` on the training's own shapes, layout and causal mask, and
written into the report), after checking that it runs forward and backward on them; failing that, the
memory-efficient kernel, then a rerun. Not MATH: it stores the scores and computes them in fp32 by
default, numerics of another kind than either compared kernel, so its distance says less about rounding
noise among kernels like the course's. ``--control rerun`` repeats SDPA's own choice instead: the
run-to-run nondeterminism of the whole training alone (atomics in backward kernels; zero if there are none).
The control changes nothing in the criterion: ``agree`` is still the course's deviation against
``--tolerance``; beside it the report gives the control's deviation and whether the course's lies within it
-- a second, comparative reading, labelled so, not a replacement.

``--seeds K`` (default 1): the course/SDPA/control triple again for init-and-batch seeds seed+1 .. seed+K-1
(the text stays the one generated from ``--seed``), and the spread of both deviations over the K seeds;
``agree`` stays the first seed's.

``--profile``: after the training runs, a few steps of each attention (course, SDPA, the control) again under
``torch.profiler`` (after 5 warm-up steps): the top CUDA kernels by device time, the kernel time per step, the
CPU time spent inside the attention calls (forward: a ``record_function`` range around the call; backward: the
autograd engine's ``evaluate_function`` range of the attention's backward node) and the step's wall time under
the profiler -- what explains the step-time gap between the course and SDPA.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import math
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tklab import recorded  # noqa: E402

WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
         "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"]
WINDOW = 10  # steps in the criterion's moving average
LAST = 50  # steps in the final window (final loss, mean deviation)
HEADS, D_MODEL = 8, 512
#: SDPA's fused backends a control may be pinned to (--control), by SDPBackend member
CONTROL_BACKENDS = {"cudnn": "CUDNN_ATTENTION", "flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION"}
CONTROLS = ["auto", *CONTROL_BACKENDS, "rerun"]
PROFILE_WARMUP = 5
#: kernel names that are attention's (the course's flash_fwd / flash_bwd_*, FA2's, cuDNN's fused SDPA)
ATTENTION_KERNEL = re.compile(r"flash|fmha|sdpa|attention|attn", re.IGNORECASE)
#: ranges, not kernels, that the profiler also puts on the GPU's timeline (user annotations)
PROFILE_RANGES = ("tiny_gpt.", "Optimizer.", "ProfilerStep")
SECOND_READING = ("comparative, not the criterion: is the course-vs-SDPA deviation within the deviation of "
                  "SDPA against itself on another backend (the control), same smoothing, same steps? "
                  "The criterion is 'agree'.")


def generated_text(seed: int, chars: int = 2_000_000) -> str:
    """Arithmetic sentences, the first operand spelled out: learnable structure at every scale."""
    rng = np.random.default_rng(seed)
    out, total = [], 0
    while total < chars:
        a, b = int(rng.integers(0, 20)), int(rng.integers(0, 20))
        op = rng.choice(["plus", "times", "minus"])
        val = a + b if op == "plus" else a * b if op == "times" else a - b
        s = f"{WORDS[a]} {op} {b} is {val}. "
        out.append(s)
        total += len(s)
    return "".join(out)


# ---- the curves compared (no torch: tests/test_train_tiny_gpt.py runs these on the CPU) ------------------------
def smooth(x: Any, w: int = WINDOW) -> np.ndarray:
    """Trailing moving average over w steps (fewer at the start)."""
    a = np.asarray(x, dtype=float)
    return np.array([a[max(0, i - w + 1):i + 1].mean() for i in range(len(a))])


def compare(a: Any, b: Any, *, window: int = WINDOW, last: int = LAST) -> dict[str, Any]:
    """How far curve a is from curve b: the largest |a - b| per step and of the moving averages (with the step
    where the averages are furthest apart and a - b there: its sign says which curve is lower), and the mean
    |a - b| over the last ``last`` steps."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape != b.shape or a.ndim != 1 or not len(a):
        raise ValueError(f"two curves of the same nonzero length, got {a.shape} and {b.shape}")
    raw = np.abs(a - b)
    signed = smooth(a, window) - smooth(b, window)
    at = int(np.argmax(np.abs(signed)))
    tail = slice(max(0, len(a) - last), len(a))
    return {"max_abs_deviation": float(raw.max()), "max_abs_deviation_smoothed": float(abs(signed[at])),
            "step_of_max_smoothed": at, "signed_smoothed_at_max": float(signed[at]),
            "mean_abs_deviation_last50": float(raw[tail].mean())}


def summarize(course: dict[str, Any], sdpa: dict[str, Any], control: dict[str, Any], *,
              tolerance: float) -> dict[str, Any]:
    """The report's summary of one seed's three runs (each {"attention": label, "loss": [...], "step_ms": [...]}).

    The first seven keys are the criterion's, as before the control existed (course vs SDPA; ``agree``: the
    smoothed deviation within ``tolerance``); then where the smoothed deviation peaks, the control (SDPA vs the
    control run, the same measures) and ``second_reading``: whether the course's smoothed deviation lies within
    the control's. ``agree`` never depends on the control."""
    pair = compare(course["loss"], sdpa["loss"])
    ctrl = compare(sdpa["loss"], control["loss"])
    runs = (course, sdpa, control)
    tail = slice(max(0, len(course["loss"]) - LAST), len(course["loss"]))
    return {
        "max_abs_deviation": pair["max_abs_deviation"],
        "max_abs_deviation_smoothed": pair["max_abs_deviation_smoothed"],
        "mean_abs_deviation_last50": pair["mean_abs_deviation_last50"],
        "tolerance_smoothed": tolerance,
        "agree": bool(pair["max_abs_deviation_smoothed"] <= tolerance),
        "final_loss": {r["attention"]: float(np.mean(r["loss"][tail])) for r in runs},
        "median_step_ms": {r["attention"]: float(np.median(r["step_ms"][5:] or r["step_ms"])) for r in runs},
        "step_of_max_smoothed": pair["step_of_max_smoothed"],
        "signed_smoothed_at_max": pair["signed_smoothed_at_max"],
        "control": {"pair": f"{sdpa['attention']} vs {control['attention']}", **ctrl},
        "second_reading": {"what": SECOND_READING,
                           "course_vs_sdpa_smoothed": pair["max_abs_deviation_smoothed"],
                           "control_smoothed": ctrl["max_abs_deviation_smoothed"],
                           "within_control": bool(pair["max_abs_deviation_smoothed"]
                                                  <= ctrl["max_abs_deviation_smoothed"])},
    }


def _spread(x: list[float]) -> dict[str, float]:
    return {"min": float(np.min(x)), "median": float(np.median(x)), "max": float(np.max(x))}


def seed_spread(per_seed: list[dict[str, Any]]) -> dict[str, Any]:
    """The spread over seeds of the course's and the control's smoothed deviations; ``per_seed``: one
    {"seed": s, "summary": summarize(...)} a seed, the criterion's seed first. ``course_max_within_control_max``:
    the course's largest deviation over the seeds is no larger than the control's largest (comparative)."""
    course = [s["summary"]["max_abs_deviation_smoothed"] for s in per_seed]
    control = [s["summary"]["control"]["max_abs_deviation_smoothed"] for s in per_seed]
    return {"seeds": [s["seed"] for s in per_seed],
            "course_vs_sdpa_smoothed": course, "control_smoothed": control,
            "course_vs_sdpa_spread": _spread(course), "control_spread": _spread(control),
            "agree_count": sum(s["summary"]["agree"] for s in per_seed),
            "within_control_count": sum(c <= k for c, k in zip(course, control, strict=True)),
            "course_max_within_control_max": bool(max(course) <= max(control))}


def control_candidates(default_backend: str) -> list[str]:
    """The fused backends --control auto tries, in order, given SDPA's own choice (an SDPBackend member name):
    the other of FlashAttention-2 and cuDNN first, then the memory-efficient kernel; never SDPA's own choice."""
    order = ["flash", "cudnn", "efficient"] if default_backend == "CUDNN_ATTENTION" else ["cudnn", "flash", "efficient"]
    return [c for c in order if CONTROL_BACKENDS[c] != default_backend]


def totals(entries: Any, cuda: Any, steps: int, step_ms: list[float]) -> dict[str, Any]:
    """From a profiler's key_averages() ``entries``: every CUDA kernel's total device time (µs) and calls, and the
    CPU time (µs, inclusive) of the steps and of the attention calls -- forward: the "tiny_gpt.attention" ranges;
    backward: the autograd engine's evaluate_function ranges of nodes whose name holds "Attention". ``cuda``: the
    device type of GPU entries. A range (record_function, the optimizer's step) also appears on the GPU's timeline
    under its own name: such a user annotation is no kernel, and is left out."""
    entries = list(entries)
    cpu_names = {e.key for e in entries if getattr(e, "device_type", None) != cuda}
    kernels, fwd, bwd, step_cpu, names = [], 0.0, 0.0, 0.0, []
    for e in entries:
        if getattr(e, "device_type", None) == cuda:
            if getattr(e, "is_user_annotation", False) or e.key in cpu_names or e.key.startswith(PROFILE_RANGES):
                continue
            dev = getattr(e, "self_device_time_total", None)
            kernels.append({"name": e.key, "us": float(dev if dev is not None else e.self_cuda_time_total),
                            "calls": int(e.count)})
        elif e.key == "tiny_gpt.attention":
            fwd += e.cpu_time_total
        elif e.key == "tiny_gpt.step":
            step_cpu += e.cpu_time_total
        elif e.key.startswith("autograd::engine::evaluate_function:") and "Attention" in e.key:
            bwd += e.cpu_time_total
            names.append(e.key.rsplit(":", 1)[-1].strip())
    kernels.sort(key=lambda k: -k["us"])
    return {"steps": steps, "wall_ms_per_step": float(np.median(step_ms)), "step_cpu_us": float(step_cpu),
            "attention_cpu_us": {"forward": float(fwd), "backward": float(bwd)}, "attention_calls": names,
            "kernel_us": float(sum(k["us"] for k in kernels)),
            "attention_kernel_us": float(sum(k["us"] for k in kernels if ATTENTION_KERNEL.search(k["name"]))),
            "kernels": kernels[:40]}


# ---- the report ------------------------------------------------------------------------------------------------
def _fmt(x: float) -> str:
    return f"{x:.4f}"


def _pair_row(name: str, c: dict[str, Any]) -> str:
    return (f"| {name} | {_fmt(c['max_abs_deviation_smoothed'])} | {c['step_of_max_smoothed']} | "
            f"{c['signed_smoothed_at_max']:+.4f} | {_fmt(c['max_abs_deviation'])} | "
            f"{_fmt(c['mean_abs_deviation_last50'])} |")


def profile_digest(p: dict[str, Any], top: int = 12) -> dict[str, Any]:
    """Per-step numbers (ms) from one profiled run (``totals``' dict: µs over ``steps`` steps; its kernel list is
    the top 40, its kernel sums are over all kernels)."""
    n = max(1, p["steps"])
    kernels = sorted(p["kernels"], key=lambda k: -k["us"])
    fwd, bwd = p["attention_cpu_us"]["forward"], p["attention_cpu_us"]["backward"]
    return {"steps": p["steps"], "wall_ms": p["wall_ms_per_step"],
            "step_cpu_ms": p["step_cpu_us"] / n / 1000,
            "kernel_ms": p["kernel_us"] / n / 1000,
            "attention_kernel_ms": p["attention_kernel_us"] / n / 1000,
            "attention_cpu_fwd_ms": fwd / n / 1000,
            "attention_cpu_bwd_ms": bwd / n / 1000,
            "rest_cpu_ms": (p["step_cpu_us"] - fwd - bwd) / n / 1000,
            "attention_calls": p["attention_calls"],
            "top": [{"name": k["name"], "ms_per_step": k["us"] / n / 1000, "calls_per_step": k["calls"] / n,
                     "attention": bool(ATTENTION_KERNEL.search(k["name"]))} for k in kernels[:top]]}


def profile_lines(profiles: dict[str, dict[str, Any]]) -> list[str]:
    """The report's profile section: a table of per-step numbers, one column a run, then each run's top kernels."""
    if not profiles:
        return []
    digests = {name: profile_digest(p) for name, p in profiles.items()}
    names = list(digests)
    rows = [("wall time per step under the profiler (median)", "wall_ms"),
            ("CPU time of the step (its record_function range)", "step_cpu_ms"),
            ("CUDA kernel time, all kernels (sum)", "kernel_ms"),
            ("CUDA kernel time, attention's kernels (by name)", "attention_kernel_ms"),
            ("CPU time inside attention forward calls", "attention_cpu_fwd_ms"),
            ("CPU time inside attention backward (autograd node)", "attention_cpu_bwd_ms"),
            ("CPU time of the step outside the attention ranges", "rest_cpu_ms")]
    first = next(iter(digests.values()))
    out = ["## Profile (torch.profiler)", "",
           f"{first['steps']} steps of each run after {PROFILE_WARMUP} warm-up steps; ms per training step. "
           "Kernel times are device time; CPU times include the launches and everything Python does around them. "
           "A step whose wall time is well above its kernel time leaves the GPU idle: its time is the CPU's.", "",
           "| per step (ms) | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    out += [f"| {label} | " + " | ".join(f"{digests[n][key]:.2f}" for n in names) + " |" for label, key in rows]
    out += ["", "Backward ranges counted: " + "; ".join(f"{n}: {', '.join(digests[n]['attention_calls']) or 'none'}"
                                                     for n in names), ""]
    for n in names:
        out += [f"### Top CUDA kernels, {n}", "", "| kernel | ms/step | calls/step | attention |", "|---|---|---|---|"]
        out += [f"| `{k['name'][:100]}` | {k['ms_per_step']:.3f} | {k['calls_per_step']:.1f} | "
                f"{'yes' if k['attention'] else ''} |" for k in digests[n]["top"]]
        out.append("")
    return out


def report_lines(today: str, meta: dict[str, Any], summary: dict[str, Any],
                 profiles: dict[str, dict[str, Any]] | None = None) -> list[str]:
    """The .md report."""
    ctrl, second = summary["control"], summary["second_reading"]
    md = [f"# Tiny GPT, course attention vs SDPA, {today}", "", *(f"- {k}: {v}" for k, v in meta.items()), "",
          "## The criterion (chosen before measuring)", "",
          f"- course vs SDPA, max |difference| of the {WINDOW}-step moving averages: "
          f"{_fmt(summary['max_abs_deviation_smoothed'])} nats at step {summary['step_of_max_smoothed']} "
          f"(course − SDPA there: {summary['signed_smoothed_at_max']:+.4f}); tolerance "
          f"{summary['tolerance_smoothed']}: **agree = {summary['agree']}**", "",
          "## The control: SDPA against itself on another backend (a second, comparative reading; not the criterion)",
          "",
          "| pair | max abs, smoothed | at step | signed (first − second) | max abs, per step | mean abs, last 50 |",
          "|---|---|---|---|---|---|",
          _pair_row("course vs sdpa", {k: summary[k] for k in ("max_abs_deviation", "max_abs_deviation_smoothed",
                                                              "step_of_max_smoothed", "signed_smoothed_at_max",
                                                              "mean_abs_deviation_last50")}),
          _pair_row(ctrl["pair"] + " (control)", ctrl), "",
          f"- within the control (second reading): **{second['within_control']}** — the course's smoothed deviation "
          f"{_fmt(second['course_vs_sdpa_smoothed'])} against the control's {_fmt(second['control_smoothed'])}. "
          "One control run is one sample of the noise; `--seeds K` gives its spread.", ""]
    if "seeds" in summary:
        s = summary["seeds"]
        md += [f"## Over {len(s['seeds'])} init-and-batch seeds (smoothed max |difference|)", "",
               "| seed | course vs sdpa | control | course within control |", "|---|---|---|---|"]
        md += [f"| {sd} | {_fmt(c)} | {_fmt(k)} | {c <= k} |"
               for sd, c, k in zip(s["seeds"], s["course_vs_sdpa_smoothed"], s["control_smoothed"], strict=True)]
        cs, ks = s["course_vs_sdpa_spread"], s["control_spread"]
        md += ["", f"- course vs sdpa: min {_fmt(cs['min'])}, median {_fmt(cs['median'])}, max {_fmt(cs['max'])}; "
               f"control: min {_fmt(ks['min'])}, median {_fmt(ks['median'])}, max {_fmt(ks['max'])}",
               f"- within the tolerance: {s['agree_count']} of {len(s['seeds'])} seeds (the criterion itself is the "
               f"first seed's); course within the control: {s['within_control_count']} of {len(s['seeds'])}; "
               f"the course's largest within the control's largest: {s['course_max_within_control_max']}", ""]
    md += ["## Final loss and step time (first seed)", "", "| run | final loss (mean, last 50) | median ms/step |",
           "|---|---|---|"]
    md += [f"| {name} | {_fmt(loss)} | {summary['median_step_ms'][name]:.1f} |"
           for name, loss in summary["final_loss"].items()]
    md += ["", *profile_lines(profiles or {}), "## Summary (as in the .json)", "",
           *(f"- {k}: {v}" for k, v in summary.items())]
    return md


def write_report(folders: list[Path], stem: str, today: str, meta: dict[str, Any], summary: dict[str, Any],
                 data: dict[str, Any], profiles: dict[str, dict[str, Any]] | None = None) -> None:
    """``<stem>.json`` ({"meta", "summary", **data}) and ``<stem>.md`` into each folder."""
    md = report_lines(today, meta, summary, profiles)
    body = {"meta": meta, "summary": summary, **data, **({"profile": profiles} if profiles else {})}
    for folder in folders:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{stem}.json").write_text(json.dumps(body, indent=1))
        (folder / f"{stem}.md").write_text("\n".join(md) + "\n")


# ---- the runs (GPU) --------------------------------------------------------------------------------------------
def build_model(vocab: int, attn: str, *, layers: int = 4, heads: int = HEADS, d_model: int = D_MODEL,
                context: int = 256, label_attention: bool = False) -> Any:
    """attn: "course", "sdpa" (SDPA's own choice of backend) or "sdpa:<backend>" (pinned: CONTROL_BACKENDS).
    ``label_attention``: each attention call inside a ``record_function`` range (for the profiler)."""
    import torch
    from torch import nn

    from tklab.kernels.attention_autograd import attention as course_attention

    pinned = None
    if attn.startswith("sdpa:"):
        from torch.nn.attention import SDPBackend

        pinned = getattr(SDPBackend, CONTROL_BACKENDS[attn.removeprefix("sdpa:")])
    elif attn not in ("course", "sdpa"):
        raise ValueError(f"attention must be course, sdpa or sdpa:<{'|'.join(CONTROL_BACKENDS)}>, got {attn!r}")
    head_dim = d_model // heads

    def attention(q: Any, k: Any, v: Any) -> Any:
        if attn == "course":
            return course_attention(q, k, v, causal=True)
        if pinned is not None:
            from torch.nn.attention import sdpa_kernel

            with sdpa_kernel(pinned):
                return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
            self.qkv, self.proj = nn.Linear(d_model, 3 * d_model), nn.Linear(d_model, d_model)
            self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))

        def forward(self, x: Any) -> Any:
            b, t, _ = x.shape
            qkv = self.qkv(self.ln1(x)).view(b, t, 3, heads, head_dim)
            q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))  # [b, h, t, d] views, strided rows
            with (torch.profiler.record_function("tiny_gpt.attention") if label_attention
                  else contextlib.nullcontext()):
                y = attention(q, k, v)
            x = x + self.proj(y.transpose(1, 2).reshape(b, t, d_model))
            return x + self.mlp(self.ln2(x))

    class GPT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tok, self.pos = nn.Embedding(vocab, d_model), nn.Embedding(context, d_model)
            self.blocks = nn.ModuleList(Block() for _ in range(layers))
            self.ln, self.head = nn.LayerNorm(d_model), nn.Linear(d_model, vocab, bias=False)

        def forward(self, idx: Any) -> Any:
            x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
            for blk in self.blocks:
                x = blk(x)
            return self.head(self.ln(x))

    return GPT()


def train(attn: str, data: np.ndarray, vocab: int, *, steps: int, seed: int, batch: int, context: int,
          lr: float, label: str | None = None, profile_from: int | None = None) -> dict[str, Any]:
    """One training run; the same seed gives the same initial weights and batches whatever ``attn`` is.
    ``profile_from``: steps from that one on run under torch.profiler (the result gains "profile")."""
    import torch

    torch.manual_seed(seed)
    model = build_model(vocab, attn, context=context, label_attention=profile_from is not None).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.1)
    rng = np.random.default_rng(seed)  # the same batches for every run of this seed
    losses, step_ms = [], []
    tokens = torch.from_numpy(data.astype(np.int64)).cuda()
    offsets = torch.arange(context, device="cuda")
    label = label or attn
    prof: Any = None
    for step in range(steps):
        if step == profile_from:
            prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                      torch.profiler.ProfilerActivity.CUDA])
            prof.start()
        starts = torch.from_numpy(rng.integers(0, len(data) - context - 1, batch)).cuda()
        rows = starts[:, None] + offsets  # [batch, context] positions in the text
        idx, tgt = tokens[rows], tokens[rows + 1]
        for g in opt.param_groups:  # warm-up, then cosine decay
            g["lr"] = lr * min(1.0, (step + 1) / 30) * 0.5 * (1 + math.cos(math.pi * step / steps))
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.profiler.record_function("tiny_gpt.step") if prof is not None else contextlib.nullcontext():
            with torch.autocast("cuda", dtype=torch.bfloat16):
                logits = model(idx)
            loss = torch.nn.functional.cross_entropy(logits.float().view(-1, vocab), tgt.view(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            losses.append(float(loss.detach()))  # syncs
        step_ms.append(1000 * (time.perf_counter() - t0))
        if profile_from is None and (step % 50 == 0 or step == steps - 1):
            print(f"  {label:12s} seed {seed} step {step:4d}  loss {losses[-1]:.4f}", flush=True)
    out: dict[str, Any] = {"attention": label, "loss": losses, "step_ms": step_ms}
    if prof is not None:
        prof.stop()
        out["profile"] = profile_totals(prof, steps - profile_from, step_ms[profile_from:])
    return out


def profile_totals(prof: Any, steps: int, step_ms: list[float]) -> dict[str, Any]:
    """``totals`` of a finished torch.profiler run (its key_averages)."""
    from torch.autograd import DeviceType

    return totals(prof.key_averages(), DeviceType.CUDA, steps, step_ms)


def gpu_problem() -> str | None:
    """Why this machine cannot run the bench (None: it can): the course's kernels need PyTorch, CUDA and sm_90."""
    try:
        import torch
    except ImportError:
        return "bench/train_tiny_gpt.py needs PyTorch with CUDA and an H100/H200 GPU; torch is not installed here"
    if not torch.cuda.is_available():
        return "bench/train_tiny_gpt.py needs an H100/H200 GPU (the course's kernels use TMA and wgmma); " \
               "PyTorch sees no CUDA device here"
    major, minor = torch.cuda.get_device_capability()
    if (major, minor) != (9, 0):
        return f"bench/train_tiny_gpt.py needs an sm_90 GPU (H100/H200) for the course's kernels; " \
               f"this one, {torch.cuda.get_device_name()}, is sm_{major}{minor}"
    return None


def _attention_inputs(batch: int, context: int, *, grad: bool) -> tuple[Any, Any, Any]:
    """q, k, v as the model makes them: bf16 [b, h, t, d] views of one [b, t, 3, h, d] tensor (strided rows)."""
    import torch

    base = torch.randn(batch, context, 3, HEADS, D_MODEL // HEADS, device="cuda", dtype=torch.bfloat16,
                       requires_grad=grad)
    q, k, v = (base[:, :, i].transpose(1, 2) for i in range(3))
    return q, k, v


def sdpa_choice(batch: int, context: int) -> str:
    """The SDPBackend member SDPA picks for the training's attention (its shapes, layout, causal, with grad)."""
    import torch
    from torch.nn.attention import SDPBackend

    try:
        code = torch._fused_sdp_choice(*_attention_inputs(batch, context, grad=True), is_causal=True)
    except (AttributeError, RuntimeError, TypeError) as e:
        return f"unknown ({type(e).__name__}: {str(e)[:80]})"
    names = {int(m.value): n for n, m in SDPBackend.__members__.items()}
    return names.get(int(code), f"unknown ({code})")


def backend_runs(backend: str, batch: int, context: int) -> str | None:
    """None when SDPA pinned to ``backend`` runs forward and backward on the training's inputs, else why not."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q, k, v = _attention_inputs(batch, context, grad=True)
    try:
        with sdpa_kernel(getattr(SDPBackend, CONTROL_BACKENDS[backend])):
            y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        y.float().sum().backward()
        torch.cuda.synchronize()
    except RuntimeError as e:
        return str(e).splitlines()[0][:160] if str(e) else type(e).__name__
    return None


def choose_control(control: str, default_backend: str, batch: int, context: int) -> tuple[str, str, str]:
    """(attention to train the control with, its label in the report, why)."""
    if control == "rerun":
        return "sdpa", "sdpa (rerun)", f"SDPA's own choice ({default_backend}) a second time: nondeterminism alone"
    tried = []
    for c in control_candidates(default_backend) if control == "auto" else [control]:
        problem = backend_runs(c, batch, context)
        if problem is None:
            why = (f"SDPA pinned to {CONTROL_BACKENDS[c]}; SDPA's own choice for the first run: {default_backend}"
                   + (" (the same backend: in effect a rerun)" if CONTROL_BACKENDS[c] == default_backend else "")
                   + (f"; passed over: {'; '.join(tried)}" if tried else ""))
            return f"sdpa:{c}", f"sdpa:{c}", why
        tried.append(f"{c} ({problem})")
    if control != "auto":
        raise SystemExit(f"--control {control}: SDPA cannot run that backend on these inputs: {tried[0]}")
    return "sdpa", "sdpa (rerun)", f"no other fused backend runs here ({'; '.join(tried)}): SDPA's own choice again"


# ---- the command ----------------------------------------------------------------------------------------------
def _positive(text: str) -> int:
    n = int(text)
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {n}")
    return n


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--steps", type=_positive, default=300)
    p.add_argument("--seed", type=int, default=0, help="the text's, and the first init-and-batch seed")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--context", type=int, default=256)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--text", type=Path, help="train on this file instead of the generated text")
    p.add_argument("--tolerance", type=float, default=0.05, help="max |difference| of the smoothed curves (nats)")
    p.add_argument("--control", choices=CONTROLS, default="auto",
                   help="the second SDPA run: auto (the fused backend SDPA did not pick), a backend, or rerun")
    p.add_argument("--seeds", type=_positive, default=1, help="init-and-batch seeds: seed, seed+1, ... (default 1)")
    p.add_argument("--profile", action="store_true", help="then profile a few steps of each attention")
    p.add_argument("--profile-steps", type=_positive, default=5, help="steps profiled per run (after 5 warm-up)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    problem = gpu_problem()
    if problem:
        print(problem, file=sys.stderr)
        return 2
    import torch

    text = args.text.read_text() if args.text else generated_text(args.seed)
    chars = sorted(set(text))
    lookup = {c: i for i, c in enumerate(chars)}
    data = np.array([lookup[c] for c in text], np.int32)
    default_backend = sdpa_choice(args.batch, args.context)
    control_attn, control_label, control_why = choose_control(args.control, default_backend, args.batch,
                                                              args.context)
    print(f"SDPA's own backend: {default_backend}; control: {control_label} ({control_why})", flush=True)
    common = {"steps": args.steps, "batch": args.batch, "context": args.context, "lr": args.lr}
    per_seed, all_runs = [], []
    for seed in range(args.seed, args.seed + args.seeds):
        runs = [train(a, data, len(chars), seed=seed, label=lbl, **common)
                for a, lbl in (("course", "course"), ("sdpa", "sdpa"), (control_attn, control_label))]
        per_seed.append({"seed": seed, "summary": summarize(*runs, tolerance=args.tolerance)})
        all_runs.append(runs)
    summary = per_seed[0]["summary"]
    if args.seeds > 1:
        summary["seeds"] = seed_spread(per_seed)
    profiles = {}
    if args.profile:
        for a, lbl in (("course", "course"), ("sdpa", "sdpa"), (control_attn, control_label)):
            if lbl in profiles or (a == "sdpa" and lbl != "sdpa"):
                continue  # a rerun control profiles the same thing as sdpa
            print(f"  profiling {lbl} ...", flush=True)
            profiles[lbl] = train(a, data, len(chars), seed=args.seed, label=lbl, profile_from=PROFILE_WARMUP,
                                  steps=PROFILE_WARMUP + args.profile_steps, batch=args.batch,
                                  context=args.context, lr=args.lr)["profile"]
    today = datetime.date.today().isoformat()
    meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "commit": recorded.commit(),
            "nvrtc": recorded.nvrtc(),
            "date": datetime.datetime.now().isoformat(timespec="seconds"),
            "args": {k: str(v) for k, v in vars(args).items()},
            "text": str(args.text) if args.text else "generated arithmetic sentences", "vocab": len(chars),
            "model": "4 layers, 8 heads x 64, d_model 512, bf16 autocast, AdamW",
            "sdpa_backend": default_backend, "control": f"{control_label}: {control_why}",
            "seeds": f"init and batches from seeds {args.seed}..{args.seed + args.seeds - 1}; the text from "
                     f"{'the file' if args.text else f'seed {args.seed}'}"}
    stem = f"train_tiny_gpt_{today}_{recorded.commit()}"
    data_out: dict[str, Any] = {"runs": all_runs[0][:2], "control_run": all_runs[0][2]}
    if args.seeds > 1:
        data_out["other_seeds"] = [{"seed": s["seed"], "runs": r} for s, r in zip(per_seed[1:], all_runs[1:],
                                                                                  strict=True)]
    folders = [ROOT / "bench" / "results", *([Path(os.environ["OUT"])] if os.environ.get("OUT") else [])]
    write_report(folders, stem, today, meta, summary, data_out, profiles)
    print(json.dumps(summary, indent=1))
    if profiles:
        print("\n".join(profile_lines(profiles)))
    print(ROOT / "bench" / "results" / f"{stem}.json")
    return 0 if summary["agree"] else 1


if __name__ == "__main__":
    sys.exit(main())
