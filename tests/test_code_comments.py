"""Comments say why, not when (issue 43, item 4): no commit hash and no date in a code comment or docstring.

A measurement's record lives in ``bench/results/`` (its device, date and commit in the file), the history of what
was tried in ``docs/ROADMAP.md``; a comment keeps the reason, and cites a results file by its stable description
(``bench/results/flash_bwd_*.md``), since the file's name carries a date and a commit.

What is read: Python comments (``tokenize``) and docstrings (``ast``: module, class and function docstrings) of
``tklab/``, ``bench/*.py``, ``tests/*.py`` and ``solutions/``; ``//`` and ``/* */`` comments of the C++/CUDA files in
``cuda/``, ``tklab/`` (the emulator's shim) and ``solutions/``. Code itself is not read: a hex constant or a date in a
string the program uses is data.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# A commit hash as a comment writes it: 7-40 hex digits with at least one digit and one letter a-f, standing alone
# (not inside an identifier, a number or a hex literal such as 0x1f2e3d4c, a path or a file name); the same rule
# as tests/test_notebook_prose.py's for the notebooks' prose.
HASH = re.compile(r"(?<![\w./-])(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}(?![\w-])")
# A PTX floating-point literal (0f3f800000, 0d3ff0000000000000) reads like a hash and is not one.
PTX_FLOAT = re.compile(r"0[fd](?:[0-9a-f]{8}|[0-9a-f]{16})")
# A calendar date, alone or inside a results file's name (flash_bwd_<date>_<commit>.md).
DATE = re.compile(r"(?<!\d)20\d\d-[01]\d-[0-3]\d(?!\d)")

C_SUFFIXES = {".cu", ".cuh", ".h", ".hpp", ".cpp", ".cc", ".c", ".def"}
# The standard headers the emulator's prelude stands in for (tklab/emulate/shim/pp/<name>, no suffix) are C++ too.
C_FOLDERS_WITHOUT_SUFFIX = ("tklab/emulate/shim/pp/",)

#: Files of tklab/grading/ and solutions/ that still carry a commit hash or a date in a comment: cleaned by the
#: exercise-folder work (issue 43, items 1 and 4), which is restructuring those folders. The list only shrinks: a
#: file here that no longer carries one fails the test below until it leaves the list, and no other file may join.
ALLOWED: frozenset[str] = frozenset({
    "solutions/variants/ch11_dq_lag.cu",
})
ALLOWED_FOLDERS = ("tklab/grading/", "solutions/")


def python_comments(text: str) -> list[tuple[int, str]]:
    """(line, text) of every comment and every docstring line of a Python file."""
    out = [(tok.start[0], tok.string) for tok in tokenize.generate_tokens(io.StringIO(text).readline)
           if tok.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                    and isinstance(first.value.value, str):
                out += [(first.lineno + i, line) for i, line in enumerate(first.value.value.splitlines())]
    return out


def c_comments(text: str) -> list[tuple[int, str]]:
    """(line, text) of every ``//`` and ``/* */`` comment line of a C++/CUDA file; string and character literals
    (raw strings included) are stepped over, so ``"//"`` in code is not a comment."""
    out: list[tuple[int, str]] = []
    i, n, line = 0, len(text), 1
    while i < n:
        c = text[i]
        if c == "\n":
            line, i = line + 1, i + 1
        elif text.startswith("//", i):
            end = text.find("\n", i)
            end = n if end < 0 else end
            out.append((line, text[i:end]))
            i = end
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
            body = text[i:end]
            out += [(line + k, part) for k, part in enumerate(body.split("\n"))]
            line, i = line + body.count("\n"), end
        elif c == '"' and text[i - 1:i] == "R" and (raw := re.match(r'"([^()\\\s]{0,16})\(', text[i:])):
            close = text.find(")" + raw.group(1) + '"', i)
            end = n if close < 0 else close + len(raw.group(1)) + 2
            line, i = line + text[i:end].count("\n"), end
        elif c == "'" and text[i - 1:i].isalnum():  # a digit separator (1'000), not a character literal
            i += 1
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] not in (c, "\n"):
                j += 2 if text[j] == "\\" else 1
            i = j + 1
        else:
            i += 1
    return out


def findings(text: str) -> list[str]:
    """The commit-hash-like tokens and dates in one comment line."""
    hashes = [m.group() for m in HASH.finditer(text) if not PTX_FLOAT.fullmatch(m.group())]
    return hashes + DATE.findall(text)


def scanned_files() -> list[Path]:
    """Every file whose comments are read (see the module docstring)."""
    files = [p for p in (ROOT / "tklab").rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    files += [p for p in (ROOT / "cuda").rglob("*") if p.is_file()]
    files += [p for p in (ROOT / "solutions").rglob("*") if p.is_file()]
    files += sorted((ROOT / "bench").glob("*.py")) + sorted((ROOT / "tests").glob("*.py"))
    return sorted(p for p in files if language(p))


def language(path: Path) -> str | None:
    rel = path.relative_to(ROOT).as_posix()
    if path.suffix == ".py":
        return "python"
    if path.suffix in C_SUFFIXES or (not path.suffix and rel.startswith(C_FOLDERS_WITHOUT_SUFFIX)):
        return "c"
    return None


def file_findings(path: Path) -> list[str]:
    """``line: token | comment`` for each hash or date in the comments of one file."""
    text = path.read_text(encoding="utf-8", errors="replace")
    comments = python_comments(text) if language(path) == "python" else c_comments(text)
    return [f"{line}: {hit} | {comment.strip()[:120]}" for line, comment in comments for hit in findings(comment)]


def all_findings() -> dict[str, list[str]]:
    return {rel: hits for p in scanned_files()
            if (hits := file_findings(p)) and (rel := p.relative_to(ROOT).as_posix())}


# ---- the detector ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("comment", [
    "# measured at 4c3f14e",
    "# (the default before f21183e)",
    "/// 2026-12-01, bench/results/gpu-session_2026-12-01_session5.md",
    "#: (bench/results/flash_bwd_2026-12-02_d9c69ef.md).",
    "# commit a2b4b3b0c1d2e3f4a5b6c7d8e9f0a1b2c3d4e5f6",
])
def test_the_detector_finds_hashes_and_dates(comment: str) -> None:
    assert findings(comment), comment


@pytest.mark.parametrize("comment", [
    "# a mask of 0x1f2e3d4c, the pattern 0xfefefefe",
    "// 2^-22 relative error, 1.6e-3, 4096 registers, 1234567 bytes",
    "// mov.f32 %f1, 0f3f800000;",
    "# a name like tile_ab12cd3 or ab12cd3_tile, a path like bench/results/flash_bwd_*.md",
    "# deadbeef and facade have no digit; 1000000 has no letter",
])
def test_the_detector_passes_what_is_not_a_hash(comment: str) -> None:
    assert not findings(comment), findings(comment)


def test_c_comments_skip_strings_and_read_both_forms() -> None:
    src = ('const char* s = "// 4c3f14e"; // why: 1f41bc0\n'
           '/* a\n 2026-12-01 */ int x = 1\'000;\nauto r = R"(// d90e31a)";\n')
    found = [(line, hit) for line, c in c_comments(src) for hit in findings(c)]
    assert found == [(1, "1f41bc0"), (3, "2026-12-01")]


def test_python_comments_read_comments_and_docstrings_only() -> None:
    src = '"""Module 4c3f14e."""\nX = "d90e31a"  # set at 41a7189\ndef f():\n    """On 2026-12-01."""\n'
    found = sorted((line, hit) for line, c in python_comments(src) for hit in findings(c))
    assert found == [(1, "4c3f14e"), (2, "41a7189"), (4, "2026-12-01")]


# ---- the tree ----------------------------------------------------------------------------------------------
def test_no_commit_hash_or_date_in_a_comment() -> None:
    """Outside the allow-list, no comment or docstring carries a commit hash or a date: say what was decided and
    why, and cite the results file by its stable description (``bench/results/flash_bwd_*.md``)."""
    bad = {rel: hits for rel, hits in all_findings().items() if rel not in ALLOWED}
    assert not bad, "commit hashes or dates in comments (the reason stays, the record lives in bench/results/):\n" + \
        "\n".join(f"{rel}:{hit}" for rel, hits in sorted(bad.items()) for hit in hits)


def test_the_allow_list_only_shrinks() -> None:
    """The allow-list names only files of tklab/grading/ and solutions/ that still carry a hash or a date: a file
    cleaned (or moved) leaves the list."""
    assert all(rel.startswith(ALLOWED_FOLDERS) for rel in ALLOWED), sorted(ALLOWED)
    found = all_findings()
    clean = sorted(rel for rel in ALLOWED if rel not in found)
    assert not clean, f"no longer carry a hash or a date in a comment (or are gone): remove from ALLOWED: {clean}"
