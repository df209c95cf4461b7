"""Chapter 08's stream-K option (STREAM_K=1): the persistent GEMM with its last, partial wave split along K.

The walk (``tk::gemm_walk``) is checked on the host against its Python model (``gemm.Walk``) and for what the
kernel relies on: every (tile, K-slice) done once, each split tile finished by the piece that ends it, which adds
exactly the partials of the lower-numbered workers that share it. The kernel runs on the CPU emulator on a
pretend GPU of 4-6 SMs (the grid is the SM count): 8 tiles of an awkward shape (M, N, K no multiples of the tile)
so the pieces, their fp32 partials through global memory and the flags are exercised, then compared with
float64. GPU runs of the awkward shapes are in ``test_hopper_gemm.py``.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
from scripts import load_script

import tklab
from tklab import gemm
from tklab.run.arrays import bf16_to_float32, to_bf16_bits

# (tiles, K-slices, blocks, least slices per run, least slices saved): the emulated cases, 4096^3 and 8192^3 on 132
# SMs (and 66 clusters), small problems, no split (whole waves; min_slices 0; too little to save: 2048^3).
WALKS = [(8, 4, 6, 1, 1), (8, 4, 5, 1, 1), (8, 4, 4, 1, 1), (512, 64, 132, 8, 2), (2048, 128, 132, 8, 2),
         (256, 64, 66, 8, 2), (32, 16, 132, 8, 2), (1, 16, 132, 8, 2), (7, 3, 5, 2, 0), (128, 32, 132, 8, 2),
         (128, 32, 132, 8, 0), (512, 64, 132, 0, 0), (10, 1, 4, 1, 0)]


@pytest.mark.parametrize("tiles,k,blocks,least,saved", WALKS)
def test_the_walk_covers_every_slice_once_and_owners_add_exactly_the_partials(tiles, k, blocks, least, saved) -> None:
    walk = gemm.Walk(tiles, k, blocks, least, saved)
    done: dict[tuple[int, int], int] = {}
    partial_of: dict[int, list[int]] = {}  # tile -> workers that left a partial of it
    owners: dict[int, gemm.WalkItem] = {}
    for w in range(blocks):
        items = walk.items(w)
        assert sum(it.partial for it in items) <= 1, "one partial per worker: one workspace slot"
        for n, it in enumerate(items):
            assert 0 <= it.k_begin < it.k_end <= k
            for s in range(it.k_begin, it.k_end):
                assert (it.tile, s) not in done, f"slice {s} of tile {it.tile} done twice"
                done[it.tile, s] = w
            if it.partial:
                partial_of.setdefault(it.tile, []).append(w)
                assert n == len([x for x in items if x.k_begin == 0 and x.k_end == k]), "the partial runs first"
            else:
                owners[it.tile] = it
                assert it.k_end == k and it.first_sharer <= w
                assert all(done[it.tile, s] < w for s in range(it.k_begin)), "an owner waits only for lower workers"
    assert sorted(done) == [(t, s) for t in range(tiles) for s in range(k)]
    assert sorted(owners) == list(range(tiles))
    for t, it in owners.items():
        owner = done[t, k - 1]
        assert list(range(it.first_sharer, owner)) == partial_of.get(t, [])
    if least > 0 and walk.workers():  # the split only happens where it shortens the last wave
        runs = [walk.begin(w + 1) - walk.begin(w) for w in range(walk.workers())]
        assert walk.workers() > tiles % blocks and min(runs) >= least  # (a piece may be shorter: a run's edge)
        assert max(runs) <= k - saved
    split = {(512, 64, 132, 8, 2): True, (128, 32, 132, 8, 2): False, (128, 32, 132, 8, 0): True}
    if (tiles, k, blocks, least, saved) in split:  # 4096^3 splits; 2048^3 (128 tiles, 132 SMs) saves 1 slice: not
        assert bool(walk.workers()) == split[tiles, k, blocks, least, saved]


def test_the_device_walk_is_the_python_model() -> None:
    """tk::gemm_walk is constexpr: NVRTC evaluates every item against the Python model's."""
    asserts = []
    for tiles, k, blocks, least, saved in WALKS:
        walk = gemm.Walk(tiles, k, blocks, least, saved)
        dev = f"tk::gemm_walk{{{tiles}, {k}, {blocks}, {least}, {saved}}}"
        for w in range(blocks):
            items = walk.items(w)
            asserts.append(f"static_assert({dev}.items({w}) == {len(items)});")
            asserts += [f"static_assert({dev}({w}, {n}).tile == {it.tile} && {dev}({w}, {n}).k_begin == {it.k_begin} "
                        f"&& {dev}({w}, {n}).k_end == {it.k_end} && {dev}({w}, {n}).first_sharer == {it.first_sharer}"
                        f" && {dev}({w}, {n}).partial == {str(it.partial).lower()});" for n, it in enumerate(items)]
    src = '#include "tk.cuh"\n' + "\n".join(asserts) + '\nextern "C" __global__ void k() {}\n'
    tklab.compile(src, arch="sm_80", name="gemm_walk.cu")  # plain C++: any architecture


