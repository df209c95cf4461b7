"""A learner's first hour, in a real browser: JupyterLab from this Python, driven by headless Chromium.

What a learner does on a fresh clone, step by step: open each chapter (its stored pictures must show
before anything runs, in a notebook nobody has trusted), run the layout playground and chapter 04 top to
bottom (every explorer must come up as a live widget), move controls (the drawing and the wavefront
count must change; controls a pattern ignores stay hidden; only the swizzles that fit are offered), and
open an exercise from its chapter's link, edit it and save it. The window is 1280 px wide with the file
browser open, and no output may reach past the notebook's column there: the stored ones, every explorer the
chapters use (with slider tracks long enough to aim at), and a failed check's report (a box may scroll
sideways inside itself, the page may not). The workbook's README opens rendered and lists every chapter;
chapters 07, 08 and 11 open their exercises from their links; the learner's lab saves nothing by itself and
shows the chapters' names apart; the terminal's check of an untouched exercise says "not started".
Every step leaves a screenshot in ``tests/results/browser/`` (git-ignored).

The lab runs on a copy of ``notebooks/`` and ``exercises/`` in a temporary folder laid out like the
repository, so running cells and saving never touch the working tree. Needs Chromium (Debian's
``chromium``, or ``TKLAB_CHROMIUM=/path/to/chrome``) and the ``playwright`` package (no browser download:
it drives the given executable). Without Chromium the test is skipped, unless ``TKLAB_BROWSER_TEST=required``
(set by ``make test`` and ``make browser-test``), when it fails.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from answers import answer

ROOT = Path(__file__).resolve().parent.parent
SHOTS = ROOT / "tests" / "results" / "browser"
TOKEN = "tklab-browser-test"
# Every chapter: its stored pictures must show on open (all store PNG: see test_notebook_outputs.RULED).
CHAPTERS = sorted(p.name for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))

pytestmark = pytest.mark.browser
#: A laptop's window: the notebook's column beside the open file browser is about 950 px wide.
VIEWPORT = {"width": 1280, "height": 1000}


def _chromium() -> str | None:
    for candidate in (os.environ.get("TKLAB_CHROMIUM"), "chromium", "chromium-browser", "google-chrome"):
        if candidate and (found := shutil.which(candidate)):
            return found
    return None


def _require() -> None:
    """Skip, or fail when the browser test is required, naming what is missing."""
    missing = []
    if _chromium() is None:
        missing.append("Chromium (`apt-get install chromium` on Debian, or TKLAB_CHROMIUM=/path)")
    try:
        import playwright  # noqa: F401
    except ImportError:
        missing.append("the playwright package (`pip install playwright`; no browser download needed)")
    if missing:
        message = "the browser test needs " + " and ".join(missing)
        if os.environ.get("TKLAB_BROWSER_TEST") == "required":
            pytest.fail(message)
        pytest.skip(message)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _settings(folder: Path) -> None:
    """JupyterLab user settings for a quiet, deterministic lab: no news pop-up, every cell rendered (not only
    those in view), so a test can see every output of a notebook. The rest is the learner's lab's own
    (jupyter-learner/lab-settings: no autosave, Markdown rendered, no Modified column)."""
    for plugin, values in {
        "@jupyterlab/apputils-extension/notification": {"fetchNews": "false", "checkForUpdates": False},
        "@jupyterlab/notebook-extension/tracker": {"windowingMode": "none"},
    }.items():
        path = folder / f"{plugin}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """JupyterLab serving a copy of the repository's notebooks/ and exercises/, the way `make lab` serves them."""
    _require()
    home = tmp_path_factory.mktemp("lab")
    root = home / "repo"
    for folder in ("notebooks", "exercises"):
        shutil.copytree(ROOT / folder, root / folder, ignore=shutil.ignore_patterns("*.bak-*", ".ipynb_checkpoints"))
    _settings(home / "settings")
    port = _free_port()
    # As `make lab` (LAB_ENV): the workbook's Python first on the terminals' PATH, and the learner's lab config
    # (jupyter-learner/: nbgrader's instructor controls off).
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    env = {**os.environ, "PATH": path, "JUPYTER_CONFIG_PATH": str(ROOT / "jupyter-learner"),
           "JUPYTERLAB_SETTINGS_DIR": str(home / "settings"), "JUPYTER_CONFIG_DIR": str(home / "config"),
           "JUPYTER_DATA_DIR": str(home / "data"), "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
           "TKLAB_CACHE_DIR": os.environ.get("TKLAB_CACHE_DIR", str(ROOT / ".cache" / "tklab-tests")),
           "MPLBACKEND": "module://matplotlib_inline.backend_inline"}
    make_lab = (ROOT / "Makefile").read_text()
    for flag in ("--ServerApp.root_dir=.", "--LabApp.default_url=/lab/tree/notebooks", 'PATH="$(CURDIR)/$(VENV)/bin:',
                 'JUPYTER_CONFIG_PATH="$(CURDIR)/jupyter-learner', "$(LAB_ENV) $(VENV)/bin/jupyter lab"):
        assert flag in make_lab, f"the test serves the lab as `make lab` does, which no longer passes {flag}"
    log = (home / "lab.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", f"--port={port}", "--ip=127.0.0.1",
         f"--ServerApp.token={TOKEN}", f"--ServerApp.root_dir={root}", "--LabApp.default_url=/lab/tree/notebooks",
         "--LabApp.expose_app_in_browser=True", "--ServerApp.open_browser=False", "--allow-root"],
        cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                with urllib.request.urlopen(f"{url}/api/status?token={TOKEN}", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"JupyterLab did not start: {(home / 'lab.log').read_text()[-2000:]}")
            time.sleep(0.5)
        yield url, root
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # the server and the kernels it started, nothing else
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()


