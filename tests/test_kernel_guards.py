"""Issue 40, item 4 -- guards in the attention kernels and the tile library, each shown to catch its mistake:
named-barrier ranges checked disjoint at compile time, per-warp ``ds_full`` arrivals, a debug-build bound on
mbarrier waits, equal turn counts between consumers, and DQ_MODE 2's memory checked before it is allocated."""

from __future__ import annotations

import pytest

import tklab
from tklab.kernels import attention_bwd as ab
from tklab.toolchain.compiler import CompileError


def _compile_bwd(text: str, b: ab.BwdBuild) -> object:
    return tklab.compile(text, arch="sm_90a", name=ab.KERNEL.name, options=b.options)


# ---- named-barrier ranges --------------------------------------------------------------------------------
@pytest.mark.parametrize(("head_dim", "old", "new", "names"), [
    # the chapter's kernel: the store barriers moved onto the guard barriers' second id
    (64, "STORE_BARRIERS = 5;", "STORE_BARRIERS = 3;", "guard_ids and store_ids"),
    # the variant (d = 128's default): its turns moved onto the chapter's store barriers
    (128, "warpgroup::turns<8, 2>", "warpgroup::turns<6, 2>", "lag_turn::ids and store_ids"),
    # a range pushed past barrier 15
    (64, "STORE_BARRIERS = 5;", "STORE_BARRIERS = 15;", "consumers_ids or store_ids is outside"),
])
def test_overlapping_barrier_ranges_stop_the_build(head_dim: int, old: str, new: str, names: str) -> None:
    b = ab.build(head_dim)
    text = ab.source(b)
    assert text.count(old) == 1, f"the planted mistake no longer applies: {old!r} not found once"
    _compile_bwd(text, b)  # as shipped: compiles
    with pytest.raises(CompileError) as err:
        _compile_bwd(text.replace(old, new), b)
    assert names in str(err.value), str(err.value)[:2000]
