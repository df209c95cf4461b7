"""One home per quoted constant (issue 43, item 3): the tests and the benches read a course constant from its home
in tklab, never from a second literal copy that keeps passing on an old value when the home changes.

The homes: ``tklab.kernels.attention.DEFAULTS`` (chapters 09-10's options: key-block width, consumers, stages,
schedule), ``tklab.kernels.attention_bwd.DEFAULTS`` (chapter 11's), ``tklab.kernels.gemm`` (the GEMM steps' tiles,
``BK``, the TMA boxes, a step's grid, ``launch_facts`` for what a kernel declares; chapter 06's tile from its file),
``tklab.kernels.tma_copy`` (the ring's threads and tile) and ``tklab.run.limits`` (the per-block shared memory, the
register file and a block's register pool). Each pattern below is built from the home's value, so it follows the
home: what it finds is a copy of the value as it stands.

Read: ``tests/*.py`` and ``bench/*.py``, every line (code, comments and docstrings: a comment that quotes a value
rots as a copy does). A number that is a test case's input (N = 1024, a box of a TMA plan) is not a copy and is not
matched: the patterns name the constant by its context (``BC`` beside the width, a launch's block, a GEMM's ring).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tklab.kernels import attention, attention_bwd, gemm, tma_copy
from tklab.run import limits

ROOT = Path(__file__).resolve().parent.parent
#: This file, whose examples below are the shapes the copies had.
NOT_READ = {"tests/test_constant_homes.py"}


def _number(value: int) -> str:
    """A regex for ``value`` written plainly or with thousands separators (64512, 64,512, 64_512)."""
    digits = str(value)
    cut = len(digits) % 3 or 3
    head, groups = digits[:cut], [digits[i:i + 3] for i in range(cut, len(digits), 3)]
    return r"(?<![\w.])" + head + "".join(f"[,_]?{g}" for g in groups) + r"(?![\w.])"


def _pairs(options: dict[str, int]) -> list[str]:
    """A regex per non-zero option, as a dict (``"BC": 176``), a keyword (``BC=176``) or a flag (``-DBC=176``)."""
    return [rf"(?:\b|(?<=-D)){k}\b\W{{0,3}}[:=]\s*{v}\b" for k, v in options.items() if v]


def patterns() -> dict[str, list[str]]:
    """What a copy looks like, by the constant it copies (its home first)."""
    bc = attention.DEFAULTS["hopper"][128]["BC"]
    pool = limits.launch_pool(attention.build("hopper", 128).threads)
    smem = limits.SHARED_OPTIN[90]
    threads = attention.build("hopper", 128).threads  # chapters 08-10's block: a producer and two consumers
    out: dict[str, list[str]] = {
        "attention.DEFAULTS['hopper'][128]['BC'] (chapter 10's key block)":
            [rf"\bBC\b\W{{0,4}}{bc}\b", rf"\b{bc}\W{{0,2}}keys?\b", rf"x{bc}x16\b"],
        "limits.launch_pool(threads) (the block's register pool)": [_number(pool)],
        "limits.SHARED_OPTIN[90] (shared memory per block on sm_90)":
            [_number(smem), rf"\b{smem // 1024}\s*\*\s*1024\b"],
        "a launch's block of chapters 08-10's kernels (launch_facts, Build.threads)": [rf"\(\s*{threads},\s*\)"],
        "tma_copy.RING_THREADS (chapter 07's ring)": [rf"\(\s*{tma_copy.RING_THREADS},\s*\)",
                                                      rf"block=\(\s*{tma_copy.RING_THREADS}\b"],
    }
    steps = {(s.block_m, s.block_n) for s in gemm.STEPS.values()}
    out["gemm.STEPS' tiles and gemm.BK (a GEMM ring's bytes, grid or boxes: launch_facts, tile_grid, tma_boxes)"] = [
        *(rf"\b{bm}\s*\*\s*{gemm.BK}\s*\+\s*{gemm.BK}\s*\*\s*{bn}\b" for bm, bn in steps),
        *(rf"//\s*{bm}\)\s*\*\s*\(\s*\w+\s*//\s*{bn}\b" for bm, bn in steps),
        *(rf"//\s*{bn},\s*\w+\s*//\s*{bm}\)" for bm, bn in steps),
        *(rf"tensor_map\(.*\(\s*{gemm.BK},\s*{bn}\s*\)" for _, bn in steps),
    ]
    mma = gemm.mma_tiles_options()
    out["gemm.mma_tiles_options() (chapter 06's tile, from its file)"] = [
        rf"\b{mma['BM']}\s*\*\s*{mma['BK']}\s*\+\s*{mma['BK']}\s*\*\s*{mma['BN']}\b"]
    return out


def default_sets() -> dict[str, list[str]]:
    """The attention kernels' default options: a line that repeats three or more of one set copies the defaults."""
    sets = {f"attention.DEFAULTS['hopper'][{d}]": _pairs(o) for d, o in attention.DEFAULTS["hopper"].items()}
    sets |= {f"attention_bwd.DEFAULTS[{d}]": _pairs(o) for d, o in attention_bwd.DEFAULTS.items()}
    return sets