@pytest.fixture(scope="module")
def page(lab: tuple[str, Path]) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    SHOTS.mkdir(parents=True, exist_ok=True)
    for old in SHOTS.glob("*.png"):
        old.unlink()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=_chromium(), args=["--no-sandbox", "--disable-gpu"])
        pg = browser.new_page(viewport=VIEWPORT)
        pg.set_default_timeout(60_000)
        try:
            yield pg
        finally:
            browser.close()


def _shot(page: Any, name: str) -> None:
    page.screenshot(path=str(SHOTS / f"{name}.png"))


def _open(page: Any, lab: tuple[str, Path], path: str) -> Any:
    """Open a notebook in a fresh lab layout; return its own panel once every cell is on the page.

    The panel is found by the id of the lab's current document, never by "the visible one": while a page
    loads, the previous notebook's panel can still be the visible one.
    """
    url, root = lab
    page.goto(f"{url}/lab/tree/{path}?reset&token={TOKEN}")
    page.wait_for_function(
        "p => { const w = window.jupyterapp && window.jupyterapp.shell.currentWidget; "
        "return !!w && !!w.context && w.context.path === p && w.isVisible; }", arg=path)
    panel_id = page.evaluate("() => window.jupyterapp.shell.currentWidget.id")
    panel = page.locator(f"[id='{panel_id}']")
    panel.locator(".jp-Cell").first.wait_for()
    cells = len(json.loads((root / path).read_text())["cells"])  # the lab's copy (a test may add a notebook)
    page.wait_for_function("([id, n]) => document.getElementById(id).querySelectorAll('.jp-Cell').length >= n",
                           arg=[panel_id, cells])
    return panel


def _panel_id(panel: Any) -> str:
    return panel.evaluate("p => p.id")


def _stored_pictures(path: str) -> int:
    """Pictures the notebook file holds: PNG outputs, and PNG <img>s inside HTML outputs (a profile's table
    and picture); what a reader must see without running anything."""
    nb = json.loads((ROOT / path).read_text())
    outs = [o.get("data", {}) for c in nb["cells"] if c["cell_type"] == "code" for o in c.get("outputs", [])]
    return sum(1 if "image/png" in d else "".join(d.get("text/html", "")).count("data:image/png") for d in outs)


def _pictures(panel: Any) -> list[dict]:
    return panel.locator(".jp-OutputArea-output img").evaluate_all(
        "imgs => imgs.map(i => ({w: i.naturalWidth, h: i.naturalHeight, shown: i.getBoundingClientRect().width,"
        " done: i.complete}))")


