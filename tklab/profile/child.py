"""The process Nsight Compute profiles: ``python -m tklab.profile.child RECIPE_DIR``.

It re-creates the launch written by ``recipe.capture`` and runs it ``warmup + 1`` times (ncu skips the
first ``warmup``), then waits for the GPU. Anything that goes wrong is written to ``child_error.txt`` in the
recipe folder, so the parent can tell "the launch could not be re-created" from "ncu failed".
"""

from __future__ import annotations

import sys
import traceback
from pathlib import Path

from ..run import gpu


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m tklab.profile.child RECIPE_DIR", file=sys.stderr)
        return 2
    folder = Path(args[0])
    try:
        from .recipe import build

        recipe, run = build(folder)
        for _ in range(recipe.warmup + 1):
            run()
        gpu.synchronize()
    except Exception as e:  # noqa: BLE001 - every failure becomes a message for the parent
        (folder / "child_error.txt").write_text(f"{type(e).__name__}: {e}\n\n{traceback.format_exc()}")
        return 3
    (folder / "child_done.txt").write_text("ok\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
