"""Issue 31.1 and 31.11: `python -m tklab check` run by the wrong Python, and a sandbox tool that vanished.

The check must not blame the learner's file for a package the interpreter lacks: it says which Python to use
and stops before running anything. A bwrap found once and removed later is probed again, not used blindly.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tklab import preflight
from tklab.grading import sandbox

ROOT = Path(__file__).resolve().parent.parent


def test_check_by_a_python_without_numba_names_the_python_not_the_file(monkeypatch, capsys) -> None:
    from tklab import __main__ as cli

    real = preflight.importlib.util.find_spec
    monkeypatch.setattr(preflight.importlib.util, "find_spec", lambda n, *a: None if n == "numba" else real(n, *a))
    monkeypatch.setattr(preflight, "_venv_python", lambda: ROOT / ".venv" / "bin" / "python")
    monkeypatch.setattr(preflight.sys, "prefix", "/usr")
    ran = []
    monkeypatch.setattr(cli.importlib, "import_module", lambda name: ran.append(name))
    assert cli.main(["check", "exercises/ch01_naive_matmul.py"]) == 2
    err = capsys.readouterr().err
    assert "cannot import numba" in err and "your file was not run" in err
    assert ".venv/bin/python -m tklab check exercises/ch01_naive_matmul.py" in err
    assert ran == [], "nothing may run the learner's file from this Python"


def test_a_cu_exercise_needs_no_numba(monkeypatch) -> None:
    real = preflight.importlib.util.find_spec
    monkeypatch.setattr(preflight.importlib.util, "find_spec", lambda n, *a: None if n == "numba" else real(n, *a))
    assert preflight.missing("exercises/ch02_smem_tiling.cu") == []
    assert preflight.missing("ch01_naive_matmul") == ["numba"]


def _foreign_python() -> str | None:
    for candidate in ("/usr/bin/python3", shutil.which("python3")):
        if candidate and Path(candidate).exists() and Path(candidate).resolve() != Path(sys.executable).resolve():
            return candidate
    return None


@pytest.mark.skipif(_foreign_python() is None, reason="no other Python here")
def test_a_foreign_python_gets_advice_not_a_traceback_into_the_learners_file() -> None:
    """The README's line, typed into a terminal whose python3 lacks the workbook's packages."""
    other = _foreign_python()
    probe = subprocess.run([other, "-c", "import numpy"], capture_output=True)
    if probe.returncode == 0:
        pytest.skip("this machine's python3 has numpy: not a foreign Python")
    out = subprocess.run([other, "-m", "tklab", "check", "exercises/ch01_naive_matmul.py"], cwd=ROOT,
                         capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode != 0
    assert "cannot import numpy" in out.stderr and "ch01_naive_matmul.py:" not in out.stderr


def test_a_bwrap_that_disappeared_is_probed_again(monkeypatch, tmp_path) -> None:
    exe = tmp_path / "bwrap"
    exe.write_text("#!/bin/sh\nexit 0\n")
    exe.chmod(0o755)
    monkeypatch.setattr(sandbox.shutil, "which", lambda name: str(exe) if exe.exists() else None)
    monkeypatch.setattr(sandbox, "_probe", lambda argv, ids: True)
    sandbox._bwrap_works.cache_clear()
    try:
        assert sandbox._bwrap_works() == str(exe)
        exe.unlink()  # removed mid-session
        assert sandbox._bwrap_works() is None
        assert sandbox.isolation().level == "process"
    finally:
        sandbox._bwrap_works.cache_clear()


def test_preflight_runs_first_and_quietly() -> None:
    """tklab/__init__ imports it before anything that needs numpy; with numpy present it says nothing."""
    src = (ROOT / "tklab" / "__init__.py").read_text()
    package_imports = [ln for ln in src.splitlines() if ln.startswith("from .")]
    assert package_imports and package_imports[0].startswith("from . import preflight"), package_imports[:2]
    assert preflight.advice("exercises/ch02_smem_tiling.cu") is None
