"""Shared helpers for the probe scripts: build a kernel, load it with CuPy, describe the machine.

Probes compile with ``tklab.compile`` (the project's own NVRTC path) and launch with CuPy, so a probe
measures exactly what a learner's kernel would get. Each script is runnable on any GPU box from the
repository root: ``PYTHONPATH=$PWD python3 bench/probes/<script>.py``.
"""

from __future__ import annotations

import datetime
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tklab import recorded  # noqa: E402


def build_cubin(source: str, name: str, arch: str = "sm_90a") -> bytes:
    """Compile ``source`` with tklab.compile and return the cubin (bytes)."""
    import tklab

    return tklab.compile(source, arch=arch, name=name).cubin


def load(cubin: bytes) -> Any:
    """A ``cupy.RawModule`` made from a cubin (written to a temporary file: CuPy loads paths)."""
    import cupy

    fd, path = tempfile.mkstemp(suffix=".cubin")
    with os.fdopen(fd, "wb") as f:
        f.write(cubin)
    return cupy.RawModule(path=path)


def _sh(cmd: list[str]) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def machine(commit: str | None = None) -> dict[str, str]:
    """Device name, driver, CUDA runtime, commit and date: the header of every committed table."""
    smi = _sh(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"]).splitlines()
    name, driver = (smi[0].split(", ") + ["?", "?"])[:2] if smi else ("?", "?")
    ncu = _sh(["ncu", "--version"]).splitlines()
    return {
        "device": name,
        "driver": driver,
        "ncu": ncu[-1] if ncu else "",
        "commit": commit or recorded.commit(),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    }
