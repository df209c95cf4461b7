"""Attention forward: the maths in NumPy, a float64 reference, and the FlashAttention kernels of
chapters 09 and 10 launched from Python.

Why a module: the chapters, the tests and ``bench/flash_fwd.py`` all launch the same kernels on the same
layouts; the launch geometry (block rows, shared memory, tensor maps) is derived here, in one place, from
the compile-time options the kernel is built with.

The maths (CPU, NumPy):
    ``naive(q, k, v, causal=, scale=)``          softmax(Q K^T) V through the whole N x N score matrix
    ``online(q, k, v, block=, causal=, scale=)``  the same, one block of keys at a time (FlashAttention's
                                                  online softmax), optionally with a trace of (m, l)
    ``flops(b, h, n, d, causal)``                 4 b h n^2 d, halved under a causal mask
    ``block_map(n, rows, keys, causal)``          which (query, key) blocks a kernel computes or skips
    ``traffic(b, h, n, d, ...)``                  bytes moved, naive vs FlashAttention (a model)
The kernels (GPU; torch tensors, or CuPy arrays holding bf16 bits as uint16), layout [batch, heads, seq, d]:
    ``flash_fwd(q, k, v, causal=, scale=, kernel="hopper"|"tiles", **options) -> (o, lse)``
                                                  (torch: a repeated call only launches, LAUNCHES)
    ``prepare(q, k, v, o, lse, ...) -> run()``     pack once, launch many times (benchmarks)
    ``launch_grid(build, b, h, n, sms=)``         its grid: a block per (query block, head, batch), or under
                                                  PERSISTENT=1 or 2 one per SM walking them (tk::tile_scheduler;
                                                  2: causal items by cost, tk::longest_first), 3: 1's order on
                                                  a line of a block per item
    ``reference(q, k, v, causal=, scale=)``       (o, lse) in float64 with torch, on the GPU
    ``errors(o, lse, q, k, v, ...)``              relative errors and the first wrong element
    ``sdpa(q, k, v, causal=, backend=)``          PyTorch's attention pinned to one backend (the baselines)
    ``compare_sdpa(key, kernel=, label=, ...)``   kernel vs cuDNN and flash in the same run, recorded
Guards (``limits.ConfigError``, a ValueError): ``build`` refuses options the kernel cannot run (a schedule
that needs two consumers with one, shared memory over the device's per-block limit); ``compiled`` refuses a
build whose compiled kernel spills; ``scale`` must be positive. The register split is checked by the
library at compile time (``warpgroup::register_split``: the block's launch pool, not the register file).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..paths import REPO, solution
from ..run.launch_memo import LaunchMemo
from ..run.limits import ConfigError, check_compiled, check_shared

ROOT = REPO
SOLUTIONS = ROOT / "solutions"
LOG2E = 1.4426950408889634


# ---- the maths, on the CPU -------------------------------------------------------------------------
def _scale(d: int, scale: float | None) -> float:
    return 1.0 / math.sqrt(d) if scale is None else float(scale)


def naive(q: np.ndarray, k: np.ndarray, v: np.ndarray, *, causal: bool = False,
          scale: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """O and the log-sum-exp L of each row, through the full [..., N, N] score matrix (float64)."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    s = q @ np.swapaxes(k, -1, -2) * _scale(q.shape[-1], scale)
    if causal:
        n = s.shape[-1]
        s = np.where(np.tril(np.ones((s.shape[-2], n), bool)), s, -np.inf)
    m = s.max(axis=-1, keepdims=True)
    p = np.exp(s - m)
    l_sum = p.sum(axis=-1, keepdims=True)
    return (p / l_sum) @ v, (m + np.log(l_sum))[..., 0]


@dataclass
class OnlineTrace:
    """What the online softmax keeps per query row, after each block of keys: the running max m and sum l
    (both [blocks, ..., rows]), and the factor a = exp(m_old - m) that rescaled the output."""

    m: np.ndarray
    l: np.ndarray  # noqa: E741 - the paper's name for the running sum
    a: np.ndarray


