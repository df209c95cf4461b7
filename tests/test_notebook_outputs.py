"""What a learner sees on a fresh clone, read from the stored notebooks (no kernel, no browser).

The browser test checks the same things as a learner meets them; these checks say exactly which cell of
which chapter broke a rule, in a second: pictures stored in a format every viewer shows, readable and
sharp; no reprs where a picture belongs; no machine paths; every chapter linked to its exercise and to
the next chapter; no reference solution shown before its exercise.
"""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# The notebooks held to these rules: every chapter and the playground (a new chapter joins once its
# pictures go through course.plots() / widgets.picture()).
RULED = ("00", "01", "02", "03", "04", "05", "06", "07", "08", "09", "10", "layout_playground")
NOTEBOOKS = sorted(p for p in (ROOT / "notebooks").glob("*.ipynb") if p.name.startswith(RULED))
CHAPTERS = [p for p in NOTEBOOKS if re.match(r"\d\d_", p.name)]

def _exercises_by_chapter() -> dict[str, list[str]]:
    """Chapter → the files of its exercises (not drills: the index links those), from the registry."""
    from tklab.grading import specs

    out: dict[str, list[str]] = {}
    for i in specs.all_ids():
        spec = specs.get(i)
        if spec.kind == "exercise":
            out.setdefault(spec.chapter, []).append(spec.exercise_file)
    return out


EXERCISES = _exercises_by_chapter()
NOT_YET_WRITTEN: set[str] = set()  # chapters a link may name before they exist (none now)


def _cells(path: Path) -> list[dict]:
    return json.loads(path.read_text())["cells"]


def _src(cell: dict) -> str:
    return "".join(cell["source"])


def _png_size(data: str) -> tuple[int, int]:
    png = base64.b64decode(data)
    assert png.startswith(b"\x89PNG"), "not a PNG"
    return int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_pictures_are_stored_as_sharp_pngs(path: Path) -> None:
    """SVG and HTML-with-SVG are not drawn in an untrusted notebook (a fresh clone); PNG is. Figures carry
    their on-screen size and at least 1.5 pixels per screen pixel, so text stays sharp."""
    pictures = 0
    for cell in _cells(path):
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            where = f"{path.name}, cell {cell.get('id')}"
            assert "image/svg+xml" not in data, f"{where}: an SVG output, which JupyterLab hides until trusted"
            html = "".join(data.get("text/html", ""))
            assert "<svg" not in html, f"{where}: SVG inside HTML, shown as text in an untrusted notebook"
            plain = "".join(data.get("text/plain", ""))
            if "image/png" not in data:
                assert not re.match(r"(Text\(|<Figure size|<IPython\.core\.display\.)", plain), \
                    f"{where}: a stray repr instead of a picture: {plain[:60]!r}"
                continue
            pictures += 1
            width, height = _png_size(data["image/png"])
            shown = out.get("metadata", {}).get("image/png", {})
            assert shown.get("width"), f"{where}: a PNG without its on-screen width"
            assert width >= 1.5 * shown["width"] - 2, f"{where}: {width} px for {shown['width']} on screen: blurry"
            assert height > 0
    assert pictures > 0, f"{path.name} has no stored picture"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_figure_code_is_readable(path: Path) -> None:
    """No tiny fonts, no 72-dpi figures, no switched-off anti-aliasing in the chapters' plotting code."""
    for cell in _cells(path):
        if cell["cell_type"] != "code":
            continue
        src = _src(cell)
        where = f"{path.name}, cell {cell.get('id')}"
        assert not re.search(r"fontsize=[1-7]\b|labelsize=[1-7]\b", src), f"{where}: a font below 8 pt"
        assert "antialiased\": False" not in src and "figure.dpi\": 72" not in src, f"{where}: low-quality figures"
        if "plt." in src and src.rstrip().splitlines()[-1].startswith(("fig.suptitle", "ax.set_title", "plt.title")):
            pytest.fail(f"{where}: ends with a call whose Text(...) repr is printed; end with plt.show()")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_outputs_show_no_machine_paths(path: Path) -> None:
    text = json.dumps([o for c in _cells(path) for o in c.get("outputs", []) if o.get("output_type") == "stream"])
    for home in ("/root/", "/home/", "/work/", "/Users/", str(ROOT)):
        assert home not in text, f"{path.name}: an output shows a path of the machine that ran it ({home})"


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_chapter_links_to_its_exercise_and_the_next_chapter(path: Path) -> None:
    markdown = "\n".join(_src(c) for c in _cells(path) if c["cell_type"] == "markdown")
    links = re.findall(r"\]\(([^)\s]+\.(?:ipynb|py|cu|cuh|md|json)(?:#[^)\s]*)?)\)", markdown)
    number = path.name[:2]
    for file in EXERCISES.get(number, []):
        exercise = f"../exercises/{file}"
        assert exercise in links, f"{path.name}: no link to {exercise} (learners open exercises from the lab)"
    following = f"{int(number) + 1:02d}_"
    if not any((ROOT / "notebooks").glob(f"{following}*.ipynb")):  # the course's last chapter: back to the start
        assert "00_the_machine.ipynb" in links, f"{path.name}: the last chapter should lead back to chapter 00"
        return
    nxt = [link for link in links if link.startswith(following) and link.endswith(".ipynb")]
    assert nxt, f"{path.name}: no link to the next chapter ({following}...)"
    assert any(f"]({nxt[-1]})" in _src(c) and "Next" in _src(c) for c in _cells(path)[-3:]), \
        f"{path.name}: the link to the next chapter is not at the end"
    for link in links:
        if link.startswith(("http", "#")):
            continue
        target = (path.parent / link.split("#")[0]).resolve()
        assert target.exists() or Path(link).name in NOT_YET_WRITTEN, f"{path.name}: broken link {link}"


