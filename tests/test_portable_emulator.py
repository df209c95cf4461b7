"""The emulator on a Mac, proven as far as a Linux box can (we have no Mac).

1. The platform choices are pure functions of the host (``tklab.emulate.hostos``), checked for ``darwin`` and
   ``linux``: link flags, ``nm`` and its leading underscore, the watchdog signal, how memory is limited.
2. clang's instrumentation for a Mac target (``--target=arm64-apple-macos``, Mach-O objects) asks for exactly
   the callbacks the runtime provides, under the names the symbol check reads there.
3. ``TKLAB_EMU_PORTABLE=1`` runs Linux on the Mac's code path (SIGUSR2 watchdog, ``_XOPEN_SOURCE`` build, link by
   path, ``nm -g``, memory watched instead of ``RLIMIT_AS``, clang and libc++ when installed): a watchdog stop and a
   whole emulated check go through it. What stays unproven (Mach-O linking, Apple's ucontext) is in
   docs/ARCHITECTURE.md.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from tklab.emulate import build, hostos, toolchain, watch

ROOT = Path(__file__).resolve().parent.parent
MAC, LINUX, PORTABLE = hostos.Host("darwin"), hostos.Host("linux"), hostos.Host("linux", portable=True)
LIBCXX = hostos.Host("linux", portable=True, libcxx=True)


def test_each_platform_s_flags_signal_and_limits() -> None:
    rt = Path("/c/k/libtkemu-1.so")
    assert hostos.defines(LINUX) == []  # Linux's own build is untouched
    assert hostos.defines(MAC) == ["-D_XOPEN_SOURCE=700", "-D_DARWIN_C_SOURCE", "-DTKEMU_PORTABLE=1",
                                   "-DTKEMU_WATCHDOG_SIGNAL=SIGUSR2"]
    assert hostos.defines(PORTABLE) == ["-D_XOPEN_SOURCE=700", "-DTKEMU_PORTABLE=1", "-DTKEMU_WATCHDOG_SIGNAL=SIGUSR2"]
    assert [hostos.watchdog_signal(h) for h in (LINUX, MAC, PORTABLE)] == ["SIGRTMIN + 7", "SIGUSR2", "SIGUSR2"]
    assert hostos.runtime_link(MAC, "libtkemu-1.so") == ["-dynamiclib", "-Wl,-install_name,@rpath/libtkemu-1.so"]
    assert hostos.runtime_link(LINUX, "libtkemu-1.so") == ["-shared", "-Wl,-soname,libtkemu-1.so"]
    mac_link = hostos.module_link(MAC, rt)
    assert mac_link == ["-dynamiclib", str(rt), "-Wl,-rpath,@loader_path"]
    assert not any("-z" in f or "-l:" in f or "soname" in f or "$ORIGIN" in f for f in mac_link)  # GNU ld only
    assert hostos.module_link(LINUX, rt) == ["-shared", "-L/c/k", "-l:libtkemu-1.so", "-Wl,-rpath,$ORIGIN",
                                             "-Wl,-z,defs"]
    assert hostos.module_link(PORTABLE, rt) == ["-shared", str(rt), "-Wl,-rpath,$ORIGIN", "-Wl,-z,defs"]
    assert hostos.nm_command(MAC, undefined=True) == ["nm", "-g", "--undefined-only"]
    assert hostos.nm_command(LINUX, undefined=False) == ["nm", "-D", "--defined-only"]
    assert [hostos.memory_limit(h) for h in (LINUX, MAC, PORTABLE)] == ["rlimit", "watch", "watch"]
    assert [hostos.prefers_clang(h) for h in (LINUX, MAC, PORTABLE)] == [False, True, True]
    assert hostos.stdlib(LIBCXX, "clang", installed=True) == ["-stdlib=libc++"]  # the Mac's library, where installed
    assert hostos.stdlib(LIBCXX, "clang", installed=False) == hostos.stdlib(LIBCXX, "gcc", installed=True) == []
    assert hostos.stdlib(PORTABLE, "clang", installed=True) == []  # opt-in: it belongs in a process of its own
    assert hostos.stdlib(MAC, "clang", installed=True) == [] == hostos.stdlib(LINUX, "clang", installed=True)


def test_symbol_names_as_each_platform_prints_them() -> None:
    assert hostos.symbol(MAC, "_memcpy") == "memcpy" and hostos.symbol(MAC, "___tsan_read4") == "__tsan_read4"
    assert hostos.symbol(LINUX, "memcpy@GLIBC_2.14") == "memcpy" and hostos.symbol(LINUX, "_Znwm") == "_Znwm"
    assert hostos.symbol(MAC, "__Znwm") == "_Znwm"  # C++ names keep their own underscore
    assert build._allowed(MAC, "_tlv_bootstrap") and not build._allowed(LINUX, "_tlv_bootstrap")
    assert not build._allowed(MAC, "write") and build._allowed(MAC, "sqrtf")


def test_the_current_host_and_the_portable_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TKLAB_EMU_PORTABLE", "1")
    monkeypatch.setattr(hostos.sys, "platform", "linux")
    assert hostos.current() == PORTABLE
    monkeypatch.setenv("TKLAB_EMU_LIBCXX", "1")
    assert hostos.current() == LIBCXX
    monkeypatch.delenv("TKLAB_EMU_LIBCXX")
    monkeypatch.setenv("TKLAB_EMU_PORTABLE", "0")
    assert hostos.current() == LINUX
    monkeypatch.setattr(hostos.sys, "platform", "darwin")
    assert hostos.current() == MAC and hostos.current().mac_path
    assert "xcode-select --install" in toolchain._install_hint("darwin")


def _fake_nm(outputs: dict[str, str]):
    def run(argv, **kwargs):
        assert argv[:2] == ["nm", "-g"], argv  # Mach-O has no -D
        return SimpleNamespace(stdout=outputs[argv[2] + argv[3]], returncode=0)
    return run


def test_the_symbol_check_reads_a_mac_s_nm(monkeypatch: pytest.MonkeyPatch) -> None:
    """``nm -g`` of a Mach-O module and runtime, as a Mac prints them: underscores, no versions."""
    runtime = "0000000000001000 T _tkemu_launch\n0000000000002000 T ___tsan_read4\n0000000000002100 T ___tsan_init\n"
    build._defined.cache_clear()
    ok = "                 U ___tsan_read4\n                 U __tlv_bootstrap\n                 U _sqrtf\n"
    ok += "                 U ___tsan_init\n                 U dyld_stub_binder\n"
    monkeypatch.setattr(build.shutil, "which", lambda name: "/usr/bin/nm")
    monkeypatch.setattr(build.subprocess, "run", _fake_nm({"--undefined-only/m.so": ok,
                                                           "--defined-only/rt.so": runtime}))
    build._check_symbols(Path("/m.so"), Path("/rt.so"), "k.cu", MAC)
    build._defined.cache_clear()
    bad = ok + "                 U _write\n                 U _fork\n"
    monkeypatch.setattr(build.subprocess, "run", _fake_nm({"--undefined-only/m.so": bad,
                                                           "--defined-only/rt.so": runtime}))
    with pytest.raises(build.EmulationCompileError, match="the code calls fork, write"):
        build._check_symbols(Path("/m.so"), Path("/rt.so"), "k.cu", MAC)
    build._defined.cache_clear()


def _llvm_nm() -> str | None:
    return shutil.which("llvm-nm") or next((str(p) for p in sorted(Path("/usr/bin").glob("llvm-nm-*"))), None)


@pytest.mark.skipif(shutil.which("clang++") is None or _llvm_nm() is None, reason="needs clang++ and llvm-nm")
@pytest.mark.parametrize("target", ["arm64-apple-macos13", "x86_64-apple-macos13"])
def test_clang_for_a_mac_asks_for_what_the_runtime_gives(tmp_path: Path, target: str) -> None:
    """A kernel-like function compiled as the emulator compiles modules, for a Mac (a Mach-O object): every
    symbol it needs is one the runtime defines or the Mac allow-list names (thread-locals: ``_tlv_bootstrap``)."""
    src = tmp_path / "k.cpp"
    src.write_text('extern "C" float k(float* x, int i) { thread_local int calls; calls++;\n'
                   '  return __builtin_sqrtf(x[i]) + x[i + 1] * 2.0f + calls; }\n')
    obj = tmp_path / "k.o"
    subprocess.run(["clang++", f"--target={target}", "-std=c++20", "-O1", "-fPIC", "-w", "-fsanitize=thread",
                    "-mllvm", "-tsan-instrument-func-entry-exit=0", "-mllvm", "-tsan-instrument-atomics=0",
                    *hostos.defines(MAC), "-c", str(src), "-o", str(obj)], check=True, capture_output=True)
    assert obj.read_bytes()[:4] in (b"\xcf\xfa\xed\xfe",)  # a 64-bit Mach-O object, as on a Mac
    out = subprocess.run([_llvm_nm(), "-g", "--undefined-only", str(obj)], capture_output=True, text=True,
                         check=True).stdout
    needed = {hostos.symbol(MAC, ln.split()[-1]) for ln in out.splitlines() if ln.split()}
    runtime_src = (ROOT / "tklab/emulate/shim/src/runtime.cpp").read_text()
    runtime_src += (ROOT / "tklab/emulate/shim/src/ptx.cpp").read_text()
    tsan = {n for n in needed if n.startswith("__tsan_")}
    assert "__tsan_read4" in tsan and "_tlv_bootstrap" in needed  # loads instrumented; a thread-local's access
    for name in tsan:  # the runtime defines each (directly or through its macro for every size)
        assert name in runtime_src or name.rstrip("0123456789") in runtime_src, name
    assert all(build._allowed(MAC, n) for n in needed - tsan), needed - tsan


def test_a_compiler_over_its_memory_is_stopped_where_rlimit_is_not_enforced(monkeypatch) -> None:
    """The Mac's way (a watched process tree), here: a child of the watched process allocating 300 MB."""
    hog = ("import subprocess, sys; subprocess.run([sys.executable, '-c', "
           "'import time; b = bytearray(300 << 20); b[::4096] = b\"x\" * len(b[::4096]); time.sleep(20)'])")
    w = watch.run([sys.executable, "-c", hog], seconds=30, memory=150 << 20)
    assert w.over_memory and not w.timed_out and w.peak_bytes > 150 << 20
    monkeypatch.setenv("TKLAB_EMU_PORTABLE", "1")
    monkeypatch.setattr(build, "COMPILE_MEMORY", 150 << 20)
    with pytest.raises(build.EmulationCompileError, match="compiling used more than 0.146484 GB of memory"):
        build._run([sys.executable, "-c", hog], "compiling", "k.cu")
    assert build._run([sys.executable, "-c", "print('fine')"], "compiling", "k.cu") == "fine\n"


