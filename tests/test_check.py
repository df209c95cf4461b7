"""Checking learners' files: solutions pass, untouched exercises fail for the right reason, faults and
hangs are reported while the caller survives. CPU tests use the compiler, SASS and numba's simulator;
GPU tests run the kernels for real."""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path

import numpy as np
import pytest
import stubs
from answers import answer

import tklab
from tklab import gpu, specs
from tklab.grading import cases as emu_cases
from tklab.grading import emulated
from tklab.grading.check import check, main, resolve
from tklab.grading.judge import compare
from tklab.grading.runner import run_isolated
from tklab.run import arrays

ROOT = Path(__file__).resolve().parent.parent
IDS = [i for i in specs.all_ids() if specs.get(i).kind == "exercise"]
CUDA_IDS = [i for i in IDS if specs.get(i).language == "cuda"]
NO_GPU = not gpu.available()

# What an untouched exercise fails on without a GPU: (static check, words in its message), from each spec's
# ``untouched`` (the registry is the one list; drills are checked in tests/test_drills.py).
STUB_FAILS = {i: specs.get(i).untouched for i in IDS}


def test_every_exercise_has_a_spec_a_solution_and_an_exercise():
    assert {"ch01_naive_matmul", "ch02_smem_tiling", "ch03_register_blocking", "ch04_swizzle", "ch05_mma",
            "ch06_tiles"} <= set(IDS)
    for i in specs.all_ids():
        spec = specs.get(i)
        if spec.kind == "debug":  # its untouched file fails in the run: its planted suite's file as given
            continue
        assert len(spec.untouched) == 2 and all(spec.untouched), f"{i}: no `untouched` (what its stub fails on)"
        assert spec.untouched[0] in {c.name for c in spec.static}, f"{i}: `untouched` names no static check"
        assert (ROOT / spec.solution).is_file()
        assert Path(spec.solution).name.split(".")[0] == i, f"{i}: its files are not named after it"
        assert (ROOT / "exercises" / spec.exercise_file).is_file()
        assert spec.cases and spec.static, i
        if spec.language == "numba":
            assert spec.sim_cases, i


@pytest.mark.nvrtc
@pytest.mark.skipif(not NO_GPU, reason="on a GPU the CUDA exercises run, and correctness is established")
def test_without_a_cxx_compiler_a_cuda_check_is_not_verified_never_passed(capsys, monkeypatch):
    """README: without a GPU, only where nothing can run the kernel (no C++ compiler for the PTX interpreter's
    runtime) is the verdict NOT VERIFIED (exit 3), never "passed"; ``--allow-unverified`` exits 0."""
    from tklab.emulate import toolchain

    def no_compiler():
        raise toolchain.NoCompiler("running kernels on the CPU needs a C++20 compiler (none here: the test)")

    monkeypatch.setattr(toolchain, "find", no_compiler)
    solution = ROOT / "solutions" / "ch02_smem_tiling" / "ch02_smem_tiling.cu"
    assert main([str(solution), "--no-bench"]) == 3
    out = capsys.readouterr().out
    assert "NOT VERIFIED" in out and "PASSED" not in out, out
    assert main([str(solution), "--no-bench", "--allow-unverified"]) == 0
    assert "NOT VERIFIED" in capsys.readouterr().out


def test_tklab_check_stays_callable_after_the_module_is_imported():
    import tklab.grading.check as module  # this import makes the package attribute the module ...

    assert tklab.check is module or callable(tklab.check)
    res = tklab.check("ch05", ROOT / "solutions" / "ch05_mma" / "ch05_mma.cu", run=False)  # ... which must still work
    assert res.exercise == "ch05_mma" and res.static_ok


def test_resolve_by_id_prefix_and_path():
    assert resolve("ch02")[0].id == "ch02_smem_tiling"
    spec, path = resolve("ch04_swizzle")
    assert path == ROOT / "exercises" / "ch04_swizzle.cu"
    spec, path = resolve("somewhere/ch05_mma.cu")
    assert spec.id == "ch05_mma" and path == Path("somewhere/ch05_mma.cu")
    assert resolve("ch04_padding")[1] == ROOT / "exercises" / "drills" / "ch04_padding.py"  # a drill
    assert resolve("ch04")[0].id == "ch04_swizzle"  # a chapter prefix: its exercise, not its drills
    assert resolve("exercises/flash_fwd_hopper.cu")[0].id == "ch10_flash"  # a file under its old name
    with pytest.raises(KeyError, match="exercises:"):
        resolve("ch99")