def online(q: np.ndarray, k: np.ndarray, v: np.ndarray, *, block: int = 64, causal: bool = False,
           scale: float | None = None, trace: bool = False) -> Any:
    """FlashAttention's online softmax in float64: keys ``block`` at a time, never the N x N matrix.

    Per block j: m_new = max(m, rowmax S_j); a = exp(m - m_new); l = a l + rowsum exp(S_j - m_new);
    O = a O + exp(S_j - m_new) V_j. At the end O / l is exactly softmax(S) V. Returns (o, lse), or
    (o, lse, OnlineTrace) with ``trace=True``.
    """
    if block < 1:
        raise ValueError(f"block must be a positive number of keys, got {block}")
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    n_q, n_k = q.shape[-2], k.shape[-2]
    c = _scale(q.shape[-1], scale)
    m = np.full(q.shape[:-1], -np.inf)
    l_sum = np.zeros(q.shape[:-1])
    o = np.zeros(q.shape[:-1] + v.shape[-1:])
    rows = np.arange(n_q)[:, None]
    ms, ls, as_ = [], [], []
    for start in range(0, n_k, block):
        s = q @ np.swapaxes(k[..., start:start + block, :], -1, -2) * c
        if causal:
            s = np.where(np.arange(start, start + s.shape[-1])[None, :] > rows, -np.inf, s)
        m_new = np.maximum(m, s.max(axis=-1))
        with np.errstate(invalid="ignore"):  # rows that have seen only masked keys keep m = -inf
            a = np.where(np.isneginf(m_new), 1.0, np.exp(m - m_new))
            p = np.where(np.isneginf(m_new)[..., None], 0.0, np.exp(s - m_new[..., None]))
        l_sum = a * l_sum + p.sum(axis=-1)
        o = a[..., None] * o + p @ v[..., start:start + block, :]
        m = m_new
        ms.append(m.copy()), ls.append(l_sum.copy()), as_.append(a)
    out, lse = o / l_sum[..., None], m + np.log(l_sum)
    if trace:
        return out, lse, OnlineTrace(np.stack(ms), np.stack(ls), np.stack(as_))
    return out, lse


SKIPPED, FULL, MASKED = 0, 1, 2  # what a kernel does with one (query block, key block) pair


def block_map(seq: int, block_rows: int, block_keys: int, causal: bool = False) -> np.ndarray:
    """[query blocks, key blocks] of SKIPPED / FULL / MASKED: which blocks of S a kernel computes.

    A block is MASKED when some of its scores are thrown away after computing them (the diagonal under a
    causal mask, keys past the end of the sequence), SKIPPED when it is never computed (entirely above
    the diagonal). This is the loop bound and the mask test of both kernels, written in NumPy.
    """
    rows = np.arange(0, seq, block_rows)[:, None]  # each query block's first row, down the map
    keys = np.arange(0, seq, block_keys)[None, :]  # each key block's first key, across it
    rows_end = np.minimum(rows + block_rows, seq)  # one past each query block's last row
    keys_end = keys + block_keys  # one past each key block's last key (the tile may overhang seq)
    above = causal & (keys >= rows_end)  # every key after every row: nothing to compute
    cut = (keys_end > seq) | (causal & (keys_end > rows + 1))  # a key past seq, or after the block's first row
    return np.where(above, SKIPPED, np.where(cut, MASKED, FULL)).astype(np.int8)


def traffic(batch: int, heads: int, seq: int, d: int, *, block_rows: int, block_keys: int,
            causal: bool = False) -> dict[str, float]:
    """Bytes moved, by a model: what the naive (unfused) attention writes and reads in device memory,
    and what a FlashAttention kernel reads from L2 into the SMs and moves to and from device memory.

    naive: Q, K, V read, O written, and the score matrix S and probabilities P (bf16) each written once
    and read once: 4 x 2 bytes per score. flash_l2: each block reads its Q rows once and every key block
    it visits (K and V), and writes its O rows. flash_hbm: Q, K, V read and O written once -- K and V are
    read by every query block of a head, but those blocks run at about the same time, so after the first
    the rows come from L2 (a model: the notebook checks it against measured bytes).
    """
    heads_total, elem = batch * heads, 2
    qkvo = 4 * heads_total * seq * d * elem
    scores = heads_total * seq * seq * (0.5 if causal else 1.0)
    visited = int((block_map(seq, block_rows, block_keys, causal) != SKIPPED).sum())
    kv_streamed = heads_total * visited * block_keys * d * 2 * elem
    return {"naive_hbm": qkvo + 8 * scores, "flash_hbm": qkvo,
            "flash_l2": kv_streamed + 2 * heads_total * seq * d * elem, "blocks_visited": visited * heads_total}