def _assert_pictures_show(page: Any, panel: Any, path: str) -> None:
    want = _stored_pictures(path)
    assert want > 0, f"{path} stores no pictures at all"
    page.wait_for_function(
        "([id, n]) => { const imgs = [...document.getElementById(id).querySelectorAll('.jp-OutputArea-output img')];"
        " return imgs.length >= n && imgs.every(i => i.complete); }", arg=[_panel_id(panel), want])
    pics = _pictures(panel)
    assert len(pics) == want, f"{path}: {len(pics)} pictures on the page, {want} stored"
    broken = [p for p in pics if not (p["w"] > 0 and p["h"] > 0 and p["shown"] > 0)]
    assert not broken, f"{path}: pictures that do not show: {broken}"
    text = panel.locator(".jp-OutputArea").all_inner_texts()
    junk = [t for t in text if re.search(r"<Figure size|IPython\.core\.display\.SVG object|Error displaying widget|"
                                         r"bank 0, word 0|^Text\(|VBox\(children=", t)]
    assert not junk, f"{path}: outputs shown as text instead of pictures: {[j[:80] for j in junk]}"


def _too_wide(page: Any, panel: Any) -> list[str]:
    """Outputs that reach past their own box (the notebook's column minus the prompt): any element whose right
    edge lies beyond it, clipped or not (a widget's box cuts off what overflows it), unless it lies inside a
    ``<pre>`` that scrolls sideways (a report's grid of numbers, which must not wrap). Also [] only while the
    file browser is open beside it."""
    return page.evaluate(
        """id => { const p = document.getElementById(id); const out = [];
        const browser = document.getElementById('filebrowser');
        if (!browser || browser.getBoundingClientRect().width < 150) out.push('the file browser is not open');
        const column = p.querySelector('.jp-Notebook').getBoundingClientRect();
        for (const o of p.querySelectorAll('.jp-OutputArea-output')) {
          const edge = Math.min(o.getBoundingClientRect().right, column.right) + 1;
          for (const e of o.querySelectorAll('*')) {
            const r = e.getBoundingClientRect();
            if (r.width === 0 || r.right <= edge) continue;
            const pre = e.closest('pre');
            const inside = pre && o.contains(pre) && ['auto', 'scroll'].includes(getComputedStyle(pre).overflowX);
            if (!inside) { out.push(`${e.tagName.toLowerCase()}.${e.className} reaches ${Math.round(r.right)} px, `
              + `past ${Math.round(edge)} px: ${(o.innerText || '').slice(0, 60)}`); break; }
          }
        }
        return out; }""", _panel_id(panel))


def _assert_fits(page: Any, panel: Any, what: str) -> None:
    wide = _too_wide(page, panel)
    if wide:
        _shot(page, f"FAILED_too_wide_{re.sub(r'[^a-z0-9]+', '_', what.lower())}")
    assert not wide, f"{what}, at {VIEWPORT['width']} px with the file browser open: {wide}"


def _kernel_ready(page: Any) -> None:
    """Wait until the open notebook's kernel is connected and idle (running earlier asks to pick a kernel)."""
    page.wait_for_function(
        "() => { const w = window.jupyterapp.shell.currentWidget; const c = w && w.sessionContext; "
        "const k = c && c.session && c.session.kernel; "
        "return !!k && c.isReady && k.connectionStatus === 'connected' && k.status === 'idle'; }", timeout=120_000)


def _run_all(page: Any, panel: Any, timeout_s: float) -> None:
    """Run every cell (Run → Run All Cells) and wait until the kernel is done; no cell may fail."""
    _kernel_ready(page)
    # The command's promise settles when every cell has run (true: none failed). evaluate() has no timeout,
    # so the page records the outcome and wait_for_function (which has one) waits for it.
    page.evaluate("() => { window.__ranAll = null; window.jupyterapp.commands.execute('notebook:run-all-cells')"
                  ".then(ok => { window.__ranAll = 'ok:' + ok; }, e => { window.__ranAll = 'error:' + e; }); }")
    try:
        outcome = page.wait_for_function("() => window.__ranAll", timeout=timeout_s * 1000, polling=500).json_value()
    except Exception:
        _shot(page, "FAILED_run_all")
        raise
    assert outcome == "ok:true", f"Run All did not finish cleanly: {outcome}"
    errors = panel.locator("[data-mime-type='application/vnd.jupyter.error']").all_inner_texts()
    assert not errors, f"a cell failed: {errors[0][:500]}"
    # from the notebook's model, not the prompts on screen: a cell folded after its exercise shows no prompt
    unrun = page.evaluate("() => { const m = window.jupyterapp.shell.currentWidget.content.model; const out = []; "
                          "for (let i = 0; i < m.cells.length; i++) { const c = m.cells.get(i); "
                          "if (c.type === 'code' && c.executionCount == null) out.push(i); } return out; }")
    assert not unrun, f"cells left unrun (indices): {unrun}"


