"""The registry: every exercise and drill, found by id. Nothing else lists exercises.

An exercise is a module ``chNN_<name>.py`` of this package (``SPEC``, written with ``tklab.grading.spec_kit``), a
drill one entry of ``drills.py`` (``DRILLS``). Tests, the index (``notebooks/README.md``, ``python -m tklab
exercises --list``), the grader and the bench scripts all read it. Looking one up imports that spec only.

Public API: ``all_ids()``, ``get(id)``, ``find(name)``, ``RENAMED``.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from pathlib import Path

from ..spec_kit import Exercise


def _module_ids() -> list[str]:
    return [m.name for m in pkgutil.iter_modules(__path__) if re.match(r"ch\d", m.name)]


def _drills() -> dict[str, Exercise]:
    from .drills import DRILLS

    return DRILLS


def all_ids() -> list[str]:
    """Ids of every exercise and drill, in chapter order (a chapter's exercises before its drills)."""
    drills = _drills()
    def design(i: str) -> bool:  # a chapter's design exercise after its own exercise
        return i not in drills and importlib.import_module(f"{__name__}.{i}").SPEC.design

    return sorted([*_module_ids(), *drills], key=lambda i: (i[:4], i in drills, design(i), i))


def get(exercise_id: str) -> Exercise:
    """The spec of one exercise by exact id (``<id>@<tag>``: one of its other ``builds``)."""
    if "@" in exercise_id:
        base = get(exercise_id.split("@", 1)[0])
        other = next((b for b in base.builds if b.id == exercise_id), None)
        if other is None:
            raise KeyError(f"{base.id} has no build {exercise_id!r}; its builds: "
                           f"{', '.join(b.id for b in base.builds) or 'none'}")
        return other
    drills = _drills()
    if exercise_id in drills:
        return drills[exercise_id]
    if exercise_id not in _module_ids():
        raise KeyError(f"no exercise {exercise_id!r}; exercises: {', '.join(all_ids())}")
    return importlib.import_module(f"{__name__}.{exercise_id}").SPEC


#: Files renamed to their exercise's id: old stem → id (a learner's old file still finds its exercise, and
#: ``python -m tklab exercises`` moves the work in it to the new name).
RENAMED = {"flash_fwd_tiles": "ch09_flash", "flash_fwd_hopper": "ch10_flash"}


def find(name: str) -> Exercise:
    """The spec for an id, a unique id prefix (``"ch02"``: the chapter's exercise when its drills share the
    prefix), or a file name/path named after it (``.../ch02_smem_tiling.cu``)."""
    stem = Path(name).name.split(".", 1)[0] if ("/" in name or "." in name) else name
    stem = RENAMED.get(stem, stem)
    ids = all_ids()
    if stem in ids:
        return get(stem)
    matches = [i for i in ids if i.startswith(stem)] or [i for i in ids if stem.startswith(i)]
    drills = _drills()
    main = [i for i in matches if i not in drills and not get(i).design]
    if len(matches) == 1 or len(main) == 1:
        return get(matches[0] if len(matches) == 1 else main[0])
    hint = f"it could be {', '.join(matches)}" if matches else f"exercises: {', '.join(ids)}"
    raise KeyError(f"cannot tell which exercise {name!r} is ({hint}); name the file after its exercise "
                   "or pass the exercise id")


