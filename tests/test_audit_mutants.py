"""Which single-point slips ``trainspec audit`` catches on a real run, and which it cannot see.

Every mutant of the families loop, best, nan and pat, and every resume mutant (res) whose slip
shows in a run resumed from the trainer's own last.pt, is trained for real in audit mode
(``trainspec.kit.audited``) on a run whose config exercises its slip, and the audit of that
run must fail the clause the table names (the mutant's own where the audit charges it there;
where it charges another clause, the table says why). The reference trainer on the same
config passes every clause it shows, and shows that clause: the mutant turns a pass into a
fail. A mutant the audit cannot see from a real run is listed in :data:`UNOBSERVABLE` with the
reason; one it should see but does not, in :data:`GAPS`. Every mutant of these families is in
exactly one of the three (a new mutant must be classified).

Real scores of ``MLPTrainer`` are accuracies; where a slip needs NaN, infinite, tied or
falling scores, the run's validation score is scripted by epoch (:class:`_Scripted` replaces
only the accuracy of the validation split; the audit reads what reaches ``save_if_best``).
One optimizer step an epoch and one torch thread keep a run to a fraction of a second; the
mutants' audits load the run's files in this process (:class:`_ProbeInProcess`), the
reference's in the audit's own subprocess.
"""

from __future__ import annotations

import contextlib
import io
import math
import subprocess
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import pytest
import torch
from torch.utils.data import DataLoader

from tests.mutants.registry import declarations
from trainspec.conformance.audit import audit, fileprobe
from trainspec.conformance.spec.results import Report
from trainspec.kit import audited
from trainspec.reference.config import CkptConfig, TestConfig, TrainConfig, ValConfig
from trainspec.reference.example import MLPTrainer

FAMILIES = ("loop", "best", "nan", "pat", "res")
NAN, INF = math.nan, math.inf


class _Scripted(MLPTrainer):
    """MLPTrainer whose validation score is scripted by epoch (-1: the val.first validation);
    everything else, the test accuracy included, is the real run's."""

    scores: ClassVar[Mapping[int, float]] = {}

    def accuracy(self, loader: DataLoader[Any]) -> float:
        if loader is self.val_loader:
            return self.scores[self._completed_epoch]
        return super().accuracy(loader)


@dataclass(frozen=True, slots=True, kw_only=True)
class RunConfig:
    """A real run's config; ``scores`` None keeps MLPTrainer's real accuracies."""

    num_epochs: int
    val: ValConfig
    scores: Mapping[int, float] | None = None
    test: bool = True
    ckpt: bool = False  # checkpoints on: the audit also judges the files (CKPT-1, BEST-3)
    ckpt_every: int | None = None
    resume_after: int | None = None  # first launch ends after this epoch; then a resume
    # the clauses the reference run shows (verdict pass) on this config
    shows: frozenset[str] = field(default=frozenset())


