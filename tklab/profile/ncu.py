"""Nsight Compute's command line (``ncu``): finding it, asking what it can measure, running it, and saying
clearly why it could not.

``ncu`` comes with the CUDA toolkit (``<cuda>/bin/ncu``) or the Nsight Compute installer; tklab never
installs it. ``TKLAB_NCU=/path/to/ncu`` picks one explicitly. A profile is two calls:

1. ``ncu --clock-control none ... --export REPORT python -m tklab.profile.child RECIPE``: the child
   re-creates the launch and runs it ``warmup + 1`` times; ncu profiles the last one (``--launch-skip``).
   ``--clock-control none`` leaves the clocks where the GPU runs them, so durations match ``tklab.bench``
   rather than ncu's locked base clock.
2. ``ncu --import REPORT --csv --page raw --print-units base``: the metrics as one CSV row.

Metrics are requested by name only when this ncu knows them (``ncu --query-metrics``, cached per ncu and
GPU in the tklab cache folder): one unknown name makes ncu refuse the whole run.

Public API: ``find_ncu()``, ``version(ncu)``, ``available_metrics(ncu, device)``, ``available_sections(ncu)``,
``metrics_to_request(...)``, ``profile_command(...)``, ``run_profile(...)``, ``ProfileUnavailable``,
``WANTED_METRICS``, ``WANTED_SECTIONS``.
"""

from __future__ import annotations

import contextlib
import functools
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from ..paths import REPO
from .result import STALL_TEXT, M

_PACKAGE_PARENT = REPO

#: Sections whose metrics complete the picture (warp stalls above all); kept only if this ncu lists them.
WANTED_SECTIONS = ("SpeedOfLight", "LaunchStats", "Occupancy", "WarpStateStats", "ComputeWorkloadAnalysis",
                   "MemoryWorkloadAnalysis")

#: Metrics the result reads, plus the stall reasons by name (sections may not carry all of them).
WANTED_METRICS: tuple[str, ...] = tuple(dict.fromkeys(
    [n for attr in vars(M).values() if isinstance(attr, tuple) for n in attr]
    + list(M.limits.values())
    + [f"smsp__average_warps_issue_stalled_{r}_per_issue_active.ratio" for r in STALL_TEXT]
    + ["launch__grid_size", "launch__block_size", "launch__shared_mem_per_block_dynamic",
       "launch__shared_mem_per_block_static", "device__attribute_display_name"]))

#: Shared-memory metrics measured on this project's H200 with ncu 2025.3 (bench/probes/banks_probe.py): what
#: is requested when ``--query-metrics`` cannot be read, besides the duration.
KNOWN_GOOD = ("gpu__time_duration.sum", "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
              "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum", "smsp__inst_executed_op_shared_ld.sum",
              "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum",
              "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum", "smsp__inst_executed_op_shared_st.sum",
              "l1tex__data_pipe_lsu_wavefronts_mem_shared.sum", "smsp__inst_executed_op_ldsm.sum")

PERMISSION_HELP = (
    "Nsight Compute is installed, but this user may not read the GPU's performance counters "
    "(ERR_NVGPUCTRPERM). An administrator can allow it for everyone with the driver option "
    "NVreg_RestrictProfilingToAdminUsers=0 (a line 'options nvidia NVreg_RestrictProfilingToAdminUsers=0' "
    "in /etc/modprobe.d/, then reboot), or run the profile as root; in a container, start it with "
    "--cap-add=SYS_ADMIN. See https://developer.nvidia.com/ERR_NVGPUCTRPERM")


class ProfileUnavailable(RuntimeError):
    """A profile cannot be taken here; ``reason`` is "no-gpu", "no-ncu", "permission", "failed" or "timeout"."""

    def __init__(self, reason: str, message: str, output: str = ""):
        self.reason, self.output = reason, output
        super().__init__(message)

    def _render_traceback_(self) -> list[str]:
        """IPython shows the message alone: the learner needs what to do, not tklab's call stack."""
        return [f"ProfileUnavailable: {self}"]


def find_ncu() -> str | None:
    """Path of ncu: ``$TKLAB_NCU``, then ``PATH``, then the usual CUDA toolkit and Nsight Compute folders."""
    chosen = os.environ.get("TKLAB_NCU")
    if chosen:
        return chosen if os.path.isfile(chosen) and os.access(chosen, os.X_OK) else None
    cands: list[str | None] = [shutil.which("ncu")]
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root:
            cands.append(os.path.join(root, "bin", "ncu"))
    cands += sorted(glob.glob("/usr/local/cuda-*/bin/ncu"), reverse=True)
    cands += sorted(glob.glob("/opt/nvidia/nsight-compute/*/ncu"), reverse=True)
    for c in cands:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return None


