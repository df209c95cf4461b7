"""The %%tk magic, doctor, CLI, ceilings, recorded results and SASS parsing (all CPU)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import tklab
from tklab import ceilings, compiler, doctor, magic, recorded, sass

#: The test session's compile cache (tests/conftest.py), before the fixture below hides it.
SHARED_CACHE = os.environ["TKLAB_CACHE_DIR"]


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TKLAB_CACHE_DIR", str(tmp_path / "cache"))


CELL = r"""
extern "C" __global__ void scale(float* x, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= a;
}
extern "C" __global__ void shift(float* x, float b, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] += b;
}
"""


@pytest.mark.nvrtc
def test_magic_binds_kernels_by_name(monkeypatch):
    monkeypatch.setattr("tklab.run.gpu.available", lambda: False)
    ns: dict = {}
    mod = magic.run_cell("--module m", CELL, ns)
    assert isinstance(ns["scale"], tklab.Kernel) and isinstance(ns["shift"], tklab.Kernel)
    assert ns["m"] is mod and mod.arch == compiler.COURSE_ARCH
    assert ns["scale"].params[1].ctype == "float"


@pytest.mark.nvrtc
def test_magic_options_and_errors(monkeypatch):
    ns: dict = {}
    mod = magic.run_cell("--arch sm_80 -O=-DBIAS=3", "extern \"C\" __global__ void k(int* x){ x[0] = BIAS; }", ns)
    assert mod.arch == "sm_80" and "3" in mod.ptx
    with pytest.raises(magic.MagicError, match="could not understand"):
        magic.run_cell("--bogus", CELL, ns)
    with pytest.raises(tklab.CompileError) as e:
        magic.run_cell("--arch sm_80 --name cell.cu", "extern \"C\" __global__ void k(int* x){\n x[0] = ;\n}", ns)
    assert e.value.lines == [2]
    assert e.value._render_traceback_()[0].startswith("CompileError: ")


@pytest.mark.nvrtc
def test_magic_binds_a_kernel_without_extern_c_under_its_plain_name():
    ns: dict = {}
    mod = magic.run_cell("--arch sm_80", "__global__ void saxpy(float* y, float a) { y[threadIdx.x] *= a; }", ns)
    assert isinstance(ns["saxpy"], tklab.Kernel) and ns["saxpy"].name == "_Z5saxpyPff"
    assert not [k for k in ns if k.startswith("_Z")]
    assert len(mod.notes) == 1 and 'not declared extern "C"' in mod.notes[0] and "_Z5saxpyPff" in mod.notes[0]
    ns2: dict = {}
    over = magic.run_cell("--arch sm_80", "__global__ void f(int* x) { x[0] = 1; }\n"
                          "__global__ void f(float* x) { x[0] = 1; }", ns2)
    assert not [k for k in ns2 if k == "f" or k.startswith("_Z")]  # ambiguous: not bound, and said so
    assert len(over.notes) == 2 and all("not bound" in n for n in over.notes)


@pytest.mark.nvrtc
@pytest.mark.parametrize("line, cell, words", [
    ("--arch hopper", 'extern "C" __global__ void k(int* x) { x[0] = 1; }', "not a CUDA architecture"),
    ("--bogus", "x", "unrecognized arguments: --bogus"),
    ('--name "unclosed', "x", "could not understand"),
    ("--arch sm_80", 'extern "C" __global__ void k(int* x) { x[0] = y; }', "CompileError: compiling cell.cu failed"),
])
def test_magic_errors_are_one_clear_block_not_a_traceback(monkeypatch, capsys, line, cell, words):
    pytest.importorskip("IPython")
    from IPython.testing.globalipapp import get_ipython

    ip = get_ipython()
    ip.run_line_magic("load_ext", "tklab")
    capsys.readouterr()
    result = ip.run_cell(f"%%tk {line}\n{cell}")
    assert result.error_in_exec is not None
    out = capsys.readouterr()
    text = out.out + out.err
    assert words in text, text
    assert "Traceback" not in text and "tklab/" not in text and "File " not in text, text
    assert "usage:" not in text  # argparse's own usage block is not printed


@pytest.mark.nvrtc
def test_magic_registers_with_ipython(monkeypatch):
    pytest.importorskip("IPython")
    from IPython.testing.globalipapp import get_ipython

    ip = get_ipython()
    monkeypatch.setattr("tklab.run.gpu.available", lambda: False)
    ip.run_line_magic("load_ext", "tklab")
    ip.run_cell_magic("tk", "--quiet", CELL)
    assert isinstance(ip.user_ns["shift"], tklab.Kernel)


def test_sass_histogram_counts_base_and_full_opcodes():
    text = """
        /*0000*/                   LDG.E.128 R4, desc[UR4][R2.64] ;
        /*0010*/              @!P0 FFMA R1, R2, R3, R4 ;
        /*0020*/                   FFMA R1, R2, R3, R4 ;
        /*0030*/               @P1 HGMMA.64x128x16.F32.BF16 R24, gdesc[UR8], R24 ;
    """
    assert sass.histogram(text) == {"LDG": 1, "FFMA": 2, "HGMMA": 1}
    assert sass.histogram(text, full=True)["LDG.E.128"] == 1


def test_ptxas_log_parsing():
    log = """ptxas info    : Compiling entry function 'k' for 'sm_90a'