CONFIGS: dict[str, RunConfig] = {
    # real accuracies; validations at val.first and epochs 0, 2, 3
    "real": RunConfig(num_epochs=4, val=ValConfig(first=True, every_n_epochs=2),
                      shows=frozenset({"LOOP-1", "LOOP-2", "LOOP-4", "BEST-1", "BEST-4"})),
    # eval-only: val.first and the test pass, no epoch
    "eval-only": RunConfig(num_epochs=0, val=ValConfig(first=True),
                           shows=frozenset({"LOOP-2", "LOOP-3", "LOOP-4"})),
    # patience 2: an improvement refills it after one counted miss; stops after epoch 4
    "refill": RunConfig(num_epochs=6, val=ValConfig(patience=2),
                        scores={0: .5, 1: .4, 2: .6, 3: .5, 4: .4, 5: .3},
                        shows=frozenset({"PAT-1", "PAT-2", "LOOP-4"})),
    # misses before val.start_patience=2 do not count; the one at epoch 2 stops the run
    "start-patience": RunConfig(num_epochs=4, val=ValConfig(patience=1, start_patience=2),
                                scores={0: .5, 1: .4, 2: .3, 3: .2},
                                shows=frozenset({"BEST-1", "PAT-1", "PAT-3", "PAT-5"})),
    # patience unset; val.first is the best, epoch 0 ties it, the rest are worse
    "unset-patience": RunConfig(num_epochs=4, val=ValConfig(first=True),
                                scores={-1: .9, 0: .9, 1: .5, 2: .4, 3: .3},
                                shows=frozenset({"BEST-1", "BEST-2", "BEST-4", "PAT-4"})),
    # the lower the better; the test pass disabled
    "minimize": RunConfig(num_epochs=3, val=ValConfig(minimize=True), test=False,
                          scores={0: .5, 1: .6, 2: .4},
                          shows=frozenset({"BEST-1", "LOOP-4"})),
    # a leading NaN, then NaN and +inf among finite scores; patience 3 stops after epoch 4
    "nonfinite": RunConfig(num_epochs=6, val=ValConfig(patience=3),
                           scores={0: NAN, 1: .5, 2: NAN, 3: INF, 4: .4, 5: .3},
                           shows=frozenset({"NAN-1", "NAN-2", "NAN-3", "PAT-1", "LOOP-2"})),
    # no validation ever improves: the test pass sees the final weights
    "all-nan": RunConfig(num_epochs=2, val=ValConfig(), scores={0: NAN, 1: NAN},
                         shows=frozenset({"NAN-1", "BEST-4"})),
    # val.first scores NaN with patience 1: the run stops before training, then tests
    "nan-first": RunConfig(num_epochs=2, val=ValConfig(first=True, patience=1),
                           scores={-1: NAN, 0: .5, 1: .4},
                           shows=frozenset({"LOOP-2", "LOOP-4", "NAN-3", "PAT-5"})),
    # checkpoints on: four improvements (val.first, epochs 0, 1, 3), epoch 2 misses
    "best-file": RunConfig(num_epochs=4, val=ValConfig(first=True), ckpt=True, ckpt_every=2,
                           scores={-1: .1, 0: .5, 1: .7, 2: .6, 3: .8},
                           shows=frozenset({"BEST-3", "CKPT-1"})),
    # checkpoints on: val.first is the only improvement
    "best-file-first": RunConfig(num_epochs=2, val=ValConfig(first=True), ckpt=True,
                                 scores={-1: .9, 0: .5, 1: .4},
                                 shows=frozenset({"BEST-3", "CKPT-1"})),
    # launched for epochs 0-2, resumed from its last.pt for 3-4; patience 2 runs out at
    # epoch 3, after the resume (epoch 2 was a counted miss before it)
    "resumed": RunConfig(num_epochs=5, val=ValConfig(first=True, patience=2), ckpt=True,
                         resume_after=2, scores={-1: .1, 0: .5, 1: .9, 2: .8, 3: .7, 4: .6},
                         shows=frozenset({"RES-1", "RES-3", "LOOP-2"})),
}


@dataclass(frozen=True, slots=True, kw_only=True)
class Caught:
    config: str
    clause: str  # a clause the audit fails
    other: str = ""  # why, when the clause is not one the mutant declares
    raises: bool = False  # the slip makes the run raise (the audit judges what it logged)


