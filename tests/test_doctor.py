"""tklab doctor: advice that matches what it found, no machine paths, and the wrong-interpreter case."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tklab import doctor


def test_doctor_shows_no_machine_paths(capsys, monkeypatch):
    """A stored notebook output must not show the maintainer's paths: only ~ or this Python's environment."""
    monkeypatch.setattr("tklab.gpu.available", lambda: False)
    monkeypatch.setattr(doctor, "_simulator", lambda: "skipped in this test")
    doctor.main([])
    out = capsys.readouterr().out
    assert str(doctor.ROOT) not in out and sys.prefix not in out and str(Path.home()) not in out
    assert "cuobjdump at <this Python's environment>/" in out or "cuobjdump at /usr" in out
    assert doctor.shown(Path.home() / ".cache" / "x") == "~/.cache/x"


def test_doctor_advice_matches_what_it_found(capsys, monkeypatch):
    """Installed but no GPU: no advice to install it; not installed: the pip line."""
    monkeypatch.setattr("tklab.gpu.available", lambda: False)
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
