"""Profiles recorded on a GPU, shown where there is none (or no ncu, or no permission to read counters).

The same rules as ``tklab.recorded``: a chapter's profile cell names a key (``"ch02.tiled_fp32"``); on a GPU
with ncu the live profile is shown, and stored with device, date and commit only when ``TKLAB_RECORD=1``
(``make gpu-check``, ``bench/profile_samples.py``), so a learner's runs never touch the repository.
Elsewhere the stored profile is shown, labelled as recorded. The file is
``bench/results/profiles.json`` (``TKLAB_PROFILE_FILE`` overrides); it keeps the metrics ncu reported, not
the verdicts, so the current rules re-read old profiles.

Public API: ``load(key, note="") -> ProfileResult | None``, ``save(key, result)``, ``keys()``, ``recording()``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ..paths import REPO
from .result import ProfileResult

_DEFAULT = REPO / "bench" / "results" / "profiles.json"


def path() -> Path:
    return Path(os.environ.get("TKLAB_PROFILE_FILE", _DEFAULT))


def recording() -> bool:
    return os.environ.get("TKLAB_RECORD", "") in ("1", "true", "yes")


def _read() -> dict[str, Any]:
    try:
        return json.loads(path().read_text())
    except (OSError, ValueError):
        return {}


def keys() -> list[str]:
    return sorted(_read())


def load(key: str, note: str = "") -> ProfileResult | None:
    """The recorded profile for ``key``, labelled as recorded (``note`` says why it is shown), or None."""
    entry = _read().get(key)
    return None if entry is None else ProfileResult.from_record(key, entry, note=note)


def save(key: str, result: ProfileResult) -> Path:
    """Store ``result`` under ``key`` (the caller decides whether recording is on)."""
    data = _read()
    data[key] = result.to_record()
    p = path()
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(dict(sorted(data.items())), indent=1) + "\n")
    return p
