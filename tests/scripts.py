"""Load a script of bench/ (or another .py file outside a package) as a module, for the tests that call its functions.

bench/ is not a package (its scripts are run as ``python bench/x.py``), so these files cannot be imported by name:
each is executed from its path. Imported as ``from scripts import load_script`` (tests/ is on sys.path, as for
``answers``)."""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path
from types import ModuleType


def load_script(path: Path | str, name: str | None = None) -> ModuleType:
    """The module of the file at ``path``, named ``name`` (default: the file's stem).

    Executed once per (path, name) in a test process: a later call gets the same module object, so a test must not
    change it other than through ``monkeypatch``. The module is not entered in ``sys.modules``; a script that
    imports its neighbours needs their folder put on ``sys.path`` by the caller first."""
    path = Path(path)
    return _load(path, name or path.stem)


@functools.cache
def _load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None, f"no module at {path}"
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