EXPLORER = ".jp-OutputArea-output .widget-vbox:has(.widget-html svg)"  # a live view: controls, status, figure
WIDGET_ERRORS = ("Error displaying widget", "Failed to create view", "Loading widget...")


def _explorers(page: Any, panel: Any, count: int) -> Any:
    """Wait until ``count`` explorers are live widget views; fail at once, with the message, when a widget
    fails to display instead."""
    try:
        page.wait_for_function(
            "([sel, n, errors, id]) => { const p = document.getElementById(id); "
            "const text = p.innerText; return p.querySelectorAll(sel).length >= n || "
            "p.querySelector('.jupyter-widgets-error-widget') !== null || "
            "errors.slice(0, 2).some(e => text.includes(e)); }",
            arg=[EXPLORER, count, list(WIDGET_ERRORS), _panel_id(panel)])
    except Exception:
        _shot(page, "FAILED_explorers")
        raise
    text = panel.inner_text()
    failed = [e for e in WIDGET_ERRORS[:2] if e in text]
    assert not failed, f"a widget did not display: {failed[0]!r} on the page"
    broken = panel.locator(".jupyter-widgets-error-widget").count()
    assert not broken, f"{broken} widget(s) failed to draw (ipywidgets' error view: 'Click to show javascript error')"
    explorers = panel.locator(EXPLORER)
    assert explorers.count() == count, f"{explorers.count()} live explorers, expected {count}"
    return explorers


def _status(explorer: Any) -> str:
    return explorer.locator(".widget-html").first.inner_text()


def _figure(explorer: Any) -> str:
    return explorer.locator(".widget-html svg").first.evaluate("s => s.outerHTML")


def _control(explorer: Any, label: str) -> Any:
    return explorer.locator(f".widget-inline-hbox:has(label:text-is('{label}'))").first


def _wavefronts(explorer: Any) -> int:
    m = re.search(r"(\d+) wavefronts?", _status(explorer))
    assert m, f"no wavefront count in {_status(explorer)!r}"
    return int(m.group(1))


def _wait_change(page: Any, explorer: Any, before: str) -> str:
    deadline = time.monotonic() + 60  # a redraw, not its speed, is what is tested: room for a loaded machine
    while (after := _figure(explorer)) == before:
        assert time.monotonic() < deadline, "the figure did not redraw after a control moved"
        page.wait_for_timeout(200)
    return after


@pytest.mark.parametrize("chapter", [*CHAPTERS, "layout_playground.ipynb"])
def test_stored_pictures_show_before_anything_runs(page: Any, lab: tuple[str, Path], chapter: str) -> None:
    panel = _open(page, lab, f"notebooks/{chapter}")
    _assert_pictures_show(page, panel, f"notebooks/{chapter}")
    _assert_fits(page, panel, f"{chapter}'s stored outputs")
    _shot(page, f"01_open_{chapter.removesuffix('.ipynb')}")
    assert panel.locator(".jp-Notebook").count() == 1