# ---- the Mac's code path, run on Linux ---------------------------------------------------------------------

@pytest.fixture(scope="module")
def portable() -> object:
    """TKLAB_EMU_PORTABLE=1 for this module's emulator tests (its own compiler choice; the cache is shared)."""
    mp = pytest.MonkeyPatch()
    mp.setenv("TKLAB_EMU_PORTABLE", "1")
    toolchain.find.cache_clear()
    yield
    mp.undo()
    toolchain.find.cache_clear()


_PORTABLE_RUN = """
import shutil, subprocess
import numpy as np
import pytest
from tklab import emulate as emu
from tklab.emulate import build, hostos, toolchain

cc = toolchain.find()
if shutil.which("clang++"):
    assert cc.family == "clang"  # as on a Mac
    assert build._stdlib(cc, hostos.current()) == []  # libc++ only when asked for (below)
src = 'extern "C" __global__ void k(int* x) {\\n  int i = 0;\\n  while (x[0] == 0) { i++; }\\n  x[1] = i;\\n}\\n'
mod = emu.compile(src, name="spin.cu")
lib = build.runtime_library(cc)
undefined = subprocess.run(["nm", "-D", "--undefined-only", str(lib)], capture_output=True, text=True).stdout
assert "sigaction" in undefined  # (the listing is real) ...
# ... and glibc's SIGRTMIN is a call of __libc_current_sigrtmin, which the default Linux runtime makes
assert "__libc_current_sigrtmin" not in undefined
# clang gives the hoisted loop of the inlined kernel line 0 (addr2line's "?"): the file is named, the line
# only with g++ (tests/test_emulate_bugs.py checks it there)
line = r"(3|\\?)" if cc.family == "clang" else "3"
with pytest.raises(emu.TimeLimit, match=rf"still running at spin\\.cu:{line} when the time limit ran out"):
    mod["k"]((1,), (32,), (np.zeros(2, np.int32),), time_limit=1.0)

# A checkout or reinstall gives the prelude a new mtime, not new content: clang's PCH must still be taken
# (the cache key holds the content), or no kernel would build until the cache is cleared.
import os
emu.compile('extern "C" __global__ void touch_a(int* x) { x[threadIdx.x] = 1; }', name="a.cu")  # (the PCH now)
prelude = build.SHIM / "include" / "tkemu" / "prelude.h"
before = prelude.stat()
try:
    os.utime(prelude, ns=(before.st_atime_ns, before.st_mtime_ns + 5_000_000_000))
    x = np.zeros(1, np.int32)
    emu.compile('extern "C" __global__ void touch_b(int* x) { x[threadIdx.x] = 7; }', name="b.cu")["touch_b"](
        (1,), (1,), (x,))
    assert x.tolist() == [7]
finally:
    os.utime(prelude, ns=(before.st_atime_ns, before.st_mtime_ns))
print("portable ok")
"""


