"""``tklab.profile``: what limits a kernel, from one call — Nsight Compute's evidence, as a table and a picture.

::

    run = mod["gemm"].prepare(grid, block, (a, b, c, n))       # the launch, as for tklab.bench
    tklab.profile(run, flops=2 * n**3)                          # table + roofline + stall reasons + verdict

The launch is profiled with Nsight Compute (``ncu --clock-control none``) in a child process: the kernel's
cubin, launch shape and a copy of its argument memory are written to a folder (``recipe``), a fresh Python
process re-creates and runs the launch under ncu (``child``), and the metrics come back as CSV (``parse``).
The result (``result.ProfileResult``) reads the few numbers that explain a kernel — duration, TFLOP/s and
bytes/s against this GPU's ceilings, tensor/FMA pipe utilisation, shared-memory wavefronts and bank
conflicts, L2/DRAM traffic, occupancy, the top warp-stall reasons — and names the limiter in a sentence.

Without a GPU, without ncu, or without permission to read GPU counters, the error says which (and how
to get it). Chapters pass ``key=``: there the H200's recorded profile is shown instead (``store``), labelled
with device, date and commit.

Public API: ``profile(run, *, flops=None, peak=None, key=None, label=None, metrics=(), warmup=2,
timeout=300, report=None) -> ProfileResult``, ``ProfileResult``, ``ProfileUnavailable``, ``Missing``,
``load(key)``, ``unavailable()``.
"""

from __future__ import annotations

import datetime as _dt
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..run import gpu
from .ncu import ProfileUnavailable
from .result import Missing, ProfileResult

__all__ = ["Missing", "ProfileResult", "ProfileUnavailable", "load", "profile", "unavailable"]

_SHORT = {"no-gpu": "this machine has no GPU", "no-ncu": "Nsight Compute (ncu) is not installed here",
          "permission": "GPU counters may not be read here"}


def load(key: str) -> ProfileResult | None:
    """The profile recorded for ``key`` (``bench/results/profiles.json``), or None."""
    from . import store

    return store.load(key)


def unavailable() -> ProfileUnavailable | None:
    """Why a profile cannot be taken on this machine (no GPU, no ncu), or None if it can be tried.

    Permission to read counters is only known by trying: ``profile`` reports it when ncu refuses.
    """
    from . import ncu

    if not gpu.available():
        return ProfileUnavailable("no-gpu", "tklab.profile needs an NVIDIA GPU, and this machine has none (or "
                                  "TKLAB_NO_GPU is set). Chapters show the profile recorded on an H200 instead.")
    if ncu.find_ncu() is None:
        return ProfileUnavailable("no-ncu", ncu.missing_message())
    return None


def _fallback(key: str | None, problem: ProfileUnavailable) -> ProfileResult | Missing:
    if key is None:
        raise problem
    from . import store

    recorded = store.load(key, note=_SHORT.get(problem.reason, problem.reason))
    return recorded if recorded is not None else Missing(key, str(problem))


def _default_peak(kernel: Any) -> str:
    """Tensor-core kernels are read against the bf16 tensor ceiling, the rest against FP32 FMA."""
    try:
        hist = kernel.histogram
    except Exception:  # noqa: BLE001 - no disassembler: assume plain FP32 work
        return "fp32_simt"
    return "bf16_tensor" if hist.get("HMMA") or hist.get("HGMMA") else "fp32_simt"


def profile(run: Any, *, flops: float | None = None, peak: str | None = None, key: str | None = None,
            label: str | None = None, metrics: Sequence[str] = (), warmup: int = 2, timeout: float = 300.0,
            report: str | Path | None = None) -> ProfileResult | Missing:
    """Profile one launch of ``run`` (from ``kernel.prepare(...)``) with Nsight Compute; see the module docstring.

    ``flops``: the launch's useful floating-point work (else FP32 instructions are counted). ``peak``:
    "fp32_simt" or "bf16_tensor" (default: tensor if the kernel's SASS has HMMA/HGMMA). ``key``: a
    chapter's name for this profile: recorded when ``TKLAB_RECORD=1``, shown when this machine cannot
    profile. ``metrics``: more ncu metric names to collect (read them in ``result.metrics``). ``warmup``:
    launches before the profiled one. ``report``: also keep ncu's report there (open it in Nsight Compute).
    """
    from .. import recorded
    from ..run import launch
    from . import ncu, parse, recipe, store

    if flops is not None and flops <= 0:
        raise ValueError(f"flops must be positive, got {flops}")
    if peak is not None and peak not in ("fp32_simt", "bf16_tensor"):
        raise ValueError(f"peak must be 'fp32_simt' or 'bf16_tensor', got {peak!r}")
    if warmup < 0:
        raise ValueError(f"warmup must be >= 0, got {warmup}")
    metrics = (metrics,) if isinstance(metrics, str) else tuple(metrics)
    problem = unavailable()
    if problem is not None:
        return _fallback(key, problem)
    if run is None:
        raise ValueError("nothing to profile: pass a prepared launch, run = kernel.prepare(grid, block, args)")
    if not isinstance(run, launch.Prepared):
        raise TypeError(f"tklab.profile needs a prepared launch (kernel.prepare(grid, block, args)), not a "
                        f"{type(run).__name__}: ncu runs the launch again in a separate process, so it must know "
                        "the kernel and its arguments, which a function does not say")
    exe = ncu.find_ncu()
    assert exe is not None  # unavailable() checked
    device = gpu.name()
    wanted = ncu.metrics_to_request(ncu.available_metrics(exe, device), metrics)
    folder = Path(tempfile.mkdtemp(prefix="tklab-profile-"))
    print(f"  profile: {run.name} under Nsight Compute (one launch, replayed once per pass)...",
          end="\r", file=sys.stderr, flush=True)
    try:
        rec = recipe.capture(run, folder, warmup=warmup)
        try:
            csv_text, _, _ = ncu.run_profile(exe, folder, kernel=rec.kernel, warmup=warmup, metrics=wanted,
                                             sections=ncu.available_sections(exe), timeout=timeout,
                                             required=metrics)
        except ProfileUnavailable as e:
            if e.reason == "permission":
                return _fallback(key, e)
            raise
        if report is not None:
            Path(report).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(folder / "profile.ncu-rep", report)
        records = parse.parse_csv(csv_text)
        launch_record = parse.select(records, None if len(records) == 1 else run.kernel.name)
        result = ProfileResult(
            kernel=run.kernel.display_name, metrics=launch_record.metrics, device=device, flops=flops,
            peak=peak or _default_peak(run.kernel), grid=tuple(run.grid), block=tuple(run.block),
            shared_mem=run.shared_mem, key=key, label=label, live=True, date=_dt.date.today().isoformat(),
            commit=recorded.commit(), ncu_version=ncu.version(exe), raw_csv=csv_text,
            report_path=str(report) if report is not None else None, keep=metrics)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        print(" " * 100, end="\r", file=sys.stderr, flush=True)
    if key is not None and store.recording():
        store.save(key, result)
    return result