def flops(batch: int, heads: int, seq: int, d: int, causal: bool = False) -> float:
    """Multiply-adds x 2 of S = Q K^T and O = P V: 4 b h n^2 d, half of it under a causal mask."""
    total = 4.0 * batch * heads * seq * seq * d
    return total / 2 if causal else total


# ---- the kernels -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Build:
    """One compiled variant of a kernel and the launch geometry that follows from its options."""

    kernel: str  # "tiles" (chapter 09) or "hopper" (chapter 10)
    head_dim: int
    options: tuple[str, ...]  # the -D options it is compiled with (every constant the launch depends on)
    threads: int
    block_rows: int  # query rows per block
    shared_bytes: int
    #: the kernel's text when it is not the shipped file's: a variant measured against it (bench/flash_fwd.py)
    source_text: str | None = field(default=None, repr=False)

    @property
    def source(self) -> Path:
        """The shipped file: the chapter's kernel, under PERSISTENT its variant (``PERSISTENT_FILE``), under
        EXP2_SPLIT or MASK_SPLIT the softmax's (``SPLIT_FILE``)."""
        if self.persistent:
            return PERSISTENT_FILE
        return SPLIT_FILE if any(f.startswith(f"-D{o}=") for o in SPLIT_OPTIONS for f in self.options) \
            else solution(KERNELS[self.kernel])

    @property
    def persistent(self) -> int:
        """PERSISTENT's value (0: the chapter's grid, a block per query block, head and batch)."""
        return self.option("PERSISTENT") if any(f.startswith("-DPERSISTENT=") for f in self.options) else 0

    def text(self) -> str:
        """The source this build compiles: ``source_text``, else the shipped file."""
        return self.source.read_text() if self.source_text is None else self.source_text

    def option(self, name: str) -> int:
        """The value of one -D option this build is compiled with (e.g. ``option("BC")``, keys per block)."""
        for flag in self.options:
            key, _, value = flag[2:].partition("=")
            if key == name:
                return int(value)
        raise KeyError(f"{self.kernel} is not built with a {name} option: {self.options}")

    @property
    def arch(self) -> str | None:
        """sm_90a for the Hopper kernel; the GPU's own for chapter 09's (it runs on any GPU from sm_80), sm_80's
        on an older GPU (a T4: the kernel is checked on the CPU emulator there, against sm_80's limits)."""
        from ..run import gpu

        return "sm_90a" if self.kernel == "hopper" else None if gpu.runs("sm_80") or not gpu.available() else "sm_80"


KERNELS = {"tiles": "ch09_flash.cu", "hopper": "ch10_flash.cu"}
#: Option names each kernel understands, with the defaults the launch uses for d = 64 and d = 128: the
#: fastest variants measured on the H200 (the runs: bench/results/flash_fwd_bench_*.md). The one
#: home of these values: the kernels hold none (they refuse to compile without every -D), the launch and
#: the widgets read them here.
DEFAULTS: dict[str, dict[int, dict[str, int]]] = {
    "tiles": {64: {"WARP_ROWS": 32, "BC": 64}, 128: {"WARP_ROWS": 32, "BC": 64}},
    "hopper": {64: {"CONSUMERS": 3, "BC": 128, "STAGES": 2, "SCHEDULE": 1},
               128: {"CONSUMERS": 2, "BC": 176, "STAGES": 2, "SCHEDULE": 2}},
}
#: Options kept out of the chapter's kernel, with the value that means "off" (the flag is passed only when on).
#: PERSISTENT: 1 one block per SM walking (query block, head, batch) items, 2 a causal run's items ranked by cost
#: and dealt in a snake, 3 1's order on a block per item. It gained at some shapes and lost at others on the H200
#: (bench/results/flash_fwd_bench_*.md), so it lives in a variant of the chapter's file, PERSISTENT_FILE.
#: EXP2_SPLIT=n (0-8): n of the 8 scores a lane holds per 16 x 16 subtile exponentiated by a cubic on the FMA pipe
#: (fast::exp2_poly), the rest by MUFU; MASK_SPLIT=1: the key loop split into blocks without a mask and the masked
#: rest. Not measured yet on the H200, so they live in a variant of the chapter's file, SPLIT_FILE.
OPT_IN: dict[str, dict[str, int]] = {"tiles": {}, "hopper": {"PERSISTENT": 0, "EXP2_SPLIT": 0, "MASK_SPLIT": 0}}
#: The chapter's kernel plus solutions/variants/ch10_persistent.patch (``python -m tklab exercises --derive``).
PERSISTENT_FILE = SOLUTIONS / "variants" / "ch10_persistent.cu"
#: The chapter's kernel plus solutions/variants/ch10_softmax_split.patch: the softmax's two options, both passed
#: whenever one is on (with both 0 it compiles to the chapter kernel's SASS).
SPLIT_FILE = SOLUTIONS / "variants" / "ch10_softmax_split.cu"
SPLIT_OPTIONS = ("EXP2_SPLIT", "MASK_SPLIT")
_KV_ALIGN, _TILE_ALIGN = 1024, 1024  # swizzled tiles start on 1024-byte boundaries


