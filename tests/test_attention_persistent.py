"""Chapter 10's persistent grid (PERSISTENT=1, its variant file solutions/variants/ch10_persistent.cu): one block
per SM walking (query block, head, batch) items; and the consumer index from a shuffle, in uniform registers (the
wgmma issue of S = Q K^T without R2UR moves), in the chapter's kernel and the variant alike.

The launcher's own grid (``attention.launch_grid``) is forced down to 2-3 "SMs" so that each block runs many
items on the CPU emulator: its TMA ring, its mbarrier phases and its ping-pong turns carry from item to item,
and the next item's Q lands in the tiles the previous item's output left through (the emulator reports a TMA
store whose read was not waited for). The item order (``tk::tile_scheduler``) is checked on the host.
"""

from __future__ import annotations

import functools
import re

import numpy as np
import pytest

from tklab import attention
from tklab.run.arrays import bf16_to_float32, to_bf16_bits
from tklab.run.limits import ConfigError

emu = pytest.importorskip("tklab.emulate")


@functools.cache
def _module(d: int, options: tuple[str, ...]) -> emu.EmuModule:
    return emu.compile(attention.PERSISTENT_FILE.read_text(), name=attention.PERSISTENT_FILE.name, options=options)


def _run(d: int, b: int, h: int, n: int, causal: bool, sms: int, order: str = "delayed", src: str | None = None,
         persistent: int = 1, **options: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(o, lse, reference o, reference lse) of the persistent kernel on ``sms`` blocks, emulated."""
    cfg = attention.build("hopper", d, PERSISTENT=persistent, **options)
    grid = attention.launch_grid(cfg, b, h, n, sms)
    assert grid == (min(sms, -(-n // cfg.block_rows) * h * b), 1, 1)
    rng = np.random.default_rng(n + 7 * b + 3 * h + int(causal))
    q, k, v = (to_bf16_bits(rng.standard_normal((b, h, n, d)).astype(np.float32)) for _ in range(3))
    o, lse = np.full((b, h, n, d), 0xFFFF, np.uint16), np.full((b, h, n), np.nan, np.float32)
    bc = cfg.option("BC")
    maps = [emu.tensor_map(x, (rows, d), dtype="bfloat16") for x, rows in ((q, 64), (k, bc), (v, bc), (o, 64))]
    assert cfg.source == attention.PERSISTENT_FILE  # what PERSISTENT builds
    mod = _module(d, cfg.options) if src is None else emu.compile(src, name=cfg.source.name, options=cfg.options)
    mod["flash_fwd"](grid, (cfg.threads,), (*maps, lse, h, n, np.float32(1 / np.sqrt(d)), int(causal), b),
                     shared_mem=cfg.shared_bytes, tma_order=order)
    ref_o, ref_lse = attention.naive(*(bf16_to_float32(x) for x in (q, k, v)), causal=causal)
    return bf16_to_float32(o), lse, ref_o, ref_lse


def _close(o: np.ndarray, lse: np.ndarray, ref_o: np.ndarray, ref_lse: np.ndarray) -> None:
    assert not np.isnan(o).any() and not np.isnan(lse).any(), "an item was never written"
    np.testing.assert_allclose(o, ref_o, atol=2e-2, rtol=2e-2)
    np.testing.assert_allclose(lse, ref_lse, atol=1e-3)


# Each head dimension runs its own defaults (attention.DEFAULTS: a schedule and key block of its own); 150 and 200
# rows end inside a query block and a key block; 2 x 2 heads x 2 query blocks = 8 items on 3 blocks (or 2 x 3 on 2).
# PERSISTENT=2 (causal items ranked by cost, dealt in a snake): 8 items on 3 blocks end in a partial odd round.
# PERSISTENT=3 is 1's code on a grid of a block per item (each walks one): 1 on as many "SMs" as items.
@pytest.mark.parametrize("d,b,h,n,causal,sms,order,persistent", [
    (128, 2, 2, 200, True, 3, "delayed", 1),
    (128, 1, 3, 150, False, 2, "reversed", 1),
    (64, 2, 1, 200, True, 2, "in_order", 1),
    (128, 1, 2, 200, True, 3, "delayed", 1),
    (128, 2, 2, 200, True, 3, "reversed", 2),
    (128, 2, 2, 200, True, 8, "delayed", 1),  # PERSISTENT=3's grid (1's code): a block per item, 8 of them
    (128, 1, 3, 150, False, 6, "in_order", 2),  # PERSISTENT=2 without a mask: the sections' order
])
def test_persistent_blocks_walk_many_items_and_match_float64(d, b, h, n, causal, sms, order, persistent):
    _close(*_run(d, b, h, n, causal, sms, order, persistent=persistent))


def test_one_block_walks_every_item_with_one_stage_and_the_plain_schedule():
    """STAGES=1: every K and V tile of every item goes through the same stage, so a phase that did not carry
    over from one item to the next would deadlock or read a stale tile."""
    _close(*_run(128, 1, 2, 130, True, 1, STAGES=1, SCHEDULE=0, BC=64))


def test_reusing_the_q_tile_before_the_output_store_read_it_is_reported():
    """The planted mistake: hand the Q tile back before the TMA store has read this item's output out of it."""
    src = attention.PERSISTENT_FILE.read_text()
    wait = "    if (warpgroup::threadid() == 0) tma::store_wait_read<0>();\n"
    assert src.count(wait) == 1
    with pytest.raises(emu.AsyncHazard, match=r"\(a TMA load's destination\) while the TMA store .* may still read it"):
        _run(128, 1, 2, 130, False, 1, src=src.replace(wait, ""))


def test_a_ring_cursor_restarted_for_each_item_is_reported():
    """The ring's stages and phases carry from item to item: restarting the consumers' cursors (as a block
    of the non-persistent grid does) waits on a phase that completed an item ago and reads a tile in flight."""
    src = attention.PERSISTENT_FILE.read_text()
    carried = "    ring_cursor<STAGES> at_k{int(carried >> 2), carried >> 1 & 1}, at_v = at_k;\n"
    assert src.count(carried) == 1
    with pytest.raises(emu.AsyncHazard, match=r"wgmma\.mma_async reading its operand\) while the TMA load"):
        _run(128, 1, 2, 130, False, 1, src=src.replace(carried, "    ring_cursor<STAGES> at_k, at_v;\n"))


_ORDERS = r"""#include "tk.cuh"
extern "C" __global__ void items(int* out, int q_blocks, int heads, int batch, int section) {
    const tk::tile_scheduler work{q_blocks, heads, batch, section};
    for (int i = threadIdx.x; i < work.count(); i += blockDim.x) {
        const tk::work_item w = work(i);
        out[3 * i] = w.b, out[3 * i + 1] = w.h, out[3 * i + 2] = w.q_block;
    }
}
// Each thread p walks block p's items of a grid of `grid` blocks the way chapter 10's producer does.
extern "C" __global__ void walks(int* out, int q_blocks, int heads, int batch, int section, int grid, int rounds,
                                 int by_cost) {
    const tk::tile_scheduler work{q_blocks, heads, batch, section};
    const tk::longest_first ranked{q_blocks, heads, batch};
    for (int p = threadIdx.x; p < grid; p += blockDim.x) {
        int t = 0;
        for (int i = p; i < work.count(); ++t, i = by_cost ? tk::longest_first::dealt(t, p, grid) : i + grid) {
            const tk::work_item w = by_cost ? ranked(i) : work(i);
            int* at = out + 3 * (p * rounds + t);
            at[0] = w.b, at[1] = w.h, at[2] = w.q_block;
        }
    }
}"""


@pytest.fixture(scope="module")
def orders() -> emu.EmuModule:
    return emu.compile(_ORDERS, name="orders.cu")


def test_the_item_order_is_heaviest_first_inside_sections_of_heads(orders):
    """tk::tile_scheduler on the host (the same constexpr code): every item once; inside a section of heads
    the query blocks descend; the heads of one query block are neighbours."""
    q_blocks, heads, batch, section = 3, 5, 2, 4  # 10 (b, h): sections of 4, 4 and 2
    out = np.full((q_blocks * heads * batch, 3), -1, np.int32)
    orders["items"]((1,), (32,), (out, q_blocks, heads, batch, section))
    assert sorted(map(tuple, out.tolist())) == sorted((b_, h_, q) for b_ in range(batch) for h_ in range(heads)
                                                      for q in range(q_blocks))
    bh = out[:, 0] * heads + out[:, 1]
    for first, width in ((0, 4), (4, 4), (8, 2)):
        rows = slice(first * q_blocks, (first + width) * q_blocks)
        assert sorted(set(bh[rows].tolist())) == list(range(first, first + width))
        assert out[rows, 2].tolist() == [q for q in range(q_blocks - 1, -1, -1) for _ in range(width)]


def _walks(orders: emu.EmuModule, q_blocks: int, heads: int, batch: int, section: int, grid: int,
           by_cost: int) -> np.ndarray:
    """[grid, rounds, 3]: block p's items (b, h, q_block) in the order it runs them; -1 past its last."""
    rounds = -(-q_blocks * heads * batch // grid)
    out = np.full((grid, rounds, 3), -1, np.int32)
    orders["walks"]((1,), (128,), (out, q_blocks, heads, batch, section, grid, rounds, by_cost))
    items = [tuple(x) for x in out.reshape(-1, 3).tolist() if x[2] >= 0]
    assert sorted(items) == [(b_, h_, q) for b_ in range(batch) for h_ in range(heads) for q in range(q_blocks)]
    return out


def test_longest_first_deals_a_causal_grid_evenly(orders):
    """PERSISTENT=2's walk (tk::longest_first) against PERSISTENT=1's (sections) at d=128, N=8192, causal (64
    query blocks of 128 rows, 2 x 16 heads, 4-head sections, 132 SMs): every item once; each block's costliest
    items first; the slowest block's key blocks (query block q reads ceil(128 (q + 1) / BC)) within 2 % of the
    average, where the sections' static dealing leaves one block 28 % above it (the -10 % measured on the H200)."""
    q_blocks, heads, batch, section, grid = 64, 16, 2, 4, 132
    walks = {by: _walks(orders, q_blocks, heads, batch, section, grid, by) for by in (0, 1)}
    bc = attention.build("hopper", 128).option("BC")  # the key-block width, from its one home
    cost = {by: np.where(w[..., 2] >= 0, -(-128 * (w[..., 2] + 1) // bc), 0).sum(axis=1) for by, w in walks.items()}
    for row in walks[1][..., 2]:
        row = row[row >= 0]
        assert (np.diff(row) <= 0).all(), row
    assert cost[1].max() / cost[1].mean() < 1.02, cost[1].max() / cost[1].mean()
    assert cost[0].max() / cost[0].mean() > 1.2, cost[0].max() / cost[0].mean()


def test_the_option_is_checked_and_sizes_the_grid():
    with pytest.raises(ConfigError, match="PERSISTENT must be 0"):
        attention.build("hopper", 128, PERSISTENT=4)
    assert attention.build("hopper", 128, PERSISTENT=2).shared_bytes == attention.build(
        "hopper", 128, PERSISTENT=1).shared_bytes
    cfg = attention.build("hopper", 128, PERSISTENT=1)
    assert attention.launch_grid(cfg, 4, 16, 8192, 132) == (132, 1, 1)
    flat = attention.build("hopper", 128, PERSISTENT=3)
    assert attention.launch_grid(flat, 4, 16, 8192, 132) == (4096, 1, 1)  # a block per item, whatever the SMs
    assert attention.launch_grid(flat, 2, 2, 200, 3) == attention.launch_grid(cfg, 2, 2, 200, 8) == (8, 1, 1)
    assert attention.launch_grid(cfg, 1, 1, 200, 132) == (2, 1, 1)  # never more blocks than items
    assert attention.launch_grid(attention.build("hopper", 128), 4, 16, 8192, 132) == (64, 16, 4)
    with pytest.raises(ValueError, match="at least one block"):
        attention.launch_grid(cfg, 1, 1, 200, 0)


@pytest.mark.parametrize("d,persistent", [(64, 1), (128, 1), (128, 2), (128, 3)])
def test_the_persistent_defaults_compile_for_sm90a_without_spills(d, persistent):
    cfg = attention.build("hopper", d, PERSISTENT=persistent)
    k = attention.compiled(cfg, "sm_90a")  # refuses spills
    assert k.module.constants["flash_shared_bytes"] == cfg.shared_bytes  # the launch model (q_empty: 1 and 2)
    assert k.spill_bytes == 0 and k.stack_bytes == 0
    assert not re.search(r"\bC75\d\d\b", k.module.log), k.module.log  # no serialized wgmma, setmaxnreg kept


SHUFFLED = "const int me = __shfl_sync(0xffffffff, warpgroup::groupid() - 1, 0);"
PLAIN = "const int me = warpgroup::groupid() - 1;"


def test_the_shuffled_index_keeps_the_descriptors_in_uniform_registers():
    """The consumer index from a shuffle: no R2UR (ordinary -> uniform register moves) left in the main loop, which
    is no longer than with the plain index: that loop moves each wgmma descriptor of S = Q K^T into uniform
    registers (a pair of R2UR per wgmma), which also lengthens the stretch from the first wgmma fence to the last
    wgmma that ping-pong holds the turn for (docs/ROADMAP.md, chapter 10, quotes the counts as compiled for the
    H200). The chapter's kernel and the persistent variant both shuffle; the option that chose is gone."""
    from tklab.toolchain.sass import main_loop

    for d, opts in ((64, {}), (128, {}), (128, {"PERSISTENT": 1})):
        b = attention.build("hopper", d, **opts)
        text = b.source.read_text()
        assert text.count(SHUFFLED) == 1, b.source
        plain = attention.build("hopper", d, source_text=text.replace(SHUFFLED, PLAIN), **opts)
        base, uniform = (main_loop(attention.compiled(x, "sm_90a").sass) for x in (plain, b))
        assert uniform and "HGMMA" in " ".join(uniform), d
        assert not [op for op in uniform if op.startswith("R2UR")], d
        assert [op for op in base if op.startswith("R2UR")], d  # what the shuffle saves
        assert len(uniform) <= len(base), (d, len(uniform), len(base))
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['UNIFORM'\]"):
        attention.build("hopper", 64, UNIFORM=1)


# ---- on an H100/H200 (skipped elsewhere) ----------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.hopper
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("b,h,n,sms", [(2, 3, 1000, 5), (1, 1, 4097, 3), (4, 16, 2048, None)],
                         ids=["n1000-5sms", "n4097-3sms", "n2048-all-sms"])
def test_persistent_and_default_grids_match_float64_on_the_gpu(d, causal, b, h, n, sms):
    torch = pytest.importorskip("torch")
    q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    for options in ({"PERSISTENT": 1}, {}, {"PERSISTENT": 2}, {"PERSISTENT": 3}):
        o = torch.full_like(q, float("nan"))
        lse = torch.full((b, h, n), float("nan"), device="cuda")
        attention.prepare(q, k, v, o, lse, causal=causal, sms=sms, **options)()
        torch.cuda.synchronize()
        e = attention.errors(o, lse, q, k, v, causal=causal)
        assert e.ok(), (options, str(e))
