"""Exercise files renamed after their ids keep the learner's work: an edited old-name file moves to the new
name, a generated one is removed, and when both hold work both are kept (and said so)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from tklab.grading import exercises as ex
from tklab.grading import index

ROOT = Path(__file__).resolve().parent.parent
OLD_GENERATED = "// an exercise as the generator once wrote it\n"


@pytest.fixture
def renamed(monkeypatch: pytest.MonkeyPatch) -> None:
    sha = hashlib.sha256(OLD_GENERATED.encode()).hexdigest()
    monkeypatch.setattr(ex, "RENAMED_FILES", {"old_tiling.cu": ("ch02_smem_tiling.cu", frozenset({sha}))})


def test_edited_old_file_moves_to_the_new_name(tmp_path: Path, renamed: None):
    (tmp_path / "old_tiling.cu").write_text("// my work\n")
    assert ex.renamed_work(tmp_path) == [("old_tiling.cu", "ch02_smem_tiling.cu")]
    report = ex.sync(ex.SOLUTIONS, tmp_path)
    assert report.migrated == {"old_tiling.cu": "ch02_smem_tiling.cu"}
    assert (tmp_path / "ch02_smem_tiling.cu").read_text() == "// my work\n"
    assert not (tmp_path / "old_tiling.cu").exists()
    assert report.refused and "ch02_smem_tiling.cu" in report.edited  # the work is never regenerated over
    assert (tmp_path / "ch02_smem_tiling.cu").read_text() == "// my work\n"


def test_generated_old_file_is_removed(tmp_path: Path, renamed: None):
    (tmp_path / "old_tiling.cu").write_text(OLD_GENERATED)
    report = ex.sync(ex.SOLUTIONS, tmp_path)
    assert "old_tiling.cu" in report.removed and not (tmp_path / "old_tiling.cu").exists()
    assert not report.refused and (tmp_path / "ch02_smem_tiling.cu").read_text().startswith("// GENERATED")


def test_both_names_edited_keeps_both(tmp_path: Path, renamed: None, capsys: pytest.CaptureFixture[str]):
    (tmp_path / "old_tiling.cu").write_text("// older work\n")
    (tmp_path / "ch02_smem_tiling.cu").write_text("// newer work\n")
    assert index.main(["--exercises", str(tmp_path)]) == 1
    assert (tmp_path / "old_tiling.cu").read_text() == "// older work\n"
    assert (tmp_path / "ch02_smem_tiling.cu").read_text() == "// newer work\n"
    assert "merge them by hand" in capsys.readouterr().out


def test_the_real_renames_know_the_generated_versions():
    """The course's own renames: the new files exist and no generated old version counts as work."""
    for old, (new, generated) in ex.RENAMED_FILES.items():
        assert (ROOT / "exercises" / new).is_file() and not (ROOT / "exercises" / old).exists()
        assert len(generated) >= 1 and all(len(h) == 64 for h in generated)
