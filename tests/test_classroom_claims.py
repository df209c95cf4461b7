"""What docs/CLASSROOM.md states and no other test held: each statement here, checked (fast, no GPU)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tklab.toolchain import includes

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("line, words", [
    ('#embed "/dev/zero"', "#embed is not allowed"),
    ('#embed "answer.bin"', "#embed is not allowed"),  # even a name inside its own folder
    ('#pragma GCC dependency "/srv/class/bob/ch02_smem_tiling.cu"', "refused"),
])
def test_embed_and_pragma_dependency_are_refused_before_any_compiler(tmp_path, line, words):
    """"`#embed`, ... refused" (section 5, what holds at every level)."""
    (tmp_path / "answer.bin").write_bytes(b"\x00")
    with pytest.raises(includes.IncludeRefused, match=words) as e:
        includes.refuse_outside(f"// mine\n{line}\n__global__ void k() {{}}\n", "ch02_smem_tiling.cu",
                                own_dir=tmp_path, allowed=[ROOT / "cuda"], search=[tmp_path, ROOT / "cuda"])
    assert "ch02_smem_tiling.cu:2" in str(e.value)  # the learner's own line


def test_the_values_file_holds_what_the_profiles_section_says():
    """Section 2: 1 GB guaranteed and 3 GB at most per CPU server; idle servers culled after an hour."""
    yaml = pytest.importorskip("yaml")
    values = yaml.safe_load((ROOT / "deploy" / "jupyterhub" / "values.yaml").read_text())
    memory = values["singleuser"]["memory"]
    assert (memory["guarantee"], memory["limit"]) == ("1G", "3G")
    assert values["cull"]["enabled"] is True and values["cull"]["timeout"] == 3600
