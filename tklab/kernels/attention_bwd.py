"""Attention backward (chapter 11): the maths in float64 NumPy, and the Hopper FlashAttention backward
(``solutions/ch11_flash_bwd/ch11_flash_bwd.cu``, FlashAttention-3's layout; with SWAPAB=0 the chapter's first
kernel, ``solutions/variants/ch11_bwd_rows.cu``) launched on the GPU or on the CPU emulator.

Why a module apart from ``attention.py``: the backward has its own three kernels, launch geometry and
reference; it imports the forward's helpers (scale, layout checks) rather than growing that module.

The maths (CPU, NumPy, float64):
    ``reference(q, k, v, do, causal=, scale=) -> Grads``   dQ, dK, dV (and O, L, D) through the full matrix
    ``flops(b, h, n, d, causal)``                          2.5x the forward's: five products instead of two
The kernels, layout [batch, heads, seq, d] (bf16: torch tensors or CuPy uint16 arrays on the GPU; NumPy
uint16 arrays holding bf16 bits run on the CPU emulator -- correctness only):
    ``build(head_dim, **options) -> BwdBuild``             the variant and its launch geometry
    ``flash_bwd(q, k, v, o, lse, do, causal=, scale=) -> (dq, dk, dv)``
                                                           (torch: a repeated call only launches, attention.LAUNCHES)
    ``prepare(q, k, v, o, lse, do, dq, dk, dv, ...) -> run()``   GPU: pack once, launch many times
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from ..paths import solution
from ..run.limits import SHARED_OPTIN
from . import attention
from .attention import LAUNCHES, SOLUTIONS, _check_inputs, _empty, _is_torch, _layout, _scale, signature

KERNEL = solution("ch11_flash_bwd.cu")
LOG2E = attention.LOG2E
#: Options the kernel understands and the defaults for d = 64 and d = 128.
#: DQ_MODE: how dQ's shares are added over key blocks, 0 atomicAdd from registers, 1 TMA reduce-add, 2 a slot per
#: key block (a plain TMA store) summed in a fixed order by the last pass. 1 is the default: on the H200 it ran
#: well ahead of 0 at every shape measured. 2 is bit-for-bit reproducible at the price of N / 128 copies of dQ in
#: fp32, and slower than 1 in the same runs, so it is opt-in (the runs: bench/results/flash_bwd_*.md).
#: Options measured slower than the default, each in a run of its own, were removed from the kernel rather than
#: kept switched off (OVERLAP, ORDER, DQ_SUM: what each did and its run are in docs/ROADMAP.md, chapter 11).
DEFAULTS: dict[int, dict[str, int]] = {64: {"CONSUMERS": 2, "STAGES": 2, "DQ_MODE": 1},
                                       128: {"CONSUMERS": 2, "STAGES": 2, "DQ_MODE": 1}}
#: Options whose default lives with the kernel (the value it takes without the flag, per head dimension); a build
#: passes one only when set to another value, so the default build's options stay as chapter 11 prints them.
#: UNIFORM: 1 takes the consumer index from a shuffle (warp-uniform): the wgmma descriptors live in uniform
#: registers (d = 128: no R2UR left in the loop, and a shorter loop; tests/test_attention_bwd.py holds both). On
#: the H200 it was faster at d = 128 and slower at d = 64 (bench/results/flash_bwd_*.md): hence on at d = 128 only.
#: DQ_LAG: 1 (d = 128, DQ_MODE 1) forms query block i's dQ in step i + 1, from two dS buffers handed over by
#: mbarriers, so the two consumers no longer meet twice a step. PINGPONG: 1 makes the two consumers take turns
#: issuing their products, so one forms P and dS while the other's run (at d = 128 it brings DQ_LAG=1 with it:
#: the split dQ would tie them together every step). Both live in a file of their own, LAG_FILE.
#: SWAPAB: 1 (two consumers, DQ_MODE 1) is FlashAttention-3's Hopper layout, the chapter's KERNEL: S^T = K Q^T and
#: dP^T = V dO^T, so P^T and dS^T are the register A operand of dV and dK; 128-query steps at d = 64, 64 at d = 128;
#: L and D by TMA from a per-step layout its own first pass writes (so that build's prep and main kernels take other
#: arguments). QSTEP (SWAPAB=1 only): the queries per step, 128 at d = 64; 64 or 80 at d = 128. DQ_WRITER
#: (SWAPAB=1 only): 1, one warp of the producer's warpgroup sends each step's dQ (both consumers' parts); 0, each
#: consumer sends its own after a barrier of its warpgroup. DETERMINISTIC (SWAPAB=1 with the dQ writer only): 1, the
#: key blocks add each step's dQ in blockIdx order, taking turns on an int32 counter per (batch, head, step) that the
#: first pass zeroes (turns_shape): dQ the same bit for bit on every run, for no memory beyond the counters (DQ_MODE 2,
#: the rows kernel's way, keeps a copy of dQ per key block). Opt-in: the blocks of a head wait for each other.
#: DQ_FRAGMENTS (SWAPAB=1 only; the chapter's kernel, on at d = 128): each consumer stores its dQ part as it sits in
#: registers (16-byte stores, no swizzled addresses) into an accumulator kept in that order, which the last pass reads
#: back part by part. On the H200 it ran 2.7-9.2 % faster at d = 128 and 1.1-3.3 % slower at d = 64
#: (bench/results/flash_bwd_*_fragments*.md): hence on at d = 128 only.
#: DQ_UNDER_DK and STATS_EARLY (SWAPAB=1 only), how the step is ordered: DQ_UNDER_DK=1 (the chapter's kernel since it
#: measured 1-6 % faster at every anchor on the H200, median over rounds in two runs, bench/results/flash_bwd_*.md)
#: issues dQ's part before dK and stores it for the writer while dK runs, as FlashAttention-3/-4 do; 0 is the order
#: before (dK before the consumers' barrier, every product waited for before dQ's store); STATS_EARLY=1 loads L and D
#: from shared memory before the waits for S^T and dP^T, not after (1-8 % slower on the H200, same runs). A value
#: other than the chapter's builds STEP_FILE.
OPT_IN: dict[str, dict[int, int]] = {"UNIFORM": {64: 0, 128: 1},
                                     "DQ_LAG": {64: 0, 128: 0}, "PINGPONG": {64: 0, 128: 0}, "SWAPAB": {64: 0, 128: 0},
                                     "DQ_WRITER": {64: 1, 128: 1}, "QSTEP": {64: 128, 128: 64},
                                     "DETERMINISTIC": {64: 0, 128: 0}, "DQ_UNDER_DK": {64: 1, 128: 1},
                                     "DQ_FRAGMENTS": {64: 0, 128: 1}, "STATS_EARLY": {64: 0, 128: 0}}
#: SWAPAB=0: the backward with the queries as rows (one or two consumers, DQ_MODE 0, 1 or 2), a file of its own.
ROWS_FILE = SOLUTIONS / "variants" / "ch11_bwd_rows.cu"
#: DQ_LAG and PINGPONG's flash_bwd, built as ROWS_FILE (its flash_bwd renamed) followed by this one.
LAG_FILE = SOLUTIONS / "variants" / "ch11_dq_lag.cu"
#: STEP_OPTIONS: the chapter's kernel plus solutions/variants/ch11_step_options.patch (``python -m tklab
#: exercises --derive``); with the chapter's values (OPT_IN) it compiles to the chapter kernel's SASS.
STEP_FILE = SOLUTIONS / "variants" / "ch11_step_options.cu"
STEP_OPTIONS = ("DQ_UNDER_DK", "STATS_EARLY")
#: The options only SWAPAB=1's kernel (the chapter's) takes.
SWAPAB_ONLY = ("DQ_WRITER", "QSTEP", "DQ_UNDER_DK", "DQ_FRAGMENTS", "STATS_EARLY")
#: SWAPAB=1: queries per step by head dimension; the per-step statistics box is fp32 STATS_ROWS x (queries / 4)
#: (L log2 e, then D).
SWAPAB_QSTEP, STATS_ROWS = {64: 128, 128: 64}, 8
_PREP_ROWS = 4  # query rows per block of flash_bwd_prep (one warp each)
_DQ_THREADS = 256


# ---- the maths, on the CPU -------------------------------------------------------------------------
class Grads(NamedTuple):
    """The backward's outputs (dq, dk, dv) and the forward quantities it is built from (o, lse, delta)."""

    dq: np.ndarray
    dk: np.ndarray
    dv: np.ndarray
    o: np.ndarray
    lse: np.ndarray
    delta: np.ndarray


