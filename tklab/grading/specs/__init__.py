"""The registry: every exercise and drill, found by id. Nothing else lists exercises.

An exercise is a folder ``solutions/<id>/`` (the folder's name is its id) holding its solution ``<id>.cu`` (or
``.py``), ``spec.py`` (``SPEC = Exercise(...)``, written with ``tklab.grading.spec_kit`` and its kit modules),
``hints.toml`` and ``planted.toml``; the registry discovers the folders that hold a ``spec.py``. A drill is one
entry of ``drills.py`` (``DRILLS``). Tests, the index (``notebooks/README.md``, ``python -m tklab exercises
--list``), the grader and the bench scripts all read it. Looking one up loads that spec only (from its file, as the
module ``tklab_exercise_<id>``, once).

The folder of exercises is ``solutions/`` beside the package, or ``$TKLAB_SOLUTIONS`` where that is set (a test's
throwaway exercises; the sandboxed notebook kernel's copy of one spec). A sandboxed run cannot see ``solutions/``:
the runner copies the exercise's ``spec.py`` into the run's folder, and the child loads it with ``from_file``.

Public API: ``all_ids()``, ``get(id)``, ``find(name)``, ``from_file(path, id)``, ``spec_file(id)``,
``folder(id)``, ``module(id)``, ``root()``, ``RENAMED``, ``Exercise``.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

from ...paths import REPO
from ..spec_kit import Exercise

#: The file in an exercise's folder that holds its spec.
SPEC_FILE = "spec.py"
#: Environment variable naming another folder of exercises (tests; the notebook kernel's copy of one spec).
ROOT_VARIABLE = "TKLAB_SOLUTIONS"

_loaded: dict[Path, tuple[ModuleType, Exercise]] = {}


def root() -> Path:
    """The folder the exercises' folders are in: ``$TKLAB_SOLUTIONS`` if set and not empty, else ``solutions/``."""
    configured = os.environ.get(ROOT_VARIABLE, "").strip()
    return Path(configured).expanduser().resolve() if configured else REPO / "solutions"


def _folder_ids() -> list[str]:
    base = root()
    return sorted(p.parent.name for p in base.glob(f"*/{SPEC_FILE}")) if base.is_dir() else []


def _drills() -> dict[str, Exercise]:
    from .drills import DRILLS

    return DRILLS


def folder(exercise_id: str) -> Path:
    """The folder of an exercise (``<id>@<tag>``: its base's), whether or not it exists."""
    return root() / exercise_id.split("@", 1)[0]


def spec_file(exercise_id: str) -> Path | None:
    """The ``spec.py`` an exercise is loaded from (a build ``<id>@<tag>``: its base's); None for a drill."""
    base = exercise_id.split("@", 1)[0]
    if base in _drills():
        return None
    path = folder(base) / SPEC_FILE
    return path if path.is_file() else None


def _shown(path: Path) -> str:
    """A path as a spec's ``solution`` holds it: relative to the repository when inside it."""
    try:
        return path.resolve().relative_to(REPO).as_posix()
    except ValueError:
        return path.resolve().as_posix()


def _load(path: Path, exercise_id: str) -> tuple[ModuleType, Exercise]:
    """The module and the ``SPEC`` of one spec file, loaded once per file; the spec's id and chapter are its
    folder's, and its ``solution`` (a file name beside the spec) becomes that file's path."""
    path = path.resolve()
    if path in _loaded:
        return _loaded[path]
    name = f"tklab_exercise_{exercise_id}"
    found = importlib.util.spec_from_file_location(name, path)
    if found is None or found.loader is None:
        raise ImportError(f"cannot load the spec {path}")
    module = importlib.util.module_from_spec(found)
    sys.modules[name] = module  # before it runs: its dataclasses look their module up by name
    try:
        found.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    spec = getattr(module, "SPEC", None)
    if not isinstance(spec, Exercise):
        raise TypeError(f"{path} defines no SPEC = Exercise(...)")
    if spec.id != exercise_id:
        raise ValueError(f"{path}: its SPEC says id={spec.id!r}, its folder {exercise_id!r}")
    solution = path.parent / spec.solution
    spec = dataclasses.replace(spec, solution=_shown(solution),
                               builds=tuple(dataclasses.replace(b, solution=_shown(solution)) for b in spec.builds))
    _loaded[path] = (module, spec)
    return module, spec