CAUGHT: dict[str, Caught] = {
    "loop:SkipsTheLastEpoch": Caught(config="real", clause="LOOP-1"),
    "loop:SkipsTheFinalValidation": Caught(config="real", clause="LOOP-2"),
    "loop:ValidatesOnOddEpochs": Caught(config="real", clause="LOOP-2"),
    "loop:IgnoresValFirst": Caught(config="real", clause="LOOP-2"),
    "loop:TestsAfterEveryValidation": Caught(config="real", clause="LOOP-4"),
    "loop:ValFirstNotTracked": Caught(config="real", clause="BEST-1"),
    "loop:TrainsOnceWhenZeroEpochs": Caught(config="eval-only", clause="LOOP-3"),
    "loop:ReturnsEarlyWithNoEpochs": Caught(config="eval-only", clause="LOOP-3"),
    # the eval-only run raises after its validation, before the test pass: the log's close
    # line records the raise (LOOP-3.2: the test pass still runs)
    "loop:AveragesOverNoEpochs": Caught(config="eval-only", clause="LOOP-3", raises=True),
    "loop:IgnoresTestEnable": Caught(config="minimize", clause="LOOP-4"),
    "loop:SkipsTestAfterEarlyStop": Caught(config="refill", clause="LOOP-4"),
    "loop:TrainsAfterStopAtValFirst": Caught(config="nan-first", clause="LOOP-2"),
    "loop:SkipsTestWhenStoppedBeforeTraining": Caught(config="nan-first", clause="LOOP-4"),
    "loop:RepeatsValFirstOnResume": Caught(config="resumed", clause="LOOP-2"),
    "best:TieCountsAsImprovement": Caught(config="unset-patience", clause="BEST-1"),
    "best:TieAndInfWinBesideACrashAtZeroEpochs": Caught(config="unset-patience",
                                                        clause="BEST-1"),
    "best:BestModelAliasesWeights": Caught(config="unset-patience", clause="BEST-2"),
    "best:KeepsLastAsBest": Caught(config="unset-patience", clause="BEST-4"),
    "best:IgnoresMinimize": Caught(config="minimize", clause="BEST-1"),
    "best:IncumbentStartsAtZero": Caught(config="minimize", clause="BEST-1"),
    "best:TestsInitialWeightsWithoutImprovement": Caught(config="all-nan", clause="BEST-4"),
    "best:WritesBestEveryValidation": Caught(config="best-file", clause="BEST-3"),
    "best:WritesBestOnlyOnce": Caught(config="best-file", clause="BEST-3"),
    "best:WritesPreviousBestWeights": Caught(config="best-file", clause="BEST-3"),
    "best:BestFileEpochPlusOne": Caught(config="best-file", clause="BEST-3"),
    "best:BestFileStaleStep": Caught(config="best-file", clause="BEST-3"),
    "best:WritesBestOnlyWithThePeriodicSave": Caught(config="best-file", clause="BEST-3"),
    "best:StaleStepAndBestLostOnThePeriod": Caught(config="best-file", clause="BEST-3"),
    "best:BestFileEpochZeroForValFirst": Caught(config="best-file-first", clause="BEST-3"),
    "nan:NanWinsBest": Caught(config="nonfinite", clause="NAN-1"),
    "nan:NanPoisonsIncumbent": Caught(config="nonfinite", clause="NAN-2"),
    "nan:NanStopsAtOnce": Caught(config="nonfinite", clause="NAN-3"),
    "nan:NanRefillsPatience": Caught(config="nonfinite", clause="NAN-3"),
    "nan:InfRefillsPatience": Caught(config="nonfinite", clause="NAN-3"),
    "nan:FirstScoreAlwaysWins": Caught(config="nonfinite", clause="NAN-1"),
    "nan:InfWinsAndAveragesOverNoEpochs": Caught(config="nonfinite", clause="NAN-1"),
    "nan:RaisesOnNanScore": Caught(
        config="nonfinite", clause="LOOP-2", raises=True,
        other="the raise leaves save_if_best before the validation is logged: the audit sees "
              "a launch that trained epoch 0 and never logged its due validation, not the NaN "
              "score that NAN-3 would judge"),
    "pat:StopsOneValidationLate": Caught(config="refill", clause="PAT-1"),
    "pat:StopsOneValidationEarly": Caught(config="refill", clause="PAT-1"),
    "pat:NeverRefillsPatience": Caught(config="refill", clause="PAT-2"),
    "pat:IgnoresStartPatience": Caught(config="start-patience", clause="PAT-3"),
    "pat:StartPatienceOffByOne": Caught(config="start-patience", clause="PAT-5"),
    "pat:IgnoresImprovementsBeforeStartPatience": Caught(
        config="start-patience", clause="BEST-1",
        other="the lost warm-up improvement is an improvement verdict, and the audit judges "
              "every improvement verdict under BEST-1 (PAT-3 there judges the stop decisions, "
              "which this run's scores leave right)"),
    "pat:UnsetPatienceIsNumEpochs": Caught(config="unset-patience", clause="PAT-4"),
    "pat:UnsetPatienceIsOne": Caught(config="unset-patience", clause="PAT-4"),
    # only a non-finite val.first score can exhaust patience at val.first (a finite first
    # score always improves): PAT-1.4 governs that stop whatever the score
    "pat:ValFirstSkipsPatience": Caught(config="nan-first", clause="PAT-1"),
    "res:RepeatsTheCheckpointEpoch": Caught(config="resumed", clause="RES-1"),
    "res:SavesAStaleStepCount": Caught(config="resumed", clause="RES-1"),
    "res:ForgetsBestOnResume": Caught(config="resumed", clause="RES-3"),
    "res:ForgetsPatienceOnResume": Caught(config="resumed", clause="RES-3"),
    "res:SavesTrackingFromBeforeValidation": Caught(config="resumed", clause="RES-3"),
    "res:CheckpointsBeforeValidation": Caught(config="resumed", clause="RES-3"),
}