def reference(q: np.ndarray, k: np.ndarray, v: np.ndarray, do: np.ndarray, *, causal: bool = False,
              scale: float | None = None) -> Grads:
    """The exact gradients in float64 through the full [..., N, N] matrices, written as the kernel forms
    them (P from L, D = rowsum(dO o O), dS = P (dP - D)), so each quantity can be compared on its own."""
    q, k, v, do = (np.asarray(x, np.float64) for x in (q, k, v, do))
    c = _scale(q.shape[-1], scale)
    o, lse = attention.naive(q, k, v, causal=causal, scale=c)
    s = q @ np.swapaxes(k, -1, -2) * c
    p = np.exp(s - lse[..., None])
    if causal:
        p = np.where(np.tril(np.ones(s.shape[-2:], bool)), p, 0.0)
    delta = (do * o).sum(-1)
    dp = do @ np.swapaxes(v, -1, -2)
    ds = p * (dp - delta[..., None])
    return Grads(c * ds @ k, c * np.swapaxes(ds, -1, -2) @ q, np.swapaxes(p, -1, -2) @ do, o, lse, delta)


def flops(batch: int, heads: int, seq: int, d: int, causal: bool = False) -> float:
    """Five products of 2 n^2 d multiply-adds each (S, dP, dV, dK, dQ) against the forward's two: 2.5x
    ``attention.flops`` (the count the anchors use), halved under a causal mask. S is recomputed, so the
    backward does 5 products' work where "2x the forward" would count 4."""
    return 2.5 * attention.flops(batch, heads, seq, d, causal)


@dataclass
class GradErrors:
    """How far one gradient is from the float64 reference: the tolerance rule of the chapter and tests.

    Two tests, both must hold: ``rel`` = ||got - ref|| / ||ref|| below ``REL_TOL`` (the whole tensor), and
    no element with |got - ref| > tol (|ref| + rms(ref)) + 1e-3 (``wrong``: one element, relative to itself
    with a floor at the tensor's typical size). Why that loose per element: the kernel rounds P and dS
    to bf16 before the products, as every FlashAttention does, and dS = P (dP - D) cancels where the
    softmax is peaked: under large logits (|scale S| ~ 40) single entries of dQ and dK measured up to 5 %
    of (|ref| + rms) off on the emulator, while rel stayed near 5e-3.
    """

    name: str
    rel: float
    wrong: int
    first_wrong: str

    def ok(self) -> bool:
        return self.wrong == 0 and self.rel < REL_TOL

    def __str__(self) -> str:
        first = f", first {self.first_wrong}" if self.wrong else ""
        return f"{self.name}: rel {self.rel:.2e}, {self.wrong} wrong{first}"


REL_TOL = 1e-2