def _round_up(x: int, unit: int) -> int:
    return (x + unit - 1) // unit * unit


def build(kernel: str = "hopper", head_dim: int = 128, *, source_text: str | None = None, **options: int) -> Build:
    """The variant of ``kernel`` for ``head_dim`` with ``options`` (e.g. SCHEDULE=0) over the defaults;
    ``source_text`` compiles that text instead of the shipped kernel (same options, same launch)."""
    if kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {', '.join(KERNELS)}, got {kernel!r}")
    if head_dim not in (64, 128):
        raise ValueError(f"the attention kernels handle head dimension 64 or 128, got {head_dim}")
    known = set(DEFAULTS[kernel][head_dim]) | set(OPT_IN[kernel])
    unknown = set(options) - known
    if unknown:
        raise ValueError(f"unknown option(s) {sorted(unknown)} for kernel {kernel!r}; it takes {sorted(known)}")
    opts = DEFAULTS[kernel][head_dim] | OPT_IN[kernel] | {k: int(v) for k, v in options.items()}
    bf16 = 2
    if kernel == "tiles":
        warps, wr, bc = 4, opts["WARP_ROWS"], opts["BC"]
        if wr not in (16, 32) or bc % 16 or bc < 16:
            raise ConfigError(f"WARP_ROWS must be 16 or 32 and BC a multiple of 16, got {wr}, {bc}")
        tiles = warps * wr * head_dim * bf16 + 4 * bc * head_dim * bf16  # q[4], k[2], v[2]
        threads, rows, smem = warps * 32, warps * wr, _round_up(tiles, _TILE_ALIGN) + 1024
    else:
        cons, bc, stages, schedule = opts["CONSUMERS"], opts["BC"], opts["STAGES"], opts["SCHEDULE"]
        if cons not in (1, 2, 3) or bc % 16 or not 16 <= bc <= 256 or stages < 1 or schedule not in (0, 1, 2):
            raise ConfigError(f"CONSUMERS must be 1-3, BC a multiple of 16 from 16 to 256 (a TMA box), STAGES >= 1 "
                              f"and SCHEDULE 0, 1 or 2; got {opts}")
        if opts["PERSISTENT"] not in (0, 1, 2, 3):
            raise ConfigError(f"PERSISTENT must be 0 (a block per query block, head and batch), 1 (a block per "
                              f"SM walking a list of them), 2 (1, with a causal run's items ranked by cost over "
                              f"every head and dealt in a snake) or 3 (1's order on a grid of a block per item: the "
                              f"GPU deals them); got {opts['PERSISTENT']}")
        split = {o: opts[o] for o in SPLIT_OPTIONS}
        if not 0 <= split["EXP2_SPLIT"] <= 8 or split["MASK_SPLIT"] not in (0, 1):
            raise ConfigError(f"EXP2_SPLIT must be 0-8 (how many of each 8 scores take the cubic instead of MUFU) and "
                              f"MASK_SPLIT 0 or 1; got {split}")
        if any(split.values()) and opts["PERSISTENT"]:
            raise ConfigError(f"EXP2_SPLIT and MASK_SPLIT are options of the chapter's grid ({SPLIT_FILE.name}), not "
                              f"of PERSISTENT's variant; got {split} with PERSISTENT={opts['PERSISTENT']}")
        if split["MASK_SPLIT"] and not schedule:
            raise ConfigError("MASK_SPLIT=1 splits the key loop of SCHEDULE 1 and 2 (overlap, ping-pong); SCHEDULE=0 "
                              "has none to split")
        if schedule and cons < 2:
            raise ConfigError(f"SCHEDULE={schedule} ({'ping-pong' if schedule == 2 else 'overlap'}) has consumer "
                              "warpgroups take turns, so it needs at least 2 of them (CONSUMERS >= 2); with one "
                              "consumer use SCHEDULE=0")
        tiles = cons * 64 * head_dim * bf16 + 2 * stages * bc * head_dim * bf16
        barriers = 2 * stages * 2 * 8 + 8 + 8 * bool(opts["PERSISTENT"])  # two pipelines' full/empty, q_full (q_empty)
        threads, rows, smem = (cons + 1) * 128, 64 * cons, _round_up(tiles + barriers, _TILE_ALIGN) + 1024
    split_on = kernel == "hopper" and any(opts[o] for o in SPLIT_OPTIONS)
    flags = (f"-DHEAD_DIM={head_dim}",) + tuple(f"-D{k}={v}" for k, v in sorted(opts.items())
                                                if k not in OPT_IN[kernel] or v != OPT_IN[kernel][k]
                                                or (split_on and k in SPLIT_OPTIONS))
    b = Build(kernel, head_dim, flags, threads, rows, smem, source_text)
    check_shared(f"attention.build({kernel!r}, {head_dim}, {', '.join(f'{k}={v}' for k, v in sorted(opts.items()))})",
                 smem, b.arch)
    return b