#: (file, line pattern, why the line may quote the value): lines that name a measured configuration, where the value
#: is part of the configuration's identity and not a copy of the default.
ALLOWED = [
    ("bench/flash_fwd.py", r'^\s*"ch1\d [^"]*": \("hopper", |^COURSE = ',
     "a named variant: a configuration measured by name, as the bench/results reports label their rows"),
]


def read_files() -> list[Path]:
    files = sorted((ROOT / "tests").glob("*.py")) + sorted((ROOT / "bench").glob("*.py"))
    return [p for p in files if p.relative_to(ROOT).as_posix() not in NOT_READ]


def allowed(rel: str, line: str) -> bool:
    return any(rel == path and re.search(rx, line) for path, rx, _ in ALLOWED)


def copies() -> tuple[list[str], set[int]]:
    """``file:line: constant | text`` for every copy, and the indices of the allow-list entries that were used."""
    found, used = [], set()
    pats = {name: [re.compile(p) for p in ps] for name, ps in patterns().items()}
    sets = {name: [re.compile(p) for p in ps] for name, ps in default_sets().items()}
    for path in read_files():
        rel = path.relative_to(ROOT).as_posix()
        for n, line in enumerate(path.read_text().splitlines(), 1):
            hits = [name for name, ps in pats.items() if any(p.search(line) for p in ps)]
            hits += [f"{name} (as a set)" for name, ps in sets.items() if sum(bool(p.search(line)) for p in ps) >= 3]
            if not hits:
                continue
            which = [i for i, (path_, rx, _) in enumerate(ALLOWED) if rel == path_ and re.search(rx, line)]
            if which:
                used.update(which)
                continue
            found += [f"{rel}:{n}: {h} | {line.strip()[:110]}" for h in hits]
    return found, used


def test_no_second_copy_of_a_course_constant() -> None:
    found, _ = copies()
    assert not found, "read these from their home in tklab instead:\n" + "\n".join(found)


def test_every_allowed_line_is_still_needed() -> None:
    _, used = copies()
    unused = [ALLOWED[i][:2] for i in range(len(ALLOWED)) if i not in used]
    assert not unused, f"no line needs these any more: remove them from ALLOWED: {unused}"


@pytest.mark.parametrize("line", [
    '    mod["k"](grid, (384,), args, shared_mem=4 * (128 * 64 + 64 * 256) * 2 + 1024)',
    '    b = attention.build("hopper", 128, BC=176)',
    '    assert pool == 64_512',
    '    assert shared <= 232448  # 227 KB',
    '    kernel(((m // 128) * (n // 256),), block, args)',
    '    maps = (emu.tensor_map(a, (64, 64)), emu.tensor_map(b, (64, 256)))',
    '    tr = tklab.trace(RING, kernel="ring_copy", grid=(1,), block=(160,))',
    '    assert b.options == ("-DCONSUMERS=2", "-DSCHEDULE=2", "-DSTAGES=2")',
])
def test_the_patterns_find_the_copies_they_name(line: str) -> None:
    """Each form a copy took before its tests and benches read the home (with today's values; a changed home
    changes the values these lines must carry to be found, which the check below keeps in step)."""
    values = {"176": attention.DEFAULTS["hopper"][128]["BC"], "384": attention.build("hopper", 128).threads,
              "160": tma_copy.RING_THREADS}
    if any(str(v) != k for k, v in values.items()):
        pytest.skip("the examples are written for today's values")
    pats = [re.compile(p) for ps in patterns().values() for p in ps]
    sets = [[re.compile(p) for p in ps] for ps in default_sets().values()]
    assert any(p.search(line) for p in pats) or any(sum(bool(p.search(line)) for p in ps) >= 3 for ps in sets), line


def test_a_test_input_is_not_a_copy() -> None:
    pats = [re.compile(p) for ps in patterns().values() for p in ps]
    for line in ('@pytest.mark.parametrize("n,br,bc", [(8192, 128, 64), (1000, 128, 176)])',
                 '    p = _plan((1024, 512), (64, 256))  # a box of a TMA plan',
                 '    m, n, k = 256, 384, 96', '    blocks = 1024 * 176'):
        assert not any(p.search(line) for p in pats), line