def test_playground_explorers_are_live_and_redraw(page: Any, lab: tuple[str, Path]) -> None:
    panel = _open(page, lab, "notebooks/layout_playground.ipynb")
    _run_all(page, panel, timeout_s=180)
    explorers = _explorers(page, panel, 4)  # two bank and two layout explorers
    _assert_fits(page, panel, "the layout playground's explorers")
    _shot(page, "02_playground_ran")

    bank = explorers.nth(0)
    bank.scroll_into_view_if_needed()
    assert _wavefronts(bank) == 32
    assert not _control(bank, "stride (elements)").is_visible(), "a control the pattern ignores is shown"
    before = _figure(bank)
    _control(bank, "swizzle").locator("select").select_option("128B")
    _wait_change(page, bank, before)
    assert _wavefronts(bank) == 4
    _shot(page, "03_playground_bank_swizzled")
    before = _figure(bank)
    _control(bank, "column (pieces)").locator(".noUi-handle").press("ArrowRight")
    _wait_change(page, bank, before)
    assert "column (pieces)" in bank.inner_text()
    _control(bank, "pattern").locator("select").select_option("stride")
    page.wait_for_timeout(500)
    assert _control(bank, "stride (elements)").is_visible() and not _control(bank, "column (pieces)").is_visible()
    _shot(page, "04_playground_bank_pattern_stride")

    layout = explorers.nth(2)
    layout.scroll_into_view_if_needed()
    assert "lane 5" in _status(layout)
    before = _figure(layout)
    _control(layout, "lane (-1: all)").locator(".noUi-handle").press("ArrowRight")
    _wait_change(page, layout, before)
    assert "lane 6" in _status(layout)
    fragment = _control(layout, "fragment").locator("select")
    fragment.select_option(label="ldmatrix.x4.trans")
    page.wait_for_timeout(1000)
    offered = _control(layout, "smem swizzle").locator("option").all_inner_texts()
    assert "64B" in offered and "128B" not in offered, offered
    assert "not offered for this 64-byte row: 128B" in _status(layout)
    _shot(page, "05_playground_layout_ldmatrix")


def test_chapter_04_runs_its_explorer_redraws_and_its_exercise_opens(page: Any, lab: tuple[str, Path]) -> None:
    path = "notebooks/04_banks_swizzling.ipynb"
    panel = _open(page, lab, path)
    _assert_pictures_show(page, panel, path)
    _run_all(page, panel, timeout_s=300)
    explorer = _explorers(page, panel, 1).first
    _assert_fits(page, panel, "chapter 04, run")
    explorer.scroll_into_view_if_needed()
    _shot(page, "06_ch04_ran")
    first = _wavefronts(explorer)
    before = _figure(explorer)
    _control(explorer, "swizzle").locator("select").select_option("none")
    _wait_change(page, explorer, before)
    assert _wavefronts(explorer) != first
    _shot(page, "07_ch04_explorer_moved")

    _, root = lab
    exercise = root / "exercises" / "ch04_swizzle.cu"
    link = panel.locator("a", has_text="exercises/ch04_swizzle.cu").first  # the lab rewrites its href
    link.scroll_into_view_if_needed()
    link.click()
    page.wait_for_function("() => { const w = window.jupyterapp.shell.currentWidget; "
                           "return !!w && !!w.context && w.context.path === 'exercises/ch04_swizzle.cu'; }")
    editor_id = page.evaluate("() => window.jupyterapp.shell.currentWidget.id")
    editor = page.locator(f"[id='{editor_id}'] .cm-content")
    editor.filter(has_text="tile_index").wait_for()  # the exercise's text, loaded into the lab's editor
    editor.click()
    page.keyboard.press("Control+End")
    page.keyboard.type("\n// edited and saved from JupyterLab by the browser test\n")
    page.keyboard.press("Control+s")
    deadline = time.monotonic() + 60  # (that it saves, not how fast: room for a loaded machine)
    while "edited and saved from JupyterLab" not in exercise.read_text():
        assert time.monotonic() < deadline, "saving the exercise from the lab did not write the file"
        page.wait_for_timeout(250)
    _shot(page, "08_ch04_exercise_saved")


