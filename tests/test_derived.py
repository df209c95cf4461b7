"""Design exercises' solutions are derived from their chapter's kernel plus a patch (tklab.grading.derived), not
hand copies: each is exactly what its patch makes of the kernel, a change to the kernel reaches it (or names the
hunk that no longer applies), and the patch can be written back from an edited solution."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tklab.grading import derived, index
from tklab.grading.exercises import SOLUTIONS

DESIGN_FROM_KERNEL = {"ch08_warp_specialized": "gemm_wgmma.cu", "ch10_gqa": "ch10_flash/ch10_flash.cu"}


def _copy(tmp_path: Path) -> Path:
    """A solutions folder with the derived exercises and the kernels they come from."""
    sol = tmp_path / "solutions"
    for exercise_id, base in DESIGN_FROM_KERNEL.items():
        shutil.copytree(SOLUTIONS / exercise_id, sol / exercise_id)
        (sol / base).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(SOLUTIONS / base, sol / base)
    return sol


#: Kernels' variants kept out of the exercises (an option measured slower, or not measured yet), derived the same way.
VARIANT_FROM_KERNEL = {"variants/ch10_persistent.cu": "ch10_flash/ch10_flash.cu",
                       "variants/ch10_softmax_split.cu": "ch10_flash/ch10_flash.cu",
                       "variants/ch11_step_options.cu": "ch11_flash_bwd/ch11_flash_bwd.cu"}


def test_each_design_exercise_is_its_kernel_plus_a_patch() -> None:
    found = {p.path.parent.name: p.base for p in derived.patches(SOLUTIONS) if p.path.parent.name != derived.VARIANTS}
    assert found == DESIGN_FROM_KERNEL
    assert derived.problems(SOLUTIONS) == []
    for exercise_id in DESIGN_FROM_KERNEL:
        solution = (SOLUTIONS / exercise_id / f"{exercise_id}.cu").read_text()
        patch = derived.read(SOLUTIONS / exercise_id / f"{exercise_id}.patch")
        assert derived.derive(patch, SOLUTIONS) == solution


def test_a_change_to_the_kernel_reaches_the_exercise(tmp_path: Path) -> None:
    sol = _copy(tmp_path)
    kernel = sol / "gemm_wgmma.cu"
    text = kernel.read_text()
    kernel.write_text(text.replace("using namespace tk;\n", "using namespace tk;\nconstexpr int UNUSED = 1;\n", 1))
    assert any("ch08_warp_specialized/ch08_warp_specialized.cu: not what" in p for p in derived.problems(sol))
    assert derived.write(sol) == ["ch08_warp_specialized/ch08_warp_specialized.cu"]
    assert "constexpr int UNUSED = 1;" in (sol / "ch08_warp_specialized" / "ch08_warp_specialized.cu").read_text()
    assert derived.problems(sol) == []


def test_a_hunk_that_no_longer_applies_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sol = _copy(tmp_path)
    kernel = sol / "gemm_wgmma.cu"
    kernel.write_text(kernel.read_text().replace("pipe.release(reading.stage);", "pipe.release(reading.stage );"))
    [problem] = derived.problems(sol)
    assert "ch08_warp_specialized/ch08_warp_specialized.patch: the hunk '@@" in problem and "--repatch" in problem
    with pytest.raises(derived.PatchError, match="no longer applies"):
        derived.write(sol)
    # --check says so and fails; --repatch writes the patch from the solution as it is, and then it holds.
    assert index.main(["--check", "--solutions", str(sol), "--exercises", str(tmp_path / "ex")]) == 1
    assert "derived solution(s) out of date" in capsys.readouterr().out
    assert derived.repatch(sol) == ["ch08_warp_specialized/ch08_warp_specialized.patch"]
    assert derived.problems(sol) == []


def test_repatch_keeps_an_edited_solution(tmp_path: Path) -> None:
    sol = _copy(tmp_path)
    target = sol / "ch10_gqa" / "ch10_gqa.cu"
    edited = target.read_text().replace("// Epilogue:", "// The epilogue:")
    target.write_text(edited)
    assert derived.problems(sol)
    assert derived.repatch(sol) == ["ch10_gqa/ch10_gqa.patch"]
    patch = derived.read(sol / "ch10_gqa" / "ch10_gqa.patch")
    assert patch.fixed == {"PERSISTENT": 0, "UNIFORM": 0, "SCHEDULE": 0}
    assert patch.comments == derived.read(SOLUTIONS / "ch10_gqa" / "ch10_gqa.patch").comments
    assert derived.derive(patch, sol) == edited


def test_resolve_settles_only_the_fixed_options() -> None:
    text = "\n".join([
        "a",
        "#if !P",
        "b",
        "#ifdef OTHER",
        "c",
        "#else",
        "d",
        "#endif",
        "#else",
        "e",
        "#endif",
        "#if S == 0 && defined(P)",
        "f",
        "#elif S == 2",
        "g",
        "#else",
        "h",
        "#endif",
        "#if P || OTHER",
        "i",
        "#endif",
        "z",
    ]) + "\n"
    assert derived.resolve(text, {"P": 0, "S": 2}) == "\n".join([
        "a", "b", "#ifdef OTHER", "c", "#else", "d", "#endif", "g", "#if P || OTHER", "i", "#endif", "z"]) + "\n"
    assert derived.resolve(text, {"P": 1, "S": 0}).split() == [
        "a", "e", "f", "#if", "P", "||", "OTHER", "i", "#endif", "z"]
    with pytest.raises(derived.PatchError, match="never closed"):
        derived.resolve("#if P\nx\n", {"P": 1})


def test_a_patch_without_a_diff_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "x" / "x.patch"
    bad.parent.mkdir()
    bad.write_text("# a comment\n# fixed: A=1\n")
    with pytest.raises(derived.PatchError, match="no unified diff"):
        derived.read(bad)
    bad.write_text("# fixed: A=one\n--- k.cu\n+++ x/x.cu\n")
    with pytest.raises(derived.PatchError, match="NAME=INTEGER"):
        derived.read(bad)


def test_each_variant_is_its_kernel_plus_a_patch_and_no_exercise() -> None:
    """solutions/variants/<name>.patch: a kernel's variant kept out of the exercise (chapter 10's persistent grid) is
    the chapter's kernel plus a patch, checked like a design exercise's, and holds no region a learner fills in."""
    from tklab.grading import exercises

    found = {p.target: p.base for p in derived.patches(SOLUTIONS) if p.path.parent.name == derived.VARIANTS}
    assert found == VARIANT_FROM_KERNEL
    for target in found:
        patch = derived.read(SOLUTIONS / Path(target).with_suffix(derived.SUFFIX))
        assert derived.derive(patch, SOLUTIONS) == (SOLUTIONS / target).read_text()
    assert not [rel for rel in exercises.plan() if rel.startswith("variants/")]

