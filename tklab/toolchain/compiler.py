"""``tklab.compile``: CUDA C++ source → a compiled, inspectable, launchable module.

NVRTC is called directly through ``cuda.bindings`` (CuPy's compile helpers insist on a GPU; NVRTC
does not), always with ``-std=c++20`` and the tile library on the include path, so ``#include "tk.cuh"``
just works. One compile yields both PTX and a cubin for a real architecture; kernels are launched from
the cubin (a cubin from a newer NVRTC loads on an older driver of the same major version, PTX may not).

Arguments are checked before NVRTC sees them: ``options`` and ``include_dirs`` may be a sequence or one
string (``options="-DTILE=64 -lineinfo"`` is split like a shell line; ``include_dirs="/path"`` is one
folder), a NUL byte in the source is refused (NVRTC would silently drop everything after it), and an
arch is checked against the ones this NVRTC supports. A compile that takes long says so on stderr
(NVRTC cannot be interrupted, but the learner should know what the machine is doing).

Public API: ``compile(source, *, arch=None, name=None, options=(), include_dirs=(), name_expressions=())``
→ ``Module``; ``CompileError``; ``supported_archs()``; ``COURSE_ARCH`` and ``default_arch()`` (the one
policy for "which arch, when none is named").
"""

from __future__ import annotations

import contextlib
import functools
import html
import inspect
import os
import re
import shlex
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import cached_property
from pathlib import Path
from typing import Any, Generic, TypeVar

from ..run import gpu, signature
from . import cache, locate, nvrtc_call, sass

_T = TypeVar("_T")

_ARCH = re.compile(r"^sm_(\d{2,3})(a|f)?$")

#: The course's target, Hopper (wgmma, TMA, setmaxnreg need the ``a``): what is compiled for when no GPU
#: can be asked. The one place this policy lives (the check, ``%%tk``, the CPU emulator use it).
COURSE_ARCH = "sm_90a"


def default_arch() -> str:
    """The arch to build for when the caller names none: this GPU's (``gpu.arch()``), else ``COURSE_ARCH``.

    ``compile(arch=None)`` itself does not fall back: a learner calling it without a GPU is told to choose.
    """
    return gpu.arch() if gpu.available() else COURSE_ARCH

#: Seconds after which a running compile says so on stderr, then every ``_SLOW_EVERY`` seconds.
_SLOW_AFTER = 10.0
_SLOW_EVERY = 30.0


class CompileError(Exception):
    """NVRTC rejected the source. ``str(e)`` shows each message beside the numbered source lines."""

    def __init__(self, log: str, source: str, program: str, line_offset: int = 0):
        self.log = log
        self.source = source
        self.program = program
        self.line_offset = line_offset
        self.diagnostics = parse_diagnostics(log, program)
        super().__init__(self._render())

    def _render(self) -> str:
        lines = self.source.splitlines()
        out = [f"compiling {self.program} failed:"]
        shown = 0
        for file, line, kind, message in self.diagnostics:
            out.append(f"{file}:{line}: {kind}: {message}")
            if file == self.program and kind == "error" and shown < 5:
                shown += 1
                first = max(1, line - 2)
                for n in range(first, min(len(lines), line + 1) + 1):
                    mark = ">" if n == line else " "
                    out.append(f"  {mark}{n - self.line_offset:4d} | {lines[n - 1]}")
        if not any(kind == "error" for _, _, kind, _ in self.diagnostics):
            # Errors from ptxas (the assembler) or the driver have no file(line) prefix: show them raw.
            raw = [ln for ln in self.log.splitlines() if "error" in ln.lower() or "fatal" in ln.lower()]
            out.extend(raw or [self.log.strip()])
        return "\n".join(out)

    def _render_traceback_(self) -> list[str]:
        """IPython shows this instead of a Python traceback: the learner's lines, not tklab's."""
        return ["CompileError: " + str(self)]

    @property
    def lines(self) -> list[int]:
        """Line numbers (as the learner sees them) of the errors in the learner's own source."""
        return [ln - self.line_offset for f, ln, k, _ in self.diagnostics if f == self.program and k == "error"]


