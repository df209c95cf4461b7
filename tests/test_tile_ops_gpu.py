"""The tile library on a GPU: every op against a float64 numpy model, fresh random inputs every run.

Outputs are poisoned (NaN, or -1 for integers) before each launch, so an element nobody wrote fails.
The expected values come from models written here from the documented contracts (docs/ARCHITECTURE.md
for the fragment layout, the Hopper swizzle rules), not from the library's own code.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

import tklab
from tklab.kernels import gemm as gemm_steps
from tklab.run.arrays import bf16_to_float32, poisoned, to_bf16_bits

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parent.parent
OPS_SRC = ROOT / "tests" / "kernels" / "tile_ops.cu"
GEMM_SRC = ROOT / "solutions" / "gemm_mma_tiles.cu"
SEED = int.from_bytes(os.urandom(4), "little")  # printed in failures: rerun with the same inputs if needed


# ---- element types: rounding models -----------------------------------------------------------------------
ROUND = {
    "f32": lambda x: np.asarray(x, dtype=np.float32).astype(np.float64),
    "bf16": lambda x: bf16_to_float32(to_bf16_bits(x)).astype(np.float64),
    "half": lambda x: np.asarray(x, dtype=np.float16).astype(np.float64),
}
# one unit in the last place, relative: what a compute-in-float-then-round result may differ by
ULP = {"f32": 2e-6, "bf16": 2.0**-7, "half": 2.0**-10}


def dtype_of(name: str) -> str:
    return next(t for t in ("f32", "bf16", "half") if f"_{t}_" in name)


def shape_of(name: str) -> tuple[int, ...]:
    return tuple(int(v) for v in name.rsplit("_", 1)[1].split("x"))


@pytest.fixture(scope="module")
def cp():
    return pytest.importorskip("cupy")


@pytest.fixture(scope="module")
def arch() -> str:
    if not tklab.run.gpu.available():
        pytest.skip("needs an NVIDIA GPU")
    return tklab.run.gpu.arch()


@pytest.fixture(scope="module")
def ops(arch: str) -> tklab.toolchain.compiler.Module:
    return tklab.compile(OPS_SRC.read_text(), arch=arch)


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(SEED)


def run(ops, name, grid, block, args, shared_mem=0):
    ops[name](grid, block, args, shared_mem=shared_mem)
    import cupy

    cupy.cuda.runtime.deviceSynchronize()


# ---- the fragment layout (ARCHITECTURE.md) ------------------------------------------------------------------
def fragment_model(layout: str, rows: int, cols: int) -> np.ndarray:
    """Which (subtile, lane, k, p) id each element gets: lane = 4g + t holds pairs
    [0] = (row g, cols 2t..), [1] = (row g+8, ..), [2] = (row g, cols 2t+8..), [3] = (row g+8, cols 2t+8..);
    the col layout holds the same for the transposed subtile."""
    out = np.full((rows, cols), -1.0)
    width = cols // 16
    for i in range(rows // 16):
        for j in range(width):
            for lane in range(32):
                g, t = divmod(lane, 4)
                for k in range(4):
                    for p in range(2):
                        r, c = g + 8 * (k % 2), 2 * t + p + 8 * (k // 2)
                        if layout == "col":
                            r, c = c, r
                        out[16 * i + r, 16 * j + c] = (((i * width + j) * 32 + lane) * 4 + k) * 2 + p
    return out


@pytest.mark.parametrize("name", ["probe_row_f32_32x48", "probe_col_f32_32x48",
                                  "probe_row_bf16_16x16", "probe_col_bf16_16x16"])
def test_fragment_layout_matches_contract(cp, ops, name):
    rows, cols = shape_of(name)
    out = poisoned(cp, (rows, cols))
    run(ops, name, 1, 32, (out,))
    layout = "row" if "_row_" in name else "col"
    np.testing.assert_array_equal(out.get(), fragment_model(layout, rows, cols))


@pytest.mark.parametrize("layout", ["g", "t"])
def test_vector_layouts(cp, ops, rng, layout):
    x = rng.standard_normal(32).astype(np.float32)
    per_lane = 4 if layout == "g" else 8
    out = poisoned(cp, (32, per_lane))
    run(ops, f"vec_probe_{layout}_32", 1, 32, (out, cp.asarray(x)))
    expect = np.empty((32, per_lane), np.float32)
    for lane in range(32):
        g, t = divmod(lane, 4)
        for b in range(2):
            for h in range(2):
                if layout == "g":  # entries g, g+8 of each 16-block
                    expect[lane, 2 * b + h] = x[16 * b + g + 8 * h]
                else:  # entries 2t, 2t+1, 2t+8, 2t+9 of each 16-block
                    first = 16 * b + 2 * t + 8 * h
                    expect[lane, 4 * b + 2 * h: 4 * b + 2 * h + 2] = x[first: first + 2]
    np.testing.assert_array_equal(out.get(), expect, err_msg=f"seed {SEED}")


# ---- global <-> register --------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["g2r_f32_row_16x32", "g2r_f32_col_32x16", "g2r_bf16_row_32x32",
                                  "g2r_bf16_col_16x48", "g2r_half_row_16x16", "g2r_bf16raw_col_32x16"])
def test_global_register_roundtrip(cp, ops, rng, name):
    r, c = shape_of(name)
    rows, cols = 2 * r, 3 * c  # a 3 x 2 grid of tiles: coords must land right
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    if "bf16raw" in name:
        bits = to_bf16_bits(x)
        out = poisoned(cp, (rows, cols), np.uint16)
        run(ops, name, (3, 2), 32, (out, cp.asarray(bits), rows, cols))
        np.testing.assert_array_equal(out.get(), bits)
    else:
        out = poisoned(cp, (rows, cols))
        run(ops, name, (3, 2), 32, (out, cp.asarray(x), rows, cols))
        np.testing.assert_array_equal(out.get(), ROUND[dtype_of(name)](x).astype(np.float32), err_msg=f"seed {SEED}")


# ---- global -> shared -> register -> global, and register -> shared -> global --------------------------------
S2R = ["s2r_bf16_64x64_none_row_16x64_w1", "s2r_bf16_64x64_128B_row_32x32_w2", "s2r_bf16_64x64_128B_col_32x16_w2",
       "s2r_bf16_32x128_128B_col_16x32_w4", "s2r_bf16_64x32_64B_row_64x16_w1", "s2r_bf16_32x16_32B_col_16x16_w1",
       "s2r_bf16_32x64_none_col_32x32_w2", "s2r_half_64x64_128B_col_16x64_w2", "s2r_f32_32x64_128B_row_16x32_w2",
       "s2r_f32_32x32_128B_col_16x16_w1", "s2r_f32_32x16_64B_row_32x16_w1"]


@pytest.mark.parametrize("asynchronous", [1, 0])
@pytest.mark.parametrize("name", S2R)
def test_shared_paths(cp, ops, rng, name, asynchronous):
    parts = name.split("_")
    sr, sc = (int(v) for v in parts[2].split("x"))
    warps = int(parts[-1][1:])
    rows, cols = 2 * sr, 2 * sc
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    data = {"bf16": lambda v: to_bf16_bits(v), "half": lambda v: v.astype(np.float16), "f32": lambda v: v}[parts[1]](x)
    out_reg, out_smem = poisoned(cp, data.shape, data.dtype), poisoned(cp, data.shape, data.dtype)
    run(ops, name, (2, 2), 32 * warps, (out_reg, out_smem, cp.asarray(data), rows, cols, asynchronous))
    np.testing.assert_array_equal(out_reg.get(), data, err_msg="shared -> register (ldmatrix) path")
    np.testing.assert_array_equal(out_smem.get(), data, err_msg="register -> shared (stmatrix) path")


def swizzle_model(esize: int, rows: int, cols: int, span: int) -> np.ndarray:
    """Hopper's rules on byte addresses: 128B XORs bits [6:4] with [9:7], 64B [5:4] with [8:7], 32B bit 4
    with bit 7; a swizzled row is `span` bytes, so wider tiles are column panels of span bytes each."""
    panel = span // esize if span else cols
    r, c = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    lin = ((c // panel) * rows * panel + r * panel + c % panel) * esize
    nbits = {0: 0, 32: 1, 64: 2, 128: 3}[span]
    return lin ^ (((lin >> 7) & ((1 << nbits) - 1)) << 4)


@pytest.mark.parametrize("name", ["swz_bf16_64x64_128B", "swz_bf16_32x128_128B", "swz_bf16_64x32_64B",
                                  "swz_bf16_32x16_32B", "swz_f32_16x64_128B", "swz_bf16_16x64_none"])
def test_swizzle_addresses(cp, ops, name):
    _, t, shape, mode = name.split("_")
    rows, cols = (int(v) for v in shape.split("x"))
    esize, span = (4 if t == "f32" else 2), (0 if mode == "none" else int(mode[:-1]))
    out = poisoned(cp, (rows, cols), np.int32)
    run(ops, name, 1, 128, (out,))
    got = out.get()
    np.testing.assert_array_equal(got, swizzle_model(esize, rows, cols, span))
    # a permutation of the tile's bytes that keeps 16-byte chunks whole ...
    assert sorted(got.ravel().tolist()) == list(range(0, rows * cols * esize, esize))
    chunk = 16 // esize
    assert np.all(got[:, ::chunk] % 16 == 0)
    assert np.all(np.diff(got.reshape(rows, cols // chunk, chunk), axis=2) == esize)
    # ... and, when swizzled, puts any 8 consecutive rows of one chunk column into 8 distinct bank groups
    if span:
        groups = (got[:, ::chunk] // 16) % 8
        for r0 in range(0, rows, 8):
            for cc in range(groups.shape[1]):
                assert len(set(groups[r0:r0 + 8, cc])) == 8, (r0, cc)


def test_default_swizzle(cp, ops):
    out = poisoned(cp, 7, np.int32)
    run(ops, "swz_defaults", 1, 1, (out,))
    assert out.get().tolist() == [128, 64, 32, 128, 64, 32, 4]


def test_shared_allocator_alignment(cp, ops):
    out = poisoned(cp, 9, np.int32)
    run(ops, "alloc_probe", 1, 32, (out,), shared_mem=64 * 1024)
    base, v, t1, t2, t3a, t3b, t4, end, need = out.get().tolist()
    sizes = [(v, 64, 16), (t1, 8192, 1024), (t2, 512, 16), (t3a, 4096, 1024), (t3b, 4096, 1024), (t4, 2048, 1024)]
    prev_end = base
    for addr, size, align in sizes:
        assert addr % align == 0, (addr, align)
        assert addr >= prev_end and addr - prev_end < align  # next aligned place, no gap beyond it
        prev_end = addr + size
    assert end == prev_end
    assert end - base <= need <= 1024 + sum(s + a for _, s, a in sizes)


def test_static_shared_tiles_are_aligned(cp, ops):
    out = poisoned(cp, 2, np.int32)
    run(ops, "static_align_probe", 1, 32, (out,))
    assert out.get().tolist() == [0, 0]


# ---- element-wise maps ----------------------------------------------------------------------------------------
MAPS = {0: np.exp, 1: np.exp2, 2: np.add, 3: np.subtract, 4: np.multiply, 5: np.divide, 6: np.maximum,
        7: np.minimum, 8: "add", 9: "sub", 10: "mul", 11: "div", 12: "max", 13: "min", 14: np.negative,
        15: np.abs, 16: "fill", 17: "zero", 18: "lambda"}
SCALAR = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "max": np.maximum,
          "min": np.minimum}


def map_model(op: int, a: np.ndarray, b: np.ndarray, s: float) -> np.ndarray:
    f = MAPS[op]
    if f == "fill":
        return np.full_like(a, s)
    if f == "zero":
        return np.zeros_like(a)
    if f == "lambda":
        return a * a + 1.0
    if isinstance(f, str):
        return SCALAR[f](a, s)
    return f(a, b) if op in (2, 3, 4, 5, 6, 7) else f(a)


def map_inputs(rng, shape):
    a = rng.uniform(-3, 3, shape).astype(np.float32)
    b = (rng.choice([-1, 1], shape) * rng.uniform(0.5, 3, shape)).astype(np.float32)  # safe divisor
    s = float(rng.uniform(0.5, 2.0) * rng.choice([-1, 1]))
    return a, b, s


@pytest.mark.parametrize("name", ["map_f32_row_32x32", "map_f32_col_16x48", "map_bf16_row_16x32",
                                  "map_bf16_col_32x16", "map_half_row_16x16"])
def test_maps(cp, ops, rng, name):
    t = dtype_of(name)
    shape = shape_of(name)
    for op in MAPS:
        a, b, s = map_inputs(rng, shape)
        out = poisoned(cp, shape)
        run(ops, name, 1, 32, (out, cp.asarray(a), cp.asarray(b), op, s))
        ra, rb, rs = ROUND[t](a), ROUND[t](b), float(np.float32(s))
        expect = ROUND[t](map_model(op, ra, rb, rs))
        np.testing.assert_allclose(out.get(), expect, rtol=ULP[t], atol=1e-6, err_msg=f"op {op}, seed {SEED}")


@pytest.mark.parametrize("name", ["vmap_g_32", "vmap_t_48"])
def test_vector_maps(cp, ops, rng, name):
    n = int(name.rsplit("_", 1)[1])
    for op in MAPS:
        a, b, s = map_inputs(rng, n)
        out = poisoned(cp, n)
        run(ops, name, 1, 32, (out, cp.asarray(a), cp.asarray(b), op, s))
        expect = map_model(op, a.astype(np.float64), b.astype(np.float64), float(np.float32(s)))
        np.testing.assert_allclose(out.get(), expect, rtol=ULP["f32"], atol=1e-6, err_msg=f"op {op}, seed {SEED}")


@pytest.mark.parametrize("name", ["convert_bf16_row_32x32", "convert_half_col_16x32"])
def test_convert(cp, ops, rng, name):
    shape = shape_of(name)
    x = (rng.standard_normal(shape) * 10).astype(np.float32)
    out, out_bf = poisoned(cp, shape), poisoned(cp, shape, np.uint16)
    run(ops, name, 1, 32, (out, out_bf, cp.asarray(x)))
    np.testing.assert_array_equal(out.get(), ROUND[dtype_of(name)](x).astype(np.float32))
    np.testing.assert_array_equal(out_bf.get(), to_bf16_bits(x))


# ---- broadcasts and reductions --------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["bcast_f32_row_32x48", "bcast_f32_col_48x32", "bcast_bf16_row_16x32",
                                  "bcast_bf16_col_32x16"])
def test_broadcasts(cp, ops, rng, name):
    t = dtype_of(name)
    rows, cols = shape_of(name)
    fns = [np.add, np.subtract, np.multiply, np.divide]
    for op in range(8):
        a = rng.uniform(-3, 3, (rows, cols)).astype(np.float32)
        vr = (rng.choice([-1, 1], rows) * rng.uniform(0.5, 3, rows)).astype(np.float32)
        vc = (rng.choice([-1, 1], cols) * rng.uniform(0.5, 3, cols)).astype(np.float32)
        out = poisoned(cp, (rows, cols))
        run(ops, name, 1, 32, (out, cp.asarray(a), cp.asarray(vr), cp.asarray(vc), op))
        v = ROUND[t](vr)[:, None] if op < 4 else ROUND[t](vc)[None, :]
        expect = ROUND[t](fns[op % 4](ROUND[t](a), v))
        np.testing.assert_allclose(out.get(), expect, rtol=ULP[t], atol=1e-6, err_msg=f"op {op}, seed {SEED}")


@pytest.mark.parametrize("name", ["reduce_f32_row_32x64", "reduce_f32_col_64x32", "reduce_f32_row_16x16",
                                  "reduce_bf16_row_48x16", "reduce_bf16_col_16x48"])
def test_reductions(cp, ops, rng, name):
    t = dtype_of(name)
    rows, cols = shape_of(name)
    for op in range(5):
        a = rng.uniform(-3, 3, (rows, cols)).astype(np.float32)
        pr, pc = rng.uniform(-3, 3, rows).astype(np.float32), rng.uniform(-3, 3, cols).astype(np.float32)
        out_r, out_c = poisoned(cp, rows), poisoned(cp, cols)
        run(ops, name, 1, 32, (out_r, out_c, cp.asarray(a), cp.asarray(pr), cp.asarray(pc), op))
        x = ROUND[t](a)
        fn = [np.max, np.sum, np.min, np.max, np.sum][op]
        er, ec = fn(x, axis=1), fn(x, axis=0)
        if op == 3:
            er, ec = np.maximum(er, pr), np.maximum(ec, pc)
        elif op == 4:
            er, ec = er + pr, ec + pc
        # sums: fp32 accumulation in another order; bound by the sum of magnitudes
        tol_r = 1e-5 * (np.abs(x).sum(axis=1) + 3)
        tol_c = 1e-5 * (np.abs(x).sum(axis=0) + 3)
        assert np.all(np.abs(out_r.get() - er) <= tol_r), (op, SEED, out_r.get(), er)
        assert np.all(np.abs(out_c.get() - ec) <= tol_c), (op, SEED, out_c.get(), ec)


# ---- tensor-core products -------------------------------------------------------------------------------------
@pytest.mark.parametrize("in_place", [0, 1])
@pytest.mark.parametrize("name", ["mma_AB_bf16_16x16x16", "mma_AB_bf16_32x64x48", "mma_AB_half_64x32x32",
                                  "mma_ABt_bf16_16x32x64", "mma_ABt_half_32x16x16"])
def test_mma(cp, ops, rng, name, in_place):
    t = dtype_of(name)
    m, n, k = (int(v) for v in name.rsplit("_", 1)[1].split("x"))
    a = rng.standard_normal((m, k)).astype(np.float32)
    bt = "_ABt_" in name
    b = rng.standard_normal((n, k) if bt else (k, n)).astype(np.float32)
    c = rng.standard_normal((m, n)).astype(np.float32)
    d = poisoned(cp, (m, n))
    run(ops, name, 1, 32, (d, cp.asarray(a), cp.asarray(b), cp.asarray(c), in_place))
    ra, rb = ROUND[t](a), ROUND[t](b)
    bm = rb.T if bt else rb
    expect = ra @ bm + c
    bound = 1e-5 * (np.abs(ra) @ np.abs(bm) + np.abs(c)) + 1e-6
    err = np.abs(d.get() - expect)
    assert np.all(err <= bound), f"max error {err.max()} (seed {SEED})"


@pytest.mark.parametrize("name", ["layout_bf16_row_32x16", "layout_bf16_col_16x48", "layout_f32_row_16x32",
                                  "layout_f32_col_32x32", "layout_half_row_16x16"])
def test_layout_swap_and_transpose(cp, ops, rng, name):
    rows, cols = shape_of(name)
    x = ROUND[dtype_of(name)](rng.standard_normal((rows, cols))).astype(np.float32)
    s, t1, t2 = poisoned(cp, (rows, cols)), poisoned(cp, (cols, rows)), poisoned(cp, (cols, rows))
    run(ops, name, 1, 32, (s, t1, t2, cp.asarray(x)))
    np.testing.assert_array_equal(s.get(), x, err_msg="swap_layout")
    np.testing.assert_array_equal(t1.get(), x.T, err_msg="transpose, same layout")
    np.testing.assert_array_equal(t2.get(), x.T, err_msg="transpose into the other layout (free)")


def test_shared_vector_roundtrip(cp, ops, rng):
    x = rng.standard_normal(64).astype(np.float32)
    out = poisoned(cp, 64)
    run(ops, "sv_roundtrip_t_64", 1, 32, (out, cp.asarray(x)))
    np.testing.assert_array_equal(out.get(), ROUND["bf16"](x).astype(np.float32))


# ---- the chapter-06 GEMM --------------------------------------------------------------------------------------
# The kernel's tile (its file's #define defaults) and its gemm_shared_bytes, modelled from that tile
# (tests/test_tile_compile.py holds the model equal to the export): a model here because the CPU emulator
# (tests/test_emulate_library.py runs this test there) may have no PTX to read the export from.
GEMM_TILE = gemm_steps.mma_tiles_options()
GEMM_SMEM = GEMM_TILE["STAGES"] * (GEMM_TILE["BM"] * GEMM_TILE["BK"] + GEMM_TILE["BK"] * GEMM_TILE["BN"]) * 2 + 1024
GEMM_THREADS = 32 * GEMM_TILE["WARPS_M"] * GEMM_TILE["WARPS_N"]


@pytest.mark.parametrize("m,n,k", [(128, 128, 32), (256, 384, 96), (384, 256, 1024), (1024, 1024, 512)])
def test_gemm_matches_cupy(cp, rng, arch, m, n, k):
    mod = tklab.compile(GEMM_SRC.read_text(), arch=arch)
    a, b = to_bf16_bits(rng.standard_normal((m, k))), to_bf16_bits(rng.standard_normal((k, n)))
    c = poisoned(cp, (m, n), np.uint16)
    mod["gemm_mma_tiles"]((n // GEMM_TILE["BN"], m // GEMM_TILE["BM"]), GEMM_THREADS,
                          (cp.asarray(a), cp.asarray(b), c, m, n, k), shared_mem=GEMM_SMEM)
    cp.cuda.runtime.deviceSynchronize()
    ref = cp.matmul(cp.asarray(bf16_to_float32(a), dtype=cp.float64), cp.asarray(bf16_to_float32(b), dtype=cp.float64))
    got = cp.asarray(bf16_to_float32(c.get()), dtype=cp.float64)
    assert not bool(cp.isnan(got).any()), "unwritten (NaN) elements in C"
    rel = float(cp.linalg.norm(got - ref) / cp.linalg.norm(ref))
    assert rel < 1e-2, f"relative Frobenius error {rel:.2e} (seed {SEED})"
