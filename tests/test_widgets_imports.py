"""The widgets import no module that imports them back, not even inside a function (issue 29): the ring model,
its explorer and the name the notebooks use; a profile and its picture. Each module imports cleanly in a fresh
interpreter, in either order, and ``tklab.widgets.pipeline_explorer`` stays the function."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAIRS = [("tklab.widgets.pipeline", "tklab.widgets.ring_explorer"),
         ("tklab.widgets.attention_view", "tklab.widgets.attention_explorer"),
         ("tklab.profile.result", "tklab.widgets.profile_view")]


def _name(p: Path) -> str:
    parts = list(p.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(p: Path, mods: set[str]) -> set[str]:
    """Every tklab module ``p`` imports, at import time or inside a function (relative or absolute)."""
    m = _name(p)
    pkg = m if p.name == "__init__.py" else m.rsplit(".", 1)[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(p.read_text())):
        if isinstance(node, ast.ImportFrom):
            here = pkg.split(".")[: len(pkg.split(".")) - node.level + 1] if node.level else []
            base = ".".join(here + ([node.module] if node.module else []))
            for a in node.names:
                out.add(f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return {t for t in out if t in mods and t != m}


def test_no_circle_through_widgets_even_inside_functions() -> None:
    files = {_name(p): p for d in ("widgets", "profile") for p in (ROOT / "tklab" / d).glob("*.py")}
    graph = {m: {t for t in _imports(p, set(files)) if not m.startswith(t + ".") and not t.startswith(m + ".")}
             for m, p in files.items() if not p.name == "__init__.py"}

    def reach(a: str, seen: set[str]) -> set[str]:
        for t in graph.get(a, ()):
            if t not in seen:
                seen.add(t)
                reach(t, seen)
        return seen

    circles = [m for m in graph if m in reach(m, set())]
    assert not circles, f"import circle through {circles}"
    assert "tklab.widgets.ring_explorer" in reach("tklab.widgets.pipeline", set())  # the check sees lazy imports


@pytest.mark.parametrize("first,second", [p for a, b in PAIRS for p in ((a, b), (b, a))])
def test_imports_in_a_fresh_interpreter_in_either_order(first: str, second: str) -> None:
    code = (f"import {first}, {second}\n"
            "import types, tklab.widgets as w\n"
            "assert isinstance(w.pipeline_explorer, types.FunctionType), w.pipeline_explorer\n"
            "from tklab.widgets.pipeline import pipeline_explorer\n"
            "assert pipeline_explorer is w.pipeline_explorer\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                       env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr[-2000:]
