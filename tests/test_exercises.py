"""Solutions → exercises: region parsing, stub rendering, the edit-safe regeneration, and the repo in sync."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tklab import exercises as ex
from tklab.grading import index, spec_kit

ROOT = Path(__file__).resolve().parent.parent

CU = """\
// top comment
extern "C" __global__ void k(float* out, int n) {
    int i = threadIdx.x;
    // BEGIN SOLUTION hint: write i squared
    // a comment that does not count
    int sq = i * i;

    out[i] = sq;
    // END SOLUTION
    // BEGIN SOLUTION
    // STUB: out[0] = 0.0f;
    out[1] = 1.0f;
    // END SOLUTION
}
"""

PY = """\
def f(x):
    # BEGIN SOLUTION hint: return twice x
    y = 2 * x
    return y
    # END SOLUTION
"""


def test_regions_are_found_with_hint_stub_and_line_count():
    r1, r2 = ex.regions(CU, ".cu")
    assert (r1.begin, r1.end, r1.indent, r1.hint, r1.code_lines) == (4, 9, "    ", "write i squared", 2)
    assert r2.hint == "" and r2.stub == ("    out[0] = 0.0f;",) and r2.code_lines == 1


def test_pragma_lines_count_as_code_in_cuda():
    src = "// BEGIN SOLUTION\n#pragma unroll\nfor (;;) {}\n// END SOLUTION\n"
    assert ex.regions(src, ".cu")[0].code_lines == 2


@pytest.mark.parametrize("src, message", [
    ("// BEGIN SOLUTION\n// BEGIN SOLUTION\n// END SOLUTION\n", "inside the region opened at line 1"),
    ("x\n// END SOLUTION\n", "without a BEGIN"),
    ("// BEGIN SOLUTION\nx\n", "never closed"),
])
def test_unpaired_markers_are_errors_with_the_line(src, message):
    with pytest.raises(ex.RegionError, match=message):
        ex.regions(src, ".cu", "s.cu")


def test_render_cuda_replaces_regions_keeps_the_rest():
    out = ex.render(CU, "solutions/k.cu", ".cu")
    lines = out.splitlines()
    assert lines[0].startswith("// GENERATED from solutions/k.cu")
    assert "    // TODO: your code here (about 2 lines)." in lines
    assert "    // Goal: write i squared" in lines
    assert '    // Stuck? tklab.hint("k") in a notebook, or python -m tklab hint k.' in lines  # first TODO only
    assert out.count("Stuck?") == 1
    assert "    // TODO: your code here (about 1 line)." in lines
    assert "    out[0] = 0.0f;" in lines  # the STUB line, uncommented
    assert "int sq" not in out and "out[1] = 1.0f" not in out and "STUB" not in out
    assert "SOLUTION" not in out
    assert lines[1:4] == CU.splitlines()[0:3]  # code outside the regions is untouched


def test_render_python_stub_gets_pass_and_stays_valid():
    out = ex.render(PY, "solutions/f.py", ".py")
    assert "    pass" in out.splitlines() and "2 * x" not in out
    namespace: dict = {}
    exec(compile(out, "f.py", "exec"), namespace)  # the exercise is importable
    assert namespace["f"](3) is None  # ...and does not do the work


def test_repository_exercises_are_in_sync_with_solutions(capsys):
    assert ex.differences() == []
    assert index.main(["--check"]) == 0
    generated = ex.plan()
    assert {"ch01_naive_matmul.py", "ch02_smem_tiling.cu", "ch03_register_blocking.cu", "ch04_swizzle.cu",
            "ch05_mma.cu", "ch06_tiles.cu"} <= set(generated)


def _tree(tmp_path: Path) -> tuple[Path, Path]:
    sol, exd = tmp_path / "solutions", tmp_path / "exercises"
    sol.mkdir()
    (sol / "k.cu").write_text(CU)
    (sol / "f.py").write_text(PY)
    (sol / "plain.cu").write_text("// no regions: not an exercise\n")
    return sol, exd


def test_sync_writes_manifest_and_skips_files_without_regions(tmp_path):
    sol, exd = _tree(tmp_path)
    report = ex.sync(sol, exd)
    assert sorted(report.written) == ["f.py", "k.cu"] and not (exd / "plain.cu").exists()
    manifest = json.loads((exd / ".manifest.json").read_text())
    assert set(manifest["files"]) == {"f.py", "k.cu"}
    assert manifest["files"]["k.cu"]["from"] == "solutions/k.cu"
    assert ex.differences(sol, exd) == []
    assert ex.sync(sol, exd).unchanged == ["f.py", "k.cu"]


def test_check_reports_edits_missing_files_and_stale_manifest(tmp_path, capsys):
    sol, exd = _tree(tmp_path)
    ex.sync(sol, exd)
    (exd / "k.cu").write_text("edited\n")
    (exd / "f.py").unlink()
    problems = ex.differences(sol, exd)
    assert any(p.startswith("k.cu: differs") for p in problems)
    assert any(p.startswith("f.py: missing") for p in problems)
    assert index.main(["--check", "--solutions", str(sol), "--exercises", str(exd)]) == 1
    assert "k.cu" in capsys.readouterr().out


def test_solution_change_regenerates_unedited_files(tmp_path):
    sol, exd = _tree(tmp_path)
    ex.sync(sol, exd)
    (sol / "k.cu").write_text(CU.replace("write i squared", "square it"))
    report = ex.sync(sol, exd)
    assert report.written == ["k.cu"] and not report.edited
    assert "square it" in (exd / "k.cu").read_text()


def test_regeneration_refuses_to_overwrite_a_learners_edit(tmp_path, capsys):
    sol, exd = _tree(tmp_path)
    ex.sync(sol, exd)
    mine = (exd / "k.cu").read_text().replace("// TODO: your code here (about 2 lines).", "out[i] = i * i;")
    (exd / "k.cu").write_text(mine)
    (sol / "k.cu").write_text(CU.replace("write i squared", "square it"))
    report = ex.sync(sol, exd)
    assert report.refused and report.edited == ["k.cu"] and not report.written
    assert (exd / "k.cu").read_text() == mine
    assert index.main(["--solutions", str(sol), "--exercises", str(exd)]) == 1
    err = capsys.readouterr().err
    assert "k.cu" in err and "--backup" in err
    assert (exd / "k.cu").read_text() == mine


def test_backup_copies_the_edit_aside_then_regenerates(tmp_path, capsys):
    sol, exd = _tree(tmp_path)
    ex.sync(sol, exd)
    (exd / "f.py").write_text("my work\n")
    report = ex.sync(sol, exd, backup=True, stamp="20260101-000000")
    assert report.backups == {"f.py": "f.py.bak-20260101-000000"}
    assert (exd / "f.py.bak-20260101-000000").read_text() == "my work\n"
    assert (exd / "f.py").read_text() == ex.render(PY, "solutions/f.py", ".py")
    assert ex.differences(sol, exd) == []  # backups are not generated files and do not upset --check
    (exd / "k.cu").write_text("more work\n")
    assert index.main(["--backup", "--solutions", str(sol), "--exercises", str(exd)]) == 0
    assert "backed up" in capsys.readouterr().out
    assert [p.read_text() for p in exd.glob("k.cu.bak-*")] == ["more work\n"]


def test_removed_solution_removes_its_unedited_exercise_only(tmp_path):
    sol, exd = _tree(tmp_path)
    ex.sync(sol, exd)
    (sol / "f.py").unlink()
    assert any("no solution generates it" in p for p in ex.differences(sol, exd))
    report = ex.sync(sol, exd)
    assert report.removed == ["f.py"] and not (exd / "f.py").exists()
    (sol / "other.cu").write_text(CU)  # (a folder with no solution left at all is refused: see below)
    (sol / "k.cu").unlink()
    (exd / "k.cu").write_text("edited\n")
    report = ex.sync(sol, exd)
    assert report.kept_stale == ["k.cu"] and (exd / "k.cu").read_text() == "edited\n"


@pytest.mark.parametrize("bad", ["missing", "typo", "empty", "file", "no regions"])
def test_bad_solutions_folder_is_refused_and_nothing_is_touched(tmp_path, capsys, bad):
    sol, exd = _tree(tmp_path)
    ex.sync(sol, exd)
    before = {p.name: p.read_bytes() for p in exd.iterdir()}
    target = {"missing": tmp_path / "nowhere", "typo": tmp_path / "solution", "empty": tmp_path / "empty",
              "file": tmp_path / "solutions.txt", "no regions": tmp_path / "plain"}[bad]
    if bad == "empty":
        target.mkdir()
    elif bad == "file":
        target.write_text("x")
    elif bad == "no regions":
        target.mkdir()
        (target / "k.cu").write_text("// a file without regions\n")
    with pytest.raises(ex.SolutionsError):
        ex.sync(target, exd)
    for args in (["--solutions", str(target), "--exercises", str(exd)],
                 ["--check", "--solutions", str(target), "--exercises", str(exd)]):
        assert index.main(args) == 2
        err = capsys.readouterr().err
        assert str(target) in err and "nothing was changed" in err
    assert {p.name: p.read_bytes() for p in exd.iterdir()} == before  # no exercise removed or rewritten


def _recorded_ratios() -> dict[str, list[float]]:
    """Every speed ratio the reference solutions reached in a recorded GPU check (bench/results)."""
    found: dict[str, list[float]] = {}
    for f in sorted((ROOT / "bench" / "results").glob("exercises_*.json")):
        for ex_id, res in json.loads(f.read_text()).items():
            ratio = (res.get("speed") or {}).get("ratio")
            if isinstance(ratio, (int, float)):
                found.setdefault(ex_id, []).append(float(ratio))
    return found


def test_every_speed_target_sits_well_below_the_reference_measurements():
    """A learner who matches the reference must meet the target despite run-to-run noise (issue: the ch06
    reference once measured 0.2497× against a 0.25× target)."""
    from tklab import specs

    recorded = _recorded_ratios()
    assert recorded, "no recorded exercise checks in bench/results"
    for ex_id in specs.all_ids():
        bench = specs.get(ex_id).bench
        if bench is None or bench.target is None:
            continue
        ratios = [*bench.measured, *recorded.get(ex_id, [])]
        assert ratios, f"{ex_id}: a speed target without any measurement of the reference"
        lowest = min(ratios)
        assert bench.target <= spec_kit.TARGET_MARGIN * lowest + 1e-12, (
            f"{ex_id}: target {bench.target}× is above {spec_kit.TARGET_MARGIN} × the lowest reference measurement "
            f"{lowest}×")