@pytest.mark.parametrize(("chapter", "solution"), [("04_banks_swizzling.ipynb", "ch04_swizzle.cu"),
                                                   ("06_tile_library.ipynb", "gemm_mma_tiles.cu")])
def test_no_solution_before_its_exercise(chapter: str, solution: str) -> None:
    cells = _cells(ROOT / "notebooks" / chapter)
    check = next(i for i, c in enumerate(cells) if c["cell_type"] == "code" and "tklab.check(" in _src(c))
    uses = [i for i, c in enumerate(cells) if c["cell_type"] == "code" and solution in _src(c)]
    assert uses and min(uses) > check, f"{chapter}: {solution} is used in cell {min(uses)}, before the exercise check"


# A file of solutions/ as a chapter names it: in prose (`solutions/ch10_flash/ch10_flash.cu`, any file of the
# exercise's folder), as a path built in code (ROOT / "solutions" / "ch10_flash" / "ch10_flash.cu"), or through
# tklab.paths.solution("ch10_flash.cu").
SOLUTION_NAMED = re.compile(r"solutions/[\w./-]+|\"solutions\"(?:\s*/\s*\"[\w./-]+\")+|solution\(\"[\w./-]+\"\)")


def solutions_named_before_their_exercise(cells: list[dict], chapter: str) -> list[str]:
    """Cells that name a file of ``solutions/`` answering one of the chapter's exercises above that exercise's
    check: a file named with the exercise's id (its solution, its planted mistakes), or one of the chapter's
    (``chNN_``) that names no exercise (a variant of the chapter's kernel: it holds the same answer lines as the
    chapter's exercises, not a challenge's)."""
    from tklab.grading import specs

    exercises = [i for i in specs.all_ids() if specs.get(i).kind == "exercise" and specs.get(i).chapter == chapter]
    everyone = [i for i in specs.all_ids() if specs.get(i).kind == "exercise"]
    checks = {i: min((n for n, c in enumerate(cells) if c["cell_type"] == "code" and f'tklab.check("{i}")' in
                      _src(c)), default=len(cells)) for i in exercises}
    found = []
    for n, cell in enumerate(cells):
        for named in SOLUTION_NAMED.findall(_src(cell)):
            name = re.sub(r"[\"\s]", "", named)
            answers = [i for i in exercises if i in name]
            if not answers and not any(i in name for i in everyone) and re.search(rf"\bch{chapter}_", name):
                answers = [i for i in exercises if "_challenge_" not in i]  # a variant answers the chapter's own
            found += [f"cell {n} ({cell.get('id')}) names {name} above the check of {i} (cell {checks[i]})"
                      for i in answers if n < checks[i]]
    return found


