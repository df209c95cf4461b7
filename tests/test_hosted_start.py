"""Chapter 00's first code cell: the workbook installed where only pip is there (a hosted notebook).

The cell's own source, read from the notebook, runs in a fresh virtual environment (``--system-site-packages``
over this Python's base, so pip is there without installing it): it clones the workbook (here from this
checkout, ``TKLAB_GIT``), installs it with ``pip install -e`` and imports it in the same process; run again
it does nothing; inside a checkout it installs that checkout and clones nothing; where tklab is installed
(the workbook's .venv, nbval in CI) it does nothing at all.

What is NOT exercised: the dependencies' download. The install runs with ``TKLAB_PIP_ARGS=--no-deps``, since
fetching NVRTC, numba and the rest from PyPI takes minutes on CI's two cores; pip's resolution of
``pyproject.toml`` itself is exercised (the editable build runs).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _cell() -> str:
    cells = json.loads((ROOT / "notebooks" / "00_the_machine.ipynb").read_text())["cells"]
    starts = [i for i, c in enumerate(cells) if "hosted-start" in c.get("metadata", {}).get("tags", [])]
    assert starts == [1], "one hosted-start cell, right after the title"
    return "".join(cells[1]["source"])


def _env(**extra: str) -> dict[str, str]:
    """A learner's environment: no PYTHONPATH pointing at this checkout, no user site, no GPU tools."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "TKLAB_PIP_ARGS")}
    env.update(PYTHONNOUSERSITE="1", PIP_DISABLE_PIP_VERSION_CHECK="1", **extra)
    return env


def _run(python: Path | str, code: str, cwd: Path, **env: str) -> str:
    out = subprocess.run([str(python), "-c", code], cwd=cwd, env=_env(**env), capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def test_where_tklab_is_installed_the_cell_does_nothing(tmp_path: Path) -> None:
    env = {"PYTHONPATH": str(ROOT)} if "PYTHONPATH" in os.environ else {}
    out = _run(sys.executable, _cell(), tmp_path, TKLAB_GIT=str(tmp_path / "no-such-repository"), **env)
    assert out == "tklab is installed: nothing to do here\n"
    assert list(tmp_path.iterdir()) == []  # nothing cloned, nothing written


def _fresh_venv(where: Path) -> Path:
    base = getattr(sys, "_base_executable", sys.executable)
    has_pip = subprocess.run([base, "-m", "pip", "--version"], capture_output=True).returncode == 0
    args = ["--system-site-packages", "--without-pip"] if has_pip else []
    subprocess.run([base, "-m", "venv", *args, str(where)], check=True, timeout=300)
    python = where / "bin" / "python"
    probe = subprocess.run([str(python), "-c", "import tklab"], cwd=where, env=_env(), capture_output=True)
    if probe.returncode == 0:
        pytest.skip("this Python's base already has tklab installed: no fresh environment to test in")
    return python


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists() or sys.platform == "win32",
                    reason="needs git and a git checkout to clone from (and a POSIX venv)")
def test_in_a_fresh_environment_the_cell_clones_installs_and_imports(tmp_path: Path) -> None:
    python = _fresh_venv(tmp_path / "venv")
    work = tmp_path / "content"  # a hosted notebook's folder
    work.mkdir()
    cell = _cell()
    out = _run(python, cell + "\nimport tklab\nprint('imported', tklab.__file__)", work,
               TKLAB_GIT=str(ROOT), TKLAB_PIP_ARGS="--no-deps")
    clone = (work / "tklab").resolve()
    assert f"tklab installed from {clone}" in out and f"imported {clone / 'tklab' / '__init__.py'}" in out
    # a new process (a restarted kernel) finds the editable install
    assert _run(python, "import tklab; print(tklab.__file__)", tmp_path).strip() == str(clone / "tklab" / "__init__.py")
    # run again: nothing to do, nothing cloned twice
    assert _run(python, cell, work, TKLAB_GIT=str(tmp_path / "no-such-repository")) == \
        "tklab is installed: nothing to do here\n"
    assert sorted(p.name for p in work.iterdir()) == ["tklab"]
    # inside a checkout without tklab installed: that checkout is installed, nothing cloned
    subprocess.run([str(python), "-m", "pip", "uninstall", "-q", "-y", "tklab"], env=_env(), check=True, timeout=120)
    out = _run(python, cell, clone / "notebooks", TKLAB_GIT=str(tmp_path / "no-such-repository"),
               TKLAB_PIP_ARGS="--no-deps")
    assert f"tklab installed from {clone}" in out
    assert sorted(p.name for p in work.iterdir()) == ["tklab"] and not (clone / "notebooks" / "tklab").exists()