@pytest.mark.parametrize("exercise", IDS)
def test_solution_passes_its_cpu_check(exercise):
    spec = specs.get(exercise)
    res = check(exercise, ROOT / spec.solution, bench=False)
    assert res.compiled, res
    assert res.static_ok, res
    if spec.language == "numba" or not NO_GPU:
        assert res.passed is True, res
    elif emu_cases.can_run(spec):  # no GPU: CUDA C++ runs on the CPU emulator, at its smaller cases
        assert res.passed is True and res.run_where == emulated.LABEL, res
    else:
        assert res.passed is None and "needs a GPU" in res.run_message
        assert res.verdict == "NOT VERIFIED" and res.established == "not-established"


@pytest.mark.parametrize("exercise", [i for i in CUDA_IDS if not specs.get(i).hopper_only])
def test_cuda_solution_builds_for_sm80(exercise):
    spec = specs.get(exercise)
    mod = tklab.compile((ROOT / spec.solution).read_text(), arch="sm_80", name=spec.filename, options=spec.options)
    assert spec.kernel in mod.kernels


@pytest.mark.nvrtc  # the expected reason is a static check's, read from what NVRTC makes
@pytest.mark.parametrize("exercise", [i for i in IDS if "_challenge_" not in i])  # a challenge starts correct
def test_untouched_exercise_fails_for_the_expected_reason(exercise):
    """The stub fails as its spec says (graders score that), and its report says only "not started" and where
    the first TODO is: the placeholders' failures are no diagnosis of the learner's code."""
    res = check(exercise, bench=False, timeout=60)
    assert res.compiled, res  # the stubs compile: the learner starts from a building file
    assert res.passed is False, res
    name, words = STUB_FAILS[exercise]
    failed = {s.name: s.detail for s in res.static if not s.ok}
    assert name in failed and words in failed[name], res
    todo = next(n for n, line in enumerate((ROOT / "exercises" / specs.get(exercise).exercise_file).read_text()
                                           .splitlines(), start=1) if "TODO: your code here" in line)
    assert re.match(rf"not started: fill in the TODOs? at lines? {todo}\b", res.summary), res.summary
    assert words not in repr(res) and words not in res._repr_html_() and "not started" in res._repr_html_()
    if not NO_GPU or specs.get(exercise).language == "numba":
        assert res.run_status == "wrong", res  # it ran, and the output is wrong


def test_untouched_numba_exercise_reports_unwritten_output_on_the_cpu(tmp_path):
    if not NO_GPU:
        pytest.skip("on a GPU the numba exercise runs on the GPU")
    res = check("ch01")
    assert res.run_where == "CPU: the PTX numba compiled, interpreted (correctness only, no timing)"
    m = res.mismatch
    assert m["index"] == [0, 0] and math.isnan(m["got"]) and m["unwritten"] == m["wrong"] == m["total"]
    text = repr(res)
    assert "FAILED: not started" in text and "never written" not in text  # its report: where to write
    begun = check("ch01", stubs.begun_file("ch01_naive_matmul", tmp_path))  # a line written: judged and shown
    text = repr(begun)
    assert "FAILED" in text and "never written" in text and "yours" in text and "expected" in text
    assert "<table" in begun._repr_html_()


def test_compile_error_is_shown_on_the_learners_line(tmp_path):
    src = (ROOT / "solutions" / "ch02_smem_tiling" / "ch02_smem_tiling.cu").read_text().splitlines()
    line = next(i for i, s in enumerate(src) if "C[row * N + col] = acc" in s)
    src[line] = src[line].replace("acc;", "accc;")
    f = tmp_path / "ch02_smem_tiling.cu"
    f.write_text("\n".join(src) + "\n")
    res = check(f)
    assert res.compiled is False and res.passed is False
    assert re.search(rf":{line + 1}(:\d+)?: error", res.compile_error)  # (the emulator adds a column)
    assert "accc" in res.compile_error
    assert res.summary.startswith("does not compile")


@pytest.mark.nvrtc  # found in what NVRTC makes (without it the emulated run says so: tests/test_no_nvrtc.py)
def test_renamed_kernel_is_a_static_failure(tmp_path):
    f = tmp_path / "ch05_mma.cu"
    f.write_text((ROOT / "solutions" / "ch05_mma" / "ch05_mma.cu").read_text().replace("mma_16x16x16", "my_mma"))
    res = check(f, run=False)
    assert res.compiled and res.passed is False
    assert "no kernel named mma_16x16x16" in res.summary and "my_mma" in res.summary


