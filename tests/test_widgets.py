"""Widgets: every state change must redraw the figure from the model; bad patterns must explain themselves."""

from __future__ import annotations

import re

import pytest

from tklab import banks, layouts, widgets


def _cells(svg: str, cls: str) -> list[dict[str, str]]:
    return [dict(re.findall(r'([\w-]+)="([^"]*)"', m)) for m in re.findall(rf'<rect class="{cls}" ([^>]*)>', svg)]


def test_bank_svg_is_the_schedule() -> None:
    offs = [16 * (lane % 8) * 8 for lane in range(32)]  # column of a 128-byte-row tile, rows repeat
    acc = banks.analyze(offs, 16)
    svg = widgets.bank_svg(acc, title="demo")
    assert svg.startswith("<svg") and svg.endswith("</svg>") and "demo" in svg
    cells = _cells(svg, "cell")
    assert len(cells) == sum(len(w.banks) for w in acc.waves)
    for c in cells:
        wave = acc.waves[int(c["data-wave"])]
        lanes = sorted({r.lane for r in wave.requests if r.bank == int(c["data-bank"])})
        assert c["data-lanes"] == " ".join(map(str, lanes)) and int(c["data-lane"]) == lanes[0]
        assert c["fill"] == widgets.lane_color(lanes[0])
    assert f"{acc.wavefronts} wavefronts" in svg
    assert widgets.bank_svg(acc, title="demo") == svg  # deterministic


def test_bank_svg_marks_lanes_that_sit_out() -> None:
    acc = banks.analyze([4 * lane if lane < 4 else None for lane in range(32)], 4)
    lanes = _cells(widgets.bank_svg(acc), "lane")
    assert [c["data-waves"] for c in lanes[:5]] == ["0", "0", "0", "0", ""]
    assert lanes[5]["fill"] == "#fff"


def test_ncu_numbers_name_the_right_counters() -> None:
    acc = banks.analyze([128 * lane for lane in range(32)], 4, store=True)
    assert widgets.ncu_numbers(acc) == {"l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum": 32,
                                        "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum": 31}


def test_bank_explorer_redraws_on_every_change() -> None:
    ex = widgets.bank_explorer(pattern="tile column walk", width=16, cols=64)
    assert ex.access is not None and ex.access.wavefronts == 32 and "32 wavefronts" in ex.figure.value
    ex.swizzle.value = "128B"
    assert ex.access.wavefronts == 4 and len(_cells(ex.figure.value, "cell")) == 4 * 32
    assert "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum</code> = 0" in ex.status.value
    ex.store.value = True
    assert ex.access.op == "st" and "_op_st.sum" in ex.status.value
    ex.swizzle.value, ex.padding.value = "none", 16
    assert ex.offsets[1] == 144 and ex.access.wavefronts == 4
    ex.instruction.value = "ldmatrix/stmatrix .x2"
    assert ex.access.op == "stmatrix" and len(ex.access.phases) == 2


def test_bank_explorer_shows_errors_instead_of_raising() -> None:
    ex = widgets.bank_explorer(pattern="expression", width=16)
    ex.expression.value = "16 * lane + 2"  # 16-byte loads 2 bytes off their alignment
    assert ex.access is None and ex.figure.value == ""
    assert "not a multiple of the access width 16" in ex.error and "not a multiple" in ex.status.value
    ex.expression.value = "16 * lane"
    assert ex.error is None and ex.access is not None
    ex.expression.value = "lane +"
    assert "cannot read the expression" in ex.error


def test_padding_slider_offers_only_aligned_layouts() -> None:
    """Issue 31.8: the padding slider moves in steps of the access width, so no position is an error."""
    ex = widgets.bank_explorer(pattern="tile column walk", width=16)
    assert ex.padding.step == 16
    ex.padding.value = 2  # typed or dragged between steps: snapped back onto the grid
    assert ex.padding.value == 0 and ex.error is None
    for instruction in ("per-lane access", "ldmatrix/stmatrix .x4"):
        ex.instruction.value = instruction
        for width in (4, 8, 16):
            ex.width.value = width
            for pad in range(0, 65, ex.padding.step):
                ex.padding.value = pad
                assert ex.error is None, (instruction, width, pad, ex.error)


