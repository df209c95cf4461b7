"""What the compiler makes of every course kernel: registers, spills, shared memory, instruction mix.

Why: a change to the tile library (``cuda/tk``) must not make the solutions' machine code worse. This
compiles every kernel of ``solutions/`` for sm_90a (no GPU needed) with the -D options the course builds
it with (the GEMM steps and variants of ``tklab.kernels.gemm``, the attention builds of
``tklab.kernels.attention``, each
exercise's options), and the library's own test kernels (``tests/kernels/``), and writes the facts of
every kernel into one JSON file; ``--compare OLD NEW`` lists what moved.

Usage: ``python bench/sass_facts.py --out bench/results/sass_facts_<commit>.json`` then
``python bench/sass_facts.py --compare OLD.json NEW.json``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tklab import recorded  # noqa: E402
from tklab.paths import solution  # noqa: E402

ARCH = "sm_90a"


def builds() -> Iterator[tuple[str, str, tuple[str, ...]]]:
    """(label, solution file, options) of every build the course makes of a solution."""
    from tklab import attention, gemm, specs

    seen: set[tuple[str, tuple[str, ...]]] = set()

    def once(label: str, source: str, options: tuple[str, ...]) -> Iterator[tuple[str, str, tuple[str, ...]]]:
        if (source, options) not in seen:
            seen.add((source, options))
            yield label, source, options

    for name, step in (gemm.STEPS | gemm.VARIANTS).items():
        yield from once(f"gemm {name}", step.source, step.options)
    for kernel in attention.KERNELS:
        for d in (64, 128):
            b = attention.build(kernel, d)
            yield from once(f"attention {kernel} d={d}", b.source.name, b.options)
    for ex in specs.all_ids():
        spec = specs.get(ex)
        if spec.language == "cuda":
            yield from once(f"exercise {ex}", Path(spec.solution).name, spec.options)
    built = {source for source, _ in seen}
    for path in sorted((ROOT / "solutions").glob("*.cu")):  # the rest, as they compile without options
        if path.name not in built:  # (the attention kernels refuse to compile without their -D options)
            yield from once(f"solution {path.name}", path.name, ())
    for stages in (1, 2, 3, 4):
        yield from once(f"ring STAGES={stages}", "ch07_tma_ring.cu", (f"-DSTAGES={stages}",))
    for path in sorted((ROOT / "tests" / "kernels").glob("*.cu")):  # the tile library's own test kernels
        yield from once(f"test {path.name}", f"../tests/kernels/{path.name}", ())


def facts() -> dict[str, Any]:
    import tklab
    from tklab import sass

    out: dict[str, Any] = {}
    for label, source, options in builds():
        path = solution(source).resolve()
        mod = tklab.compile(path.read_text(), arch=ARCH, name=path.name, options=options)
        for k in mod:
            hist = sass.histogram(k.sass, full=True)
            out[f"{label} :: {k.display_name}"] = {
                "source": source, "options": list(options), "registers": k.registers, "spill_bytes": k.spill_bytes,
                "stack_bytes": k.stack_bytes, "shared_bytes": k.shared_bytes, "instructions": sum(hist.values()),
                "histogram": dict(sorted(hist.items()))}
    return out


def compare(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """One line per kernel whose resources or instruction mix changed, and a summary line."""
    lines, same = [], 0
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key), new.get(key)
        if a is None or b is None:
            lines.append(f"{key}: only in {'new' if a is None else 'old'}")
            continue
        moved = [f"{f} {a[f]}→{b[f]}" for f in ("registers", "spill_bytes", "stack_bytes", "shared_bytes",
                                                 "instructions") if a[f] != b[f]]
        ops = sorted(set(a["histogram"]) | set(b["histogram"]))
        diff = {op: b["histogram"].get(op, 0) - a["histogram"].get(op, 0) for op in ops}
        moved += [f"{op} {d:+d}" for op, d in diff.items() if d]
        if moved:
            lines.append(f"{key}: {', '.join(moved)}")
        else:
            same += 1
    lines.append(f"{same} of {len(set(old) | set(new))} kernels identical in registers, spills, stack, shared "
                 "memory and full-opcode histogram")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="write the facts here (JSON)")
    ap.add_argument("--compare", nargs=2, type=Path, metavar=("OLD", "NEW"))
    args = ap.parse_args()
    if args.compare:
        old, new = (json.loads(p.read_text())["kernels"] for p in args.compare)
        print("\n".join(compare(old, new)))
        return 0
    result = {"arch": ARCH, "commit": recorded.commit(), "nvrtc": recorded.nvrtc(),
              "date": datetime.date.today().isoformat(), "kernels": facts()}
    text = json.dumps(result, indent=1)
    if args.out:
        args.out.write_text(text)
    print(f"{len(result['kernels'])} kernels, commit {result['commit']}" + (f" → {args.out}" if args.out else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