@pytest.mark.parametrize("layout, ok, words", [
    ("r * TILE + (c + r) % TILE", True, "conflict-free"),  # a rotation: another swizzle
    ("r * (TILE + 1) + c", False, "padding does not fit"),  # padding: the buffer has no word to spare
    ("r * TILE + c", False, "32 passes (32-way bank conflict)"),  # row-major: columns in one bank
    ("c * TILE + r", False, "writing a row of the tile takes 32 passes"),
    ("r * TILE + (c ^ (r % 2))", False, "reading a column of the tile takes 16 passes"),
    ("r * TILE * 2 + c", False, "map outside the buffer"),
])
@pytest.mark.nvrtc  # a compile-time probe: NVRTC runs it
def test_swizzle_probe_counts_conflicts_at_compile_time(tmp_path, layout, ok, words):
    f = tmp_path / "ch04_swizzle.cu"
    f.write_text((ROOT / specs.get("ch04_swizzle").solution).read_text().replace(
        answer("ch04_swizzle", "^").removeprefix("return ").removesuffix(";"), layout))
    res = check(f, run=False)
    probe = next(s for s in res.static if s.name == "conflict-free tile layout")
    assert probe.ok is ok and words in probe.detail, probe


@pytest.mark.nvrtc  # spills are read from what NVRTC makes
def test_register_array_in_local_memory_fails_no_spills(tmp_path):
    src = (ROOT / "solutions" / "ch03_register_blocking" / "ch03_register_blocking.cu").read_text()
    # An index the compiler cannot resolve (threadIdx.z, 0 at run time) forces the array into local memory.
    old = "acc[i][j] += a[i] * b[j];"
    assert old in src
    src = src.replace(old, "acc[i + threadIdx.z][j] += a[i] * b[j];")
    f = tmp_path / "ch03_register_blocking.cu"
    f.write_text(src)
    res = check(f, run=False)
    spill = next(s for s in res.static if s.name == "no spills / local memory")
    assert not spill.ok and ("local memory" in spill.detail or "spilled" in spill.detail)


@pytest.mark.nvrtc  # --no-run leaves only the static checks to fail the untouched exercise
def test_cli_exit_codes(tmp_path, capsys):
    assert main([str(ROOT / "solutions" / "ch05_mma" / "ch05_mma.cu"), "--no-run"]) == 0
    assert "ch05_mma" in capsys.readouterr().out
    assert main([str(ROOT / "exercises" / "ch05_mma.cu"), "--no-run"]) == 1
    assert "FAILED" in capsys.readouterr().out
    assert main(["nothing_like_this"]) == 2
    assert main([str(ROOT / "solutions" / "ch01_naive_matmul" / "ch01_naive_matmul.py"), "--timeout", "-1"]) == 2


@pytest.mark.nvrtc  # with the emulator off, the static checks are all there is
@pytest.mark.skipif(not NO_GPU, reason="on a GPU the CUDA exercises run, and correctness is established")
def test_without_a_gpu_right_and_wrong_cuda_answers_do_not_both_pass(tmp_path, capsys, monkeypatch):
    """Issue 13: a right and a subtly wrong ch02 both pass every static check; neither may exit 0 (here with
    the CPU emulator switched off: tests/test_emulate_check.py has the same pair with it)."""
    monkeypatch.setenv("TKLAB_NO_EMULATION", "1")
    wrong = tmp_path / "ch02_smem_tiling.cu"
    wrong.write_text((ROOT / "solutions" / "ch02_smem_tiling" / "ch02_smem_tiling.cu").read_text().replace(
        "C[row * N + col] = acc;", "C[row * N + col] = acc + 1.0f;"))
    for f in (ROOT / "solutions" / "ch02_smem_tiling" / "ch02_smem_tiling.cu", wrong):
        assert main([str(f), "--no-bench"]) == 3
        out = capsys.readouterr().out
        assert "NOT VERIFIED" in out and "PASSED" not in out
        assert "checked: it compiles for sm_90a; 4 of 4 static checks pass" in out
        assert "NOT checked: whether its output is right (running it needs a GPU" in out
        assert main([str(f), "--no-bench", "--allow-unverified"]) == 0  # for CI of course material
        capsys.readouterr()
    assert main([str(wrong), "--json"]) == 3
    d = json.loads(capsys.readouterr().out)
    assert d["verdict"] == "NOT VERIFIED" and d["established"] == "not-established" and d["passed"] is None
    assert any("output is right" in u for u in d["unchecked"])
    html_text = check(wrong, bench=False)._repr_html_()
    assert "NOT checked" in html_text and "NOT VERIFIED" in html_text  # the same rows as the text report


