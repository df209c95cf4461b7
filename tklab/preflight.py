"""Is this the workbook's Python? Asked before ``python -m tklab check`` runs anything.

A learner who types the README's ``python -m tklab check exercises/...`` in a terminal whose ``python`` is
the system's gets a verdict from an interpreter without the workbook's packages: the child fails on the
learner's first import (``from numba import cuda``) and the report blames a line the learner did not write.
So before checking, this asks whether the packages the check needs import here, and when they do not, says
which Python to use instead (the workbook's ``.venv``) and stops.

``import tklab`` itself needs numpy: importing this module (``tklab/__init__`` does it first) runs
``require_numpy()``, which turns a bare ``ModuleNotFoundError`` into the same advice.

Public API: ``missing(target) -> list[str]``, ``advice(target) -> str | None``, ``require_numpy()``.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from .paths import REPO  # noqa: E402 - os and pathlib only: safe before the check below

ALWAYS = ("numpy",)  # every check draws its inputs with numpy
FOR_PYTHON = ("numba",)  # a .py exercise is a numba.cuda kernel


def missing(target: str | None) -> list[str]:
    """The packages a check of ``target`` (a file or an exercise id) needs that this Python cannot import."""
    needed = list(ALWAYS)
    if target is not None and (target.endswith(".py") or target.startswith("ch01")):
        needed += FOR_PYTHON
    return [name for name in needed if importlib.util.find_spec(name) is None]


def _venv_python() -> Path | None:
    exe = REPO / ".venv" / "bin" / "python"
    return exe if exe.exists() else None


def advice(target: str | None) -> str | None:
    """What to run instead, when this Python lacks what the check needs; None when it has everything."""
    lacking = missing(target)
    if not lacking:
        return None
    venv = _venv_python()
    here = sys.executable or "this Python"
    line = f"python -m tklab check {target}" if target else "python -m tklab check <file>"
    if venv is not None and Path(sys.prefix).resolve() != (REPO / ".venv").resolve():
        fix = (f"use the workbook's Python, which has them:\n    .venv/bin/{line}\n"
               "  or first `source .venv/bin/activate` (JupyterLab's terminal: the same)")
    else:
        fix = "install the workbook's packages first: `make install` creates .venv with them"
    who = "tklab check" if target else "tklab"
    why = ("which the check needs (your file was not run, so nothing in it is at fault)" if target
           else "which tklab needs")
    return f"{who}: {here} cannot import {', '.join(lacking)}, {why};\n  {fix}"



def require_numpy() -> None:
    """Raise a ``ModuleNotFoundError`` that names the Python to use, when this one has no numpy."""
    if importlib.util.find_spec("numpy") is None:
        raise ModuleNotFoundError(advice(None) or "tklab needs numpy", name="numpy")


require_numpy()
