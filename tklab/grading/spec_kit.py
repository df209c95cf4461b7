"""The kit a spec is written with: what an exercise is (its solution file, entry kernel, inputs, reference,
tolerance, launch shape, static checks, concept floors, library baseline and speed target) and the checks,
floors, problems and input/reference helpers several exercises share.

Each exercise's spec (``solutions/<id>/spec.py``: ``SPEC = Exercise(...)``) imports from here, from the kit modules
beside it (``kit_attention``: chapters 09-11's attention problems) and from ``tklab`` itself, never from another
exercise's spec: what two specs share moves into the kit. The registry (``tklab.grading.specs``) finds them. Specs
are plain Python so an input builder or a reference is a function, not a mini-language; they use numpy only (CuPy
is imported lazily by baselines, on the GPU machine), so ``tklab.check`` can read a spec anywhere.

Static checks read what the compiler made of the learner's file (``tklab.compile`` → SASS, resources)
and run without a GPU: they are what a learner without a GPU gets, and what makes an untouched
exercise fail on CPU (its stub writes nothing, touches no shared memory, issues no ``HMMA`` …).

Public API: ``Exercise``, ``Bench``, ``Launch``, ``StaticResult``, the checks (``WritesGlobal``, ``UsesSharedMemory``,
``NoSpills``, ``SassHas``, ``Probe``, ``AssignsTo``, ``NoSerializedWgmma``; ``python_function`` finds the function a
Python check reads), the concept floors (``WgmmaOverlap``, ``TakesTurns``, ``TensorCoreWork``), the problems
(``FP32_MATMUL``, ``BF16_MATMUL``, ``COPY``) and their benches (``fp32_matmul_bench``, ``bf16_matmul_bench``), TMA
arguments (``tma_matmul_args``, ``tma_copy_args``, ``tensor_map``), ``sm_count``, ``dims_text``, ``TMA_ORDERS``, and
input/reference helpers (``matmul_inputs``, ``uniform`` …); bf16 inputs use ``tklab.run.arrays`` (``to_bf16_bits``,
``bf16_to_float32``).
"""
from __future__ import annotations

import ast
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

import numpy as np

from ..run import baselines
from ..run.arrays import bf16_to_float32, to_bf16_bits

Dims = dict[str, int]
Arrays = dict[str, Any]


@dataclass(frozen=True)
class Launch:
    """Grid, block and dynamic shared memory of one launch."""

    grid: tuple[int, ...]
    block: tuple[int, ...]
    shared_mem: int = 0


@dataclass(frozen=True)
class Bench:
    """How to time an exercise against the library in the same run.

    ``baseline(gpu_inputs, dims)`` returns a function that runs the library operation and returns its
    result. The learner's ``output`` at the benchmark size is compared (loosely: a sanity check that
    the speed belongs to a correct kernel) with ``expect(gpu_inputs, dims)`` if given, else with the
    baseline's result. Speed ratio = baseline time / learner time: 1.0 is "as fast as the library".

    ``measured``: the ratios the reference solution reached on a GPU (where: in a comment beside them).
    The ``target`` sits at most ``TARGET_MARGIN`` of the lowest of them (and of every ratio recorded in
    ``bench/results/exercises_*.json``), so a learner who matches the reference meets it despite
    run-to-run noise; a test holds every spec to that.
    """

    dims: Dims
    baseline: Callable[[Arrays, Dims], Callable[[], Any]]
    baseline_name: str
    output: str
    target: float | None = None
    flops: Callable[[Dims], float] | None = None
    bytes: Callable[[Dims], float] | None = None
    rtol: float = 1e-2
    atol: float = 1e-2
    expect: Callable[[Arrays, Dims], Any] | None = None
    measured: tuple[float, ...] = ()


#: The orders an emulated case's ``tma_order`` dimension makes TMA loads land in (0: the emulator's default).
TMA_ORDERS = ("delayed", "reversed", "in_order")

#: A speed target is at most this fraction of the reference solution's lowest measured ratio.
TARGET_MARGIN = 0.8