def test_numba_exercise_says_how_it_was_checked(capsys):
    if not NO_GPU:
        pytest.skip("on a GPU the numba exercise runs on the GPU")
    assert main([str(ROOT / "solutions" / "ch01_naive_matmul" / "ch01_naive_matmul.py")]) == 0
    res = check("ch01", ROOT / "solutions" / "ch01_naive_matmul" / "ch01_naive_matmul.py")
    assert res.passed is True and res.established == "cpu-emulation"
    assert any("PTX numba compiled" in c for c in res.checked)


# ---- a learner's file that is not what a compiler expects ---------------------------------------------

def test_latin1_file_is_read_with_a_note_not_a_crash(tmp_path):
    f = tmp_path / "ch01_naive_matmul.py"
    text = (ROOT / specs.get("ch01_naive_matmul").solution).read_text().replace("numba.cuda.", "numba.cuda (café).", 1)
    f.write_bytes(text.encode("latin-1"))
    res = check(f, timeout=60)
    assert any("not UTF-8" in n and "Latin-1" in n and "line 1" in n for n in res.notes), res.notes
    assert res.compiled and res.passed is True, res  # the same code, judged on its outputs
    cu = tmp_path / "ch05_mma.cu"
    cu.write_bytes(("// naïve\n" + (ROOT / "solutions" / "ch05_mma" / "ch05_mma.cu").read_text()).encode("latin-1"))
    assert check(cu, run=False).static_ok


def test_nul_byte_and_oversized_files_fail_with_a_message(tmp_path):
    f = tmp_path / "ch05_mma.cu"
    f.write_bytes((ROOT / "solutions" / "ch05_mma" / "ch05_mma.cu").read_bytes() + b"\n\x00 int x;\n")
    res = check(f, run=False)
    assert res.passed is False and "NUL byte" in res.compile_error and res.summary.startswith("does not compile")
    big = tmp_path / "ch02_smem_tiling.cu"
    big.write_text("// generated\n" * 60000)
    res = check(big, run=False)
    assert res.passed is False and "KB; an exercise file is a few KB" in res.compile_error


# ---- the comparison -------------------------------------------------------------------------------

def test_compare_finds_first_wrong_element_and_window():
    exp = np.arange(60, dtype=np.float64).reshape(6, 10)
    got = exp.astype(np.float32).copy()
    got[3, 7] += 1.0
    got[4, 1] = arrays.poisoned(np, 1, np.float32)[0]  # what the checker filled it with: never written
    got[5, 2] = np.nan  # a NaN the kernel computed and wrote
    r = compare("C", got, exp, rtol=1e-6, atol=1e-6)
    assert not r["ok"] and r["index"] == [3, 7] and r["got"] == 38.0 and r["expected"] == 37.0
    assert r["wrong"] == 3 and r["unwritten"] == 1 and r["nan_written"] == 1 and r["total"] == 60
    w = r["window"]
    r0, c0 = w["origin"]
    assert len(w["got"]) == 4 and len(w["got"][0]) == 6
    assert w["bad"][3 - r0][7 - c0] and w["expected"][3 - r0][7 - c0] == 37.0


def test_compare_tolerance_and_nan():
    exp = np.ones(5)
    assert compare("x", exp * (1 + 1e-5), exp, rtol=1e-4, atol=0)["ok"]
    assert not compare("x", exp * (1 + 1e-3), exp, rtol=1e-4, atol=0)["ok"]
    assert not compare("x", np.full(5, np.nan), exp, rtol=1.0, atol=1.0)["ok"]
    assert "shape" in compare("x", np.ones(4), exp, rtol=0, atol=0)["reason"]


# ---- planted crashes and hangs: the caller survives -------------------------------------------------

CRASH = "import os\nos.abort()\n"
HANG = """\
from numba import cuda


@cuda.jit
def matmul(A, B, C):
    i = 0
    while True:
        i += 1
        C[0, 0] = i
"""
RAISE = """\
from numba import cuda


@cuda.jit
def matmul(A, B, C):
    C[1000, 0] = 1.0
"""


def _planted(tmp_path: Path, text: str) -> Path:
    f = tmp_path / "ch01_naive_matmul.py"
    f.write_text(text)
    return f