@pytest.mark.parametrize("path", sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")), ids=lambda p: p.name)
def test_no_solution_file_named_before_its_exercise(path: Path) -> None:
    """Issue 42: no chapter points its reader at a file holding an exercise's answer before the exercise."""
    found = solutions_named_before_their_exercise(_cells(path), path.name[:2])
    assert not found, f"{path.name}:\n" + "\n".join(found)


def test_a_solution_named_early_is_caught() -> None:
    md = lambda text: {"cell_type": "markdown", "id": "m", "source": [text]}  # noqa: E731
    cell = lambda text: {"cell_type": "code", "id": "c", "source": [text], "outputs": []}  # noqa: E731
    cells = [md("The kernel (`solutions/ch11_flash_bwd/ch11_flash_bwd.cu`) gives each block"),
             md("one forms P while the other's products run (`solutions/variants/ch11_dq_lag.cu`)"),
             cell('src = (ROOT / "solutions" / "ch11_flash_bwd" / "ch11_flash_bwd.cu").read_text()'),
             md("the rest of the chapter reads chapter 10's `solutions/ch10_flash/ch10_flash.cu`"),
             cell('text = solution("ch11_flash_bwd.cu").read_text()'),
             md("its planted mistakes, `solutions/ch11_flash_bwd/planted.toml`"),
             cell('tklab.check("ch11_flash_bwd")'),
             md("*Spoiler:* the reference, `solutions/ch11_flash_bwd/ch11_flash_bwd.cu`")]
    named = [line.split(" names ")[1].split(" above")[0] for line in solutions_named_before_their_exercise(cells, "11")]
    assert named == ["solutions/ch11_flash_bwd/ch11_flash_bwd.cu", "solutions/variants/ch11_dq_lag.cu",
                     "solutions/ch11_flash_bwd/ch11_flash_bwd.cu", "solution(ch11_flash_bwd.cu)",
                     "solutions/ch11_flash_bwd/planted.toml"]


@pytest.mark.parametrize("path", sorted((ROOT / "notebooks").glob("*.ipynb")), ids=lambda p: p.name)
def test_cells_compared_by_nbval_are_tagged_not_commented(path: Path) -> None:
    """nbval also honours a first line ``# NBVAL_CHECK_OUTPUT``, which the reader then sees in the lesson's code:
    the cells it compares carry the tag ``nbval-check-output`` instead."""
    marked = [c.get("id") for c in _cells(path) if c["cell_type"] == "code" and "NBVAL" in _src(c)]
    assert not marked, f"{path.name}: cells {marked} show an nbval marker; tag them nbval-check-output"


TODO_AT = re.compile(r"exercises/([\w]+\.(?:cu|py))</code>.*?fill in the TODO at line (\d+)", re.S)


def _stored_todo_lines() -> list[tuple[str, str, int]]:
    """(notebook, exercise file, line) for every stored check output that points the learner at a TODO."""
    found = []
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        for cell in _cells(path):
            for out in cell.get("outputs", []):
                text = "".join(out.get("text", "")) + "".join(out.get("data", {}).get("text/html", ""))
                found += [(path.name, m.group(1), int(m.group(2))) for m in TODO_AT.finditer(text)]
    return found


def test_stored_checks_point_at_the_todo_where_it_is() -> None:
    """A stored "not started" verdict names the line of the exercise's first TODO: on a fresh clone the learner
    reads it before running anything, so it must be the line the file has now, not the one it had when the
    notebook was last executed (10 said line 264 for a TODO at 194 after the exercise was shortened)."""
    stored = _stored_todo_lines()
    assert {name for _, name, _ in stored} >= {"ch10_flash.cu", "ch11_flash_bwd.cu"}, stored  # the check can fail
    stale = []
    for notebook, name, line in stored:
        lines = (ROOT / "exercises" / name).read_text().splitlines()
        first = next(i for i, text in enumerate(lines, 1) if "TODO" in text and "GENERATED" not in text)
        if line != first:
            stale.append(f"{notebook}: {name} TODO at line {line}, the file has it at {first}")
    assert not stale, "stale stored verdicts (python -m tklab.course.nbrefresh NOTEBOOK):\n" + "\n".join(stale)