@dataclass(frozen=True)
class StaticResult:
    """One static check's verdict; ``detail`` says what was seen (and, on failure, what to do)."""

    name: str
    ok: bool
    detail: str


@dataclass
class StaticContext:
    """What a static check may look at: the learner's source, and for CUDA the compiled kernel."""

    spec: Exercise
    source: str
    program: str
    arch: str = ""
    module: Any = None
    kernel: Any = None

    @property
    def ops(self) -> Counter[str]:
        """Full opcodes (``LDG.E.128``) of the entry kernel."""
        from ..toolchain import sass

        return sass.histogram(self.kernel.sass, full=True) if self.kernel is not None else Counter()

    def count(self, pattern: str) -> tuple[int, list[str]]:
        """How many instructions fully match ``pattern`` (a regex over full opcodes), and which forms."""
        rx = re.compile(pattern)
        hits = {op: n for op, n in self.ops.items() if rx.fullmatch(op)}
        return sum(hits.values()), sorted(hits)


class StaticCheck(Protocol):
    name: str

    def run(self, ctx: StaticContext) -> StaticResult: ...


def _forms(ctx: StaticContext, ops: list[str]) -> str:
    c = ctx.ops
    return ", ".join(f"{op} ×{c[op]}" for op in ops)


@dataclass(frozen=True)
class WritesGlobal:
    """The kernel stores to global memory at all (a stub that writes nothing fails here)."""

    name: str = "writes its output"

    def run(self, ctx: StaticContext) -> StaticResult:
        n, forms = ctx.count(r"(STG|ST|RED|REDG|ATOMG|ATOM|UTMASTG|UTMAREDG|UBLKCP)(\..*)?")
        if n:
            return StaticResult(self.name, True, f"global stores: {_forms(ctx, forms)}")
        return StaticResult(self.name, False, "the kernel never stores to global memory, so its output stays "
                            "unwritten: fill in the TODOs")


@dataclass(frozen=True)
class UsesSharedMemory:
    """The kernel moves data through shared memory (the point of a tiling exercise)."""

    name: str = "uses shared memory"

    def run(self, ctx: StaticContext) -> StaticResult:
        n, forms = ctx.count(r"(LDS|STS|LDSM|STSM|LDGSTS|UTMALDG|ATOMS)(\..*)?")
        static = ctx.kernel.shared_bytes
        if n:
            return StaticResult(self.name, True, f"{static} B static shared memory; {_forms(ctx, forms)}")
        return StaticResult(self.name, False, "the kernel never reads or writes shared memory: stage the tiles "
                            "through __shared__ arrays (arrays that are declared but unused are dropped)")


@dataclass(frozen=True)
class NoSpills:
    """No register spills and no local-memory arrays: both turn fast register work into memory traffic."""

    name: str = "no spills / local memory"

    def run(self, ctx: StaticContext) -> StaticResult:
        k = ctx.kernel
        n, forms = ctx.count(r"(LDL|STL)(\..*)?")
        if k.spill_bytes:
            return StaticResult(self.name, False, f"{k.spill_bytes} B of registers spilled ({k.registers} "
                                "registers used): make the per-thread tile smaller or unroll less")
        if n:
            return StaticResult(self.name, False, f"local memory is used ({_forms(ctx, forms)}): a register "
                                "array indexed by a value the compiler cannot resolve lives in memory; index "
                                "it only inside fully unrolled loops (#pragma unroll, constant bounds)")
        return StaticResult(self.name, True, f"{k.registers} registers, nothing spilled")


@dataclass(frozen=True)
class SassHas:
    """An instruction the exercise is about shows up in the SASS (``pattern``: regex on full opcodes)."""

    pattern: str
    what: str
    fix: str
    min_count: int = 1
    name: str = ""

    def run(self, ctx: StaticContext) -> StaticResult:
        label = self.name or f"SASS has {self.what}"
        n, forms = ctx.count(self.pattern)
        if n >= self.min_count:
            return StaticResult(label, True, _forms(ctx, forms))
        if n == 0:
            return StaticResult(label, False, f"no {self.what} in the SASS: {self.fix}")
        return StaticResult(label, False, f"only {n} {self.what} ({_forms(ctx, forms)}), at least "
                            f"{self.min_count} expected: {self.fix}")