@pytest.mark.skipif(sys.platform != "linux", reason="the portable mode is Linux taking the Mac's path")
def test_portable_mode_builds_with_the_mac_s_choices_its_watchdog_stops_a_loop_and_a_touched_prelude_keeps_its_pch(
) -> None:
    """In a process of its own: a portable runtime loaded here (RTLD_GLOBAL) would serve later tests' modules
    in place of their own runtime (tklab.trace configures the runtime it loaded, so it would read nothing)."""
    import os

    env = {**os.environ, "TKLAB_EMU_PORTABLE": "1", "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", _PORTABLE_RUN], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0 and "portable ok" in out.stdout, out.stdout[-2000:] + out.stderr[-4000:]


@pytest.mark.skipif(sys.platform != "linux", reason="the portable mode is Linux taking the Mac's path")
def test_portable_mode_runs_an_emulated_check_in_the_sandbox(portable, monkeypatch) -> None:
    from tklab import gpu
    from tklab.grading.check import check

    monkeypatch.setenv("TKLAB_NO_NVRTC", "1")  # a Mac has no NVRTC
    monkeypatch.setattr(gpu, "available", lambda: False)
    res = check("ch02", ROOT / "solutions" / "ch02_smem_tiling" / "ch02_smem_tiling.cu", bench=False)
    assert res.passed and res.established == "cpu-practice", res  # no NVRTC: the host build, practice only


