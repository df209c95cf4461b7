"""The floor "the tensor cores did the work" says what it compares: the FLOPs the products issued against what the
problem needs, as the exercise counts it, and why a share over 100 % is no fault (chapter 10: a causal run
multiplies whole key blocks, the masked half of the diagonal's too). No GPU, no compile: the facts are given."""

from __future__ import annotations

from tklab import specs
from tklab.grading.spec_kit import TensorCoreWork


def _floor(exercise: str) -> TensorCoreWork:
    return next(f for f in specs.get(exercise).floors if isinstance(f, TensorCoreWork))


def _facts(tensor: float, scalar: float = 0.0, problem: float = 1000.0) -> dict[str, float]:
    return {"interpreted_launches": 1, "problem_flops": problem, "executed_tensor_flops": tensor,
            "executed_scalar_flops": scalar}


def test_a_causal_overcount_is_explained_not_puzzling():
    floor = _floor("ch10_flash")
    r = floor.judge_emulated(_facts(1600))
    assert r is not None and r.ok, r
    assert "issued 1,600 FLOPs, 160% of the emulated cases' attention FLOPs" in r.detail, r.detail
    assert "causal case counts only the half its mask keeps" in r.detail and "(1,000)" in r.detail
    assert "masked half of each block on the diagonal" in r.detail and "more than 100 % is expected" in r.detail


def test_the_explanation_comes_only_when_the_products_issue_more():
    r = _floor("ch10_flash").judge_emulated(_facts(950))
    assert r is not None and r.ok and "95%" in r.detail and "diagonal" not in r.detail, r


def test_too_few_products_or_scalar_work_still_fail_naming_the_count():
    floor = _floor("ch10_flash")
    few = floor.judge_emulated(_facts(100))
    assert few is not None and not few.ok and "10% of the emulated cases'" in few.detail
    scalar = floor.judge_emulated(_facts(1000, scalar=900))
    assert scalar is not None and not scalar.ok and "scalar multiply-adds" in scalar.detail


def test_a_gemm_names_the_generic_count_and_reason():
    r = _floor("ch08_wgmma").judge_emulated(_facts(1200))
    assert r is not None and r.ok
    assert "of the FLOPs the emulated cases need" in r.detail and "whole tiles" in r.detail, r.detail
