"""The numbers the chapters' prose quotes, held to what they are computed from (issue 26).

Each test reads a sentence of a stored notebook and the thing it describes — the compiled kernel's SASS, a
stored output, a recorded measurement — so that when the kernel or the record changes, the text fails here
instead of drifting. No GPU: everything is compiled for sm_90a and read.
"""

from __future__ import annotations

import json
import re
import statistics
from functools import cache
from pathlib import Path
from types import ModuleType

import pytest
from scripts import load_script

ROOT = Path(__file__).resolve().parent.parent


@cache
def _cells(chapter: str) -> dict[str, dict]:
    path = next((ROOT / "notebooks").glob(f"{chapter}_*.ipynb"))
    return {c["id"]: c for c in json.loads(path.read_text())["cells"]}


def _text(chapter: str, cell: str) -> str:
    return " ".join("".join(_cells(chapter)[cell]["source"]).split())


def _output(chapter: str, cell: str) -> str:
    return "".join("".join(o.get("text", "")) for o in _cells(chapter)[cell].get("outputs", []))


def hmma_per_hgmma(n: int, m: int = 64, k: int = 16) -> int:
    """HMMA.16816 (16×8×16, chapter 05's warp instruction) doing the multiply-adds of one m×n×k wgmma."""
    return m * n * k // (16 * 8 * 16)


@pytest.fixture(scope="module")
def flash() -> tuple:
    from tklab import attention

    build = attention.build("hopper", 128)
    return build, attention.compiled(build)


