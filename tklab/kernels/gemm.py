"""The Hopper GEMMs of chapter 08 from Python: every step of the progression, launched the same way.

Why a module: the chapter, the tests, the exercise and ``bench/gemm_wgmma.py`` all launch the same
kernels; the launch (grid, threads, shared memory, tensor maps, cluster size) is derived here, in one
place, mostly from the compiled kernel itself: its ``__launch_bounds__`` (threads), its exported
``gemm_shared_bytes`` (dynamic shared memory) and its ``__cluster_dims__`` (blocks per cluster) are read
back from the PTX, so the Python side never repeats a constant the kernel owns.

    STEPS                                   name -> Step: file, -D options, what changed and why
    VARIANTS                                knobs timed beside the steps (two blocks per SM; IN_FLIGHT=1)
    get(name) -> Step                       one step (a KeyError names the others)
    check_shapes(step, m, n, k)             ValueError if the step cannot take this shape
    prepare(a, b, c, step=FINAL) -> Prepared    tensor maps and launch packed once: call it to run
    gemm(a, b, step=FINAL) -> c             C = A @ B (bf16 in, bf16 out, fp32 accumulation)
    errors(c, a, b) -> Errors               relative error against float64, unwritten (NaN) outputs
    tile_order(rows, cols, group, i)        the walk over C's tiles that the persistent steps take (as tk::tile_order)
    Walk(tiles, k_slices, blocks, ...)      each block's items, the last wave split along K (as tk::gemm_walk)
    progression(sizes, rounds) -> dict      every step and cuBLAS timed three ways; table(result), ratios(...)
    launch_facts(module) -> dict            threads, shared bytes, cluster size (CPU: from the PTX)
    tma_boxes(step), tile_grid(step, m, n)  the boxes of a step's tensor maps; the grid of a non-persistent step
    mma_tiles_options() -> dict             chapter 06's mma.sync GEMM's tile configuration, from its file

A and B are row-major (A: M x K, B: K x N): torch bf16 tensors, or CuPy uint16 arrays holding bf16 bits.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ..paths import REPO, solution
from ..run import gpu
from ..run.limits import check_compiled

ROOT = REPO
SOLUTIONS = ROOT / "solutions"


@dataclass(frozen=True)
class Step:
    """One row of chapter 08's progression: a kernel file, the options it is built with, its tile."""

    name: str
    label: str
    source: str  # its file's name (tklab.paths.solution: in solutions/, or an exercise's folder)
    options: tuple[str, ...]
    block_m: int  # rows of C per block (per cluster tile: times the cluster size)
    block_n: int
    # one block per tile, grid (N/BN, M/BM) or flat; or "persistent": as many blocks as fit at once
    grid: Literal["tiles_2d", "tiles_1d", "persistent"]
    changed: str  # what this step changes, and why it should help

    @property
    def persistent(self) -> bool:
        """A grid of resident blocks walking the tiles, C written through a TMA tensor map."""
        return self.grid == "persistent"

    @property
    def stream_k(self) -> bool:
        """Built with STREAM_K=1: the launch passes a workspace for the split tiles' partial sums."""
        values = [o.split("=", 1)[1] for o in self.options if o.startswith("-DSTREAM_K=")]
        return self.persistent and bool(values) and values[-1] != "0"  # the last -D wins, as in the compiler

    @property
    def path(self) -> Path:
        return solution(self.source)

    def with_options(self, *extra: str, name: str | None = None) -> Step:
        """A variant: the same step with more -D options (later ones win), named ``name``."""
        return Step(name or f"{self.name} {' '.join(extra)}", f"{self.label} ({' '.join(extra)})", self.source,
                    self.options + tuple(extra), self.block_m, self.block_n, self.grid, self.changed)