@dataclass(frozen=True)
class Probe:
    """Compile-time facts about the learner's code, evaluated by NVRTC itself (so no GPU is needed).

    ``source`` is appended to the learner's file; it defines ``__device__ int tklab_probe_<name> =
    <constexpr expression>;`` globals, whose values NVRTC writes into the PTX. ``judge`` turns them into
    a list of problems (empty: the check passes) or a success note starting with ``"ok: "``.
    """

    source: str
    judge: Callable[[dict[str, int]], list[str]]
    name: str = "probe"

    def run(self, ctx: StaticContext) -> StaticResult:
        from ..toolchain.compiler import CompileError
        from ..toolchain.compiler import compile as tk_compile

        try:
            mod = tk_compile(ctx.source + "\n" + self.source, arch=ctx.arch, name=ctx.program,
                             options=ctx.spec.options)
        except CompileError as e:
            first = e.diagnostics[0][3] if e.diagnostics else str(e)
            return StaticResult(self.name, False, f"the check's probe did not compile against your file "
                                f"({first}); keep the names and signatures the exercise gives")
        values = {k.removeprefix("tklab_probe_"): v for k, v in mod.constants.items() if k.startswith("tklab_probe_")}
        notes = self.judge(values)
        problems = [n for n in notes if not n.startswith("ok: ")]
        if problems:
            return StaticResult(self.name, False, "; ".join(problems))
        return StaticResult(self.name, True, "; ".join(n[4:] for n in notes) or "ok")


def python_function(ctx: Any, check: str, missing: str = "") -> ast.FunctionDef | StaticResult:
    """The learner's Python function the exercise names (``ctx.spec.kernel``), or the failed ``check`` that says
    why there is none: a syntax error (with its line), or no function of that name (``missing`` adds advice)."""
    try:
        tree = ast.parse(ctx.source, ctx.program)
    except SyntaxError as e:
        return StaticResult(check, False, f"syntax error at line {e.lineno}: {e.msg}")
    fn = next((n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == ctx.spec.kernel), None)
    if fn is None:
        return StaticResult(check, False, f"no function named {ctx.spec.kernel} in the file{missing}")
    return fn


@dataclass(frozen=True)
class AssignsTo:
    """A numba kernel assigns to elements of its output parameter (a stub that only passes does not)."""

    param: str
    name: str = "writes its output"

    def run(self, ctx: StaticContext) -> StaticResult:
        fn = python_function(ctx, self.name)
        if isinstance(fn, StaticResult):
            return fn
        for node in ast.walk(fn):
            targets = (node.targets if isinstance(node, ast.Assign)
                       else [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else [])
            for t in targets:
                if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name) and t.value.id == self.param:
                    return StaticResult(self.name, True, f"assigns to {self.param}[...] at line {node.lineno}")
        return StaticResult(self.name, False, f"{ctx.spec.kernel} never assigns to {self.param}[...], so the "
                            "output stays unwritten: fill in the TODO")


@dataclass(frozen=True)
class NoSerializedWgmma:
    """ptxas did not serialize the wgmma pipeline (warnings C7510-C7520: the accumulator, or a register A operand, was
    touched by other instructions while a wgmma group could still use it, or a wait was missing). ``fix``: what to do,
    in the words of the exercise's chapter."""

    fix: str = ("do not zero or touch the accumulator between wgmma groups: pass the accumulate flag (k > 0) "
                "instead, and wait before reading it")
    name: str = "wgmma not serialized"

    def run(self, ctx: StaticContext) -> StaticResult:
        warnings = [ln.strip() for ln in ctx.module.log.splitlines() if re.search(r"\bC75\d\d\b", ln)]
        if warnings:
            return StaticResult(self.name, False, f"{warnings[0]} -- {self.fix}")
        return StaticResult(self.name, True, "no ptxas serialization warning (C75xx)")


