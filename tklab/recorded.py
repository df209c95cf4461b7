"""Measured results that notebooks show on machines without a GPU.

A lesson's GPU cell calls ``recorded.measure("ch02.tiled", fn)``. On a GPU it runs ``fn`` (which
returns a dict of numbers, or a ``BenchResult``), shows the live numbers, and stores them with the
device, date and commit in ``bench/results/recorded.json`` (``TKLAB_RECORD_FILE`` overrides; nothing is
written unless ``TKLAB_RECORD=1``, so a learner's runs never touch the repository). Without a GPU it
shows the stored numbers, clearly labelled as recorded elsewhere, or says that none exist yet.

Public API: ``measure(key, fn) -> Recorded``, ``load(key)``, ``all_records() -> dict[str, Recorded]``,
``Recorded``, ``commit()`` (the commit a measurement belongs to: every report and bench script uses it),
``nvrtc()`` (the NVRTC that compiled what was measured: its ptxas decides a kernel's instruction schedule),
``newest(paths, date)`` (the newest of several result files by the date written inside each, never by name).
"""

from __future__ import annotations

import datetime as _dt
import html
import json
import os
import subprocess
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .paths import REPO
from .run import gpu

_DEFAULT = REPO / "bench" / "results" / "recorded.json"


def _file() -> Path:
    return Path(os.environ.get("TKLAB_RECORD_FILE", _DEFAULT))


def commit() -> str:
    """The commit being measured: ``$TKLAB_COMMIT`` or ``$GIT_COMMIT`` when set (``make gpu-check`` sets the
    first; a tree copied to a GPU machine may carry no .git, or another commit's), else git's short HEAD."""
    for var in ("TKLAB_COMMIT", "GIT_COMMIT"):
        if os.environ.get(var):
            return os.environ[var]
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                             cwd=Path(__file__).parent, timeout=10)
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"



def newest(paths: Iterable[Path], date: Callable[[Path], str | None]) -> Path | None:
    """The newest of ``paths`` by the date written inside each: ``date(path)`` reads it (an ISO date and time, as
    every bench report and record writes it; ``None``: the file is not a candidate, e.g. it lacks what the caller
    needs), ties go to the later file name; ``None`` when no file is a candidate. Never by file name alone: a
    result's name ends in its commit's hash, which sorts in no order of time."""
    dated = [(d, path.name, path) for path in paths if (d := date(path)) is not None]
    return max(dated, key=lambda x: (x[0], x[1]))[2] if dated else None


def nvrtc() -> str:
    """The NVRTC that compiles the kernels being measured, for every report beside ``commit()``: NVRTC's own
    major.minor and the exact version of the ``nvidia-cuda-nvrtc`` wheel where one is installed (e.g. ``"13.5
    (nvidia-cuda-nvrtc 13.5.37)"``). ptxas comes inside NVRTC and decides the SASS's instruction schedule (where
    chapter 10's wait for P V lands: tests/test_overlap.py), so a timing belongs to one NVRTC as to one commit.
    ``"none"`` where NVRTC cannot be loaded (the reason: ``locate.nvrtc_missing()``)."""
    from importlib.metadata import PackageNotFoundError, version

    from .toolchain import locate

    try:
        major, minor = locate.nvrtc_version()
    except locate.ToolchainError:
        return "none"
    try:
        return f"{major}.{minor} (nvidia-cuda-nvrtc {version('nvidia-cuda-nvrtc')})"
    except PackageNotFoundError:
        return f"{major}.{minor} (not from the nvidia-cuda-nvrtc wheel)"


@dataclass
class Recorded:
    """Numbers for one measurement, and where they came from."""

    key: str
    values: dict[str, Any] | None
    live: bool
    device: str = ""
    date: str = ""
    commit: str = ""
    nvrtc: str = ""  # recorded since NVRTC versions are reported (older entries have none)

    def __getitem__(self, name: str) -> Any:
        if self.values is None:
            raise KeyError(f"no result recorded for {self.key!r} yet (run the notebook on a GPU)")
        return self.values[name]

    def get(self, name: str, default: Any = None) -> Any:
        return default if self.values is None else self.values.get(name, default)

    @property
    def origin(self) -> str:
        if self.values is None:
            return "no GPU here and no recorded result yet"
        if self.live:
            return f"measured now on {self.device}"
        built = f", NVRTC {self.nvrtc}" if self.nvrtc else ""
        return f"recorded on {self.device}, {self.date}, commit {self.commit}{built} (this machine has no GPU)"

    def __str__(self) -> str:
        if self.values is None:
            return f"{self.key}: {self.origin}"
        body = ", ".join(f"{k}={_fmt(v)}" for k, v in self.values.items())
        return f"{self.key}: {body}  [{self.origin}]"

    __repr__ = __str__

    def _repr_html_(self) -> str:
        return f"<code>{html.escape(str(self))}</code>"


def _fmt(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def _as_values(result: Any) -> dict[str, Any]:
    if isinstance(result, dict):
        return result
    if hasattr(result, "ms"):  # BenchResult
        out = {"ms": result.ms}
        for name in ("tflops", "gbps"):
            if getattr(result, name, None) is not None:
                out[name] = getattr(result, name)
        out.update({k: v for k, v in getattr(result, "fractions", {}).items()})
        return out
    raise TypeError(f"measure(): fn must return a dict of numbers or a BenchResult, not {type(result).__name__}")


def _read() -> dict[str, Any]:
    try:
        return json.loads(_file().read_text())
    except (OSError, ValueError):
        return {}


def all_records() -> dict[str, Recorded]:
    """Every recorded result, by key (what the course's results table is built from)."""
    return {key: load(key) for key in sorted(_read())}


def load(key: str) -> Recorded:
    entry = _read().get(key)
    if entry is None:
        return Recorded(key, None, live=False)
    return Recorded(key, entry["values"], live=False, device=entry.get("device", "?"),
                    date=entry.get("date", "?"), commit=entry.get("commit", "?"), nvrtc=entry.get("nvrtc", ""))


def measure(key: str, fn: Callable[[], Any]) -> Recorded:
    """Run ``fn`` on a GPU (and record it when ``TKLAB_RECORD=1``), or show the recorded result."""
    if not gpu.available():
        return load(key)
    values = _as_values(fn())
    rec = Recorded(key, values, live=True, device=gpu.name(), date=_dt.date.today().isoformat(),
                   commit=commit(), nvrtc=nvrtc())
    if os.environ.get("TKLAB_RECORD", "") in ("1", "true", "yes"):
        data = _read()
        data[key] = {"values": values, "device": rec.device, "date": rec.date, "commit": rec.commit,
                     "nvrtc": rec.nvrtc}
        path = _file()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(dict(sorted(data.items())), indent=1, default=float) + "\n")
    return rec


def comparison(kernel_ms: float, library_ms: float, flops: float, *, label: str,
               ceiling_tflops: float | None, ceiling: str) -> dict[str, Any]:
    """The record ``compare`` stores: rates from the two median times, and the ceiling they are read against."""
    if kernel_ms <= 0 or library_ms <= 0:
        raise ValueError("times must be positive")
    out: dict[str, Any] = {
        "label": label,
        "tflops": flops / (kernel_ms * 1e-3) / 1e12,
        "ms": kernel_ms,
        "library_tflops": flops / (library_ms * 1e-3) / 1e12,
        "library_ms": library_ms,
        "ceiling": ceiling,
    }
    if ceiling_tflops:
        out["ceiling_tflops"] = ceiling_tflops
    return out