def grad_errors(name: str, got: np.ndarray, ref: np.ndarray, tol: float = 0.1) -> GradErrors:
    """Compare one gradient (float, any shape; NaN counts as wrong) with its float64 reference."""
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    rms = float(np.sqrt(np.mean(ref * ref))) if ref.size else 0.0
    diff = np.abs(got - ref)
    bad = ~(diff <= tol * (np.abs(ref) + rms) + 1e-3)  # NaN fails too
    first = ""
    if bad.any():
        idx = tuple(int(i) for i in np.argwhere(bad)[0])
        first = f"{name}{list(idx)} = {got[idx]:.4f}, expected {ref[idx]:.4f}"
    # relative to the reference's norm, floored by the per-element absolute term (1e-3 per element): a gradient
    # that is exactly zero (one key: dS = P (dP - D) = 0) is compared with rounding noise, not divided by 0
    floor = 1e-3 * float(np.sqrt(ref.size))
    rel = float(np.linalg.norm(np.nan_to_num(got - ref, nan=1e30)) / max(float(np.linalg.norm(ref)), floor, 1e-30))
    return GradErrors(name, rel, int(bad.sum()), first)


# ---- the build ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class BwdBuild:
    """One compiled variant of the backward and the launch geometry that follows from its options."""

    head_dim: int
    options: tuple[str, ...]
    consumers: int
    stages: int
    dq_mode: int
    variant: bool = False  # LAG_FILE's flash_bwd replaces ROWS_FILE's (DQ_LAG or PINGPONG)
    swapab: bool = False  # the chapter's kernel (KERNEL); else ROWS_FILE

    @property
    def qstep(self) -> int:
        """Queries per step of flash_bwd: 64, or with SWAPAB=1 its QSTEP (default SWAPAB_QSTEP[head_dim])."""
        given = [int(f.split("=")[1]) for f in self.options if f.startswith("-DQSTEP=")]
        return given[-1] if given else SWAPAB_QSTEP[self.head_dim] if self.swapab else 64

    @property
    def step_box_rows(self) -> int:
        """Rows of the Q and dO maps' boxes: 64, or with SWAPAB=1 at d = 128 the whole step."""
        return self.qstep if self.swapab and self.head_dim == 128 else 64

    @property
    def dq_box_rows(self) -> int:
        """Rows of the dQ accumulator map's box: 64, or 80 with 80-query steps (dQ^T's rows stored transposed)."""
        return self.qstep if self.qstep % 64 else 64

    def steps(self, seq: int) -> int:
        """Query steps of flash_bwd over ``seq`` queries (the last one ragged): qstep queries each."""
        return -(-seq // self.qstep)

    @property
    def step_options(self) -> bool:
        """One of STEP_OPTIONS away from the chapter's value (only those reach the flags): built from STEP_FILE."""
        return any(f"-D{o}=" in opt for o in STEP_OPTIONS for opt in self.options)

    @property
    def dq_fragments(self) -> bool:
        """DQ_FRAGMENTS=1 (the chapter's kernel at d = 128, or named): the dQ accumulator in whole steps, each step's
        two parts in register order (the last pass runs a 128-thread block per part)."""
        given = [f for f in self.options if f.startswith("-DDQ_FRAGMENTS=")]
        on = given[-1] == "-DDQ_FRAGMENTS=1" if given else bool(OPT_IN["DQ_FRAGMENTS"][self.head_dim])
        return self.swapab and on

    @property
    def deterministic(self) -> bool:
        """DETERMINISTIC=1: the key blocks add dQ in turns (flash_bwd_prep and flash_bwd take the counters too)."""
        return "-DDETERMINISTIC=1" in self.options

    @property
    def threads(self) -> int:
        return (self.consumers + 1) * 128

    @property
    def kv_block(self) -> int:
        """Keys per block of flash_bwd: 64 per consumer warpgroup."""
        return 64 * self.consumers

    @property
    def dq_lag(self) -> int:
        """1 when dQ is formed one step late: the variant at d = 128 (build() adds DQ_LAG to PINGPONG there)."""
        return int(self.variant and self.head_dim == 128)

    @property
    def dq_cols(self) -> int:
        """Columns of dQ each consumer adds per query block: half of d = 128 when two consumers split it."""
        return self.head_dim // 2 if self.consumers == 2 and self.head_dim == 128 else self.head_dim

    @property
    def shared_bytes(self) -> int:
        """flash_bwd's dynamic shared memory, a model of the kernel's ``flash_bwd_shared_bytes`` (the
        emulator has no PTX to read it from; a GPU test holds the two equal): K, V per consumer, the
        (Q, dO) ring, P and dS per consumer, the fp32 dQ share per consumer (DQ_MODE 1 and 2), the
        barriers, and 1024 bytes of alignment slack."""
        tile, p_tile = 64 * self.head_dim * 2, 64 * 64 * 2
        if self.swapab:  # K, V; the (Q, dO) ring of 128-query steps; dS^T twice per consumer; dQ; L and D
            step = self.qstep * self.head_dim * 2  # one step's Q or dO; dS^T is 64 keys x the step's queries
            body = 2 * self.consumers * tile + 2 * self.stages * step + 2 * self.consumers * 64 * self.qstep * 2
            body += self.consumers * self.dq_box_rows * 64 * 4 + self.stages * 2 * stats_len(self) * 4
            body += 2 * self.stages * 8 + 3 * 8  # the ring's barriers, K and V's, dQ's two
            return 1024 + -(-body // 1024) * 1024
        body = 2 * self.consumers * tile + 2 * self.stages * tile + 2 * self.consumers * p_tile
        body += self.consumers * 64 * self.dq_cols * 4 if self.dq_mode >= 1 else 0
        body += 2 * self.stages * 8 + 8
        if self.variant:  # DQ_LAG: a second dS buffer per consumer; two mbarriers per buffer and consumer
            body += self.dq_lag * self.consumers * p_tile + 2 * (1 + self.dq_lag) * self.consumers * 8
        return 1024 + -(-body // 1024) * 1024

    def dq_slots(self, seq: int) -> int:
        """DQ_MODE 2: slots of dQ shares per (batch, head), one per key block (per consumer without the
        column split), each ``q_rows(seq)`` rows."""
        return -(-seq // self.kv_block) * (1 if self.dq_cols < self.head_dim else self.consumers)

    @staticmethod
    def q_rows(seq: int) -> int:
        """The rows of one slot: every query block's 64, the last one's past the end included."""
        return -(-seq // 64) * 64


def build(head_dim: int = 128, **options: int) -> BwdBuild:
    """The backward for ``head_dim`` with ``options`` (CONSUMERS: 1-2 warpgroups of 64 keys; STAGES)."""
    if head_dim not in DEFAULTS:
        raise ValueError(f"the attention backward handles head dimension 64 or 128, got {head_dim}")
    unknown = set(options) - set(DEFAULTS[head_dim]) - set(OPT_IN)
    if unknown:
        raise ValueError(f"unknown option(s) {sorted(unknown)}; the backward takes "
                         f"{sorted([*DEFAULTS[head_dim], *OPT_IN])}")
    opt_in = {k: int(v) for k, v in options.items() if k in OPT_IN and int(v) != OPT_IN[k][head_dim]}
    bad = sorted(k for k, v in opt_in.items() if v not in (0, 1) and k != "QSTEP")  # QSTEP: checked below
    if bad:
        raise ValueError(f"{' and '.join(bad)} must be 0 or 1; got {opt_in}")
    opts = DEFAULTS[head_dim] | {k: int(v) for k, v in options.items() if k not in OPT_IN} | opt_in
    if swapab_by_default(head_dim, options, opts):
        opt_in["SWAPAB"] = opts["SWAPAB"] = 1
    if "PINGPONG" not in options and "DQ_LAG" not in options and pingpong_by_default(head_dim, opts):
        opt_in["PINGPONG"] = opts["PINGPONG"] = 1
    if opt_in.get("PINGPONG") and head_dim == 128:
        opt_in["DQ_LAG"] = opts["DQ_LAG"] = 1
    if opts["CONSUMERS"] not in (1, 2) or opts["STAGES"] < 1 or opts["DQ_MODE"] not in (0, 1, 2):
        raise ValueError(f"CONSUMERS must be 1 or 2, STAGES >= 1 and DQ_MODE 0, 1 or 2; got {opts}")
    swapab = bool(opts.get("SWAPAB"))
    if swapab and (opts["DQ_MODE"] != 1 or opts["CONSUMERS"] != 2 or opts.get("DQ_LAG") or opts.get("PINGPONG")):
        raise ValueError(f"SWAPAB=1 is written for CONSUMERS=2 and DQ_MODE=1, without DQ_LAG or PINGPONG; got head "
                         f"dimension {head_dim}, {opts}")
    if set(SWAPAB_ONLY) & set(opt_in) and not swapab:
        raise ValueError(f"{', '.join(SWAPAB_ONLY)} are options of SWAPAB=1's kernel; got {opts}")
    if opt_in.get("DETERMINISTIC") and (not swapab or opts.get("DQ_WRITER", 1) != 1):
        raise ValueError(f"DETERMINISTIC=1 is an option of SWAPAB=1's kernel with its dQ writer (DQ_WRITER=1): the "
                         f"writer takes the turns; the queries-as-rows kernel's deterministic dQ is DQ_MODE=2; got "
                         f"head dimension {head_dim}, {opts}")
    if swapab and opts.get("QSTEP", SWAPAB_QSTEP[head_dim]) not in ((128,) if head_dim == 64 else (64, 80)):
        raise ValueError(f"QSTEP (queries per step) is 128 at head dimension 64, 64 or 80 at 128; got {opts}")
    variant = bool(opts.get("DQ_LAG") or opts.get("PINGPONG"))
    if variant and (opts["DQ_MODE"] != 1 or opts["CONSUMERS"] != 2 or (opts.get("DQ_LAG") and head_dim != 128)):
        raise ValueError(f"DQ_LAG=1 (head dimension 128: dQ one step late) and PINGPONG=1 (turns) need DQ_MODE=1 and "
                         f"CONSUMERS=2; got head dimension {head_dim}, {opts}")
    flags = (f"-DHEAD_DIM={head_dim}",) + tuple(f"-D{k}={v}" for k, v in sorted(opts.items()))
    b = BwdBuild(head_dim, flags, opts["CONSUMERS"], opts["STAGES"], opts["DQ_MODE"], variant, swapab)
    if b.shared_bytes > SHARED_OPTIN[90]:  # an sm_90a kernel
        raise ValueError(f"{opts} needs {b.shared_bytes} B of shared memory, more than a block can have "
                         f"({SHARED_OPTIN[90]} B)")
    return b


def swapab_by_default(head_dim: int, options: dict[str, int], opts: dict[str, int]) -> bool:
    """Whether a build that does not name SWAPAB gets it: FlashAttention-3's layout (KERNEL) ran ahead of the
    queries-as-rows kernel (ROWS_FILE) and of its turns at both head dimensions on the H200, cuDNN and
    FlashAttention-4 in the same runs (bench/results/flash_bwd_*.md, the newest). Not when a build asks for what
    only ROWS_FILE has:
    another DQ_MODE, one consumer, other STAGES, PINGPONG or DQ_LAG named, or UNIFORM=0 at d = 128 (which names the
    rows kernel there, as it did before; SWAPAB=1 with UNIFORM=0 is still built when asked by name)."""
    if {"SWAPAB", "PINGPONG", "DQ_LAG"} & set(options) or (head_dim == 128 and options.get("UNIFORM") == 0):
        return False
    return opts["DQ_MODE"] == 1 and opts["CONSUMERS"] == 2 and opts["STAGES"] == 2


def pingpong_by_default(head_dim: int, opts: dict[str, int]) -> bool:
    """Whether a build that names neither PINGPONG nor DQ_LAG gets them: at d = 128, where they apply and the
    chapter's kernel is not otherwise asked for (UNIFORM=0 names it). On the H200 they ran ahead of the chapter's
    kernel in the same rounds at d = 128 (N = 4096 and 8192, causal or not); at d = 64 turns were within the
    noise of it, so not there (the runs: bench/results/flash_bwd_*.md)."""
    return (head_dim == 128 and opts["DQ_MODE"] == 1 and opts["CONSUMERS"] == 2 and opts.get("UNIFORM", 1) == 1
            and not opts.get("SWAPAB"))  # SWAPAB=1 is a kernel of its own, without turns


@functools.cache
def compiled(b: BwdBuild, target: str = "gpu") -> Any:
    """The module (three kernels) for a build, once per process: ``target="cpu"`` for the emulator."""
    from .. import emulate
    from ..toolchain.compiler import compile as nvrtc_compile

    if target == "cpu":
        return emulate.compile(source(b), arch="sm_90a", name=source_name(b), options=b.options)
    mod = nvrtc_compile(source(b), arch="sm_90a", name=source_name(b), options=b.options)
    check_shared_fits(b, mod)
    return mod


def shared_needs(mod: Any) -> tuple[int, int]:
    """flash_bwd's (dynamic, static) shared memory in a compiled module: the dynamic bytes the kernel exports (what a
    launch asks for) and the static bytes its cubin declares, the system's reserved kilobyte not counted (as neither
    ptxas nor the driver count it; tklab.toolchain.sass.RESERVED_SHARED)."""
    return mod.constants["flash_bwd_shared_bytes"], mod["flash_bwd"].shared_bytes


def check_shared_fits(b: BwdBuild, mod: Any) -> None:
    """ValueError, naming the build's options and the bytes, when flash_bwd's dynamic plus static shared memory is
    more than a block may have on sm_90 (SHARED_OPTIN[90], 232448 B): refused when the variant is built, where
    bench/flash_bwd.py's contenders() reports it and goes on, not by the launch. build() refuses what its model
    (BwdBuild.shared_bytes) already shows; only the compiled module knows the static part."""
    dynamic, static = shared_needs(mod)
    if dynamic + static > SHARED_OPTIN[90]:
        options = ", ".join(f.removeprefix("-D") for f in b.options)
        raise ValueError(f"the attention backward built with {options} ({source_name(b)}) needs {dynamic:,} B of "
                         f"dynamic + {static:,} B of static shared memory per block = {dynamic + static:,} B, more "
                         f"than the {SHARED_OPTIN[90]:,} B a block may have on sm_90")


def source_name(b: BwdBuild) -> str:
    """The file a build's source comes from, by name (what the compiler's and the emulator's messages cite; DQ_LAG and
    PINGPONG's source starts with ROWS_FILE, LAG_FILE follows it)."""
    if b.swapab:
        return (STEP_FILE if b.step_options else KERNEL).name
    return ROWS_FILE.name


def source(b: BwdBuild) -> str:
    """The CUDA source of a build: the chapter's file (SWAPAB=1, the default; STEP_FILE with its options),
    ROWS_FILE (SWAPAB=0), or for DQ_LAG and PINGPONG ROWS_FILE with its main kernel renamed (flash_bwd_chapter)
    followed by LAG_FILE's flash_bwd."""
    if b.swapab:
        return (STEP_FILE if b.step_options else KERNEL).read_text()
    if not b.variant:
        return ROWS_FILE.read_text()
    renamed = ("flash_bwd", "flash_bwd_shared_bytes")
    head = "".join(f"#define {n} {n.replace('flash_bwd', 'flash_bwd_chapter')}\n" for n in renamed)
    tail = "".join(f"#undef {n}\n" for n in renamed)
    return head + ROWS_FILE.read_text() + "\n" + tail + LAG_FILE.read_text()


# ---- launching -----------------------------------------------------------------------------------------
def park_dq(acc: np.ndarray, cfg: BwdBuild) -> np.ndarray:
    """A dQ accumulator [b, h, n, d] (fp32, dS K unscaled) as a DQ_FRAGMENTS build leaves it: [b, h, whole steps x
    qstep, d] in memory, each step's two consumer parts (consumer g: d = 64 the step's queries 64g.., d = 128 dQ's
    columns 64g..; 80-query steps dQ^T's rows 64g..) parked in register order (tklab.models.layouts.parked), queries
    past the end zero. What chapter 11's exercise check compares the kernel's accumulator with."""
    from ..models.layouts import parked

    b, h, n, d = acc.shape
    qstep, steps, rows = cfg.qstep, cfg.steps(n), cfg.dq_box_rows
    padded = np.zeros((b, h, steps * qstep, d), acc.dtype)
    padded[:, :, :n] = acc
    order = np.array(parked(rows), np.int64)  # (row, col) of each parked float of a 64 x rows part
    r, c, first = order[None, :, 0], order[None, :, 1], qstep * np.arange(steps)[:, None]  # first: a step's query 0
    out = np.empty((b, h, steps, 2, 64 * rows), acc.dtype)
    for g in range(2):
        if qstep == 80:  # dQ^T's rows: columns 64g + r of dQ; columns: the step's queries
            query, col = first + c, 64 * g + r
        elif qstep == 128:  # d = 64: consumer g forms the step's queries 64g..
            query, col = first + 64 * g + r, c
        else:  # d = 128, 64-query steps: consumer g forms dQ's columns 64g..
            query, col = first + r, 64 * g + c
        out[:, :, :, g] = padded[:, :, query, np.broadcast_to(col, query.shape)]
    return out.reshape(b, h, steps * qstep, d)


def dq_scratch_shape(b: int, h: int, n: int, cfg: BwdBuild) -> tuple[int, int, int, int]:
    """The fp32 dQ scratch one backward allocates: the accumulator (B, H, N, d); with DQ_FRAGMENTS (B, H, whole
    steps x queries per step, d), each step's two parts in register order; or with DQ_MODE 2 every key block's slot
    of shares, (B, H, key blocks x slots per key block x query blocks x 64, d): O(N^2)."""
    if cfg.dq_fragments:  # whole steps: a part holds values of every query of its step
        return (b, h, cfg.steps(n) * cfg.qstep, cfg.head_dim)
    return (b, h, cfg.dq_slots(n) * cfg.q_rows(n) if cfg.dq_mode == 2 else n, cfg.head_dim)


def dq_scratch_bytes(b: int, h: int, n: int, cfg: BwdBuild) -> int:
    """Bytes of dq_scratch_shape in fp32."""
    return int(np.prod(dq_scratch_shape(b, h, n, cfg))) * 4


def free_device_bytes(like: Any) -> int:
    """Device memory a new allocation can take on ``like``'s GPU: the driver's free bytes (cudaMemGetInfo)
    plus what the array library's pool holds unused (torch's cache, CuPy's memory pool)."""
    if _is_torch(like):
        import torch

        free, _ = torch.cuda.mem_get_info(like.device)
        return int(free + torch.cuda.memory_reserved(like.device) - torch.cuda.memory_allocated(like.device))
    import cupy as cp

    free, _ = cp.cuda.runtime.memGetInfo()
    return int(free + cp.get_default_memory_pool().free_bytes())


def check_scratch_fits(b: int, h: int, n: int, cfg: BwdBuild, free: int) -> None:
    """Refuse a backward whose dQ scratch (dq_scratch_bytes) exceeds the ``free`` device bytes, naming both,
    before anything is allocated."""
    need = dq_scratch_bytes(b, h, n, cfg)
    if need > free:
        gib, one = 1 << 30, b * h * n * cfg.head_dim * 4
        raise MemoryError(
            f"the attention backward with DQ_MODE={cfg.dq_mode} at B={b}, H={h}, N={n}, d={cfg.head_dim} needs "
            f"{need:,} B ({need / gib:.2f} GiB) of fp32 dQ scratch, but the GPU has {free:,} B ({free / gib:.2f} GiB) "
            f"free. DQ_MODE 2 keeps a copy of dQ per key block ({cfg.dq_slots(n)} slots: memory grows with N^2); "
            f"DQ_MODE=1 needs {one:,} B ({one / gib:.2f} GiB), or split the batch or heads over calls")


def main_grid(b: int, h: int, n: int, cfg: BwdBuild) -> tuple[int, int, int]:
    """flash_bwd's grid: (key blocks, heads, batch)."""
    return (-(-n // cfg.kv_block), h, b)


def stats_shape(b: int, h: int, n: int, cfg: BwdBuild) -> tuple[int, int, int, int]:
    """SWAPAB=1's per-step statistics, fp32: per (batch, head) one STATS_ROWS x stats_cols box per step (L log2 e,
    then D, for the step's queries)."""
    return (b, h, cfg.steps(n) * STATS_ROWS, stats_cols(cfg))


def turns_shape(b: int, h: int, n: int, cfg: BwdBuild) -> tuple[int, int, int]:
    """DETERMINISTIC=1's turn counters, int32: one per (batch, head, query step), zeroed by flash_bwd_prep; the
    key blocks that add to a step count it up from 0 in blockIdx order."""
    return (b, h, cfg.steps(n))


def deterministic_options(head_dim: int, **options: int) -> dict[str, int]:
    """``options`` with dQ made the same bit for bit on every run: DETERMINISTIC=1 where the build is the chapter's
    kernel (SWAPAB=1, the default), DQ_MODE=2 (a slot per key block) for the queries-as-rows kernel."""
    if build(head_dim, **options).swapab:
        return options | {"DETERMINISTIC": 1}
    return options | {"DQ_MODE": 2}


def stats_len(cfg: BwdBuild) -> int:
    """SWAPAB=1: the step's queries rounded up to 32, the length of its L and of its D in a statistics box (a
    box's sides are multiples of 8)."""
    return -(-cfg.qstep // 32) * 32


def stats_cols(cfg: BwdBuild) -> int:
    """Columns of SWAPAB=1's statistics box: L and D of the step (stats_len each) in STATS_ROWS rows."""
    return 2 * stats_len(cfg) // STATS_ROWS


def host_stats(lse: np.ndarray, delta: np.ndarray, cfg: BwdBuild) -> np.ndarray:
    """What flash_bwd_prep writes for the chapter's kernel, on the host: per (batch, head) and step, L log2 e then
    D of the step's queries, each padded to stats_len (padding: L = +inf, so P = 0; D = 0), as stats_shape's fp32
    array. For a check that runs flash_bwd alone from the forward's L and a given D."""
    b, h, n = lse.shape
    steps, q, length = cfg.steps(n), cfg.qstep, stats_len(cfg)
    l2 = np.full((b, h, steps * q), np.inf, np.float32)
    d = np.zeros((b, h, steps * q), np.float32)
    l2[..., :n] = lse.astype(np.float32) * np.float32(LOG2E)
    d[..., :n] = delta
    out = np.zeros((b, h, steps, 2, length), np.float32)
    out[..., 0, :q] = l2.reshape(b, h, steps, q)
    out[..., 1, :q] = d.reshape(b, h, steps, q)
    return out.reshape(stats_shape(b, h, n, cfg))


def prep_rows(n: int, cfg: BwdBuild) -> int:
    """The query rows flash_bwd_prep walks: n, or with SWAPAB=1 whole steps (the padding gets L = +inf, D = 0)."""
    return cfg.steps(n) * cfg.qstep if cfg.swapab else n


def _grids(b: int, h: int, n: int, cfg: BwdBuild) -> dict[str, tuple[int, int, int]]:
    pairs = n * cfg.head_dim // 2
    return {"prep": (-(-prep_rows(n, cfg) // _PREP_ROWS), h, b), "main": main_grid(b, h, n, cfg),
            "dq": (2 * cfg.steps(n), h, b) if cfg.dq_fragments else (-(-pairs // _DQ_THREADS), h, b)}


def _strides(x: Any) -> tuple[int, int, int]:
    sb, sh, sn, _ = _layout(x)[1]
    return sb, sh, sn


def _int32_zeros(like: Any, shape: tuple[int, ...]) -> Any:
    """A zeroed int32 array on like's device, of like's library."""
    if _is_torch(like):
        import torch

        return torch.zeros(shape, dtype=torch.int32, device=like.device)
    import cupy as cp

    return cp.zeros(shape, dtype=cp.int32)


def gpu_scratch(like: Any, b: int, h: int, n: int, cfg: BwdBuild) -> tuple[Any, Any, Any]:
    """A backward's device scratch, of like's library: D (with SWAPAB=1 the per-step L and D), the fp32 dQ
    accumulator (with DQ_MODE 2 every key block's slot of shares) and DETERMINISTIC's turn counters (else None)."""
    delta = _empty(like, stats_shape(b, h, n, cfg) if cfg.swapab else (b, h, n), "float32")
    turns = _int32_zeros(like, turns_shape(b, h, n, cfg)) if cfg.deterministic else None
    return delta, _empty(like, dq_scratch_shape(b, h, n, cfg), "float32"), turns


class _Launches:
    """The three launches of one backward, their arguments packed once."""

    def __init__(self, q: Any, k: Any, v: Any, o: Any, lse: Any, do: Any, dq: Any, dk: Any, dv: Any, *,
                 causal: bool, scale: float | None, cpu: bool, stream: Any = None,
                 scratch: tuple[Any, ...] | None = None, **options: int):
        b, h, n, d = _check_inputs(q, k, v, "hopper")
        for name, x in (("o", o), ("do", do), ("dq", dq), ("dk", dk), ("dv", dv)):
            shape, strides, dtype = _layout(x)
            if shape != (b, h, n, d) or dtype not in ("bfloat16", "uint16") or strides[-1] != 1:
                raise ValueError(f"{name} must be bf16 {(b, h, n, d)} with a contiguous last dimension; got "
                                 f"{dtype} {shape} strides {strides}")
        if _layout(lse)[0] != (b, h, n) or _layout(lse)[2] != "float32" or _layout(lse)[1] != (h * n, n, 1):
            raise ValueError(f"lse must be the forward's contiguous float32 {(b, h, n)}; got {_layout(lse)[:1]}")
        cfg = build(d, **options)
        sc = np.float32(_scale(d, scale))
        # the fp32 dQ accumulator, or with DQ_MODE 2 every key block's slot of shares (summed by the last pass)
        acc_shape = dq_scratch_shape(b, h, n, cfg)
        if cpu:
            from .. import emulate as emu

            def tmap(x: Any, rows: int, cols: int = d, dtype: str = "bfloat16", swizzle: int | None = None) -> Any:
                return emu.tensor_map(x, (rows, cols), dtype=dtype, swizzle=swizzle)

            self.delta = np.zeros(stats_shape(b, h, n, cfg) if cfg.swapab else (b, h, n), np.float32)
            self.dq_acc = np.zeros(acc_shape, np.float32)
            # DETERMINISTIC: the turn counters, garbage until flash_bwd_prep zeroes them (as on the GPU)
            self.turns = np.full(turns_shape(b, h, n, cfg), -1, np.int32) if cfg.deterministic else None
        else:
            from ..run import tma

            dt = None if _is_torch(q) else "bfloat16"
            if cfg.dq_mode == 2:  # O(N^2) slots: refuse before allocating, not with the allocator's error
                check_scratch_fits(b, h, n, cfg, free_device_bytes(q))

            def tmap(x: Any, rows: int, cols: int = d, dtype: str | None = dt, swizzle: int | None = None) -> Any:
                return tma.tensor_map(x, (rows, cols), dtype=dtype, swizzle=swizzle)

            self.delta, self.dq_acc, self.turns = scratch or gpu_scratch(q, b, h, n, cfg)
        mod = compiled(cfg, "cpu" if cpu else "gpu")
        smem = cfg.shared_bytes if cpu else mod.constants["flash_bwd_shared_bytes"]
        grids = _grids(b, h, n, cfg)
        maps = [tmap(x, cfg.step_box_rows if x is q or x is do else 64) for x in (q, k, v, do, dk, dv)]
        if cfg.dq_fragments:  # rows of 64 floats, one unswizzled box per part (its values in register order)
            maps.append(tmap(self.dq_acc.reshape(b, h, -1, 64), cfg.dq_box_rows, 64, "float32", swizzle=0))
        else:
            maps.append(tmap(self.dq_acc, cfg.dq_box_rows, cfg.dq_cols, "float32"))
        if cfg.swapab:  # self.delta holds the per-step L and D; one unswizzled 8 x 32 box per step
            stats_map = tmap(self.delta, STATS_ROWS, stats_cols(cfg), "float32", swizzle=0)
            prep_args = (o, do, lse, self.delta, self.dq_acc, h, n, *_strides(o), *_strides(do))
            main_args = (*maps, stats_map, h, n, sc, int(causal))
            if cfg.deterministic:  # prep zeroes the counters on every run, flash_bwd takes turns on them
                prep_args, main_args = (*prep_args, self.turns), (*main_args, self.turns)
        else:
            prep_args = (o, do, self.delta, self.dq_acc, h, n, *_strides(o), *_strides(do))
            main_args = (*maps, lse, self.delta, self.dq_acc, h, n, sc, int(causal))
        self.steps = [
            (mod["flash_bwd_prep"], grids["prep"], (32 * _PREP_ROWS,), prep_args, 0),
            (mod["flash_bwd"], grids["main"], (cfg.threads,), main_args, smem),
            (mod["flash_bwd_dq"], grids["dq"], (128 if cfg.dq_fragments else _DQ_THREADS,),
             (self.dq_acc, dq, h, n, *_strides(dq), sc, int(causal)), 0),
        ]
        self.cpu, self.stream, self.cfg = cpu, stream, cfg
        self.prepared = None if cpu else [k.prepare(g, t, a, shared_mem=s, stream=stream)
                                          for k, g, t, a, s in self.steps]

    def __call__(self) -> None:
        if self.prepared is not None:
            for run in self.prepared:
                run()
            return
        for kernel, grid, threads, args, smem in self.steps:
            kernel(grid, threads, args, shared_mem=smem)


def prepare(q: Any, k: Any, v: Any, o: Any, lse: Any, do: Any, dq: Any, dk: Any, dv: Any, *,
            causal: bool = False, scale: float | None = None, stream: Any = None, **options: int) -> Any:
    """GPU: check the inputs, build the variant, its tensor maps and scratch (D, the fp32 dQ accumulator)
    once; returns ``run()`` that launches the three kernels (writes dq, dk, dv)."""
    return _Launches(q, k, v, o, lse, do, dq, dk, dv, causal=causal, scale=scale, cpu=False, stream=stream,
                     **options)


def flash_bwd(q: Any, k: Any, v: Any, o: Any, lse: Any, do: Any, *, causal: bool = False,
              scale: float | None = None, **options: int) -> tuple[Any, Any, Any]:
    """dQ, dK, dV of O = softmax(Q K^T scale) V given dO, from the forward's O and log-sum-exp L.

    ``o`` and ``lse`` are what ``attention.flash_fwd`` returned for (q, k, v). NumPy uint16 arrays (bf16
    bits, C-contiguous) run on the CPU emulator; torch tensors / CuPy arrays on the GPU. Returns bf16
    (dq, dk, dv) shaped like q (torch: with q's strides).
    """
    cpu = isinstance(q, np.ndarray)
    if not cpu and _is_torch(q):
        return _remembered(q, k, v, o, lse, do, causal, scale, options)
    b, h, n, d = _check_inputs(q, k, v, "hopper")
    if cpu:
        dq, dk, dv = (np.full((b, h, n, d), 0xFFFF, np.uint16) for _ in range(3))  # NaN until written
    else:
        dq, dk, dv = (_empty(q, (b, h, n, d), "bfloat16") for _ in range(3))
    _Launches(q, k, v, o, lse, do, dq, dk, dv, causal=causal, scale=scale, cpu=cpu, **options)()
    return dq, dk, dv


def _remembered(q: Any, k: Any, v: Any, o: Any, lse: Any, do: Any, causal: bool, scale: float | None,
                options: dict[str, int]) -> tuple[Any, Any, Any]:
    """flash_bwd on torch tensors through attention.LAUNCHES: under the inputs' layout, the build its checks passed;
    under the layout and every address (outputs and scratch included), the three packed launches. DQ_MODE 2 always
    takes the full path, whose check of free memory for its O(N^2) scratch must run on every call."""
    layout = ("bwd", causal, scale, tuple(sorted(options.items())), *map(signature, (q, k, v, o, lse, do)))
    cfg = LAUNCHES.get(layout)
    if cfg is None:
        _check_inputs(q, k, v, "hopper")  # a wrong shape is named before anything is allocated
    dq, dk, dv = (_empty(q, tuple(q.shape), "bfloat16", tuple(q.stride())) for _ in range(3))
    arrays = (q, k, v, o, lse, do, dq, dk, dv)
    scratch = gpu_scratch(q, *q.shape[:3], cfg) if cfg is not None else None
    runs = LAUNCHES.get(_key(layout, arrays, scratch)) if scratch is not None else None
    if runs is None:  # a layout or an address not seen before: checked, packed and remembered
        full = _Launches(*arrays, causal=causal, scale=scale, cpu=False, scratch=scratch, **options)
        full()
        if full.cfg.dq_mode != 2:
            LAUNCHES.put(layout, full.cfg)
            packed = [p.detached() for p in full.prepared]
            LAUNCHES.put(_key(layout, arrays, (full.delta, full.dq_acc, full.turns)), packed)
        return dq, dk, dv
    for run in runs:
        run()
    return dq, dk, dv


def _key(layout: tuple[Any, ...], arrays: tuple[Any, ...], scratch: tuple[Any, ...]) -> tuple[Any, ...]:
    """A backward's memo key: its layout and the address of every array its launches read or write."""
    return (layout, *(x.data_ptr() for x in arrays), *(x.data_ptr() if x is not None else 0 for x in scratch))
