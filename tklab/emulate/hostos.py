"""What the emulator's build does differently on macOS, as pure functions of the host (tested for both).

The emulator needs only a host C++ compiler, but Linux and macOS differ where it links and inspects what it
built: GNU ld's ``-soname``/``-l:``/``-z defs``/``$ORIGIN`` against Mach-O's ``-install_name``/``@loader_path``
(undefined symbols are an error there by default), ``nm -D`` against ``nm -g`` with a leading underscore on
every C symbol, real-time signals (macOS has none: the watchdog uses ``SIGUSR2``), ``<ucontext.h>`` only with
``_XOPEN_SOURCE`` (and ``_DARWIN_C_SOURCE`` to keep ``MAP_ANONYMOUS``), and ``RLIMIT_AS``, which macOS accepts
but does not enforce (a compiler's memory is watched instead).

``TKLAB_EMU_PORTABLE=1`` puts Linux on the Mac's path wherever Linux allows it (the watchdog signal, the
``_XOPEN_SOURCE`` build, linking the runtime by its path, ``nm -g``, the watched memory limit, clang when
installed; ``TKLAB_EMU_LIBCXX=1`` adds libc++), so the code a Mac runs is exercised here; only the Mach-O flags
themselves cannot be.

Public API: ``Host``, ``current()``, ``defines(host)``, ``watchdog_signal(host)``, ``runtime_link(host, name)``,
``module_link(host, runtime)``, ``nm_command(host, undefined)``, ``symbol(host, raw)``, ``memory_limit(host)``,
``stdlib(host, family, installed)``, ``prefers_clang(host)``.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Host:
    """``system``: ``"linux"`` or ``"darwin"`` (``sys.platform``); ``portable``: Linux taking the Mac's path;
    ``libcxx``: ... with the Mac's C++ library too (``TKLAB_EMU_LIBCXX=1``; see ``stdlib``)."""

    system: str
    portable: bool = False
    libcxx: bool = False

    @property
    def darwin(self) -> bool:
        return self.system == "darwin"

    @property
    def mac_path(self) -> bool:
        """Whether the code the Mac runs is used (on a Mac, or on Linux in portable mode)."""
        return self.darwin or self.portable


def current() -> Host:
    """This machine (``TKLAB_EMU_PORTABLE=1``: Linux on the Mac's path)."""
    system = "darwin" if sys.platform == "darwin" else "linux"
    return Host(system, portable=_on("TKLAB_EMU_PORTABLE"), libcxx=_on("TKLAB_EMU_LIBCXX"))


def _on(variable: str) -> bool:
    return os.environ.get(variable, "") not in ("", "0")


def watchdog_signal(host: Host) -> str:
    """The signal that interrupts a kernel thread stuck in a loop (a C expression)."""
    return "SIGUSR2" if host.mac_path else "SIGRTMIN + 7"


def defines(host: Host) -> list[str]:
    """Preprocessor flags of the runtime and of every module (they share its headers)."""
    if not host.mac_path:
        return []
    out = ["-D_XOPEN_SOURCE=700", "-DTKEMU_PORTABLE=1", f"-DTKEMU_WATCHDOG_SIGNAL={watchdog_signal(host)}"]
    if host.darwin:
        out.insert(1, "-D_DARWIN_C_SOURCE")  # _XOPEN_SOURCE alone hides MAP_ANONYMOUS, MAP_NORESERVE there
    return out


def runtime_link(host: Host, name: str) -> list[str]:
    """Flags that make the runtime a shared library that modules find beside themselves."""
    if host.darwin:
        return ["-dynamiclib", f"-Wl,-install_name,@rpath/{name}"]
    return ["-shared", f"-Wl,-soname,{name}"]


def module_link(host: Host, runtime: Path) -> list[str]:
    """Flags that link a module against ``runtime`` (a copy in the module's own folder), every symbol
    resolved at link time (Mach-O's default; ``-z defs`` on Linux)."""
    if host.darwin:
        return ["-dynamiclib", str(runtime), "-Wl,-rpath,@loader_path"]
    if host.portable:  # by its path, as on the Mac (GNU ld records its soname)
        return ["-shared", str(runtime), "-Wl,-rpath,$ORIGIN", "-Wl,-z,defs"]
    return ["-shared", f"-L{runtime.parent}", f"-l:{runtime.name}", "-Wl,-rpath,$ORIGIN", "-Wl,-z,defs"]


def nm_command(host: Host, undefined: bool) -> list[str]:
    """``nm`` listing a shared library's external undefined (or defined) symbols."""
    which = "--undefined-only" if undefined else "--defined-only"
    if host.mac_path:
        return ["nm", "-g", which]  # Mach-O has no separate dynamic symbol table (no -D)
    return ["nm", "-D", which]


def symbol(host: Host, raw: str) -> str:
    """A symbol as C/C++ names it: ELF version suffix dropped, Mach-O's leading underscore dropped."""
    name = raw.split("@")[0]
    if host.darwin and name.startswith("_"):
        name = name[1:]
    return name


#: What a module may call on macOS beyond what it may on Linux (thread-locals, lazy binding, Apple's libm).
DARWIN_RUNTIME_CALLS = r"_tlv_bootstrap|dyld_stub_binder|__bzero|bzero|__stack_chk_guard|__(sincos|sincospi)f?_stret"
DARWIN_RUNTIME_CALLS += r"|__exp10f?"


def memory_limit(host: Host) -> str:
    """How a compiler call's memory is limited: ``"rlimit"`` (``RLIMIT_AS``, inherited by the compiler's own
    children) or ``"watch"`` (its process tree's resident memory polled, the tree killed past the limit)."""
    return "watch" if host.mac_path else "rlimit"


def stdlib(host: Host, family: str, installed: bool) -> list[str]:
    """The C++ standard library flag: a Mac's clang uses libc++ by default; portable mode with ``libcxx`` asks
    clang for it too where it is ``installed`` (Debian's ``libc++-dev``), so the headers a Mac sees are compiled
    here. Opt-in only: on Linux, a libc++ runtime loaded into a process (``RTLD_GLOBAL``) lends its C++ ABI symbols
    to libraries loaded after it that were built against libstdc++ (matplotlib's crashed), so it belongs in a
    process of its own."""
    if host.portable and host.libcxx and not host.darwin and family == "clang" and installed:
        return ["-stdlib=libc++"]
    return []


def prefers_clang(host: Host) -> bool:
    """Whether clang++ is tried before g++ (Apple's ``g++`` is clang anyway; portable mode copies the Mac)."""
    return host.mac_path