#: The shortest slider track a learner can aim at (px): a track narrower than this moves in jumps.
MIN_TRACK = 140
#: Every explorer the chapters use, opened as they open it, and a failed check's report with its yours/expected
#: grid (a chapter 01 kernel that adds one to every element), in one notebook of the test's own.
FIT_CELLS = [
    "import tklab\nfrom tklab import recorded, widgets\nfrom tklab.widgets import attention_view, pipeline",
    'widgets.bank_explorer(pattern="tile column walk", width=16, cols=64, swizzle="128B")',
    'widgets.layout_explorer("mma.m16n8k16", "A", lane=5)',
    'widgets.layout_explorer("wgmma.m64n64k16", "D", lane=37, swizzle="128B")',
    'ring = recorded.load("ch07.ring_stages")\n'
    'pipeline.pipeline_explorer(stages=2, latency=1.5, consume=0.3, transfer=1.0, issue=0.05,\n'
    '                           measured=dict(zip(ring["stages"], ring["gbps"])) if ring.values else None,\n'
    '                           ceiling=ring["device_copy_gbps"] if ring.values else None)',
    "attention_view.blocks_explorer(seq=1000, block_rows=128, block_keys=64, causal=True)",
    "attention_view.schedule_explorer(softmax=1.0, stagger=0.0, latency=0.25)",
    'tklab.check("ch01_naive_matmul", "../exercises/ch01_off_by_one.py")',
]


