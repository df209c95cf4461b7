"""Compiling CUDA source into a host shared library that runs its kernels on the CPU.

Three steps: preprocess with the keyword shim (``shim/pp``), rewrite inline PTX and ``__shared__``
(``rewrite``), compile the result as C++20 after the precompiled CUDA prelude (``shim/include``), with
``-fsanitize=thread`` instrumentation whose callbacks are the emulator's bounds and race checks. The
runtime (``shim/src``) is built once per compiler into its own shared library; modules link to it.
Everything is cached under ``<tklab cache>/emulate``, keyed by the compiler, the flags and the content.

What a checked learner's file builds here is host code of theirs, so (``tklab.grading`` builds it only in
the sandboxed child, never in the checking process) every compiler call has a time and a memory limit
(``COMPILE_SECONDS``, ``COMPILE_MEMORY``); the preprocessed text may name only files of the shim, the tile
library, the include path and the source itself (``#include "/dev/zero"`` or a classmate's file built by a
macro is refused); and a module may call nothing but the runtime, maths and memory functions
(``_check_symbols``: no ``write``, ``open``, ``fork``, threads: a kernel has no business with the system).

Public API: ``build(source, *, arch, name, options, include_dirs, name_expressions) -> Built``,
``runtime_library() -> Path``, ``EmulationCompileError``.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import re
import resource
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..toolchain import cache
from ..toolchain import locate as cuda_toolchain
from ..toolchain.compiler import COURSE_ARCH
from . import hostos, rewrite, watch
from .toolchain import Compiler, find

SHIM = Path(__file__).resolve().parent / "shim"
# Bump when the generated code changes meaning (2: entries from before issue 24 may be poisoned; 3: wgmma waits per
# warp, mbarrier waiters that see a phase complete keep it).
VERSION = "3"
#: The PTX interpreter's parts of the runtime (shim/src/interp.h says which does what).
INTERP_SOURCES = ("interp", "interp_values", "interp_memory", "interp_units")
#: Seconds and bytes of address space one compiler call may use (``$TKLAB_EMU_COMPILE_SECONDS`` overrides).
COMPILE_SECONDS = 120.0
COMPILE_MEMORY = 4 << 30
#: Seconds for a build of the emulator's own parts (its runtime, the precompiled prelude: tklab's sources, no blow-up
#: to guard against, only a hang): about 30 s on an idle core, several times that on a loaded 2-core machine.
OWN_PARTS_SECONDS = 900.0


class EmulationCompileError(Exception):
    """The host compiler rejected the (rewritten) source; the message shows its first errors."""

    def __init__(self, log: str, program: str):
        self.log = log
        lines = [ln for ln in log.splitlines() if ": error" in ln or ": fatal error" in ln]
        shown = "\n".join(lines[:8]) if lines else log.strip()[-3000:]
        super().__init__(f"compiling {program} for the CPU emulator failed:\n{shown}")


@dataclass
class Built:
    """A compiled module: the shared library, its kernels (name → entry symbol) and notes. ``key`` names its
    folder in the compile cache (``<cache>/<key[:2]>/<key>``: the module, its json, and the runtime beside it)."""

    path: Path
    kernels: dict[str, str]
    unsupported: list[str]
    source_path: str
    program: str
    seconds: float
    cached: bool
    key: str = ""

    @property
    def runtime(self) -> Path:
        """The runtime library the module was linked against (a copy in the module's folder)."""
        return next(self.path.parent.glob("libtkemu-*.so"))


def _root() -> Path:
    d = cache.cache_dir() / "emulate"
    d.mkdir(parents=True, exist_ok=True)
    return d


def _digest(*parts: str | bytes) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode() if isinstance(p, str) else p)
        h.update(b"\0")
    return h.hexdigest()[:24]


def _tree_digest(folder: Path) -> str:
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    return _digest(*(f"{p.relative_to(folder)}:{p.read_bytes().hex()}" for p in files))


def _limit_memory() -> None:  # in the compiler's process, before exec
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    want = COMPILE_MEMORY if hard == resource.RLIM_INFINITY else min(COMPILE_MEMORY, hard)
    if soft == resource.RLIM_INFINITY or soft > want:
        resource.setrlimit(resource.RLIMIT_AS, (want, hard))


