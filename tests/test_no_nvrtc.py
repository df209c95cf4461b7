"""A machine without NVRTC (a Mac: ``nvidia-cuda-nvrtc`` has no macOS wheel), made here by ``TKLAB_NO_NVRTC=1``.

One representative slice, not the whole suite again: a compile says why it cannot and what still works;
the check of a CUDA exercise gets a CPU-emulation verdict that names the skipped static checks (a right
kernel passes with that caveat, the untouched exercise fails); a chapter's ``%%tk`` cell builds for the
emulator and says what needs NVRTC; the doctor names the path and exits 0; and the dependencies that
have no macOS wheel are left out there by their markers.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import stubs

import tklab
from tklab import doctor, gpu, specs
from tklab.grading import cases as emu_cases
from tklab.grading.check import check
from tklab.toolchain import locate

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.skipif(not emu_cases.can_run(specs.get("ch02_smem_tiling")),
                                reason="no C++ compiler for the CPU emulator")

ADD = 'extern "C" __global__ void add_one(float* x, int n) { int i = threadIdx.x; if (i < n) x[i] += 1.0f; }'


@pytest.fixture
def no_nvrtc(monkeypatch: pytest.MonkeyPatch) -> None:
    """This machine as a Mac sees it: no NVRTC and no GPU."""
    monkeypatch.setenv(locate.NO_NVRTC, "1")
    monkeypatch.setattr(gpu, "available", lambda: False)


def test_a_compile_says_nvrtc_is_missing_and_what_still_works(no_nvrtc: None) -> None:
    with pytest.raises(locate.NvrtcUnavailable) as e:
        tklab.compile(ADD, arch="sm_80")
    text = str(e.value)
    assert "compiling for the GPU needs NVRTC" in text and "CPU emulator still checks your kernel" in text
    assert e.value._render_traceback_() == [f"NVRTC unavailable: {text}"]  # one line in a notebook, no frames
    assert not locate.nvrtc_available()
    mod = tklab.compile(ADD, target="cpu")  # what the message points to works
    x = np.zeros(4, np.float32)
    mod["add_one"]((1,), (4,), (x, 3))
    assert x.tolist() == [1, 1, 1, 0]


def test_on_macos_the_message_says_there_is_no_wheel(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing() -> tuple[int, int]:
        raise locate.ToolchainError("cuda-bindings is not installed")

    monkeypatch.delenv(locate.NO_NVRTC, raising=False)
    monkeypatch.setattr(locate, "_nvrtc_version", missing)
    monkeypatch.setattr(locate.sys, "platform", "darwin")
    assert locate.nvrtc_missing().startswith("compiling for the GPU needs NVRTC, which has no wheel for macOS; "
                                                "the chapters show the outputs recorded on an H200")
    assert "the CPU emulator checks CUDA exercises with the Mac's clang++" in locate.nvrtc_missing()
    assert "tested on Linux only so far" in locate.nvrtc_missing()  # never run on a real Mac: it says so
    with pytest.raises(locate.NvrtcUnavailable, match="no wheel for macOS"):
        locate.fingerprint()
    monkeypatch.setattr(locate.sys, "platform", "linux")
    assert "pip install nvidia-cuda-nvrtc" in locate.nvrtc_missing()


def test_a_check_gets_an_emulation_verdict_that_names_the_skipped_static_checks(no_nvrtc: None, capsys) -> None:
    from tklab.grading.check import main

    assert main([str(ROOT / "solutions" / "ch02_smem_tiling" / "ch02_smem_tiling.cu"), "--no-bench"]) == 0
    out = capsys.readouterr().out
    last = out.strip().splitlines()[-1]
    assert last == ("PASSED on 2 of 3 cases; the rest need a GPU (practice only: without NVRTC the source ran as host "
                    "C++ on this machine, not the program a GPU runs; not a graded verdict; on the CPU emulator; 4 "
                    "static checks skipped: they need NVRTC)"), out
    assert "4 static checks skipped (writes its output, uses shared memory, FMAs from the tiles, no spills" in out
    res = check("ch02", ROOT / "exercises" / "ch02_smem_tiling.cu", bench=False)  # the untouched exercise
    assert res.passed is False and res.run_status == "wrong" and res.established == "cpu-practice"


def test_a_file_that_does_not_compile_shows_the_emulator_s_error_on_its_lines(no_nvrtc: None, tmp_path) -> None:
    bad = tmp_path / "ch02_smem_tiling.cu"
    bad.write_text((ROOT / specs.get("ch02_smem_tiling").solution).read_text().replace("acc", "acc_typo", 1))
    res = check("ch02", bad, bench=False)
    assert res.passed is False and not res.compiled and "ch02_smem_tiling.cu" in res.compile_error


def test_an_emulator_that_cannot_build_here_is_not_blamed_on_the_file(no_nvrtc: None, monkeypatch) -> None:
    """A machine where the emulator itself fails (a platform it was not ported to): the report says so."""
    import tklab.emulate as emu
    from tklab.emulate import build

    def broken(*args, **kwargs):
        raise emu.EmulationCompileError("ld: unknown option: -z defs", "the emulator runtime")

    monkeypatch.setattr(build, "runtime_library", broken)
    res = check("ch02", ROOT / "solutions" / "ch02_smem_tiling" / "ch02_smem_tiling.cu", bench=False)
    assert res.passed is False and "the CPU emulator does not work on this machine" in res.compile_error
    assert "your file is not to blame" in res.compile_error and "unknown option: -z defs" in res.compile_error


def test_chapter_00_tk_cell_builds_for_the_emulator_and_says_what_needs_nvrtc(no_nvrtc: None, capsys) -> None:
    """The real cells of chapter 00 (``%load_ext tklab`` and the vector add), run by IPython."""
    from IPython.core.interactiveshell import InteractiveShell

    cells = [("".join(c["source"])) for c in json.loads((ROOT / "notebooks" / "00_the_machine.ipynb").read_text())
             ["cells"] if c["cell_type"] == "code"]
    tk_cell = next(c for c in cells if c.startswith("%%tk") and "vector_add(" in c)
    shell = InteractiveShell.instance()
    try:
        assert shell.run_cell("%load_ext tklab").success
        assert shell.run_cell(tk_cell).success
        out = capsys.readouterr().out
        assert "note: compiling for the GPU needs NVRTC" in out and "built for the CPU emulator instead" in out
        a, b, c = np.arange(5, dtype=np.float32), np.ones(5, np.float32), np.zeros(5, np.float32)
        shell.user_ns["vector_add"]((1,), (8,), (a, b, c, 5))
        assert c.tolist() == [1, 2, 3, 4, 5]
        sass_cell = next(c for c in cells if "vector_add.sass" in c)  # the chapter's next look: its SASS
        shell.run_cell(sass_cell)
        out = capsys.readouterr().out
        assert "NVRTC unavailable: vector_add.sass is read from what NVRTC compiles: compiling for the GPU needs" in out
        assert "Traceback" not in out
        shell.run_cell("import tklab; tklab.compile('__global__ void k(){}', arch='sm_80')")
        out = capsys.readouterr().out
        assert "NVRTC unavailable: compiling for the GPU needs NVRTC" in out and "Traceback" not in out
    finally:
        InteractiveShell.clear_instance()


def test_the_doctor_names_the_path_and_passes(no_nvrtc: None, monkeypatch, capsys) -> None:
    monkeypatch.setattr(doctor, "_simulator", lambda: "skipped in this test")
    assert doctor.main([]) == 0
    out = capsys.readouterr().out
    assert "[MISS] compiler (NVRTC)  compiling for the GPU needs NVRTC, which TKLAB_NO_NVRTC=1 hides" in out
    assert "This machine's path: CPU without NVRTC" in out
    assert "08 wgmma gemm" in out
    assert "a practice build on the CPU (no NVRTC: not graded) (compile/SASS cells need NVRTC)" in out


def test_the_doctor_on_a_mac_names_its_path_the_emulator_s_clang_and_no_pip_advice(no_nvrtc, monkeypatch,
                                                                                   capsys) -> None:
    """``make doctor`` on a Mac (sys.platform faked: the emulator's own probe is a stand-in, since building it for
    macOS on Linux cannot link): the path is named a Mac's, the emulator's compiler is said, nothing advises
    installing CUDA wheels that do not exist there, and the exit status is 0."""
    import sys

    from tklab.course import doctor as doc
    from tklab.course import where

    clang = "/usr/bin/clang++ (Apple clang version 15.0.0 (clang-1500.3.9.4))"
    monkeypatch.setattr(doc, "_simulator", lambda: "skipped in this test")
    monkeypatch.setattr(doc, "_emulator", lambda: f"{clang}: CUDA kernels run on the CPU (0.1 s for a first kernel)")
    monkeypatch.setattr(where, "_compiler", lambda: clang)
    monkeypatch.setitem(sys.modules, "cupy", None)  # as on a Mac: not installed
    monkeypatch.setattr(sys, "platform", "darwin")
    assert doc.main([]) == 0
    out = capsys.readouterr().out
    assert "This machine's path: CPU without NVRTC, a Mac (no NVIDIA GPU;" in out
    assert f"- CUDA exercises: practised on the CPU emulator's host build (with {clang})" in out
    assert "CPU path (compile, inspect, models, widgets, simulator): without NVRTC on a Mac" in out
    assert "CuPy drives NVIDIA GPUs, which macOS has none of" in out and "pip install cupy" not in out
    assert "08 wgmma gemm" in out
    assert "a practice build on the CPU (no NVRTC: not graded) (compile/SASS cells need NVRTC)" in out
    # without a compiler the Mac is told how to get Apple's
    lines = "\n".join(where.table(where.MachinePath.CPU_ONLY, emulator=False, platform="darwin"))
    assert "xcode-select --install" in lines and "not run here (no working CPU emulator)" in lines
    assert "a Mac" not in "\n".join(where.table(where.MachinePath.CPU_ONLY, platform="linux"))


def test_wheels_without_a_macos_build_are_left_out_there() -> None:
    from packaging.requirements import Requirement

    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = [Requirement(r) for r in [*project["dependencies"], *project["optional-dependencies"]["gpu"]]]
    mac = {"sys_platform": "darwin", "platform_system": "Darwin"}
    on_mac = {r.name for r in reqs if r.marker is None or r.marker.evaluate(mac)}
    on_linux = {r.name for r in reqs if r.marker is None or r.marker.evaluate({"sys_platform": "linux"})}
    linux_only = {"cuda-bindings", "nvidia-cuda-nvrtc", "nvidia-cuda-runtime", "nvidia-cuda-cccl",
                  "nvidia-cuda-nvdisasm", "nvidia-cuda-cuobjdump", "numba-cuda", "cupy-cuda13x"}
    assert not on_mac & linux_only and linux_only <= on_linux
    assert {"numpy", "numba", "cuda-pathfinder", "ipywidgets"} <= on_mac


def test_make_on_a_mac_installs_no_nvidia_wheel(tmp_path: Path) -> None:
    """``make lab``/``make test``'s install step as a Mac runs it (``uname -s`` answers Darwin): the workbook and
    its dev extras only, no CuPy or numba-cuda (no macOS wheels), and none of the extras names a CUDA wheel."""
    import shutil
    import subprocess

    from packaging.requirements import Requirement

    if shutil.which("make") is None:
        pytest.skip("needs make")
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "uname").write_text("#!/bin/sh\necho Darwin\n")
    (fake / "uname").chmod(0o755)
    venv = tmp_path / "venv"
    env = {"PATH": f"{fake}:/usr/bin:/bin", "HOME": str(tmp_path)}

    def planned(path_env: dict[str, str]) -> str:
        return subprocess.run(["make", "-n", "-B", f"{venv}/.installed", f"VENV={venv}"], cwd=ROOT, env=path_env,
                              capture_output=True, text=True, check=True).stdout

    on_mac = planned(env)
    install = next(ln for ln in on_mac.splitlines() if "-e '.[dev]'" in ln)
    assert install.rstrip().endswith("-e '.[dev]'"), install  # nothing after it: no GPU packages
    assert "cupy" not in on_mac and "numba-cuda" not in on_mac and "nvidia" not in on_mac
    on_linux = planned({"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    if subprocess.run(["uname", "-s"], capture_output=True, text=True).stdout.strip() == "Linux":
        assert "cupy-cuda13x" in on_linux  # (the fake is what made the difference)
    tomllib = pytest.importorskip("tomllib")
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    mac = {"sys_platform": "darwin", "platform_system": "Darwin", "extra": ""}
    for name in ("lab", "dev", "classroom"):
        for r in map(Requirement, extras[name]):
            if r.marker is None or r.marker.evaluate(mac):
                assert not r.name.startswith(("nvidia-", "cuda-", "cupy")) and r.name != "numba-cuda", (name, r)


def test_an_unrun_check_without_nvrtc_does_not_claim_static_checks_passed(no_nvrtc: None, tmp_path: Path) -> None:
    """``--no-run`` without NVRTC: the file is built for the emulator only in the sandboxed run, so nothing ran,
    and the verdict says just that (not "static checks passed")."""
    res = check("ch05", stubs.begun_file("ch05_mma", tmp_path), run=False)  # a line written: no "not started"
    assert res.passed is None and not res.static
    assert res.summary.startswith("no static check ran (on the CPU emulator; ") and "skipped" in res.summary
    assert "static checks passed" not in res.summary and "the run was not asked for" in res.summary