UNOBSERVABLE: dict[str, str] = {
    "res:ForgetsOptimizerState": "the log records no optimizer state: a fresh optimizer after "
        "the resume shows only against an uninterrupted run (RES-2 is n/a in an audit)",
    "res:ForgetsRngState": "the log records no RNG state: the changed data order after the "
        "resume shows only against an uninterrupted run (RES-4)",
    "res:RestoresTorchRngOnly": "python's and numpy's RNG states are not in the log (and "
        "MLPTrainer draws only from torch's): only a scenario compares them (RES-4)",
    "res:RestoresRngOnRankZeroOnly": "a multi-rank world, and RNG states the log does not "
        "record",
    "res:TakesBestScoreFromBestFile": "best.pt is newer than last.pt only when a kill falls "
        "between the two saves of an improving epoch; from a clean last.pt both hold the "
        "same best (a scenario's kill shows it)",
    "res:SkipsStateThatDoesNotFit": "needs a resume whose optimizer no longer fits the "
        "checkpoint (another config); the log records no item classes or states",
    "res:MismatchErrorWithoutItem": "the wording of a refused resume: it raises in the "
        "constructor, before the audit log opens",
    "res:MismatchErrorWithoutWayOut": "the wording of a refused resume: it raises in the "
        "constructor, before the audit log opens",
    "res:RestoresItemsOneByOne": "needs a resume refused for state that does not fit (raised "
        "in the constructor, before any log); what stays half-restored is in memory only",
    "res:KeepsWhatLoadedBeforeAFailure": "needs a resume refused for state that does not fit "
        "(raised in the constructor, before any log); what stays half-restored is in memory "
        "only",
    "res:ExpectsABestInEveryFile": "the resume from a last.pt written before any improvement "
        "raises in the constructor, before the audit log opens: the failed launch leaves no "
        "log, and the first launch is conformant",
}

# a mutant the audit should see but does not: what it misses, and the run that shows it (its
# case runs in the catching test, marked xfail(strict=True): fixed, it must move to CAUGHT)
GAPS: dict[str, str] = {}
GAP_RUNS: dict[str, Caught] = {}


# ------------------------------------------------------------------ running and auditing

def _mutants() -> dict[str, type[Any]]:
    import importlib

    out: dict[str, type[Any]] = {}
    for d in declarations():
        family, _, name = d.mutant.partition(":")
        if family in FAMILIES:
            out[d.mutant] = getattr(importlib.import_module(f"tests.mutants.{family}"), name)
    return out


MUTANTS = _mutants()


def _declared(mutant: str) -> set[str]:
    """The clauses a mutant declares: its checks' clauses and those of the sentences it
    proves."""
    return {c for d in declarations() if d.mutant == mutant
            for c in (*d.clauses, *(s.rpartition(".")[0] for s in d.proves))}


def _trainer(mutant: str | None, run: RunConfig) -> type[Any]:
    base: type[Any] = MLPTrainer if run.scores is None else \
        type("Scripted", (_Scripted,), {"scores": dict(run.scores)})
    if mutant is None:
        return base
    cls = MUTANTS[mutant]
    return type(cls.__name__, (cls, base), {})


def _config(root: Path, run: RunConfig, *, num_epochs: int,
            load_from: Path | None = None) -> TrainConfig:
    # one optimizer step an epoch (the train split is 512 samples): quick, and every epoch
    # still changes the weights
    return TrainConfig(
        seed=0, num_epochs=num_epochs, val=run.val, test=TestConfig(enable=run.test),
        ckpt=CkptConfig(dir=str(root), enable=run.ckpt, every_n_epochs=run.ckpt_every,
                        fsync=False, load_from=None if load_from is None else str(load_from),
                        resume=load_from is not None),
        extra={"lr": 0.05, "batch_size": 512, "hidden": 8})


@dataclass(frozen=True, slots=True, kw_only=True)
class Audited:
    report: Report
    raised: BaseException | None

    @property
    def failed(self) -> set[str]:
        return {c.id for c in self.report.clauses if c.verdict == "fail"}

    def evidence(self) -> str:
        return "; ".join(f"{c.id}: {c.evidence}" for c in self.report.clauses
                         if c.verdict == "fail") or "no clause fails"


def _launch(cls: type[Any], cfg: TrainConfig) -> tuple[Path, BaseException | None]:
    trainer = audited(cls)(cfg)
    raised: BaseException | None = None
    try:
        trainer.train()
    except Exception as e:  # a mutant whose slip raises: its log records the raise
        raised = e
    return Path(trainer._audit.run_dir), raised


def _run(root: Path, mutant: str | None, name: str) -> Audited:
    run = CONFIGS[name]
    cls = _trainer(mutant, run)
    folder = root / name / (mutant or "reference").replace(":", "-")
    if run.resume_after is None:
        first, raised = _launch(cls, _config(folder, run, num_epochs=run.num_epochs))
        return Audited(report=audit([first]), raised=raised)
    first, raised = _launch(cls, _config(folder, run, num_epochs=run.resume_after + 1))
    assert raised is None, f"{mutant}: the first launch raised {raised!r}"
    second, raised = _launch(cls, _config(folder, run, num_epochs=run.num_epochs,
                                          load_from=first / "last.pt"))
    return Audited(report=audit([first, second]), raised=raised)


