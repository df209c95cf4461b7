"""tklab.models.layouts against what the real instructions did on an H200 (bench/results/layouts_h200.json)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest

from tklab import layouts as L

TABLE = Path(__file__).resolve().parents[1] / "bench" / "results" / "layouts_h200.json"


@pytest.fixture(scope="module")
def table() -> dict:
    return json.loads(TABLE.read_text())


def _bf16(bits: int) -> float:
    return struct.unpack("<f", struct.pack("<I", (bits & 0xFFFF) << 16))[0]


def _f16(bits: int) -> float:
    return struct.unpack("<e", struct.pack("<H", bits & 0xFFFF))[0]


def _matrix(frag: L.Fragment, regs: list[list[int]], conv) -> np.ndarray:
    """Undo a fragment: registers (packed 16-bit halves) → the matrix they hold, by the model."""
    out = np.full(frag.shape, np.nan)
    for lane in range(frag.lanes):
        for i in range(frag.elements):
            r, half = frag.register_of(i)
            out[frag.coords(lane, i)] = conv(regs[lane][r] >> (16 * half))
    return out


def _mma_predicts(A: L.Fragment, B: L.Fragment, C: L.Fragment, e: dict, conv) -> bool:
    a, b = _matrix(A, e["a"], conv), _matrix(B, e["b"], conv)
    c = np.full((16, 8), np.nan)
    for lane in range(32):
        for i in range(4):
            c[C.coords(lane, i)] = e["c"][lane][i]
    d = a @ b + c
    return [[float(d[C.coords(lane, i)]) for i in range(4)] for lane in range(32)] == e["d"]


def test_table_says_where_it_came_from(table: dict) -> None:
    m = table["machine"]
    assert "H200" in m["device"] and len(m["commit"]) == 40 and m["date"][:4].isdigit()


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
def test_mma_m16n8k16_fragments(table: dict, dtype: str) -> None:
    """A, B and C/D models together reproduce every recorded mma (identity pushes and random products)."""
    conv = _bf16 if dtype == "bf16" else _f16
    frags = [L.fragment("mma.m16n8k16", op) for op in "ABC"]
    exps = table["mma"][dtype]
    assert len(exps) >= 7
    for e in exps:
        assert _mma_predicts(*frags, e, conv), e["name"]


def test_a_wrong_mma_model_is_caught(table: dict) -> None:
    """Swap A's registers 1 and 2 (row half vs k half): the recorded data must reject it."""
    good = L.fragment("mma.m16n8k16", "A")

    def swapped(lane: int, i: int) -> tuple[int, ...]:
        r, e = divmod(i, 2)
        return good.coords(lane, 2 * {1: 2, 2: 1}.get(r, r) + e)

    bad = L.Fragment("bad", "A", 32, 8, 16, (16, 16), ("row", "k"), swapped)
    frags = [bad, L.fragment("mma.m16n8k16", "B"), L.fragment("mma.m16n8k16", "C")]
    assert not all(_mma_predicts(*frags, e, _bf16) for e in table["mma"]["bf16"])


def test_ldmatrix(table: dict) -> None:
    """Shared 16-bit word h holds h, so each register half says which address it came from."""
    seen = set()
    for e in table["ldmatrix"]:
        f = L.fragment(f"ldmatrix.x{e['num']}" + (".trans" if e["trans"] else ""))
        for lane in range(32):
            for i in range(f.elements):
                m, row, col = f.coords(lane, i)
                r, half = f.register_of(i)
                got = (e["out"][lane][r] >> (16 * half)) & 0xFFFF
                assert got == (e["rows"][8 * m + row] + 2 * col) // 2, (f.name, lane, i)
        seen.add((e["num"], e["trans"]))
    assert seen == {(n, t) for n in (1, 2, 4) for t in (False, True)}


