"""Red team (issue 24): each attack a hostile student tried against ``check``/``grade``, one test each.

Every attack must be refused with a message that says what was refused, the verdict stays what the
kernel deserves (a wrong kernel FAILED), and nothing is lost or poisoned: the checking process never
builds or loads learner code, the shared compile cache gets nothing from a learner's run, included files
outside the tile library and the learner's folder are never read. GPU parts (timing) are marked ``gpu``.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from pathlib import Path

import numpy as np
import pytest

from tklab import gpu, specs
from tklab.grading import cases as emu_cases
from tklab.grading import channel, hygiene
from tklab.grading.check import check
from tklab.grading.runner import run_isolated
from tklab.toolchain import includes

ROOT = Path(__file__).resolve().parent.parent
#: The time limit of a run where the limit is not what a test tests: far above a run of chapter 01 (seconds),
#: so a loaded 2-core machine does not miss it; a test of the limit itself sets its own.
RUN_SECONDS = 120
CH01 = (ROOT / "solutions" / "ch01_naive_matmul" / "ch01_naive_matmul.py").read_text()
SOLUTION_CH02 = ROOT / "solutions" / "ch02_smem_tiling" / "ch02_smem_tiling.cu"
CH02 = SOLUTION_CH02.read_text()
CH02_WRONG = CH02.replace("C[row * N + col] = acc;", "C[row * N + col] = acc + 1.0f;")
assert CH02_WRONG != CH02
emu = pytest.mark.skipif(gpu.available() or not emu_cases.can_run(specs.get("ch02_smem_tiling")),
                         reason="a GPU is here (CUDA checks run on it), or no C++ compiler for the emulator")


@pytest.fixture(params=["process", "bubblewrap"])
def level(request, monkeypatch):
    """Each run-based attack at both sandbox levels (the one this machine lacks is skipped)."""
    from tklab.grading import sandbox

    monkeypatch.setenv("TKLAB_SANDBOX", request.param)
    if sandbox.isolation().level != request.param:
        pytest.skip(f"no {request.param} here: {sandbox.isolation().describe()}")
    return request.param


def _file(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(text)
    return folder / name


@pytest.fixture(scope="module")
def own_cache(tmp_path_factory):
    """A private shared cache for these tests (the emulator's runtime built once): what it holds after a
    learner's check is inspected."""
    d = tmp_path_factory.mktemp("shared-cache")
    saved = os.environ.get("TKLAB_CACHE_DIR")
    os.environ["TKLAB_CACHE_DIR"] = str(d)
    yield d
    if saved is None:
        os.environ.pop("TKLAB_CACHE_DIR", None)
    else:
        os.environ["TKLAB_CACHE_DIR"] = saved


def _no_learner_builds_here(monkeypatch) -> list[str]:
    """Make any build or load of emulated learner code in this (checking) process fail loudly."""
    from tklab.emulate import build as emu_build
    from tklab.emulate import module as emu_module

    calls: list[str] = []

    def refuse(*a, **k):
        calls.append("build")
        raise AssertionError("the checking process built learner code")

    monkeypatch.setattr(emu_build, "build", refuse)
    real = emu_module.EmuModule.__init__

    def refuse_load(self, *a, **k):
        calls.append("load")
        raise AssertionError("the checking process loaded learner code")

    monkeypatch.setattr(emu_module.EmuModule, "__init__", refuse_load)
    assert real is not refuse_load
    return calls


CONSTRUCTOR = """\
#ifdef __TKEMU__
extern "C" long write(int, const void*, unsigned long);
__attribute__((constructor)) static void as_the_grader() {
    for (int fd = 3; fd < 64; ++fd) write(fd, "PASSED", 6);
}
#endif
"""

QUIET_CONSTRUCTOR = """\
#ifdef __TKEMU__
static int touched = 0;
__attribute__((constructor)) static void quietly() { touched = 1; }
#endif
"""


# ---- the emulator: learner host code only in the sandboxed child ----------------------------------------

@emu
def test_a_constructor_in_emulated_code_never_runs_in_the_checker(tmp_path, own_cache, monkeypatch):
    """The graded path interprets the PTX NVRTC built: host code (a constructor) is in no program that runs, and
    the wrong kernel beside it fails."""
    calls = _no_learner_builds_here(monkeypatch)
    wrong = check("ch02", _file(tmp_path, "ch02_smem_tiling.cu", QUIET_CONSTRUCTOR + CH02_WRONG), bench=False)
    assert calls == [], "the checking process built or loaded the learner's module"
    assert wrong.passed is False and wrong.established in ("cpu-emulation", "not-established"), wrong
    refused = check("ch02", _file(tmp_path / "b", "ch02_smem_tiling.cu", CONSTRUCTOR + CH02_WRONG), bench=False)
    assert refused.passed is False, refused


@emu
def test_the_practice_build_refuses_a_module_that_calls_the_system(tmp_path, own_cache, monkeypatch):
    """Without NVRTC the source runs natively (practice only): a module calling anything but maths and memory is
    refused in the sandboxed child before it loads."""
    monkeypatch.setenv("TKLAB_EMU_ENGINE", "native")
    refused = check("ch02", _file(tmp_path / "b", "ch02_smem_tiling.cu", CONSTRUCTOR + CH02_WRONG), bench=False)
    assert refused.passed is False and refused.established in ("cpu-practice", "not-established"), refused
    if refused.run_status == "error":
        assert "the code calls write" in refused.run_message and "no files, processes or threads" in \
            refused.run_message


@emu
def test_a_learners_check_leaves_nothing_in_the_shared_cache(tmp_path, own_cache, level):
    attack = CONSTRUCTOR + CH02  # a right kernel whose module, once cached, would stand for the exercise
    check("ch02", _file(tmp_path, "ch02_smem_tiling.cu", attack), bench=False)
    modules = [p for p in own_cache.glob("*/emulate-*")]
    assert modules == [], f"a learner's run wrote emulated modules into the shared cache: {modules}"
    later = check("ch02", ROOT / "exercises" / "ch02_smem_tiling.cu", bench=False)  # the instructor's own check
    assert later.passed is False and later.run_status == "wrong", later


# ---- includes: the tile library, CUDA's headers and the learner's own folder only ---------------------

@pytest.mark.parametrize("include, why", [
    ('"/dev/zero"', "absolute path"),
    ('"{solutions}/ch02_smem_tiling/ch02_smem_tiling.cu"', "absolute path"),
    ('"../../solutions/ch02_smem_tiling/ch02_smem_tiling.cu"', "'..' leaves the allowed folders"),
    ('<../secret.h>', "'..' leaves the allowed folders"),
    ('ZERO', "not made by a macro"),
])
def test_includes_outside_are_refused_fast_before_any_compiler(tmp_path, include, why):
    text = f'#define ZERO "/dev/zero"\n#ifdef __TKEMU__\n#include {include}\n#endif\n' + CH02
    f = _file(tmp_path, "ch02_smem_tiling.cu", text.replace("{solutions}", str(ROOT / "solutions")))
    t = time.monotonic()
    res = check("ch02", f, bench=False)
    assert time.monotonic() - t < 10
    assert res.passed is False and not res.compiled and "refused" in res.compile_error and why in res.compile_error
    assert ":3: error:" in res.compile_error  # the learner's own line


@emu
def test_the_emulators_run_refuses_the_same_includes_on_its_own(tmp_path, own_cache):
    """Without check's static stage (the runner called directly), the child refuses before g++ reads it."""
    f = _file(tmp_path, "ch02_smem_tiling.cu",
              f'#ifdef __TKEMU__\n#include "{SOLUTION_CH02}"\n#endif\n' + CH02_WRONG)
    out = run_isolated("ch02_smem_tiling", f, mode="emu", timeout=60)
    assert out.status == "error" and "refused: an absolute path" in out.message, out.message


def test_a_classmates_file_found_through_the_current_folder_is_refused(tmp_path, monkeypatch):
    classmate = _file(tmp_path / "class" / "bob", "answer.cuh", "#define SECRET 1\n")
    monkeypatch.chdir(classmate.parent)  # NVRTC reads a quoted name from the current folder
    mine = _file(tmp_path / "class" / "mallory", "ch02_smem_tiling.cu", '#include "answer.cuh"\n' + CH02)
    res = check("ch02", mine, bench=False, run=False)
    assert res.passed is False and "outside the tile library" in res.compile_error, res


def test_own_folder_and_tile_library_includes_still_work(tmp_path):
    f = _file(tmp_path, "ch02_smem_tiling.cu", '#include "helper.cuh"\n#include <tk.cuh>\n' + CH02)
    _file(tmp_path, "helper.cuh", '#include "tk.cuh"\n#define HELPER 1\n')
    includes.refuse_outside(f.read_text(), f.name, own_dir=tmp_path, allowed=[ROOT / "cuda"],
                            search=[tmp_path, ROOT / "cuda"])  # no exception
    _file(tmp_path, "helper.cuh", '#include "/etc/passwd"\n')
    with pytest.raises(includes.IncludeRefused, match="helper.cuh:1: error"):
        includes.refuse_outside(f.read_text(), f.name, own_dir=tmp_path, allowed=[ROOT / "cuda"], search=[tmp_path])


def test_every_included_file_is_part_of_the_cache_key(tmp_path, monkeypatch):
    from tklab.toolchain import cache

    monkeypatch.chdir(tmp_path)
    (tmp_path / "part.cuh").write_text("#define X 1\n")
    args = dict(source='#include "part.cuh"\n', options=[], arch="sm_90a", header_dirs=[ROOT / "cuda"], toolchain="t")
    before = cache.key(**args)
    (tmp_path / "part.cuh").write_text("#define X 2\n")
    cache._file_digests.clear()
    assert cache.key(**args) != before


@emu
def test_the_emulators_compiler_is_time_and_memory_limited(tmp_path, monkeypatch, own_cache):
    """``#include "/dev/zero"`` reaching g++ (check refuses it before; this is the compiler's own fence):
    stopped by the time limit or the 4 GiB address-space limit, whichever comes first."""
    from tklab.emulate import build as emu_build

    monkeypatch.setenv("TKLAB_EMU_COMPILE_SECONDS", "2")
    t = time.monotonic()
    with pytest.raises(emu_build.EmulationCompileError, match="longer than 2 s|out of memory"):
        emu_build.build('#define Z "/dev/zero"\n#include Z\n', name="zero.cu")
    assert time.monotonic() - t < 15


# ---- Python files: kernels, not a harness of their own ------------------------------------------------

PIPE_FORGERY = """\
import os
import numpy as np
A = np.load("case-0-A.npy"); B = np.load("case-0-B.npy")
for fd in range(3, 64):
    try:
        np.save(f"/proc/self/fd/{fd}", A @ B)
    except Exception:
        pass
os._exit(0)
"""


def test_writing_answers_into_the_result_pipe_at_import_fails(tmp_path, level):
    f = _file(tmp_path, "ch01_naive_matmul.py", PIPE_FORGERY + CH01)
    res = check(f, timeout=RUN_SECONDS)
    assert res.passed is False and "may import only numba, numpy and math" in res.compile_error, res
    out = run_isolated("ch01_naive_matmul", f, mode="sim", timeout=RUN_SECONDS)  # the run's own layer, run regardless
    assert out.status in ("error", "crashed") and out.evidence.value == "not-established", out.message


def test_frames_without_the_runs_key_are_refused():
    from tklab.grading.judge import draw_inputs, judge
    from tklab.grading.modes import MODES

    spec = specs.get("ch01_naive_matmul")
    cases = list(spec.sim_cases)[:1]
    inputs = draw_inputs(spec, cases, 1)
    outs = spec.outputs(cases[0])
    right = {n: np.asarray(v).astype(outs[n][1]) for n, v in spec.reference(inputs[0], cases[0]).items()}
    forged = channel.ChildIO(lambda b: sent.append(b), cases, lambda i: inputs[i], key="guess")
    sent: list[bytes] = []
    forged.send("launched", case=0, count=1)
    forged.send_outputs(0, right)
    out = judge(spec, MODES["sim"], cases, inputs, b"".join(sent), key="k" * 32)
    assert out.status == "error" and "without the run's key" in out.message
    sent.clear()
    honest = channel.ChildIO(lambda b: sent.append(b), cases, lambda i: inputs[i], key="k" * 32)
    honest.send_outputs(0, right)  # right answers, but no launch the harness made
    out = judge(spec, MODES["sim"], cases, inputs, b"".join(sent), key="k" * 32)
    assert out.status == "error" and "your kernel was never launched" in out.message
    honest.send("launched", case=0, count=1)
    sent.insert(0, sent.pop())
    assert judge(spec, MODES["sim"], cases, inputs, b"".join(sent), key="k" * 32).status == "ok"


NEVER_LAUNCHED = CH01.replace("@cuda.jit\ndef matmul(A, B, C):", "def matmul(A, B, C):")


def test_a_kernel_that_is_never_launched_fails(tmp_path, level):
    assert NEVER_LAUNCHED != CH01
    f = _file(tmp_path, "ch01_naive_matmul.py", NEVER_LAUNCHED)
    res = check(f, timeout=RUN_SECONDS)
    assert res.passed is False and "without a plain @cuda.jit" in res.compile_error
    out = run_isolated("ch01_naive_matmul", f, mode="sim", timeout=RUN_SECONDS)
    assert out.status == "error" and "never launched" in out.message, out.message


TIMER_PATCH = """\
import tklab.run.bench as timing
timing.bench = lambda fn, **k: type("R", (), {"ms": 1e-6, "flops": None, "bytes": None})()
"""


def test_a_file_that_patches_the_timer_is_refused(tmp_path):
    res = check(_file(tmp_path, "ch01_naive_matmul.py", TIMER_PATCH + CH01), timeout=RUN_SECONDS)
    assert res.passed is False and "imports tklab.run.bench" in res.compile_error


@pytest.mark.parametrize("snippet", ["open('/proc/1/environ').read()", "getattr(np, 'sa' + 've')",
                                     "().__class__.__base__", "np.lib.format"])
def test_python_escape_hatches_are_named(snippet):
    src = "import numpy as np\nfrom numba import cuda\n\n@cuda.jit\ndef matmul(A, B, C):\n    x = " + snippet + "\n"
    assert hygiene.problems(src, "f.py"), snippet
    assert hygiene.problems(CH01, "f.py") == []
    linked = CH01.replace("@cuda.jit", '@cuda.jit(link=["/srv/class/bob/kernel.cu"])')  # a classmate's code
    assert "without a plain @cuda.jit" in hygiene.problems(linked, "f.py")[0]


def _token() -> str:
    return f"41{uuid.uuid4().int % 10**8}.5"


def _daemon(command: str) -> str:
    """Python that leaves a shell running ``command`` in a session of its own (forked twice: a daemon)."""
    return f"""\
import os
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execvp("sh", ["sh", "-c", {command!r}])
    os._exit(0)
os.wait()
"""


def _alive(token: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if token.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                    found.append(int(entry))
            except OSError:
                pass
    return found


def test_a_daemon_cannot_outlive_the_check_or_rewrite_the_sheet(tmp_path, level):
    token = _token()
    sheet = tmp_path / "grades.csv"
    sheet.write_text("student,ch01\nmallory,no\n")
    daemon = _daemon(f"sleep {token}; echo mallory,yes > {sheet}")
    res = check(_file(tmp_path / "m", "ch01_naive_matmul.py", daemon + CH01), timeout=RUN_SECONDS)
    assert res.passed is False and "may import only numba" in res.compile_error
    run_isolated("ch01_naive_matmul", tmp_path / "m" / "ch01_naive_matmul.py", mode="sim", timeout=RUN_SECONDS)
    left = _alive(token)
    for pid in left:
        os.kill(pid, 9)
    assert not left, "the daemon outlived the run"
    assert sheet.read_text() == "student,ch01\nmallory,no\n"


@pytest.mark.parametrize("cgroup", [True, False], ids=["cgroup", "no-cgroup"])
def test_the_runs_processes_are_all_stopped_before_any_is_killed(tmp_path, level, monkeypatch, cgroup):
    """Killed one by one, a shell's ``sleep`` could die first and the shell run its next command (a write to the sheet)
    before its own kill arrived: a fresh-clone CI run saw the test above fail so, at the process level. Every process
    of the run is stopped first, by the cgroup's kill and by the /proc walk's where there is no cgroup (or its
    cgroup.kill ends them at once, and nothing is signalled one by one). bubblewrap's runs end with their PID
    namespace."""
    if level != "process":
        pytest.skip("the bubblewrap level ends a run with its PID namespace")
    if not cgroup:  # the /proc walk's kill (no cgroup here, or refused), not the group's
        monkeypatch.setenv("TKLAB_NO_CGROUP", "1")
    sent: list[tuple[int, int]] = []
    real_kill = os.kill

    def kill(pid: int, sig: int) -> None:
        sent.append((pid, sig))
        real_kill(pid, sig)

    monkeypatch.setattr(os, "kill", kill)
    token = _token()
    daemon = _daemon(f"sleep {token}; echo mallory,yes")
    run_isolated("ch01_naive_matmul", _file(tmp_path / "m", "ch01_naive_matmul.py", daemon + CH01), mode="sim",
                 timeout=RUN_SECONDS)
    killed = [i for i, (_, sig) in enumerate(sent) if sig == signal.SIGKILL]
    assert killed, f"the daemon's shell and sleep were never killed one by one: {sent}"
    first = killed[0]
    assert {pid for pid, sig in sent if sig == signal.SIGKILL} <= \
        {pid for pid, sig in sent[:first] if sig == signal.SIGSTOP}, sent
    assert not _alive(token)


# ---- speed (GPU) ------------------------------------------------------------------------------------

@pytest.mark.gpu
def test_a_kernel_that_remembers_results_gets_no_speed(tmp_path):
    """Skips the work (at the benchmark's size only, so its cases pass) when it has seen A's address before:
    the re-verified timed calls and the fresh-input probe catch it."""
    src = (ROOT / "solutions" / "ch03_register_blocking" / "ch03_register_blocking.cu").read_text()
    body = src.index("{", src.index("__global__")) + 1
    cheat = src[:body] + """
    if (M == 4096) { unsigned long long a = (unsigned long long)(const void*)A; bool seen = false;
      for (int i = 0; i < 4; ++i) seen |= (seen_A[i] == a);
      if (seen) return;
      if (blockIdx.x == gridDim.x - 1 && blockIdx.y == gridDim.y - 1 && threadIdx.x == 0 && threadIdx.y == 0)
          seen_A[atomicAdd(&seen_n, 1u) & 3] = a; }
""" + src[body:]
    cheat = cheat.replace('extern "C" __global__', '__device__ unsigned long long seen_A[4];\n'
                          '__device__ unsigned int seen_n;\nextern "C" __global__', 1)
    f = _file(tmp_path, "ch03_register_blocking.cu", cheat)
    res = check("ch03", f, timeout=300)
    speed = res.speed or {}
    assert "ratio" not in speed and "speed is not reported" in speed.get("error", ""), speed


#: Chapter 3's solution that remembers the inputs it has seen (a fingerprint of a few elements of A and B) and, on
#: a repeat, copies the top half of C from its own memory instead of computing it: right on every call, and twice
#: as fast on the timed loop's rotating sets as on inputs it sees for the first time (issue 39's attack).
MEMO_GLOBALS = """\
__device__ unsigned long long memo_owner[8], memo_key[8];
__device__ unsigned int memo_done[8];
__device__ float memo_C[8][4096 * 4096];
"""
MEMO_HEAD = """
    __shared__ unsigned long long memo_this;  // this launch's key, 0 when it does not remember (kept off registers)
    __shared__ int memo_slot;
    {
        const bool top = M == 4096 && N == 4096 && K == 4096 && blockIdx.y < gridDim.y / 2;
        unsigned long long key = 0;
        if (top) {
            const unsigned int a = __float_as_uint(A[0]), b = __float_as_uint(A[4095]);
            const unsigned int c = __float_as_uint(A[M * K / 2]);
            const unsigned int d = __float_as_uint(B[0]), e = __float_as_uint(B[K * N - 1]);
            key = ((unsigned long long)(a ^ (c << 7)) << 32 | (b ^ (d << 3) ^ (e << 11))) | 1ull;
        }
        const size_t corner = (size_t)blockIdx.y * BM * N + blockIdx.x * BN;
        int seen = -1;
        for (int s = 0; s < 8 && top; ++s)
            if (memo_key[s] == key)
                seen = s;
        if (seen >= 0) {  // seen: copy this tile of C from memory
            for (int i = threadIdx.x; i < BM * BN; i += THREADS)
                C[corner + (i / BN) * N + i % BN] = memo_C[seen][corner + (i / BN) * N + i % BN];
            return;
        }
        if (threadIdx.x == 0) {  // a slot for this key: its own, or a free one
            int slot = -1;
            for (int s = 0; s < 8 && top && slot < 0; ++s) {
                const unsigned long long old = atomicCAS(&memo_owner[s], 0ull, key);
                if (old == 0ull || old == key)
                    slot = s;
            }
            memo_slot = slot;
            memo_this = slot >= 0 ? key : 0ull;
        }
    }
"""
MEMO_TAIL = """
    __syncthreads();
    if (memo_this) {  // remember this tile; the last block of the top half makes the key valid
        const int slot = memo_slot;
        const size_t corner = (size_t)blockIdx.y * BM * N + blockIdx.x * BN;
        for (int i = threadIdx.x; i < BM * BN; i += THREADS)
            memo_C[slot][corner + (i / BN) * N + i % BN] = C[(i / BN) * N + i % BN];
        __threadfence();
        __syncthreads();
        if (threadIdx.x == 0 && atomicAdd(&memo_done[slot], 1u) + 1 == gridDim.x * (gridDim.y / 2))
            memo_key[slot] = memo_this;
    }
"""


def _memo_variant() -> str:
    src = (ROOT / "solutions" / "ch03_register_blocking" / "ch03_register_blocking.cu").read_text()
    body = src.index("{", src.index("regblock_matmul(")) + 1
    end = src.rindex("}")
    out = src[:body] + MEMO_HEAD + src[body:end] + MEMO_TAIL + src[end:]
    return out.replace('extern "C" __global__', MEMO_GLOBALS + 'extern "C" __global__', 1)


@pytest.mark.nvrtc
def test_the_input_memo_variant_compiles_and_keeps_its_directives(tmp_path):
    """The GPU test below needs the variant to be a file a check accepts: it compiles, adds no directive."""
    res = check("ch03", _file(tmp_path, "ch03_register_blocking.cu", _memo_variant()), run=False)
    assert res.compiled and res.static_ok, res


@pytest.mark.gpu
def test_a_kernel_that_remembers_inputs_and_skips_half_its_work_gets_no_speed(tmp_path):
    """Issue 39: right on every call, half the work skipped on inputs it has seen. The timed loop rotates three
    sets (all seen); the probe times each fresh set's first sight as the loop times its calls; 2x apart is far
    past ``child.PROBE_FACTOR`` (1.25), so its speed is not reported. (With the factor at 2.0 it sat on the edge.)
    Run on an H200: ``python -m pytest -m gpu tests/test_redteam_isolation.py -k remembers_inputs -v``."""
    res = check("ch03", _file(tmp_path, "ch03_register_blocking.cu", _memo_variant()), timeout=300)
    assert res.run_status == "ok", res  # right on every case: the memo only acts at the benchmark's size
    speed = res.speed or {}
    assert "ratio" not in speed and "skips work on inputs it has seen" in speed.get("error", ""), speed


@pytest.mark.gpu
def test_patching_the_timer_inside_the_run_does_not_change_the_ratio(tmp_path):
    f = _file(tmp_path, "ch01_naive_matmul.py", TIMER_PATCH + CH01)
    out = run_isolated("ch01_naive_matmul", f, mode="gpu", timeout=300, bench=True)
    speed = (out.result or {}).get("speed") or {}
    assert out.status == "ok" and speed.get("ms", 0) > 1e-3, (out.message, speed)
    assert np.isfinite(speed.get("ratio", np.nan)) and speed["ratio"] < 10


# ---- what the isolation holds, and Ctrl-C ---------------------------------------------------------------

def test_grading_says_when_learner_code_would_reach_the_grader(monkeypatch):
    from tklab.grading import sandbox

    monkeypatch.setattr(sandbox, "_run_user", lambda: (None, "root (uid 0)", ("nobody cannot read this Python",)))
    monkeypatch.setattr(sandbox.os, "getuid", lambda: 0)
    monkeypatch.setattr(sandbox, "_drop_inside", lambda: None)  # no user to drop to
    assert "would run as root" in sandbox.grading_problem()
    monkeypatch.setattr(sandbox, "_drop_inside", lambda: (65534, 65534))  # dropped inside bubblewrap: holds
    monkeypatch.setattr(sandbox, "isolation", lambda gpu=False: sandbox.Isolation("bubblewrap", "nobody"))
    assert sandbox.grading_problem() is None
    monkeypatch.undo()
    monkeypatch.setattr(sandbox, "_run_user", lambda: (None, "root (uid 0)", ("nobody cannot read this Python",)))
    monkeypatch.setattr(sandbox, "_drop_inside", lambda: None)
    monkeypatch.setattr(sandbox.os, "getuid", lambda: 1000)
    monkeypatch.setattr(sandbox, "_bwrap_works", lambda: None)
    assert "no bubblewrap here" in sandbox.grading_problem()
    monkeypatch.setattr(sandbox, "_run_user", lambda: ((65534, 65534), "nobody (uid 65534)", ()))
    assert sandbox.grading_problem() is None


def test_ctrl_c_during_a_check_leaves_no_process_behind(tmp_path, level, monkeypatch):
    from tklab.grading import sandbox

    token = _token()
    f = _file(tmp_path, "ch01_naive_matmul.py", f"""\
import subprocess
subprocess.Popen(["sleep", "{token}"], start_new_session=True)
while True:
    pass
""" + CH01)
    real = sandbox.Sandbox.supervise

    def interrupted(self, readers, **k):
        deadline = time.monotonic() + 20
        while not _alive(token) and time.monotonic() < deadline:
            time.sleep(0.1)
        self._seen.update(sandbox._run_processes(self.proc.pid, self.token.encode()))
        raise KeyboardInterrupt

    monkeypatch.setattr(sandbox.Sandbox, "supervise", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_isolated("ch01_naive_matmul", f, mode="sim", timeout=60)
    left = _alive(token)
    for pid in left:
        os.kill(pid, 9)
    assert real is not interrupted and not left, "a process of the interrupted run survived"


def test_a_daemon_with_a_cleared_environment_dies_with_the_run_without_a_sandbox(tmp_path, monkeypatch):
    """The process level's hole: double fork, setsid, no environment (so no token). A checking process that
    adopts orphans (as ``python -m tklab.grading.check``, which grade runs, does) gets it back and kills it."""
    from tklab.grading import sandbox

    monkeypatch.setenv("TKLAB_SANDBOX", "process")
    token = _token()
    daemon = f"""\
import os
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execve("/bin/sleep", ["sleep", "{token}"], {{}})
    os._exit(0)
os.wait()
"""
    f = _file(tmp_path, "ch01_naive_matmul.py", daemon + CH01)
    assert sandbox.adopt_orphans(), "this Linux has no child subreaper"
    try:
        out = run_isolated("ch01_naive_matmul", f, mode="sim", timeout=RUN_SECONDS)
    finally:
        sandbox.adopt_orphans(False)
    left = _alive(token)
    for pid in left:
        os.kill(pid, 9)
    assert out.status == "ok" and out.isolation.startswith("separate process"), out.message
    assert not left, "the daemon outlived the run"
    assert "stopped" in " ".join(out.notes)


def test_a_root_graders_run_is_unprivileged_outside_the_sandbox_too(tmp_path, level):
    """Run by root, the learner's code is nobody at every level this machine offers it: root-only files
    (``/etc/shadow``) stay unreadable, so their contents cannot come out through an error message."""
    from tklab.grading import sandbox

    if os.getuid() != 0 or not sandbox.isolation().user.startswith("nobody"):
        pytest.skip(f"not a root grader with an unprivileged run here: {sandbox.isolation().user}")
    probe = """\
import os
print("UID", os.getuid(), os.geteuid())
try:
    open("/etc/shadow").read()
    print("READ shadow")
except OSError as e:
    print("DENIED", type(e).__name__)
"""
    out = run_isolated("ch01_naive_matmul", _file(tmp_path, "ch01_naive_matmul.py", probe + CH01), mode="sim",
                       timeout=RUN_SECONDS)
    uid, euid = (int(x) for x in out.output.split("UID", 1)[1].split()[:2])
    assert out.status == "ok" and uid == euid != 0 and "DENIED" in out.output, out.output
    assert f"uid {uid}" in out.isolation, out.isolation  # nobody's, or (issue 39) a uid of the run's own
