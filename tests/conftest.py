"""Shared test setup: GPU markers skip cleanly on machines without a GPU (CI has none)."""

from __future__ import annotations

import os

import pytest

# Keep the compile cache of test runs apart from a learner's, and fresh per test session on CI.
os.environ.setdefault("TKLAB_CACHE_DIR", os.path.join(os.path.dirname(__file__), "..", ".cache", "tklab-tests"))
# Checks of exercises/ files record failed attempts (hint levels): tests keep theirs out of exercises/.
# Under pytest-xdist the compile cache is shared (atomic entries: a module built by one worker serves both), the
# hint state is one file per worker (two workers never write the same file).
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
os.environ.setdefault("TKLAB_HINT_STATE", os.path.join(os.path.dirname(__file__), "..", ".cache", "tklab-tests",
                                                       f"hints{'-' + _WORKER if _WORKER else ''}.json"))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "test_full: a slow guard that `make test-full` adds to `make test` (the "
                            "Makefile says why each is not needed on every commit)")
    if not hasattr(config, "workerinput"):  # once, in the process that starts the xdist workers (or the only one)
        _compile_sources()


def _compile_sources() -> None:
    """Byte-compile tklab and the exercises' specs before any test starts a Python process.

    Where ``PYTHONDONTWRITEBYTECODE`` is set (as on our CI machine) Python never writes ``__pycache__``, so every
    process the tests start (each ``python -m tklab check``, each sandboxed child, each notebook kernel) compiled
    tklab from its source again: about 0.1 s of CPU a process, thousands of them. ``compileall`` writes the
    bytecode whatever that variable says (a file whose bytecode is current is only looked at); Python checks each
    file's bytecode against the source's time and size on import, so an edited file is compiled again."""
    import compileall
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    compileall.compile_dir(root / "tklab", quiet=2)
    for spec in sorted((root / "solutions").glob("*/spec.py")):
        compileall.compile_file(spec, quiet=2)


def _gpu_arch() -> str | None:
    try:
        from tklab import gpu

        return gpu.arch() if gpu.available() else None
    except Exception:  # noqa: BLE001 - no driver, no bindings: no GPU
        return None


#: A planted-mistake test's node id ends in ``[<exercise>:<mutation>]`` (tests/test_planted_mistakes.py).
_PLANTED = "tests/test_planted_mistakes.py::test_planted_mistake_fails_and_benign_variant_passes["


def xdist_scope(nodeid: str) -> str:
    """The unit of work of one test under ``pytest -n N --dist loadscope`` (``make test``): its module, so a
    module-scoped fixture (a graded class, a built module, a hub) is built once, on one worker; but each
    exercise's planted suite on its own, so the suites (each builds its own mutations) spread over the workers.

    A custom scheduler, not ``xdist_group`` marks: xdist's loadgroup renames ``item._nodeid``, which pytest 9's
    nodes no longer read (the marks were silently ignored)."""
    if nodeid.startswith(_PLANTED):
        return "planted-" + nodeid[len(_PLANTED):].split(":", 1)[0]
    return nodeid.split("::", 1)[0]


