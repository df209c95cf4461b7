"""An exercise's other builds (``tklab.grading.builds``, issue 38 deliverable 4): chapter 11's check runs the file at
d = 64 as well as 128, so the code the d = 128 build never takes (128-query steps, dQ's parts by rows) runs under the
check."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tklab.grading import builds, specs
from tklab.grading.judge import RunOutcome

ROOT = Path(__file__).resolve().parent.parent


def test_chapter_11_names_its_d64_build_and_the_registry_finds_it_by_id():
    spec = specs.get("ch11_flash_bwd")
    other = specs.get("ch11_flash_bwd@d64")
    assert [b.id for b in spec.builds] == [other.id]
    assert "-DHEAD_DIM=64" in other.options and "-DHEAD_DIM=128" in spec.options
    assert other.cases and all(c["D"] == 64 for c in other.cases)
    assert other.id not in specs.all_ids()  # not an exercise of its own: the index and the tests' lists skip it
    with pytest.raises(KeyError, match="has no build"):
        specs.get("ch11_flash_bwd@d96")


def test_the_cases_shapes_follow_their_head_dimension():
    other = specs.get("ch11_flash_bwd@d64")
    dims = other.cases[0]
    from tklab.kernels import attention_bwd

    main = specs.get("ch11_flash_bwd").launch({k: v for k, v in dims.items() if k != "D"}).shared_mem
    assert other.outputs(dims)["DK"][0][-1] == 64
    assert other.launch(dims).shared_mem == attention_bwd.build(64).shared_bytes != main


def test_an_outcome_that_did_not_pass_is_left_alone():
    wrong = RunOutcome("wrong", "wrong result")
    kw = dict(file=Path("x.cu"), source="", shown="x.cu", mode="emu", seed=1, hide=(), timeout=1.0, arch="sm_90a",
              emulator_parts=None)
    assert builds.run_others(specs.get("ch11_flash_bwd"), wrong, **kw) is wrong
    ok = RunOutcome("ok", "correct", {"cases": []})
    assert builds.run_others(specs.get("ch02_smem_tiling"), ok, **kw) is ok  # no other build


@pytest.mark.nvrtc  # compiled here, as the grader
def test_a_build_that_does_not_compile_is_the_outcome():
    """The other build is compiled in the checking process with its own options: a file that compiles only in
    the main build fails, naming the build (here an option the kernel refuses stands for such a file)."""
    spec = specs.get("ch11_flash_bwd")
    broken = dataclasses.replace(spec.builds[0], options=(*spec.builds[0].options, "-DDQ_MODE=3"))
    source = (ROOT / spec.solution).read_text()
    out = builds.run_others(dataclasses.replace(spec, builds=(broken,)), RunOutcome("ok", "correct", {"cases": []}),
                            file=ROOT / spec.solution, source=source, shown="ch11_flash_bwd.cu", mode="emu", seed=1,
                            hide=(), timeout=60.0, arch="sm_90a", emulator_parts=None)
    assert out.status == "error" and "does not compile as its d = 64 build" in out.message, out.message
    assert "DQ_MODE" in out.message
