"""The open-ended speed challenges (issue 42, item 2): at least three, one a GEMM shape the course did not tune, one
an attention variant at d = 128, one a backward step; each starts the learner from a correct, plain kernel (the check
passes it, and says nothing was started), is graded on correctness and timed against the library on a GPU (no
target); without a GPU its report shows the reference's and the library's speed as recorded on the H200 by
``bench/challenges.py`` (or that there is no record yet), which runs here in its dry-run mode; each is linked from its
chapter and from the work-log template. The planted mistakes of each are run by tests/test_planted_mistakes.py."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import tklab
from tklab.grading import cases as emu_cases
from tklab.grading import leaderboard, specs
from tklab.grading.check import check
from tklab.run.limits import SHARED_OPTIN

ROOT = Path(__file__).resolve().parent.parent
IDS = [i for i in specs.all_ids() if leaderboard.is_challenge(i)]
CAN_EMULATE = emu_cases.can_run(specs.get("ch02_smem_tiling"))
NOTEBOOKS = {"08": "08_wgmma_gemm.ipynb", "10": "10_hopper_flash_attention.ipynb",
             "11": "11_flash_attention_backward.ipynb"}


def test_three_challenges_a_gemm_an_attention_variant_and_a_backward_step() -> None:
    assert len(IDS) >= 3, IDS
    chapters = {specs.get(i).chapter: i for i in IDS}
    assert {"08", "10", "11"} <= set(chapters), chapters
    gemm, attention, backward = (specs.get(chapters[c]) for c in ("08", "10", "11"))
    assert gemm.bench.dims["M"] < min(gemm.bench.dims["N"], gemm.bench.dims["K"]) // 64  # skinny: untuned
    assert "H" in attention.bench.dims and attention.outputs(attention.cases[1])["O"][0][-1] == 128  # d = 128
    assert {"DQ", "DK", "DV"} <= set(backward.outputs(backward.cases[1]))  # the whole step


@pytest.mark.parametrize("exercise", IDS)
def test_a_challenge_is_graded_on_correctness_and_timed_against_the_library(exercise: str) -> None:
    spec = specs.get(exercise)
    assert spec.bench is not None and spec.bench.baseline_name and spec.bench.target is None  # a ratio, no target
    assert not spec.floors  # nothing but the right answer decides
    assert any(isinstance(s, leaderboard.RecordedNumbers) for s in spec.static)
    folder = ROOT / "solutions" / exercise
    assert {p.name for p in folder.iterdir()} >= {f"{exercise}.cu", "spec.py", "hints.toml", "planted.toml"}
    assert "docs/WORKLOG_TEMPLATE.md" in (folder / "hints.toml").read_text()


@pytest.mark.nvrtc
@pytest.mark.parametrize("exercise", IDS)
def test_the_launch_fits_the_reference_and_the_plain_kernel(exercise: str) -> None:
    """The launch the spec fixes gives both the reference and the starting kernel what they declare, within sm_90's
    per-block shared memory."""
    spec = specs.get(exercise)
    shape = spec.launch(spec.bench.dims)
    for path in (ROOT / spec.solution, ROOT / "exercises" / spec.exercise_file):
        k = tklab.compile(path.read_text(), arch="sm_90a", name=spec.filename, options=spec.options)[spec.kernel]
        assert k.shared_bytes + shape.shared_mem <= SHARED_OPTIN[90], (path, k.shared_bytes, shape.shared_mem)
        assert shape.block[0] == 128


@pytest.mark.skipif(not CAN_EMULATE, reason="no C++ compiler for the CPU emulator")
@pytest.mark.parametrize("exercise", IDS)
def test_the_starting_kernel_is_correct_and_a_report_shows_the_recorded_numbers(exercise: str) -> None:
    """The file as handed out passes (it is correct, and plain) and says nothing was started; without a GPU a started
    file's report (here: the reference solution's) shows the H200 record of the reference and the library, read
    now from bench/results/. That row is a static check's, so the reference is checked without its run here: its
    emulated run passing is tests/test_check.py's (``test_solution_passes_its_cpu_check``), on every commit too."""
    res = check(exercise, bench=False, timeout=240)  # (a limit far above the run, for a loaded machine)
    assert res.passed and res.established == "cpu-emulation", res
    assert res.summary.startswith("not started"), res.summary
    ours = check(exercise, ROOT / specs.get(exercise).solution, run=False)
    assert ours.compiled and ours.static_ok, ours
    row = next(s for s in ours.static if s.name == "recorded H200 numbers")
    assert row.ok and row.detail == leaderboard.recorded_text(exercise)
    assert row.detail in repr(ours)


