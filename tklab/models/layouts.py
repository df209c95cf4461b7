"""Where every element lives: fragment layouts of the tensor-core instructions, swizzles, tile maps.

A *fragment* is a matrix spread over the registers of a warp (or a warpgroup). Each model here answers
one question -- which (row, col) does lane ``lane`` hold as its ``i``-th element? -- and every model is
checked against the hardware (``bench/probes/layouts_probe.py`` pushes lane/register identities through
the real instructions; ``bench/results/layouts_h200.json`` is what came back; ``tests/test_layouts.py``
compares).

Public API::

    fragment(name, operand=None) -> Fragment        # .coords(lane, i), .owner(*coord), .table()
    swizzle(byte_offset, mode)   -> int             # mode: "none", "32B", "64B", "128B"
    st_offset(row, col, rows=, cols=, itemsize=2, swizzle=None) -> int   # the tile library's st<> map
    tma_box_offset(row, col, box_cols=, itemsize=2, swizzle="none") -> int
    interleaved_offset(mn, k, lbo=, sbo=, itemsize=2) -> int              # wgmma's no-swizzle operand
    parked(cols) -> list[(row, col)]                # a 64 x cols accumulator as store_fragments lays it out

Fragment names (elements are numbered in register order, the low 16-bit half first):

- ``"mma.m16n8k16"``, operand ``"A"`` (16x16, (row, k)), ``"B"`` (16x8, (k, col)), ``"C"``/``"D"``
  (16x8 f32, (row, col)). bf16 and f16 share the layout.
- ``"ldmatrix.x1"``, ``".x2"``, ``".x4"``, with ``.trans``; ``"stmatrix.x1/.x2/.x4"``: coordinates are
  ``(matrix, row, col)`` *as stored in shared memory*, row = the row whose address lane ``8*matrix+row``
  supplied, col = the 16-bit element within that 16-byte row.
- ``"wgmma.m64nNk16"`` for N = 8, 16, ..., 256, operand ``"D"`` (64xN f32 accumulator) or ``"A"`` (64x16
  from registers); ``lane`` is the thread's index in its warpgroup (0..127).
- ``"rt.RxC"`` (e.g. ``"rt.32x64"``), operand ``"row"`` (default) or ``"col"``: the tile library's
  register tile (docs/ARCHITECTURE.md), elements in the order of ``rt::reg(i)``.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable
from dataclasses import dataclass, field

SWIZZLE_MODES = ("none", "32B", "64B", "128B")
_SWIZZLE_BITS = {"none": 0, "32B": 1, "64B": 2, "128B": 3}


def _whole(value: object, what: str) -> int:
    """``value`` as an int: ints and numpy integers pass, a float only when whole (1.5 is refused, not cut)."""
    if isinstance(value, bool):
        raise TypeError(f"{what} must be an integer, not a bool")
    try:
        return operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        pass
    if isinstance(value, float) and value.is_integer():
        return int(value)
    raise TypeError(f"{what} must be a whole number, not {value!r}")


def swizzle(byte_offset: int, mode: str = "none") -> int:
    """Hopper's shared-memory swizzle of a byte address (it is its own inverse).

    The 16-byte chunk index inside a 128-byte line (bits 4..6) is XORed with the line index (bits
    7..9): all 3 bits for 128B, the low 2 for 64B, the low 1 for 32B. Bits 0..3 never move, so a
    16-byte chunk stays whole; the pattern repeats every 1024 / 512 / 256 bytes.
    """
    if mode not in _SWIZZLE_BITS:
        raise ValueError(f"swizzle mode {mode!r} is not one of {', '.join(SWIZZLE_MODES)}")
    byte_offset = _whole(byte_offset, "byte offset")
    if byte_offset < 0:
        raise ValueError(f"byte offset {byte_offset} is negative")
    mask = (1 << _SWIZZLE_BITS[mode]) - 1
    return byte_offset ^ (((byte_offset >> 7) & mask) << 4)


_swizzle = swizzle  # for functions whose ``swizzle`` argument hides the function


def _span(mode: str) -> int:
    return {"none": 0, "32B": 32, "64B": 64, "128B": 128}[mode]


def default_swizzle(cols: int, itemsize: int = 2) -> str:
    """The widest swizzle whose span divides a tile row (the tile library's ``default_swizzle``)."""
    row = cols * itemsize
    for mode in ("128B", "64B", "32B"):
        if row % _span(mode) == 0:
            return mode
    return "none"


def st_offset(row: int, col: int, *, rows: int, cols: int, itemsize: int = 2, swizzle: str | None = None) -> int:
    """Byte offset of element (row, col) of the tile library's shared tile ``st<T, rows, cols, swizzle>``.

    Swizzled tiles are cut into column panels one swizzle span wide (what one TMA box or one wgmma
    descriptor covers); each panel is ``rows`` rows of ``span`` bytes and the swizzle is applied to the
    whole offset (tiles start 1024-byte aligned). ``swizzle="interleave"`` is wgmma's no-swizzle layout:
    16-byte panels. ``None`` picks :func:`default_swizzle`; ``"none"`` is plain row-major.
    """
    mode = default_swizzle(cols, itemsize) if swizzle is None else swizzle
    if not (0 <= row < rows and 0 <= col < cols):
        raise ValueError(f"element ({row}, {col}) is outside a {rows}x{cols} tile")
    if mode == "interleave":
        panel_cols, mode = 16 // itemsize, "none"
    else:
        panel_cols = _span(mode) // itemsize if mode != "none" else cols
    if cols % panel_cols:
        raise ValueError(f"{cols} columns of {itemsize} B do not fill whole {panel_cols * itemsize}-byte panels")
    linear = (col // panel_cols) * rows * panel_cols + row * panel_cols + col % panel_cols
    return _swizzle(linear * itemsize, mode)


def tma_box_offset(row: int, col: int, *, box_cols: int, itemsize: int = 2, swizzle: str = "none") -> int:
    """Shared-memory byte offset where a TMA tile copy puts box element (row, col).

    Without swizzle the box lands densely, row after row, each row ``box_cols * itemsize`` bytes (a
    multiple of 16). With a swizzle, every box row takes one whole swizzle span (32/64/128 bytes) even
    when it is narrower -- measured: a 64-byte box row under 128B swizzle starts 128 bytes after the
    previous one, and the bytes in between stay untouched -- and the XOR is applied to that address
    (the destination is 1024-byte aligned, so offsets and addresses swizzle alike).
    """
    inner = box_cols * itemsize
    if inner % 16:
        raise ValueError(f"a TMA box row must be a multiple of 16 bytes, not {inner}")
    if swizzle != "none" and inner > _span(swizzle):
        raise ValueError(f"a {swizzle} swizzle allows box rows of at most {_span(swizzle)} bytes, not {inner}")
    if not 0 <= col < box_cols:
        raise ValueError(f"column {col} is outside a box {box_cols} wide")
    pitch = inner if swizzle == "none" else _span(swizzle)
    return _swizzle(row * pitch + col * itemsize, swizzle)


def interleaved_offset(mn: int, k: int, *, lbo: int, sbo: int, itemsize: int = 2) -> int:
    """Byte offset of element (mn, k) of a K-major wgmma operand without swizzle.

    The tensor core reads *core matrices*: 8 rows (M or N) x 16 bytes of K, stored as 128 contiguous
    bytes. LBO ("leading dimension byte offset") is the distance between core matrices adjacent in K,
    SBO ("stride byte offset") between core matrices adjacent in M/N. (Measured: wgmma m64nNk16 read
    B correctly for every N with LBO = the K step; see ``bench/results/layouts_h200.json``.)
    """
    kc = 16 // itemsize
    return (k // kc) * lbo + (mn // 8) * sbo + (mn % 8) * 16 + (k % kc) * itemsize


# ------------------------------------------------------------------------------------------- fragments
@dataclass(frozen=True)
class Fragment:
    """A matrix spread over lanes: ``coords(lane, i)`` of each lane's i-th element, and its inverse."""

    name: str
    operand: str | None
    lanes: int  # 32 (warp) or 128 (warpgroup)
    elements: int  # per lane
    bits: int  # 16 or 32 per element
    shape: tuple[int, ...]  # extent of each coordinate
    dims: tuple[str, ...]  # what each coordinate means
    _fn: Callable[[int, int], tuple[int, ...]] = field(repr=False, compare=False)

    @property
    def registers(self) -> int:
        """32-bit registers per lane."""
        return self.elements * self.bits // 32

    def coords(self, lane: int, i: int) -> tuple[int, ...]:
        """Coordinates of element ``i`` (register ``i * bits // 32``, low half first) of ``lane``."""
        lane, i = _whole(lane, f"{self.name}: lane"), _whole(i, f"{self.name}: element")
        if not 0 <= lane < self.lanes:
            raise ValueError(f"{self.name}: lane {lane} is not in 0..{self.lanes - 1}")
        if not 0 <= i < self.elements:
            raise ValueError(f"{self.name}: element {i} is not in 0..{self.elements - 1}")
        return self._fn(lane, i)

    def table(self) -> list[list[tuple[int, ...]]]:
        """``table()[lane][i] == coords(lane, i)``."""
        return [[self._fn(lane, i) for i in range(self.elements)] for lane in range(self.lanes)]

    def owner(self, *coord: int) -> tuple[int, int]:
        """(lane, i) holding the element at ``coord`` (the inverse of :meth:`coords`)."""
        inv = _inverse(self)
        coord = tuple(_whole(c, f"{self.name}: coordinate") for c in coord)
        if tuple(coord) not in inv:
            raise ValueError(f"{self.name}: no lane holds {tuple(coord)} (shape {self.shape})")
        return inv[tuple(coord)]

    def register_of(self, i: int) -> tuple[int, int]:
        """(register, half) of element ``i``: half 0 is bits 0..15."""
        per = 32 // self.bits
        i = _whole(i, f"{self.name}: element")
        return i // per, i % per


_INVERSES: dict[tuple, dict] = {}


def _inverse(f: Fragment) -> dict[tuple[int, ...], tuple[int, int]]:
    key = (f.name, f.operand)
    if key not in _INVERSES:
        inv = {}
        for lane in range(f.lanes):
            for i in range(f.elements):
                inv[f._fn(lane, i)] = (lane, i)
        _INVERSES[key] = inv
    return _INVERSES[key]


def _gt(lane: int) -> tuple[int, int]:
    return lane // 4, lane % 4  # group (row owner) and thread-in-group


def _mma_a(lane: int, i: int) -> tuple[int, int]:
    # 4 registers = the 16x16 A tile's four 8x8 quadrants: r&1 picks the row half, r>>1 the k half.
    g, t = _gt(lane)
    r, e = divmod(i, 2)
    return g + 8 * (r & 1), 2 * t + e + 8 * (r >> 1)


def _mma_b(lane: int, i: int) -> tuple[int, int]:
    # B (16x8, k x n) is "column-major": a lane owns column g and two neighbouring k per register.
    g, t = _gt(lane)
    r, e = divmod(i, 2)
    return 2 * t + e + 8 * r, g


def _mma_c(lane: int, i: int) -> tuple[int, int]:
    # f32 accumulator: one element per register, rows g and g+8, columns 2t, 2t+1.
    g, t = _gt(lane)
    return g + 8 * (i // 2), 2 * t + i % 2


def _ldmatrix(trans: bool) -> Callable[[int, int], tuple[int, int, int]]:
    def fn(lane: int, i: int) -> tuple[int, int, int]:
        # Register m holds matrix m; lane 4g+t gets row g, elements 2t and 2t+1 (.trans: the transpose).
        g, t = _gt(lane)
        m, e = divmod(i, 2)
        return (m, 2 * t + e, g) if trans else (m, g, 2 * t + e)

    return fn


def _wgmma_d(n: int) -> Callable[[int, int], tuple[int, int]]:
    def fn(lane: int, i: int) -> tuple[int, int]:
        # Warp w of the warpgroup owns rows 16w..16w+15; each 8 columns repeat the mma C pattern.
        w, lane32 = divmod(lane, 32)
        row, col = _mma_c(lane32, i % 4)
        return 16 * w + row, 8 * (i // 4) + col

    return fn


def _wgmma_a(lane: int, i: int) -> tuple[int, int]:
    w, lane32 = divmod(lane, 32)
    row, col = _mma_a(lane32, i)
    return 16 * w + row, col


def _rt(rows: int, cols: int, col_layout: bool) -> Callable[[int, int], tuple[int, int]]:
    width = cols // 16

    def fn(lane: int, i: int) -> tuple[int, int]:
        pair, p = divmod(i, 2)
        sub, k = divmod(pair, 4)  # rt::reg(i): subtiles row-major, 4 pairs each
        sr, sc = divmod(sub, width)
        g, t = _gt(lane)
        a = g + 8 * (k & 1)  # the index a group owns
        b = 2 * t + p + 8 * (k >> 1)  # the index spread over its 4 lanes
        r, c = (b, a) if col_layout else (a, b)
        return 16 * sr + r, 16 * sc + c

    return fn


_CACHE: dict[tuple[str, str | None], Fragment] = {}


def fragment(name: str, operand: str | None = None) -> Fragment:
    """The fragment model called ``name`` (see the module docstring for the names)."""
    key = (name, operand)
    if key not in _CACHE:
        _CACHE[key] = _make(name, operand)
    return _CACHE[key]


def _make(name: str, operand: str | None) -> Fragment:
    if name == "mma.m16n8k16":
        op = (operand or "").upper()
        if op == "A":
            return Fragment(name, "A", 32, 8, 16, (16, 16), ("row", "k"), _mma_a)
        if op == "B":
            return Fragment(name, "B", 32, 4, 16, (16, 8), ("k", "col"), _mma_b)
        if op in ("C", "D"):
            return Fragment(name, op, 32, 4, 32, (16, 8), ("row", "col"), _mma_c)
        raise ValueError(f"mma.m16n8k16 has operands A, B, C and D, not {operand!r}")
    m = re.fullmatch(r"(ldmatrix|stmatrix)\.x([124])(\.trans)?", name)
    if m:
        if m.group(1) == "stmatrix" and m.group(3):
            raise ValueError("this model covers stmatrix without .trans only")
        if operand is not None:
            raise ValueError(f"{name} has no operands; call fragment({name!r})")
        num = int(m.group(2))
        return Fragment(name, None, 32, 2 * num, 16, (num, 8, 8), ("matrix", "row", "col"),
                        _ldmatrix(bool(m.group(3))))
    m = re.fullmatch(r"wgmma\.m64n(\d+)k16", name)
    if m:
        n = int(m.group(1))
        if n % 8 or not 8 <= n <= 256:
            raise ValueError(f"wgmma m64nNk16 needs N a multiple of 8 in 8..256, not {n}")
        op = (operand or "D").upper()
        if op == "D":
            return Fragment(name, "D", 128, n // 2, 32, (64, n), ("row", "col"), _wgmma_d(n))
        if op == "A":
            return Fragment(name, "A", 128, 8, 16, (64, 16), ("row", "k"), _wgmma_a)
        raise ValueError(f"{name}: modelled operands are D (accumulator) and A (from registers), not {operand!r}")
    m = re.fullmatch(r"rt(?:\.(\d+)x(\d+))?", name)
    if m:
        rows, cols = (int(m.group(1)), int(m.group(2))) if m.group(1) else (16, 16)
        if rows % 16 or cols % 16 or rows <= 0 or cols <= 0:
            raise ValueError(f"register tiles have sides that are multiples of 16, not {rows}x{cols}")
        lay = operand or "row"
        if lay not in ("row", "col"):
            raise ValueError(f"register tile layouts are 'row' and 'col', not {operand!r}")
        n = rows * cols // 32
        return Fragment(f"rt.{rows}x{cols}", lay, 32, n, 16, (rows, cols), ("row", "col"),
                        _rt(rows, cols, lay == "col"))
    raise ValueError(f"unknown fragment {name!r}; known: mma.m16n8k16, ldmatrix.x1/.x2/.x4[.trans], "
                     "stmatrix.x1/.x2/.x4, wgmma.m64nNk16 (N = 8..256), rt.RxC")


def parked(cols: int) -> list[tuple[int, int]]:
    """The (row, col) of every float of a warpgroup's 64 x ``cols`` fp32 accumulator parked by
    ``warpgroup::store_fragments`` (tk/ops/warpgroup/fragments.cuh), in the parked block's order: thread t's
    elements 4k .. 4k + 3 (wgmma's D layout, register order) are float4 number k * 128 + t. Why: what reads such a
    block by position (chapter 11's exercise check, which compares the dQ accumulator the kernel leaves) needs the
    permutation, and it follows from the accumulator layout alone."""
    if cols % 8 or not 8 <= cols <= 256:
        raise ValueError(f"a wgmma accumulator has 8 to 256 columns, a multiple of 8; got {cols}")
    d = fragment(f"wgmma.m64n{cols}k16", "D")
    out: list[tuple[int, int]] = []
    for k in range(d.elements // 4):
        for t in range(d.lanes):
            out += [d.coords(t, 4 * k + e) for e in range(4)]  # type: ignore[misc]
    return out


def names() -> list[tuple[str, str | None]]:
    """Every (name, operand) the explorer offers (a representative set of wgmma N)."""
    out: list[tuple[str, str | None]] = [("mma.m16n8k16", op) for op in "ABC"]
    out += [(f"ldmatrix.x{n}{t}", None) for n in (1, 2, 4) for t in ("", ".trans")]
    out += [(f"stmatrix.x{n}", None) for n in (1, 2, 4)]
    out += [(f"wgmma.m64n{n}k16", "D") for n in (8, 16, 32, 64, 128, 256)] + [("wgmma.m64n64k16", "A")]
    out += [("rt.16x16", "row"), ("rt.16x16", "col"), ("rt.32x32", "row")]
    return out
