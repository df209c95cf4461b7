"""A CUDA (or numba) exercise run on the CPU, in the sandboxed child: the emulator's side of ``tklab.grading.child``.

Which program runs: the PTX that NVRTC built for sm_90a in the checking process (``tklab.grading.program``) -- the
program its static checks read and a GPU would run -- handed to the child as ``PTX_FILE`` and run there by the PTX
interpreter (``tklab.emulate.interp``). The learner's code is data to it: nothing of theirs runs natively, and
every address their kernel computes is checked against the kernel's own buffers. That is a verdict (mode "emu",
``Evidence.CPU_EMULATION``, labelled ``LABEL``): the exercise's own cases, minus those too big to emulate in
seconds (``tklab.grading.cases``), compared element by element with the reference in the parent; a race, an
out-of-bounds access or a deadlock fails the run with the emulator's explanation. Nothing about speed.

Where NVRTC is missing (macOS), there is no PTX: the source is compiled as host C++ against the emulator's shim
(``engine="native"``) in the sandboxed child, for practice only (mode "practice", ``Evidence.CPU_PRACTICE``,
labelled ``PRACTICE_LABEL``): a second program, whose native code runs in the child, so ``tklab grade`` and
``nbgrade`` refuse it.

Public API: ``load(spec, path)``, ``launcher(spec, path, chan)``, ``tma_order(kernel, dims)``, ``LABEL``,
``NUMBA_LABEL``, ``PRACTICE_LABEL``, ``TIME_LIMIT``, ``FACTS``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import cases
from .channel import PTX_FILE
from .program import ARCH
from .spec_kit import TMA_ORDERS

LABEL = "CPU: the sm_90a PTX that NVRTC built, interpreted (correctness only, no timing)"
NUMBA_LABEL = "CPU: the PTX numba compiled, interpreted (correctness only, no timing)"
PRACTICE_LABEL = "CPU practice build (host C++, no NVRTC here): for practice, not a graded verdict"
TIME_LIMIT = 40.0  # seconds per launch: under the check's own process time limit, so the message is ours


def load(spec: Any, path: Path) -> Any:
    """In the child: the module to run. The PTX the checking process handed over (``PTX_FILE`` beside the learner's
    file), interpreted; without it (no NVRTC there) the native practice build of the source."""
    from .. import emulate
    from ..toolchain import includes
    from ..toolchain import locate as cuda_toolchain

    source = path.read_text()
    ptx = path.parent / PTX_FILE
    if ptx.is_file():
        from ..emulate.interp.module import PtxModule

        if spec.language == "numba":  # numba's array arguments, by its calling convention; Python is not CUDA source
            return PtxModule(ptx.read_text(), program=path.name, arch=spec.arch, abi="numba")
        return PtxModule(ptx.read_text(), program=path.name, source=source, arch=ARCH, options=spec.options)
    if spec.language == "numba":
        raise RuntimeError("no PTX was handed over for this numba exercise")
    includes.refuse_outside(source, path.name, own_dir=path.parent,
                            allowed=[cuda_toolchain.tile_library_dir()], search=[path.parent])
    return emulate.compile(source, arch=ARCH, name=path.name, options=spec.options, engine="native")


def launcher(spec: Any, path: Path, chan: Any) -> tuple[Callable[[dict[str, Any], dict[str, int]], None],
                                                        Callable[[], None]]:
    """The child's emulated run ("emu", "hazards" and "practice" modes of ``tklab.grading.child``): sends the
    ``device`` frame, loads the module (``load``) and returns ``(launch, finish)``. ``launch(arrays, dims)`` runs
    one case; emulator warnings (e.g. shared memory read before written) go back as "note" frames. ``finish()``,
    after every case ran right, sends what executed as one "facts" frame (for the concept floors)."""
    ptx = (path.parent / PTX_FILE).is_file()
    chan.send("device", name=(NUMBA_LABEL if spec.language == "numba" else LABEL) if ptx else PRACTICE_LABEL)
    mod = load(spec, path)
    kernel = mod[spec.kernel]
    sent: set[str] = set()
    facts: dict[str, int] = {}

    def launch(arrays: dict[str, Any], dims: dict[str, int]) -> None:
        shape = spec.launch(dims)
        res = kernel(shape.grid, shape.block, spec.args(arrays, dims), shared_mem=shape.shared_mem,
                     time_limit=TIME_LIMIT, **tma_order(kernel, dims))
        _collect(res, facts)
        for floor in getattr(spec, "floors", ()):  # the problem's work at this case, for TensorCoreWork
            count = getattr(floor, "flops", None)
            if callable(count) and getattr(res, "concepts", None):
                facts["problem_flops"] = facts.get("problem_flops", 0) + int(count(cases.shape(dims)))
                break
        for w in res.warnings:
            if w not in sent and len(sent) < 3:
                sent.add(w)
                chan.send("note", text=f"emulator: {w}")

    def finish() -> None:
        if facts:
            chan.send("facts", **facts)

    return launch, finish


def tma_order(kernel: Any, dims: dict[str, int]) -> dict[str, Any]:
    """The launch option that makes TMA loads land in the case's order (none for the emulator's default
    order, or where this emulator has no such option)."""
    import inspect

    k = dims.get("tma_order", 0)
    if not k or "tma_order" not in inspect.signature(kernel.__call__).parameters:
        return {}
    return {"tma_order": TMA_ORDERS[k]}


#: What the parent's concept floors may read from a launch (``LaunchResult`` attribute → fact), as maxima.
FACTS = {"wgmma_max_in_flight": "max_wgmma_groups"}


def _collect(res: Any, facts: dict[str, int]) -> None:
    for attr, name in FACTS.items():
        value = getattr(res, attr, None)
        if isinstance(value, int):
            facts[name] = max(facts.get(name, value), value)
    for name, value in (getattr(res, "concepts", None) or {}).items():  # the interpreter's counts: summed
        facts["executed_" + name] = facts.get("executed_" + name, 0) + int(value)
    if getattr(res, "concepts", None):
        facts["interpreted_launches"] = facts.get("interpreted_launches", 0) + 1
