"""Drills: exercises of a few minutes, each about one hardware rule, checked on the CPU against the models.

A drill is an ``Exercise`` whose ``language`` is ``"python"``: the learner writes one small function
(``exercises/drills/<id>.py``, generated from ``solutions/drills/<id>.py`` like every exercise) that
answers a question the hardware answers — which bank, which lane, which parity, how many bytes. Its
``inputs`` enumerate the rule's domain (every case, or a fixed sample of a large domain), its
``reference`` asks the course's models (``tklab.models``: banks, layouts, occupancy; the attention block
map), which the tests hold to the hardware's measurements.

The check is the same as for a kernel: ``tklab.check("ch04_bank_passes")`` compiles nothing, runs the
static check (the function returns a value), then the sandboxed child (mode ``cpu``) calls the
learner's function on every input and sends the answers back as arrays; the parent compares them with
the model's. A wrong answer is reported with the arguments that gave it (``annotate``).

Public API: ``drill(...)``, ``answers(spec, fn, inputs, dims)``, ``ReturnsValue``, ``child(spec, path,
channel)``, ``annotate(result, spec)``, ``params(spec)``.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .spec_kit import Dims, Exercise, Launch, StaticResult, python_function


@dataclass(frozen=True)
class _Meta:
    params: tuple[str, ...]
    width: int  # numbers per answer (a tuple answer has several)
    wide: bool  # answers are 64-bit: each is sent as two 32-bit halves (float64 holds them exactly)


_META: dict[str, _Meta] = {}


def params(spec: Exercise) -> tuple[str, ...]:
    """The drill function's parameter names, in order."""
    return _META[spec.id].params


def _flat(value: Any, what: str) -> list[int]:
    """An answer as a list of whole numbers; a learner's odd return value becomes a clear error."""
    items = list(value) if isinstance(value, (tuple, list)) else [value]
    out = []
    for v in items:
        if isinstance(v, (bool, np.bool_)):
            out.append(int(v))
            continue
        try:
            out.append(operator.index(v))
        except TypeError:
            if isinstance(v, float) and v.is_integer():
                out.append(int(v))
            else:
                raise TypeError(f"{what} returned {value!r}: whole numbers are expected") from None
    return out


def _encode(meta: _Meta, numbers: list[int], what: str) -> list[float]:
    width = meta.width
    if len(numbers) != width:
        raise TypeError(f"{what} returned {len(numbers)} number{'s' if len(numbers) != 1 else ''}, "
                        f"{width} expected")
    if not meta.wide:
        return [float(n) for n in numbers]
    return [float(x) for n in numbers for x in ((n >> 32) & 0xFFFFFFFF, n & 0xFFFFFFFF)]


def answers(spec: Exercise, fn: Callable[..., Any], inputs: dict[str, np.ndarray], dims: Dims) -> np.ndarray:
    """``fn`` applied to every input row, encoded as the drill's output array (what the child sends)."""
    meta = _META[spec.id]
    n = dims["n"]
    out = np.full((n, meta.width * (2 if meta.wide else 1)), np.nan)
    for k in range(n):
        args = [int(inputs[p][k]) for p in meta.params]
        what = f"{spec.kernel}({', '.join(map(str, args))})"
        out[k] = _encode(meta, _flat(fn(*args), what), what)
    return out


def drill(*, id: str, title: str, chapter: str, function: str, params: Sequence[str],
          domain: Callable[[], Sequence[Sequence[int]]], rule: Callable[..., Any], width: int = 1,
          wide: bool = False) -> Exercise:
    """A drill: ``function(*params)`` must agree with ``rule`` (the model) on every row of ``domain()``."""
    meta = _Meta(tuple(params), width, wide)
    _META[id] = meta
    rows = np.asarray(domain(), dtype=np.int64).reshape(-1, len(params))
    n = len(rows)

    def inputs(rng: Any, d: Dims) -> dict[str, np.ndarray]:  # the whole domain, every time: no lucky pass
        return {p: rows[:, k].copy() for k, p in enumerate(params)}

    def reference(x: dict[str, np.ndarray], d: Dims) -> dict[str, np.ndarray]:
        return {"answer": answers(_spec_of(id), rule, x, d)}

    spec = Exercise(
        id=id, title=title, chapter=chapter, solution=f"solutions/drills/{id}.py", kernel=function,
        language="python", inputs=inputs,
        outputs=lambda d: {"answer": ((d["n"], width * (2 if wide else 1)), "float64")},
        reference=reference, launch=lambda d: Launch((1,), (1,)),
        args=lambda a, d: tuple(a[p] for p in params), cases=({"n": n},),
        shapes=f"every one of the {n} cases of its domain", rtol=0.0, atol=0.0,
        static=(ReturnsValue(),), untouched=("returns a value", "never returns a value"))
    _SPECS[id] = spec
    return spec


_SPECS: dict[str, Exercise] = {}


def _spec_of(exercise_id: str) -> Exercise:
    return _SPECS[exercise_id]


@dataclass(frozen=True)
class ReturnsValue:
    """The drill's function exists and returns something (the untouched stub only ``pass``es)."""

    name: str = "returns a value"

    def run(self, ctx: Any) -> StaticResult:
        fn = python_function(ctx, self.name, "; keep the name the drill gives")
        if isinstance(fn, StaticResult):
            return fn
        returns = [n for n in ast.walk(fn) if isinstance(n, ast.Return) and n.value is not None]
        if not returns:
            return StaticResult(self.name, False, f"{ctx.spec.kernel} never returns a value: fill in the TODO")
        return StaticResult(self.name, True, f"{ctx.spec.kernel} returns at line {returns[0].lineno}")


def child(spec: Exercise, path: Path, chan: Any) -> None:
    """In the sandboxed child: import the learner's file, answer every input row, send the answers."""
    from .in_child import import_file, stage

    stage("importing")
    module = import_file(path, f"tklab_drill_{spec.id}")
    fn = getattr(module, spec.kernel, None)
    if not callable(fn):
        raise AttributeError(f"{path.name} defines no function named {spec.kernel}")
    chan.send("device", name="CPU (Python)")
    for i, dims in enumerate(chan.cases):
        stage(f"answering {dims['n']} cases")
        got = answers(spec, fn, chan.inputs(i), dims)
        chan.send("launched", case=i, count=int(dims["n"]))  # the harness called the function itself, per row
        chan.send_outputs(i, {"answer": got})


def annotate(res: Any, spec: Exercise) -> None:
    """A wrong answer, said with the arguments that gave it (the drill's domain is deterministic)."""
    if spec.language != "python":
        return
    if res.run_status == "ok":
        res.run_message = f"right on all {spec.cases[0]['n']} cases of its domain"
    m = res.mismatch
    if not m or "index" not in m:
        return
    meta = _META[spec.id]
    dims = m.get("dims") or spec.cases[0]
    x = spec.inputs(None, dims)
    k = m["index"][0]
    args = ", ".join(f"{p}={int(x[p][k])}" for p in meta.params)
    expected = spec.reference(x, dims)["answer"][k]
    if meta.wide:
        expected = [int(expected[2 * j]) << 32 | int(expected[2 * j + 1]) for j in range(meta.width)]
    shown = [hex(int(v)) if meta.wide else int(v) for v in expected]
    res.notes.append(f"first wrong answer: {spec.kernel}({args}) should be "
                     f"{shown[0] if len(shown) == 1 else tuple(shown)}")