def test_python_level_crash_is_reported(tmp_path):
    out = run_isolated("ch01_naive_matmul", _planted(tmp_path, CRASH), mode="sim", timeout=120)  # (not the test)
    assert out.status == "crashed" and "SIGABRT" in out.message and "importing" in out.message
    res = check(_planted(tmp_path, CRASH), timeout=120)  # check refuses it before it runs (grading/hygiene.py)
    assert res.passed is False and "may import only numba, numpy and math" in res.compile_error


def test_endless_simulated_kernel_times_out(tmp_path):
    out = run_isolated("ch01_naive_matmul", _planted(tmp_path, HANG), mode="sim", timeout=4)
    assert out.status == "timeout" and "no result within 4 s" in out.message
    assert "running M=5, N=7, K=3" in out.message  # where it hung
    assert 4 <= out.seconds < 30


def test_exception_in_kernel_names_the_learners_line(tmp_path):
    out = run_isolated("ch01_naive_matmul", _planted(tmp_path, RAISE), mode="sim", timeout=120)  # (not the test)
    assert out.status == "error" and "IndexError" in out.message
    assert "ch01_naive_matmul.py:6" in out.message


# ---- on a GPU -----------------------------------------------------------------------------------------

FAULTS = {
    "illegal address": ("C[row * N + col] = acc;", "C[(size_t)row * N * 100000000 + col] = acc;", "error",
                        "ILLEGAL_ADDRESS"),
    "trap": ("C[row * N + col] = acc;", "if (row == 5 && col == 7) __trap(); C[row * N + col] = acc;", "error",
             "outside|fault|trap|LAUNCH_FAILED|ILLEGAL_INSTRUCTION"),
    "hang": ("C[row * N + col] = acc;", "while (!(C[0] == 1.0f)) __nanosleep(1000); C[row * N + col] = acc;",
             "timeout", "no result within"),
}


@pytest.mark.gpu
@pytest.mark.parametrize("exercise", IDS)
def test_solution_passes_on_the_gpu_with_a_speed_ratio(exercise):
    spec = specs.get(exercise)
    res = check(exercise, ROOT / spec.solution, timeout=240)
    if os.environ.get("TKLAB_CHECK_RESULTS"):  # `make gpu-check`-style runs keep the measured numbers
        out = Path(os.environ["TKLAB_CHECK_RESULTS"])
        out.mkdir(parents=True, exist_ok=True)
        (out / f"{exercise}.json").write_text(json.dumps(res.to_dict(), default=str, indent=1))
    assert res.passed is True, res
    assert res.run_status == "ok" and len(res.mismatch or {}) == 0
    if spec.bench is not None:
        assert res.speed and not res.speed.get("error"), res
        assert res.speed_ratio > 0 and res.speed["ms"] > 0


@pytest.mark.gpu
@pytest.mark.parametrize("fault", list(FAULTS))
def test_planted_cuda_fault_is_reported_and_the_caller_survives(tmp_path, fault):
    old, new, status, words = FAULTS[fault]
    src = (ROOT / "solutions" / "ch02_smem_tiling" / "ch02_smem_tiling.cu").read_text()
    assert old in src
    f = tmp_path / "ch02_smem_tiling.cu"
    f.write_text(src.replace(old, new.replace("C[0]", "((volatile float*)C)[0]")))
    res = check(f, bench=False, timeout=20)
    assert res.passed is False and res.run_status == status, res
    import re

    assert re.search(words, res.run_message), res
    # This process still has a working GPU: the fault stayed in the child.
    after = check("ch05_mma", ROOT / "solutions" / "ch05_mma" / "ch05_mma.cu", bench=False)
    assert after.passed is True, after


def test_an_exercises_notes_reach_its_check() -> None:
    """What an exercise's author writes in its spec's ``notes`` (what the verdict covers, how to read an output) is
    shown by every check of it, once; an exercise without notes shows none of another's."""
    from tklab.grading import specs
    from tklab.grading.check import check

    ch11 = specs.get("ch11_flash_bwd")
    assert ch11.notes and "park_dq" in ch11.notes[0]
    res = check("ch11_flash_bwd", ROOT / "solutions" / "ch11_flash_bwd" / "ch11_flash_bwd.cu", run=False)
    assert res.notes.count(ch11.notes[0]) == 1
    plain = check("ch02_smem_tiling", ROOT / "solutions" / "ch02_smem_tiling" / "ch02_smem_tiling.cu", run=False)
    assert not specs.get("ch02_smem_tiling").notes and ch11.notes[0] not in plain.notes