_DIAG = re.compile(r"^(.*?)\((\d+)\): (error|warning|catastrophic error)[^:]*: (.*)$", re.M)


def parse_diagnostics(log: str, program: str) -> list[tuple[str, int, str, str]]:
    """(file, line, kind, message) for every NVRTC diagnostic; file is ``program`` for the main source."""
    result = []
    for m in _DIAG.finditer(log):
        file = m.group(1).strip()
        kind = "error" if "error" in m.group(3) else "warning"
        result.append((file, int(m.group(2)), kind, m.group(4).strip()))
    return result


@functools.lru_cache(maxsize=1)
def supported_archs() -> tuple[int, ...]:
    """The compute capabilities this NVRTC compiles for (e.g. ``(75, 80, ..., 90, 100, 120)``); () if unknown."""
    try:
        from cuda.bindings import nvrtc

        err, archs = nvrtc.nvrtcGetSupportedArchs()
        return tuple(int(a) for a in archs) if err == nvrtc.nvrtcResult.NVRTC_SUCCESS else ()
    except Exception:  # noqa: BLE001 - an older NVRTC without the query: NVRTC itself will judge
        return ()


def _normalise_arch(arch: str | None) -> str:
    if arch is None:
        if not gpu.available():
            raise ValueError("No GPU found, so tklab cannot guess the target architecture: pass arch=, "
                             "e.g. arch='sm_90a' (H100/H200, with wgmma) or arch='sm_80' (A100).")
        return gpu.arch()
    if not isinstance(arch, str):
        raise TypeError(f"arch must be a string such as 'sm_90a', not {type(arch).__name__}")
    arch = arch.strip().lower()
    if arch.startswith("compute_"):
        arch = "sm_" + arch[len("compute_"):]
    m = _ARCH.match(arch)
    if not m:
        raise ValueError(f"arch={arch!r} is not a CUDA architecture; use e.g. 'sm_80', 'sm_90', 'sm_90a' or "
                         "'sm_100a'.")
    known = supported_archs()
    if known and int(m.group(1)) not in known:
        listed = ", ".join(f"sm_{a}" for a in known)
        raise ValueError(f"arch={arch!r}: this NVRTC does not compile for it; it supports {listed}.")
    return arch


def _as_strings(value: object, what: str, *, split: bool) -> list[str]:
    """A sequence of strings/paths, or one string (split like a shell line when ``split``)."""
    if isinstance(value, (str, os.PathLike)):
        text = os.fspath(value)
        return shlex.split(text) if split else ([text] if text else [])
    if isinstance(value, bytes):
        raise TypeError(f"{what} must be strings, not bytes")
    try:
        items = list(value)  # type: ignore[call-overload]
    except TypeError:
        raise TypeError(f"{what} must be a string or a sequence of strings, not {type(value).__name__}") from None
    for item in items:
        if not isinstance(item, (str, os.PathLike)):
            raise TypeError(f"{what}: {item!r} is a {type(item).__name__}, not a string")
    return [os.fspath(i) for i in items]


def _refuse_nul(source: str, program: str) -> None:
    at = source.find("\0")
    if at >= 0:
        line = source.count("\n", 0, at) + 1
        col = at - (source.rfind("\n", 0, at) + 1) + 1
        raise ValueError(f"{program}:{line}:{col}: the source contains a NUL byte; NVRTC would silently ignore "
                         "everything after it (a binary file, or a bad copy and paste?)")