def _record(folder: Path, name: str, date: str, ms: tuple[float, float], *, dry: bool = False) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(json.dumps({
        "date": date, "commit": f"c{date[-2:]}", "device": "NVIDIA H200", "dry_run": dry,
        "challenges": {"ch08_challenge_gemm_skinny": {"reference_ms": ms[0], "library_ms": ms[1],
                                                      "library": "cuBLAS bf16", "dims": "M=64, N=8192, K=8192"}}}))


def test_the_recorded_numbers_are_the_newest_record_and_never_a_dry_run(tmp_path) -> None:
    ex = "ch08_challenge_gemm_skinny"
    assert leaderboard.recorded(ex, tmp_path / "none") is None
    assert leaderboard.recorded_text(ex, tmp_path).startswith("no H200 record yet")
    _record(tmp_path, "challenges_2026-12-05_c05.json", "2026-12-05", (0.080, 0.060))
    _record(tmp_path, "challenges_2026-12-07_c07.json", "2026-12-07", (0.050, 0.040))
    _record(tmp_path, "challenges_2026-12-09_c09_dry_run.json", "2026-12-09", (1.0, 1.0), dry=True)
    (tmp_path / "challenges_2026-12-10_broken.json").write_text("{not json")
    text = leaderboard.recorded_text(ex, tmp_path)
    assert "NVIDIA H200" in text and "2026-12-07" in text and "commit c07" in text
    assert "0.050 ms" in text and "0.040 ms" in text and "0.80x" in text
    assert "challenges_2026-12-07_c07.json" in text
    assert leaderboard.recorded_text("ch10_challenge_swa", tmp_path).startswith("no H200 record yet")


def test_the_bench_runs_dry_on_the_cpu(tmp_path) -> None:
    """``bench/challenges.py --dry-run``: every challenge's reference compiled and its launch planned, nothing timed;
    the record it writes is marked a dry run, so no check shows it as a measurement."""
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "challenges.py"), "--dry-run", "--out-dir",
                          str(tmp_path)], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    (record,) = tmp_path.glob("challenges_*_dry_run.json")
    data = json.loads(record.read_text())
    assert data["dry_run"] is True and set(data["challenges"]) == set(IDS)
    assert all(e["registers"] > 0 and "reference_ms" not in e for e in data["challenges"].values())
    assert "Dry run: nothing was timed" in record.with_suffix(".md").read_text()
    assert leaderboard.recorded(IDS[0], tmp_path) is None


def test_the_bench_module_imports_and_lists_the_registrys_challenges() -> None:
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import challenges
    finally:
        sys.path.remove(str(ROOT / "bench"))
    assert challenges.challenge_ids() == IDS
    with pytest.raises(SystemExit, match="not a challenge"):
        challenges.challenge_ids(["ch08_wgmma"])


@pytest.mark.parametrize("exercise", IDS)
def test_each_challenge_is_linked_from_its_chapter_with_the_work_log(exercise: str) -> None:
    cells = json.loads((ROOT / "notebooks" / NOTEBOOKS[specs.get(exercise).chapter]).read_text())["cells"]
    text = "".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    link = re.search(rf"\*\*Challenge\*\*.{{0,400}}?\[exercises/{exercise}\.cu\]\(\.\./exercises/{exercise}\.cu\)",
                     text, re.S)
    assert link, f"no challenge cell links {exercise}"
    assert "../docs/WORKLOG_TEMPLATE.md" in text


