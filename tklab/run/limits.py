"""What a launch configuration of the course's kernels must fit, checked before anything runs.

Why: a launcher that accepts a configuration promises it compiles, fits the device, does not spill and
cannot hang. ``attention.build`` and ``gemm`` refuse what they can see before compiling (shared memory
against the per-block limit here); ``check_compiled`` refuses what only the compiled module shows (spilled
registers, shared memory, a register file the block cannot get). The register split of warp-specialised
kernels (``setmaxnreg``) is checked at compile time by the library itself (``warpgroup::register_split``).

    SHARED_OPTIN                     per-block opt-in shared memory by compute capability (bytes)
    shared_limit(arch)               the device's own when a GPU of that arch is here, else SHARED_OPTIN
    check_shared(what, bytes, arch)  ConfigError when a block asks for more
    launch_registers(threads)        registers per thread a block of ``threads`` starts with (launch bounds)
    launch_pool(threads)             the registers such a block owns, which setmaxnreg moves between warpgroups
    check_compiled(kernel, ...)      ConfigError for spills, shared memory or registers that do not fit
    ConfigError                      a ValueError whose message says what to change
"""

from __future__ import annotations

import re
from typing import Any

#: Shared memory one block may opt in to (``cudaFuncAttributeMaxDynamicSharedMemorySize`` plus static), by
#: compute capability, from the CUDA C++ Programming Guide's table of per-capability limits: 227 KB on
#: H100/H200 (sm_90), 163 KB on A100 (sm_80), 99 KB on sm_86/sm_89.
SHARED_OPTIN: dict[int, int] = {80: 163 * 1024, 86: 99 * 1024, 87: 163 * 1024, 89: 99 * 1024, 90: 227 * 1024}
#: 32-bit registers of an SM, and so the most one block can hold.
REGISTER_FILE = 65536
#: Registers are handed to a thread in units of this many, and a thread holds at most MAX_THREAD_REGISTERS (ptxas's
#: 255 addressable, rounded up to the unit).
REGISTER_UNIT, MAX_THREAD_REGISTERS = 8, 256


def launch_registers(threads: int) -> int:
    """Registers per thread a block of ``threads`` starts with under ``__launch_bounds__(threads, 1)``: the register
    file shared out in whole units, at most MAX_THREAD_REGISTERS. The library's ``warpgroup::launch_registers`` is
    the same rule in C++ (tests/test_guards.py holds the two equal)."""
    return min(REGISTER_FILE // threads // REGISTER_UNIT * REGISTER_UNIT, MAX_THREAD_REGISTERS)


def launch_pool(threads: int) -> int:
    """The registers a block of ``threads`` owns at launch: what ``setmaxnreg`` moves between its warpgroups, so
    what a producer/consumer split must fit (less than the register file when ``threads`` does not divide it in
    whole units: the library's ``warpgroup::register_split`` checks a split against it)."""
    return launch_registers(threads) * threads


class ConfigError(ValueError):
    """A configuration that would not compile, fit, run without spilling, or finish; the message says why."""


def _capability(arch: str) -> int:
    m = re.fullmatch(r"sm_(\d+)a?", arch)
    if m is None:
        raise ValueError(f"not an arch: {arch!r} (expected e.g. 'sm_90a')")
    return int(m.group(1))


def shared_limit(arch: str | None = None) -> int:
    """Bytes of shared memory one block may use: this GPU's opt-in limit when it is of ``arch`` (or ``arch``
    is None), else the table's for ``arch`` (sm_80's when neither is known)."""
    from . import gpu

    if gpu.available() and (arch is None or _capability(gpu.arch()) == _capability(arch)):
        return int(gpu.properties().max_shared_per_block_optin)
    cc = _capability(arch or "sm_80")
    if cc not in SHARED_OPTIN:
        raise ValueError(f"no shared-memory limit known for {arch}; known: {sorted(SHARED_OPTIN)}")
    return SHARED_OPTIN[cc]


def check_shared(what: str, shared_bytes: int, arch: str | None) -> None:
    """ConfigError when a block of ``what`` needs more shared memory than ``arch`` gives one block."""
    limit = shared_limit(arch)
    if shared_bytes > limit:
        raise ConfigError(f"{what} needs {shared_bytes:,} B of shared memory per block, more than the {limit:,} B "
                          f"a block can have on {arch or 'this GPU'}: use smaller tiles (keys per block BC) or fewer "
                          "stages")


def check_compiled(kernel: Any, *, what: str, dynamic_shared: int, threads: int, arch: str | None) -> None:
    """ConfigError unless the compiled ``kernel`` (a tklab.Kernel) spills nothing, fits shared memory with its
    dynamic part, and its registers at launch times ``threads`` fit the register file."""
    if kernel.spill_bytes or kernel.stack_bytes:
        raise ConfigError(f"{what} spills: ptxas moved {kernel.spill_bytes} B of registers to local memory "
                          f"(stack {kernel.stack_bytes} B) at {kernel.registers} registers per thread, so every "
                          "spilled value costs a memory round trip: use fewer keys per block (BC), or more registers "
                          "per thread (fewer warpgroups)")
    check_shared(what, dynamic_shared + kernel.shared_bytes, arch)
    if kernel.registers * threads > REGISTER_FILE:
        raise ConfigError(f"{what}: {kernel.registers} registers x {threads} threads = {kernel.registers * threads:,} "
                          f"is more than the {REGISTER_FILE:,} registers of an SM: the launch would fail")
