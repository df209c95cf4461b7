"""``tklab.bench``: time GPU work honestly.

- CUDA events around each call (device time, not Python's), after a warm-up that keeps module loading
  and first-call costs out.
- The **median** of many calls, with the spread, because single timings on a shared GPU lie.
- L2 does not flatter: by default a buffer larger than L2 is overwritten between timed calls (outside
  the timed region), or pass ``inputs=[args0, args1, ...]`` to rotate among input sets.
- ``batch=n`` times n back-to-back calls per event pair (reported per call): Python's launch cost then
  overlaps the GPU's work instead of sitting between the events — the throughput a loop of launches sees.
- Rates against the ceilings of this GPU (``tklab.run.ceilings``): TFLOP/s and TB/s as a fraction of what
  cuBLAS / a copy reach on the same card.

Public API: ``bench(fn, *, flops=None, bytes=None, inputs=None, ...) -> BenchResult``.
"""

from __future__ import annotations

import html
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from . import gpu
from .ceilings import for_device as ceilings_for


@dataclass
class BenchResult:
    """Timing of one piece of GPU work. Times in milliseconds; rates are per second."""

    name: str
    ms: float  # median
    ms_min: float
    ms_max: float
    ms_q1: float
    ms_q3: float
    reps: int
    flops: float | None = None
    bytes: float | None = None
    device: str = ""
    fractions: dict[str, float] = field(default_factory=dict)

    @property
    def tflops(self) -> float | None:
        return self.flops / (self.ms * 1e-3) / 1e12 if self.flops else None

    @property
    def gbps(self) -> float | None:
        return self.bytes / (self.ms * 1e-3) / 1e9 if self.bytes else None

    @property
    def tbps(self) -> float | None:
        return self.gbps / 1e3 if self.gbps else None

    def __str__(self) -> str:
        parts = [f"{self.name}: {self.ms:.4f} ms (median of {self.reps}, IQR {self.ms_q1:.4f}–{self.ms_q3:.4f})"]
        if self.tflops is not None:
            parts.append(f"{self.tflops:.1f} TFLOP/s")
        if self.gbps is not None:
            parts.append(f"{self.gbps:.0f} GB/s")
        parts += [f"{v:.0%} {k}" for k, v in self.fractions.items()]
        return ", ".join(parts)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        return f"<code>{html.escape(str(self))}</code>"


class _Timer:
    """CUDA events on a stream, through the driver API (works with CuPy and PyTorch alike)."""

    def __init__(self, stream: int = 0):
        from cuda.bindings import driver

        gpu.ensure_current()
        self.d, self.stream = driver, stream
        self.start = gpu.check(driver.cuEventCreate(0), "cuEventCreate")
        self.stop = gpu.check(driver.cuEventCreate(0), "cuEventCreate")

    def time(self, fn: Callable[[], Any]) -> float:
        d = self.d
        gpu.check(d.cuEventRecord(self.start, self.stream), "cuEventRecord")
        fn()
        gpu.check(d.cuEventRecord(self.stop, self.stream), "cuEventRecord")
        gpu.check(d.cuEventSynchronize(self.stop), "waiting for the timed work (a kernel may have faulted)")
        return float(gpu.check(d.cuEventElapsedTime(self.start, self.stop), "cuEventElapsedTime"))


def _l2_flusher() -> Callable[[], None] | None:
    """Overwrites a buffer twice the L2 size, so each timed call starts with a cold L2."""
    try:
        from cuda.bindings import driver
    except ImportError:  # pragma: no cover
        return None
    size = 2 * max(gpu.properties().l2_bytes, 1 << 20)
    ptr = gpu.check(driver.cuMemAlloc(size), "cuMemAlloc (L2 flush buffer)")

    def flush() -> None:
        gpu.check(driver.cuMemsetD8(ptr, 0, size), "cuMemsetD8")

    flush.ptr = ptr  # type: ignore[attr-defined]
    return flush