@dataclass(frozen=True)
class WgmmaOverlap:
    """A concept floor: the schedule keeps two wgmma groups in flight per warpgroup (chapter 10: S_j issued
    while P·V_{j-1} still runs), which a right answer alone does not show.

    Without a GPU: the emulator's count of wgmma groups in flight per warpgroup (``max_wgmma_groups``)
    must reach ``min_groups``. On a GPU: the learner's time against the reference solution's, timed in the
    same check in a child of its own (``reference_ratio`` = reference time / learner time, computed by the
    checking process: ``check._with_reference_rounds``) must reach ``min_reference_ratio``.
    """

    min_groups: int = 2
    min_reference_ratio: float | None = None
    name: str = "S_j / P·V_{j-1} overlap"
    needs_reference: bool = True

    #: Of the exponentials the kernel executed, at least this share ran while a wgmma group of the executing warp
    #: was still pending (the reference: 0.65 over chapter 10's emulated cases; every key block after a row's first
    #: has its softmax under the previous block's P·V, the first has none). A schedule that waits for both products
    #: before the softmax, or runs the softmax after P·V, executes none under a pending group.
    min_overlapped: float = 0.3

    def judge_emulated(self, facts: dict[str, Any]) -> StaticResult | None:
        ex2 = facts.get("executed_ex2")
        if isinstance(ex2, int) and ex2 > 0 and facts.get("interpreted_launches"):  # what executed, in order
            under = int(facts.get("executed_ex2_under_wgmma", 0))
            share = under / ex2
            detail = (f"{share:.0%} of the {ex2:,} exponentials executed while a P·V product (a wgmma group) of the "
                      "warp was still pending")
            if share >= self.min_overlapped:
                return StaticResult(self.name, True, detail)
            return StaticResult(self.name, False, detail + f" (at least {self.min_overlapped:.0%} expected): the "
                                "softmax of block j must run while P V_{j-1} is still on the tensor cores. Issue "
                                "S_j = Q K_j^T and O += P V_{j-1}, wait with mma_async_wait<1> for S_j only, compute "
                                "the softmax, and wait for P V_{j-1} after it")
        n = facts.get("max_wgmma_groups")
        if n is None:
            return None  # this emulator does not count them: nothing to judge
        if n >= self.min_groups:
            return StaticResult(self.name, True, f"up to {n} wgmma groups in flight per warpgroup")
        return StaticResult(self.name, False, f"at most {n} wgmma group in flight per warpgroup: no overlap. Issue "
                            "S_j = Q K_j^T and O += P V_{j-1} back to back and wait with mma_async_wait<1> for "
                            "S_j only, so the softmax of block j runs while P V_{j-1} is still on the tensor cores")

    def judge_gpu(self, speed: dict[str, Any]) -> StaticResult | None:
        ratio = speed.get("reference_ratio")
        if ratio is None or self.min_reference_ratio is None:
            return None
        detail = (f"{ratio:.2f}x the reference solution's speed, timed in the same check, before and after "
                  f"yours (at least {self.min_reference_ratio:.2f}x expected)")
        if ratio >= self.min_reference_ratio:
            return StaticResult(self.name, True, detail)
        return StaticResult(self.name, False, detail + ": the S_j / P V_{j-1} overlap is missing or serialised "
                            "(issue both products, then mma_async_wait<1> for S_j only)")


@dataclass(frozen=True)
class TakesTurns:
    """A concept floor: the consumer warpgroups issue their products only inside their turn (chapter 10's
    ping-pong: a warpgroup takes the turn on its named barrier, issues, hands the turn on), judged on what executed:
    the interpreter counts wgmma instructions a thread issued while it did not hold a turn (the named barriers the
    kernel exports as ``turn_barriers`` .. ``epilogue_barriers``)."""

    products: str = "S_j and P V_{j-1}"  # what a turn issues, in the exercise's words
    name: str = "products inside the turns"
    needs_reference: bool = False

    def judge_emulated(self, facts: dict[str, Any]) -> StaticResult | None:
        if not facts.get("interpreted_launches"):
            return None
        issued, outside = int(facts.get("executed_wgmma", 0)), int(facts.get("executed_wgmma_outside_turn", 0))
        if issued == 0:
            return StaticResult(self.name, False, "no wgmma was executed")
        if outside == 0:
            return StaticResult(self.name, True, f"all {issued:,} wgmma issued inside the warpgroup's turn")
        return StaticResult(self.name, False, f"{outside:,} of {issued:,} wgmma were issued outside the warpgroup's "
                            f"turn: take the turn (wait on your turn barrier) before issuing {self.products}, and "
                            "pass it on after, so the two consumers' products alternate on the tensor cores")

    def judge_gpu(self, speed: dict[str, Any]) -> StaticResult | None:
        return None