@functools.cache
def compiled(b: Build, arch: str | None = None) -> Any:
    """The tklab.Kernel for a build (once per process; tklab.compile also caches on disk). ``arch``
    overrides the build's (e.g. to inspect chapter 09's kernel for sm_90a on a machine without a GPU).
    ``ConfigError`` when the compiled kernel spills or does not fit (``limits.check_compiled``)."""
    from ..toolchain.compiler import compile as nvrtc_compile

    k = nvrtc_compile(b.text(), arch=arch or b.arch, name=b.source.name, options=b.options)["flash_fwd"]
    check_compiled(k, what=f"the {b.kernel} attention kernel built with {' '.join(b.options)}",
                   dynamic_shared=k.module.constants["flash_shared_bytes"], threads=b.threads, arch=arch or b.arch)
    return k


def _is_torch(x: Any) -> bool:
    return hasattr(x, "data_ptr") and hasattr(x, "stride")


def _layout(x: Any) -> tuple[tuple[int, ...], tuple[int, ...], str]:
    """(shape, strides in elements, dtype name) of a torch tensor or CuPy array."""
    if _is_torch(x):
        return tuple(x.shape), tuple(x.stride()), str(x.dtype).replace("torch.", "")
    itemsize = x.dtype.itemsize
    return tuple(x.shape), tuple(s // itemsize for s in x.strides), x.dtype.name


def _check_inputs(q: Any, k: Any, v: Any, kernel: str) -> tuple[int, int, int, int]:
    shapes = {name: _layout(x) for name, x in (("q", q), ("k", k), ("v", v))}
    for name, (shape, strides, dtype) in shapes.items():
        if len(shape) != 4:
            raise ValueError(f"{name} must be [batch, heads, seq, d], got shape {shape}")
        if dtype not in ("bfloat16", "uint16"):
            raise ValueError(f"{name} must hold bf16 (torch.bfloat16, or bf16 bits in a uint16 CuPy array); "
                             f"got {dtype}")
        if strides[-1] != 1:
            raise ValueError(f"{name}'s last dimension (d) must be contiguous, got strides {strides}")
    if len({s for s, _, _ in shapes.values()}) != 1:
        raise ValueError(f"q, k and v must have the same shape; got {[s for s, _, _ in shapes.values()]}")
    if kernel == "tiles" and len({st for _, st, _ in shapes.values()}) != 1:
        raise ValueError("the chapter-09 kernel takes one set of strides for q, k and v: make them alike "
                         "(e.g. .contiguous() each)")
    b, h, n, d = shapes["q"][0]
    if d not in (64, 128):
        raise ValueError(f"the attention kernels handle head dimension 64 or 128, got d = {d}")
    if min(b, h, n) < 1:
        raise ValueError(f"empty input: shape {shapes['q'][0]}")
    for name, (_, strides, _) in shapes.items():
        if any(s % 8 for s in strides[:-1]):
            raise ValueError(f"{name}'s strides {strides} must be multiples of 8 elements (16 bytes) for the "
                             "16-byte copies")
    return b, h, n, d


#: The launches of flash_fwd and attention_bwd.flash_bwd on torch tensors, remembered (tklab.run.launch_memo): under
#: a call's layout (``signature`` of each input, the options) what its checks passed (the shape; the backward's
#: build); under the layout and every array's address, the packed launches themselves. A training step repeats both.
LAUNCHES = LaunchMemo()


def signature(x: Any) -> tuple[Any, ...]:
    """What a torch tensor's launch bytes depend on besides its address: shape, strides, dtype, device."""
    return (tuple(x.shape), tuple(x.stride()), x.dtype, x.device)


def _empty(like: Any, shape: tuple[int, ...], dtype: str, strides: tuple[int, ...] | None = None) -> Any:
    """An uninitialised array on like's device, of like's library."""
    if _is_torch(like):
        import torch

        tdt = {"bfloat16": torch.bfloat16, "float32": torch.float32}[dtype]
        if strides is not None:
            return torch.empty_strided(shape, strides, dtype=tdt, device=like.device)
        return torch.empty(shape, dtype=tdt, device=like.device)
    import cupy as cp

    cdt = {"bfloat16": cp.uint16, "float32": cp.float32}[dtype]
    return cp.empty(shape, dtype=cdt)


def _kernel_scale(d: int, scale: float | None) -> float:
    """The kernels' scale: positive and finite (their online softmax keeps the running max of S x scale,
    which is the max of the scaled scores only for scale > 0; 0 or NaN would give NaN everywhere)."""
    sc = _scale(d, scale)
    if not (math.isfinite(sc) and sc > 0):
        raise ValueError(f"scale must be a positive finite number (the scores are Q K^T x scale), got {scale!r}")
    return sc


def launch_grid(cfg: Build, batch: int, heads: int, seq: int, sms: int | None = None) -> tuple[int, int, int]:
    """The grid a build launches with: (query blocks, heads, batch) blocks, under PERSISTENT=3 one block per
    (query block, head, batch) item in one line, or under PERSISTENT=1 or 2 one block per SM (``sms``; the
    GPU's count when None), never more than there are (query block, head) items."""
    blocks = (seq + cfg.block_rows - 1) // cfg.block_rows
    if cfg.kernel != "hopper" or not cfg.persistent:
        return (blocks, heads, batch)
    if cfg.persistent == 3:
        return (blocks * heads * batch, 1, 1)
    if sms is None:
        from ..run import gpu

        sms = gpu.properties().sm_count
    if sms < 1:
        raise ValueError(f"a persistent grid needs at least one block (sms >= 1), got {sms}")
    return (min(sms, blocks * heads * batch), 1, 1)


def prepare(q: Any, k: Any, v: Any, o: Any, lse: Any, *, causal: bool = False, scale: float | None = None,
            kernel: str = "hopper", stream: Any = None, sms: int | None = None, source_text: str | None = None,
            **options: int) -> Any:
    """Check the inputs, build the variant and its tensor maps once; returns ``run()`` that launches it.
    ``sms`` sizes a persistent grid (PERSISTENT=1; default: the GPU's SM count); ``source_text``: see ``build``."""
    b, h, n, d = _check_inputs(q, k, v, kernel)
    if _layout(o)[0] != (b, h, n, d) or _layout(lse)[0] != (b, h, n):
        raise ValueError(f"o must be {(b, h, n, d)} and lse {(b, h, n)}; got {_layout(o)[0]}, {_layout(lse)[0]}")
    if _layout(lse)[2] != "float32" or _layout(lse)[1] != (h * n, n, 1):
        raise ValueError("lse must be a contiguous float32 [batch, heads, seq] array")
    sc = _kernel_scale(d, scale)
    cfg = build(kernel, d, source_text=source_text, **options)
    fn = compiled(cfg)
    grid = launch_grid(cfg, b, h, n, sms)
    if kernel == "tiles":
        if _layout(o)[1] != _layout(q)[1]:
            raise ValueError("the chapter-09 kernel writes o with q's strides: allocate o like q")
        _, (sb, sh, sn, _), _ = _layout(q)
        args: tuple[Any, ...] = (q, k, v, o, lse, h, n, sb, sh, sn, sc, int(causal))
    else:
        from ..run import tma

        dt = None if _is_torch(q) else "bfloat16"
        bc = cfg.option("BC")
        maps = [tma.tensor_map(x, (rows, d), dtype=dt) for x, rows in ((q, 64), (k, bc), (v, bc), (o, 64))]
        args = (*maps, lse, h, n, sc, int(causal)) + ((b,) if cfg.persistent else ())
    smem = fn.module.constants["flash_shared_bytes"]  # the kernel's own number (cfg.shared_bytes models it)
    return fn.prepare(grid, (cfg.threads,), args, shared_mem=smem, stream=stream)


def flash_fwd(q: Any, k: Any, v: Any, *, causal: bool = False, scale: float | None = None,
              kernel: str = "hopper", sms: int | None = None, **options: int) -> tuple[Any, Any]:
    """O = softmax(Q K^T scale) V and L = the log-sum-exp of each score row, on the GPU.

    ``kernel="hopper"`` (chapter 10: TMA, wgmma, warp specialisation; H100/H200) or ``"tiles"`` (chapter
    09: mma.sync, any GPU from sm_80). ``scale`` defaults to 1/sqrt(d). Returns (o, lse): o like q, lse
    fp32 [batch, heads, seq].
    """
    torch_in = _is_torch(q)
    layout = ("fwd", kernel, causal, scale, sms, tuple(sorted(options.items())), *map(signature, (q, k, v))) \
        if torch_in else None
    shape = LAUNCHES.get(layout) if torch_in else None
    if shape is None:
        shape = _check_inputs(q, k, v, kernel)
        _kernel_scale(shape[3], scale)
        build(kernel, shape[3], **options)  # refused before anything is allocated
    b, h, n, d = shape
    o = _empty(q, (b, h, n, d), "bfloat16", tuple(q.stride()) if torch_in else None)
    lse = _empty(q, (b, h, n), "float32")
    if not torch_in:
        prepare(q, k, v, o, lse, causal=causal, scale=scale, kernel=kernel, sms=sms, **options)()
        return o, lse
    key = (layout, q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), lse.data_ptr())
    run = LAUNCHES.get(key)
    if run is None:
        run = prepare(q, k, v, o, lse, causal=causal, scale=scale, kernel=kernel, sms=sms, **options)
        LAUNCHES.put(layout, shape)  # these inputs passed every check
        LAUNCHES.put(key, run.detached())
    run()
    return o, lse