# ---- the kernel on the CPU emulator ----------------------------------------------------------------------
STEP = gemm.VARIANTS["6_stream_k_c1"].with_options("-DSK_MIN_SLICES=1", "-DSK_MIN_SAVED=1", name="stream_k_test")
M, N, K = 500, 264, 200  # 4 x 2 tiles of 128 x 256, 4 K-slices (the last half empty)


@functools.cache
def _module(step: gemm.Step):  # noqa: ANN202 - an emulated module
    emu = pytest.importorskip("tklab.emulate")
    return emu.compile(step.path.read_text(), name=step.source, options=step.options)


def _run(blocks: int, step: gemm.Step = STEP, mod: object = None) -> tuple[np.ndarray, np.ndarray, np.ndarray,
                                                                          np.ndarray]:
    """(C, float64 reference, partial slots, flags after the run) on ``blocks`` emulated blocks (of ``mod``,
    else of the step's own source)."""
    emu = pytest.importorskip("tklab.emulate")
    mod = mod or _module(step)
    rng = np.random.default_rng(blocks)
    a = to_bf16_bits(rng.standard_normal((M, K)).astype(np.float32))
    b = to_bf16_bits(rng.standard_normal((K, N)).astype(np.float32))
    c = np.full((M, N), 0xFFFF, np.uint16)  # NaN: an element never written stays NaN
    maps = [emu.tensor_map(x, box, dtype="bfloat16") for x, box in zip((a, b, c), gemm.tma_boxes(step), strict=True)]
    consts = gemm.compiled(step).module.constants  # what the kernel says its workspace is (NVRTC)
    floats, nflags = consts["gemm_partial_floats"], consts["gemm_flags"]
    partials, flags = np.full(blocks * floats, np.nan, np.float32), np.zeros(blocks * nflags, np.int32)
    facts = gemm.launch_facts(gemm.compiled(step).module)
    mod["gemm"]((blocks,), (facts["threads"],), (*maps, M, N, K, partials, flags), shared_mem=facts["shared_bytes"])
    ref = bf16_to_float32(a).astype(np.float64) @ bf16_to_float32(b).astype(np.float64)
    return bf16_to_float32(c), ref, partials.reshape(blocks, -1), flags


@pytest.mark.parametrize("blocks,slots_used", [
    (6, [0, 1, 3, 4]),  # 8 tiles: no whole wave; each of the 2 tiles in 3 pieces (2 partials, then the owner)
    (5, [0, 2, 3]),     # 5 whole tiles, then 3 tiles in 5 runs: block 3 leaves a partial and owns another piece
    (4, []),            # 2 whole waves: nothing to split
])
def test_stream_k_matches_float64_on_a_pretend_gpu(blocks, slots_used) -> None:
    c, ref, partials, flags = _run(blocks)
    assert not np.isnan(c).any(), "an element of C was never written"
    np.testing.assert_allclose(c, ref, rtol=1e-2, atol=5e-2)
    used = [w for w in range(blocks) if not np.isnan(partials[w]).all()]
    assert used == slots_used == [w for w in range(blocks) for it in gemm.Walk(8, 4, blocks, 1, 1).items(w)
                                  if it.partial]
    assert not flags.any(), "every owner hands its flags back for the next launch"



def test_one_group_in_flight_hands_each_stage_back_only_after_its_products() -> None:
    """IN_FLIGHT=1: a consumer leaves its newest wgmma group running and returns the stage before it; the
    emulator reports a stage refilled while a pending group reads it, and the pieces of split tiles (which end
    and start groups mid-tile) must still add up."""
    c, ref, _, flags = _run(5, STEP.with_options("-DIN_FLIGHT=1", name="stream_k_in_flight"))
    assert not np.isnan(c).any()
    np.testing.assert_allclose(c, ref, rtol=1e-2, atol=5e-2)
    assert not flags.any()


def test_handing_back_a_stage_its_pending_group_still_reads_is_reported() -> None:
    """The planted mistake of IN_FLIGHT=1: return every stage right after issuing its products."""
    emu = pytest.importorskip("tklab.emulate")
    step = STEP.with_options("-DIN_FLIGHT=1", name="stream_k_in_flight_early")
    src = step.path.read_text()
    keep = "            if (k - k_begin >= IN_FLIGHT) hand_back();\n"
    last = "            if (k_end > k_begin) hand_back();\n"
    assert src.count(keep) == src.count(last) == 1
    mod = emu.compile(src.replace(keep, "            hand_back();\n").replace(last, ""), name=step.source,
                      options=step.options)
    with pytest.raises(emu.AsyncHazard, match="hands back dynamic shared memory, which the TMA load"):
        _run(5, step, mod)


