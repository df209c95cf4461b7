"""Every backward variant that bench/flash_bwd.py times fits one block's shared memory on sm_90, or is refused when it
is built, saying so with the bytes: compiled here (NVRTC, no GPU), never launched.

Why: on the H200 ``bench/flash_bwd.py bench --variants ...,ch11 FA4 step 80,...`` stopped at its first
configuration with a LaunchError (the most dynamic shared memory a block may have plus 1024 B "static" exceeding
the limit), while the GPU tests had launched the same build. The 80-query builds at d = 128 ask for exactly the most
a block may have (``SHARED_OPTIN[90]``); the 1024 B "static" was the kilobyte the system
reserves in every block, which a cubin for sm_90 lays out and ``cuobjdump -res-usage`` counts in SHARED (ptxas and
the driver do not). tklab read it as the kernel's own where ptxas's report was not at hand. Each build here is held to
the limit with its static shared memory read both ways: from ptxas's report and from the cubin.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from scripts import load_script

from tklab.kernels import attention_bwd
from tklab.run.limits import SHARED_OPTIN
from tklab.toolchain import sass

pytestmark = pytest.mark.nvrtc
ROOT = Path(__file__).resolve().parent.parent


BENCH = load_script(ROOT / "bench" / "flash_bwd.py", "flash_bwd_bench")
#: Every variant at every head dimension the bench runs it at (its CONFIGS: each variant runs at each d).
CASES = [(name, d) for name in BENCH.VARIANTS for d in sorted({d for d, _, _ in BENCH.CONFIGS})]


@pytest.mark.parametrize("name,d", CASES, ids=[f"{n}-d{d}".replace(" ", "_") for n, d in CASES])
def test_every_bench_variant_fits_a_blocks_shared_memory_or_is_refused_when_built(name: str, d: int) -> None:
    try:
        b = attention_bwd.build(d, **BENCH.VARIANTS[name])
    except ValueError as e:  # refused before compiling: the bench's contenders() prints it and goes on
        if "shared memory" in str(e):
            assert f"{SHARED_OPTIN[90]} B" in str(e) and "STAGES" in str(e), str(e)
        return
    mod = attention_bwd.compiled(b)  # a ValueError here (check_shared_fits) is a refusal the bench also survives
    dynamic, static = attention_bwd.shared_needs(mod)
    from_cubin = sass.resource_usage(mod.cubin)["flash_bwd"]["SHARED"]
    assert dynamic + from_cubin <= SHARED_OPTIN[90], f"{name} at d = {d}: {dynamic} B + {from_cubin} B"
    assert dynamic + static <= SHARED_OPTIN[90], f"{name} at d = {d}: {dynamic} B + {static} B"
    assert static == from_cubin == 0, (static, from_cubin)  # dynamic shared memory only: 0 whichever way it is read
    assert dynamic == b.shared_bytes, "the Python model (the emulator's launch) and the kernel's export differ"


def test_a_variant_over_the_limit_is_refused_naming_its_options_and_bytes() -> None:
    """Where the compiled kernel needs more than a block may have, compiled() refuses the build with the bytes (the
    bench reports the ValueError and goes on), before any launch. Here with the 80-query build's module seen as
    declaring one more kilobyte of static shared memory."""
    b = attention_bwd.build(128, **BENCH.VARIANTS["ch11 FA4 step 80"])
    mod = attention_bwd.compiled(b)

    class OneMoreKilobyte:
        constants = mod.constants

        def __getitem__(self, name: str) -> Any:
            return type("K", (), {"shared_bytes": 1024})()

    limit = SHARED_OPTIN[90]
    with pytest.raises(ValueError, match=rf"QSTEP=80.*{limit:,} B of dynamic \+ 1,024 B of static "
                                         rf"shared memory per block = {limit + 1024:,} B, more than the {limit:,} B"):
        attention_bwd.check_shared_fits(b, OneMoreKilobyte())
