"""docs/ARCHITECTURE.md's map of the package is the code's: every module of ``tklab/`` is in its module table and every
entry there exists; each place stands on the floor its layer table gives, and every import (at import time or inside
a function) runs down the floors or stays in its own place; no two modules import each other in a loop."""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "tklab"
DOC = ROOT / "docs" / "ARCHITECTURE.md"


def _section(title: str) -> str:
    text = DOC.read_text()
    start = text.index(f"### {title}\n")
    end = text.find("\n#", start + 4)
    return text[start:end if end >= 0 else len(text)]


def _rows(section: str) -> list[list[str]]:
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in section.splitlines()
            if line.startswith("|") and not set(line) <= set("|-: ")]
    return rows[1:]  # the header


def _names(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


def layers() -> dict[str, int]:
    """place (a folder ``run/`` or a top-level file ``paths.py``) → floor."""
    return {name: int(floor) for floor, places, _ in _rows(_section("Layers")) for name in _names(places)}


def documented() -> set[str]:
    """The module table's entries, as paths relative to tklab/ (a folder entry ends with /)."""
    out, place = set(), ""
    for cells in _rows(_section("Modules")):
        place = cells[0].strip("`") if cells[0] else place
        prefix = "" if place == "(top)" else place
        out |= {prefix + n for n in _names(cells[1])}
    return out


def modules() -> dict[str, Path]:
    """Dotted module name → file, for every .py of the package."""
    out = {}
    for p in PACKAGE.rglob("*.py"):
        if "__pycache__" in p.parts:
            continue
        parts = list(p.relative_to(ROOT).with_suffix("").parts)
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    return out


def place_of(path: Path, floors: dict[str, int]) -> str:
    rel = path.relative_to(PACKAGE).as_posix()
    top = rel.split("/")[0]
    return top + "/" if "/" in rel else top


def imports(mods: dict[str, Path]) -> dict[str, set[str]]:
    """Module → the package's modules it imports anywhere in its text (a name imported from a package resolves to
    its submodule when there is one)."""
    out: dict[str, set[str]] = defaultdict(set)
    for name, path in mods.items():
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom):
                base = ".".join(package[:len(package) - node.level + 1] + ([node.module] if node.module else [])) \
                    if node.level else (node.module or "")
                targets = [f"{base}.{a.name}" for a in node.names] + [base]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            for t in targets:
                while t and t not in mods:
                    t = t.rpartition(".")[0]
                if t and t != name:
                    out[name].add(t)
                    break
    return out


def test_every_module_is_on_the_map_and_every_entry_exists() -> None:
    entries = documented()
    missing = []
    for path in modules().values():
        rel = path.relative_to(PACKAGE).as_posix()
        if rel not in entries and not any(e.endswith("/") and rel.startswith(e) for e in entries):
            missing.append(rel)
    assert not missing, f"modules docs/ARCHITECTURE.md's module table does not name: {missing}"
    gone = [e for e in entries if e.endswith(".py") and not (PACKAGE / e).is_file()]
    gone += [e for e in entries if e.endswith("/") and not (PACKAGE / e).is_dir()]
    assert not gone, f"entries of docs/ARCHITECTURE.md's module table that are not in tklab/: {gone}"


def test_every_place_has_a_floor() -> None:
    floors = layers()
    places = {place_of(p, floors) for p in modules().values()}
    assert places == set(floors), (f"places without a floor: {sorted(places - set(floors))}; "
                                   f"floors of places that are gone: {sorted(set(floors) - places)}")


def test_every_import_runs_down_the_floors() -> None:
    floors, mods = layers(), modules()
    up = []
    for name, targets in imports(mods).items():
        here = place_of(mods[name], floors)
        for t in targets:
            there = place_of(mods[t], floors)
            if there != here and floors[there] >= floors[here]:
                up.append(f"{name} (floor {floors[here]}) imports {t} (floor {floors[there]})")
    assert not up, "imports that do not run down the layers of docs/ARCHITECTURE.md:\n" + "\n".join(sorted(up))


def test_no_circle() -> None:
    graph = imports(modules())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    circles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                circles.append(sorted(comp))

    for v in list(modules()):
        if v not in index:
            visit(v)
    assert not circles, f"modules that import each other in a loop: {circles}"


@pytest.mark.parametrize("bad", ["grading", "widgets", "course"])
def test_the_checks_above_catch_an_upward_import(bad: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The test can fail: run/ importing a higher place is reported."""
    mods = modules()
    real = imports(mods)
    target = next(m for m in mods if m.startswith(f"tklab.{bad}"))
    monkeypatch.setattr(__import__(__name__), "imports", lambda m: {**real, "tklab.run.gpu": {target}})
    with pytest.raises(AssertionError, match="imports that do not run down"):
        test_every_import_runs_down_the_floors()
