"""Chapter 07's copies from Python: a float matrix copied three ways, and through the TMA ring.

Why a module: the chapter, the exercise's spec, the tests and ``bench/tma_copy.py`` launch the same
kernels (``solutions/tma_copy.cu``, ``solutions/ch07_tma_ring/ch07_tma_ring.cu``) the same way, and the chapter records
exactly what the benchmark measures.

    WAYS                                    way -> kernel name in tma_copy.cu
    prepare_way(way, src, dst) -> Prepared  one of the three ways, packed once (call it to run)
    prepare_ring(src, dst, stages=2) -> Prepared    the ring: one block per SM, STAGES stages of 64 x 64
    ring_launch(rows, cols, stages) -> (grid, threads, shared bytes)   (CPU: the launch the ring needs)
    measure_ways(rows, cols) -> dict        GB/s of each way and of a plain device copy, same run
    measure_ring(stages, rows, cols) -> dict        GB/s of the ring for each stage count, same run
GB/s counts bytes read plus bytes written (2 x the matrix), as a copy's bandwidth is usually quoted.
CuPy float32 arrays throughout.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..paths import REPO, solution
from ..run import gpu

ROOT = REPO
SOLUTIONS = ROOT / "solutions"
WAYS = {"per_thread": "copy_per_thread", "cp_async": "copy_cp_async", "tma": "copy_tma"}
TILE_ROWS, TILE_COLS = 64, 64  # the tile both files use by default (ROWS x 64 floats, 16 KB)
RING_THREADS = 32 * 5  # a producer warp and four consumer warps


@functools.cache
def _module(name: str, options: tuple[str, ...] = ()) -> Any:
    from ..toolchain.compiler import compile as nvrtc_compile

    return nvrtc_compile(solution(name).read_text(), arch="sm_90a", name=name, options=options)


def _check(src: Any, dst: Any, tiled: bool) -> tuple[int, int]:
    if src.shape != dst.shape or len(src.shape) != 2 or src.dtype.name != "float32" or dst.dtype.name != "float32":
        raise ValueError(f"src and dst must be float32 matrices of one shape; got {src.shape} {src.dtype}, "
                         f"{dst.shape} {dst.dtype}")
    rows, cols = (int(x) for x in src.shape)
    if tiled and (rows % TILE_ROWS or cols % TILE_COLS):
        raise ValueError(f"the three ways copy whole {TILE_ROWS} x {TILE_COLS} tiles: rows and cols must be "
                         f"multiples of {TILE_ROWS} and {TILE_COLS}, got {rows} x {cols}")
    return rows, cols


def prepare_way(way: str, src: Any, dst: Any) -> Any:
    """A prepared launch of one way (``"per_thread"``, ``"cp_async"``, ``"tma"``) copying src to dst."""
    from ..run import tma

    if way not in WAYS:
        raise ValueError(f"way must be one of {', '.join(WAYS)}, got {way!r}")
    rows, cols = _check(src, dst, tiled=way != "per_thread")
    k = _module("tma_copy.cu")[WAYS[way]]
    if way == "per_thread":
        blocks = 4 * 2048 // 256 * gpu.properties().sm_count  # 4 waves of fully occupied SMs, grid-stride beyond
        return k.prepare((blocks,), (256,), (src, dst, rows * cols // 4))
    grid = (cols // TILE_COLS, rows // TILE_ROWS)
    if way == "cp_async":
        return k.prepare(grid, (128,), (src, dst, rows, cols))
    maps = [tma.tensor_map(x, (TILE_ROWS, TILE_COLS), swizzle=0) for x in (src, dst)]
    return k.prepare(grid, (32,), tuple(maps))


def ring_launch(rows: int, cols: int, stages: int, sms: int = 132) -> tuple[int, int, int]:
    """(blocks, threads, dynamic shared bytes) of the ring: one block per SM (fewer for small matrices)."""
    if stages < 1:
        raise ValueError(f"stages must be at least 1, got {stages}")
    tiles = -(-rows // TILE_ROWS) * -(-cols // TILE_COLS)
    return min(tiles, sms), RING_THREADS, stages * TILE_ROWS * TILE_COLS * 4 + 1024


def prepare_ring(src: Any, dst: Any, stages: int = 2, *, path: Path | None = None) -> Any:
    """A prepared launch of the ring copy (``solutions/ch07_tma_ring/ch07_tma_ring.cu``, or ``path``), ``stages``
    deep."""
    from ..run import tma

    rows, cols = _check(src, dst, tiled=False)
    if cols % 4:
        raise ValueError(f"TMA needs rows that start on 16-byte boundaries: cols must be a multiple of 4, got {cols}")
    if path is None:
        k = _module("ch07_tma_ring.cu", (f"-DSTAGES={stages}",))["ring_copy"]
    else:
        from ..toolchain.compiler import compile as nvrtc_compile

        k = nvrtc_compile(Path(path).read_text(), arch="sm_90a", name=Path(path).name,
                          options=(f"-DSTAGES={stages}",))["ring_copy"]
    blocks, threads, _ = ring_launch(rows, cols, stages, gpu.properties().sm_count)
    m = tma.tensor_map(src, (TILE_ROWS, TILE_COLS), swizzle=0)
    smem = k.module.constants["ring_shared_bytes"]  # the kernel's own number (ring_launch models it)
    return k.prepare((blocks,), (threads,), (m, dst, rows, cols), shared_mem=smem)


def _gbps(ms: float, rows: int, cols: int) -> float:
    return 2 * 4 * rows * cols / (ms * 1e-3) / 1e9


def _device_copy(src: Any, dst: Any) -> Any:
    def run() -> None:
        dst.data.copy_from_device_async(src.data, src.nbytes)

    return run


def _median(xs: list[float]) -> float:
    import statistics

    return statistics.median(xs)


def _matrices(rows: int, cols: int) -> tuple[Any, Any]:
    """A random float32 source and a destination of its shape, on the GPU."""
    import cupy as cp

    src = cp.random.default_rng().standard_normal((rows, cols), dtype=cp.float32)
    return src, cp.full_like(src, cp.nan)


def _checked_rounds(runs: dict[Any, Callable[[], None]], src: Any, dst: Any, rounds: int, target_ms: float,
                    wrong: Callable[[Any], str]) -> dict[Any, list[float]]:
    """GB/s of each copy in ``runs`` (src to dst), per round: each run checked once first (``dst`` poisoned with NaN,
    then it must equal ``src``: else an AssertionError saying ``wrong(key)``), then ``rounds`` rounds in which the
    runs take turns, so all of them see the same GPU."""
    import cupy as cp

    from ..run.bench import bench

    rows, cols = (int(x) for x in src.shape)
    for key, fn in runs.items():
        dst.fill(cp.nan)
        fn()
        cp.cuda.runtime.deviceSynchronize()
        if not bool(cp.array_equal(dst, src)):
            raise AssertionError(f"{wrong(key)} at {rows} x {cols}")
    seen: dict[Any, list[float]] = {key: [] for key in runs}
    for _ in range(rounds):
        for key, fn in runs.items():
            seen[key].append(_gbps(bench(fn, progress=False, ceilings=False, target_ms=target_ms).ms, rows, cols))
    return seen


def measure_ways(rows: int = 16384, cols: int = 8192, rounds: int = 3, target_ms: float = 100.0) -> dict[str, Any]:
    """GB/s of the three ways and of cudaMemcpy (device to device) on the same matrix, each checked first;
    ``rounds`` rounds alternating the contenders. ``<name>_gbps``: the median; ``<name>_gbps_all``: each round."""
    src, dst = _matrices(rows, cols)
    runs = {way: prepare_way(way, src, dst) for way in WAYS} | {"device_copy": _device_copy(src, dst)}
    seen = _checked_rounds(runs, src, dst, rounds, target_ms, lambda name: f"copy {name} is wrong")
    out: dict[str, Any] = {"rows": rows, "cols": cols, "rounds": rounds}
    for name, xs in seen.items():
        out[f"{name}_gbps"], out[f"{name}_gbps_all"] = _median(xs), xs
    return out


def measure_ring(stages: tuple[int, ...] = (1, 2, 3, 4, 6, 8), rows: int = 16384, cols: int = 8192,
                 rounds: int = 3, target_ms: float = 100.0) -> dict[str, Any]:
    """GB/s of the ring for each stage count beside a device copy of the same matrix, each checked first;
    ``gbps``: medians over ``rounds`` rounds (``gbps_all``: every round, one list per stage count)."""
    src, dst = _matrices(rows, cols)
    runs: dict[Any, Callable[[], None]] = {s: prepare_ring(src, dst, s) for s in stages}
    runs["device_copy"] = _device_copy(src, dst)  # last in each round
    seen = _checked_rounds(runs, src, dst, rounds, target_ms,
                           lambda s: "the device copy is wrong" if s == "device_copy" else
                           f"the ring with {s} stages copied wrongly")
    return {"rows": rows, "cols": cols, "rounds": rounds, "stages": list(stages),
            "gbps": [_median(seen[s]) for s in stages], "gbps_all": [seen[s] for s in stages],
            "device_copy_gbps": _median(seen["device_copy"]), "stage_kb": TILE_ROWS * TILE_COLS * 4 // 1024,
            "blocks": ring_launch(rows, cols, stages[0], gpu.properties().sm_count)[0]}