def _seconds() -> float:
    try:
        return max(1.0, float(os.environ.get("TKLAB_EMU_COMPILE_SECONDS", "") or COMPILE_SECONDS))
    except ValueError:
        return COMPILE_SECONDS


def _run(argv: list[str], what: str, program: str, *, own: bool = False) -> str:
    """Run one compiler call within its limits; ``own``: a build of the emulator's own parts (``OWN_PARTS_SECONDS``)."""
    limit = max(_seconds(), OWN_PARTS_SECONDS) if own else _seconds()
    if hostos.memory_limit(hostos.current()) == "watch":  # macOS: RLIMIT_AS is accepted but not enforced
        w = watch.run(argv, seconds=limit, memory=COMPILE_MEMORY)
        if w.over_memory:
            raise EmulationCompileError(f"{program}: error: {what} used more than {COMPILE_MEMORY / 2**30:g} GB of "
                                        "memory and was stopped (a huge generated source?)", program)
        if w.timed_out:
            raise EmulationCompileError(f"{program}: error: {what} took longer than {limit:g} s and was stopped "
                                        "(an #include of something endless, or a huge generated source?)", program)
        if w.returncode != 0:
            raise EmulationCompileError(w.stderr or w.stdout or f"{what} failed", program)
        return w.stdout
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=limit, stdin=subprocess.DEVNULL,
                             preexec_fn=_limit_memory, errors="replace")
    except subprocess.TimeoutExpired:
        raise EmulationCompileError(f"{program}: error: {what} took longer than {limit:g} s and was stopped "
                                    "(an #include of something endless, or a huge generated source?)",
                                    program) from None
    if out.returncode != 0:
        raise EmulationCompileError(out.stderr or out.stdout or f"{what} failed", program)
    return out.stdout


