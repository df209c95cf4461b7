"""Every NVIDIA GPU from sm_75 on: what runs on it and what falls back to the CPU emulator, and why.

The GPU is a stand-in (``tklab.run.gpu``'s ``available``/``arch``/``name`` monkeypatched), so each path is
forced on a machine without one: a T4 (sm_75), an A100 (sm_80), an L4 (sm_89), an H100 (sm_90a) and a
Blackwell GPU (sm_100, which lacks wgmma). The real GPU's path is in the ``gpu``-marked test at the end.
"""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest

from tklab import gpu, specs
from tklab.course import where
from tklab.grading import cases as emu_cases
from tklab.grading import emulated
from tklab.grading.modes import choose_mode
from tklab.grading.route import route
from tklab.run.limits import SHARED_OPTIN

ROOT = Path(__file__).resolve().parent.parent
GPUS = {"sm_75": "Tesla T4", "sm_80": "NVIDIA A100", "sm_89": "NVIDIA L4", "sm_90a": "NVIDIA H100",
        "sm_100": "NVIDIA B200"}


#: Opt-in shared memory per block (bytes), from the CUDA programming guide's per-capability table: tklab's own
#: table where it has the arch; the guide's 64 KB for sm_75, and for sm_100 the same as sm_90's.
SHARED = {"sm_75": 64 * 1024, **{a: SHARED_OPTIN[int(a[3:5])] for a in ("sm_80", "sm_89", "sm_90a")},
          "sm_100": SHARED_OPTIN[90]}


def fake_gpu(monkeypatch: pytest.MonkeyPatch, arch: str, nvrtc: bool = True) -> None:
    """A stand-in GPU of ``arch``; ``nvrtc``: with NVRTC as a GPU machine has it (the routes are decisions, so
    this holds on a Mac or under ``TKLAB_NO_NVRTC=1`` too; ``TKLAB_NO_NVRTC`` set later still hides it)."""
    if nvrtc:
        from tklab.toolchain import locate

        monkeypatch.delenv(locate.NO_NVRTC, raising=False)
        monkeypatch.setattr(locate, "_nvrtc_version", lambda: (13, 0))
    cap = gpu.capability(arch)
    props = gpu.Properties(name=GPUS[arch], major=cap // 10, minor=cap % 10, sm_count=40, l2_bytes=4 << 20,
                           max_shared_per_block_optin=SHARED[arch], clock_khz=1_500_000, memory_clock_khz=5_000_000,
                           memory_bus_bits=256)
    monkeypatch.setattr(gpu, "available", lambda: True)
    monkeypatch.setattr(gpu, "arch", lambda: arch)
    monkeypatch.setattr(gpu, "name", lambda: GPUS[arch])
    monkeypatch.setattr(gpu, "properties", lambda: props)


@pytest.mark.parametrize(("arch", "runs", "not_runs"), [
    ("sm_75", ["sm_75"], ["sm_80", "sm_90a"]),
    ("sm_80", ["sm_75", "sm_80"], ["sm_90a", "sm_86"]),
    ("sm_89", ["sm_75", "sm_80", "sm_86", "sm_89"], ["sm_90a", "sm_90"]),
    ("sm_90a", ["sm_75", "sm_80", "sm_90", "sm_90a"], ["sm_100"]),
    ("sm_100", ["sm_75", "sm_80", "sm_90"], ["sm_90a"]),  # sm_90a features exist on sm_90 only
])
def test_which_builds_a_gpu_runs(monkeypatch, arch, runs, not_runs) -> None:
    fake_gpu(monkeypatch, arch)
    assert all(gpu.runs(a) for a in runs)
    for a in not_runs:
        assert not gpu.runs(a) and GPUS[arch] in gpu.why_not(a)


def test_no_gpu_runs_nothing(monkeypatch) -> None:
    monkeypatch.setattr(gpu, "available", lambda: False)
    assert gpu.why_not("sm_75") == "this machine has no NVIDIA GPU"


# (exercise, GPUs it runs on): fp32 everywhere, mma.sync and chapter 09 from sm_80, the Hopper ones on sm_90a
EXPECTED = {
    "ch02_smem_tiling": {"sm_75", "sm_80", "sm_89", "sm_90a", "sm_100"},
    "ch04_swizzle": {"sm_75", "sm_80", "sm_89", "sm_90a", "sm_100"},
    "ch05_mma": {"sm_80", "sm_89", "sm_90a", "sm_100"},
    "ch06_tiles": {"sm_80", "sm_89", "sm_90a", "sm_100"},
    "ch09_flash": {"sm_80", "sm_89", "sm_90a", "sm_100"},
    "ch07_tma_ring": {"sm_90a"},
    "ch08_wgmma": {"sm_90a"},
    "ch10_flash": {"sm_90a"},
}