_LIBCXX_RUN = """
import numpy as np
from pathlib import Path
from tklab import emulate as emu
from tklab.emulate import build, hostos, toolchain
cc = toolchain.find()
assert build._stdlib(cc, hostos.current()) == ["-stdlib=libc++"], cc
emu.compile(Path("solutions/ch02_smem_tiling/ch02_smem_tiling.cu").read_text(),
            name="ch02_smem_tiling.cu")  # the tile library
mod = emu.compile('extern "C" __global__ void k(long long* t) { t[threadIdx.x] = clock() >= 0; }', name="k.cu")
t = np.zeros(4, np.int64)
mod["k"]((1,), (4,), (t,))
print("ran", t.tolist())
"""


@pytest.mark.skipif(sys.platform != "linux" or shutil.which("clang++") is None, reason="needs Linux and clang++")
def test_with_libcxx_the_tile_library_and_the_prelude_build_as_on_a_mac(tmp_path: Path) -> None:
    """The Mac's C++ library (``TKLAB_EMU_LIBCXX=1``; in a process of its own: see ``hostos.stdlib``): the prelude
    (whose CUDA ``clock()`` once clashed with libc++'s ``<time.h>``) and a tile-library kernel build and run."""
    probe = subprocess.run(["clang++", "-stdlib=libc++", "-std=c++20", "-x", "c++", "-fsyntax-only", "-"],
                           input="#include <thread>\n", capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip("needs libc++ (Debian: libc++-dev libc++abi-dev)")
    import os

    env = {**os.environ, "TKLAB_EMU_PORTABLE": "1", "TKLAB_EMU_LIBCXX": "1", "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", _LIBCXX_RUN], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0 and "ran [1, 1, 1, 1]" in out.stdout, out.stderr[-3000:]