def _build(base: Exercise, exercise_id: str) -> Exercise:
    other = next((b for b in base.builds if b.id == exercise_id), None)
    if other is None:
        raise KeyError(f"{base.id} has no build {exercise_id!r}; its builds: "
                       f"{', '.join(b.id for b in base.builds) or 'none'}")
    return other


def from_file(path: str | Path, exercise_id: str) -> Exercise:
    """The spec of ``exercise_id`` from the spec file ``path`` (a sandboxed run's copy of it); ``<id>@<tag>``: one of
    its other ``builds``."""
    base_id = exercise_id.split("@", 1)[0]
    base = _load(Path(path), base_id)[1]
    return _build(base, exercise_id) if "@" in exercise_id else base


def all_ids() -> list[str]:
    """Ids of every exercise and drill, in chapter order (a chapter's exercises before its drills)."""
    drills = _drills()

    def design(i: str) -> bool:  # a chapter's design and debugging exercises after its own exercise
        return i not in drills and (get(i).design or get(i).kind == "debug")

    return sorted([*_folder_ids(), *drills],
                  key=lambda i: (i[:4], i in drills, design(i) or "_challenge_" in i, i))  # a challenge last


def get(exercise_id: str) -> Exercise:
    """The spec of one exercise by exact id (``<id>@<tag>``: one of its other ``builds``)."""
    if "@" in exercise_id:
        return _build(get(exercise_id.split("@", 1)[0]), exercise_id)
    drills = _drills()
    if exercise_id in drills:
        return drills[exercise_id]
    path = spec_file(exercise_id)
    if path is None:
        raise KeyError(f"no exercise {exercise_id!r}; exercises: {', '.join(all_ids())}")
    return _load(path, exercise_id)[1]


def module(exercise_id: str) -> ModuleType:
    """The loaded module of an exercise's spec (its helpers, for tests and benches)."""
    path = spec_file(exercise_id)
    if path is None:
        raise KeyError(f"no exercise folder {exercise_id!r} (a drill's spec is an entry of specs/drills.py)")
    return _load(path, exercise_id.split("@", 1)[0])[0]


#: Files renamed to their exercise's id: old stem → id (a learner's old file still finds its exercise, and
#: ``python -m tklab exercises`` moves the work in it to the new name).
RENAMED = {"flash_fwd_tiles": "ch09_flash", "flash_fwd_hopper": "ch10_flash"}


def find(name: str) -> Exercise:
    """The spec for an id, a unique id prefix (``"ch02"``: the chapter's exercise, not its drills, its design
    exercise nor its debugging exercise), or a file name/path named after it (``.../ch02_smem_tiling.cu``)."""
    stem = Path(name).name.split(".", 1)[0] if ("/" in name or "." in name) else name
    stem = RENAMED.get(stem, stem)
    if "@" not in stem and (stem in _drills() or spec_file(stem) is not None):  # an id: only its spec loads
        return get(stem)
    ids = all_ids()
    matches = [i for i in ids if i.startswith(stem)] or [i for i in ids if stem.startswith(i)]
    drills = _drills()
    main = [i for i in matches if i not in drills and not get(i).design and get(i).kind != "debug"]
    main = [i for i in main if "_challenge_" not in i]  # a speed challenge is not the chapter's exercise
    if len(matches) == 1 or len(main) == 1:
        return get(matches[0] if len(matches) == 1 else main[0])
    could = main if len(main) > 1 else matches
    hint = f"it could be {', '.join(could)}" if could else f"exercises: {', '.join(ids)}"
    raise KeyError(f"cannot tell which exercise {name!r} is ({hint}); name the file after its exercise "
                   "or pass the exercise id")


__all__ = ["Exercise", "RENAMED", "all_ids", "find", "folder", "from_file", "get", "module", "root", "spec_file"]
