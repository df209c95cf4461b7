"""tklab doctor: advice that matches what it found, no machine paths, and the wrong-interpreter case."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tklab import doctor
from tklab.profile import ProfileUnavailable


@pytest.mark.nvrtc  # it reads the disassembler's line
def test_doctor_shows_no_machine_paths(capsys, monkeypatch):
    """A stored notebook output must not show the maintainer's paths: only ~ or this Python's environment."""
    monkeypatch.setattr("tklab.run.gpu.available", lambda: False)
    monkeypatch.setattr(doctor, "_simulator", lambda: "skipped in this test")
    doctor.main([])
    out = capsys.readouterr().out
    assert str(doctor.ROOT) not in out and sys.prefix not in out and str(Path.home()) not in out
    assert "cuobjdump at <this Python's environment>/" in out or "cuobjdump at /usr" in out
    assert doctor.shown(Path.home() / ".cache" / "x") == "~/.cache/x"


def test_doctor_advice_matches_what_it_found(capsys, monkeypatch):
    """Installed but no GPU: no advice to install it; not installed: the pip line."""
    monkeypatch.setattr("tklab.run.gpu.available", lambda: False)
    fake = type(sys)("cupy")
    fake.__version__, fake.is_available = "99.0", lambda: False
    monkeypatch.setitem(sys.modules, "cupy", fake)
    check = {c.name: c for c in doctor.checks()}["CuPy"]
    assert not check.ok and "installed but sees no GPU" in check.detail and "pip install" not in check.cost
    monkeypatch.setitem(sys.modules, "cupy", None)  # import fails
    check = {c.name: c for c in doctor.checks()}["CuPy"]
    assert not check.ok and "pip install cupy-cuda13x" in check.cost


def test_doctor_from_a_python_without_the_packages_points_at_the_venv():
    """`python3 -m tklab doctor` from the interpreter the venv was made from: the NOTE names `make doctor`,
    and no pip advice is given for packages the .venv has."""
    if not (doctor.ROOT / ".venv" / "bin" / "python").exists():
        pytest.skip("needs the workbook's .venv")
    base = Path(sys.base_prefix) / "bin" / "python3"
    if sys.prefix == sys.base_prefix or not base.exists():
        pytest.skip("this test runs from the .venv, against the Python it was made from")
    if subprocess.run([str(base), "-c", "import numpy"], capture_output=True, timeout=60).returncode:
        pytest.skip("the base Python cannot even import tklab (no numpy)")
    out = subprocess.run([str(base), "-m", "tklab", "doctor"], cwd=doctor.ROOT, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 1, out.stdout + out.stderr
    assert out.stdout.startswith("NOTE: this is") and "`make doctor`" in out.stdout
    assert "INCOMPLETE" in out.stdout and "wrong Python" in out.stdout
    assert "pip install nvidia-cuda-nvrtc" not in out.stdout  # the .venv has NVRTC: no advice to install it


FAKE_NCU = """#!/bin/sh
if [ "$1" = "--version" ]; then
  echo "NVIDIA (R) Nsight Compute Command Line Profiler"
  echo "Version 2031.4.1.0 (build 1) (public-release)"
  exit 0
fi
echo "the doctor only asks for the version" >&2
exit 2
"""


def _nsight() -> doctor.Check:
    return doctor._attempt("Nsight Compute", "(the default cost)", doctor._ncu)  # the check that checks() runs


def test_doctor_finds_ncu_and_its_version(tmp_path, monkeypatch, capsys):
    """ncu on PATH: named with its version; without a GPU it cannot profile, and says profiles are recorded."""
    ncu = tmp_path / "bin" / "ncu"
    ncu.parent.mkdir()
    ncu.write_text(FAKE_NCU)
    ncu.chmod(0o755)
    monkeypatch.delenv("TKLAB_NCU", raising=False)
    monkeypatch.setenv("PATH", f"{ncu.parent}:{os.environ['PATH']}")
    monkeypatch.setattr("tklab.run.gpu.available", lambda: False)
    check = _nsight()
    assert not check.ok and "Nsight Compute 2031.4.1.0" in check.detail and "no GPU to profile" in check.detail
    assert "recorded on an H200" in check.cost and "nothing more than the GPU line" in check.cost

    # With a GPU, the counters are read by profiling a kernel: success, a refusal, another failure.
    monkeypatch.setattr("tklab.run.gpu.available", lambda: True)
    monkeypatch.setattr(doctor, "_profile_probe", lambda: "read the GPU's counters for a test kernel (3.0 µs)")
    check = _nsight()
    assert check.ok and check.detail.startswith("Nsight Compute 2031.4.1.0 at ") and "(3.0 µs)" in check.detail

    def refused() -> str:
        raise ProfileUnavailable("permission", "ERR_NVGPUCTRPERM")

    monkeypatch.setattr(doctor, "_profile_probe", refused)
    check = _nsight()
    assert not check.ok and "may not read the GPU's performance counters" in check.detail
    assert "NVreg_RestrictProfilingToAdminUsers=0" in check.cost and "recorded on an H200" in check.cost

    def broken() -> str:
        raise ProfileUnavailable("failed", "ncu failed (exit 9). Its last lines:\n...")

    monkeypatch.setattr(doctor, "_profile_probe", broken)
    check = _nsight()
    assert not check.ok and "profiling a test kernel failed: ncu failed (exit 9)" in check.detail

    monkeypatch.setattr(doctor, "_simulator", lambda: "skipped in this test")
    monkeypatch.setattr(doctor, "_profile_probe", lambda: "read the GPU's counters for a test kernel")
    doctor.main([])
    assert "Profiles (tklab.profile): measured here" in capsys.readouterr().out


def test_doctor_without_ncu_says_where_to_get_it(tmp_path, monkeypatch):
    monkeypatch.setenv("TKLAB_NCU", str(tmp_path / "no-such-ncu"))
    monkeypatch.setattr("tklab.run.gpu.available", lambda: False)
    check = _nsight()
    assert not check.ok and "TKLAB_NCU=" in check.detail and "not an executable file" in check.detail
    assert "recorded on an H200" in check.cost and "nothing more than the GPU line" in check.cost
    monkeypatch.setattr("tklab.run.gpu.available", lambda: True)
    assert "tklab.profile cannot measure your kernels" in _nsight().cost


@pytest.mark.gpu
def test_doctor_reads_the_counters_on_a_gpu_with_ncu():
    """On a GPU with ncu: the check profiles its test kernel for real (skipped where ncu is missing)."""
    from tklab.profile import ncu

    if ncu.find_ncu() is None:
        pytest.skip(ncu.missing_message())
    check = doctor._attempt("Nsight Compute", "", doctor._ncu)
    if not check.ok and "ERR_NVGPUCTRPERM" in check.detail:
        pytest.skip(check.detail)
    assert check.ok, check.detail
    assert "read the GPU's counters for a test kernel (" in check.detail and " µs)" in check.detail
