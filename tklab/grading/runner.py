"""Running one exercise in a separate, sandboxed process; the verdict is reached in the parent.

Why a separate process: a learner's kernel can fault (an illegal address, a ``__trap()``), which leaves
the CUDA context of its process unusable for good, or it can never finish. Run in a child process, the
first becomes a clear message and the second a timeout, and the notebook or the grading loop that
asked survives both. The same holds for a numba kernel in the CPU simulator (an endless Python loop,
a crash of the interpreter). The child runs in ``tklab.grading.sandbox``: a fresh folder, a clean environment,
resource limits, a wall-clock limit for its whole process tree, bubblewrap where the machine has it.

Why the parent judges: the child runs the learner's code, so anything the child says could have been
written by that code. The parent draws the inputs (fresh random numbers), keeps its own copy, computes
the reference itself, and reads back only raw output arrays through a pipe it owns; it checks each
array's dtype and shape and compares. Nothing the child writes can say "passed". Speed is measured in
the child, next to the kernel: the parent checks the numbers are sane and recomputes the ratio, and
speed is never a condition of passing.

The parent's side lives here: ``run_isolated`` writes the run's folder (the learner's file, the cases, the inputs
``judge`` drew, a copy of the exercise's ``spec.py``: the child cannot see ``solutions/``), starts ``python -m
tklab.grading.child`` in ``sandbox`` with a clean environment and a pipe (``channel``), collects what comes back
within the time limit, and hands the bytes to ``judge``. The child's side, and the modes a run can take, are in
``child``.

Why the results can be believed (issue 24): the child reads the run's key from a pipe of its own and closes
it before it imports or loads any learner code; every frame it sends carries the key, and ``judge`` refuses
a run where any frame lacks it (a file that writes answers into the result pipe at import does not know
it) or where a case's outputs come without the harness's ``launched`` frame ("your kernel was never
launched"). What the key does not stop: code that deliberately reads the harness's memory from inside the
child; ``check`` refuses what that takes before anything runs (``hygiene`` for Python files; for CUDA under
emulation, ``emulate.build`` refuses modules that call anything but the runtime, maths and memory), and
on a GPU a CUDA file has no host code at all. No learner code is built or loaded in this process: for the
emulator the parent hands over only the emulator's own runtime and prelude (copies, into the run's cache),
and on Ctrl-C the run's whole process tree is killed before the interrupt goes on.

Public API: ``run_isolated(exercise_id, path, *, mode="gpu", timeout=60.0, ...) -> RunOutcome``.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..paths import REPO
from ..run import gpu
from .channel import PTX_FILE, SPEC_FILE, STAGE
from .judge import RunOutcome, draw_inputs, judge
from .modes import MODES, Mode

_PACKAGE_PARENT = REPO
_SOLUTIONS = _PACKAGE_PARENT / "solutions"

def _elsewhere(folder: Path) -> list[Path]:
    """The exercises' folder when it is not ``solutions/`` (``$TKLAB_SOLUTIONS``): hidden as well."""
    return [folder] if folder.resolve() != _SOLUTIONS.resolve() else []


#: Environment variables a child may need to find the GPU and its libraries; nothing else is passed on.
_PASSED_ENV = ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH",
               "TKLAB_CUDA_DIR", "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES",
               "TKLAB_EMU_PORTABLE")  # the emulator's build mode: the child must build as the parent prepared


def _child_env(workdir: Path, mode: Mode, extra: dict[str, str] | None) -> dict[str, str]:
    """A clean environment: what Python, the GPU and tklab need, nothing of the grader's."""
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(workdir), "TMPDIR": str(workdir / "tmp"),
           "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "PYTHONPATH": str(_PACKAGE_PARENT), "PYTHONNOUSERSITE": "1",
           "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1", "TKLAB_CACHE_DIR": str(workdir / "cache"),
           "NUMBA_CACHE_DIR": str(workdir / "numba-cache"), "CUPY_CACHE_DIR": str(workdir / "cupy-cache")}
    env.update({k: os.environ[k] for k in _PASSED_ENV if k in os.environ})
    env.update(dict(mode.env))
    env.update(extra or {})
    return env


def _warm_cache(keys: Sequence[str], target: Path) -> None:
    """Copy the parent's compile-cache entries into the run's folder, so the child need not compile again."""
    from ..toolchain import cache

    for k in keys:
        src = cache.cache_dir() / k[:2] / k
        if src.is_dir():
            with contextlib.suppress(OSError):
                shutil.copytree(src, target / k[:2] / k)


def _hand_over_emulator(parts: Sequence[Path], target: Path) -> None:
    """Copy the emulator's trusted parts (runtime library, precompiled prelude: built by the parent from
    tklab's sources) into the run's cache. Copies, never links: the child owns its folder, and a link
    would let it write the shared cache through it."""
    dest = target / "emulate"
    dest.mkdir(parents=True, exist_ok=True)
    for part in parts:
        part = Path(part)
        with contextlib.suppress(OSError):
            if part.is_dir():
                shutil.copytree(part, dest / part.name, symlinks=False)
            elif part.is_file():
                shutil.copyfile(part, dest / part.name)