# ---- the library baselines and a same-run comparison (GPU, torch) -------------------------------------
SDPA_BACKENDS = {"flash": "FLASH_ATTENTION", "cudnn": "CUDNN_ATTENTION", "efficient": "EFFICIENT_ATTENTION",
                 "math": "MATH"}


def sdpa(q: Any, k: Any, v: Any, *, causal: bool = False, backend: str = "cudnn") -> Any:
    """``run()`` calling PyTorch's scaled_dot_product_attention pinned to one backend: "flash"
    (FlashAttention-2), "cudnn", "efficient" or "math" -- what a PyTorch user gets."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    if backend not in SDPA_BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(SDPA_BACKENDS)}, got {backend!r}")
    which = getattr(SDPBackend, SDPA_BACKENDS[backend])

    def run() -> Any:
        with sdpa_kernel(which):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)

    return run


def compare_sdpa(key: str, *, kernel: str, label: str, d: int = 128, seq: int = 8192, causal: bool = False,
                 tokens: int = 16384, **options: int) -> Any:
    """Time a kernel variant and SDPA's cuDNN and flash backends in the same run (GPU), or show the
    recorded numbers (no GPU): ``tklab.recorded.measure`` under ``key``. The shape is the anchors'
    (``tokens`` per batch, 2048 hidden). The kernel is first checked against float64 on a smaller input.
    """
    from .. import recorded

    def run() -> dict[str, Any]:
        import torch

        from ..run.bench import bench
        from ..run.ceilings import for_device

        small = [torch.randn(1, 2, min(seq, 1024), d, device="cuda", dtype=torch.bfloat16) for _ in range(3)]
        o_small, lse_small = flash_fwd(*small, causal=causal, kernel=kernel, **options)
        e = errors(o_small, lse_small, *small, causal=causal)
        if not e.ok():
            raise AssertionError(f"{kernel} {options} is wrong, not timed: {e}")
        b, h = tokens // seq, 2048 // d
        q, k, v = (torch.randn(b, h, seq, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        o, lse = torch.empty_like(q), torch.empty(b, h, seq, device="cuda")
        fl = flops(b, h, seq, d, causal)
        ours = bench(prepare(q, k, v, o, lse, causal=causal, kernel=kernel, **options), flops=fl, progress=False)
        cudnn = bench(sdpa(q, k, v, causal=causal, backend="cudnn"), flops=fl, progress=False)
        flash = bench(sdpa(q, k, v, causal=causal, backend="flash"), flops=fl, progress=False)
        out = {"label": label, "tflops": ours.tflops, "ms": ours.ms, "library_tflops": cudnn.tflops,
               "library_ms": cudnn.ms, "library": "SDPA cuDNN", "flash_tflops": flash.tflops,
               "ceiling": "bf16_tensor", "shape": [b, h, seq, d], "causal": causal}
        try:
            out["ceiling_tflops"] = for_device(ours.device).bf16_tensor_tflops
        except Exception:  # noqa: BLE001 - an unknown GPU has no ceiling column
            pass
        return out

    return recorded.measure(key, run)


# ---- checking the kernels (GPU, torch) ---------------------------------------------------------------
def reference(q: Any, k: Any, v: Any, *, causal: bool = False, scale: float | None = None) -> tuple[Any, Any]:
    """(o, lse) in float64 with torch, on q's device: the exact answer the kernels approximate."""
    import torch

    qd, kd, vd = (x.double() for x in (q, k, v))
    s = (qd @ kd.transpose(-1, -2)) * _scale(q.shape[-1], scale)
    if causal:
        n = s.shape[-1]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device=s.device).triu(1), float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    return torch.softmax(s, dim=-1) @ vd, lse