class _SlowCompileNotice:
    """Says on stderr when a compile runs long: what is being compiled, how big it is, for how long."""

    def __init__(self, program: str, source: str, stream: object = None):
        self.program, self.lines, self.size = program, len(source.splitlines()), len(source.encode())
        self.stream = stream
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self.notices = 0

    def _watch(self) -> None:
        start = time.monotonic()
        wait = _SLOW_AFTER
        while not self._done.wait(wait):
            self.notices += 1
            kb = self.size / 1024
            big = (" A source this large usually comes from a generator or a huge #include; compile a "
                   "smaller piece first." if self.size > 256 * 1024 else
                   " Deep template recursion or fully unrolled loops over large bounds are the usual cause.")
            print(f"tklab: still compiling {self.program} ({self.lines} lines, {kb:.0f} KB) after "
                  f"{time.monotonic() - start:.0f} s; NVRTC cannot be interrupted.{big if self.notices == 1 else ''}",
                  file=self.stream or sys.stderr, flush=True)
            wait = _SLOW_EVERY

    def __enter__(self) -> _SlowCompileNotice:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()


def compile(  # noqa: A001 - the name learners expect
    source: str,
    *,
    arch: str | None = None,
    name: str | None = None,
    options: Sequence[str] = (),
    include_dirs: Iterable[str | Path] = (),
    name_expressions: Sequence[str] = (),
    line_offset: int = 0,
) -> Module:
    """Compile CUDA C++ with NVRTC (cached on disk); see the module docstring. (``tklab.compile`` also takes
    ``target="cpu"``, the emulator's build.) Without NVRTC (macOS, ``TKLAB_NO_NVRTC=1``) a GPU compile
    raises ``locate.NvrtcUnavailable``, whose message says so and what still works.

    ``name`` is the file name shown in messages; ``name_expressions`` are C++ names of template
    instantiations to keep (``"gemm<128>"``), which then become kernels of the module; ``line_offset``
    is subtracted from line numbers in error messages (for sources with a generated prelude).
    """
    if not isinstance(source, str):
        raise TypeError(f"source must be a str of CUDA C++, not {type(source).__name__}")
    program = name or "kernel.cu"
    _refuse_nul(source, program)
    locate.nvrtc_version()  # without NVRTC: NvrtcUnavailable, saying why and what still works (the emulator)
    arch = _normalise_arch(arch)
    extra = _as_strings(options, "options", split=True)
    user_dirs = [str(Path(d).expanduser().resolve()) for d in _as_strings(include_dirs, "include_dirs", split=False)]
    for d in user_dirs:
        if not Path(d).is_dir():
            raise ValueError(f"include_dirs: {d} is not a folder")
    name_expressions = _as_strings(name_expressions, "name_expressions", split=False)
    header_dirs = [str(locate.tile_library_dir()), *user_dirs]
    opts = ["-std=c++20", f"-arch={arch}", "--ptxas-options=-v", "-lineinfo", *extra]
    key = cache.key(source=source, options=opts, arch=arch, header_dirs=header_dirs,
                    toolchain=locate.fingerprint(), name_expressions=name_expressions)
    entry = cache.load(key)
    cached = entry is not None
    if entry is None:
        with _SlowCompileNotice(program, source):
            entry = _nvrtc(source, program, opts + [f"-I{d}" for d in [*header_dirs, *locate.include_dirs()]],
                           name_expressions, line_offset)
        cache.store(key, entry)
    return Module(source=source, program=program, arch=arch, options=tuple(opts), key=key,
                  cached=cached, **{k: entry[k] for k in ("cubin", "ptx", "log", "lowered", "seconds")})


#: Where NVRTC runs for ``compile``: None is this process (``nvrtc_call.compile_raw``); grading sets a function
#: of the same arguments that runs it in a limited child (``nvrtc_elsewhere``, ``tklab.grading.bounded_compile``).
_nvrtc_runner: Callable[[str, str, list[str], Sequence[str]], dict[str, Any]] | None = None