#: Bytes a run may write in all (its folder and its /tmp), where they can be bounded (``runfolder``).
RUN_DISK = 1 << 30


def run_isolated(exercise_id: str, path: str | Path, *, mode: str = "gpu", timeout: float = 60.0,
                 bench: bool = False, seed: int | None = None, env: dict[str, str] | None = None,
                 source: str | None = None, hide: Sequence[str | Path] = (), cache_keys: Sequence[str] = (),
                 arch: str | None = None, emulator_parts: Sequence[Path] | None = None,
                 ptx: str | None = None) -> RunOutcome:
    """Run ``path`` as exercise ``exercise_id`` in a sandboxed child; never raises for the learner's faults.

    ``source``: the file's text as the caller read it (written into the run's folder instead of the raw
    bytes). ``env``: extra environment variables for the child (its environment is otherwise clean).
    ``hide``: folders the sandbox hides (the solutions and the shared compile cache always).
    ``cache_keys``: compile-cache entries to hand to the child. ``arch``: the GPU's arch, if the caller knows
    it. ``emulator_parts``: the emulator's trusted parts for the emulated modes (default:
    ``tklab.grading.program.prepare``). ``ptx``: the PTX this process compiled from the file, for the emulated
    modes: the program the child's interpreter runs (without it, the practice build compiles the source natively).
    """
    from . import specs
    from .sandbox import Limits, Sandbox, limits_for

    spec = specs.get(exercise_id)
    m = MODES[mode]
    path = Path(path)
    if m.needs_gpu and spec.hopper_only:
        if arch is None:
            arch = gpu.arch()
        if not arch.startswith("sm_90"):
            return RunOutcome("skipped", f"this exercise needs a Hopper GPU (sm_90a); this one is {arch}")
    cases = list(m.cases(spec))
    seed = seed if seed is not None else int.from_bytes(os.urandom(4), "little")
    inputs = draw_inputs(spec, cases, seed)
    budget = (1 << 20) + sum(int(np.prod(shape)) * np.dtype(dt).itemsize + 4096
                             for dims in cases for shape, dt in spec.outputs(dims).values()) + \
        ((4 << 20) if m.name == "trace" else 0)  # the trace frame (tklab.trace)
    from . import runfolder

    workdir = runfolder.make("tklab-run-", RUN_DISK)  # a tmpfs of RUN_DISK bytes where the grader may mount one
    mounted = runfolder.bounded(workdir)
    try:
        name, spec_source = _fill_run_folder(workdir, spec, m, path, source, cases, inputs, cache_keys, ptx,
                                             emulator_parts)
        cpus = os.cpu_count() or 1
        limits = limits_for(Limits(wall_seconds=timeout, memory=None if m.needs_gpu else 4 << 30, disk=RUN_DISK,
                                   cpu_seconds=int(timeout * cpus) + 30))
        # hidden: the solutions, and the shared compile cache (their compiled forms: a concept floor's reference
        # module, the chapters' builds); the child compiles into its own folder's cache
        from ..toolchain import cache

        box = Sandbox(workdir, gpu=m.needs_gpu, hide=[_SOLUTIONS, *_elsewhere(specs.root()), cache.cache_dir(), *hide],
                      limits=limits)
        box.hand_over()
        mounted = mounted or box.bounds_folder()  # a grader that is not root: bubblewrap bounds the folder
        argv = [sys.executable, "-m", "tklab.grading.child", "--exercise", spec.id, "--file", name, "--mode", m.name,
                "--limits", limits.to_json()]
        if spec_source is not None:
            argv += ["--spec", SPEC_FILE]
        if bench and m.can_bench:
            argv += ["--bench", "--bench-seed", str(seed)]
        heard = _Heard(budget)
        key, fin = _supervise(box, argv, _child_env(workdir, m, env), heard)
    finally:
        runfolder.remove(workdir)
    out = judge(spec, m, cases, inputs, bytes(heard.channel), timed_out=fin.timed_out, returncode=fin.returncode,
                stage=heard.stage, printed=heard.printed.decode("utf-8", "replace"), timeout=timeout,
                seconds=fin.seconds, overflow=heard.overflow, key=key)
    _say_how_it_ran(out, box, limits, fin, mounted)
    return out