@pytest.hookimpl(optionalhook=True, tryfirst=True)  # optional: a hook of pytest-xdist, which may be absent
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """``--dist loadscope`` with the scopes of ``xdist_scope``, handed out in the order the workers collected them
    (``_longest_first``); any other ``--dist`` is xdist's own."""
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ByModuleAndExercise(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return xdist_scope(nodeid)

    config.option.loadscopereorder = False  # xdist's own order (most tests first) would undo ``_longest_first``
    return ByModuleAndExercise(config, log)


#: Seconds of the longest units of work (``xdist_scope``) in the main step of a fresh clone's ``make test`` on our
#: 2-core CI machine (``--durations=0``, summed per unit), for the order only: a unit not named here counts
#: ``_PER_TEST`` seconds a test. Refresh it from such a run when the long units change; a stale entry costs only
#: balance, never a test.
_LONG = {"tests/test_check.py": 109, "planted-ch10_flash": 98, "tests/test_attention_bwd.py": 70,
         "tests/test_grade.py": 60, "planted-ch09_flash": 59, "tests/test_redteam_nbgrade.py": 54,
         "planted-ch04_swizzle": 53, "tests/test_isolation.py": 42, "tests/test_redteam_class.py": 35,
         "planted-ch07_tma_ring": 35, "planted-ch01_naive_matmul": 32, "planted-ch08_wgmma": 30,
         "tests/test_redteam_isolation.py": 28, "tests/test_nbgrade.py": 28, "tests/test_grade_shards.py": 26,
         "tests/test_overlap.py": 24, "tests/test_portable_emulator.py": 19, "planted-ch03_register_blocking": 17,
         "planted-ch02_smem_tiling": 16, "tests/test_deploy.py": 14, "tests/test_redteam_sheets.py": 13,
         "tests/test_attention_persistent.py": 13, "planted-ch07_ring_protocol": 13, "planted-ch06_tiles": 13,
         "tests/test_new_exercise.py": 12, "tests/test_hosted_start.py": 12, "tests/test_grading_rate.py": 12,
         "planted-ch05_mma": 12, "tests/test_kernel_guards.py": 10}
_PER_TEST = 0.05


def _longest_first(items: list[pytest.Item]) -> None:
    """The units of work longest first, each unit's tests in their order: a worker that takes a long unit last keeps
    the others waiting at the end; longest first, the short ones fill in at the end. Every worker sorts its
    collection the same way, and xdist hands the units out in that order (``pytest_xdist_make_scheduler``)."""
    units: dict[str, list[pytest.Item]] = {}
    for item in items:
        units.setdefault(xdist_scope(item.nodeid), []).append(item)
    order = sorted(units, key=lambda u: -_LONG.get(u, _PER_TEST * len(units[u])))
    items[:] = [item for u in order for item in units[u]]


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: object) -> None:
    """Tell each worker of ``--dist loadscope`` to collect longest first (a worker's own ``dist`` option reads "no")."""
    config = node.config  # type: ignore[attr-defined]
    if config.getvalue("dist") == "loadscope":
        node.workerinput["tklab_longest_first"] = True  # type: ignore[attr-defined]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if getattr(config, "workerinput", {}).get("tklab_longest_first"):
        _longest_first(items)
    arch = _gpu_arch()
    no_gpu = pytest.mark.skip(reason="needs an NVIDIA GPU (run `make gpu-check` on a GPU machine)")
    no_hopper = pytest.mark.skip(reason=f"needs an sm_90 GPU (H100/H200); this machine has {arch or 'no GPU'}")
    from tklab.toolchain import locate

    missing = locate.nvrtc_missing()
    no_nvrtc = pytest.mark.skip(reason=f"needs NVRTC: {(missing or '').split(';')[0]}")
    for item in items:
        if "nvrtc" in item.keywords and missing is not None:
            item.add_marker(no_nvrtc)
        if "gpu" in item.keywords and arch is None:
            item.add_marker(no_gpu)
        elif "hopper" in item.keywords and (arch is None or not arch.startswith("sm_90")):
            item.add_marker(no_hopper)


@pytest.fixture(scope="session")
def gpu_arch() -> str:
    arch = _gpu_arch()
    if arch is None:
        pytest.skip("needs an NVIDIA GPU")
    return arch


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    """Without NVRTC (macOS; ``TKLAB_NO_NVRTC=1``) a test that needs it is skipped with the reason, not failed.

    Only ``NvrtcUnavailable`` counts, which tklab raises only when NVRTC is missing: where it is installed,
    nothing is turned into a skip. ``tests/test_no_nvrtc.py`` is what checks that path itself.
    """
    outcome = yield
    report = outcome.get_result()
    if call.excinfo is None or report.passed:
        return
    from tklab.toolchain.locate import NvrtcUnavailable

    cause: BaseException | None = call.excinfo.value
    seen = 0
    while cause is not None and not isinstance(cause, NvrtcUnavailable) and seen < 8:  # also under pytest.warns/raises
        cause, seen = cause.__cause__ or cause.__context__, seen + 1
    if isinstance(cause, NvrtcUnavailable):
        report.outcome = "skipped"
        report.longrepr = (str(item.path), item.location[1] or 0, f"needs NVRTC: {str(cause)[:160]}")
