"""Train a tiny GPT twice from the same seed -- once with the course's attention (chapter 10's forward,
chapter 11's backward), once with PyTorch's SDPA -- and compare the loss curves (GPU, H100/H200).

    python bench/train_tiny_gpt.py [--steps 300] [--text FILE] [--tolerance 0.05]

The text: by default generated here (deterministic from the seed, the same on every machine and commit):
sentences of small arithmetic ("seventeen plus 4 is 21.") that a character model can learn, so the loss
falls far in a few hundred steps; ``--text`` trains on a file instead (e.g. README.md). Model: 4 layers,
8 heads of d = 64 (d_model 512), context 256, character vocabulary, bf16 autocast, AdamW. Both runs
draw the same initial weights and the same batches; only the attention differs. Writes
``bench/results/train_tiny_gpt_<date>_<commit>.json`` (both curves, per-step ms, max and final-window
deviation) and a .md summary, also into $OUT when set. Exit status 1 when the curves differ by more than
``--tolerance`` (nats, on a 10-step moving average): a criterion chosen before measuring, not a result.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
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


def build_model(vocab: int, attn: str, *, layers: int = 4, heads: int = 8, d_model: int = 512,
                context: int = 256) -> Any:
    import torch
    from torch import nn

    from tklab.kernels.attention_autograd import attention as course_attention

    head_dim = d_model // heads

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
            if attn == "course":
                y = course_attention(q, k, v, causal=True)
            else:
                y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
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
          lr: float) -> dict[str, Any]:
    import torch

    torch.manual_seed(seed)
    model = build_model(vocab, attn, context=context).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.1)
    rng = np.random.default_rng(seed)  # the same batches for both runs
    losses, step_ms = [], []
    tokens = torch.from_numpy(data.astype(np.int64)).cuda()
    offsets = torch.arange(context, device="cuda")
    for step in range(steps):
        starts = torch.from_numpy(rng.integers(0, len(data) - context - 1, batch)).cuda()
        rows = starts[:, None] + offsets  # [batch, context] positions in the text
        idx, tgt = tokens[rows], tokens[rows + 1]
        for g in opt.param_groups:  # warm-up, then cosine decay
            g["lr"] = lr * min(1.0, (step + 1) / 30) * 0.5 * (1 + math.cos(math.pi * step / steps))
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(idx)
        loss = torch.nn.functional.cross_entropy(logits.float().view(-1, vocab), tgt.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(float(loss))  # syncs
        step_ms.append(1000 * (time.perf_counter() - t0))
        if step % 50 == 0 or step == steps - 1:
            print(f"  {attn:6s} step {step:4d}  loss {losses[-1]:.4f}", flush=True)
    return {"attention": attn, "loss": losses, "step_ms": step_ms}


def smooth(x: list[float], w: int = 10) -> np.ndarray:
    a = np.asarray(x)
    return np.array([a[max(0, i - w + 1):i + 1].mean() for i in range(len(a))])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--context", type=int, default=256)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--text", type=Path, help="train on this file instead of the generated text")
    p.add_argument("--tolerance", type=float, default=0.05, help="max |difference| of the smoothed curves (nats)")
    args = p.parse_args()
    import torch

    text = args.text.read_text() if args.text else generated_text(args.seed)
    chars = sorted(set(text))
    lookup = {c: i for i, c in enumerate(chars)}
    data = np.array([lookup[c] for c in text], np.int32)
    runs = [train(a, data, len(chars), steps=args.steps, seed=args.seed, batch=args.batch, context=args.context,
                  lr=args.lr) for a in ("course", "sdpa")]
    raw = np.abs(np.array(runs[0]["loss"]) - np.array(runs[1]["loss"]))
    sm = np.abs(smooth(runs[0]["loss"]) - smooth(runs[1]["loss"]))
    last = slice(max(0, args.steps - 50), args.steps)
    summary = {"max_abs_deviation": float(raw.max()), "max_abs_deviation_smoothed": float(sm.max()),
               "mean_abs_deviation_last50": float(raw[last].mean()), "tolerance_smoothed": args.tolerance,
               "agree": bool(sm.max() <= args.tolerance),
               "final_loss": {r["attention"]: float(np.mean(r["loss"][last])) for r in runs},
               "median_step_ms": {r["attention"]: float(np.median(r["step_ms"][5:])) for r in runs}}
    today = datetime.date.today().isoformat()
    meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "commit": recorded.commit(),
            "nvrtc": recorded.nvrtc(),
            "date": datetime.datetime.now().isoformat(timespec="seconds"),
            "args": {k: str(v) for k, v in vars(args).items()},
            "text": str(args.text) if args.text else "generated arithmetic sentences", "vocab": len(chars),
            "model": "4 layers, 8 heads x 64, d_model 512, bf16 autocast, AdamW"}
    stem = f"train_tiny_gpt_{today}_{recorded.commit()}"
    md = [f"# Tiny GPT, course attention vs SDPA, {today}", "", *(f"- {k}: {v}" for k, v in meta.items()), "",
          *(f"- {k}: {v}" for k, v in summary.items())]
    for folder in [ROOT / "bench" / "results", *([Path(os.environ["OUT"])] if os.environ.get("OUT") else [])]:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{stem}.json").write_text(json.dumps({"meta": meta, "summary": summary, "runs": runs}, indent=1))
        (folder / f"{stem}.md").write_text("\n".join(md) + "\n")
    print(json.dumps(summary, indent=1))
    print(ROOT / "bench" / "results" / f"{stem}.json")
    return 0 if summary["agree"] else 1


if __name__ == "__main__":
    sys.exit(main())