@functools.cache
def _accepts(cc: Compiler, flag: str) -> bool:
    """Does the compiler take ``flag`` (GCC learnt -ftrivial-auto-var-init in version 12)?"""
    try:
        out = subprocess.run([*cc.argv, flag, "-x", "c++", "-fsyntax-only", "-"], input="", capture_output=True,
                             text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0


_MARKER = re.compile(r'^# \d+ "((?:[^"\\]|\\.)*)"', re.M)


def _check_sources(pre: str, program: str, roots: list[Path]) -> None:
    """Every file the preprocessor read (its line markers) lies under ``roots``: what a macro-built
    ``#include`` of a file outside would have read is refused before anything is compiled from it."""
    for m in _MARKER.finditer(pre):
        name = m.group(1).replace("\\\\", "\\")
        if name in (program, "<built-in>", "<command-line>") or name.startswith("<"):
            continue
        p = Path(name)
        try:
            real = p.resolve()
        except (OSError, RuntimeError):
            real = p
        if not any(real == r or r in real.parents for r in roots):
            line = pre.count("\n", 0, m.start()) + 1
            raise EmulationCompileError(f"{program}: error: the source includes {name!r}, outside the tile library "
                                        f"and its own folder (preprocessed line {line}); it is refused", program)


#: What a module may call besides the runtime: maths, memory, the C++ ABI's plumbing.
_ALLOWED_CALLS = re.compile(
    r"^(_ITM_\w+|__gmon_start__|__cxa_\w+|_ZT[ISV]\w+|_ZSt9terminatev|__tls_get_addr"
    r"|__stack_chk_fail|_Unwind_Resume|__gxx_personality_v0|abort|__assert_fail|_ZTH\w+|_ZTW\w+"
    r"|mem(cpy|set|move|cmp)|__mem(cpy|set|move)_chk|str(len|cmp)"
    r"|_Znw[jm]|_Zna[jm]|_ZdlPv\w*|_ZdaPv\w*"
    r"|(__)?(a?(sin|cos|tan)h?|atan2|exp(2|10|m1)?|log(2|10|1p|b)?|pow|sqrt|cbrt|hypot|fma|fabs|floor|ceil|trunc"
    r"|l?l?round|l?l?rint|nearbyint|fmod|remainder|remquo|copysign|nan|fmin|fmax|fdim|frexp|ldexp|modf"
    r"|scalbl?n|ilogb|erfc?|tgamma|lgamma|sincos|nextafter|signbit|isnan|isinf|finite)[fl]?(_finite)?)$")
_DARWIN_CALLS = re.compile(f"^({hostos.DARWIN_RUNTIME_CALLS})$")


@functools.lru_cache(maxsize=8)
def _defined(lib: str, host: hostos.Host) -> frozenset[str]:
    out = subprocess.run([*hostos.nm_command(host, undefined=False), lib], capture_output=True, text=True, timeout=60)
    return frozenset(hostos.symbol(host, ln.split()[-1]) for ln in out.stdout.splitlines() if ln.split())


def _allowed(host: hostos.Host, name: str) -> bool:
    return bool(_ALLOWED_CALLS.match(name) or (host.darwin and _DARWIN_CALLS.match(name)))


def _check_symbols(module: Path, runtime: Path, program: str, host: hostos.Host | None = None) -> None:
    """Refuse a module that calls anything but the emulator runtime, maths and memory functions (``nm``;
    without ``nm`` the check is skipped, the sandbox still holds)."""
    if shutil.which("nm") is None:
        return
    host = host or hostos.current()
    out = subprocess.run([*hostos.nm_command(host, undefined=True), str(module)], capture_output=True, text=True,
                         timeout=60)
    provided = _defined(str(runtime), host)
    bad = sorted({name for ln in out.stdout.splitlines() if ln.split()
                  for name in [hostos.symbol(host, ln.split()[-1])]
                  if name not in provided and not _allowed(host, name)})
    if bad:
        shown = ", ".join(bad[:6]) + (" …" if len(bad) > 6 else "")
        raise EmulationCompileError(f"{program}: error: the code calls {shown}: a kernel may call only CUDA's "
                                    "and the tile library's functions (no files, processes or threads); refused",
                                    program)


@functools.cache
def _has_libcxx(cc: Compiler) -> bool:
    """Can ``cc`` compile against libc++ (``-stdlib=libc++``: a Mac's standard library)?"""
    try:
        out = subprocess.run([*cc.argv, "-stdlib=libc++", "-std=c++20", "-x", "c++", "-fsyntax-only", "-"],
                             input="#include <thread>\n#include <string>\n", capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0


def _stdlib(cc: Compiler, host: hostos.Host) -> list[str]:
    wanted = host.portable and host.libcxx and not host.darwin and cc.family == "clang"
    return hostos.stdlib(host, cc.family, wanted and _has_libcxx(cc))


def _flags(cc: Compiler) -> list[str]:
    host = hostos.current()
    base = ["-std=c++20", "-O1", "-fPIC", "-w", "-fno-omit-frame-pointer", "-fsanitize=thread",
            *hostos.defines(host), *_stdlib(cc, host)]
    if _accepts(cc, "-ftrivial-auto-var-init=pattern"):  # uninitialised locals (register tiles, accumulators)
        base.append("-ftrivial-auto-var-init=pattern")  # start as garbage, as registers do on a GPU
    if cc.family == "clang":
        if _accepts(cc, "-fno-finite-loops"):  # as g++ at -O1: a spin-wait that never ends is kept, and the
            base.append("-fno-finite-loops")  # watchdog names it (clang would delete it as C++ allows)
        return [*base, "-gline-tables-only", "-gdwarf-4", "-mllvm", "-tsan-instrument-func-entry-exit=0",
                "-mllvm", "-tsan-instrument-atomics=0"]
    # DWARF 4: older addr2line misreads GCC's DWARF 5 file tables (it names the rewritten file, not the learner's)
    return [*base, "-g1", "-gdwarf-4", "--param=tsan-instrument-func-entry-exit=0"]


def _publish(tmp: Path, final: Path) -> None:
    os.replace(tmp, final)


@contextlib.contextmanager
def _one_builder(part: str) -> Iterator[None]:
    """One process at a time builds a shared part of the emulator (named by its sources' key): on a cold cache
    several processes ask for the same runtime at once (pytest's workers, checks started together) and each built it,
    tens of seconds of CPU apiece; now the others wait, and find it built. The part is still named by the key of what
    was compiled, so waiting never hands anyone a part built from other sources. Where no lock can be taken (no
    ``fcntl``, a cache that cannot be written) each process builds its own, as before."""
    try:
        import fcntl

        held = open(_root() / f".{part}.lock", "a")  # noqa: SIM115 - closed below, which releases the lock
    except (ImportError, OSError):
        yield
        return
    with held:
        with contextlib.suppress(OSError):
            fcntl.flock(held, fcntl.LOCK_EX)
        yield


def runtime_library(cc: Compiler | None = None) -> Path:
    """The emulator runtime (fibers, checks, PTX instructions) as a shared library, built once."""
    cc = cc or find()
    host = hostos.current()
    key = _runtime_key(cc, host)
    out = _root() / f"libtkemu-{key}.so"
    if not out.exists():
        with _one_builder(out.name):
            if not out.exists():
                out = _build_runtime(cc, host)
    return out


def _build_runtime(cc: Compiler, host: hostos.Host) -> Path:
    """Build the runtime library into the cache (the caller holds ``_one_builder``); returns where it lies."""
    with tempfile.TemporaryDirectory(dir=_root()) as tmp:
        # Compile a snapshot, named by the snapshot's own key: a source edited while this builds can never
        # leave a library under a key that describes other sources.
        shim = Path(tmp) / "shim"
        for part in ("src", "include"):
            shutil.copytree(SHIM / part, shim / part)
        out = _root() / f"libtkemu-{_runtime_key(cc, host, shim)}.so"
        lib = Path(tmp) / out.name
        _run([*cc.argv, "-std=c++20", "-O2", "-g1", "-fPIC", "-w", "-ffp-contract=off", *hostos.defines(host),
              *_stdlib(cc, host), *hostos.runtime_link(host, out.name), "-o", str(lib),
              str(shim / "src" / "runtime.cpp"), str(shim / "src" / "ptx.cpp"), str(shim / "src" / "trace.cpp"),
              *(str(shim / "src" / f"{name}.cpp") for name in INTERP_SOURCES), "-lpthread", "-ldl"],
             "building the emulator runtime", "the emulator runtime", own=True)
        if not out.exists():
            _publish(lib, out)
    return out


def _runtime_key(cc: Compiler, host: hostos.Host, shim: Path = SHIM) -> str:
    return _digest(VERSION, cc.description, " ".join([*hostos.defines(host), *_stdlib(cc, host)]),
                   _tree_digest(shim / "src"),
                   _tree_digest(shim / "include"))


def _pch_key(cc: Compiler) -> str:
    made_from = "the prelude itself, no timestamp" if cc.family == "clang" else "an include of it"  # see _pch
    return _digest(VERSION, cc.description, " ".join(_flags(cc)), _tree_digest(SHIM / "include"), made_from)


def _pch(cc: Compiler) -> tuple[Path, list[str]]:
    """(folder, compiler arguments) that put the precompiled prelude in front of a module."""
    folder = _root() / f"pch-{_pch_key(cc)}"
    # clang's PCH names the header it was made from by its path, and a sandboxed check gets a copy of this folder
    # elsewhere: there it is made from the prelude itself, which lies at the same path for every process.
    clang = cc.family == "clang"
    header = SHIM / "include" / "tkemu" / "prelude.h" if clang else folder / "tkemu_all.h"
    product = folder / ("tkemu_all.h.pch" if clang else "tkemu_all.h.gch")
    if not product.exists():
        with _one_builder(folder.name):
            if not product.exists():
                folder.mkdir(parents=True, exist_ok=True)
                if not clang:
                    header.write_text('#include "tkemu/prelude.h"\n')
                tmp = folder / f"{product.name}.{os.getpid()}.tmp"
                # clang refuses a PCH whose headers' mtimes changed (a checkout, a reinstall); the key holds their
                # content
                stamp = ["-Xclang", "-fno-pch-timestamp"] if clang else []
                _run([*cc.argv, *_flags(cc), *stamp, "-I", str(SHIM / "include"), "-x", "c++-header", str(header),
                      "-o", str(tmp)], "precompiling the CUDA prelude", "the CUDA prelude", own=True)
                _publish(tmp, product)
    if clang:
        return folder, ["-include-pch", str(product)]
    return folder, ["-include", str(header)]


def _arch_number(arch: str) -> int:
    m = re.fullmatch(r"sm_(\d)(\d)[af]?", arch)
    if not m:
        raise ValueError(f"arch={arch!r} is not a CUDA architecture; use e.g. 'sm_80' or 'sm_90a'")
    return int(m.group(1)) * 100 + int(m.group(2)) * 10


def _user_defines(options: Sequence[str]) -> list[str]:
    """The options that mean something to the host preprocessor (-D, -U, -I); the rest are NVRTC's."""
    out, it = [], iter(options)
    for o in it:
        o = str(o)
        if o in ("-D", "-U", "-I", "--define-macro", "--include-path"):
            value = next(it, "")
            out.append({"--define-macro": "-D", "--include-path": "-I"}.get(o, o) + value)
        elif o.startswith(("-D", "-U", "-I")):
            out.append(o)
        elif o.startswith(("--define-macro=", "--include-path=")):
            flag = "-D" if o.startswith("--define") else "-I"
            out.append(flag + o.split("=", 1)[1])
    return out


def build(source: str, *, arch: str = COURSE_ARCH, name: str = "kernel.cu", options: Sequence[str] = (),
          include_dirs: Sequence[str | Path] = (), name_expressions: Sequence[str] = ()) -> Built:
    """Compile ``source`` for the CPU emulator (see the module docstring); cached."""
    import time

    start = time.perf_counter()
    cc = find()
    number = _arch_number(arch)
    host = hostos.current()
    runtime_key = _runtime_key(cc, host)
    pch_key = _pch_key(cc)
    defines = [f"-D__CUDA_ARCH__={number}", *_user_defines(options)]
    if arch.endswith("a") and number >= 900:
        defines.append(f"-D__CUDA_ARCH_FEAT_SM{number // 10}_ALL")
    includes = [str(SHIM / "pp"), str(cuda_toolchain.tile_library_dir()),
                *(str(Path(d).resolve()) for d in include_dirs)]
    program = Path(name).name
    with tempfile.TemporaryDirectory(prefix="tkemu-") as tmp:
        src = Path(tmp) / program
        src.write_text(source)
        pre = _run([*cc.argv, "-E", "-std=c++20", "-nostdinc", "-nostdinc++", *(f"-I{d}" for d in includes),
                    *defines, "-include", str(SHIM / "pp" / "tkemu_pp.h"), "-x", "c++", str(src)],
                   "preprocessing", program)
        # Line markers name the temporary copy: point them at the learner's file name instead.
        pre = pre.replace(f'"{src}"', f'"{program}"')
        _check_sources(pre, program, [SHIM.resolve(), Path(tmp).resolve(), *(Path(d).resolve() for d in includes)])
        try:
            rw = rewrite.rewrite(pre, tuple(name_expressions))
        except rewrite.RewriteError as e:
            raise EmulationCompileError(f"{program}: error: {e}", program) from None
        key = "emulate-" + _digest(VERSION, cc.description, " ".join(_flags(cc)), runtime_key, pch_key, rw.text)
        folder = cache.cache_dir() / key[:2] / key
        out, meta = folder / "module.so", folder / "module.json"
        if out.exists() and meta.exists() and any(folder.glob("libtkemu-*.so")):
            info = json.loads(meta.read_text())
            return Built(out, info["kernels"], info["unsupported"], program, program,
                         time.perf_counter() - start, True, key)
        lib = runtime_library(cc)
        pch_dir, pch_args = _pch(cc)
        cpp = Path(tmp) / (Path(program).stem + ".emu.cpp")
        cpp.write_text(rw.text)
        staged = Path(tmp) / key
        staged.mkdir()
        shutil.copy2(lib, staged / lib.name)  # beside the module: the folder travels whole (a sandboxed check)
        obj = Path(tmp) / "module.o"
        _run([*cc.argv, *_flags(cc), "-c", "-I", str(pch_dir), "-I", str(SHIM / "include"), *pch_args,
              "-x", "c++", str(cpp), "-o", str(obj)], "compiling", program)
        # Linked without -fsanitize: the instrumentation's callbacks are the emulator runtime's, not libtsan's.
        _run([*cc.argv, *_stdlib(cc, host), "-o", str(staged / "module.so"), str(obj),
              *hostos.module_link(host, staged / lib.name)],
             "linking", program)
        _check_symbols(staged / "module.so", staged / lib.name, program, host)
        (staged / "module.json").write_text(json.dumps({"kernels": rw.kernels, "unsupported": rw.unsupported}))
        folder.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.replace(staged, folder)
        except OSError:  # another process published it first
            if not out.exists():
                raise
    return Built(out, rw.kernels, rw.unsupported, program, program, time.perf_counter() - start, False, key)