def missing_message() -> str:
    chosen = os.environ.get("TKLAB_NCU")
    if chosen:
        return f"TKLAB_NCU={chosen} is not an executable file: point it at Nsight Compute's ncu"
    return ("Nsight Compute (ncu) is not installed here: it comes with the CUDA toolkit (<cuda>/bin/ncu) or "
            "from https://developer.nvidia.com/nsight-compute; put it on PATH or set TKLAB_NCU=/path/to/ncu")


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["LC_ALL"] = "C"  # numbers as 1,234.5 whatever the user's locale
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(_PACKAGE_PARENT), env.get("PYTHONPATH")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _quick(cmd: Sequence[str], timeout: float = 120.0) -> tuple[int, str]:
    try:
        done = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout, env=_env())
    except (OSError, subprocess.SubprocessError) as e:
        return -1, str(e)
    return done.returncode, done.stdout + done.stderr


@functools.cache
def version(ncu: str) -> str:
    """``"2025.3.1.0"`` (or ncu's version line as printed, or "" if it would not say)."""
    _, out = _quick([ncu, "--version"], 60.0)
    m = re.search(r"Version\s+([\d.]+)", out)
    if m:
        return m.group(1)
    lines = [ln.strip() for ln in out.splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def parse_metric_list(text: str) -> set[str]:
    """Base metric names in ``ncu --query-metrics`` output (one metric per line, name first)."""
    return set(re.findall(r'^\s*"?([a-z][a-z0-9]*__[a-z0-9_]+)', text, re.M))


def parse_section_list(text: str) -> set[str]:
    """Section identifiers in ``ncu --list-sections`` output (identifier first on each row)."""
    return {m for m in re.findall(r'^\s*"?([A-Z][A-Za-z0-9_]*)\b', text, re.M)}


def _cache_file() -> Path:
    from ..toolchain import cache

    return cache.cache_dir() / "ncu_queries.json"


def _cached(key: str, compute: Callable[[], set[str]]) -> list[str]:
    path = _cache_file()
    try:
        saved = json.loads(path.read_text())
    except (OSError, ValueError):
        saved = {}
    if key not in saved:
        value = compute()
        if not value:
            return []
        saved[key] = sorted(value)
        with contextlib.suppress(OSError):
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(saved, indent=0))
    return list(saved[key])


def available_metrics(ncu: str, device: str) -> set[str]:
    """Base names of the metrics this ncu can collect on this GPU (empty if it would not say)."""
    def query() -> set[str]:
        code, out = _quick([ncu, "--query-metrics"], 180.0)
        found = parse_metric_list(out) if code == 0 else set()
        return found if len(found) >= 50 else set()  # fewer: the listing was not what we can read

    return set(_cached(f"metrics|{ncu}|{version(ncu)}|{device}", query))


def available_sections(ncu: str) -> set[str]:
    def query() -> set[str]:
        code, out = _quick([ncu, "--list-sections"], 120.0)
        return parse_section_list(out) & set(WANTED_SECTIONS) if code == 0 else set()

    return set(_cached(f"sections|{ncu}|{version(ncu)}", query))


def metrics_to_request(available: set[str], extra: Iterable[str] = ()) -> list[str]:
    """``WANTED_METRICS`` that this ncu knows (by base name), the known-good set if it would not say, and
    ``extra`` (metrics asked for by name), which must be known: a misspelt name is an error, not a gap."""
    extra = list(extra)
    unknown = [m for m in extra if available and m.split(".", 1)[0] not in available]
    if unknown:
        raise ValueError(f"ncu on this GPU has no metric {', '.join(map(repr, unknown))} "
                         "(`ncu --query-metrics` lists them; add a suffix such as .sum or .avg)")
    if not available:
        return list(dict.fromkeys([*KNOWN_GOOD, *extra]))
    return list(dict.fromkeys([m for m in WANTED_METRICS if m.split(".", 1)[0] in available] + extra))


def profile_command(ncu: str, recipe_dir: Path, report: Path, *, kernel: str, warmup: int,
                    metrics: Sequence[str], sections: Iterable[str]) -> list[str]:
    """The ncu command that profiles launch ``warmup + 1`` of ``kernel`` (its mangled name) in the child."""
    cmd = [ncu, "--clock-control", "none", "--target-processes", "all", "--kernel-name-base", "mangled",
           "--kernel-name", f"regex:^{re.escape(kernel)}$", "--launch-skip", str(warmup), "--launch-count", "1"]
    for s in sorted(sections):
        cmd += ["--section", s]
    if metrics:
        cmd += ["--metrics", ",".join(metrics)]
    cmd += ["--export", str(report), "--force-overwrite", sys.executable, "-m", "tklab.profile.child", str(recipe_dir)]
    return cmd