def test_reports_and_explorers_fit_the_column(page: Any, lab: tuple[str, Path]) -> None:
    used = {m for p in (ROOT / "notebooks").glob("*.ipynb") for m in re.findall(r"(\w+_explorer)\(", p.read_text())}
    assert used and all(f"{name}(" in "".join(FIT_CELLS) for name in used), f"an explorer not measured: {used}"
    _, root = lab
    solution = (ROOT / "solutions" / "ch01_naive_matmul" / "ch01_naive_matmul.py").read_text()
    store = answer("ch01_naive_matmul", "C[") + "\n"
    assert store in solution
    (root / "exercises" / "ch01_off_by_one.py").write_text(solution.replace(store, store.replace("\n", " + 1\n")))
    cells = [{"cell_type": "code", "metadata": {}, "source": c, "outputs": [], "execution_count": None}
             for c in FIT_CELLS]
    (root / "notebooks" / "fits.ipynb").write_text(json.dumps(
        {"cells": cells, "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                     "language": "python"}}, "nbformat": 4, "nbformat_minor": 5}))
    panel = _open(page, lab, "notebooks/fits.ipynb")
    _run_all(page, panel, timeout_s=240)
    _explorers(page, panel, 6)
    report = panel.locator(".jp-OutputArea-output", has_text="ch01_naive_matmul").last
    report.scroll_into_view_if_needed()
    assert "FAILED" in report.inner_text() and "expected" in report.inner_text(), report.inner_text()[:500]
    _shot(page, "11_failed_report_fits")
    _assert_fits(page, panel, "the explorers and a failed check's report")
    tracks = panel.locator(f"{EXPLORER} .noUi-target").evaluate_all(
        "ts => ts.filter(t => t.offsetParent !== null).map(t => [t.closest('.widget-slider').innerText.split('\\n')[0],"
        " Math.round(t.getBoundingClientRect().width)])")
    assert len(tracks) >= 8 and all(w >= MIN_TRACK for _, w in tracks), f"slider tracks too short to use: {tracks}"


def _current_path(page: Any) -> str:
    return page.evaluate("() => { const w = window.jupyterapp.shell.currentWidget; "
                         "return w && w.context ? w.context.path : ''; }")


def _opens_in_the_editor(page: Any, link: Any, path: str) -> None:
    """Click a link; the file must open in the lab's editor (its text loaded), not download or 404."""
    link.scroll_into_view_if_needed()
    link.click()
    page.wait_for_function("p => { const w = window.jupyterapp.shell.currentWidget; "
                           "return !!w && !!w.context && w.context.path === p; }", arg=path)
    editor_id = page.evaluate("() => window.jupyterapp.shell.currentWidget.id")
    page.locator(f"[id='{editor_id}'] .cm-content").filter(has_text="TODO").wait_for()


@pytest.mark.parametrize(("chapter", "exercise"), [("07_tma_pipelines.ipynb", "ch07_tma_ring.cu"),
                                                   ("08_wgmma_gemm.ipynb", "ch08_wgmma.cu"),
                                                   ("11_flash_attention_backward.ipynb", "ch11_flash_bwd.cu")])
def test_a_chapters_exercise_link_opens_in_the_editor(page: Any, lab: tuple[str, Path], chapter: str,
                                                      exercise: str) -> None:
    panel = _open(page, lab, f"notebooks/{chapter}")
    link = panel.locator(f".jp-RenderedMarkdown a:has-text('exercises/{exercise}')").first
    _opens_in_the_editor(page, link, f"exercises/{exercise}")
    _shot(page, f"12_link_{exercise.replace('.', '_')}")


def test_the_workbooks_readme_opens_rendered_and_lists_every_chapter(page: Any, lab: tuple[str, Path]) -> None:
    """notebooks/README.md, opened from the file browser as a learner does (a double click), shows as a page
    (the learner's lab opens Markdown in its preview), its table lists every chapter, and a chapter's link
    opens that notebook."""
    url, _ = lab
    page.goto(f"{url}/lab/tree/notebooks?reset&token={TOKEN}")
    page.locator(".jp-DirListing-item:has-text('README.md')").first.dblclick()
    page.wait_for_function("() => { const w = window.jupyterapp.shell.currentWidget; "
                           "return !!w && !!w.context && w.context.path === 'notebooks/README.md'; }")
    view_id = page.evaluate("() => window.jupyterapp.shell.currentWidget.id")
    view = page.locator(f"[id='{view_id}']")
    rendered = view.locator(".jp-RenderedMarkdown")
    rendered.locator("h1", has_text="The workbook").wait_for()
    assert view.locator(".cm-content").count() == 0, "README.md opened as source in the editor"
    for chapter in CHAPTERS:
        assert rendered.locator(f"a[href*='{chapter}']").count() >= 1, f"the README does not link {chapter}"
    _shot(page, "13_readme_rendered")
    rendered.locator(f"a[href*='{CHAPTERS[-1]}']").first.click()
    page.wait_for_function("p => { const w = window.jupyterapp.shell.currentWidget; "
                           "return !!w && !!w.context && w.context.path === p; }", arg=f"notebooks/{CHAPTERS[-1]}")


def test_the_learners_lab_keeps_the_chapters_as_shipped_and_their_names_apart(page: Any,
                                                                             lab: tuple[str, Path]) -> None:
    """Running a chapter does not write it (no autosave in the learner's lab), and the file browser, open beside
    the notebook at 1280 px, shows the chapters' names so that no two read the same."""
    url, _ = lab

    def setting(plugin: str, key: str) -> Any:  # what the lab uses: the user's value, else the default
        with urllib.request.urlopen(f"{url}/lab/api/settings/{plugin}?token={TOKEN}", timeout=10) as r:
            d = json.loads(r.read())
        return d.get("settings", {}).get(key, d["schema"]["properties"][key].get("default"))

    assert setting("@jupyterlab/docmanager-extension:plugin", "autosave") is False
    assert setting("@jupyterlab/filebrowser-extension:browser", "showLastModifiedColumn") is False
    page.goto(f"{url}/lab/tree/notebooks?reset&token={TOKEN}")
    items = page.locator("#filebrowser .jp-DirListing-item .jp-DirListing-itemText")
    items.first.wait_for()
    shown = items.evaluate_all(
        "spans => spans.map(s => { const t = s.innerText; const fits = s.scrollWidth <= s.clientWidth + 1;"
        " return [t, fits ? t : t.slice(0, Math.floor(t.length * s.clientWidth / s.scrollWidth) - 1)]; })")
    # what tells two chapters apart is their name, not their number: "09_flash_attent…" and "11_flash_attent…"
    # read as the same chapter
    visible = [re.sub(r"^\d\d_", "", v) for t, v in shown if t.endswith(".ipynb")]
    assert len(visible) >= len(CHAPTERS) and len(set(visible)) == len(visible), shown
    assert all(not a.startswith(b) for a in visible for b in visible if a != b), shown
    _shot(page, "14_file_browser")


def _dirty(page: Any) -> bool:
    return page.evaluate("() => window.jupyterapp.shell.currentWidget.context.model.dirty")


@pytest.mark.parametrize("chapter", ["00_the_machine.ipynb", "09_flash_attention.ipynb",
                                     "10_hopper_flash_attention.ipynb"])
def test_a_chapter_opens_saved_and_without_grading_controls(page: Any, lab: tuple[str, Path], chapter: str) -> None:
    """Issue 31.9: opening a chapter (and its kernel connecting) does not mark it unsaved. Issue 31.6: the
    learner's lab shows none of nbgrader's instructor controls (menu, side panel, Validate button)."""
    panel = _open(page, lab, f"notebooks/{chapter}")
    _kernel_ready(page)
    page.wait_for_timeout(1500)  # a kernelspec rewrite would land right after the kernel connects
    assert not _dirty(page), f"{chapter} is marked unsaved right after opening"
    disabled = page.evaluate("() => JSON.parse(document.getElementById('jupyter-config-data').textContent)"
                             ".disabledExtensions || []")
    assert any(d.startswith("@jupyter/nbgrader") for d in disabled), disabled
    assert panel.locator(".jp-Toolbar").get_by_text("Validate").count() == 0, "nbgrader's Validate button is shown"
    menus = page.locator("#jp-menu-panel .lm-MenuBar-itemLabel").all_inner_texts()
    assert not [m for m in menus if "nbgrader" in m.lower() or "assignment" in m.lower()], menus
    _shot(page, f"09_opened_clean_{chapter.removesuffix('.ipynb')}")


def test_the_labs_terminal_runs_the_readmes_check_line(page: Any, lab: tuple[str, Path]) -> None:
    """Issue 31.1: in the lab's own terminal, `python -m tklab check exercises/ch01_naive_matmul.py` (the
    README's line) runs the workbook's Python and gives a verdict on the learner's file, not an import error
    blamed on a line the learner did not write; the untouched file is "not started", with its TODO's line."""
    url, _ = lab
    page.goto(f"{url}/lab?reset&token={TOKEN}")
    # The command exists once the terminal plugin has activated (and only if the server offers terminals).
    page.wait_for_function("() => !!window.jupyterapp && window.jupyterapp.commands.hasCommand('terminal:create-new')")
    # the widget the command made, kept: the shell's current widget is not it once focus moves (a loaded CI box
    # showed "current widget: none" while the terminal was open)
    page.evaluate("async () => { window.tklabTerm = await window.jupyterapp.commands.execute('terminal:create-new'); }")
    term = page.locator(".jp-Terminal .xterm").last
    term.wait_for()
    # xterm draws on a canvas: read what the terminal shows from its buffer, line by line
    screen = ("() => { const w = window.tklabTerm; const t = w && w.content && w.content._term;"
              " if (!t) return ''; const b = t.buffer.active; const out = [];"
              " for (let i = 0; i < b.length; i++) {"
              " const l = b.getLine(i); if (l) out.push(l.translateToString(true)); }"
              " return out.join('\\n'); }")
    deadline = time.monotonic() + 60
    while not page.evaluate(screen).strip():  # the shell's prompt
        if time.monotonic() > deadline:
            _shot(page, "FAILED_terminal_prompt")
            current = page.evaluate("() => { const w = window.jupyterapp.shell.currentWidget; "
                                    "return w ? w.id + ' ' + w.title.label : 'none'; }")
            pytest.fail(f"the lab's terminal showed no prompt (current widget: {current})")
        page.wait_for_timeout(500)
    term.click()
    # the marker is split by quotes as typed, so only the echo's output matches it (not the command line)
    page.keyboard.type('python -m tklab check exercises/ch01_naive_matmul.py; echo TKLAB-CHECK-""DONE=$?\n')
    deadline = time.monotonic() + 240
    while not re.search(r"TKLAB-CHECK-DONE=\d", text := page.evaluate(screen)):
        if time.monotonic() > deadline:
            _shot(page, "FAILED_terminal")
            pytest.fail(f"the check did not finish in the terminal: {text[-800:]}")
        page.wait_for_timeout(1000)
    _shot(page, "10_terminal_check")
    assert "No module named" not in text and "cannot import" not in text, text[-800:]
    assert "ch01_naive_matmul" in text and re.search(r"FAILED|PASSED|NOT VERIFIED", text), text[-800:]
    # the learner has written nothing yet: the report says so and where, not what the stub's placeholder did
    assert re.search(r"FAILED: not started: fill in the TODO at line \d+", text), text[-800:]
    assert "never written" not in text, text[-800:]