class _ProbeInProcess:
    """Stands in for ``subprocess`` in the audit's file probe: the probe's own ``main`` (the
    same weights-only loads, the same JSON lines, parsed by the same code) runs in this
    process. A fresh interpreter per audit costs seconds of torch import; the mutants' audits
    use this, the reference's keep the real subprocess."""

    TimeoutExpired = subprocess.TimeoutExpired

    @staticmethod
    def run(command: list[str], **_: object) -> subprocess.CompletedProcess[str]:
        assert command[1:3] == ["-m", fileprobe.__name__], command
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = fileprobe.main(command[3:])
        return subprocess.CompletedProcess(command, code, out.getvalue(), "")


class _Lab:
    """Runs each (mutant, config) once for the module, the reference's runs shared."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._done: dict[tuple[str | None, str], Audited] = {}

    def audit(self, mutant: str | None, config: str) -> Audited:
        key = (mutant, config)
        if key not in self._done:
            with pytest.MonkeyPatch.context() as patch:
                if mutant is not None:
                    patch.setattr(fileprobe, "subprocess", _ProbeInProcess)
                self._done[key] = _run(self.root, mutant, config)
        return self._done[key]


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[_Lab]:
    # tiny models on a shared machine: torch's thread pool only costs time here
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield _Lab(tmp_path_factory.mktemp("audit-mutants"))
    finally:
        torch.set_num_threads(threads)


# ------------------------------------------------------------------ the tests

def test_every_mutant_of_the_families_is_classified() -> None:
    caught, hidden, gaps = set(CAUGHT), set(UNOBSERVABLE), set(GAPS)
    assert set(GAP_RUNS) == gaps
    assert not caught & hidden
    assert not caught & gaps
    assert not hidden & gaps
    assert caught | hidden | gaps == set(MUTANTS)
    assert all(m.startswith("res:") for m in hidden), "only resume slips may be unobservable"
    assert all(reason.strip() for reason in (*UNOBSERVABLE.values(), *GAPS.values()))


@pytest.mark.parametrize("mutant", sorted({**CAUGHT, **GAP_RUNS}))
def test_a_clause_not_declared_by_the_mutant_says_why(mutant: str) -> None:
    case = CAUGHT.get(mutant) or GAP_RUNS[mutant]
    assert case.config in CONFIGS
    assert bool(case.other) == (case.clause not in _declared(mutant)), (
        f"{mutant}: {case.clause} vs declared {sorted(_declared(mutant))}: give `other` "
        "exactly when the clause is not one the mutant declares")


@pytest.mark.slow
@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_the_reference_passes_every_clause_it_shows(lab: _Lab, config: str) -> None:
    done = lab.audit(None, config)
    assert done.raised is None, repr(done.raised)
    verdicts = {c.id: c.verdict for c in done.report.clauses}
    assert done.report.conformant, done.evidence()
    assert set(verdicts.values()) <= {"pass", "n/a"}, done.evidence()
    wanted = CONFIGS[config].shows | {c.clause for c in (*CAUGHT.values(), *GAP_RUNS.values())
                                      if c.config == config}
    shown = {clause for clause in wanted if verdicts[clause] == "pass"}
    assert shown == wanted, f"not shown on {config}: " + ", ".join(
        f"{c}: {done.report.clause(c).evidence}" for c in sorted(wanted - shown))


@pytest.mark.slow
@pytest.mark.parametrize("mutant", [*sorted(CAUGHT), *(
    pytest.param(m, marks=pytest.mark.xfail(strict=True, reason=GAPS[m]))
    for m in sorted(GAP_RUNS))])
def test_the_audit_catches_the_slip_on_a_real_run(lab: _Lab, mutant: str) -> None:
    case = CAUGHT.get(mutant) or GAP_RUNS[mutant]
    done = lab.audit(mutant, case.config)
    assert (done.raised is not None) == case.raises, repr(done.raised)
    assert case.clause in done.failed, f"{mutant} on {case.config}: {done.evidence()}"
    # a fail of a MUST clause makes the audit's exit status 1; BEST-4 and NAN-3 are SHOULD
    musts = {c.id for c in done.report.clauses if c.level == "MUST"} & done.failed
    assert done.report.conformant == (not musts)