def test_the_work_log_template_is_linked_and_says_what_a_log_records() -> None:
    template = (ROOT / "docs" / "WORKLOG_TEMPLATE.md").read_text()
    for words in ("roofline", "baseline", "one change", "SM clock", "commit", "tensor", "stall", "did not work"):
        assert words in template, words
    assert "docs/WORKLOG_TEMPLATE.md" in (ROOT / "README.md").read_text()


def test_the_bench_measures_and_records_what_the_report_reads(tmp_path, monkeypatch) -> None:
    """``bench/challenges.py``'s GPU path, with the GPU's parts faked (NumPy for CuPy, a kernel computing the right C,
    timings made up here): the output is held to the spec's expectation before anything is timed, the rounds
    alternate and log the SM clock, and the record it writes is the one a CPU check's report reads back. A kernel
    whose output is wrong is not timed."""
    import dataclasses
    import types

    import numpy as np

    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import challenges
    finally:
        sys.path.remove(str(ROOT / "bench"))
    fake_cp = types.ModuleType("cupy")
    fake_cp.asarray = np.asarray  # type: ignore[attr-defined]
    fake_cp.full = np.full  # type: ignore[attr-defined]
    fake_cp.matmul = np.matmul  # type: ignore[attr-defined]
    fake_cp.get_array_module = lambda x: np  # type: ignore[attr-defined]
    fake_cp.cuda = types.SimpleNamespace(Device=lambda: types.SimpleNamespace(synchronize=lambda: None))  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "cupy", fake_cp)
    small = {"M": 64, "N": 128, "K": 256}
    base = specs.get("ch08_challenge_gemm_skinny")
    library = object()
    spec = dataclasses.replace(base, bench=dataclasses.replace(base.bench, dims=small,
                                                                baseline=lambda a, d: library))
    right = {"ok": True}

    class Kernel:
        registers, spill_bytes = 58, 0

        def prepare(self, grid, block, args, shared_mem=0):  # noqa: ANN001 - the launch's own signature
            a, b, c = args[2], args[3], args[4]

            def run() -> None:
                from tklab.run.arrays import bf16_to_float32

                c[...] = bf16_to_float32(a) @ bf16_to_float32(b) + (0.0 if right["ok"] else 1.0)
            return run

    timings = {"reference": 0.050, "library": 0.040}
    monkeypatch.setattr(challenges, "compiled", lambda s: Kernel())
    monkeypatch.setattr(challenges, "sm_clock_mhz", lambda: 1980)
    monkeypatch.setattr("tklab.run.bench.bench", lambda fn, **k: types.SimpleNamespace(
        ms=timings["library" if fn is library else "reference"]))
    measure = challenges.measure
    entry = measure(spec, rounds=3)
    assert entry["output_right"] and entry["ratio"] == pytest.approx(0.8)
    assert [x["who"] for x in entry["rows"]] == ["reference", "library", "library", "reference", "reference",
                                                 "library"]  # the order alternates
    assert all(x["sm_clock_mhz"] == x["sm_clock_after_mhz"] == 1980 for x in entry["rows"])
    monkeypatch.setattr(challenges, "measure", lambda s, rounds: entry)
    monkeypatch.setattr(challenges, "device", lambda: ("NVIDIA H200", "2.11"))
    monkeypatch.setenv("GIT_COMMIT", "abc1234")
    assert challenges.main(["--only", "ch08_challenge_gemm_skinny", "--out-dir", str(tmp_path)]) == 0
    (record,) = tmp_path.glob("challenges_*_abc1234.json")
    assert "| 0.050 | 0.040 (cuBLAS" in record.with_suffix(".md").read_text()
    text = leaderboard.recorded_text("ch08_challenge_gemm_skinny", tmp_path)
    assert "NVIDIA H200" in text and "commit abc1234" in text and "0.80x" in text
    right["ok"] = False
    wrong = measure(spec, rounds=1)
    assert not wrong["output_right"] and "not timed" in wrong["error"] and "rows" not in wrong
