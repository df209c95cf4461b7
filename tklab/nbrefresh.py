"""``make notebooks``: re-execute the course notebooks and store their outputs, with diffs kept reviewable.

The notebooks are committed *with* outputs (readers see results without running anything, and nbval
compares the cells marked ``# NBVAL_CHECK_OUTPUT`` with them). Executing a notebook also writes
per-cell timing metadata and widget state that change on every run and say nothing; this drops them.
Run it after ``bench/results/recorded.json`` changes, so the GPU cells show the newest H200 numbers.

Usage: ``python -m tklab.nbrefresh [NOTEBOOK ...]`` (default: every ``notebooks/*.ipynb``).
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def clean(nb: dict) -> dict:
    """Remove run-to-run noise: execution timestamps per cell and saved widget state."""
    for cell in nb.get("cells", []):
        cell.get("metadata", {}).pop("execution", None)
    nb.get("metadata", {}).pop("widgets", None)
    return nb


def refresh(path: Path, timeout: int = 600) -> None:
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}},
                   store_widget_state=False).execute()
    nbformat.write(nbformat.from_dict(clean(nb)), path)


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    paths = [Path(a) for a in args] or sorted((ROOT / "notebooks").glob("*.ipynb"))
    for path in paths:
        print(f"executing {path} ...", flush=True)
        refresh(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