def test_the_bench_takes_the_issues_shape_set_and_refuses_nonsense() -> None:
    import argparse

    bench = load_script(gemm.ROOT / "bench" / "gemm_wgmma.py", "gemm_bench")
    p = argparse.ArgumentParser()
    shapes = bench.parse_shapes(["issue27", "4096x4000x1032"], p)
    assert shapes[:5] == [4096, 8192, 4000, 2048, 1000] and (8192, 1024, 8192) in shapes
    assert shapes[-1] == (4096, 4000, 1032) and bench.parse_shapes(["64x64x64"], p) == [64]
    with pytest.raises(SystemExit):
        bench.parse_shapes(["4096x4000"], p)
    assert "6_stream_k" in gemm.VARIANTS and "6_stream_k_min16" in bench.EXPERIMENTS
    assert gemm.VARIANTS["6_stream_k"].stream_k and not gemm.STEPS["5_cluster"].stream_k
    assert not gemm.VARIANTS["6_stream_k"].with_options("-DSTREAM_K=0").stream_k  # the last -D wins


def test_a_null_workspace_pointer_is_profiled_as_null(tmp_path) -> None:
    """Steps 3-5 pass 0 for the stream-K workspace: tklab.profile re-creates that as a null pointer (the driver
    knows no allocation at address 0), not as memory to copy."""
    from tklab import launch
    from tklab.profile import recipe

    mod = tklab.compile('extern "C" __global__ void k(float* partials, int* flags, int n) {}', arch="sm_90a",
                        name="null_args.cu")
    packed = [bytes(8), bytes(8), np.int32(3).tobytes()]
    run = launch.Prepared("k", None, (1, 1, 1), (32, 1, 1), 0, 0, packed, (0, 0, np.int32(3)), mod["k"])

    def no_allocation(address: int) -> tuple[int, int]:
        raise AssertionError(f"looked up {address:#x}")

    rec = recipe.capture(run, tmp_path, read=lambda start, size: bytes(size), raw_range=no_allocation)
    assert rec.buffers == [] and [a.kind for a in rec.args] == ["bytes"] * 3
    assert rec.args[0].data == bytes(8).hex()


def test_the_bench_keeps_what_it_measured_one_problem_at_a_time(tmp_path, monkeypatch) -> None:
    import argparse
    import json

    bench = load_script(gemm.ROOT / "bench" / "gemm_wgmma.py", "gemm_bench")
    calls = []

    def fake(sizes, rounds, steps, target_ms):  # noqa: ANN001, ANN202 - stands in for the GPU timing
        calls.append((sizes, target_ms))
        key = gemm.shape_key(*sizes[0]) if isinstance(sizes[0], tuple) else sizes[0]
        rows = [{"n": key, "round": 0, "who": w, "host_us": 1.0, "bench": t, "graph": t, "batched": t}
                for w, t in (("cuBLAS", 100.0), ("6_stream_k", 103.0))]  # made-up numbers
        return {"sizes": [key], "rounds": 1, "methods": list(gemm.METHODS), "rows": rows,
                "labels": {"cuBLAS": "cuBLAS", "6_stream_k": "stream-K"}}

    monkeypatch.setattr(gemm, "progression", fake)
    args = argparse.Namespace(rounds=1, target_ms=80.0, json=tmp_path / "t.json")
    result = bench.timed([4096, (8192, 1024, 8192)], args, {})
    assert calls == [((4096,), 80.0), (((8192, 1024, 8192),), 80.0)]
    assert result["sizes"] == [4096, "8192x1024x8192"] and len(result["rows"]) == 4
    assert json.loads(args.json.read_text())["timing"]["sizes"] == [4096, "8192x1024x8192"]
    assert "1.030–1.030" in gemm.table(result) and "8192x1024x8192" in gemm.table(result)


def test_a_graph_replay_keeps_the_launch_and_its_workspace_alive(monkeypatch) -> None:
    """A stream-K graph's replay faults on the GPU (illegal address) if the prepared launch, and with it the
    workspace the graph's kernel node points at, is dropped after capture and the next capture empties torch's
    cache. With a stand-in torch (no GPU here): after _graphed returns and garbage is collected, the launch
    it captured must still be alive, and replaying calls the graph."""
    import contextlib
    import gc
    import sys
    import types
    import weakref

    class Launch:  # stands in for a Prepared holding its workspace
        calls = 0

        def __call__(self) -> None:
            Launch.calls += 1

    class Graph:
        replays = 0

        def replay(self) -> None:
            Graph.replays += 1

    cuda = types.SimpleNamespace(Stream=lambda: "side", stream=lambda s: contextlib.nullcontext(),
                                 synchronize=lambda: None, CUDAGraph=Graph,
                                 graph=lambda g, stream=None: contextlib.nullcontext())
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))
    made: list[weakref.ref] = []

    def make(stream: object) -> Launch:
        launch = Launch()
        made.append(weakref.ref(launch))
        return launch

    replay = gemm._graphed(make)
    gc.collect()
    assert made[0]() is not None, "the captured launch (and its workspace) was freed while the graph can replay"
    replay()
    assert Graph.replays == 1 and Launch.calls == 2  # the warm-up and the capture; replays do not call Python
    del replay
    gc.collect()
    assert made[0]() is None  # nothing else holds it: the replay is what keeps it