def takes_compile_options(front: Callable[..., Any]) -> Callable[..., Any]:
    """``front(source, *, <its own keyword parameters>, **options)``, a front of ``compile`` that hands ``options``
    on to it (``tklab.compile``, ``tklab.emulate.compile``), with ``compile``'s keyword parameters and defaults in
    its signature after its own, as a learner's editor shows it (Jupyter's Shift-Tab, ``help()``): the names and
    defaults have one home, ``compile``, and every front still shows each. An option ``compile`` does not take is
    refused with ``TypeError`` naming it, as by a written-out signature."""
    own = inspect.signature(front)
    kept = [q for q in own.parameters.values() if q.kind is not inspect.Parameter.VAR_KEYWORD]
    mine = {q.name for q in kept}
    home = [q for n, q in inspect.signature(compile).parameters.items() if n != "source" and n not in mine]
    shown = own.replace(parameters=[*kept, *home])

    @functools.wraps(front)
    def checked(*args: Any, **kwargs: Any) -> Any:
        shown.bind(*args, **kwargs)  # TypeError for an option no signature has, or a missing source
        return front(*args, **kwargs)

    checked.__signature__ = shown  # type: ignore[attr-defined]
    return checked

@contextlib.contextmanager
def nvrtc_elsewhere(runner: Callable[[str, str, list[str], Sequence[str]], dict[str, Any]]) -> Iterator[None]:
    """Within the block, every compile that misses the cache runs NVRTC through ``runner(source, program, options,
    name_expressions)`` (returning ``nvrtc_call.compile_raw``'s dict) instead of in this process; the key, the
    cache and the module are the same either way."""
    global _nvrtc_runner
    saved, _nvrtc_runner = _nvrtc_runner, runner
    try:
        yield
    finally:
        _nvrtc_runner = saved


def _nvrtc(source: str, program: str, opts: list[str], name_expressions: Sequence[str],
           line_offset: int) -> dict[str, Any]:
    raw = (_nvrtc_runner or nvrtc_call.compile_raw)(source, program, opts, name_expressions)
    if not raw["ok"]:
        raise CompileError(raw["log"], source, program, line_offset)
    return {k: raw[k] for k in ("cubin", "ptx", "log", "lowered", "seconds")}


def plain_name(mangled: str) -> str | None:
    """``_Z5saxpyPfS_fi`` → ``saxpy``: the name of a kernel C++ mangled (not ``extern "C"``), or None.

    Only plain functions in the global namespace (``_Z<len><name>...``); templates and namespaced
    kernels are reached with ``name_expressions=``.
    """
    m = re.match(r"^_Z(\d+)", mangled)
    if not m:
        return None
    n, start = int(m.group(1)), m.end()
    name = mangled[start:start + n]
    return name if len(name) == n and name.isidentifier() else None


_ENTRY = re.compile(r"^\s*(?:\.(?:visible|weak|extern)\s+)?\.entry\s+([A-Za-z_$][\w$]*)\s*\(", re.M)
_INT_GLOBAL = re.compile(
    r"\.global\s+\.align\s+\d+\s+\.[usb](?:8|16|32|64)\s+([A-Za-z_$][\w$]*)\s*(?:=\s*(-?\d+))?\s*;")


class KernelsByName:
    """``module.gemm`` is ``module["gemm"]``: a module's kernels as attributes (GPU and CPU-emulator modules)."""

    def __getitem__(self, name: str) -> Any:
        raise NotImplementedError

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return self[name]
        except KeyError as e:
            raise AttributeError(str(e)) from None