@pytest.mark.parametrize("arch", list(GPUS))
def test_the_check_routes_each_exercise_by_the_gpu_s_arch_and_says_why(monkeypatch, arch) -> None:
    fake_gpu(monkeypatch, arch)
    for exercise_id, archs in EXPECTED.items():
        spec = specs.get(exercise_id)
        r = route(spec)
        assert r.on_gpu == (arch in archs), (exercise_id, arch)
        if r.on_gpu:
            assert r.static_arch == arch and not r.why
            assert choose_mode(spec, r.on_gpu).name == "gpu"
        else:  # compiled for what it needs (wgmma checked in the SASS even on an A100), run on the emulator
            assert r.static_arch == spec.arch
            assert GPUS[arch] in r.why and f"runs on the CPU emulator instead (it needs {spec.arch})" in r.why
            if emu_cases.can_run(spec):
                assert choose_mode(spec, r.on_gpu).name == "emu"


def test_without_nvrtc_a_gpu_that_could_run_it_still_falls_back_and_says_so(monkeypatch) -> None:
    fake_gpu(monkeypatch, "sm_90a")
    monkeypatch.setenv("TKLAB_NO_NVRTC", "1")
    r = route(specs.get("ch02_smem_tiling"))
    assert not r.on_gpu and "compiling for the GPU needs NVRTC" in r.why and r.nvrtc


def test_chapter_needs_come_from_their_exercises() -> None:
    needs = {c.number: c.needs for c in where.chapters()}
    assert needs["00"] == where.CHAPTER_00_NEEDS
    for exercise_id in specs.all_ids():
        spec = specs.get(exercise_id)
        if spec.language != "python":  # drills run on the CPU: no GPU need
            assert gpu.capability(needs[spec.chapter]) >= gpu.capability(spec.arch)
    assert {n for n, a in needs.items() if a.endswith("a")} == {"07", "08", "10", "11"}
    assert {n for n, a in needs.items() if a == "sm_80"} == {"05", "06", "09"}


@pytest.mark.parametrize(("arch", "path", "on_gpu"), [
    ("sm_75", where.MachinePath.OTHER_GPU, {"00", "01", "02", "03", "04"}),
    ("sm_80", where.MachinePath.OTHER_GPU, {"00", "01", "02", "03", "04", "05", "06", "09"}),
    ("sm_90a", where.MachinePath.HOPPER, {f"{i:02d}" for i in range(12)}),
])
def test_the_doctor_table_says_what_each_chapter_does_on_each_gpu(monkeypatch, arch, path, on_gpu) -> None:
    fake_gpu(monkeypatch, arch)
    assert where.machine_path() is path
    lines = where.table()
    assert lines[0] == f"This machine's path: {path.value} ({GPUS[arch]}, {arch})"
    for ch in where.chapters():
        kernels, timings = where.on_path(ch, path)
        if ch.number in on_gpu:
            assert (kernels, timings) == ("run on this GPU", "measured here"), ch
        else:
            assert kernels == f"exercise its PTX interpreted on the CPU (needs {ch.needs})"
            assert timings == "recorded on an H200"


def test_the_cpu_paths(monkeypatch) -> None:
    monkeypatch.setattr(gpu, "available", lambda: False)
    monkeypatch.delenv("TKLAB_NO_NVRTC", raising=False)
    assert where.machine_path() is where.MachinePath.CPU_NVRTC
    ch08 = next(c for c in where.chapters() if c.number == "08")
    assert where.on_path(ch08, where.MachinePath.CPU_NVRTC)[0] == \
        "compiled and inspected here, its PTX interpreted on the CPU"
    monkeypatch.setenv("TKLAB_NO_NVRTC", "1")
    assert where.machine_path() is where.MachinePath.CPU_ONLY
    # a machine where the emulator does not work either (no C++ compiler): nothing claims it runs
    kernels = where.on_path(ch08, where.MachinePath.CPU_ONLY, emulator=False)[0]
    assert kernels == "not run here (no working CPU emulator) (compile/SASS cells need NVRTC)"


@pytest.mark.nvrtc  # it compiles for sm_80 with NVRTC for real: the static checks run
@pytest.mark.skipif(not emu_cases.can_run(specs.get("ch05_mma")), reason="no C++ compiler for the CPU emulator")
def test_an_mma_exercise_on_a_t4_is_checked_on_the_emulator_and_the_verdict_says_why(monkeypatch, tmp_path) -> None:
    """The whole check on a stand-in T4: compiled for sm_80 by NVRTC (static checks run), run on the emulator;
    a right kernel passes with the reason as its caveat, a planted mistake fails."""
    from tklab.grading.check import check

    fake_gpu(monkeypatch, "sm_75", nvrtc=False)
    src = (ROOT / "solutions" / "ch05_mma" / "ch05_mma.cu").read_text()
    res = check("ch05", ROOT / "solutions" / "ch05_mma" / "ch05_mma.cu", bench=False)
    assert res.arch == "sm_80" and res.static and res.static_ok
    assert res.passed is True and res.established == "cpu-emulation", res
    assert str(res).splitlines()[-1] == ("PASSED (on the CPU emulator: this GPU (Tesla T4, sm_75) is older than the "
                                         "sm_80 it needs)")
    wrong = tmp_path / "ch05_mma.cu"
    wrong.write_text(src.replace("g = lane / 4, t = lane % 4;", "g = lane % 4, t = lane / 4;"))  # layout swapped
    assert src != wrong.read_text()
    bad = check("ch05", wrong, bench=False)
    assert bad.passed is False and bad.run_status == "error" and bad.run_where == emulated.LABEL  # out of bounds