def _fill_run_folder(workdir: Path, spec: Any, m: Mode, path: Path, source: str | None, cases: list[dict[str, int]],
                     inputs: list[dict[str, np.ndarray]], cache_keys: Sequence[str], ptx: str | None,
                     emulator_parts: Sequence[Path] | None) -> tuple[str, Path | None]:
    """Everything the child reads, written into its folder: the learner's file (its name, unless it would shadow
    one of the run's own files), the cases and their inputs, the exercise's spec (the child cannot read
    solutions/), the compiled modules it may reuse, the PTX its interpreter runs and the emulator's trusted
    parts. Returns (the file's name in the folder, the spec file copied, if any)."""
    from . import specs

    name = path.name if path.name.isprintable() and "/" not in path.name else spec.filename
    if name in (SPEC_FILE, PTX_FILE, "cases.json"):  # the run's own files keep their names
        name = spec.filename
    if source is not None:
        (workdir / name).write_text(source, encoding="utf-8")
    else:
        shutil.copyfile(path, workdir / name)
    (workdir / "cases.json").write_text(json.dumps(cases))
    spec_source = specs.spec_file(spec.id)  # an exercise's spec, which the child cannot read in solutions/
    if spec_source is not None:
        shutil.copyfile(spec_source, workdir / SPEC_FILE)
    for i, arrays in enumerate(inputs):
        for k, v in arrays.items():
            np.save(workdir / f"case-{i}-{k}.npy", v, allow_pickle=False)
    for sub in ("tmp", "cache"):
        (workdir / sub).mkdir()
    _warm_cache(cache_keys, workdir / "cache")
    if ptx is not None and m.name in ("emu", "trace", "hazards"):  # the program the interpreter runs
        (workdir / PTX_FILE).write_text(ptx)
    if m.name in ("emu", "trace", "hazards", "practice"):  # every emulated mode: else its child rebuilds them
        if emulator_parts is None:
            from .program import prepare

            emulator_parts = prepare(spec)
        _hand_over_emulator(emulator_parts, workdir / "cache")
    return name, spec_source


class _Heard:
    """What a running child said: its frames on the channel (up to ``budget`` bytes, then ``overflow``), its
    printed lines (the last 200 kB, each cut at 1000 bytes), and the last stage it announced."""

    def __init__(self, budget: int) -> None:
        self.budget, self.channel, self.printed = budget, bytearray(), bytearray()
        self.stage, self.overflow, self._pending = "starting", False, b""

    def on_channel(self, data: bytes) -> None:
        if len(self.channel) + len(data) > self.budget:
            self.overflow = True
            return
        self.channel.extend(data)

    def on_output(self, data: bytes) -> None:
        lines = (self._pending + data).split(b"\n")
        self._pending = lines.pop()[-4096:]
        for ln in lines:
            text = ln.decode("utf-8", "replace")
            if text.startswith(STAGE):
                self.stage = text[len(STAGE):][:200]
            else:
                self.printed.extend(ln[:1000] + b"\n")
        del self.printed[:-200_000]


def _supervise(box: Any, argv: list[str], env: dict[str, str], heard: _Heard) -> tuple[str, Any]:
    """Start the child in the sandbox with its channel and the run's key, and watch it to the end (the run's whole
    tree killed on Ctrl-C or any error here). Returns (the key its frames must carry, how it finished)."""
    read_fd, write_fd = os.pipe()
    key = secrets.token_hex(16)
    key_read, key_write = os.pipe()
    argv = [*argv, "--channel", str(write_fd), "--key-fd", str(key_read)]
    try:
        box.start(argv, env, pass_fds=[write_fd, key_read])
        # the key only now: the child waits for it before any learner code, so the whole run is in its cgroup
        os.write(key_write, key.encode())  # 32 bytes: fits the pipe's buffer
    finally:
        os.close(write_fd)
        os.close(key_read)
        os.close(key_write)
    try:
        assert box.proc is not None and box.proc.stdout is not None
        fin = box.supervise({box.proc.stdout.fileno(): heard.on_output, read_fd: heard.on_channel})
    except BaseException:  # Ctrl-C (or any error) here: the run's whole tree goes with it
        box.kill()
        raise
    finally:
        os.close(read_fd)
    heard.on_output(b"\n")
    return key, fin


def _say_how_it_ran(out: RunOutcome, box: Any, limits: Any, fin: Any, mounted: bool) -> None:
    """The outcome's isolation line (the sandbox, its limits, its cgroup) and notes on what the system stopped."""
    disk = "" if mounted or not limits.disk else " (its folder: per file only, not mounted here)"
    group = box.describe_group() or "no cgroup of its own here (per-process limits only)"
    out.isolation = f"{box.isolation.describe()}; limits: {limits.describe()}{disk}; {group}"
    if fin.memory_held:
        out.notes.append(f"the grader stopped the run: its processes held {fin.memory_held >> 20} MiB together, more "
                         f"than the run's {(limits.memory or 0) >> 20} MiB")
    elif fin.oom_kills:
        out.notes.append(f"the system stopped {fin.oom_kills} process{'es' if fin.oom_kills != 1 else ''} of the run: "
                         f"together they used more than the run's {(limits.memory or 0) >> 20} MiB of memory")
    if out.result and out.result.get("limits_not_applied"):
        out.isolation += f" (not applied here: {', '.join(out.result['limits_not_applied'])})"
    if fin.killed:
        out.notes.append(f"{fin.killed} process{'es' if fin.killed != 1 else ''} the run left behind "
                         f"{'were' if fin.killed != 1 else 'was'} stopped")


