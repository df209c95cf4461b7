"""The host C++ compiler the emulator uses: ``$CXX``, then ``g++``, ``clang++``, ``c++`` (``clang++`` first on
macOS, whose ``g++`` is clang anyway, and in ``TKLAB_EMU_PORTABLE`` mode, which copies the Mac), then the clang
that the ``ziglang`` wheel ships (``pip install ziglang``), for machines with no compiler of their own.

Public API: ``find() -> Compiler`` (raises ``NoCompiler`` with what to install), ``Compiler``.
"""

from __future__ import annotations

import functools
import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass

from . import hostos


class NoCompiler(RuntimeError):
    """No usable C++20 compiler: the message says what to install."""


@dataclass(frozen=True)
class Compiler:
    """A C++ compiler command (``argv`` prefix), its family (``gcc``/``clang``) and version line."""

    argv: tuple[str, ...]
    family: str
    version: str

    @property
    def description(self) -> str:
        return f"{' '.join(self.argv)} ({self.version})"


def _probe(argv: list[str]) -> Compiler | None:
    try:
        out = subprocess.run([*argv, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    first = (out.stdout or out.stderr).strip().splitlines()[0] if (out.stdout or out.stderr).strip() else "?"
    family = "clang" if "clang" in (out.stdout + out.stderr).lower() else "gcc"
    return Compiler(tuple(argv), family, first)


def _candidates() -> list[list[str]]:
    found: list[list[str]] = []
    if os.environ.get("CXX"):
        found.append(shlex.split(os.environ["CXX"]))
    names = ("clang++", "g++", "c++") if hostos.prefers_clang(hostos.current()) else ("g++", "clang++", "c++")
    for name in names:
        path = shutil.which(name)
        if path:
            found.append([path])
    try:
        import ziglang  # noqa: F401 - only to know the wheel is there

        found.append([sys.executable, "-m", "ziglang", "c++"])
    except ImportError:
        pass
    return found


@functools.lru_cache(maxsize=1)
def find() -> Compiler:
    """The first candidate that answers ``--version``."""
    for argv in _candidates():
        c = _probe(argv)
        if c is not None:
            return c
    raise NoCompiler("running kernels on the CPU needs a C++20 compiler: install g++ or clang++ "
                     f"({_install_hint(sys.platform)}), or `pip install ziglang` for one from PyPI")


def _install_hint(platform: str) -> str:
    """How to get a compiler on this system."""
    if platform == "darwin":
        return "on a Mac: `xcode-select --install` gives clang++"
    return "e.g. `apt install g++`"
