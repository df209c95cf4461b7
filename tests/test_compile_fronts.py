"""The fronts of NVRTC's compile (``tklab.compile``, ``tklab.emulate.compile``) take its keyword parameters from their
one home, ``tklab.toolchain.compiler.compile``, and still show every one in their signatures (what ``help()`` and
Jupyter's Shift-Tab show); the emulator's error kinds are each a class of their own, found by the kind the runtime
reports."""

from __future__ import annotations

import inspect

import pytest

import tklab
from tklab import emulate
from tklab.emulate import errors
from tklab.toolchain import compiler


def _keywords(fn: object) -> dict[str, object]:
    return {n: p.default for n, p in inspect.signature(fn).parameters.items() if p.kind is p.KEYWORD_ONLY}


def test_each_front_shows_every_compile_option_with_its_default() -> None:
    home = _keywords(compiler.compile)
    assert set(home) == {"arch", "name", "options", "include_dirs", "name_expressions", "line_offset"}
    front = _keywords(tklab.compile)
    assert list(front) == ["target", *home] and front["target"] == "gpu"
    assert {n: front[n] for n in home} == home
    emu = _keywords(emulate.compile)
    assert list(emu) == ["arch", "engine", *(n for n in home if n != "arch")]
    assert emu["arch"] == compiler.COURSE_ARCH and emu["engine"] is None
    assert not any(p.kind is p.VAR_KEYWORD for p in inspect.signature(tklab.compile).parameters.values())


@pytest.mark.parametrize("front, own", [(tklab.compile, {}), (tklab.compile, {"target": "cpu"}),
                                       (emulate.compile, {"engine": "native"})])
def test_an_option_no_compile_takes_is_refused_by_name(front: object, own: dict[str, str]) -> None:
    # refused before anything compiles (the native build would otherwise pass over it)
    with pytest.raises(TypeError, match="unexpected keyword argument 'include_dir'"):
        front("not compiled", include_dir=["x"], **own)  # type: ignore[operator]
    with pytest.raises(TypeError, match="source"):
        front(arch="sm_80")  # type: ignore[operator]


def test_each_error_kind_is_its_own_class() -> None:
    kinds = errors.EmulationError.__subclasses__()
    assert len(kinds) >= 9 and len({k.kind for k in kinds}) == len(kinds)
    for k in kinds:
        assert errors.error_class(k.kind) is k and k.__doc__ and k.__module__ == errors.__name__
        assert getattr(emulate, k.__name__) is k
    assert errors.error_class("no such kind") is errors.EmulationError
    assert errors.error_class("race") is emulate.SharedRace and isinstance(emulate.SharedRace("x"), RuntimeError)