@dataclass(frozen=True)
class TensorCoreWork:
    """A concept floor: the tensor cores did the exercise's work, judged on what executed. The interpreter counts the
    FLOPs its tensor-core instructions performed (wgmma, mma.sync) and those of scalar fp32 arithmetic; the problem's
    FLOPs come from ``flops`` (the same count the benchmark uses) at each emulated case. A kernel whose wgmma sits in
    a branch that never runs, or whose output comes from a plain loop beside an unused product, fails, although its
    SASS holds the instructions the static checks look for."""

    flops: Callable[[Dims], float]
    what: str = "tensor cores (wgmma)"
    min_tensor: float = 0.9    # tensor-core FLOPs at least this share of the problem's (padding and masks add more)
    max_scalar: float = 0.25   # scalar fp32 FLOPs at most this share (a softmax costs ~1 % at d = 128)
    name: str = "the tensor cores did the work"
    needs_reference: bool = False
    #: what ``flops`` counts, as the verdict names it
    counts: str = "the FLOPs the emulated cases need"
    #: why the products may issue more than that, said when they do (a share over 100 % is not a fault)
    beyond: str = ("the products cover whole tiles, so work the output discards (past the problem's edge, or "
                   "hidden by a mask) is issued too")

    def judge_emulated(self, facts: dict[str, Any]) -> StaticResult | None:
        if not facts.get("interpreted_launches") or not facts.get("problem_flops"):
            return None
        problem = float(facts["problem_flops"])
        tensor, scalar = float(facts.get("executed_tensor_flops", 0)), float(facts.get("executed_scalar_flops", 0))
        over = f" ({self.beyond})" if tensor > problem else ""
        detail = (f"the {self.what} issued {tensor:,.0f} FLOPs, {tensor / problem:.0%} of {self.counts} "
                  f"({problem:,.0f}){over}; scalar fp32 arithmetic {scalar / problem:.0%} of them")
        if tensor >= self.min_tensor * problem and scalar <= self.max_scalar * problem:
            return StaticResult(self.name, True, detail)
        why = ("the tensor-core products never executed (in a branch that never runs?) or were too few"
               if tensor < self.min_tensor * problem else
               "the output was computed with scalar multiply-adds, not by the tensor-core products")
        return StaticResult(self.name, False, f"{detail}: {why}; the exercise is about doing the matrix products on "
                            f"the {self.what}, and the verdict counts what executed, not what the code contains")

    def judge_gpu(self, speed: dict[str, Any]) -> StaticResult | None:
        return None