# ---- the chapters' GPU cells (05, 06, 09 need sm_80) -------------------------------------------------------
class LiveRun(Exception):
    """A cell went for the GPU: it touched CuPy, torch or a live measurement (stand-ins raise this)."""


class _Untouchable(types.ModuleType):
    def __getattr__(self, name: str):
        raise LiveRun(f"{self.__name__}.{name}")


def _raise_live(*args, **kwargs):
    raise LiveRun(args[0] if args else "")


#: (chapter notebook, its setup cell, {GPU cell id: the recorded key it shows where the GPU cannot run it})
GATED = [
    ("05_tensor_cores_mma", "c01", {"c20": "ch05.mma_tile", "c31": "ch05.mma_gemm"}),
    ("06_tile_library", "c01", {"c13": "ch06.tiles_demo", "c21": "ch06.gemm_mma_tiles"}),
    ("09_flash_attention", "c730d999", {"73d64ed6": "ch09.flash_tiles", "646a1e17": "ch09.flash_tiles_d128"}),
]


def _cells(stem: str) -> dict[str, str]:
    nb = json.loads((ROOT / "notebooks" / f"{stem}.ipynb").read_text())
    return {c.get("id"): "".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"}


def _run_cell(source: str, ns: dict) -> object:
    """Run a cell as Jupyter does: its last expression is its value."""
    import ast

    tree = ast.parse(source)
    last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    exec(compile(tree, "<cell>", "exec"), ns)  # noqa: S102 - the course's own notebook cells
    return eval(compile(ast.Expression(last.value), "<cell>", "eval"), ns) if last else None  # noqa: S307


@pytest.mark.parametrize(("stem", "setup", "gated"), GATED, ids=[g[0][:2] for g in GATED])
@pytest.mark.parametrize("arch", ["sm_75", "sm_80", "sm_89", "sm_90a"])
def test_sm80_chapters_run_their_gpu_cells_only_where_the_gpu_can(monkeypatch, capsys, stem, setup, gated,
                                                                  arch) -> None:
    """On a stand-in GPU: a T4 shows the H200's recorded result, labelled, and touches no GPU library; an A100,
    L4 or H100 goes for the GPU in every one of these cells (CuPy, torch and live measurements are stand-ins
    that stop it at the first touch)."""
    from tklab import attention, course, recorded

    fake_gpu(monkeypatch, arch)
    for name in ("cupy", "torch"):
        monkeypatch.setitem(sys.modules, name, _Untouchable(name))
    monkeypatch.setattr(recorded, "measure", _raise_live)
    monkeypatch.setattr(course, "compare", _raise_live)
    monkeypatch.setattr(attention, "compare_sdpa", _raise_live)
    cells = _cells(stem)
    ns: dict = {}
    _run_cell(cells[setup], ns)
    said = capsys.readouterr().out
    can = arch != "sm_75"
    assert ns["RUNS_HERE"] is can
    if "ARCH" in ns:  # what the compile cells target: this GPU where it runs them, the course's target elsewhere
        assert ns["ARCH"] == (arch if can else "sm_90a")
    if not can:
        assert "this GPU (Tesla T4, sm_75) is older than the sm_80 it needs" in said
        assert "show the results recorded on an H200" in said
    for cell_id, key in gated.items():
        if can:
            with pytest.raises(LiveRun):
                _run_cell(cells[cell_id], ns)
            continue
        shown = _run_cell(cells[cell_id], ns)
        if cell_id == "646a1e17":  # a table of four comparisons: the first one's record
            shown = ns["rows"][0][2]
        if cell_id == "73d64ed6":  # a profile: the one recorded on the H200, loaded (never run)
            assert ns["prof"].key == key and "H200" in ns["prof"].device, ns["prof"]
            continue
        assert isinstance(shown, recorded.Recorded) and shown.key == key and not shown.live, shown
        assert shown.values and "H200" in shown.device, shown  # the recorded result, labelled with its GPU


@pytest.mark.gpu
def test_on_this_gpu_each_exercise_goes_where_its_arch_allows() -> None:
    """On the lead's GPU machine: the real arch, the real route (no stand-in)."""
    for exercise_id in EXPECTED:
        spec = specs.get(exercise_id)
        assert route(spec).on_gpu == gpu.runs(spec.arch)
    hopper = gpu.runs("sm_90a")
    assert where.machine_path() is (where.MachinePath.HOPPER if hopper else where.MachinePath.OTHER_GPU)
    path = where.machine_path().value
    assert where.table()[0].startswith(f"This machine's path: {path} ({gpu.name()}, {gpu.arch()})")