def test_ch10_hgmma_per_key_block_is_s_then_pv(flash) -> None:
    """10 · cell 4: d/16 HGMMA.64x{BC}x16 for S and BC/16 HGMMA.64x{d}x16 for P·V, both in the loop."""
    from tklab import course

    build, k = flash
    d, bc = 128, int(dict(o[2:].split("=") for o in build.options)["BC"])
    loop = course.main_loop(k.sass)
    assert sum(op.startswith("HGMMA") for op in loop) == d // 16 + bc // 16
    shapes = re.findall(r"HGMMA\.(64x\d+x16)", k.sass)  # prologue (block 0 / last P·V) and loop: twice each
    assert shapes.count(f"64x{bc}x16") == 2 * (d // 16) and shapes.count(f"64x{d}x16") == 2 * (bc // 16)
    prose = _text("10", "a0bdd3e7")
    assert f"**{d // 16}** `HGMMA.64x{bc}x16`" in prose and f"**{bc // 16}** `HGMMA.64x{d}x16`" in prose
    assert f"{d // 16 + bc // 16} `HGMMA` per key block" in prose
    assert f"{hmma_per_hgmma(bc)} `HMMA.16816`" in prose


def test_hmma_per_wgmma_shape() -> None:
    """One m64nNk16 wgmma does the work of 4·N/8 HMMA.16816: 88 for N = 176, 128 for N = 256."""
    assert [hmma_per_hgmma(n) for n in (8, 128, 176, 256)] == [4, 64, 88, 128]


def test_register_split_fits_the_blocks_pool(flash) -> None:
    """10 · cell 4 and 08 · cell 13: setmaxnreg moves registers within the block's pool (launch registers ×
    threads), and both splits use it exactly: registers × threads = 128 × (producer + 2 consumers), the pool of
    tklab.run.limits (the chapters print the product)."""
    from tklab import gemm
    from tklab.run.limits import launch_pool

    build, k10 = flash
    threads = build.threads
    pool10 = k10.registers * threads
    src10 = build.source.read_text()  # the kernel file, wherever the build finds it
    prod, cons = map(int, re.search(r"register_split<(\d+), CONSUMERS == 2 \? (\d+)", src10).groups())
    assert 128 * (prod + 2 * cons) == pool10 == launch_pool(threads)
    k8 = gemm.compiled(gemm.STEPS["2_warp_specialised"])
    assert gemm.launch_facts(k8.module)["threads"] == threads
    prod8, cons8 = map(int, re.search(r"register_split<(\d+), (\d+),", (ROOT / "solutions" / "gemm_wgmma.cu")
                                      .read_text()).groups())
    assert k8.registers * threads == 128 * (prod8 + 2 * cons8) == launch_pool(threads)
    for chapter, cell, (p, c, r) in (("10", "a0bdd3e7", (prod, cons, k10.registers)),
                                     ("08", "c14", (prod8, cons8, k8.registers))):
        prose = _text(chapter, cell)
        assert f"{r} per thread × {threads} threads = {pool10:,}" in prose, chapter
        assert f"128 × ({p} + 2 × {c}) = {pool10:,}" in prose, chapter
        assert "64K" not in prose, f"{chapter}: the split is checked against the block's pool, not the SM's 64K"


def test_ch02_unroll_quoted_is_the_ffma_count_shown() -> None:
    """02 · cell 15 says how often nvcc unrolled the loop; the count cell's stored output shows it."""
    m = re.search(r"CUDA C naive_cols\s+\d+ instructions for\s+(\d+) FFMA", _output("02", "c11b"))
    assert m, "the instruction-count cell no longer prints the CUDA C loop's FFMA"
    assert f"unrolls the loop {m.group(1)} times" in _text("02", "c11c")


def _recorded(key: str) -> dict:
    return json.loads((ROOT / "bench" / "results" / "recorded.json").read_text())[key]["values"]


def test_ch02_numba_ratio_is_the_recorded_one() -> None:
    """02 · cell 13: the CUDA C kernel's rate and its ratio to chapter 01's, as recorded."""
    cols, numba = _recorded("ch02.naive_coalesced")["tflops"], _recorded("ch01.naive_numba")["tflops"]
    prose = _text("02", "c11a")
    assert f"this kernel's {cols:.2f}" in prose and f"about {cols / numba:.1f} times slower" in prose


def test_ch00_vector_add_share_of_a_copy() -> None:
    """00 · cell 22: the vector add's rate against the copy ceiling and against the copy timed with the sweep;
    where the record's own share was taken against another ceiling, the prose says which."""
    from tklab.run.ceilings import H200_COPY_TBPS

    add, sweep = _recorded("ch00.vector_add"), _recorded("ch00.bytes_in_flight")
    prose = _text("00", "c22")
    tbps = add["gbps"] / 1000
    assert f"moved {tbps:.2f} TB/s: {tbps / H200_COPY_TBPS:.0%} of the {H200_COPY_TBPS:.2f} TB/s copy ceiling" \
        .replace("%", " %") in prose
    if abs(add["of copy bandwidth"] - tbps / H200_COPY_TBPS) > 0.005:
        assert f"the record's {add['of copy bandwidth']:.3f} was computed against" in prose
    assert f"({sweep['copy_tbps']:.2f} TB/s) the same kernel reaches {sweep['8B_tbps'] / sweep['copy_tbps']:.0%}" \
        .replace("%", " %") in prose


def test_one_copy_ceiling_the_recorded_one() -> None:
    """Issue 26: one HBM bandwidth for the H200, the copy chapter 00's ceilings cell recorded (``tklab.ceilings``
    holds it, with its source); code cells read it from there, and every sentence that quotes the copy
    ceiling quotes that value (a same-run copy, or a range of copies, is a measurement and says so)."""
    from tklab.run.ceilings import KNOWN

    ceiling = KNOWN["H200"].copy_tbps
    assert ceiling == round(_recorded("ch00.ceilings")["copy_tbps"], 2)
    assert "ch00.ceilings" in KNOWN["H200"].source["copy_tbps"]
    number = r"(\d+(?:\.\d+)?)"
    quotes = [rf"{number} TB/s (?:copy|device-to-device)", rf"copy(?: ceiling)?,? (?:of |at )?{number} TB/s",
              rf"copy \({number} TB/s\)", rf"measured (?:at )?(?:about )?{number} TB/s"]
    outputs = rf"of a copy \({number} TB/s\)|the {number} TB/s copy"
    seen = []
    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        for cell in _cells(path.name[:2]).values():
            where = f"{path.name} · cell {cell['id']}"
            src = " ".join("".join(cell["source"]).split())
            assert not re.search(r"\b\d\.\d+e12\b", src), f"{where}: a bandwidth by hand: read tklab.ceilings"
            found = [m for q in quotes for m in re.finditer(q, src)]
            for o in cell.get("outputs", []):
                text = "".join(o.get("text", "")) + "".join(o.get("data", {}).get("text/plain", ""))
                found += list(re.finditer(outputs, text))
            for m in found:
                assert float(next(g for g in m.groups() if g)) == ceiling, \
                    f"{where}: {m.group(0)!r} is not the copy ceiling, {ceiling} TB/s"
            seen += [where] * len(found)
    assert len(set(seen)) >= 10, seen  # the chapters' quotes and stored profiles: the patterns still find them


def test_ch09_flash2_ratio_is_the_three_round_report() -> None:
    """09 · cell 25: the range over every d = 128 configuration and round of the report it names."""
    report = "flash_fwd_bench_2026-12-01_e9e13a5"
    rows = json.loads((ROOT / "bench" / "results" / f"{report}.json").read_text())
    ratios = []
    for r in rows:
        if r["who"] == "ch09 tiles" and r["d"] == 128:
            flash = next(x for x in rows if x["who"] == "sdpa flash" and
                         (x["d"], x["n"], x["causal"], x["round"]) == (r["d"], r["n"], r["causal"], r["round"]))
            ratios.append(r["tflops"] / flash["tflops"])
    prose = _text("09", "42dde214")
    assert report in prose and f"{min(ratios):.2f}–{max(ratios):.2f}× FlashAttention-2 at d = 128" in prose


def test_ch08_descriptor_section_matches_the_library() -> None:
    """08 · the descriptor section: SBO = 8 rows × the 128-byte span, swizzle code 1 for 128B, as
    cuda/tk/hopper/descriptor.cuh encodes them; the stored output is the section's own computation."""
    lib = (ROOT / "cuda" / "tk" / "hopper" / "descriptor.cuh").read_text()
    assert "ST::swz::bytes == 128 ? 1" in lib and "8 * span" in lib
    out = _output("08", "c06e")
    assert "SBO = 1024 bytes" in out and "swizzle code 1" in out and f"SBO {1024 // 16} " in out
    prose = _text("08", "c06d")
    assert "| 32–45 | stride byte offset (SBO) ÷ 16 | 1024 ÷ 16" in prose
    assert "| 62–63 | swizzle mode | 1 = 128B" in prose


def _sources(chapter: str) -> dict[str, str]:
    return {cid: " ".join("".join(c["source"]).split()) for cid, c in _cells(chapter).items()}


def test_ch10_quotes_the_default_key_block_from_its_one_home() -> None:
    """Issue 27 item 5: chapter 10's default key block (``attention.DEFAULTS``, BC at d = 128) is quoted only
    in these places, each held to DEFAULTS here; the code cells read it from DEFAULTS; no other cell's
    source names the number, so a change of the default fails here instead of leaving stale prose."""
    from tklab.kernels.attention import DEFAULTS

    d128, d64 = DEFAULTS["hopper"][128], DEFAULTS["hopper"][64]
    bc = d128["BC"]
    schedule = {0: "plain", 1: "overlap", 2: "ping-pong"}
    held = {
        "5ccf21b3": [f"`wgmma` 64×{bc}×16"],
        "a0bdd3e7": [f"`HGMMA.64x{bc}x16` is one", f"(64·{bc}·16 multiply-adds", f"**8** `HGMMA.64x{bc}x16`",
                     f"(64 × {bc} scores", f"the block's {bc} keys: {bc}/16"],
        "6b51a3a7": [f"widens the key block from 128 to {bc}",
                     f"default is {schedule[d128['SCHEDULE']]} at d = 128 and {schedule[d64['SCHEDULE']]} at d = 64"],
        # the recorded step of the default configuration: its record key names the width it was measured with
        "d7662f86": [f'("ch10.pingpong_bc{bc}", "hopper", {{"SCHEDULE": {d128["SCHEDULE"]}, "BC": {bc}}}, '
                     f'"+ {bc}-key blocks (the default)")'],
        "4db82bb5": [f'"ch10.pingpong_bc{bc}"'],
    }
    sources = _sources("10")
    for cell, quotes in held.items():
        for quote in quotes:
            assert quote in sources[cell], f"10 · cell {cell} no longer says {quote!r} (DEFAULTS: BC={bc})"
    for cell, text in sources.items():
        for quote in held.get(cell, []):
            text = text.replace(quote, "")
        assert not re.search(rf"(?<![\d.]){bc}(?![\d.])", text), \
            f"10 · cell {cell} quotes {bc} by hand: read attention.DEFAULTS, or hold the quote in this test"
    assert "attention.DEFAULTS" in sources["0d27f2a6"] and "attention.DEFAULTS" in sources["229a2421"]


# ---- issue 41: the numbers chapters 04 and 07-11 quote, each held to its record ----------------------------
RESULTS = ROOT / "bench" / "results"


def _gemm_raw(report: str) -> dict[tuple[str, str], dict[str, list[float]]]:
    """A chapter 08 progression report's raw rows (TFLOP/s): (who, n³ or shape) -> method -> one value per round."""
    out: dict[tuple[str, str], dict[str, list[float]]] = {}
    text = (RESULTS / report).read_text().split("### raw rows", 1)[1]
    for row in re.findall(r"^\| (\S+) \| \d+ \| (\S+) \| \d+ \| (\d+) \| (\d+) \| (\d+) \|$", text, re.M):
        n, who, *rates = row
        for method, rate in zip(("bench", "graph", "batched"), rates, strict=True):
            out.setdefault((who, n), {}).setdefault(method, []).append(float(rate))
    return out


def _gemm_ratios(report: str, step: str) -> dict[str, dict[str, float]]:
    """A report's speed table: shape -> method -> the step's ratio to cuBLAS (the lower end of its range)."""
    out: dict[str, dict[str, float]] = {}
    for shape, *ratios in re.findall(rf"^\| {step}: [^|]* \| (\S+) \| \d+ \| ([\d.]+)–[\d.]+ \| ([\d.]+)–[\d.]+ \| "
                                     rf"([\d.]+)–[\d.]+ \|$", (RESULTS / report).read_text(), re.M):
        out[shape] = dict(zip(("bench", "graph", "batched"), map(float, ratios), strict=True))
    return out


def test_ch08_strict_cluster_arrive_cost_is_the_records() -> None:
    """08 · the cluster section: step 5 at 4096³ with mbarrier.arrive.release.cluster and with the plain arrive,
    over the three timing methods of the two runs it cites, and the cost per method."""
    strict = _gemm_raw("gemm_wgmma_2026-12-01_a9938a0_release_cluster.md")[("5_cluster", "4096")]
    plain = _gemm_raw("gemm_wgmma_2026-12-01_a9938a0_plain_arrive.md")[("5_cluster", "4096")]
    s = [v for m in strict.values() for v in m]
    p = [v for m in plain.values() for v in m]
    cost = [1 - strict[m][0] / plain[m][0] for m in strict]
    prose = _text("08", "c16d")
    assert f"ran {min(s):.0f}–{max(s):.0f} TFLOP/s with it and {min(p):.0f}–{max(p):.0f} with the plain form" in prose
    assert f"{min(cost):.0%}–{max(cost):.0%} less in each timing method".replace("%–", "–").replace("%", " %") \
        in prose
    for cid, cell in _cells("08").items():
        assert "462" not in "".join(cell["source"]), f"08 · cell {cid}: 462-469 is not in the record (457-468)"


def test_ch08_what_is_left_at_4096_is_the_second_runs() -> None:
    """08 · section 5: the second run's range over three methods and rounds, and the profile's rate and pipe."""
    rs = _gemm_ratios("gemm_wgmma_experiments_2026-12-01_7ed14f1.md", "5_cluster")["4096"]
    text = (RESULTS / "gemm_wgmma_experiments_2026-12-01_7ed14f1.md").read_text()
    highs = [float(h) for h in re.findall(r"^\| 5_cluster: [^|]* \| 4096 \| \d+ \| [\d.]+–([\d.]+) \| [\d.]+–([\d.]+) "
                                          r"\| [\d.]+–([\d.]+) \|$", text, re.M)[0]]
    ncu = json.loads((RESULTS / "gemm_steps_ncu_2026-12-01_7ed14f1.json").read_text())["5_cluster"]
    prose = _text("08", "c27")
    assert f"{min(rs.values()):.2f}–{max(highs):.2f}× in a second run of three rounds" in prose
    assert f"runs at {ncu['tflops']:.0f} TFLOP/s with the **tensor pipe {ncu['tensor_pct']:.0f} % busy**" in prose


def test_ch08_stream_k_is_the_records() -> None:
    """08 · stream-K: graph timings of one round over nine shapes, the step beside step 5."""
    report = "gemm_wgmma_2026-12-01_74fdb98_streamk_plain_arrive.md"
    five, sk = _gemm_ratios(report, "5_cluster"), _gemm_ratios(report, "6_stream_k")
    slower = [s for s in five if sk[s]["graph"] < five[s]["graph"]]
    assert len(five) == 9 and len(slower) == 8 and set(five) - set(slower) == {"8192"}
    prose = _text("08", "c27b")
    assert "slower than step 5 on eight of nine shapes" in prose
    for shape, label in (("4096", "4096³"), ("4096x4000x1032", "4096×4000×1032")):
        assert f"{sk[shape]['graph']:.2f}× against {five[shape]['graph']:.2f}×" in prose.replace(" cuBLAS", ""), \
            (shape, label)
    assert "faster only at 8192³" in prose


def test_ch08_register_pool_everywhere_the_learner_reads() -> None:
    """Issue 41: the design exercise's cell, its hints and its goal line say the block's pool (the split 32/240
    that the whole register file would allow fails the library's static_assert), never the file's 65536 or 64K."""
    import tomllib

    from tklab import gemm
    from tklab.run.limits import REGISTER_FILE, launch_pool

    k8 = gemm.compiled(gemm.STEPS["2_warp_specialised"])
    threads = gemm.launch_facts(k8.module)["threads"]
    pool = k8.registers * threads
    assert pool == launch_pool(threads) < REGISTER_FILE == 128 * (32 + 2 * 240)  # the old hint's split does not fit
    hints = tomllib.loads((ROOT / "solutions" / "ch08_warp_specialized" / "hints.toml").read_text())
    texts = {"08 design cell": _text("08", "design-ch08_warp_specialized-todo"),
             "level 1": " ".join(hints["level1"].split()), "level 2": " ".join(hints["level2"].split()),
             "exercise": (ROOT / "exercises" / "ch08_warp_specialized.cu").read_text(),
             "08 stored check": json.dumps(_cells("08")["design-ch08_warp_specialized-check"]["outputs"])}
    for where, text in texts.items():
        assert f"{pool:,}" in text, where
        assert not re.search(r"65536|64K", text), f"{where}: the SM's register file, not the block's pool"


def test_ch04_cross_run_spread_is_the_records() -> None:
    """04 · the spread across runs: the swizzled reference against a copy in the two reports it cites."""
    checks = re.search(r"^\| ch04_swizzle \| pass \| ([\d.]+)× \|", (RESULTS / "exercises_h200_2026-11-29.md")
                       .read_text(), re.M)
    gpu = re.search(r"^\| ch04_swizzle \| True \| ([\d.]+) \|$", (RESULTS / "gpu-check_2026-11-29_78f7203.md")
                    .read_text(), re.M)
    prose = _text("04", "c22c")
    assert f"{float(checks.group(1)):.2f}× a copy by one run of the exercise checks" in prose
    assert f"at {float(gpu.group(1)):.2f}× by another" in prose


def test_l2_is_quoted_in_the_units_the_device_reports() -> None:
    """Issue 41: one unit for the H200's L2, the 60 MiB its driver reports (the device attribute Nsight Compute
    recorded), in every chapter."""
    import csv

    head, _, values = list(csv.reader((ROOT / "tests" / "data" / "ncu" / "h200" / "ch04.transpose_swizzled.csv")
                                      .open()))[:3]
    l2 = int(values[head.index("device__attribute_l2_cache_size")])
    assert l2 == 60 * 2**20
    quotes = []
    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        for cid, src in _sources(path.name[:2]).items():
            assert not re.search(r"\b60 MB\b", src), f"{path.name} · cell {cid}: the L2 is {l2 // 2**20} MiB"
            quotes += re.findall(r"\b(\d+) MiB L2\b", src)
    assert quotes and set(quotes) == {str(l2 // 2**20)}, quotes


def _flash_bench() -> ModuleType:
    return load_script(ROOT / "bench" / "flash_fwd.py", "flash_bench")


def test_ch10_reads_the_newest_report_by_the_date_inside_it(tmp_path: Path) -> None:
    """10 · section 5 reads the newest report that covers every configuration, by the date its header records,
    never by file name (whose last part is a commit hash: sorting names once loaded an older run)."""
    import shutil

    fb = _flash_bench()
    chosen = fb.latest_report()
    covering = [p for p in RESULTS.glob("flash_fwd_bench_*.json") if fb.covers_the_anchors(json.loads(p.read_text()))]
    assert chosen == max(covering, key=fb.recorded_date) and len(covering) >= 2
    cell = _sources("10")["cfcd915a"]
    assert "flash_bench.latest_report()" in cell and not re.search(r"sorted\([^)]*glob", cell)
    assert f"report: {chosen.with_suffix('.md').name} written {fb.recorded_date(chosen)}" in _output("10", "cfcd915a")
    # names that sort the other way round do not change the choice
    old, new = sorted(covering, key=fb.recorded_date)[:2]
    for src, name in ((old, "flash_fwd_bench_2026-12-01_zzzzzzz"), (new, "flash_fwd_bench_2026-12-01_0000000")):
        for suffix in (".json", ".md"):
            shutil.copy(src.with_suffix(suffix), tmp_path / f"{name}{suffix}")
    assert fb.latest_report(tmp_path).name == "flash_fwd_bench_2026-12-01_0000000.json"


def _flash_ranges(rows: list[dict], a: str | None, b: str, d: int, configs: list[tuple] | None = None) -> list[float]:
    fb = _flash_bench()
    out = []
    for dd, n, causal in configs or fb.CONFIGS:
        if dd != d:
            continue
        sel = [r for r in rows if (r["d"], r["n"], r["causal"]) == (dd, n, causal)]
        x = {r["round"]: r["tflops"] for r in sel if r["who"] == (a or fb.default_variant(d))}
        y = {r["round"]: r["tflops"] for r in sel if r["who"] == b}
        out += [x[k] / y[k] for k in x if k in y]
    return out


def test_ch10_quotes_the_report_its_table_reads() -> None:
    """10 · 0, section 6 and the FlashAttention-4 cell: ranges over the rounds of the report section 5 reads."""
    fb = _flash_bench()
    rows = json.loads(fb.latest_report().read_text())
    r128, r64 = (_flash_ranges(rows, None, "sdpa cudnn", d) for d in (128, 64))
    below = [(n, c) for d, n, c in fb.CONFIGS if d == 128 and max(_flash_ranges(rows, None, "sdpa cudnn", 128,
                                                                                [(d, n, c)])) < 1.0]
    short = _flash_ranges(rows, None, "sdpa cudnn", 64, [(64, 4096, True)])
    left = _text("10", "04cdfcc0")
    assert f"at d = 128: {min(r128):.2f}–{max(r128):.2f}× over the four configurations" in left
    assert below == [(4096, False)] and "below 1.00× in every round only at N = 4096, not causal" in left
    assert f"At d = 64 it is {min(r64):.2f}–{max(r64):.2f}×" in left
    assert min(short) == min(r64) and f"shortest at N = 4096 causal ({min(short):.2f}–{max(short):.2f}×)" in left
    # and today's defaults, from the newer run the cell names (per-round ratios to cuDNN, every anchor)
    newer = re.search(r"`bench/results/(flash_fwd_bench_[^`]+\.md)`", left).group(1)
    per_round = [float(x) for m in re.finditer(r"^\| (?:64|128) \| \d+ \| (?:yes|no) \| [^|]+ \| ch10 defaults \| "
                                                r"[^|]+ \| ([\d.]+)–([\d.]+) ", (RESULTS / newer).read_text(), re.M)
                 for x in m.groups()]
    assert len(per_round) == 16, per_round
    assert f"today's defaults ran {min(per_round):.2f}–{max(per_round):.2f}× cuDNN over the eight anchors" in \
        " ".join(left.split())
    slow = _flash_ranges(rows, "sdpa cudnn", "ch09 tiles", 128)
    single = _recorded("ch09.flash_tiles_d128")
    intro = _text("10", "34974f65")
    assert f"still {min(slow):.1f}–{max(slow):.1f}× faster on an H200 at d = 128 (in the three-round report" in intro
    assert f"{single['library_tflops'] / single['tflops']:.1f}× in section 3's single run, where cuDNN measured " \
           f"{single['library_tflops']:.0f} TFLOP/s" in intro
    # the FlashAttention-4 cell quotes its own run: test_ch10_against_flashattention_4_as_the_cited_run_measured


def _ncu_table(report: str) -> dict[str, list[str]]:
    """An ncu comparison file's first table: row label -> its cells."""
    rows = {}
    for line in (RESULTS / report).read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and len(cells) > 2:
            rows.setdefault(cells[0], cells[1:])
    return rows


def test_ch10_profile_numbers_are_the_files() -> None:
    """10 · the FlashAttention-3/4 cells: the XU pipe (measured, not 'to measure next'), the tensor pipe and the
    barrier stalls beside FlashAttention-4, and the d = 64 profile's busiest pipe."""
    t = _ncu_table("ncu_ch10_vs_fa4_2026-12-01.md")  # columns: ch10 d=128, FA4 d=128, ch10 d=64, FA4 d=64
    tensor, barrier = t["tensor pipe active (% of elapsed)"], t["warps stalled on a barrier, per issue"]
    # columns: ch10 d=128 12-01, today, FA4 d=128 12-01, ch10 d=64 12-01, today, FA4 d=64 12-01 (today in bold)
    xu = [c.strip("*") for c in _ncu_table("ncu_ch10_2026-12-04_76a3704.md")["XU (exp2) pipe, % of peak"]]
    fa = " ".join(_text("10", "1025f936").split())
    assert f"exponentials is {xu[4]} % busy in the defaults at d = 64 against FlashAttention-4's {xu[5]} %" in fa
    assert "`bench/results/ncu_ch10_2026-12-04_76a3704.md`" in fa
    assert "to measure next" not in fa
    busiest = re.search(r"Tensor is the highest-utilized pipeline \(([\d.]+)%\)",
                        (RESULTS / "ncu" / "flash_fwd_ch10_pingpong3_d64_n8192_e9e13a5.txt").read_text())
    assert f"the tensor pipe is the busiest ({float(busiest.group(1)):.0f} %" in fa
    # the FlashAttention-4 cell quotes a later profile: test_ch10_against_flashattention_4_as_the_cited_run_measured
    assert tensor and barrier


def test_ch10_states_the_ncu_rate_as_the_hypothesis_chapter_08_calls_it() -> None:
    """Issue 41: 10 · section 6 does not state as fact what 08 calls a hypothesis (ncu above a looped rate)."""
    ncu = json.loads((RESULTS / "gemm_steps_ncu_2026-12-01_7ed14f1.json").read_text())["5_cluster"]
    left, gemm = _text("10", "04cdfcc0"), _text("08", "c27")
    assert "can run above a looped rate" not in left and "may run above a looped rate" in left
    assert f"chapter 08's GEMM ran {ncu['tflops']:.0f} TFLOP/s under ncu" in left and "hypothesis" in left
    assert "that is a hypothesis, not a measurement" in gemm


def _bwd_rows(report: str) -> list[dict]:
    return json.loads((RESULTS / report).read_text())["bench"]


def _bwd_range(rows: list[dict], who: str, base: str, d: int | None = None) -> tuple[float, float]:
    """min and max over configurations and rounds of who / base, same round."""
    out = []
    for cfg in {(r["d"], r["n"], r["causal"]) for r in rows if d is None or r["d"] == d}:
        sel = [r for r in rows if (r["d"], r["n"], r["causal"]) == cfg]
        a = {r["round"]: r["tflops"] for r in sel if r["who"] == who}
        b = {r["round"]: r["tflops"] for r in sel if r["who"] == base}
        out += [a[k] / b[k] for k in a if k in b]
    return min(out), max(out)


def test_ch11_wgmma_excess_is_the_dq_split() -> None:
    """11 · what is left: 67.2 M wgmma against cuDNN's 58.7 M is 14 % more (not 13 %), and it is the dQ share's N = 64
    split: 28 instructions per consumer and step instead of 32 gives cuDNN's count."""
    pingpong = float(_ncu_table("ncu_ch11_pingpong_2026-12-02.md")["wgmma instructions (M)"][0])
    chapters = _ncu_table("ncu_ch11_vs_cudnn_fa4_2026-12-01.md")["wgmma instructions (M)"]
    assert int(pingpong / float(chapters[1]) * 100) - 100 == 14  # 67.24 M / 58.72 M: 14.5 % more
    mine, theirs = float(chapters[0]), float(chapters[1])
    # per step and consumer: S 8 + dP 8 + dV 4 + dK 4 + dQ 8 (64 x 64 x 128 keys), or dQ 4 (64 x 128 x 64 keys)
    d, bq, keys = 128, 64, 64
    split = d // 16 * 2 + bq // 16 * 2 + 2 * keys // 16
    full = d // 16 * 2 + bq // 16 * 2 + keys // 16
    assert (split, full) == (32, 28) and abs(mine * full / split - theirs) < 0.05
    left = _text("11", "2170a3d3")
    assert f"{round(mine / theirs * 100) - 100} % more wgmma instructions than cuDNN for the same work " \
           f"({mine:.1f} M against {theirs:.1f} M)" in left and "14 % more" in left
    assert f"{full} instead of {split} per step" in left
    for cid, text in _sources("11").items():
        assert "13 % more" not in text, cid


def test_ch11_the_options_that_left_are_named_and_gone() -> None:
    """11 · what is left, and section 5: the options that left the kernel are named as such (not 'the first four',
    a list that included three stages, still an option), and none of them is in the kernel a learner reads."""
    left, measured = _text("11", "2170a3d2"), _text("11", "69d4d951")
    assert "first four" not in left
    for option in ("OVERLAP=1/2", "ORDER", "DQ_SUM"):
        assert f"(`{option}`)" in left
    for path in ("solutions/ch11_flash_bwd/ch11_flash_bwd.cu", "solutions/variants/ch11_dq_lag.cu",
                 "exercises/ch11_flash_bwd.cu"):
        assert not re.search(r"\b(OVERLAP|ORDER|DQ_SUM)\b", (ROOT / path).read_text()), path
    assert "DQ_SUM" not in measured and "STAGES" not in left


def test_ch11_dq_modes_as_measured() -> None:
    """11 · section 3: atomics against the TMA reduce-add (three rounds, every configuration), and the slots'
    cost, each from the report the prose names."""
    rows = _bwd_rows("flash_bwd_2026-12-01_a2b4b3b.json")
    a128, a64 = (_bwd_range(rows, "ch11 dQ TMA reduce", "ch11 dQ atomicAdd", d) for d in (128, 64))
    prose = _text("11", "040dae62")
    assert f"atomics took {a128[0]:.2f}–{a128[1]:.2f}× the TMA reduce-add's time at d = 128 and " \
           f"{a64[0]:.2f}–{a64[1]:.2f}× at d = 64" in prose and "flash_bwd_2026-12-01_a2b4b3b.md" in prose
    table = re.findall(r"^\| (\d+) \| \d+ \| (?:no|yes) \| (ch11 dQ TMA reduce|ch11 dQ slots \(deterministic\)) \| "
                       r"[\d–]+ \| ([\d.]+)–([\d.]+) \|$", (RESULTS / "flash_bwd_2026-12-02_d9c69ef.md").read_text(),
                       re.M)
    got = {}
    for d, who, lo, hi in table:
        got.setdefault((int(d), who), []).extend([float(lo), float(hi)])
    slots, tma = "ch11 dQ slots (deterministic)", "ch11 dQ TMA reduce"
    cost = _text("11", "1bc5d5f7")
    assert f"slots ran {min(got[128, slots]):.2f}–{max(got[128, slots]):.2f}× cuDNN at d = 128 and " \
           f"{min(got[64, slots]):.2f}–{max(got[64, slots]):.2f}× at d = 64, against " \
           f"{min(got[128, tma]):.2f}–{max(got[128, tma]):.2f}× and {min(got[64, tma]):.2f}–{max(got[64, tma]):.2f}×" \
        in cost
    assert "all of it memory traffic" not in cost and "semaphore" in cost


def test_ch11_build_shown_is_dq_mode_1() -> None:
    """11 · cell 8 describes the instructions of the build printed above it (DQ_MODE 1: UTMAREDG, no REDG)."""
    out = _output("11", "49702559")
    assert "-DDQ_MODE=1" in out and "'UTMAREDG': " in out and "REDG'" not in out.replace("UTMAREDG'", "")
    prose = " ".join(_text("11", "daa739d2").split())
    assert "`UTMAREDG`" in prose and "`REDG`" not in prose
    # d = 128 parks dQ's part: a thread's 32 floats of the 64 x 64 part in 16-byte stores, one reduce-add per part
    assert attention_bwd_parks(128) and "'STS': 8," in out and "eight 16-byte stores a thread" in prose
    assert "'UTMAREDG': 2," in out and "two per step" in prose


def test_ch11_profile_clock_and_reductions() -> None:
    """11 · the profile: durations named as under ncu's clock (the files' GPC clock), the run's own start clock,
    and the L2 reduction sectors set against section 3's count of additions."""
    clocks = [float(c) for report in ("ncu_ch11_vs_cudnn_fa4_2026-12-01.md", "ncu_ch11_pingpong_2026-12-02.md")
              for c in _ncu_table(report)["GPC clock under ncu (GHz)"]]
    start = re.search(r"SM clock at start \(MHz now, max; °C; W\): (\d+) MHz",
                      (RESULTS / "flash_bwd_2026-12-02_69085c9.md").read_text())
    prose = _text("11", "87bc8c51")
    assert f"({min(clocks):.2f}–{max(clocks):.2f} GHz in these runs, against {start.group(1)} MHz at the start" in prose
    sectors = float(_ncu_table("ncu_ch11_vs_cudnn_fa4_2026-12-01.md")["L2 reduction sectors (M)"][0]) * 1e6
    adds = re.search(r"d=128 N=8192 causal=False: ([\d.]+) G fp32 additions into dQ \(([\d.]+) GB",
                     _output("11", "434898f1"))
    model = float(adds.group(2))
    bullets = _text("11", "87bc8c52")
    assert f"are {sectors * 32 / 1e9:.1f} GB at d = 128: {sectors * 32 / 1e9 / model:.1f}× the {model} GB" in bullets


def test_ch11_what_is_left_quotes_its_runs() -> None:
    """11 · section 8: the default build's (FA3's layout) ratios in the run the cell names, and the training step
    times of the newest training record."""
    left = _text("11", "2170a3d2")
    report = re.search(r"`bench/results/(flash_bwd_[^`]+)\.md`", left).group(1)
    rows = _bwd_rows(f"{report}.json")
    ours, before = re.search(r"This kernel, the report's `([^`]+)`", left).group(1), "ch11 default"
    c128, c64 = (_bwd_range(rows, ours, "sdpa cudnn", d) for d in (128, 64))
    fa4, fa4_cudnn = _bwd_range(rows, ours, "FlashAttention-4"), _bwd_range(rows, "FlashAttention-4", "sdpa cudnn")
    flat = " ".join(left.split())
    assert f"runs {c128[0]:.2f}–{c128[1]:.2f}× cuDNN at d = 128 and {c64[0]:.2f}–{c64[1]:.2f}× " \
           f"at d = 64, {fa4[0]:.2f}–{fa4[1]:.2f}× FlashAttention-4 (whose backward ran " \
           f"{fa4_cudnn[0]:.2f}–{fa4_cudnn[1]:.2f}× cuDNN" in flat
    # the order before, slower by the median over rounds per shape, the range over shapes at each d
    for d in (128, 64):
        gain = [100 * (statistics.median(r["tflops"] for r in rows if (r["d"], r["n"], r["causal"]) == s
                                          and r["who"] == ours)
                       / statistics.median(r["tflops"] for r in rows if (r["d"], r["n"], r["causal"]) == s
                                           and r["who"] == before) - 1)
                for s in {(r["d"], r["n"], r["causal"]) for r in rows if r["d"] == d}]
        assert f"{min(gain):.1f}–{max(gain):.1f} % {'faster at d = 128' if d == 128 else 'at d = 64'}" in flat, gain
    from tklab.kernels import attention_bwd

    assert attention_bwd.build(128).options == attention_bwd.build(128, DQ_UNDER_DK=1).options  # "this kernel"
    assert attention_bwd.build(64).swapab and attention_bwd.build(128).swapab  # "That build is the default"
    from tklab import recorded

    run = recorded.newest(RESULTS.glob("train_tiny_gpt_*.json"), lambda p: json.loads(p.read_text())["meta"]["date"])
    summary = json.loads(run.read_text())["summary"]  # the record section 7 plots: the newest by its own date
    step = summary["median_step_ms"]
    assert f"took {step['course']:.1f} ms with the course's kernels against SDPA's {step['sdpa']:.1f} ms" in flat
    assert f"parted by {summary['max_abs_deviation_smoothed']:.3f} nats" in flat
    assert ("more than the" in flat) == (not summary["agree"]), "the prose says whether the criterion was met"


def test_ch11_transposes_as_the_hardware_does_them() -> None:
    """11 · 0 and the products: four of the five products use a transposed matrix, free for 16-bit types only;
    the transpose is wgmma's flag, and a shuffle cannot make Pᵀ (its rows live in all four warps)."""
    intro, why = _text("11", "b2789b72"), _text("11", "d8bdbe31")
    assert "four of them with a **transposed** matrix (Kᵀ, Vᵀ, Pᵀ, dSᵀ)" in intro and "FP8" in intro
    assert "imm-trans-a" in why and "all four warps" in why and "descriptor reads them" not in why


def test_ch07_names_both_fence_conventions_after_mbarrier_init() -> None:
    """07 · the proxies: the library's fence after mbarrier init and the CUDA guide's TMA examples' fence are both
    named, the library's is the one in mbarrier.cuh, and no sentence claims 'exactly three fences'."""
    lib = (ROOT / "cuda" / "tk" / "hopper" / "mbarrier.cuh").read_text()
    prose = _text("07", "c16a2")
    assert "fence.mbarrier_init.release.cluster" in lib
    assert "`fence.mbarrier_init.release.cluster`" in prose and "`fence.proxy.async.shared::cta` after the" in prose
    assert "exactly three" not in prose


def test_ch04_says_what_chapter_07_measured_of_tma_layouts() -> None:
    """Issue 41: chapter 04 no longer says TMA 'writes it dense' (chapter 07's measured model: a box row narrower
    than its swizzle span takes the whole span), nor names instructions chapters 05-08 introduce in its reasons."""
    from tklab import layouts

    row1 = [layouts.tma_box_offset(1, c, box_cols=32, swizzle="128B") for c in range(32)]
    assert (min(row1), max(row1) + 2) == (128, 192)  # a 64-byte row starts a whole 128-byte line later
    texts = {cid: src for cid, src in _sources("04").items() if _cells("04")[cid]["cell_type"] == "markdown"}
    assert not any("dense" in t or "TMA box" in t for t in texts.values())
    assert "rows back to back, or one swizzle span apart" in texts["c10"]
    assert "Wider loads move 16 bytes per lane (`LDS.128`, chapter 03's `float4`)" in texts["c10b"]


# ---- issue 41, item 4: a fresh expert read of chapters 07-11, each corrected statement held to its source ---------
def test_ch07_mbarrier_answers_read_as_the_prose_says() -> None:
    """07 · the hardware's test_wait answers, in the order the prose walks them (fresh, 0/1/2 arrivals, phase 1)."""
    answers = _recorded("ch07.mbarrier_phases")["answers"]
    said = {0: "not yet", 1: "done"}
    prose = _text("07", "c15")
    assert answers[0] == 1 and "parity 1 on a fresh barrier (done" in prose
    assert f"parity 0 after 0, 1 and 2 arrivals ({', '.join(said[a] for a in answers[1:4])}), parity 1 just after " \
           f"that ({said[answers[4]]})" in prose
    assert f"`{answers}`" in prose


def test_ch07_a_tile_128_bytes_late_takes_the_next_lines_key() -> None:
    """07 · where a swizzled tile may start: 128 bytes past the pattern's start, the tile's row 0 is XORed with the
    key of the hardware's line 1 (not: the hardware's line 0 holds row 1, which is a tile starting 128 bytes early)."""
    from tklab import layouts

    base = 1024 + 128  # 128 bytes past a 1024-byte boundary
    assert [layouts.swizzle(base + 16 * j, "128B") - base for j in range(8)] == [16 * (j ^ 1) for j in range(8)]
    prose = _text("07", "c16e")
    assert "128 bytes later and your row 0 sits on the hardware's line 1" in prose
    assert "line 0 is your row 1" not in prose


def test_ch08_b_is_read_through_the_transpose_flag() -> None:
    """08 · section 2: mma_AB reads B MN-major, i.e. with wgmma's transpose flag for B set (PTX's imm-trans-b)."""
    mma = (ROOT / "cuda" / "tk" / "ops" / "warpgroup" / "mma.cuh").read_text()
    instr = (ROOT / "cuda" / "tk" / "hopper" / "wgmma_instr.cuh").read_text()
    assert "mma_AB(rt<float, 16, N>& d, const A& a, const SB& b, bool accumulate = true) { mma<major::k, major::mn>" \
        in mma
    assert 'MN-major ("transposed")' in instr
    prose = _text("08", "c06")
    assert "B MN-major: row-major B is read as stored, with wgmma's transpose flag for B (`imm-trans-b`) set" in prose
    assert "needs no transpose" not in prose


def test_ch08_k_loop_length_per_step() -> None:
    """08 · what the compiler made of every step: the K loop's length, step 1 apart (it waits and refills itself)."""
    import statistics

    from tklab import course, gemm

    lengths = {name: len(course.main_loop(gemm.compiled(s).sass)) for name, s in gemm.STEPS.items()}
    first = lengths.pop("1_one_warpgroup")
    assert max(lengths.values()) - min(lengths.values()) <= 5, lengths  # "about" one number for steps 2 on

    def about(n: float) -> int:
        return 5 * round(n / 5)

    prose = _text("08", "c21")
    assert f"about {about(statistics.median(lengths.values()))} instructions around the four HGMMA from step 2 on " \
           f"(about {about(first)} in step 1" in prose


def test_ch08_cublas_kernel_is_named_as_recorded() -> None:
    """08 · reading the table: cuBLAS's kernel named as the notes record it, its name read field by field; no
    launch shape the records do not hold."""
    notes = (ROOT / "bench" / "notes" / "gemm_wgmma.md").read_text()
    name = re.search(r"`\.\.\._(\d+x\d+_\d+x\d+_\dx\d\w*)`", notes).group(1)
    tm, tn, bk, stages, cx, cy = map(int, re.match(r"(\d+)x(\d+)_(\d+)x(\d+)_(\d)x(\d)", name).groups())
    prose = _text("08", "c27")
    assert f"`…_{name}` (`bench/notes/gemm_wgmma.md`)" in prose
    assert f"{tm} × {tn} tiles, {bk}-deep K-slices in {stages} stages, {cx * cy}-block clusters" in prose
    assert "coop" in name and "cooperate on one tile" in prose
    assert "132 blocks" not in prose and "persistent" not in prose.split("###")[0]


def test_ch09_scores_per_head_and_the_register_moves() -> None:
    """09 · the intro's N² at N = 8192, and the register moves the notes counted (for the block width they name)."""
    assert f"{round(8192 ** 2 / 1e6)} million numbers (8192²) *per head*" in _text("09", "5de33d6b")
    notes = (ROOT / "bench" / "notes" / "flash_fwd.md").read_text()
    hmma, keys, moves = re.search(r"SASS of the key loop, (\d+) HMMA per trip, (\d+)-key blocks\): (\d+) register "
                                  r"moves", notes).groups()
    prose = _text("09", "42dde214")
    assert f"they cost {moves} register moves per {hmma} `HMMA`, counted when the key blocks were {keys} wide" in prose


def test_ch10_two_rings_and_the_defaults_fa3_goes_beyond() -> None:
    """10 · the producer fills two rings (K and V) of STAGES stages; FlashAttention-3's persistent grid is beyond the
    kernel's defaults (PERSISTENT is an option, off by default); the d = 64 profile is named as the variant it is."""
    from tklab.kernels import attention
    from tklab.kernels.attention import DEFAULTS

    src = (ROOT / "solutions" / "ch10_flash" / "ch10_flash.cu").read_text()
    assert "pipeline<STAGES> k_pipe, v_pipe;" in src
    stages = DEFAULTS["hopper"][128]["STAGES"]
    assert f"into two rings of {stages} stages (one for K, one for V)" in _text("10", "a0bdd3e7")
    fa = _text("10", "1025f936")
    assert all("PERSISTENT" not in DEFAULTS["hopper"][d] for d in (64, 128))  # an opt-in variant's option
    assert all(attention.build("hopper", d).source == ROOT / "solutions" / "ch10_flash" / "ch10_flash.cu"
               for d in (64, 128))
    assert "adds beyond this kernel's defaults" in fa
    profile = (RESULTS / "ncu" / "flash_fwd_ch10_pingpong3_d64_n8192_e9e13a5.txt").read_text()
    assert "ch10 ping-pong 3 stages ran" in profile
    assert DEFAULTS["hopper"][64]["SCHEDULE"] != 2 or DEFAULTS["hopper"][64]["STAGES"] != 3  # not the default
    assert "a profile of its 3-stage ping-pong variant" in fa


def test_ch10_progression_cudnn_rates_are_the_records() -> None:
    """10 · the progression: cuDNN's rate beside chapter 09's row and beside the others, and overlap = ping-pong."""
    cudnn09 = _recorded("ch09.flash_tiles_d128")["library_tflops"]
    others = [_recorded(k)["library_tflops"] for k in ("ch10.plain", "ch10.overlap", "ch10.pingpong",
                                                         "ch10.pingpong_bc176")]
    overlap, pingpong = (_recorded(k)["tflops"] for k in ("ch10.overlap", "ch10.pingpong"))
    prose = _text("10", "6b51a3a7")
    assert f"cuDNN measured {cudnn09:.0f} TFLOP/s beside chapter 09's row and {min(others):.0f}–{max(others):.0f} " \
           f"beside the others" in prose
    assert f"{overlap:.0f}" == f"{pingpong:.0f}" and f"({overlap:.0f} TFLOP/s both" in prose


def test_ch11_slots_share_of_the_reduce_adds_speed() -> None:
    """11 · what determinism costs: the slots' TFLOP/s over the TMA reduce-add's, configuration by configuration
    (the middle of each range in the report named), as a share kept, not a share lost."""
    rows = re.findall(r"^\| (\d+) \| (\d+) \| (no|yes) \| (ch11 dQ TMA reduce|ch11 dQ slots \(deterministic\)) \| "
                      r"(\d+)–(\d+) \|", (RESULTS / "flash_bwd_2026-12-02_d9c69ef.md").read_text(), re.M)
    rate: dict[tuple, dict[str, float]] = {}
    for d, n, causal, who, lo, hi in rows:
        rate.setdefault((d, n, causal), {})[who] = (float(lo) + float(hi)) / 2
    kept = [r["ch11 dQ slots (deterministic)"] / r["ch11 dQ TMA reduce"] for r in rate.values()]
    assert len(kept) == 8
    prose = _text("11", "1bc5d5f7")
    assert f"the slots kept {min(kept) * 100:.0f}–{max(kept) * 100:.0f} % of the reduce-add's speed" in prose
    assert "23–43 % of the speed" not in prose


def test_ch11_exercise_emulated_lengths_are_the_specs() -> None:
    """11 · the exercise: the lengths the CPU emulator runs, for the main build and the d = 64 build, from the spec."""
    from tklab.grading import cases
    from tklab.grading.specs import from_file, spec_file

    spec = from_file(spec_file("ch11_flash_bwd"), "ch11_flash_bwd")
    main = sorted({d["N"] for d in cases.cases(spec)})
    (d64,) = spec.builds
    small = sorted({d["N"] for d in cases.cases(d64)})
    said = lambda ns: ", ".join(map(str, ns[:-1])) + f" and {ns[-1]}"  # noqa: E731
    prose = _text("11", "f0c38eb4")
    assert f"(lengths {said(main)} at d = 128; {said(small)} at d = 64)" in prose


def test_ch07_chapter_10s_tile_is_copied_in_the_pieces_said() -> None:
    """07 · TMA's swizzle modes: chapter 10's K/V tile (its default key block × d = 128) takes the boxes said."""
    import numpy as np

    from tklab import tma
    from tklab.kernels.attention import DEFAULTS

    bc, d = DEFAULTS["hopper"][128]["BC"], 128
    strides = tuple(int(s) * 2 for s in np.cumprod((1, d, 1000, 16))[::-1])
    p = tma.plan(0x10000, (2, 16, 1000, d), strides, "bfloat16", (bc, d))
    assert f"chapter 10 copies each {bc} × {d} tile in {p.copies_per_tile} pieces" in _text("07", "c16b")


def test_ch07_and_ch08_exercise_cells_name_their_checks_shapes() -> None:
    """07 · the ring exercise and 08 · the wgmma exercise: the shapes their cells name are the specs' cases."""
    from tklab.grading.specs import from_file, spec_file

    ring = from_file(spec_file("ch07_tma_ring"), "ch07_tma_ring")
    shapes = [f"{c['M']}²" if c["M"] == c["N"] else f"{c['M']}×{c['N']}" for c in ring.cases]
    prose = _text("07", "c22b")
    assert all(s in prose for s in shapes), shapes
    assert any(c.get("tma_order") == 1 for c in ring.emu_cases) and "(once in reverse order)" in prose
    wg = from_file(spec_file("ch08_wgmma"), "ch08_wgmma")
    big, one, wraps = wg.cases
    assert big["M"] == big["N"] == big["K"] and (one["M"], one["N"], one["K"]) == (64, 256, 64)  # one tile, one slice
    assert wraps["K"] // 64 > 4  # more K-slices than the ring's 4 stages: it wraps
    prose = _text("08", "c08b")
    assert f"runs {big['M']}³, one tile with one K-slice, and {wraps['M']}×{wraps['N']}×{wraps['K']} (the ring wraps)" \
        in prose


def test_ch08_step1_shared_memory_and_the_last_wave() -> None:
    """08 · step 1's shared memory (one block per SM; the 2-stage variant fits two) and the last wave at 4096³."""
    from tklab import course, gemm

    def smem(name: str) -> int:
        return gemm.launch_facts(gemm.compiled({**gemm.STEPS, **gemm.VARIANTS}[name]).module)["shared_bytes"]

    per_sm = course.HOPPER.smem_bytes
    one, two = smem("1_one_warpgroup"), smem("1_one_warpgroup_2stages")
    block = course.HOPPER.smem_reserved_per_block
    assert 2 * (one + block) > per_sm >= 2 * (two + block)
    assert f"With {round(one / 1024, -1):.0f} KB of shared memory one block fits per SM" in _text("08", "c12")
    (tiles,), sms = gemm.tile_grid(gemm.STEPS["2_warp_specialised"], 4096, 4096), 132  # the H200's SMs
    left = _text("08", "c27")
    assert f"{tiles} tiles on {sms} SMs are {tiles / sms:.2f} waves, so {sms - tiles % sms} SMs idle" in left


def test_ch10_chapter_09s_output_path_as_the_kernel_writes_it() -> None:
    """10 · the engines table: chapter 09 writes O through each warp's shared Q tile and 16-byte stores per lane."""
    src = (ROOT / "solutions" / "ch09_flash" / "ch09_flash.cu").read_text()
    lib = (ROOT / "cuda" / "tk" / "ops" / "warp" / "global_shared.cuh").read_text()
    assert "store(sm.q[w], out);" in src and "store_bounded(O, sm.q[w]" in src
    assert "*reinterpret_cast<uint4*>(base + size_t(r) * dst.stride + c)" in lib  # 16 bytes a lane, per chunk
    prose = _text("10", "5ccf21b3")
    assert "| output | each warp: through its shared Q tile, 16-byte stores per lane |" in prose
    assert "16 bytes per row" not in prose


def test_ch10_against_flashattention_4_as_the_cited_run_measured() -> None:
    """10 · the end: the defaults' speed against FlashAttention-4 and the profile's pipe numbers, read from the files
    the cell cites (each row's median over rounds of the same-round ratio)."""
    prose = _text("10", "1025f937")
    report = re.search(r"`bench/results/(flash_fwd_bench_[^`]+\.md)`", prose).group(1)
    table = (ROOT / "bench" / "results" / report).read_text()
    ratios = [float(m.group(1)) for m in re.finditer(
        r"^\| (?:64|128) \| \d+ \| (?:yes|no) \| [^|]+ \| ch10 defaults \|(?:[^|]*\|){3} [^|]*\(median ([\d.]+)\) \|",
        table, re.M)]
    assert len(ratios) == 8, ratios  # the eight anchors
    assert f"defaults run {min(ratios):.2f}–{max(ratios):.2f}× at the eight anchors" in prose
    profile = re.search(r"`bench/results/(ncu_ch10_[^`]+\.md)`", prose).group(1)
    rows = (ROOT / "bench" / "results" / profile).read_text()
    pipe = re.search(r"^\| tensor pipe active[^|]*\| ([\d.]+) \| \*\*([\d.]+)\*\* \| ([\d.]+) \| ([\d.]+) \| "
                     r"\*\*([\d.]+)\*\* \| ([\d.]+) \|", rows, re.M).groups()
    assert f"busy {pipe[1]} % of the time at d = 128 against FlashAttention-4's {pipe[2]} %, {pipe[4]} % against " \
           f"{pipe[5]} % at d = 64" in prose


def test_ch11_exercise_counts_its_planted_suite() -> None:
    """11 · the exercise: the numbers of planted mistakes and benign variants the prose gives are the suite's."""
    import tomllib

    suite = tomllib.loads((ROOT / "solutions" / "ch11_flash_bwd" / "planted.toml").read_text())
    prose = _text("11", "f0c38eb4")
    assert f"The check must fail {len(suite['mistake'])} planted typical mistakes" in prose
    assert f"pass {len(suite['benign'])} benign variants" in prose


def test_ch11_the_picture_cell_asserts_the_fragment_equality() -> None:
    """11 · section 2: the picture's cell printed the equality of the accumulator's k-slice and the A operand as
    True, and that S's key column spans all four warps (both computed from tklab.models.layouts)."""
    out = _output("11", "a1c0f3e1")
    assert "= its A-operand elements 0..7 of k-slice s: True" in out
    assert "sits in warps [0, 1, 2, 3]" in out


def test_ch11_fa4_step_is_the_reports_and_the_masks_branch_the_sass() -> None:
    """11 · section 8: FlashAttention-4's step beside this kernel's, from the report the cell reads (written by
    bench/sass_vs_fa4.py): the instruction counts the prose quotes, FA4's ten 16-byte stores and this kernel's
    smaller ones after its last wait, and the causal mask's branch of the 80-query FA4-step build, counted in its
    SASS as the instructions the step jumps over (a branch inside the loop whose target is the end of the mask)."""

    name = re.search(r'results / "(sass_vs_fa4_[^"]+\.md)"', "".join(_cells("11")["2170a3d5"]["source"])).group(1)
    lines = (RESULTS / name).read_text().splitlines()

    def loop(who: str) -> int:
        return int(next(ln for ln in lines if ln.startswith(f"| bwd d=128 | {who} |")).strip("|").split("|")[3])

    def events(who: str) -> str:
        return next(ln for ln in lines if ln.startswith(f"- bwd d=128, {who}:")).split("`")[1]

    fa4, ours = loop("FlashAttention-4"), loop("ch11 DQ_UNDER_DK=1")  # the chapter's kernel, named by its order
    step, step80 = loop("ch11 FA4 step (DQ_UNDER_DK, DQ_FRAGMENTS, STATS_EARLY)"), loop("ch11 FA4 step, QSTEP=80")
    text, out = _text("11", "2170a3d6"), _output("11", "2170a3d5")
    from tklab.kernels import attention_bwd
    from tklab.toolchain.loop_events import hot_loop

    live = len(hot_loop(attention_bwd.compiled(attention_bwd.build(128))["flash_bwd"].sass))  # the kernel read now
    assert f"the step is {step} instructions against this kernel's {live} above, and {step80} per 80-query step " \
           f"where FlashAttention-4 has {fa4}" in " ".join(text.split())
    assert f"this kernel: a step of 16x64 (keys x queries) per warp, {live} instructions" in out
    assert f"this kernel, dQ's part at its (row, column): a step of 16x64 (keys x queries) per warp, {ours} " \
           "instructions" in out  # the report's row of the kernel before the parking, compiled again here
    assert f"FlashAttention-4: a step of 16x80 (keys x queries) per warp, {fa4} instructions" in out
    assert "STS.128x10" in events("FlashAttention-4") and "ten 16-byte stores" in text
    # the cell compiles this kernel both ways: parked (d = 128's build) eight 16-byte stores, at its place the report's
    parked, placed = out.split("this kernel: a step")[1], out.split("this kernel, dQ's part at its (row, column)")[1]
    assert "STS.128x8" in parked and "STS.128" not in placed.split("this kernel: a step")[0]
    tail = events("ch11 DQ_UNDER_DK=1").split("wait<=1")[-1].split("wait<=0")[0]  # stored while dK runs
    stores = sum(int(m.group(2) or 1) for m in re.finditer(r"\bSTS(\.64)?(?:x(\d+))?\b", tail))
    assert f"{stores} stores of 4 or 8 bytes" in " ".join(text.split()), tail  # 32 floats: 4 pairs, 24 singles
    length, branch, _ = _bwd_loop_and_mask_branch(DQ_UNDER_DK=1, DQ_FRAGMENTS=1, STATS_EARLY=1, QSTEP=80)
    assert length == step80 and f"{branch} of the difference are the causal mask's branch" in text


def test_ch10_fa4_key_block_is_the_reports() -> None:
    """10 · what is left: FlashAttention-4's key block beside the chapter's, from the report the cell reads: where
    FA4 waits for its P·V (after how many of its exponentials), the mask code's share of the loop, and the
    per-score counts with MASK_SPLIT=1 at both head dimensions."""
    name = re.search(r'"(sass_vs_fa4_[^"]+\.md)"', "".join(_cells("10")["1025f939"]["source"])).group(1)
    lines = (RESULTS / name).read_text().splitlines()

    def row(d: int, who: str) -> list[str]:
        return [c.strip() for c in next(ln for ln in lines if ln.startswith(f"| fwd d={d} | {who} |")).strip("|")
                .split("|")]

    def events(who: str) -> str:
        return next(ln for ln in lines if ln.startswith(f"- fwd d=128, {who}:")).split("`")[1]

    text = _text("10", "1025f93b")
    fa4 = events("FlashAttention-4")
    before = re.search(r"wait<=1 expx(\d+) SYNCS\.ARRIVE wait<=0", fa4)
    total = sum(int(n or 1) for n in re.findall(r"\bexp(?:x(\d+))?\b", fa4))
    assert before and f"after {before.group(1)} of its {total} exponentials" in text, fa4
    assert re.search(r"wait<=1 expx\d+ SYNCS\.ARRIVE wait<=0", events("ch10 default"))  # all under its own P·V
    long = int(row(128, "ch10 default")[3]) / int(row(128, "ch10 MASK_SPLIT=1")[3])
    assert f"{long:.1f} times as long" in text
    per = {d: (row(d, "ch10 MASK_SPLIT=1")[4], row(d, "FlashAttention-4")[4]) for d in (128, 64)}
    assert f"({per[128][0]} and {per[128][1]} per 1024 scores at d = 128, {per[64][0]} and {per[64][1]} at" in text


def test_ch11_next_steps_quote_the_profile_beside_fa4() -> None:
    """11 · section 8, what the profiles point at: the instruction counts, their ratio and the tensor pipe's busy
    share of this kernel and FlashAttention-4 at d = 128 from the ncu table the cell names, and the instructions a
    query costs each step from the SASS report the section reads (the chapter's row is named by its order)."""
    text = " ".join(_text("11", "2170a3d3").split())
    name = re.search(r"`bench/results/(ncu_ch11_vs_fa4_[^`]+\.md)`", text).group(1)
    table = _ncu_table(name)  # columns: ch11 (dK first), ch11 DQ_UNDER_DK=1, FA4 at d = 128, then the same at 64
    ours, fa4 = (float(table["instructions executed (M)"][i]) for i in (1, 2))  # DQ_UNDER_DK=1 d=128, FA4 d=128
    pipe = [table["shared pipe (wgmma) active, % of active cycles"][i] for i in (1, 2)]
    assert f"executed {ours / fa4:.2f}× FlashAttention-4's instructions for the same work ({ours:.0f} M against " \
           f"{fa4:.0f} M) and kept the tensor pipe busy {pipe[0]} % of its active cycles against {pipe[1]} %" in text
    lines = (RESULTS / "sass_vs_fa4_2026-12-05_0f4d383.md").read_text().splitlines()
    row = next(ln for ln in lines if ln.startswith("| bwd d=128 | FlashAttention-4 |")).strip("|").split("|")
    fa4_per_query = int(row[3]) / int(row[2].strip().split("x")[1])  # its non-causal kernel has no mask code
    length, branch, qstep = _bwd_loop_and_mask_branch()  # the chapter's kernel: an unmasked step jumps the mask
    unmasked = (length - branch) / qstep
    length, branch, qstep = _bwd_loop_and_mask_branch(DQ_FRAGMENTS=0)  # the build ncu profiled: the part in place
    placed = (length - branch) / qstep
    assert f"an unmasked step of this kernel runs {unmasked:.1f} instructions a query ({placed:.1f} with the part at " \
           f"its place) and FlashAttention-4's {fa4_per_query:.1f}" in text
    assert "before dQ's part was parked" in text and attention_bwd_parks(128) and not attention_bwd_parks(64)


def test_ch11_fragments_timing_is_the_reports() -> None:
    """11 · section 8: DQ_FRAGMENTS against this kernel, per shape the median over rounds, the range over shapes and
    over both runs the cell names; its ratio to cuDNN per round; the 80-query step against the 64-query one."""
    text = " ".join(_text("11", "2170a3d6").split())
    runs = [_bwd_rows(name) for name in ("flash_bwd_2026-12-05_63ccedc_fragments.json",
                                         "flash_bwd_2026-12-05_63ccedc_fragments_d128.json")]
    assert "`bench/results/flash_bwd_2026-12-05_63ccedc_fragments.md` and `..._fragments_d128.md`" in text
    assert "ratio of the median TFLOP/s per shape in each of two runs" in text

    def gains(who: str, base: str, d: int) -> list[float]:
        out = []
        for rows in runs:
            for shape in {(r["d"], r["n"], r["causal"]) for r in rows if r["d"] == d}:
                sel = [r for r in rows if (r["d"], r["n"], r["causal"]) == shape]
                if not any(r["who"] == who for r in sel):
                    continue
                out.append(100 * (statistics.median(r["tflops"] for r in sel if r["who"] == who)
                                  / statistics.median(r["tflops"] for r in sel if r["who"] == base) - 1))
        return out

    frag, default = "ch11 dQ under dK + fragments", "ch11 default"
    g128, g64 = gains(frag, default, 128), gains(frag, default, 64)
    assert min(g128) > 0 and max(g64) < 0, (g128, g64)
    assert f"at d = 128 {min(g128):.1f}–{max(g128):.1f} % faster than stored at its place" in text
    assert "parked at d = 128 only" in text and attention_bwd_parks(128) and not attention_bwd_parks(64)
    assert f"at d = 64 {-max(g64):.1f}–{-min(g64):.1f} % slower" in text
    ratios = []
    for rows in runs:
        lo, hi = _bwd_range(rows, frag, "sdpa cudnn", 128)
        ratios += [lo, hi]
    assert f"{min(ratios):.2f}–{max(ratios):.2f}× cuDNN" in text
    step80 = gains(frag + " 80", frag, 128)
    assert f"within {max(abs(x) for x in step80):.1f} % of the 64-query one" in text


def attention_bwd_parks(d: int) -> bool:
    """Whether the chapter's backward at head dimension ``d`` parks dQ's part in register order (DQ_FRAGMENTS)."""
    from tklab.kernels import attention_bwd

    return attention_bwd.build(d).dq_fragments


def _bwd_loop_and_mask_branch(**options: int) -> tuple[int, int, int]:
    """The backward's main loop as compiled for sm_90a at d = 128 with ``options``: its length, the instructions its
    causal mask's branch jumps over on an unmasked step (a BRA inside the loop to the mask's BSYNC), and the build's
    queries per step."""
    import tklab
    from tklab.kernels import attention_bwd
    from tklab.toolchain.sass import loops, main_loop

    cfg = attention_bwd.build(128, **options)
    sass = tklab.compile(attention_bwd.source(cfg), arch="sm_90a", name=attention_bwd.source_name(cfg),
                         options=cfg.options)["flash_bwd"].sass
    ops = main_loop(sass)
    body = next(b for b in loops(sass) if [o for _, o, _ in b] == ops)
    end = next(i for i, (_, o, _) in enumerate(body) if o.startswith("BSYNC"))
    jump = next(i for i, (_, o, a) in enumerate(body)
                if i < end and o == "BRA" and int(a.split(";")[0].split()[-1], 16) == body[end][0])
    return len(body), end - jump - 1, cfg.qstep


def test_ch07_ring_protocol_laps_are_the_checks_first_case() -> None:
    """07 · the design exercise: the laps of each block's ring on the check's first case (tiles per block over the
    stages), and the wraps one fewer."""
    spec = load_script(ROOT / "solutions" / "ch07_ring_protocol" / "spec.py", "ch07_ring_protocol_spec")
    from tklab.kernels.tma_copy import TILE_COLS, TILE_ROWS

    case = spec.CASES[0]
    tiles = -(-case["M"] // TILE_ROWS) * -(-case["N"] // TILE_COLS)
    laps = -(-tiles // case["blocks"]) // spec.STAGES
    text = " ".join(_text("07", "design-ch07_ring_protocol-todo").split())
    assert f"({case['M']} × {case['N']}, {tiles} tiles) goes through {case['blocks']} blocks" in text
    assert f"ring of {spec.STAGES} stages goes round {['zero', 'one', 'two', 'three', 'four', 'five', 'six'][laps]} " \
           f"times (it wraps {['zero', 'one', 'two', 'three', 'four', 'five'][laps - 1]} times)" in text


def test_ch08_launch_cost_is_the_records() -> None:
    """08 · measured against cuBLAS: the host's cost of a call, the course's prepared launches and torch.matmul, from
    the record the progression cell reads (host_us per row)."""
    rows = _recorded("ch08.progression")["rows"]
    ours = [r["host_us"] for r in rows if r["who"] != "cuBLAS"]
    theirs = [r["host_us"] for r in rows if r["who"] == "cuBLAS"]
    text = " ".join(_text("08", "c24").split())
    assert f"{min(ours):.1f}–{max(ours):.1f} µs a call for the course's prepared launches, " \
           f"{min(theirs):.1f}–{max(theirs):.1f} µs for `torch.matmul`" in text and "tens of µs" not in text


def test_ch09_l2_model_against_the_profile() -> None:
    """09 · is the traffic model right: the recorded profile's L2 bytes over the model's, as the prose says."""
    from tklab.kernels import attention

    measured = json.loads((RESULTS / "profiles.json").read_text())["ch09.flash_tiles"]["metrics"]["lts__t_bytes.sum"]
    model = attention.traffic(2, 16, 8192, 128, block_rows=128, block_keys=64)["flash_l2"]
    text = " ".join(_text("09", "c1c841e4").split())
    assert f"come out at {measured / model:.2f}× the model's" in text


def test_ch09_running_max_floor_is_the_kernels() -> None:
    """09 · the base-2 softmax: the running maximum starts at the kernel's finite floor, named as the kernel does."""
    src = (ROOT / "solutions" / "ch09_flash" / "ch09_flash.cu").read_text()
    assert "constexpr float NO_MAX_YET = -1e30f;" in src and "fill(m, NO_MAX_YET);" in src
    text = _text("09", "41129618")
    assert "(`NO_MAX_YET`, $-10^{30}$), not $-\\infty$" in text and "one `FFMA` and one" not in text
