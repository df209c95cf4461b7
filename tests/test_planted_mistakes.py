"""Planted-mistake suites (issue 23): every exercise of the registry has its ``solutions/<id>/planted.toml``, and
every typical mistake in it makes the real check (``python -m tklab check`` on the mutated solution) FAIL on the CPU
emulator, and every benign variant PASSES (the design exercises' suites too: a mistake there must fail in the run
itself, ``caught_by_run``).

An exercise's checks run together (one per CPU) when its first test asks (``Verdicts``), and a test reads
its verdict; under ``pytest -n`` the exercises spread over the workers (conftest.py's ``xdist_scope``).
A suite marked ``slow`` carries the marker ``planted_slow`` (`make planted-slow`); a variant marked ``extra`` runs
on the CPU only with ``TKLAB_PLANTED_FULL=1``. The GPU twin is tests/test_planted_mistakes_gpu.py.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import planted
import pytest

from tklab import gpu, specs
from tklab.grading import cases as emu_cases
from tklab.grading import judge

pytestmark = pytest.mark.skipif(gpu.available() or not emu_cases.can_run(specs.get("ch05_mma")),
                                reason="a GPU is here (its twin runs), or no C++ compiler for the emulator")

SEED = 23  # fixed: a CPU run is reproducible; the GPU twin draws three seeds
SUITES = {e: planted.suite(e) for e in planted.exercises()}
ALL = [m for s in SUITES.values() for m in s.mutations]


def _marks(m: planted.Mutation) -> list[pytest.MarkDecorator]:
    """Known gaps of the CPU path, each with its reason (strict: the day the emulator sees one, the test says
    so), the slow suites' marker, and a skip for a variant beyond its suite's core (unless TKLAB_PLANTED_FULL=1)."""
    marks = [pytest.mark.xfail(strict=True, reason=m.cpu_misses)] if m.cpu_misses else []
    if m.extra and not planted.FULL:
        marks.append(pytest.mark.skip(reason="beyond the suite's core: TKLAB_PLANTED_FULL=1 runs it on the CPU (a "
                                             "GPU always does)"))
    return marks + ([pytest.mark.planted_slow] if SUITES[m.exercise].slow else [])


CASES = [pytest.param(m, marks=_marks(m)) for m in ALL]


def test_every_exercise_has_its_planted_mistakes_and_benign_variants() -> None:
    """Every exercise keeps a suite, at least its ``least`` (mistakes, benign variants) in its core."""
    assert planted.exercises() and set(SUITES) == set(planted.exercises())
    for e, suite in SUITES.items():
        core = [m.benign for m in suite.mutations if not m.extra]
        assert core.count(False) >= suite.least[0] and core.count(True) >= suite.least[1], (e, suite.least)
        assert suite.least[0] >= 1 and suite.least[1] >= 1, e  # a suite holds a mistake and a benign variant at least
        if specs.get(e).design:  # issue 25: at least 6 mistakes and 2 benign variants in a design exercise's core
            assert suite.least[0] >= 6 and suite.least[1] >= 2 and suite.caught_by_run, e


def test_every_anchor_is_code_found_exactly_once() -> None:
    """A mutation whose anchor is gone fails loudly here, and names itself (never a silent no-op)."""
    for m in ALL:
        text = planted.base(m.exercise)
        assert planted.apply(text, m) != text or not m.edits, m.id  # no edit: a debugging exercise's file as given
    bad = planted.Mutation("ch05_mma", "gone", "", False, ({"find": "no such code", "replace": ""},))
    with pytest.raises(planted.AnchorError, match="ch05_mma:gone edit 1"):
        planted.apply("text", bad)


class Verdicts:
    """The checks of the selected mutations, run one exercise at a time when its first test asks.

    ``tests/conftest.py`` makes each exercise's tests one xdist scope, so under ``pytest -n`` an exercise's
    checks run on one worker while the other workers take other exercises (or other tests); within the
    batch, ``workers`` checks run at once (the CPUs left to this pytest process). ``-k`` selects, so a
    subset costs only its own checks.
    """

    def __init__(self, chosen: set[str], folder: Path, workers: int) -> None:
        self.chosen, self.folder, self.workers = chosen, folder, workers
        self.done: dict[str, planted.Verdict | Exception] = {}

    def __getitem__(self, mutation_id: str) -> planted.Verdict | Exception:
        if mutation_id not in self.done:
            self._run(mutation_id.split(":")[0])
        return self.done[mutation_id]

    def _run(self, exercise: str) -> None:
        jobs, ids = [], []
        for m in (m for m in ALL if m.exercise == exercise and m.id in self.chosen and (planted.FULL or not m.extra)):
            try:
                jobs.append((planted.mutated_file(m, self.folder / m.exercise), m.exercise, SEED))
                ids.append(m.id)
            except planted.AnchorError as e:
                self.done[m.id] = e
        self.done.update(zip(ids, planted.run_all(jobs, workers=self.workers), strict=True))
        if os.environ.get("TKLAB_PLANTED_REPORT"):  # the table of verdicts, for a report (bench/results/)
            rows = [{"id": k, "verdict": v.verdict, "summary": v.summary[:300], "seconds": round(v.seconds, 1)}
                    for k, v in self.done.items() if isinstance(v, planted.Verdict)]
            report = Path(os.environ["TKLAB_PLANTED_REPORT"])
            worker = os.environ.get("PYTEST_XDIST_WORKER")  # under -n each worker writes the exercises it ran
            if worker:
                report = report.with_name(f"{report.stem}.{worker}{report.suffix}")
            report.write_text(json.dumps(rows, indent=1) + "\n")


@pytest.fixture(scope="module")
def verdicts(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Verdicts:
    """The selected mutations' verdicts, checked lazily per exercise (see ``Verdicts``)."""
    chosen = {item.callspec.params["mutation"].id for item in request.session.items
              if getattr(item, "callspec", None) is not None and "mutation" in item.callspec.params}
    # One check per CPU, shared with the other xdist workers (PYTEST_XDIST_WORKER_COUNT; 1 without -n).
    share = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    return Verdicts(chosen, Path(tmp_path_factory.mktemp("planted")), max(1, (os.cpu_count() or 1) // share))


@pytest.mark.parametrize("mutation", CASES, ids=lambda m: m.id)
def test_planted_mistake_fails_and_benign_variant_passes(mutation: planted.Mutation,
                                                           verdicts: Verdicts) -> None:
    v = verdicts[mutation.id]
    if isinstance(v, Exception):
        raise v
    if mutation.benign:
        assert v.passed, f"{mutation.id} ({mutation.description}) must pass: {v.verdict}: {v.summary}"
        assert v.established in ("cpu-emulation", "simulator"), v.established  # numba: its simulator
    else:
        assert v.failed, f"{mutation.id} ({mutation.description}) must fail: {v.verdict}: {v.summary}"
        assert v.says(mutation.shows), f"{mutation.id} must say {mutation.shows!r}: {v.summary}"
        if SUITES[mutation.exercise].caught_by_run:
            assert v.caught_by_run, f"{mutation.id} must fail in the emulated run: {v.report.get('run_status')}"


def test_a_missing_barrier_of_chapter_02_fails_a_gpu_check_by_the_hazard_analysis(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A missing __syncthreads can pass on a GPU by timing luck, so a GPU check of chapters 02-04 also
    emulates one small case for hazards (``running.HAZARDS_FROM_CHAPTER``). The GPU run is stood in (it
    passes); the hazard run beside it is real: the planted race fails, the solution passes."""
    import tklab.grading.check as chk
    from tklab.grading import judge, runner
    from tklab.grading.verdict import Evidence

    real = runner.run_isolated
    for exercise_id in specs.all_ids():  # the specs size their launches for this machine: before the stand-in
        specs.get(exercise_id)

    def gpu_stand_in(exercise_id: str, path: Path, *, mode: str, **kw: object) -> judge.RunOutcome:
        if mode == "gpu":
            return judge.RunOutcome("ok", "correct", {"cases": [], "device": "Fake GPU"}, evidence=Evidence.GPU)
        return real(exercise_id, path, mode=mode, **kw)

    monkeypatch.setattr(runner, "run_isolated", gpu_stand_in)
    monkeypatch.setattr(chk.gpu, "available", lambda: True)
    monkeypatch.setattr(chk.gpu, "arch", lambda: "sm_90a")
    good = chk.check("ch02_smem_tiling", planted.solution("ch02_smem_tiling"), bench=False)
    assert good.passed is True and good.hazards is not None and good.hazards.ok, good
    race = next(m for m in planted.load("ch02_smem_tiling") if m.name == "missing_sync_after_compute")
    bad = chk.check("ch02_smem_tiling", planted.mutated_file(race, tmp_path), bench=False)
    assert bad.passed is False and bad.run_status == "ok" and not bad.hazards.ok, bad
    assert "race" in bad.hazards.detail, bad.hazards.detail