def bench(
    fn: Callable[..., Any],
    *,
    flops: float | None = None,
    bytes: float | None = None,  # noqa: A002 - the natural name for bytes moved
    inputs: Sequence[Sequence[Any]] | None = None,
    flush_l2: bool | None = None,
    warmup_ms: float = 25.0,
    target_ms: float = 300.0,
    min_reps: int = 10,
    max_reps: int = 1000,
    name: str | None = None,
    ceilings: bool = True,
    peak: str = "bf16_tensor",
    batch: int = 1,
    stream: int = 0,
    progress: bool = True,
) -> BenchResult:
    """Time ``fn`` on the GPU; see the module docstring.

    ``fn()`` is called as is, or ``fn(*inputs[i % len(inputs)])`` when ``inputs`` is given (then L2 is
    not flushed unless ``flush_l2=True``). ``flops``/``bytes`` are per call. ``peak`` picks the compute
    ceiling the FLOP rate is compared with: ``"bf16_tensor"`` (cuBLAS bf16) or ``"fp32_simt"`` (no tensor
    cores).
    """
    if not gpu.available():
        raise RuntimeError("tklab.run.bench needs a GPU; this machine has none. The notebooks show results "
                           "recorded on an H200 instead.")
    if inputs is not None and len(inputs) == 0:
        raise ValueError("inputs= must hold at least one argument tuple")
    if batch < 1:
        raise ValueError(f"batch must be at least 1, got {batch}")
    one: Callable[[int], Any] = (lambda i: fn(*inputs[i % len(inputs)])) if inputs else (lambda i: fn())

    def call(i: int) -> None:
        for j in range(batch):
            one(i * batch + j)

    flush = _l2_flusher() if (flush_l2 if flush_l2 is not None else inputs is None) else None
    timer = _Timer(stream)
    try:
        # Warm-up: at least 3 calls and warmup_ms of device time; also estimates the cost of one call.
        spent, n = 0.0, 0
        while n < 3 or spent < warmup_ms:
            spent += timer.time(lambda n=n: call(n))
            n += 1
            if n > 10000:
                break
        per_call = max(spent / n, 1e-4)
        reps = int(min(max_reps, max(min_reps, target_ms / per_call)))
        times: list[float] = []
        last_report = time.monotonic()
        started = last_report
        for i in range(reps):
            if flush is not None:
                flush()
            times.append(timer.time(lambda i=i: call(i)))
            now = time.monotonic()
            if progress and now - last_report > 1.0 and now - started > 2.0:
                print(f"\r  bench: {i + 1}/{reps} runs", end="", file=sys.stderr, flush=True)
                last_report = now
        if progress and time.monotonic() - started > 2.0:
            print("\r" + " " * 40 + "\r", end="", file=sys.stderr, flush=True)
    finally:
        if flush is not None:
            from cuda.bindings import driver

            driver.cuMemFree(flush.ptr)  # type: ignore[attr-defined]
    times = [t / batch for t in times]
    q = statistics.quantiles(times, n=4) if len(times) >= 4 else [min(times), statistics.median(times), max(times)]
    result = BenchResult(name=name or getattr(fn, "__name__", "fn"), ms=statistics.median(times),
                         ms_min=min(times), ms_max=max(times), ms_q1=q[0], ms_q3=q[2], reps=len(times),
                         flops=flops, bytes=bytes, device=gpu.name())
    if ceilings:
        c = ceilings_for(result.device, measure_copy=_copy_tbps)
        result.fractions = c.fraction(tflops=result.tflops, tbps=result.tbps, kind=peak)
    return result


def _copy_tbps() -> float:
    """A device-to-device copy's rate on this GPU (TB/s): the bandwidth ceiling of a GPU tklab does not know."""
    import cupy as cp

    n = 1 << 28  # 1 GiB of float32: far larger than any L2
    src, dst = cp.ones(n, cp.float32), cp.empty(n, cp.float32)
    return bench(lambda: cp.copyto(dst, src), bytes=2 * src.nbytes, ceilings=False).tbps