BK = 64  # every step's K-slice per stage
WG_ROWS = 64  # rows of C one consumer warpgroup's wgmma (m64nNk16) covers: A's TMA box is WG_ROWS x BK
C_BOX = (64, 64)  # the persistent steps' staging tile of C, stored by TMA
#: tk::gemm_walk multiplies leftover tiles x K-slices x blocks in 32 bits: below 2^31 up to 132+ blocks
STREAM_K_MAX_K = 1 << 22
STEPS: dict[str, Step] = {s.name: s for s in (
    Step("1_one_warpgroup", "one warpgroup: TMA ring + wgmma, 64×256 tile", "ch08_wgmma.cu", (), 64, 256, "tiles_2d",
         "TMA brings A and B slices into a 4-stage ring; one warpgroup waits, issues 4 wgmma per slice, waits for "
         "them, refills the stage. Copies and products take turns in the same threads."),
    Step("2_warp_specialised", "producer + 2 consumer warpgroups, setmaxnreg, 128×256", "gemm_wgmma.cu", (), 128, 256,
         "tiles_1d", "A producer warpgroup only issues TMA (40 registers); two consumer warpgroups only run wgmma "
         "(232). While one consumer waits, the other's products run."),
    Step("3_persistent", "persistent grid, TMA-store epilogue (row-major tile order)", "gemm_wgmma_persistent.cu",
         ("-DCLUSTER=1", "-DGROUP_M=1"), 128, 256, "persistent",
         "One block per SM walks tile after tile: the producer loads the next tile while the consumers store the "
         "last through shared memory with TMA; no half-empty last wave."),
    Step("4_l2_order", "+ grouped tile order for L2 (16 tile rows)", "gemm_wgmma_persistent.cu",
         ("-DCLUSTER=1", "-DGROUP_M=16"), 128, 256, "persistent",
         "Tiles in flight share panels of A and B in L2, so fewer bytes come from DRAM."),
    Step("5_cluster", "+ 2-block clusters, B multicast", "gemm_wgmma_persistent.cu", ("-DCLUSTER=2", "-DGROUP_M=8"),
         128, 256, "persistent",
         "Blocks pair up on tiles stacked in M; each loads half of every B slice and multicasts it to both: half "
         "the L2 traffic for B. (GROUP_M counts cluster tiles: 8 of them are step 4's 16 block rows.)"),
)}
FINAL = "5_cluster"
#: Knobs the chapter discusses, timed beside the steps.
VARIANTS: dict[str, Step] = {
    "1_one_warpgroup_2stages": STEPS["1_one_warpgroup"].with_options("-DSTAGES=2", name="1_one_warpgroup_2stages"),
    "2_in_flight_1": STEPS["2_warp_specialised"].with_options("-DIN_FLIGHT=1", name="2_in_flight_1"),
    # the last, partial wave split along K among all blocks (tk::gemm_walk); measured against step 5 / step 4
    "6_stream_k": STEPS["5_cluster"].with_options("-DSTREAM_K=1", name="6_stream_k"),
    "6_stream_k_c1": STEPS["4_l2_order"].with_options("-DSTREAM_K=1", name="6_stream_k_c1"),
}


def get(name: str) -> Step:
    """The step called ``name`` (e.g. ``"5_cluster"``)."""
    if name not in STEPS:
        raise KeyError(f"no GEMM step {name!r}; steps: {', '.join(STEPS)}")
    return STEPS[name]


def tile_order(rows: int, cols: int, group: int, i: int) -> tuple[int, int]:
    """Tile number i of the grouped walk over a rows x cols grid of tiles (the library's ``tk::tile_order``):
    down ``group`` tile rows, then one column right; the last band of rows may be shorter."""
    per_group = group * cols
    first = i // per_group * group
    height = min(rows - first, group)
    j = i % per_group
    return first + j % height, j // height


@dataclass(frozen=True)
class WalkItem:
    """One item of a block's walk (``tk::gemm_item``): a tile (number in the walk), its K-slices, whose partial
    sums an owner adds (workers ``first_sharer`` .. own - 1), and whether it is itself a partial."""

    tile: int
    k_begin: int
    k_end: int
    first_sharer: int
    partial: bool