ptxas info    : Function properties for k
ptxas         .     16 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers, 4096 bytes smem"""
    parsed = sass.parse_ptxas_log(log)["k"]
    assert parsed == {"stack": 16, "spill_stores": 8, "spill_loads": 12, "registers": 255, "barriers": 1,
                      "smem": 4096}
    assert sass.combine_resources({"SHARED": 4096}, parsed).spill_bytes == 20


@pytest.mark.nvrtc
def test_doctor_reports_cpu_path(capsys, monkeypatch):
    # The session's cache: the emulator's runtime and prelude, which its probe kernel needs, are built once per
    # run, not again here (nothing below depends on what the cache holds).
    monkeypatch.setenv("TKLAB_CACHE_DIR", SHARED_CACHE)
    monkeypatch.setattr("tklab.run.gpu.available", lambda: False)
    monkeypatch.setattr(doctor, "_simulator", lambda: "skipped in this test")
    assert doctor.main([]) == 0
    out = capsys.readouterr().out
    assert "[ok  ] compiler (NVRTC)" in out and "Hopper SASS readable" in out
    assert "CPU path (compile, inspect, models, widgets, simulator): ready" in out


def test_cli_lists_verbs_and_rejects_unknown():
    out = subprocess.run([sys.executable, "-m", "tklab", "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "doctor" in out.stdout and "grade" in out.stdout
    bad = subprocess.run([sys.executable, "-m", "tklab", "fly"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "unknown command 'fly'" in bad.stderr


def test_bench_without_gpu_says_so(monkeypatch):
    monkeypatch.setattr("tklab.run.gpu.available", lambda: False)
    with pytest.raises(RuntimeError, match="needs a GPU"):
        tklab.bench(lambda: None)


def test_ceilings_fractions():
    h200 = ceilings.for_device("NVIDIA H200")
    assert h200.bf16_tensor_tflops == 708.0 and h200.copy_tbps == ceilings.H200_COPY_TBPS
    f = h200.fraction(tflops=354.0, tbps=ceilings.H200_COPY_TBPS / 2)
    assert f == {"of bf16_tensor peak": 0.5, "of copy bandwidth": 0.5}
    assert h200.fraction(tflops=25.5, kind="fp32_simt") == {"of fp32_simt peak": 0.5}


def test_unknown_gpu_ceilings_are_measured_once_by_the_caller(tmp_path, monkeypatch):
    monkeypatch.setenv("TKLAB_CACHE_DIR", str(tmp_path))
    none = ceilings.for_device("Some GPU")  # nothing to measure with: nothing guessed
    assert (none.bf16_tensor_tflops, none.copy_tbps) == (None, None)
    calls = []
    measured = ceilings.for_device("Some GPU", measure_copy=lambda: calls.append(1) or 1.234)
    again = ceilings.for_device("Some GPU", measure_copy=lambda: pytest.fail("measured twice"))
    assert measured.copy_tbps == again.copy_tbps == 1.23 and calls == [1]
    assert measured.bf16_tensor_tflops is None


def test_recorded_results_round_trip(tmp_path, monkeypatch):
    path = tmp_path / "recorded.json"
    monkeypatch.setenv("TKLAB_RECORD_FILE", str(path))
    monkeypatch.setattr("tklab.run.gpu.available", lambda: False)
    missing = recorded.measure("ch99.none", lambda: pytest.fail("must not run without a GPU"))
    assert missing.values is None and "no recorded result" in str(missing)
    path.write_text(json.dumps({"ch99.x": {"values": {"tflops": 12.5}, "device": "NVIDIA H200",
                                           "date": "2026-11-29", "commit": "abc1234"}}))
    rec = recorded.measure("ch99.x", lambda: pytest.fail("must not run without a GPU"))
    assert rec["tflops"] == 12.5 and not rec.live
    assert "recorded on NVIDIA H200, 2026-11-29, commit abc1234" in str(rec)


def test_recorded_measure_stores_only_when_asked(tmp_path, monkeypatch):
    path = tmp_path / "recorded.json"
    monkeypatch.setenv("TKLAB_RECORD_FILE", str(path))
    monkeypatch.setattr("tklab.run.gpu.available", lambda: True)
    monkeypatch.setattr("tklab.run.gpu.name", lambda: "Fake GPU")
    rec = recorded.measure("ch99.live", lambda: {"ms": 1.5})
    assert rec.live and rec["ms"] == 1.5 and not path.exists()
    monkeypatch.setenv("TKLAB_RECORD", "1")
    recorded.measure("ch99.live", lambda: {"ms": 2.5})
    assert json.loads(path.read_text())["ch99.live"]["values"] == {"ms": 2.5}
    with pytest.raises(TypeError, match="dict of numbers or a BenchResult"):
        recorded.measure("ch99.bad", lambda: 3)


def test_missing_ptxas_report_is_said_not_hidden():
    mod = tklab.compile('extern "C" __global__ void k(float* x){ x[0] = 1; }', arch="sm_80")
    k = mod["k"]
    assert k.resources.from_ptxas and "0 B spilled" in k.summary()
    mod.log = ""  # as if the compiler had put no ptxas report in its log
    del mod._ptxas
    k2 = tklab.Kernel(mod, "k", "k")
    assert not k2.resources.from_ptxas and "spills unknown" in k2.summary()
    assert k2.registers == k.registers  # still read from the cubin by cuobjdump



def test_commit_of_a_measurement(monkeypatch):
    """One answer to "which commit is this" for every report: the environment first (a tree copied to a GPU
    machine may carry another commit's .git), else git."""
    monkeypatch.delenv("TKLAB_COMMIT", raising=False)
    monkeypatch.setenv("GIT_COMMIT", "abc1234")
    assert recorded.commit() == "abc1234"
    monkeypatch.setenv("TKLAB_COMMIT", "def5678")
    assert recorded.commit() == "def5678"
