"""One helper picks the newest result file by the date written inside it (tklab.recorded.newest), never by file name
(whose last part is a commit hash): the challenges' H200 record (leaderboard.recorded), chapter 10's bench report
(bench/flash_fwd.latest_report) and chapter 11's training curves (notebook 11) all use it."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from types import ModuleType

import nbformat
from scripts import load_script

from tklab import recorded
from tklab.grading import leaderboard

ROOT = Path(__file__).resolve().parent.parent


def _write(folder: Path, name: str, data: dict) -> Path:
    path = folder / name
    path.write_text(json.dumps(data))
    return path


def _date(path: Path) -> str | None:
    return json.loads(path.read_text()).get("date")


def test_a_newer_name_with_an_older_date_inside_loses(tmp_path: Path) -> None:
    older = _write(tmp_path, "run_2026-12-09_zzzzzzz.json", {"date": "2026-12-01T10:00:00"})
    newer = _write(tmp_path, "run_2026-12-01_0000000.json", {"date": "2026-12-05T09:00:00"})
    assert recorded.newest([older, newer], _date) == newer
    assert recorded.newest([newer, older], _date) == newer
    assert recorded.newest(tmp_path.glob("run_*.json"), _date) == newer


def test_files_that_are_not_candidates_are_passed_over(tmp_path: Path) -> None:
    dated = _write(tmp_path, "a.json", {"date": "2026-12-01"})
    undated = _write(tmp_path, "b.json", {})
    assert recorded.newest([dated, undated], _date) == dated
    assert recorded.newest([undated], _date) is None
    assert recorded.newest([], _date) is None
    # the same date: the later name, whatever the order given
    twin = _write(tmp_path, "c.json", {"date": "2026-12-01"})
    assert recorded.newest([twin, dated], _date) == recorded.newest([dated, twin], _date) == twin


def test_the_challenge_record_is_the_newest_by_its_date(tmp_path: Path) -> None:
    ex = "ch08_challenge_gemm_skinny"
    entry = {"reference_ms": 1.0, "library_ms": 1.0}
    _write(tmp_path, "challenges_2026-12-09_zzzzzzz.json",
           {"date": "2026-12-01", "device": "old", "commit": "zzzzzzz", "challenges": {ex: entry}})
    _write(tmp_path, "challenges_2026-12-01_0000000.json",
           {"date": "2026-12-05", "device": "new", "commit": "0000000", "challenges": {ex: entry}})
    _write(tmp_path, "challenges_2026-12-10_dryrun0.json",
           {"date": "2026-12-10", "device": "dry", "dry_run": True, "challenges": {ex: entry}})
    _write(tmp_path, "challenges_2026-12-11_other00.json", {"date": "2026-12-11", "challenges": {"other": entry}})
    (tmp_path / "challenges_2026-12-12_broken0.json").write_text("{")
    rec = leaderboard.recorded(ex, tmp_path)
    assert rec is not None and rec["device"] == "new"
    assert rec["file"] == "bench/results/challenges_2026-12-01_0000000.json"


def _flash_bench() -> ModuleType:
    sys.path.insert(0, str(ROOT))
    return load_script(ROOT / "bench" / "flash_fwd.py", "flash_fwd_bench_newest")


def test_the_bench_report_and_the_training_cell_use_the_helper() -> None:
    fb = _flash_bench()
    chosen = fb.latest_report()
    covering = [p for p in (ROOT / "bench" / "results").glob("flash_fwd_bench_*.json")
                if fb.covers_the_anchors(json.loads(p.read_text()))]
    assert chosen == recorded.newest(covering, fb.recorded_date)
    nb = nbformat.read(ROOT / "notebooks" / "11_flash_attention_backward.ipynb", as_version=4)
    [cell] = [c for c in nb.cells if c.get("id") == "29bf40cc"]
    assert "recorded.newest(" in cell.source and not re.search(r"sorted\(|max\(", cell.source)
    # its stored output names the run the helper picks
    picked = recorded.newest((ROOT / "bench" / "results").glob("train_tiny_gpt_*.json"),
                             lambda p: json.loads(p.read_text())["meta"]["date"])
    assert picked is not None and cell.outputs[0]["text"].startswith(picked.name)