@dataclass(frozen=True)
class Walk:
    """The persistent walk with the last wave split along K: the library's ``tk::gemm_walk``, in Python (the
    tests hold the two equal). ``min_slices <= 0``: the plain walk (block w takes tiles w, w + blocks, ...)."""

    tiles: int
    k_slices: int
    blocks: int
    min_slices: int
    min_saved: int = 0

    def workers(self) -> int:
        r = self.tiles % self.blocks
        if self.min_slices <= 0 or r == 0:
            return 0
        n = min(r * self.k_slices // self.min_slices, self.blocks)
        longest = -(-r * self.k_slices // max(n, 1))
        return n if n > r and longest <= self.k_slices - self.min_saved else 0

    def whole_tiles(self) -> int:
        return self.tiles - self.tiles % self.blocks if self.workers() else self.tiles

    def begin(self, w: int) -> int:
        return (self.tiles - self.whole_tiles()) * self.k_slices * w // self.workers()

    def items(self, w: int) -> list[WalkItem]:
        """Block w's items in the order it runs them: whole tiles, then its partial piece, then the rest."""
        whole = self.whole_tiles()
        out = [WalkItem(t, 0, self.k_slices, w, False) for t in range(w, whole, self.blocks)]
        if w >= self.workers():
            return out
        k, s, e = self.k_slices, self.begin(w), self.begin(w + 1)
        first, last = s // k, (e - 1) // k
        order = list(range(first, last + 1))
        if e - last * k < k:  # ends inside a tile: that partial piece first
            order = [last] + order[:-1]
        for t in order:
            kb, ke = (s - t * k if t == first else 0), (e - t * k if t == last else k)
            sharer = next(v for v in range(self.workers()) if self.begin(v + 1) > t * k) if kb > 0 else w
            out.append(WalkItem(whole + t, kb, ke, sharer, ke < k))
        return out


# ---- the compiled kernel and what it says about its launch ------------------------------------------
@functools.cache
def compiled(s: Step, arch: str = "sm_90a") -> Any:
    """The tklab.Kernel of a step (once per process; tklab.compile also caches on disk). ``ConfigError``
    (a ValueError) when the step's options give a kernel that spills or does not fit the device
    (``limits.check_compiled``: shared memory from the device's per-block limit, spills from the module)."""
    from ..toolchain.compiler import compile as nvrtc_compile

    k = nvrtc_compile(s.path.read_text(), arch=arch, name=s.source, options=s.options)["gemm"]
    facts = launch_facts(k.module)
    check_compiled(k, what=f"GEMM step {s.name!r} ({' '.join(s.options) or 'no options'})",
                   dynamic_shared=facts["shared_bytes"], threads=facts["threads"], arch=arch)
    return k


_MAXNTID = re.compile(r"\.maxntid\s+(\d+),\s*(\d+),\s*(\d+)")
_CLUSTER = re.compile(r"\.reqnctapercluster\s+(\d+),\s*(\d+),\s*(\d+)")


def launch_facts(module: Any) -> dict[str, int]:
    """What a GEMM kernel declares about its launch, read from its PTX: ``threads`` (``__launch_bounds__``),
    ``shared_bytes`` (the kernel's ``gemm_shared_bytes``) and ``cluster`` (``__cluster_dims__``, 1 if none)."""
    ptx = module.ptx
    threads, shared, cluster = _MAXNTID.search(ptx), module.constants.get("gemm_shared_bytes"), _CLUSTER.search(ptx)
    if threads is None or shared is None:
        raise ValueError("the kernel must declare __launch_bounds__ and export `extern \"C\" __device__ int "
                         "gemm_shared_bytes` (its dynamic shared memory)")
    return {"threads": int(threads.group(1)), "shared_bytes": shared,
            "cluster": int(cluster.group(1)) if cluster else 1}


# ---- shapes -------------------------------------------------------------------------------------------
def check_shapes(s: Step, m: int, n: int, k: int) -> None:
    """Raise ValueError unless step ``s`` handles M x N x K.

    Steps 1-2 write C with plain stores and read whole tiles: M, N, K multiples of the tile. The persistent
    steps take any size (TMA zero-fills past the end, its stores skip it) except where TMA itself cannot go:
    a row of A (K elements) and of B and C (N) must be a multiple of 16 bytes, i.e. K and N multiples of 8.
    """
    if min(m, n, k) <= 0:
        raise ValueError(f"empty GEMM: M={m}, N={n}, K={k}")
    if s.persistent:
        bad = [f"{name}={v} is not a multiple of 8" for name, v in (("N", n), ("K", k)) if v % 8]
        if bad:
            raise ValueError(f"{s.name}: TMA needs every row to start on a 16-byte boundary, so K and N must be "
                             f"multiples of 8 bf16: {'; '.join(bad)}. Pad the matrices with zero columns.")
        if s.stream_k and k > STREAM_K_MAX_K:
            raise ValueError(f"{s.name}: K={k} is more than the stream-K walk's 32-bit arithmetic takes "
                             f"({STREAM_K_MAX_K}); use step {FINAL}")
        return
    bad = [f"{name}={v} is not a multiple of {t}" for name, v, t in (("M", m, s.block_m), ("N", n, s.block_n),
                                                                      ("K", k, BK)) if v % t]
    if bad:
        raise ValueError(f"{s.name} handles shapes that are multiples of its block tile (M: {s.block_m}, N: "
                         f"{s.block_n}, K: {BK}): {'; '.join(bad)}. The persistent steps (3-5) take any shape.")


def _shape(x: Any) -> tuple[int, int]:
    if len(x.shape) != 2:
        raise ValueError(f"the GEMM multiplies matrices; got shape {tuple(x.shape)}")
    return int(x.shape[0]), int(x.shape[1])


def problem(a: Any, b: Any) -> tuple[int, int, int]:
    """(M, N, K) of A @ B, or a ValueError naming the mismatch."""
    (m, k), (k2, n) = _shape(a), _shape(b)
    if k != k2:
        raise ValueError(f"inner dimensions differ: A is {m} x {k}, B is {k2} x {n}")
    return m, n, k


def _is_torch(x: Any) -> bool:
    return hasattr(x, "data_ptr") and hasattr(x, "stride")


def _contiguous(x: Any) -> bool:
    if _is_torch(x):
        return bool(x.is_contiguous())
    return bool(x.flags.c_contiguous)


# ---- the launch -----------------------------------------------------------------------------------------
def resident_clusters(func: Any, threads: int, shared_bytes: int, cluster: int) -> int:
    """How many clusters of ``cluster`` blocks fit on the GPU at once (the persistent grid's size).

    Asked of the driver (cuOccupancyMaxActiveClusters): a 2-block cluster needs two free SMs in one GPC,
    so this can be less than SMs / 2. Falls back to SMs / cluster if the driver cannot say.
    """
    from cuda.bindings import driver
    sms = gpu.properties().sm_count
    try:
        if cluster == 1:
            n = gpu.check(driver.cuOccupancyMaxActiveBlocksPerMultiprocessor(func, threads, shared_bytes),
                          "cuOccupancyMaxActiveBlocksPerMultiprocessor")
            return max(1, int(n)) * sms
        cfg = driver.CUlaunchConfig()
        cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = cluster * sms, 1, 1
        cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = threads, 1, 1
        cfg.sharedMemBytes = shared_bytes
        return max(1, int(gpu.check(driver.cuOccupancyMaxActiveClusters(func, cfg), "cuOccupancyMaxActiveClusters")))
    except Exception:  # noqa: BLE001 - an older driver or binding: every SM, in whole clusters
        return max(1, sms // cluster)


def prepare(a: Any, b: Any, c: Any, *, step: str | Step = FINAL, stream: Any = None,
            dtype: str | None = None, max_clusters: int | None = None) -> Any:
    """Check the shapes, build the tensor maps and pack the launch once; returns a ``Prepared`` (call it).

    ``a``, ``b``, ``c``: torch bf16 CUDA tensors, or CuPy uint16 arrays of bf16 bits (``dtype`` then defaults
    to ``"bfloat16"``). ``c`` is written in place. Keep the arrays alive while the launch may run.
    ``max_clusters`` caps a persistent grid (tests: a few blocks then walk many tiles each).
    """
    from ..run import tma

    s = step if isinstance(step, Step) else get(step)
    m, n, k = problem(a, b)
    if _shape(c) != (m, n):
        raise ValueError(f"C must be {m} x {n}, got {tuple(c.shape)}")
    check_shapes(s, m, n, k)
    dt = dtype or (None if _is_torch(a) else "bfloat16")
    fn = compiled(s)
    facts = launch_facts(fn.module)
    box_a, box_b, *box_c = tma_boxes(s)
    map_a = tma.tensor_map(a, box_a, dtype=dt)
    map_b = tma.tensor_map(b, box_b, dtype=dt)
    threads, smem, cluster = facts["threads"], facts["shared_bytes"], facts["cluster"]
    if not s.persistent:
        if not _contiguous(c):
            raise ValueError(f"{s.name} writes C with plain row-major stores: pass a contiguous C")
        return fn.prepare(tile_grid(s, m, n), (threads,), (map_a, map_b, c, m, n, k), shared_mem=smem, stream=stream)
    map_c = tma.tensor_map(c, box_c[0], dtype=dt)
    args = (map_a, map_b, map_c, m, n, k, 0, 0)  # no stream-K workspace
    tiles = -(-m // (s.block_m * cluster)) * -(-n // s.block_n)  # cluster tiles
    probe = fn.prepare((cluster,), (threads,), args, shared_mem=smem, stream=stream)  # sets the smem limit
    clusters = min(tiles, resident_clusters(probe.func, threads, smem, cluster), max_clusters or tiles)
    if s.stream_k:
        partials, flags = workspace(fn.module, clusters * cluster, like=a)
        args = (*args[:6], partials, flags)
    return fn.prepare((clusters * cluster,), (threads,), args, shared_mem=smem, stream=stream)


def tma_boxes(s: Step) -> tuple[tuple[int, int], ...]:
    """The boxes of a step's tensor maps, (rows, columns): A's is one consumer's WG_ROWS x BK slice, B's a BK x
    block_n slice (in 64-column panels), and a persistent step's C map stores C_BOX staging tiles."""
    return ((WG_ROWS, BK), (BK, s.block_n)) + ((C_BOX,) if s.persistent else ())


def tile_grid(s: Step, m: int, n: int) -> tuple[int, ...]:
    """The grid of a non-persistent step over an M x N C: one block per block_m x block_n tile."""
    if s.persistent:
        raise ValueError(f"{s.name} is persistent: its grid is the resident blocks (prepare), not one per tile")
    return (n // s.block_n, m // s.block_m) if s.grid == "tiles_2d" else ((m // s.block_m) * (n // s.block_n),)


def mma_tiles_options() -> dict[str, int]:
    """Chapter 06's mma.sync GEMM (``solutions/gemm_mma_tiles.cu``): its tile configuration as the file's
    ``#define GEMM_<NAME>`` defaults give it (BM, BN, BK, WARPS_M, WARPS_N, STAGES; the file is their one home)."""
    text = (SOLUTIONS / "gemm_mma_tiles.cu").read_text()
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^#define GEMM_(\w+) (\d+)", text, re.M)}


def workspace(module: Any, blocks: int, *, like: Any) -> tuple[Any, Any]:
    """The stream-K step's fp32 partial sums and zeroed flags for ``blocks`` blocks (sizes from the kernel's
    ``gemm_partial_floats``/``gemm_flags``), on ``like``'s device and library. The owners reset the flags, so one
    workspace serves every later launch of the same grid, one launch at a time (one stream)."""
    floats, flags = module.constants["gemm_partial_floats"], module.constants["gemm_flags"]
    if _is_torch(like):
        import torch

        return (torch.empty(blocks * floats, device=like.device, dtype=torch.float32),
                torch.zeros(blocks * flags, device=like.device, dtype=torch.int32))
    import cupy as cp

    return cp.empty(blocks * floats, dtype=cp.float32), cp.zeros(blocks * flags, dtype=cp.int32)


def _empty_like(a: Any, m: int, n: int) -> Any:
    if _is_torch(a):
        return a.new_empty((m, n))
    import cupy as cp

    return cp.empty((m, n), dtype=a.dtype)


def gemm(a: Any, b: Any, out: Any = None, *, step: str | Step = FINAL, dtype: str | None = None) -> Any:
    """C = A @ B in bf16 with fp32 accumulation, by one step's kernel; ``out`` (M x N) is written if given."""
    m, n, k = problem(a, b)
    check_shapes(step if isinstance(step, Step) else get(step), m, n, k)  # before allocating anything
    out = _empty_like(a, m, n) if out is None else out
    prepare(a, b, out, step=step, dtype=dtype)()
    return out


# ---- checking (GPU, torch) -------------------------------------------------------------------------------
@dataclass
class Errors:
    """How far C is from A @ B in float64."""

    rel: float  # ||C - ref||_F / ||ref||_F (NaN counted as 0 difference: see unwritten)
    unwritten: int  # elements of C still NaN (callers poison C before the run)
    first_wrong: str  # the first element outside tolerance, or ""

    def ok(self, tol: float = 1e-2) -> bool:
        return self.unwritten == 0 and self.rel < tol and not self.first_wrong

    def __str__(self) -> str:
        return f"rel {self.rel:.2e}, unwritten {self.unwritten}" + (f", first wrong {self.first_wrong}"
                                                                     if self.first_wrong else "")


def errors(c: Any, a: Any, b: Any, *, atol: float = 0.1, rtol: float = 2e-2) -> Errors:
    """Compare C (torch, bf16) with A @ B computed in float64 on the GPU, element-wise (``run.arrays.isclose``)."""
    import torch

    from ..run.arrays import isclose

    ref = a.double() @ b.double()
    cd = c.double()
    unwritten = int(torch.isnan(cd).sum())
    bad = ~isclose(cd, ref, rtol, atol)
    first = ""
    if bool(bad.any()):
        idx = tuple(int(i) for i in torch.nonzero(bad)[0])
        first = f"C{list(idx)} = {float(cd[idx]):.4f}, expected {float(ref[idx]):.4f}"
    rel = float(torch.linalg.norm(torch.nan_to_num(cd) - ref) / torch.linalg.norm(ref))
    return Errors(rel, unwritten, first)


# ---- timing against cuBLAS (GPU, torch) ---------------------------------------------------------------
METHODS = ("bench", "graph", "batched")
METHOD_TEXT = ("bench: tklab.bench on the Python call (one call per event pair, L2 flushed before each; includes "
               "the host launch cost whenever the GPU has drained). graph: the same on a CUDA-graph replay of the "
               "call (launch cost gone). batched: 20 back-to-back calls per event pair, no flush (kernel time).")


@dataclass
class Replay:
    """A captured CUDA graph and the launch it was captured from: calling it replays the graph.

    The launch is kept because the graph holds raw addresses of what the launch owns (the stream-K workspace):
    dropped, its memory would go back to torch's cache, and the next ``torch.cuda.graph`` capture empties that
    cache (``cudaFree``), so a replay would write into freed memory (an illegal address, seen on the H200)."""

    graph: Any
    launch: Any

    def __call__(self) -> None:
        self.graph.replay()


def _graphed(make: Any) -> Replay:
    """make(stream) captured once in a CUDA graph; replaying it costs the host a few µs, not a Python launch."""
    import torch

    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        fn = make(side)
        fn()  # warm-up outside the capture (module load, cuBLAS workspace)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=side):
        fn()
    return Replay(graph, fn)


def _host_us(fn: Any, calls: int = 30) -> float:
    """Host time to enqueue one call while the GPU stays busy: launch overhead alone."""
    import time

    import torch

    fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(calls):
        fn()
    host = (time.perf_counter() - t) / calls * 1e6
    torch.cuda.synchronize()
    return host


#: Issue 27's shape set (M, N, K): square sizes, non-multiples of the tile, small problems, LLM-like layers.
SHAPES: dict[str, list[tuple[int, int, int]]] = {
    "issue27": [(4096, 4096, 4096), (8192, 8192, 8192), (4000, 4000, 4000), (2048, 2048, 2048), (1000, 1000, 1000),
                (4096, 4000, 1032), (8192, 1024, 8192), (1024, 8192, 8192), (8192, 8192, 1024)],
}


def shape_key(m: int, n: int, k: int) -> int | str:
    """How a result row names its problem: n for n x n x n (what the chapter's tables use), else "MxNxK"."""
    return m if m == n == k else f"{m}x{n}x{k}"


def _time_size(shape: int | tuple[int, int, int], steps: dict[str, Step], rounds: int,
               target_ms: float) -> list[dict[str, Any]]:
    """One problem of ``progression``: the contenders on shared random inputs, alternating within each round."""
    import torch

    from ..run.bench import bench

    m, n, k = (shape, shape, shape) if isinstance(shape, int) else shape
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    outs = {name: torch.empty(m, n, device="cuda", dtype=torch.bfloat16) for name in ("cuBLAS", *steps)}

    def cublas(stream: Any = None) -> Any:  # torch.matmul runs on the current stream (the graph's, in _graphed)
        return lambda: torch.matmul(a, b, out=outs["cuBLAS"])

    makers: dict[str, Any] = {"cuBLAS": cublas}
    for name, s in steps.items():
        makers[name] = lambda stream=None, s=s, c=outs[name]: prepare(a, b, c, step=s, stream=stream)
    plain = {name: make() for name, make in makers.items()}
    graphs = {name: _graphed(make) for name, make in makers.items()}
    flops, rows, key = 2.0 * m * n * k, [], shape_key(m, n, k)
    for r in range(rounds):
        for name, fn in plain.items():
            row: dict[str, Any] = {"n": key, "round": r, "who": name, "host_us": _host_us(fn),
                                   "grid": list(getattr(fn, "grid", ()))[:1]}  # blocks launched (not cuBLAS)
            row["bench"] = bench(fn, flops=flops, progress=False, ceilings=False, target_ms=target_ms).tflops
            row["graph"] = bench(graphs[name], flops=flops, progress=False, ceilings=False, target_ms=target_ms).tflops
            t = bench(fn, batch=20, flush_l2=False, ceilings=False, progress=False, target_ms=target_ms)
            row["batched"] = flops / t.ms / 1e9
            rows.append(row)
    return rows


def progression(sizes: tuple[int | tuple[int, int, int], ...] = (4096, 8192), rounds: int = 3,
                steps: dict[str, Step] | None = None, target_ms: float = 150.0) -> dict[str, Any]:
    """TFLOP/s of cuBLAS (torch.matmul) and every step at n^3 (or (M, N, K)), ``rounds`` rounds, the ``METHODS``.

    Contenders alternate within a round, on the same inputs, so a ratio to cuBLAS compares like with like.
    Returns ``{"sizes", "rounds", "methods", "rows": [{n, round, who, host_us, bench, graph, batched}],
    "labels": {who: label}}`` (JSON-able: what the notebook records); ``n`` is ``shape_key``'s name of the problem.
    """
    import torch

    steps = STEPS if steps is None else steps
    rows: list[dict[str, Any]] = []
    for shape in sizes:
        rows += _time_size(shape, steps, rounds, target_ms)
        torch.cuda.empty_cache()
    labels = {"cuBLAS": "cuBLAS bf16 (torch.matmul)"} | {name: s.label for name, s in steps.items()}
    keys = [x if isinstance(x, int) else shape_key(*x) for x in sizes]
    return {"sizes": keys, "rounds": rounds, "methods": list(METHODS), "rows": rows, "labels": labels}


def ratios(result: dict[str, Any], who: str, n: int, method: str) -> list[float]:
    """who / cuBLAS in each round of a ``progression`` result, for one size and method."""
    rows = result["rows"]
    ref = {r["round"]: r[method] for r in rows if r["n"] == n and r["who"] == "cuBLAS"}
    return [r[method] / ref[r["round"]] for r in rows if r["n"] == n and r["who"] == who and r["round"] in ref]


def table(result: dict[str, Any]) -> str:
    """The progression as a markdown table: per step and size, median TFLOP/s (graph method) and the range
    of ratios to cuBLAS over rounds, for each method."""
    import statistics

    size = "n³" if all(isinstance(n, int) for n in result["sizes"]) else "n³ or M×N×K"
    head = ["step", size, "TFLOP/s (graph, median)"] + [f"÷ cuBLAS ({m})" for m in result["methods"]]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for who in result["labels"]:
        for n in result["sizes"]:
            tf = [r["graph"] for r in result["rows"] if r["n"] == n and r["who"] == who]
            if not tf:
                continue
            cells = [result["labels"][who] if who == "cuBLAS" else f"{who}: {result['labels'][who]}", str(n),
                     f"{statistics.median(tf):.0f}"]
            for m in result["methods"]:
                rs = ratios(result, who, n, m)
                cells.append(f"{min(rs):.3f}–{max(rs):.3f}" if rs else "—")
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def records(result: dict[str, Any], n: int = 4096, method: str = "graph") -> dict[str, dict[str, Any]]:
    """Each step of a ``progression`` result as a comparison record (``tklab.course``'s format) at n^3, from the
    median TFLOP/s of ``method`` over rounds: what the course's results table shows, keyed by step name."""
    import statistics

    from ..recorded import comparison

    flops = 2.0 * n**3

    def median(who: str) -> float:
        return statistics.median(r[method] for r in result["rows"] if r["n"] == n and r["who"] == who)

    lib_ms = flops / (median("cuBLAS") * 1e12) * 1e3
    out = {}
    for who, label in result["labels"].items():
        if who == "cuBLAS" or not any(r["who"] == who and r["n"] == n for r in result["rows"]):
            continue
        ms = flops / (median(who) * 1e12) * 1e3
        out[who] = comparison(ms, lib_ms, flops, label=f"{label}, {n}³ ({method})", ceiling_tflops=None,
                              ceiling="bf16_tensor")
    return out
