"""The names notebooks and the README use resolve, wherever the modules behind them live (no execution)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import tklab

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def _code(nb: Path) -> str:
    return "\n".join("".join(c["source"]) for c in json.loads(nb.read_text())["cells"] if c["cell_type"] == "code")


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.stem)
def test_what_a_notebook_imports_from_tklab_exists(nb: Path) -> None:
    code = _code(nb)
    for m in re.finditer(r"^\s*from (tklab(?:\.\w+)*) import ([\w, ]+)", code, re.M):
        for name in (n.split(" as ")[0].strip() for n in m.group(2).split(",")):
            module = __import__(m.group(1), fromlist=[name])  # what `from ... import name` does
            assert getattr(module, name, None) is not None, f"{nb.name}: from {m.group(1)} import {name}"
    from tklab import course

    for name in set(re.findall(r"\bcourse\.(\w+)", code)):
        assert hasattr(course, name), f"{nb.name}: course.{name}"


def test_a_module_by_its_short_name_is_the_module_at_its_home() -> None:
    from tklab.grading import specs
    from tklab.run import gpu

    assert tklab.gpu is gpu and tklab.specs is specs  # one object: state and monkeypatching are shared
    assert callable(tklab.check) and callable(tklab.bench) and callable(tklab.compile)  # functions, not modules
    with pytest.raises(AttributeError):
        tklab.no_such_module  # noqa: B018


def test_no_module_imports_itself_back_at_import_time() -> None:
    """The grouping (build/, run/, models/, course/, grading/ ...) has no import circle among modules."""
    import ast

    def name(p: Path) -> str:
        parts = list(p.relative_to(ROOT).with_suffix("").parts)
        return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)

    mods = {name(p): p for p in (ROOT / "tklab").rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for m, p in mods.items():
        pkg = m if p.name == "__init__.py" else m.rsplit(".", 1)[0]
        for node in ast.parse(p.read_text()).body:  # import time: top-level statements only
            if isinstance(node, ast.ImportFrom) and node.level:
                parts = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
                for a in node.names:
                    target = f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base
                    if not target.startswith(m + "."):  # a package importing its own members is not a circle
                        graph[m].add(target)
    state: dict[str, int] = {}

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for t in graph.get(m, ()):
            if state.get(t) == 1 and not m.startswith(t + "."):
                raise AssertionError(" -> ".join(path[path.index(t):] + [m, t]) if t in path else f"{m} -> {t}")
            if t not in state:
                visit(t, [*path, m])
        state[m] = 2

    for m in mods:
        if m not in state:
            visit(m, [])
