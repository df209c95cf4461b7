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
    """``--dist loadscope`` with the scopes of ``xdist_scope``; any other ``--dist`` is xdist's own."""
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ByModuleAndExercise(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return xdist_scope(nodeid)

    return ByModuleAndExercise(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
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