class _OfItsKernel(Generic[_T]):
    """An attribute of a module that is its only kernel's attribute of the same name (``Module.registers``, ...)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, module: Any, owner: type | None = None) -> _T:
        if module is None:
            return self  # type: ignore[return-value]
        return getattr(module._only(), self.name)


class Module(KernelsByName):
    """A compiled translation unit: PTX, cubin, SASS, resources, and its kernels by name."""

    def __init__(self, *, source: str, program: str, arch: str, options: tuple[str, ...], key: str,
                 cached: bool, cubin: bytes, ptx: str, log: str, lowered: dict[str, str], seconds: float):
        self.source, self.program, self.arch, self.options = source, program, arch, options
        self.key, self.cached, self.cubin, self.ptx, self.log = key, cached, cubin, ptx, log
        self.lowered = dict(lowered)
        self.compile_seconds = seconds
        self._kernels: dict[str, Kernel] = {}
        self.notes: list[str] = []  # remarks for the reader (e.g. from %%tk: a kernel bound under its plain name)

    # ---- kernels -------------------------------------------------------------------------------
    @cached_property
    def kernels(self) -> list[str]:
        """Mangled/extern names of the kernels (``.entry`` points) in this module."""
        return _ENTRY.findall(self.ptx)

    @cached_property
    def constants(self) -> dict[str, int]:
        """The module's integer ``__device__`` variables as the PTX initializes them: facts the source computes
        at compile time and exports (``extern "C" __device__ int gemm_shared_bytes = ...;``, a check's probes)."""
        return {m.group(1): int(m.group(2) or 0) for m in _INT_GLOBAL.finditer(self.ptx)}

    @cached_property
    def plain_names(self) -> dict[str, str]:
        """Plain C++ name → mangled name, for kernels not declared ``extern "C"`` (only names used once)."""
        seen: dict[str, list[str]] = {}
        for k in self.kernels:
            plain = plain_name(k)
            if plain is not None:
                seen.setdefault(plain, []).append(k)
        return {p: ks[0] for p, ks in seen.items() if len(ks) == 1 and p not in self.kernels}

    def _resolve(self, name: str) -> str:
        if name in self.lowered:
            return self.lowered[name]
        if name in self.kernels:
            return name
        if name in self.plain_names:
            return self.plain_names[name]
        raise KeyError(f"no kernel named {name!r} in {self.program}; kernels: {', '.join(self.kernels) or 'none'}"
                       " (declare kernels extern \"C\", or pass templates via name_expressions=)")

    def __getitem__(self, name: str) -> Kernel:
        low = self._resolve(name)
        if low not in self._kernels:
            self._kernels[low] = Kernel(self, low, name)
        return self._kernels[low]

    def __iter__(self):
        return (self[k] for k in self.kernels)

    def _only(self) -> Kernel:
        if len(self.kernels) != 1:
            raise ValueError(f"{self.program} has {len(self.kernels)} kernels ({', '.join(self.kernels)}); "
                             "pick one: module['name'].registers")
        return self[self.kernels[0]]

    # ---- inspection ------------------------------------------------------------------------------
    @cached_property
    def _ptxas(self) -> dict[str, dict[str, int]]:
        return sass.parse_ptxas_log(self.log)

    @cached_property
    def _sass(self) -> dict[str, str]:
        return sass.disassemble(self.cubin)

    @property
    def sass(self) -> str:
        """SASS of every kernel in the module."""
        return "".join(self._sass.values())

    # A one-kernel module's resource counts are its kernel's (several kernels: ``_only`` names them).
    registers = _OfItsKernel[int]()
    shared_bytes = _OfItsKernel[int]()
    spill_bytes = _OfItsKernel[int]()
    stack_bytes = _OfItsKernel[int]()

    @property
    def histogram(self) -> Counter[str]:
        """Instruction counts (base opcodes) over all kernels in the module."""
        total: Counter[str] = Counter()
        for k in self:
            total.update(k.histogram)
        return total

    def summary(self) -> str:
        rows = [f"{self.program} → {self.arch}  ({'cached' if self.cached else f'{self.compile_seconds:.2f} s'})"]
        for k in self:
            rows.append("  " + k.summary())
        return "\n".join(rows)

    def __repr__(self) -> str:
        return f"<tklab.Module {self.program} {self.arch} kernels={self.kernels}>"

    def _repr_html_(self) -> str:
        head = ("<tr><th>kernel</th><th>registers</th><th>static smem</th><th>spills</th>"
                "<th>top instructions</th></tr>")
        body = "".join(k._html_row() for k in self)
        when = "from cache" if self.cached else f"compiled in {self.compile_seconds:.2f} s"
        return (f"<div><b>{html.escape(self.program)}</b> → <code>{self.arch}</code> ({when})"
                f"<table>{head}{body}</table></div>")


# Instructions a lesson cares about, in the order the summary lists them.
NOTABLE = ("HGMMA", "HMMA", "LDSM", "STSM", "UTMALDG", "UTMASTG", "LDGSTS", "LDG", "STG", "LDS", "STS",
           "LDL", "STL", "FFMA", "BAR", "SHFL")


class Kernel:
    """One kernel of a module: its resources, SASS, instruction mix, and ``__call__`` to launch it."""

    def __init__(self, module: Module, lowered: str, display: str):
        self.module, self.name, self.display_name = module, lowered, display

    @cached_property
    def resources(self) -> sass.Resources:
        ptxas = self.module._ptxas.get(self.name, {})
        usage: dict[str, int] = {}
        if "smem" in ptxas:
            usage["SHARED"] = ptxas["smem"]
        else:
            usage = sass.resource_usage(self.module.cubin).get(self.name, {})
        return sass.combine_resources(usage, ptxas)

    registers = property(lambda self: self.resources.registers)
    shared_bytes = property(lambda self: self.resources.shared_bytes)
    spill_bytes = property(lambda self: self.resources.spill_bytes)
    stack_bytes = property(lambda self: self.resources.stack_bytes)

    @property
    def sass(self) -> str:
        return self.module._sass.get(self.name, "")

    @cached_property
    def histogram(self) -> Counter[str]:
        return sass.histogram(self.sass)

    @cached_property
    def params(self) -> list[signature.Param] | None:
        """The kernel's parameters as declared in the source (None if the declaration was not found)."""
        return signature.find(self.module.source, self.display_name.split("<", 1)[0])

    def summary(self) -> str:
        notable = ", ".join(f"{op}×{self.histogram[op]}" for op in NOTABLE if self.histogram.get(op))
        spilled = f"{self.spill_bytes} B spilled" if self.resources.from_ptxas else "spills unknown (no ptxas report)"
        return (f"{self.display_name}: {self.registers} registers, {self.shared_bytes} B static smem, "
                f"{spilled}; {notable or 'no notable instructions'}")

    def _html_row(self) -> str:
        notable = ", ".join(f"{op}×{self.histogram[op]}" for op in NOTABLE if self.histogram.get(op))
        spill = f"<b style='color:#c00'>{self.spill_bytes} B</b>" if self.spill_bytes else "0"
        return (f"<tr><td><code>{html.escape(self.display_name)}</code></td><td>{self.registers}</td>"
                f"<td>{self.shared_bytes} B</td><td>{spill}</td><td>{html.escape(notable)}</td></tr>")

    def __call__(self, grid: Any, block: Any, args: Sequence[Any] = (), *, shared_mem: int = 0,
                 stream: Any = None, sync: bool = False) -> None:
        """Launch on the GPU, CuPy ``RawKernel`` style: ``k(grid, block, (a, b, n), shared_mem=...)``."""
        from ..run import launch

        launch.launch(self, grid, block, args, shared_mem=shared_mem, stream=stream, sync=sync)

    def prepare(self, grid: Any, block: Any, args: Sequence[Any] = (), *, shared_mem: int = 0,
                stream: Any = None) -> Any:
        """Check and pack a launch once; the returned ``Prepared`` launches when called (GPU)."""
        from ..run import launch

        return launch.prepare(self, grid, block, args, shared_mem=shared_mem, stream=stream)

    def __repr__(self) -> str:
        return f"<tklab.Kernel {self.display_name} ({self.module.arch})>"

    def _repr_html_(self) -> str:
        return f"<table>{self._html_row()}</table>"
