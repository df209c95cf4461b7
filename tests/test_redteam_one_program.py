"""Red team of issue 37 ("one program, judged where learner code cannot reach"): one test per class of attack that
forged PASSED while the CPU verdict ran a second, native program (the learner's source built by g++ and loaded into
the checking child). The graded CPU path now interprets the PTX NVRTC built (numba's, for chapter 01): these fail
with a verdict that says why, and nothing of the learner's runs natively where outputs are produced.

Classes: native code escaping the emulated kernel; a macro that gives two compilers two programs; the emulator's
second opinion switched off; a numba kernel walking frames to ``__import__``; tensor-core code that the static
checks see but that never runs; a right answer from a plain loop beside a product whose result is unused.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pytest
from answers import answer

from tklab import emulate, gpu, specs
from tklab.grading import cases as emu_cases
from tklab.grading import program
from tklab.grading.check import check
from tklab.grading.runner import run_isolated

ROOT = Path(__file__).resolve().parent.parent
CH01 = (ROOT / "solutions" / "ch01_naive_matmul" / "ch01_naive_matmul.py").read_text()
CH02 = (ROOT / "solutions" / "ch02_smem_tiling" / "ch02_smem_tiling.cu").read_text()
CH05 = (ROOT / "solutions" / "ch05_mma" / "ch05_mma.cu").read_text()
cpu_path = pytest.mark.skipif(gpu.available() or emulate.engine() != "ptx" or
                              not emu_cases.can_run(specs.get("ch02_smem_tiling")),
                              reason="a GPU is here (checks run on it), or no NVRTC / C++ compiler for the interpreter")


def _file(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(text)
    return folder / name


def _edit(src: str, find: str, replace: str) -> str:
    assert src.count(find) == 1, find
    return src.replace(find, replace)


# ---- 1. native code escaping the emulated kernel -----------------------------------------------------------------
@cpu_path
def test_an_interpreted_kernel_reaches_no_memory_it_was_not_given() -> None:
    """Natively, a kernel is host code: it can write any address of its process (the red team walked from libc to
    the harness's Python and rewrote the outputs). Interpreted, every address is checked against the kernel's own
    regions: a host address passed as a number, a forged tensor map, a pointer past the shared window and a local
    array overrun are all refused, and the host memory they aimed at is untouched."""
    src = textwrap.dedent(r"""
    #include "tk/hopper/tensor_map.cuh"
    extern "C" __global__ void poke(float* out, unsigned long long host, int how) {
      __shared__ alignas(128) unsigned long long fake[16];
      __shared__ alignas(8) unsigned long long bar;
      if (how == 0) *reinterpret_cast<float*>(host) = 42.0f;                    // a host address, as a number
      if (how == 1) {                                                           // past the shared window
        char* p = reinterpret_cast<char*>(__cvta_shared_to_generic(0)) + (300 << 10);
        *reinterpret_cast<float*>(p) = 42.0f;
      }
      if (how == 2 && threadIdx.x == 0) {                                       // a tensor map of its own making
        for (int i = 0; i < 16; ++i) fake[i] = 0;
        fake[0] = 0x414d54554d454b54ull;                                        // "TKEMUTMA"
        fake[1] = host;                                                         // the tensor at a host address
        fake[2] = 64; fake[3] = 1; fake[7] = 256;                               // 64 x 1 floats
        reinterpret_cast<unsigned*>(fake)[22] = 64; reinterpret_cast<unsigned*>(fake)[23] = 1;  // the box
        reinterpret_cast<unsigned char*>(fake)[108] = 2; reinterpret_cast<unsigned char*>(fake)[109] = 4;
        reinterpret_cast<unsigned char*>(fake)[111] = 7;                      // rank 2, 4-byte float elements
        const unsigned b = unsigned(__cvta_generic_to_shared(&bar));
        const unsigned dst = unsigned(__cvta_generic_to_shared(fake)) ;
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(b));
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], 256;" :: "r"(b));
        asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
                     " [%0], [%1, {%2, %3}], [%4];" :: "r"(dst), "l"(fake), "r"(0), "r"(0), "r"(b) : "memory");
        unsigned done = 0;
        while (!done)
          asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0;"
                       " selp.u32 %0, 1, 0, p; }" : "=r"(done) : "r"(b));
        out[0] = reinterpret_cast<float*>(fake)[0];
      }
      if (how == 3) {                                                           // a local array overrun
        volatile float local[4];
        for (int i = 0; i < 4; ++i) local[i] = float(i);
        out[0] = local[int(host & 0xffff)];
      }
    }""")
    mod = emulate.compile(src, arch="sm_90a", name="poke.cu")
    victim = np.zeros(64, np.float32)  # host memory the kernel was not given
    out = np.zeros(1, np.float32)
    for how in range(4):
        host = victim.ctypes.data if how != 3 else 1000
        with pytest.raises(emulate.EmulationError) as e:
            mod["poke"](1, 32, (out, np.uint64(host), np.int32(how)))
        assert e.value.report.get("kind") in ("out_of_bounds", "invalid_address"), (how, e.value)
        assert "poke.cu:" in str(e.value), (how, str(e.value))
        assert not victim.any(), f"attempt {how} changed host memory it was not given"


# ---- 2. two compilers, two programs ------------------------------------------------------------------------------
@cpu_path
def test_a_macro_cannot_give_the_judge_another_program(tmp_path: Path) -> None:
    """A file that branched on ``__x86_64__`` gave NVRTC a wrong kernel and g++ a right one, and passed. One
    compiler builds the one program now, and a directive the template lacks is refused by line."""
    split = _edit(CH02, "    if (row < M && col < N) C[row * N + col] = acc;",
                  "#if !defined(__x86_64__)\n    if (row < M && col < N) C[row * N + col] = acc + 1.0f;\n#else\n"
                  "    if (row < M && col < N) C[row * N + col] = acc;\n#endif")
    res = check("ch02", _file(tmp_path, "ch02_smem_tiling.cu", split), bench=False)
    assert res.passed is False, res
    assert "#if !defined(__x86_64__)" in res.compile_error and "template does not have" in res.compile_error


# ---- 3. the second opinion switched off --------------------------------------------------------------------------
@cpu_path
def test_the_emulators_second_opinion_cannot_be_switched_off(tmp_path: Path) -> None:
    """Beside a GPU run the emulator looks for races the GPU's timing hid. Natively, host code in the file (a
    constructor) could reach the runtime and turn the hazard into "ok". NVRTC compiles no host code at all (a
    file with some does not compile), and the interpreter runs only the device code it built: the race of a kernel
    without its second __syncthreads is reported."""
    from tklab.toolchain.compiler import CompileError
    from tklab.toolchain.compiler import compile as nvrtc_compile

    payload = "__attribute__((constructor)) static void quiet() { }\n"
    second = "        __syncthreads();  // everyone is done with these tiles before the next step overwrites them\n"
    racy = _edit(CH02, second, "")
    with pytest.raises(CompileError, match="host functions are not allowed"):
        nvrtc_compile(payload + racy, arch="sm_90a", name="ch02_smem_tiling.cu")
    f = _file(tmp_path, "ch02_smem_tiling.cu", racy)
    spec = specs.get("ch02_smem_tiling")
    ptx = program.ptx_for(spec, f.read_text(), f.name)
    assert ptx is not None
    out = run_isolated(spec.id, f, mode="hazards", timeout=120.0, source=f.read_text(), ptx=ptx)
    assert out.status == "error" and "race" in out.message, out


# ---- 4. a numba kernel walking frames ----------------------------------------------------------------------------
@pytest.mark.skipif(gpu.available(), reason="on a GPU, numba kernels run on it")
def test_a_numba_kernel_cannot_walk_frames_to_the_harness(tmp_path: Path) -> None:
    """In numba's simulator a kernel is Python in the child that sends the outputs: a generator's frame led to
    __import__ and numpy wrote the right C without the kernel computing it. Compiled to PTX, the kernel is
    what numba can compile; the frame walk is not, and the check fails without running it."""
    from tklab.grading import numba_ptx

    if not numba_ptx.available():
        pytest.skip("numba cannot compile to PTX here (no NVVM)")
    hostile = textwrap.dedent("""
    import numpy as np
    from numba import cuda


    @cuda.jit
    def matmul(A, B, C):
        imp = (0 for _ in ()).gi_frame.f_builtins["__imp" "ort__"]
        C[:, :] = imp("numpy").dot(A, B)
    """)
    res = check("ch01", _file(tmp_path, "ch01_naive_matmul.py", hostile), bench=False)
    assert res.passed is False and res.established != "cpu-emulation", res


# ---- 5 and 6. what executed, not what the code contains ----------------------------------------------------------
_NAIVE = """
    for (int e = lane; e < 256; e += 32) {  // the plain loop: C[r][c] = sum_k A[r][k] B[k][c]
        float s = 0.0f;
        for (int k = 0; k < 16; ++k)
            s += __uint_as_float(unsigned(A[(e / 16) * 16 + k]) << 16) *
                 __uint_as_float(unsigned(B[k * 16 + e % 16]) << 16);
        C[e] = s;
    }