def import_command(ncu: str, report: Path) -> list[str]:
    return [ncu, "--import", str(report), "--csv", "--page", "raw", "--print-units", "base"]


def classify(returncode: int, output: str) -> ProfileUnavailable | None:
    """None if ncu's run looks fine, else the error to raise, with what to do about it."""
    tail = "\n".join(output.strip().splitlines()[-25:])
    if "ERR_NVGPUCTRPERM" in output or "permission to access NVIDIA GPU Performance Counters" in output:
        return ProfileUnavailable("permission", PERMISSION_HELP, output)
    if "No kernels were profiled" in output:
        return ProfileUnavailable("failed", "ncu ran the launch but profiled no kernel (did the child fail before "
                                  f"launching?). ncu said:\n{tail}", output)
    if returncode != 0:
        return ProfileUnavailable("failed", f"ncu failed (exit {returncode}). Its last lines:\n{tail}", output)
    return None


def _run(cmd: Sequence[str], timeout: float, cwd: Path) -> tuple[int, str]:
    """Run ``cmd`` in its own process group; kill the whole group at the time limit."""
    proc = subprocess.Popen(list(cmd), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=_env(),
                            cwd=cwd, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        raise ProfileUnavailable("timeout", f"the profile did not finish within {timeout:.0f} s (ncu replays the "
                                 "kernel once per pass: a slow kernel takes many times its run time); pass "
                                 "timeout= to wait longer", out or "") from None
    return proc.returncode, out


_UNKNOWN_METRIC = re.compile(r"Failed to find metric\s+(?:regex:)?\^?([a-z][a-z0-9]*__[a-z0-9_]+)")


def run_profile(ncu: str, recipe_dir: Path, *, kernel: str, warmup: int, metrics: Sequence[str],
                sections: Iterable[str], timeout: float = 300.0, required: Sequence[str] = ()
                ) -> tuple[str, str, list[str]]:
    """Profile the recipe's launch; returns (CSV of the raw page, ncu's console output, metrics requested).

    A metric this ncu refuses (named in its error) is dropped and the profile retried; any other complaint
    about metrics falls back to ``KNOWN_GOOD``. The sections still bring their own metrics either way.
    """
    wanted, sections = list(metrics), list(sections)
    for _ in range(8):
        try:
            csv_text, out = _profile_once(ncu, recipe_dir, kernel=kernel, warmup=warmup, metrics=wanted,
                                          sections=sections, timeout=timeout)
            return csv_text, out, wanted
        except ProfileUnavailable as e:
            if e.reason != "failed" or (recipe_dir / "child_error.txt").exists():
                raise
            bad = set(_UNKNOWN_METRIC.findall(e.output))
            asked = sorted(m for m in required if m.split(".", 1)[0] in bad)
            if asked:
                raise ValueError(f"ncu refused the metric {', '.join(map(repr, asked))}: {e}") from None
            if bad and any(m.split(".", 1)[0] in bad for m in wanted):
                wanted = [m for m in wanted if m.split(".", 1)[0] not in bad]
            elif "metric" in e.output.lower() and set(wanted) != set(KNOWN_GOOD) | set(required):
                wanted = list(dict.fromkeys([*KNOWN_GOOD, *required]))
            else:
                raise
    raise ProfileUnavailable("failed", "ncu kept refusing the metrics asked for; see its output", "")


def _profile_once(ncu: str, recipe_dir: Path, *, kernel: str, warmup: int, metrics: Sequence[str],
                  sections: Iterable[str], timeout: float) -> tuple[str, str]:
    report = recipe_dir / "profile.ncu-rep"
    cmd = profile_command(ncu, recipe_dir, report, kernel=kernel, warmup=warmup, metrics=metrics, sections=sections)
    code, out = _run(cmd, timeout, recipe_dir)
    child_error = recipe_dir / "child_error.txt"
    if child_error.exists():
        raise ProfileUnavailable("failed", "re-creating the launch in the profiled process failed: "
                                 + child_error.read_text().strip(), out)
    problem = classify(code, out)
    if problem is not None:
        raise problem
    if not report.exists():
        raise ProfileUnavailable("failed", f"ncu wrote no report. Its output:\n{out[-3000:]}", out)
    code2, csv_text = _run(import_command(ncu, report), 120.0, recipe_dir)
    if code2 != 0 or '"ID"' not in csv_text:
        raise ProfileUnavailable("failed", f"ncu --import could not read the report (exit {code2}):\n"
                                 f"{csv_text[-2000:]}", csv_text)
    return csv_text, out