def test_stmatrix(table: dict) -> None:
    for e in table["stmatrix"]:
        f = L.fragment(f"stmatrix.x{e['num']}")
        expect = {}
        for lane in range(32):
            for i in range(f.elements):
                m, row, col = f.coords(lane, i)
                r, half = f.register_of(i)
                expect[(e["rows"][8 * m + row] + 2 * col) // 2] = (e["regs"][lane][r] >> (16 * half)) & 0xFFFF
        assert len(expect) == 64 * e["num"]
        assert all(expect.get(h, 0xFFFF) == v for h, v in enumerate(e["smem"])), f.name


def test_wgmma_accumulator_for_every_n(table: dict) -> None:
    """D of wgmma.m64nNk16 (A from registers, B no-swizzle K-major in shared memory), N = 8..256."""
    ns = set()
    for e in table["wgmma"]:
        assert e["model_agrees"], (e["n"], e["variant"])
        n = e["n"]
        A, D = L.fragment(f"wgmma.m64n{n}k16", "A"), L.fragment(f"wgmma.m64n{n}k16", "D")
        a = _matrix(A, e["a"], _bf16)
        img = bytes.fromhex(e["b_image"])
        b = np.zeros((16, n))
        for k in range(16):
            for col in range(n):
                off = L.interleaved_offset(col, k, lbo=e["lbo"], sbo=e["sbo"])
                b[k, col] = _bf16(struct.unpack("<H", img[off:off + 2])[0])
        d = a @ b
        got = np.array(e["d"])
        want = np.array([[d[D.coords(t, i)] for i in range(n // 2)] for t in range(128)])
        assert np.array_equal(got, want), n
        ns.add(n)
    assert ns == set(range(8, 257, 8))
    # The descriptor's LBO is the K step for a K-major operand (as the PTX ISA says): that reading worked.
    assert {e["variant"] for e in table["wgmma"]} == {"LBO=K step"}


def test_tma_box_lands_where_the_model_says(table: dict) -> None:
    modes = set()
    for c in table["tma"]:
        assert c["status"] == 1, c
        expect = {}
        for r in range(c["box_rows"]):
            for col in range(c["box_cols"]):
                off = L.tma_box_offset(r, col, box_cols=c["box_cols"], swizzle=c["swizzle"])
                y, x = c["y0"] + r, c["x0"] + col
                inside = y < c["global_rows"] and x < c["global_cols"]
                expect[off // 2] = y * c["global_cols"] + x + 1 if inside else 0  # TMA fills outside with 0
        assert all(expect.get(h, 0xFFFF) == v for h, v in enumerate(c["smem"])), c
        modes.add(c["swizzle"])
    assert modes == set(L.SWIZZLE_MODES)


# ------------------------------------------------------------------------- model properties (no hardware)
def test_register_tile_is_the_mma_a_fragment_and_wgmma_rows() -> None:
    rt, a = L.fragment("rt.16x16"), L.fragment("mma.m16n8k16", "A")
    assert rt.table() == a.table()
    # Pairs 0/1 of a row tile are one mma C fragment (cols 0..7); wgmma D's first 8 columns of warp 0 too.
    c, d = L.fragment("mma.m16n8k16", "C"), L.fragment("wgmma.m64n64k16", "D")
    for lane in range(32):
        assert [rt.coords(lane, i) for i in (0, 1, 2, 3)] == [c.coords(lane, i) for i in range(4)]
        assert [d.coords(lane, i) for i in range(4)] == [c.coords(lane, i) for i in range(4)]
        assert d.coords(lane + 96, 0) == (48 + c.coords(lane, 0)[0], c.coords(lane, 0)[1])


def test_col_tile_is_the_transpose_and_what_ldmatrix_trans_fills() -> None:
    row, col = L.fragment("rt.32x64", "row"), L.fragment("rt.32x64", "col")
    for lane in range(32):
        for i in range(row.elements):
            r, c = row.coords(lane, i)
            sr, sc = r // 16 * 16, c // 16 * 16
            assert col.coords(lane, i) == (sr + (c - sc), sc + (r - sr))
    # ldmatrix.x4.trans with matrix m = quadrant (rows 8(m>>1), cols 8(m&1)) gives the col subtile.
    tr, col16 = L.fragment("ldmatrix.x4.trans"), L.fragment("rt.16x16", "col")
    for lane in range(32):
        for i in range(8):
            m, r, c = tr.coords(lane, i)
            assert col16.coords(lane, i) == (r + 8 * (m >> 1), c + 8 * (m & 1))


@pytest.mark.parametrize("name,operand", L.names())
def test_every_fragment_is_a_bijection(name: str, operand: str | None) -> None:
    f = L.fragment(name, operand)
    coords = [f.coords(lane, i) for lane in range(f.lanes) for i in range(f.elements)]
    assert len(set(coords)) == len(coords) == int(np.prod(f.shape))
    lane, i = f.lanes - 1, f.elements - 1
    assert f.owner(*f.coords(lane, i)) == (lane, i)


def test_swizzle_properties() -> None:
    for mode, period in (("none", 1), ("32B", 256), ("64B", 512), ("128B", 1024)):
        for off in range(0, 4096, 2):
            s = L.swizzle(off, mode)
            assert L.swizzle(s, mode) == off  # its own inverse
            assert s // period == off // period and s % 16 == off % 16 and s // 128 == off // 128
    # 128B: one 16-byte column of 8 consecutive 128-byte rows lands in 8 different chunks (no conflict).
    assert sorted(L.swizzle(128 * r + 32, "128B") // 16 % 8 for r in range(8)) == list(range(8))
    assert L.swizzle(0x3F0, "128B") == 0x380 and L.swizzle(0xB0, "32B") == 0xA0
    with pytest.raises(ValueError, match="not one of"):
        L.swizzle(0, "16B")


def test_shared_tile_map_follows_the_panels() -> None:
    # st<bf16, 64, 128>: two 64x64 panels of 128-byte rows, 128B swizzle.
    assert L.default_swizzle(128) == "128B" and L.default_swizzle(16) == "32B" and L.default_swizzle(8) == "none"
    assert L.st_offset(0, 64, rows=64, cols=128) == 64 * 128
    assert L.st_offset(1, 0, rows=64, cols=128) == L.swizzle(128, "128B") == 144
    assert L.st_offset(3, 9, rows=16, cols=16, swizzle="interleave") == 16 * 16 + 3 * 16 + 2
    offs = {L.st_offset(r, c, rows=32, cols=64) for r in range(32) for c in range(64)}
    assert offs == set(range(0, 32 * 64 * 2, 2))
    with pytest.raises(ValueError, match="outside"):
        L.st_offset(16, 0, rows=16, cols=16)


def test_tma_box_offset_rules() -> None:
    assert L.tma_box_offset(1, 0, box_cols=32, swizzle="128B") == 128 + 16  # 64 B rows take a 128 B span
    assert L.tma_box_offset(1, 0, box_cols=8) == 16  # no swizzle: dense rows
    with pytest.raises(ValueError, match="at most 64 bytes"):
        L.tma_box_offset(0, 0, box_cols=64, swizzle="64B")
    with pytest.raises(ValueError, match="multiple of 16"):
        L.tma_box_offset(0, 0, box_cols=4)


@pytest.mark.parametrize(
    ("name", "operand", "message"),
    [
        ("mma.m16n8k16", "E", "operands A, B, C and D"),
        ("wgmma.m64n12k16", "D", "multiple of 8"),
        ("rt.20x16", None, "multiples of 16"),
        ("ldmatrix.x3", None, "unknown fragment"),
        ("stmatrix.x4.trans", None, "without .trans"),
    ],
)
def test_bad_fragment_names(name: str, operand: str | None, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        L.fragment(name, operand)


def test_coords_checks_its_arguments() -> None:
    f = L.fragment("mma.m16n8k16", "A")
    with pytest.raises(ValueError, match="lane 32"):
        f.coords(32, 0)
    with pytest.raises(ValueError, match="element 8"):
        f.coords(0, 8)


def test_fractional_lanes_and_elements_are_refused():
    f = L.fragment("mma.m16n8k16", "A")
    with pytest.raises(TypeError, match="lane must be a whole number, not 1.5"):
        f.coords(1.5, 0)
    with pytest.raises(TypeError, match="element must be a whole number"):
        f.coords(1, 0.5)
    assert f.coords(1.0, 0) == f.coords(1, 0) and all(isinstance(x, int) for x in f.coords(1.0, 0))
    with pytest.raises(TypeError, match="coordinate"):
        f.owner(0.5, 0)
    with pytest.raises(TypeError, match="byte offset"):
        L.swizzle(128.5, "128B")