"""
_COL = answer("ch05_mma", "const int col")  # the store loop's first line: ch05's answer, read from its solution
_STORE = CH05[CH05.rindex("    for (", 0, CH05.index(_COL)):CH05.index("\n    }", CH05.index(_COL)) + len("\n    }")]


@cpu_path
@pytest.mark.parametrize("variant", ["dead_mma", "unused_mma"])
def test_tensor_core_code_must_do_the_work(tmp_path: Path, variant: str) -> None:
    """ch05's static checks find the HMMA instructions in the SASS; the interpreter counts what executed. Products
    in a branch that never runs, or products whose result is thrown away beside a plain loop that computes C, give
    the right answer and the right SASS, and fail the floor "the tensor cores did the work"."""
    mma = "    for (int h = 0; h < 2; ++h) {\n        asm volatile("
    if variant == "dead_mma":
        src = _edit(CH05, mma, "    if (A == B) for (int h = 0; h < 2; ++h) {\n        asm volatile(")
        src = _edit(src, _STORE, "    if (A == B) {\n" + _STORE + "\n    }\n" + _NAIVE)
    else:
        unused = "    if (c[0][0] + c[1][0] == 12345.0f) C[0] = 0.0f;  // the products' result, unused\n"
        src = _edit(CH05, _STORE, unused + _NAIVE)
    res = check("ch05", _file(tmp_path, "ch05_mma.cu", src), bench=False)
    assert res.static_ok and res.run_status == "ok", res  # the SASS and the answer are right
    floor = next(f for f in res.floors if f.name == "the tensor cores did the work")
    assert not floor.ok and res.passed is False, res
    assert ("never executed" if variant == "dead_mma" else "scalar multiply-adds") in floor.detail, floor
