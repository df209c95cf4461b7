"""``make notebooks``: re-execute the course notebooks and store their outputs, with diffs kept reviewable.

The notebooks are committed *with* outputs (readers see results without running anything, and nbval
compares the cells tagged ``nbval-check-output`` with them). Executing a notebook also writes
per-cell timing metadata and widget state that change on every run and say nothing; this drops them.
Run it after ``bench/results/recorded.json`` changes, so the GPU cells show the newest H200 numbers.

A learner's work is never lost: a notebook with changes git does not have yet (edited after the last
commit, or never committed) is left alone and named, unless ``--backup`` is given, which first copies it
to ``<name>.bak-<timestamp>.ipynb``.

Usage: ``python -m tklab.course.nbrefresh [--backup] [NOTEBOOK ...]`` (default: every ``notebooks/*.ipynb``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from ..paths import REPO

ROOT = REPO


#: The kernel ipykernel installs (``python -m ipykernel install`` and every venv): a notebook that names
#: another display name opens marked unsaved, because JupyterLab rewrites the name on connecting.
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}


def clean(nb: dict) -> dict:
    """Remove run-to-run noise (execution timestamps per cell, saved widget state) and name the kernel as
    the installed one does."""
    for cell in nb.get("cells", []):
        cell.get("metadata", {}).pop("execution", None)
    nb.get("metadata", {}).pop("widgets", None)
    nb.setdefault("metadata", {})["kernelspec"] = dict(KERNELSPEC)
    return nb


def refresh(path: Path, timeout: int = 600) -> None:
    import nbformat
    from nbclient import NotebookClient

    from ..grading.check import SEED_VARIABLE

    nb = nbformat.read(path, as_version=4)
    # Exercise checks draw fresh random inputs; a fixed seed keeps their stored reports the same run to run.
    previous = os.environ.get(SEED_VARIABLE)
    os.environ[SEED_VARIABLE] = "2026"
    try:
        NotebookClient(nb, timeout=timeout, kernel_name="python3",
                       resources={"metadata": {"path": str(path.parent)}}, store_widget_state=False).execute()
    finally:
        if previous is None:
            os.environ.pop(SEED_VARIABLE, None)
        else:
            os.environ[SEED_VARIABLE] = previous
    nbformat.write(nbformat.from_dict(clean(nb)), path)


def edited(paths: list[Path]) -> list[Path]:
    """The notebooks among ``paths`` whose content git does not have (modified or untracked)."""
    out = subprocess.run(["git", "status", "--porcelain", "--", *map(str, paths)], cwd=ROOT, capture_output=True,
                         text=True, check=False)
    if out.returncode != 0:  # not a git checkout: every notebook may hold someone's work
        return list(paths)
    changed = {(ROOT / line[3:].strip()).resolve() for line in out.stdout.splitlines() if line.strip()}
    return [p for p in paths if p.resolve() in changed]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tklab.course.nbrefresh", description=__doc__.splitlines()[0])
    ap.add_argument("--backup", action="store_true", help="copy edited notebooks aside first, then refresh them")
    ap.add_argument("notebooks", nargs="*", type=Path)
    args = ap.parse_args(sys.argv[1:] if argv is None else argv)
    paths = args.notebooks or sorted((ROOT / "notebooks").glob("*.ipynb"))
    mine = edited(paths)
    if mine and not args.backup:
        print("not refreshing: these notebooks have changes git does not have (your work?):", file=sys.stderr)
        for p in mine:
            print(f"  {p}", file=sys.stderr)
        print("commit them, or pass --backup to copy them aside first.", file=sys.stderr)
        return 1
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for p in mine:
        backup = p.with_name(f"{p.stem}.bak-{stamp}{p.suffix}")
        shutil.copy2(p, backup)
        print(f"backed up {p} -> {backup}")
    for path in paths:
        print(f"executing {path} ...", flush=True)
        refresh(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
