"""The ways to run an exercise, as data: which exercises each takes, which cases it runs, what a right result
establishes (``Evidence``), and whether it needs a GPU or may be timed. The parent chooses one (``choose_mode``)
and the runner starts ``python -m tklab.grading.child --mode NAME``; how the child runs each mode is the child's
(``tklab.grading.child.RUNNERS``), so nothing here imports it.

Modes, in order of preference for a learner's run (``choose_mode`` takes the first that fits): ``gpu`` (this
machine's GPU), ``emu`` (the PTX the compiler built, interpreted on the CPU), ``sim`` (numba's CUDA simulator:
practice, where numba cannot compile to PTX), ``practice`` (no NVRTC: the source built as host C++). Asked for by
name only: ``reference`` (the reference solution timed for a concept floor), ``numba-ptx`` (a numba kernel
compiled to PTX, nothing run), ``hazards`` (the emulator's second opinion beside a GPU run), ``trace``
(``tklab.trace`` of an exercise), ``cpu`` (a drill's Python function).

Public API: ``Mode``, ``MODES``, ``choose_mode(spec, have_gpu)``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from . import cases
from .verdict import Evidence


@dataclass(frozen=True)
class Mode:
    """One way to run an exercise (see the module docstring); ``cases(spec)`` are the cases it runs."""

    name: str
    evidence: Evidence
    languages: tuple[str, ...]
    needs_gpu: bool
    cases: Callable[[Any], Sequence[dict[str, int]]]
    can_bench: bool = False
    env: tuple[tuple[str, str], ...] = ()
    note: str = ""
    chosen: bool = True  # False: asked for by name only, never chosen for a learner's run

    def takes(self, spec: Any, have_gpu: bool) -> bool:
        return self.chosen and spec.language in self.languages and (have_gpu or not self.needs_gpu) and \
            bool(self.cases(spec))


def _none(spec: Any) -> tuple[dict[str, int], ...]:
    return ()


_MODES = (
    Mode("gpu", Evidence.GPU, ("cuda", "numba"), True, lambda s: s.cases, can_bench=True,
         env=(("NUMBA_ENABLE_CUDASIM", "0"),)),
    # Without a GPU: the PTX the checking process compiled (CUDA: NVRTC; numba: a "numba-ptx" child), interpreted
    # on the CPU (tklab.emulate.interp), at the exercise's smaller cases, no timing. Preferred to the simulator.
    Mode("emu", Evidence.CPU_EMULATION, ("cuda", "numba"), False, cases.runnable_cases,
         note="the PTX the compiler built, interpreted on the CPU: correctness only, no timing; the speed is "
         "measured on a GPU only"),
    # Where numba cannot compile to PTX (no NVVM: macOS), numba's CUDA simulator runs the kernel as Python in the
    # child that sends the outputs: practice only, like the native CUDA build (tklab grade and nbgrade refuse it).
    Mode("sim", Evidence.CPU_PRACTICE, ("numba",), False, lambda s: s.sim_cases, env=(("NUMBA_ENABLE_CUDASIM", "1"),),
         note="a practice run in numba's CUDA simulator on tiny shapes (no NVVM here to compile the kernel to "
         "PTX): not a graded verdict; speed is measured on a GPU only"),
    # A concept floor's yardstick on a GPU: the reference solution timed in a child of its own, around the
    # learner's run.
    Mode("reference", Evidence.GPU, ("cuda",), True, _none, can_bench=True, chosen=False),
    # A numba kernel compiled to PTX, nothing run (tklab.grading.numba_ptx).
    Mode("numba-ptx", Evidence.NOT_ESTABLISHED, ("numba",), False, _none, env=(("NUMBA_ENABLE_CUDASIM", "0"),),
         chosen=False),
    # Without NVRTC (macOS) there is no PTX to interpret: the source built as host C++ runs natively in the
    # sandboxed child. Practice only: a second program, not the one a GPU would run; grade and nbgrade refuse it.
    Mode("practice", Evidence.CPU_PRACTICE, ("cuda",), False, cases.practice_cases,
         note="a practice run without NVRTC (the source built as host C++ on this machine): not a graded verdict; "
         "install NVRTC (pip, Linux) for one"),
    # A GPU check's second opinion: the emulator's hazard analysis of one or two small cases.
    Mode("hazards", Evidence.CPU_EMULATION, ("cuda",), False, cases.hazard_cases, chosen=False),
    # tklab.trace(exercise_id): the first emulated case with the emulator's trace on.
    Mode("trace", Evidence.CPU_EMULATION, ("cuda",), False, cases.traced_cases, chosen=False),
    # Drills (tklab.grading.drills): a Python function answering a hardware rule, checked against the models.
    Mode("cpu", Evidence.CPU, ("python",), False, lambda s: s.cases,
         note="a drill: your function's answers, compared with the course's model of the hardware"),
)

#: Modes by name, in order of preference.
MODES: dict[str, Mode] = {m.name: m for m in _MODES}


def choose_mode(spec: Any, have_gpu: bool) -> Mode | None:
    """The preferred mode that can run ``spec`` here (None: nothing can, correctness is not established)."""
    return next((m for m in MODES.values() if m.takes(spec, have_gpu)), None)