def test_bank_explorer_takes_a_learners_function() -> None:
    ex = widgets.bank_explorer(fn=lambda lane: 4 * (lane * 33 % 64) if lane % 2 == 0 else None)
    assert ex.pattern.value == "function"
    assert ex.offsets[1] is None and ex.access.wavefronts == banks.wavefronts(ex.offsets, 4)
    with pytest.raises(ValueError, match="no control 'colour'"):
        widgets.bank_explorer(colour="red")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"pattern": "zigzag"}, "unknown pattern 'zigzag'"),
        ({"pattern": "function"}, "needs a function of the lane"),
        ({"pattern": "expression", "expression": "__import__('os')"}, "only 'lane' is defined|may call"),
        ({"pattern": "expression", "expression": "lane / 2"}, "must give an integer"),
        ({"pattern": "function", "fn": lambda lane: "x"}, r"fn\(0\) returned 'x'"),
        ({"pattern": "tile column walk", "width": 16, "column": 8, "cols": 64}, "outside a 128-byte row"),
        ({"pattern": "broadcast", "group": 0}, "at least 1"),
    ],
)
def test_bad_patterns_say_what_is_wrong(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        widgets.bank_pattern(**kwargs)


def test_patterns_are_what_they_say() -> None:
    assert widgets.bank_pattern("stride", width=4, stride=33)[:3] == [0, 132, 264]
    assert widgets.bank_pattern("broadcast", width=8, stride=1, group=4)[:9] == [0] * 4 + [8] * 4 + [16]
    assert widgets.bank_pattern("tile row walk", width=16, cols=16)[:4] == [0, 16, 32, 48]
    assert widgets.bank_pattern("tile row walk", width=16, cols=16, padding=16)[2] == 48
    col = widgets.bank_pattern("tile column walk", width=16, cols=64, swizzle="128B", column=1)
    assert col == [layouts.swizzle(128 * lane + 16, "128B") for lane in range(32)]
    assert widgets.expression_offsets("4 * (lane * 33 % 64)")[2] == 4 * 66 % 256


def test_layout_svg_places_every_element_by_the_model() -> None:
    for name, operand in (("mma.m16n8k16", "B"), ("ldmatrix.x4.trans", None), ("rt.32x32", "col")):
        f = layouts.fragment(name, operand)
        cells = _cells(widgets.layout_svg(f), "elem")
        assert len(cells) == f.lanes * f.elements
        for c in cells:
            coord = f.coords(int(c["data-lane"]), int(c["data-i"]))
            r, col = (coord[1], 8 * coord[0] + coord[2]) if len(coord) == 3 else coord
            assert (int(c["data-row"]), int(c["data-col"])) == (r, col)


def test_layout_explorer_highlights_a_lane_and_its_banks() -> None:
    ex = widgets.layout_explorer("mma.m16n8k16", "A", lane=5, swizzle="32B")
    f = layouts.fragment("mma.m16n8k16", "A")
    marked = [c for c in _cells(ex.figure.value, "elem") if c.get("stroke") == "#000"]
    assert sorted(int(c["data-i"]) for c in marked) == list(range(f.elements))
    assert all(c["data-lane"] == "5" for c in marked)
    smem = [c for c in _cells(ex.figure.value, "smem") if c["data-lane"] == "5"]
    for c in smem:
        r, col = f.coords(5, int(c["data-i"]))
        off = layouts.st_offset(r, col, rows=16, cols=16, swizzle="32B")
        assert int(c["data-byte"]) == off and int(c["data-bank"]) == off // 4 % 32
    assert "lane 5</b> holds" in ex.status.value and "r0.lo = (row 1, k 2)" in ex.status.value
    ex.lane.value = -1
    assert not [c for c in _cells(ex.figure.value, "elem") if c.get("stroke") == "#000"]
    ex.swizzle.value = "none"
    assert {c["data-byte"] for c in _cells(ex.figure.value, "smem") if c["data-lane"] == "0"} == {"0", "2", "16", "18",
                                                                                                   "256", "258", "272",
                                                                                                   "274"}


def test_layout_explorer_offers_only_the_swizzles_that_fit() -> None:
    ex = widgets.layout_explorer("ldmatrix.x4.trans", None)  # 8 rows x 32 bf16: 64-byte rows
    ok, why = ex.swizzle_choices()
    assert list(ex.swizzle.options) == ok and "128B" not in ok and {"64B", "32B", "none"} <= set(ok)
    assert "do not fill whole 128-byte panels" in why["128B"] and "not offered for this 64-byte row" in ex.status.value
    ex.swizzle.value = "64B"
    assert ex.error is None and _cells(ex.figure.value, "smem")
    ex.fragment.value = ("mma.m16n8k16", "B")  # 8 bf16 = 16-byte rows: no swizzle fits, the panel is reset
    assert ex.swizzle.value == ex.SMEM_CHOICES[0] and set(ex.swizzle.options) == {ex.SMEM_CHOICES[0], "none",
                                                                                    "interleave"}
    assert not _cells(ex.figure.value, "smem")
    ex.fragment.value = ("wgmma.m64n256k16", "D")
    assert ex.lane.max == 127 and ex.error is None and len(ex.figure.value) < 600_000
    with pytest.raises(ValueError, match="no 128B shared-memory panel for mma.m16n8k16 B: 8 columns .* 128-byte"):
        widgets.layout_explorer("mma.m16n8k16", "B", swizzle="128B")
    with pytest.raises(ValueError, match="unknown fragment"):
        widgets.layout_explorer("mma.m8n8k4", None)
    assert widgets.layout_explorer("wgmma.m64n64k16", "D", swizzle="128B").swizzle.value == "128B"


def test_bank_explorer_shows_only_the_controls_a_pattern_reads() -> None:
    ex = widgets.bank_explorer(pattern="stride")
    shown = lambda: {n for n in ex.state() if getattr(ex, n).layout.display != "none"}  # noqa: E731
    assert shown() == {"pattern", "instruction", "width", "store", "stride", "swizzle"}
    ex.pattern.value = "tile column walk"
    assert {"cols", "padding", "column"} <= shown() and not {"stride", "group", "expression"} & shown()
    ex.instruction.value = "ldmatrix/stmatrix .x4"
    assert "width" not in shown()
    ex.pattern.value, ex.instruction.value = "expression", "per-lane access"
    assert shown() == {"pattern", "instruction", "width", "store", "expression", "swizzle"}
    for pattern in widgets.PATTERNS[:-1]:  # every control a pattern reads changes its offsets for some value
        ex.pattern.value = pattern
        for name in ex.USES[pattern]:
            assert name in shown()


def test_explorers_carry_a_png_copy_of_their_figure() -> None:
    """JupyterLab draws a widget view only while its kernel runs, in a trusted notebook; the stored PNG
    (shown in any notebook) must be the current figure."""
    import base64

    ex = widgets.bank_explorer(pattern="stride", width=4, stride=1)
    first, meta = ex._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in first and "text/html" not in first
    assert meta["image/png"]["width"] == round(float(re.search(r'width="([\d.]+)"', ex.figure.value).group(1)))
    png = base64.b64decode(first["image/png"])
    assert png.startswith(b"\x89PNG")
    ex.stride.value = 32  # 32-way conflict: a taller picture
    second = base64.b64decode(ex._repr_mimebundle_()[0]["image/png"])
    assert _png_size(second)[1] > _png_size(png)[1]
    big = widgets.layout_explorer("wgmma.m64n256k16", "D", lane=0)
    assert _png_size(base64.b64decode(big._repr_mimebundle_()[0]["image/png"]))[0] > 0
    pic = widgets.picture(widgets.bank_svg(ex.access), "bank schedule")
    data, meta = pic._repr_mimebundle_()
    assert set(data) == {"image/png", "text/plain"} and "bank schedule" in data["text/plain"]
    assert abs(_png_size(base64.b64decode(data["image/png"]))[0] - 2 * meta["image/png"]["width"]) <= 2


def _png_size(png: bytes) -> tuple[int, int]:
    return int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")


def test_png_copy_keeps_its_size_after_a_notebooks_figure_style() -> None:
    """Every chapter calls tklab.plots() first (savefig.bbox = "tight"): the explorers' PNG copies must still
    be the SVG's own box at twice its size, not a cropped, rescaled one."""
    import base64

    import matplotlib as mpl

    from tklab.widgets import figures

    with mpl.rc_context():
        figures.plots()
        assert mpl.rcParams["savefig.bbox"] == "tight"
        pic = widgets.picture(widgets.bank_svg(widgets.bank_explorer(pattern="stride", width=4, stride=2).access),
                              "bank schedule")
        data, meta = pic._repr_mimebundle_()
        assert abs(_png_size(base64.b64decode(data["image/png"]))[0] - 2 * meta["image/png"]["width"]) <= 2


def test_png_copy_has_the_svg_colours_where_the_svg_has_them() -> None:
    """Rasterising keeps the picture: the pixel at each cell's centre is that cell's fill."""
    import io

    import matplotlib.image as mpimg

    from tklab.widgets.raster import svg_color, svg_png

    acc = banks.analyze([4 * 2 * lane for lane in range(32)], 4)  # stride 2: 2 wavefronts
    svg = widgets.bank_svg(acc)
    img = mpimg.imread(io.BytesIO(svg_png(svg, scale=2)), format="png")
    cells = _cells(svg, "cell")
    assert len(cells) == 32
    for c in cells:
        zoom = widgets.draw.DISPLAY_SCALE * 2  # image pixels per drawing unit
        x, y = float(c["x"]) + 4, float(c["y"]) + 4  # inside the cell, clear of its label
        got = img[int(zoom * y), int(zoom * x), :3]
        assert max(abs(got - svg_color(c["fill"]))) < 0.02, (c, got)
    with pytest.raises(ValueError, match="cannot draw <path>"):  # outside the vocabulary: refused, not dropped
        svg_png('<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"><path d="M0 0 L5 5"/></svg>')
    with pytest.raises(ValueError, match="unsupported colour"):
        svg_color("rgb(1,2,3)")


def _drawings(figure: str) -> list[str]:
    import re

    return re.findall(r"<svg\b.*?</svg>", figure, flags=re.S)


def _extremes(ex, names: list[str]):
    """Every combination of each named control at its ends (a dropdown's first and last option)."""
    import itertools

    import traitlets

    def values(w) -> list:
        if hasattr(w, "options"):
            opts = [o[1] if isinstance(o, tuple) and len(o) == 2 else o for o in w.options]
            return [opts[0], opts[-1]]
        return [w.min, w.max] if hasattr(w, "min") else [False, True]

    for combo in itertools.product(*(values(getattr(ex, n)) for n in names)):
        try:
            for name, value in zip(names, combo, strict=True):
                getattr(ex, name).value = value
        except traitlets.TraitError:
            continue  # an option the explorer does not offer with the others (a swizzle that does not fit)
        yield dict(zip(names, combo, strict=True))


def test_every_explorer_fits_its_text_at_its_extreme_settings() -> None:
    """Issue 31.2: nothing of a drawing (title, legend, footer, cells) falls outside it, at any setting."""
    from tklab.widgets import attention_view, pipeline_explorer  # a function (its module is ring_explorer)
    from tklab.widgets.draw import outside

    explorers = [
        (attention_view.blocks_explorer(seq=1000, block_rows=128, block_keys=64, causal=True),
         ["seq", "block_rows", "block_keys", "causal"]),
        (attention_view.schedule_explorer(), ["softmax", "stagger", "latency"]),
        (pipeline_explorer(), ["stages", "latency", "consume"]),
        (widgets.bank_explorer(pattern="tile column walk", width=16), ["width", "cols", "padding", "swizzle"]),
        (widgets.layout_explorer(), ["fragment", "lane", "swizzle"]),
    ]
    checked = 0
    for ex, names in explorers:
        for setting in _extremes(ex, names):
            if getattr(ex, "error", None):
                continue  # a refused combination shows its message, not a drawing
            drawings = _drawings(ex.figure.value)
            assert drawings, (type(ex).__name__, setting)
            for svg in drawings:
                assert outside(svg) == [], (type(ex).__name__, setting, outside(svg)[:2])
            checked += 1
    assert checked >= 40


def test_outside_sees_a_clipped_text() -> None:
    """The check above can fail: a title wider than its drawing is reported."""
    from tklab.widgets.draw import _svg, _text, outside

    svg = _svg(100, 40, [_text(4, 20, "a title far wider than the hundred units of this drawing", anchor="start")])
    assert outside(svg) and "a title far wider" in outside(svg)[0]


def test_attention_explorers_store_a_picture_and_name_their_units() -> None:
    """Issue 31.3: ch09's and ch10's explorers show a PNG before the kernel runs, not a widget repr;
    ch10's sliders say in what unit they move."""
    from tklab.widgets import attention_view

    for ex in (attention_view.blocks_explorer(), attention_view.schedule_explorer()):
        bundle, meta = ex._repr_mimebundle_()
        assert "image/png" in bundle and meta["image/png"]["width"] > 0
        assert not bundle["text/plain"].startswith("VBox(")
    s = attention_view.schedule_explorer()
    assert all("×" in getattr(s, n).description for n in ("softmax", "stagger", "latency"))


def test_the_bank_explorer_can_leave_out_what_a_chapter_has_not_taught() -> None:
    """Chapter 04 comes before ldmatrix/stmatrix (chapters 05 and 08): ``matrix=False`` offers per-lane
    accesses only, and hides the menu that would have nothing else in it."""
    ex = widgets.bank_explorer(pattern="tile column walk", width=16, cols=64, swizzle="128B", matrix=False)
    assert list(ex.instruction.options) == ["per-lane access"] and "instruction" not in ex.visible()
    assert not [o for o in ex.instruction.options if "matrix" in o] and ex.access.wavefronts == 4
    assert "ldmatrix/stmatrix .x4" in widgets.bank_explorer().instruction.options  # the playground's keeps them
    with pytest.raises(Exception):  # noqa: B017 - ipywidgets refuses a value its menu does not offer
        widgets.bank_explorer(matrix=False, instruction="ldmatrix/stmatrix .x4")