@dataclass(frozen=True)
class Exercise:
    """One exercise. ``cases`` run on the GPU (the first is the main size, the rest are the edge shapes
    the exercise promises, in ``shapes``); ``sim_cases`` run in numba's CUDA simulator on CPU;
    ``emu_cases`` run on the CPU emulator (default: the ``cases`` small enough), chosen to exercise the
    loops (several K-slices, a ring that wraps, several tiles or key blocks, tails) and, where a
    condition matters, data that makes it matter. Its first case is also the one small case a GPU check
    emulates for hazards. ``by_output``: ``(rtol, atol, rms)`` for an output whose values are small, where
    an absolute ``atol`` would pass a wrong answer: a relative-RMS bound, and ``atol`` in units of the
    expected output's RMS (``tklab.run.arrays.isclose``); other outputs keep ``rtol``/``atol``.
    ``floors``: what the chapter teaches beyond a right answer (``ConceptFloor``), graded on the run."""

    id: str
    title: str
    solution: str  # in spec.py the file's name beside it; the registry makes it the path (solutions/<id>/<id>.cu)
    kernel: str
    language: Literal["cuda", "numba", "python"]
    inputs: Callable[[np.random.Generator, Dims], dict[str, np.ndarray]]
    outputs: Callable[[Dims], dict[str, tuple[tuple[int, ...], str]]]
    reference: Callable[[dict[str, np.ndarray], Dims], dict[str, np.ndarray]]
    launch: Callable[[Dims], Launch]
    args: Callable[[Arrays, Dims], tuple[Any, ...]]
    cases: tuple[Dims, ...]
    shapes: str
    rtol: float = 1e-4
    atol: float = 1e-3
    static: tuple[Any, ...] = ()
    sim_cases: tuple[Dims, ...] = ()
    bench: Bench | None = None
    arch: str = "sm_80"
    options: tuple[str, ...] = ()
    chapter: str = ""
    #: sentences every check of the exercise shows as notes (what its verdict covers, how to read an output)
    notes: tuple[str, ...] = field(default_factory=tuple)
    emu_cases: tuple[Dims, ...] = ()
    by_output: dict[str, tuple[float, float, float | None]] = field(default_factory=dict)
    floors: tuple[Any, ...] = ()

    def tolerance(self, output: str) -> tuple[float, float, float | None]:
        """``(rtol, atol, rms)`` for one output, as ``tklab.run.arrays.isclose`` takes them."""
        return self.by_output.get(output, (self.rtol, self.atol, None))
    #: What the untouched exercise (the generated stub) fails on without a GPU: (static check, words of its
    #: message). Tests derive their expectations from it, so a new exercise adds no list elsewhere.
    untouched: tuple[str, str] = ()
    #: A design exercise (issue 25): the learner writes something the chapter explained but never showed.
    #: A chapter prefix ("ch07") names the chapter's own exercise, not its design exercise.
    design: bool = False
    #: advice a run on the CPU cannot measure (e.g. an uncoalesced access order): functions of the source
    #: returning a sentence or None; shown as notes, never a condition of passing
    remarks: tuple[Callable[[str], str | None], ...] = ()
    #: Other builds of the same file that the check also runs (``tklab.grading.builds``), each an ``Exercise`` with
    #: the id ``<id>@<tag>`` (``get`` finds it; the registry's lists do not), its own ``options`` and cases: a
    #: branch the main build compiles away (chapter 11's d = 64 dQ share) runs under the check too.
    builds: tuple[Exercise, ...] = ()

    @property
    def filename(self) -> str:
        """The file name of the solution, and of the exercise generated from it (``<id>.<suffix>``)."""
        return Path(self.solution).name

    @property
    def exercise_file(self) -> str:
        """Where the learner's copy lives, relative to ``exercises/``: ``<id>.cu`` for an exercise (its solution sits
        in its folder, ``solutions/<id>/<id>.cu``), ``drills/ch04_bank_passes.py`` for a drill."""
        path = Path(self.solution)
        if path.parent.name == self.id.split("@", 1)[0]:
            return path.name
        return path.relative_to("solutions").as_posix()

    @property
    def kind(self) -> str:
        """``drill`` (a few minutes, a Python function checked against a hardware model), ``debug`` (a program with
        one bug to find and repair: its id holds ``_debug_``, ``exercises.is_debug``) or ``exercise``."""
        from .exercises import is_debug

        return "drill" if self.language == "python" else "debug" if is_debug(self.id) else "exercise"

    @property
    def hopper_only(self) -> bool:
        return self.arch.startswith("sm_90")


# ---- inputs and references shared by several exercises ----------------------------------------------

