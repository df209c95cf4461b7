"""Adding an exercise is one folder (docs/ARCHITECTURE.md, "Adding an exercise"; issue 43, item 1): this test follows
the recipe end to end with a throwaway exercise, a vector add, in a copy of ``solutions/`` that the registry is
pointed at (``TKLAB_SOLUTIONS``). It writes the folder -- the solution, ``spec.py``, ``hints.toml`` and
``planted.toml`` with one mistake and one benign variant -- and nothing else: the registry lists it, the generator
writes its exercise, the index shows it, the real ``python -m tklab check`` passes the solution and fails the
untouched exercise and the mistake on the CPU emulator (the sandboxed child reading the spec from the copy the run
hands it), and the planted-mistake tests run its suite."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import planted
import pytest

from tklab.grading import cases as emu_cases
from tklab.grading import specs

ROOT = Path(__file__).resolve().parent.parent
ID = "ch99_vector_add"

SOLUTION = """\
// A vector add: c = a + b, one element a thread.
extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    // BEGIN SOLUTION hint: each thread writes its element of c, when the element is inside the vector
    if (i < n) c[i] = a[i] + b[i];
    // END SOLUTION
}
"""

SPEC = '''\
"""ch99: a vector add, one element a thread (the recipe's throwaway exercise: tests/test_new_exercise.py)."""

from __future__ import annotations

import numpy as np

from tklab.grading.spec_kit import Exercise, Launch, WritesGlobal, uniform

SPEC = Exercise(
    id="ch99_vector_add",
    title="A vector add",
    chapter="99",
    untouched=("writes its output", "never stores to global memory"),
    solution="ch99_vector_add.cu",
    kernel="vector_add",
    language="cuda",
    inputs=lambda rng, d: {"a": uniform(rng, (d["N"],)), "b": uniform(rng, (d["N"],))},
    outputs=lambda d: {"c": ((d["N"],), "float32")},
    reference=lambda x, d: {"c": x["a"].astype(np.float64) + x["b"]},
    launch=lambda d: Launch(grid=(-(-d["N"] // 128),), block=(128,)),
    args=lambda a, d: (a["a"], a["b"], a["c"], np.int32(d["N"])),
    cases=({"N": 1000}, {"N": 1}, {"N": 300}),
    shapes="any N",
    static=(WritesGlobal(),),
)
'''

HINTS = '''\
concept = "one thread per element, and a bound for the last block"
level1 = "Each thread owns one element of c; the last block has threads past the end of the vector."
question = "Which threads of the last block have no element of c, and what must they not touch?"
level2 = "Compare the thread's index with n before it reads a and b and writes c."
'''

PLANTED = '''\
least = [1, 1]
slow = false

[[mistake]]
name = "bound_off_by_one"
description = "i <= n: the thread one past the end reads and writes outside the vectors"
shows = "past the end"
[[mistake.edit]]
find = "if (i < n)"
replace = "if (i <= n)"

[[benign]]
name = "early_return"
description = "threads past the end return first; the sum in the other order"
[[benign.edit]]
find = "if (i < n) c[i] = a[i] + b[i];"
replace = """if (i >= n) return;
    c[i] = b[i] + a[i];"""
'''


def test_every_exercise_is_one_folder_and_no_spec_imports_another() -> None:
    """The workbook's own exercises follow the recipe: a folder named by its id with its solution, ``spec.py``,
    ``hints.toml`` and ``planted.toml``, and a spec that imports no other exercise's spec (only ``tklab``'s kit, numpy
    and the standard library; a baseline the GPU's torch or CuPy inside its function), so each spec loads alone from
    the copy a sandboxed run is handed."""
    import ast

    allowed = {"tklab", "numpy", "torch", "cupy", *sys.stdlib_module_names}
    folders = sorted(p.parent.name for p in (ROOT / "solutions").glob("*/spec.py"))
    assert folders and folders == [i for i in sorted(specs.all_ids()) if specs.spec_file(i) is not None]
    for i in folders:
        folder = ROOT / "solutions" / i
        solution = [p.name for p in folder.iterdir() if p.stem == i and p.suffix in (".cu", ".py")]
        assert len(solution) == 1 and all((folder / f).is_file() for f in ("hints.toml", "planted.toml")), i
        for node in ast.walk(ast.parse((folder / "spec.py").read_text())):
            if isinstance(node, ast.ImportFrom):
                assert not node.level, f"{i}/spec.py: a relative import"
                names = [f"{node.module}.{a.name}" for a in node.names]
            else:
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            for name in names:  # the registry (tklab.grading.specs, tklab.specs) is how one spec would reach another
                assert name.split(".")[0] in allowed and not name.startswith(("tklab.grading.specs", "tklab.specs")), \
                    f"{i}/spec.py imports {name}"


@pytest.fixture(scope="module")
def course(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the workbook's solutions/ with the new exercise's folder added, and an empty exercises/ beside it."""
    base = tmp_path_factory.mktemp("course")
    shutil.copytree(ROOT / "solutions", base / "solutions", ignore=shutil.ignore_patterns("__pycache__"))
    folder = base / "solutions" / ID
    folder.mkdir()
    for name, text in ((f"{ID}.cu", SOLUTION), ("spec.py", SPEC), ("hints.toml", HINTS), ("planted.toml", PLANTED)):
        (folder / name).write_text(text)
    (base / "exercises").mkdir()
    return base


def _run(course: Path, *argv: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, specs.ROOT_VARIABLE: str(course / "solutions"),
           "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, *argv], capture_output=True, text=True, cwd=ROOT, env=env, timeout=timeout)


def test_the_registry_finds_the_folder_and_nothing_else_names_it(course: Path, monkeypatch) -> None:
    monkeypatch.setenv(specs.ROOT_VARIABLE, str(course / "solutions"))
    assert ID in specs.all_ids() and specs.find("ch99").id == ID
    spec = specs.get(ID)
    assert spec.exercise_file == f"{ID}.cu" and spec.chapter == "99" and spec.kernel == "vector_add"
    assert Path(spec.solution) == course / "solutions" / ID / f"{ID}.cu"
    assert ID in planted.exercises() and [m.name for m in planted.load(ID)] == ["bound_off_by_one", "early_return"]
    monkeypatch.delenv(specs.ROOT_VARIABLE)
    assert ID not in specs.all_ids()  # the workbook's own registry never heard of it


def test_the_generator_writes_its_exercise_and_the_index_lists_it(course: Path) -> None:
    out = _run(course, "-m", "tklab", "exercises", "--solutions", str(course / "solutions"),
               "--exercises", str(course / "exercises"))
    assert out.returncode == 0, out.stderr
    stub = (course / "exercises" / f"{ID}.cu").read_text()
    assert stub.startswith(f"// GENERATED from solutions/{ID}/{ID}.cu")
    assert "TODO: your code here (about 1 line)" in stub
    assert "c[i] = a[i] + b[i]" not in stub
    listed = _run(course, "-m", "tklab", "exercises", "--list")
    assert listed.returncode == 0 and ID in listed.stdout, listed.stdout + listed.stderr


@pytest.mark.skipif(not emu_cases.can_run(specs.get("ch02_smem_tiling")), reason="no C++ compiler for the emulator")
def test_the_real_check_passes_the_solution_and_fails_the_stub_and_the_mistake(course: Path, monkeypatch) -> None:
    """``python -m tklab check`` in a fresh process (``planted.run_check``), as a learner runs it."""
    monkeypatch.setenv(specs.ROOT_VARIABLE, str(course / "solutions"))
    solution = course / "solutions" / ID / f"{ID}.cu"
    good = planted.run_check(solution, ID, seed=5)
    assert good.passed and good.established == "cpu-emulation", good.summary
    _run(course, "-m", "tklab", "exercises", "--solutions", str(course / "solutions"),
         "--exercises", str(course / "exercises"))
    untouched = planted.run_check(course / "exercises" / f"{ID}.cu", ID, seed=5)
    assert untouched.failed, untouched.summary
    for m in planted.load(ID):
        v = planted.run_check(planted.mutated_file(m, course / "mutated"), ID, seed=5)
        if m.benign:
            assert v.passed, (m.name, v.summary)
        else:
            assert v.failed and v.says(m.shows), (m.name, v.summary)


@pytest.mark.skipif(not emu_cases.can_run(specs.get("ch02_smem_tiling")), reason="no C++ compiler for the emulator")
def test_the_planted_mistake_tests_run_its_suite(course: Path) -> None:
    out = _run(course, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", "-m", "",
               "tests/test_planted_mistakes.py", "-k", f"{ID} or every_exercise_has_its_planted")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert "3 passed" in out.stdout, out.stdout[-2000:]
