"""What the sandboxed child uses to load a learner's code, kept apart so every child-side runner can share it
without importing the child program: its progress lines (``stage``) and importing a learner's Python file.

Public API: ``stage(text)``, ``current_stage()``, ``import_file(path, name)``.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from .channel import STAGE

_current = "starting"


def stage(text: str) -> None:
    """Say what the child does now (a ``STAGE`` line on stdout): a hang or a crash is reported with it."""
    global _current
    _current = text
    print(f"{STAGE}{text}", flush=True)


def current_stage() -> str:
    return _current


def import_file(path: Path, name: str) -> Any:
    """The learner's Python file as a module (it runs: only ever in the sandboxed child)."""
    mod_spec = importlib.util.spec_from_file_location(name, path)
    if mod_spec is None or mod_spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(module)
    return module