@dataclass
class Errors:
    """How far a kernel's (o, lse) are from the float64 reference."""

    o_rel: float  # ||o - ref|| / ||ref||
    lse_max_abs: float
    unwritten: int  # outputs still NaN (the caller poisons o before the run)
    first_wrong: str  # the first element outside tolerance, with its index, or ""

    def ok(self, tol: float = 1e-2) -> bool:
        return self.unwritten == 0 and self.o_rel < tol and self.lse_max_abs < 1e-2 and not self.first_wrong

    def __str__(self) -> str:
        return (f"o rel {self.o_rel:.2e}, lse max abs {self.lse_max_abs:.2e}, unwritten {self.unwritten}"
                + (f", first wrong {self.first_wrong}" if self.first_wrong else ""))


def errors(o: Any, lse: Any, q: Any, k: Any, v: Any, *, causal: bool = False, scale: float | None = None,
           atol: float = 2e-2, rtol: float = 2e-2) -> Errors:
    """Compare a kernel's outputs (torch) with ``reference``; elementwise tolerance atol + rtol |ref|."""
    import torch

    ref_o, ref_lse = reference(q, k, v, causal=causal, scale=scale)
    od = o.double()
    unwritten = int(torch.isnan(od).sum()) + int(torch.isnan(lse).sum())
    diff = (od - ref_o).abs()
    bad = diff > atol + rtol * ref_o.abs()
    first = ""
    if bool(bad.any()):
        idx = tuple(int(i) for i in torch.nonzero(bad)[0])
        first = f"o{list(idx)} = {float(od[idx]):.4f}, expected {float(ref_o[idx]):.4f}"
    rel = float(torch.linalg.norm(torch.nan_to_num(od) - ref_o) / torch.linalg.norm(ref_o))
    lse_err = float((torch.nan_to_num(lse.double()) - ref_lse).abs().max())
    return Errors(rel, lse_err, unwritten, first)
