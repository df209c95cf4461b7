"""One preprocessor view (issue 37, deliverable 4): a learner's CUDA file may keep, move or delete its template's
preprocessor directives but add none (``tklab.grading.directives``), on every path, before any compiler reads it.

The registry gives the exercises (no list here); the hostile variants are planted in chapter 02's solution, the
file of the red-team review that split NVRTC and g++ with ``#if !defined(__x86_64__)``.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from tklab.grading import directives, specs
from tklab.grading.check import check

ROOT = Path(__file__).resolve().parent.parent
CUDA = [i for i in specs.all_ids() if specs.get(i).language == "cuda"]
CH02 = (ROOT / "solutions" / "ch02_smem_tiling" / "ch02_smem_tiling.cu").read_text()
TILE = "constexpr int TILE = 32;"
STORE = "    if (row < M && col < N) C[row * N + col] = acc;\n"
UNROLLED = "#pragma unroll\n        for (int k = 0; k < TILE; ++k)"
assert STORE in CH02 and UNROLLED in CH02 and "constexpr int TILE = 32;" in CH02


def _line_of(text: str, marker: str) -> int:
    return text[:text.index(marker)].count("\n") + 1


# Each: (name, the hostile file, the marker on the line the message must name, the directive as it names it).
HOSTILE = [
    ("compiler split", CH02.replace(STORE, "#if !defined(__x86_64__)\n    if (row < M && col < N) C[row * N + col] = "
                                    "acc + 1.0f;\n#else\n" + STORE + "#endif\n"),
     "#if !defined", "`#if !defined(__x86_64__)`"),
    ("constant redefined", CH02.replace("constexpr int TILE = 32;", "#define TILE_STEP 16\nconstexpr int TILE = 32;")
     .replace("k0 += TILE)", "k0 += TILE_STEP)"), "#define TILE_STEP", "`#define TILE_STEP 16`"),
    ("pragma added", CH02.replace("    float acc = 0.0f;\n", "    float acc = 0.0f;\n#pragma unroll 4\n"),
     "#pragma unroll 4", "`#pragma unroll 4`"),
    ("second pragma unroll", CH02.replace(STORE, "#pragma unroll\n    for (int i = 0; i < 1; ++i)\n" + STORE),
     "#pragma unroll\n    for (int i", "`#pragma unroll`"),
    ("hidden behind a comment", CH02.replace(TILE, "# /* */ define TILE 32\nconstexpr int T = 32;"),
     "# /* */ define", "`#define TILE 32` (written `# /* */ define TILE 32`)"),
    ("digraph", CH02.replace("constexpr int TILE = 32;", "%:define TILE 32\nconstexpr int T = 32;"),
     "%:define", "`#define TILE 32` (written `%:define TILE 32`)"),
    ("pragma operator", CH02.replace("float acc = 0.0f;\n", "float acc = 0.0f;\n    _Pragma(\"nounroll\")\n"),
     "_Pragma", "`#pragma nounroll` (written `_Pragma(\"nounroll\")`)"),
    ("continued over two lines", CH02.replace(TILE, "#\\\n  define TILE \\\n 32\nconstexpr int T = 32;"),
     "#\\\n  define", "`#define TILE 32`"),
    ("trigraph", CH02.replace("constexpr int TILE = 32;", "??=define TILE 32\nconstexpr int T = 32;"),
     "??=define", "(as a compiler reads it with trigraphs replaced)"),
    ("a header of its own", '#include "helper.cuh"\n' + CH02, '#include "helper.cuh"', '`#include "helper.cuh"`'),
]


@pytest.mark.parametrize("exercise", CUDA)
def test_the_untouched_exercise_and_its_solution_add_no_directive(exercise):
    spec = specs.get(exercise)
    for path in (ROOT / "exercises" / spec.exercise_file, ROOT / spec.solution):
        assert directives.added(spec, path.read_text(), path.name) == [], path


@pytest.mark.parametrize("name, text, marker, named", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_a_directive_beyond_the_template_is_refused_naming_its_line(name, text, marker, named):
    spec = specs.get("ch02_smem_tiling")
    found = directives.added(spec, text, "exercises/ch02_smem_tiling.cu")
    assert len(found) == (3 if name == "compiler split" else 1), found  # the split: its #if, #else and #endif
    line = _line_of(text, marker)
    assert found[0].startswith(f"exercises/ch02_smem_tiling.cu:{line}: error: "), found
    assert named in found[0] and "the same on every compiler" in found[0], found


@pytest.mark.parametrize("name, text, marker, named", HOSTILE[:1] + HOSTILE[6:8], ids=["split", "_Pragma", "continued"])
def test_check_fails_it_on_the_cpu_path_before_compiling(tmp_path, monkeypatch, name, text, marker, named):
    """``tklab.check`` refuses it before any compiler (NVRTC is stood in by one that fails the test if called):
    FAILED, the line named, not an exception."""

    def no_compiler(*a, **k):
        raise AssertionError("the file reached a compiler")

    monkeypatch.setattr(importlib.import_module("tklab.toolchain.compiler"), "compile", no_compiler)
    f = tmp_path / "ch02_smem_tiling.cu"
    f.write_text(text)
    res = check("ch02_smem_tiling", f, run=False)
    assert res.passed is False and not res.compiled, res
    assert f"ch02_smem_tiling.cu:{_line_of(text, marker)}: error: " in res.compile_error
    assert named in res.compile_error and res.summary.startswith("does not compile: "), res.summary


def test_check_fails_it_on_the_gpu_path_too(tmp_path, monkeypatch):
    """With a (stood-in) Hopper GPU the same refusal comes first: nothing is compiled or run."""
    import tklab.grading.check as chk
    from tklab.grading import runner

    monkeypatch.setattr(chk.gpu, "available", lambda: True)
    monkeypatch.setattr(chk.gpu, "arch", lambda: "sm_90a")
    monkeypatch.setattr(runner, "run_isolated", lambda *a, **k: pytest.fail("the file was run"))
    f = tmp_path / "ch02_smem_tiling.cu"
    f.write_text(HOSTILE[0][1])
    res = chk.check("ch02_smem_tiling", f, bench=False)
    assert res.passed is False and "`#if !defined(__x86_64__)`" in res.compile_error, res


def test_template_directives_may_be_kept_moved_or_deleted():
    spec = specs.get("ch03_register_blocking")
    text = (ROOT / spec.solution).read_text()
    first = text.index("#pragma unroll\n")
    deleted = text[:first] + text[first + len("#pragma unroll\n"):]
    assert directives.added(spec, deleted, "f") == []
    moved = "#pragma unroll\n" + deleted  # the same directive, elsewhere
    assert directives.added(spec, moved, "f") == []
    assert directives.added(spec, "#pragma unroll\n" + text, "f")  # one more than the template has


def test_a_tuning_knob_takes_another_integer_and_nothing_else():
    """``#ifndef STAGES / #define STAGES 2 / #endif`` is a knob: another integer is the same on every compiler
    (the benign ``one_stage`` variant of chapter 07); an expression is not."""
    spec = specs.get("ch07_tma_ring")
    text = (ROOT / spec.solution).read_text()
    assert directives.added(spec, text.replace("#define STAGES 2", "#define STAGES 1"), "f") == []
    hostile = directives.added(spec, text.replace("#define STAGES 2", "#define STAGES (1 + __x86_64__)"), "f")
    assert len(hostile) == 1 and "`#define STAGES (1 + __x86_64__)`" in hostile[0]


def test_every_way_of_reading_the_file_counts():
    """Where compilers could disagree on where a comment or a string ends, a directive any reading sees counts."""
    spec = specs.get("ch02_smem_tiling")
    raw = CH02.replace(STORE, 'const char* s = R"(" /* )";\n#define X 1\n// */\n' + STORE)
    loose = CH02.replace(STORE, "    // a comment \\  \n#define X 1\n" + STORE)  # GCC continues the comment
    for text in (raw, loose):
        found = directives.added(spec, text, "f")
        assert len(found) == 1 and f"f:{_line_of(text, '#define X')}: error: `#define X 1`" in found[0], found
    in_a_string = CH02.replace(STORE, 'const char* s = "#define X 1";\n' + STORE)
    assert directives.added(spec, in_a_string, "f") == []


def test_the_scanner_reads_directives_as_a_compiler_does():
    text = "int a; /* a\ncomment */ #  pragma   unroll  // why\nint n = 1'000; // 'x\n#endif\n"
    assert [(d.line, d.text) for d in directives.scan(text)] == [(2, "#pragma unroll"), (4, "#endif")]
    assert directives.scan('#\n#include "tk.cuh"\n')[0].text == '#include "tk.cuh"'  # a null directive is nothing