def uniform(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """float32 values in [-1, 1): small enough that fp32 sums stay accurate, varied enough to catch bugs."""
    return rng.uniform(-1.0, 1.0, size=shape).astype(np.float32)


def matmul_inputs(rng: np.random.Generator, d: Dims) -> dict[str, np.ndarray]:
    return {"A": uniform(rng, (d["M"], d["K"])), "B": uniform(rng, (d["K"], d["N"]))}


def matmul_outputs(d: Dims) -> dict[str, tuple[tuple[int, ...], str]]:
    return {"C": ((d["M"], d["N"]), "float32")}


def matmul_reference(x: dict[str, np.ndarray], d: Dims) -> dict[str, np.ndarray]:
    """C = A @ B in float64, so the reference's own rounding is negligible."""
    return {"C": x["A"].astype(np.float64) @ x["B"].astype(np.float64)}


def matmul_args(a: dict, d: Dims) -> tuple:
    """The argument list of every CUDA C matmul exercise: ``(A, B, C, M, N, K)``."""
    return (a["A"], a["B"], a["C"], np.int32(d["M"]), np.int32(d["N"]), np.int32(d["K"]))


def matmul_flops(d: Dims) -> float:
    return 2.0 * d["M"] * d["N"] * d["K"]


def cupy_matmul(arrays: Arrays, d: Dims) -> Callable[[], Any]:
    """cuBLAS through ``cupy.matmul`` on the same device arrays (fp32: no TF32 unless CUPY_TF32=1)."""
    import cupy as cp

    a, b = arrays["A"], arrays["B"]
    return lambda: cp.matmul(a, b)


def bf16_matmul_inputs(rng: np.random.Generator, d: Dims) -> dict[str, np.ndarray]:
    """A and B as bf16 bits (uint16), uniform in [-1, 1)."""
    return {"A": to_bf16_bits(uniform(rng, (d["M"], d["K"]))), "B": to_bf16_bits(uniform(rng, (d["K"], d["N"])))}


def bf16_matmul_reference(x: dict[str, np.ndarray], d: Dims) -> dict[str, np.ndarray]:
    """C = A @ B of bf16 bits, in float64."""
    return {"C": bf16_to_float32(x["A"]).astype(np.float64) @ bf16_to_float32(x["B"]).astype(np.float64)}


def bf16_matmul_baseline(arrays: Arrays, d: Dims) -> Callable[[], Any]:
    """cuBLAS bf16 on the same device arrays (``tklab.run.baselines.bf16_matmul``)."""
    return baselines.bf16_matmul(arrays["A"], arrays["B"])


def bf16_matmul_expect(arrays: Arrays, d: Dims) -> Any:
    """A @ B in float32 on the GPU: what the learner's output at the benchmark size is held to (loosely)."""
    import cupy as cp

    return cp.matmul(bf16_to_float32(arrays["A"]), bf16_to_float32(arrays["B"]))


def fp32_matmul_bench(size: int, target: float, measured: tuple[float, ...]) -> Bench:
    """An fp32 matmul timed at ``size``³ against cuBLAS fp32 (``cupy.matmul``) on the same arrays."""
    return Bench(dims={"M": size, "N": size, "K": size}, baseline=cupy_matmul,
                 baseline_name="cuBLAS fp32 (cupy.matmul)", output="C", target=target, flops=matmul_flops,
                 measured=measured)


def bf16_matmul_bench(target: float, measured: tuple[float, ...]) -> Bench:
    """A bf16 GEMM timed at 4096³ against cuBLAS bf16, its C held loosely to A @ B in float32."""
    return Bench(dims={"M": 4096, "N": 4096, "K": 4096}, baseline=bf16_matmul_baseline,
                 baseline_name="cuBLAS bf16 (torch.matmul)", output="C", target=target, measured=measured,
                 flops=matmul_flops, expect=bf16_matmul_expect, rtol=1e-2, atol=1e-1)


def copy_baseline(name: str) -> Callable[[Arrays, Dims], Callable[[], Any]]:
    """A device-to-device copy of input ``name``'s bytes: what any copy kernel is read against."""
    return lambda arrays, d: baselines.device_copy(arrays[name])


def tensor_map(array: Any, tile: tuple[int, int], *, swizzle: int | None = None, dtype: str | None = None,
               fold: bool = False) -> Any:
    """A TMA tensor map over ``array`` for a spec's ``args``: the driver's (``tklab.run.tma``) over a GPU array, the
    CPU emulator's (``tklab.emulate.tensormap``, same checks, same box) over a NumPy array. The array says which
    run it is, so one ``args`` serves both."""
    if isinstance(array, np.ndarray):
        from ..emulate import tensormap

        return tensormap.tensor_map(array, tile, swizzle=swizzle, dtype=dtype, fold=fold)
    from ..run import tma

    return tma.tensor_map(array, tile, swizzle=swizzle, dtype=dtype, fold=fold)


def tma_matmul_args(box_a: tuple[int, int], box_b: tuple[int, int]) -> Callable[[Arrays, Dims], tuple[Any, ...]]:
    """``args`` of a GEMM that reads bf16 A and B through TMA boxes: ``(map_a, map_b, C, M, N, K)``."""
    return lambda a, d: (tensor_map(a["A"], box_a, dtype="bfloat16"), tensor_map(a["B"], box_b, dtype="bfloat16"),
                         a["C"], np.int32(d["M"]), np.int32(d["N"]), np.int32(d["K"]))


def tma_copy_args(box: tuple[int, int]) -> Callable[[Arrays, Dims], tuple[Any, ...]]:
    """``args`` of a copy that reads ``src`` through unswizzled TMA boxes: ``(map_src, dst, M, N)``."""
    return lambda a, d: (tensor_map(a["src"], box, swizzle=0), a["dst"], np.int32(d["M"]), np.int32(d["N"]))


def sm_count() -> int:
    """This GPU's SM count, or an H200's (132) where there is none: a persistent grid's size for a launch that only a
    GPU runs at that size (the CPU emulator's cases name their blocks)."""
    from ..run import gpu

    try:
        return gpu.properties().sm_count
    except Exception:  # noqa: BLE001 - launch shapes are only needed where a GPU runs them
        return 132


def ring_launch(stages: int) -> Callable[[Dims], Launch]:
    """The launch of chapter 07's ring of TMA stages (``tklab.kernels.tma_copy.ring_launch``): one block per SM, or
    the case's ``blocks`` when it asks for fewer (so a small matrix still gives each block many tiles: the ring wraps
    and both parities are used)."""

    def launch(d: Dims) -> Launch:
        from ..kernels import tma_copy

        blocks, threads, smem = tma_copy.ring_launch(d["M"], d["N"], stages, d.get("blocks") or sm_count())
        return Launch(grid=(blocks,), block=(threads,), shared_mem=smem)

    return launch


# ---- the problems several exercises solve: ``Exercise(**FP32_MATMUL, ...)`` ------------------------------

def copy_inputs(rng: np.random.Generator, d: Dims) -> dict[str, np.ndarray]:
    return {"src": uniform(rng, (d["M"], d["N"]))}


def copy_outputs(d: Dims) -> dict[str, tuple[tuple[int, ...], str]]:
    return {"dst": ((d["M"], d["N"]), "float32")}


#: C = A @ B in fp32 (A: M x K, B: K x N), held to the float64 product.
FP32_MATMUL: dict[str, Any] = {"inputs": matmul_inputs, "outputs": matmul_outputs, "reference": matmul_reference}
#: C = A @ B of bf16 A and B (bits), an fp32 C held to the float64 product.
BF16_MATMUL: dict[str, Any] = {"inputs": bf16_matmul_inputs, "outputs": matmul_outputs,
                               "reference": bf16_matmul_reference, "rtol": 1e-3, "atol": 1e-3}
#: dst = src, an M x N fp32 matrix, exactly.
COPY: dict[str, Any] = {"inputs": copy_inputs, "outputs": copy_outputs, "reference": lambda x, d: {"dst": x["src"]},
                        "rtol": 0.0, "atol": 0.0}


def dims_text(d: Dims) -> str:
    """A case in words: ``M=64, N=256``; an emulated case's ``tma_order`` as the order its TMA loads landed in."""
    def one(k: str, v: int) -> str:
        if k == "tma_order":
            return f"TMA loads landing {TMA_ORDERS[v].replace('_', ' ')}"
        return f"{k}={v}"

    return ", ".join(one(k, v) for k, v in d.items())
