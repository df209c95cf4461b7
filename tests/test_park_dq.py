"""The parked dQ accumulator of chapter 11's kernel at d = 128 (DQ_FRAGMENTS): the model of its order, held to the
kernel's own last pass on the CPU emulator.

``attention_bwd.park_dq`` says where each value of dS K sits in the accumulator a DQ_FRAGMENTS build leaves (each
step's two consumer parts in register order, ``tklab.models.layouts.parked``); chapter 11's exercise check compares
the learner's accumulator with it. Held here: flash_bwd_dq, the kernel's last pass, turns ``park_dq(x)`` into
bf16(scale x) at every (query, column), for each step shape that parks (64- and 80-query steps at d = 128, 128 at
d = 64 when asked for); a parked block with two floats swapped does not; and ``parked`` is the permutation that
tests/test_fragments.py reads off the emulated store_fragments."""

from __future__ import annotations

import numpy as np
import pytest

from tklab.kernels import attention_bwd
from tklab.models import layouts
from tklab.run.arrays import bf16_to_float32

pytest.importorskip("tklab.emulate")

CASES = [(128, {}, 130), (128, {"QSTEP": 80}, 77), (64, {"DQ_FRAGMENTS": 1}, 150)]


def _last_pass(acc: np.ndarray, cfg: attention_bwd.BwdBuild, n: int, scale: float) -> np.ndarray:
    """flash_bwd_dq of ``cfg`` on the emulator over the accumulator ``acc``: dQ as float32."""
    b, h = acc.shape[:2]
    dq = np.full((b, h, n, cfg.head_dim), 0xFFFF, np.uint16)  # NaN until written
    mod = attention_bwd.compiled(cfg, "cpu")
    mod["flash_bwd_dq"]((2 * cfg.steps(n), h, b), (128,),
                        (acc, dq, h, n, h * n * cfg.head_dim, n * cfg.head_dim, cfg.head_dim, np.float32(scale), 0))
    return bf16_to_float32(dq)


@pytest.mark.parametrize(("d", "options", "n"), CASES, ids=["d128_q64", "d128_q80", "d64_q128"])
def test_the_last_pass_puts_every_parked_value_in_place(d: int, options: dict[str, int], n: int) -> None:
    cfg = attention_bwd.build(d, **options)
    assert cfg.dq_fragments
    rng = np.random.default_rng(1)
    plain = rng.standard_normal((2, 1, n, d)).astype(np.float32)
    acc = attention_bwd.park_dq(plain, cfg)
    assert acc.shape == attention_bwd.dq_scratch_shape(2, 1, n, cfg)
    got = _last_pass(np.ascontiguousarray(acc), cfg, n, 0.5)
    np.testing.assert_allclose(got, 0.5 * plain, rtol=1e-2, atol=1e-2)  # bf16 rounding of 0.5 x


def test_a_misplaced_pair_is_seen() -> None:
    """The check above can fail: two floats of a parked block swapped land at the wrong (query, column)."""
    cfg = attention_bwd.build(128)
    plain = np.arange(2 * 64 * 128, dtype=np.float32).reshape(1, 2, 64, 128) / 10
    acc = attention_bwd.park_dq(plain, cfg).reshape(-1)
    acc[[0, 4]] = acc[[4, 0]]
    got = _last_pass(acc.reshape(1, 2, 64, 128), cfg, 64, 1.0)
    assert not np.allclose(got, plain, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("cols", [64, 80])
def test_parked_is_a_permutation_of_the_tile(cols: int) -> None:
    order = layouts.parked(cols)
    assert sorted(order) == [(r, c) for r in range(64) for c in range(cols)]


def test_parked_refuses_a_width_no_accumulator_has() -> None:
    with pytest.raises(ValueError, match="multiple of 8"):
        layouts.parked(60)
