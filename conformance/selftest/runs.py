"""The self-test's runs and what it reads of their records: does an adapter report what the
checks read? Each problem found is one line naming the fix.

A few short runs judge the adapter's reports, not the trainer: the records every check reads
(and their fields), 0-based epochs, the scripted scores, the trainer's decisions and the crash
points; the files, and ``RunEnd.best_model`` read from them, in
:mod:`~trainspec.conformance.selftest.files`. A trainer's own faults (an early stop one epoch
late, a file that does not load weights-only) are the clauses' matter, left to the suite.
"""

from __future__ import annotations

import math

from trainspec.conformance.checks.common import expected_outcome, make_scenario
from trainspec.conformance.run.adapter import Capability
from trainspec.conformance.run.scenario import CrashPoint, CrashWhere, Scenario
from trainspec.conformance.run.trace import RankTrace, Trace
from trainspec.conformance.selftest.files import best_model_problems, file_problems
from trainspec.conformance.selftest.findings import Problem

__all__ = ["CRASH_FIXES", "crash_problems", "crash_scenarios", "plain_problems",
           "plain_scenario", "run_problem", "stop_problems", "stop_scenario"]


def plain_scenario() -> Scenario:
    """Three epochs, an improvement, a worse score, an improvement; the test pass on."""
    return make_scenario("selftest-plain", [0.5, 0.4, 0.6])


def stop_scenario() -> Scenario:
    """Patience 1 and a worse score after epoch 0: the oracle stops after epoch 1."""
    return make_scenario("selftest-stop", [0.5, 0.4, 0.3, 0.2], cfg={"val.patience": 1})


_ZERO_BASED = "records and crash points take 0-based epochs (the first epoch is 0)"
_RECORDER = "kit.Recorder(epoch_base=1) converts a trainer's 1-based epochs"
CRASH_FIXES: dict[CrashWhere, str] = {
    "train_start": "call ctx.crash_point('train_start', epoch) as each epoch's training begins, "
                   "once the previous epoch's files are written (kit: Recorder.train_start)",
    "train_end": "call ctx.crash_point('train_end', epoch) after the epoch's last batch, before "
                 "anything of the epoch is saved (kit: Recorder.train_end)",
    "val_start": "call ctx.crash_point('val_start', epoch) as the validation after the epoch "
                 "begins (kit: Recorder.val_start)",
    "val_after_save": "call ctx.crash_point('val_after_save', epoch) once the validation is "
                      "decided and its best file saved (kit: Recorder.decide, "
                      "PendingValidation.settle)",
    "write": "let the trainer write a checkpoint with torch.save onto a path under "
             "ctx.ckpt_root during epoch 1, after ctx.crash_point('train_start', 1)",
}


def crash_scenarios(capabilities: frozenset[Capability]) -> list[Scenario]:
    """The crash points the checks use, each at epoch 1 of the plain scenario: all five for a
    trainer that checkpoints, the one DIST-5 uses for one that runs on several ranks only."""
    wheres: tuple[CrashWhere, ...] = ()
    if "checkpoint" in capabilities:
        wheres = ("train_start", "train_end", "val_start", "val_after_save", "write")
    elif "multi_rank" in capabilities:
        wheres = ("train_start",)
    base = plain_scenario()
    return [base.replace(name=f"selftest-crash-{w}", crash=CrashPoint(where=w, epoch=1))
            for w in wheres]


# ------------------------------------------------------------------------- the plain run


def run_problem(s: Scenario, r: RankTrace) -> Problem | None:
    """How a run that should have completed did not, as a problem; None when it completed."""
    if r.status == "completed":
        return None
    if "before the run recorded its end" in r.error:
        return Problem(topic="records", what=f"scenario {s.name!r}: {r.error}",
                       fix="record RunEnd(train_step, final_weights, best_model) once the "
                       "trainer returns (kit: Recorder.end)")
    if r.is_ours:
        return Problem(topic="run", what=f"scenario {s.name!r}: the adapter broke: {r.error}",
                       fix="the error names the record and field, or the adapter's line; -v "
                       "prints the traceback", detail=r.detail)
    return Problem(topic="run", what=f"scenario {s.name!r} ({s.get('num_epochs')} epochs on the "
                   f"suite's task) {r.status}: {r.error}", fix="the run must complete on the "
                   "suite's task (kit.task_data, task_model, task_optimizer); -v prints the "
                   "traceback", detail=r.detail)


def plain_problems(s: Scenario, trace: Trace, capabilities: frozenset[Capability]
                   ) -> list[Problem]:
    """What the plain run's records lack or get wrong."""
    r = trace.rank0
    broken = run_problem(s, r)
    if broken is not None:
        return [broken]
    out = _record_problems(r, capabilities, trace)
    epochs = _epoch_problems(s, r)
    out += epochs
    if not epochs:  # a score is looked up by its epoch: wrong epochs, wrong lookups
        out += _score_problems(s, r)
    out += _decision_problems(s, r)
    out += _state_problems(s, r, capabilities)
    if "checkpoint" in capabilities:
        out += file_problems(trace)
    return out


def _record_problems(r: RankTrace, capabilities: frozenset[Capability],
                     trace: Trace) -> list[Problem]:
    out = []
    if r.setup is None:
        out.append(Problem(topic="records", what="no Setup recorded", fix="record Setup(epoch, "
                           "train_step, train_len) once the trainer is built, after any "
                           "checkpoint is loaded (kit: Recorder.setup)"))
    out += best_model_problems(trace)
    if "test_pass" in capabilities and not r.tests:
        out.append(Problem(topic="records", what="no TestPass recorded, though test.enable is "
                           "true and the adapter declares test_pass",
                           fix="record TestPass(weights=...) in the trainer's test pass "
                           "(kit: Recorder.test)"))
    unended = [e.epoch for e in r.train_epochs if e.end is None]
    if unended:
        out.append(Problem(topic="records", what=f"no TrainEnd for epochs {unended}",
                           fix="record TrainEnd(epoch, train_step, batches, optimizer_steps, "
                           "loader_len) as each epoch's training ends (kit: Recorder.train_end)"))
    return out


def _epoch_problems(s: Scenario, r: RankTrace) -> list[Problem]:
    n = int(s.get("num_epochs"))
    want = list(range(n))
    out = []
    seen = {"TrainStart": r.epochs_trained,
            "Validation": [v.epoch for v in r.validations if v.phase == "epoch"]}
    for kind, epochs in seen.items():
        if epochs == want:
            continue
        if not epochs:
            out.append(Problem(topic="records", what=f"no {kind} recorded in {n} epochs",
                               fix=f"record {kind} for every epoch ({_ZERO_BASED})"))
        elif epochs == [e + 1 for e in want]:
            out.append(Problem(topic="epochs", what=f"{kind} epochs {epochs} for num_epochs={n}"
                               ": 1-based", fix=f"{_ZERO_BASED}; report epoch - 1 ({_RECORDER})"))
        else:
            out.append(Problem(topic="epochs", what=f"{kind} epochs {epochs}, expected {want} "
                               f"for num_epochs={n}", fix=f"record one {kind} per epoch, in "
                               f"order ({_ZERO_BASED})"))
    return out


def _same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


def _score_problems(s: Scenario, r: RankTrace) -> list[Problem]:
    for v in r.validations:
        scripted = s.scores.pooled(None if v.phase == "first" else v.epoch, s.world_size)
        if not _same(v.score, scripted):
            return [Problem(topic="scores", what=f"the validation after epoch {v.epoch} reported "
                            f"score {v.score:g}; the scenario scripts {scripted:g}",
                            fix="make the trainer's validation return the scripted score, "
                            "scenario.scores.pooled(epoch, ctx.world_size) (kit: "
                            "Recorder.score), instead of measuring one")]
    return []


def _decision_problems(s: Scenario, r: RankTrace) -> list[Problem]:
    flags = [v.improved for v in r.validations if v.phase == "epoch"]
    want = [d.improved for d in expected_outcome(s).decisions]
    if not flags or flags == want:
        return []
    if not any(flags):
        return [Problem(topic="decisions", what="no Validation reported improved=True, though "
                        "epoch 0 scored 0.5 (the first finite score) and epoch 2 0.6",
                        fix="report the trainer's own improvement decision as "
                        "Validation.improved; one kept in a local variable can be read where "
                        "it is handed on (kit.observe), from what the trainer keeps as its best, "
                        "or from the best file it rewrites")]
    if all(flags):
        return [Problem(topic="decisions", what="every Validation reported improved=True, epoch "
                        "1's 0.4 after 0.5 too", fix="report the trainer's decision, not that "
                        "a validation ran (if the trainer really took 0.4 as better, BEST-1 "
                        "says so and this line can be ignored)")]
    return []


def _state_problems(s: Scenario, r: RankTrace, capabilities: frozenset[Capability]
                    ) -> list[Problem]:
    first = r.train_epochs[0].state if r.train_epochs else None
    if first is None:
        return []
    out = []
    if not first.weights:
        out.append(Problem(topic="state", what="TrainStart.state.weights is empty",
                           fix="capture the model: trainer_state(model, optimizer, schedulers)"))
    if capabilities & {"resume", "finetune"}:
        if first.optimizer is None:
            out.append(Problem(topic="state", what="TrainStart.state.optimizer is None: RES-2 "
                               "and the FT clauses compare it", fix="pass the optimizer to "
                               "trainer_state (kit: Recorder(optimizer=...))"))
        if first.scheduler is None and s.task.scheduler:
            out.append(Problem(topic="state", what="TrainStart.state.scheduler is None, though "
                               "the task has an LR schedule (RES-2 compares it)",
                               fix="build it with task_schedulers and pass it to trainer_state "
                               "(kit: Recorder(schedulers=...))"))
    return out


# ---------------------------------------------------------------------- stop, crash points


def stop_problems(s: Scenario, trace: Trace) -> list[Problem]:
    """The early-stop run: a stop the trainer made must be reported."""
    r = trace.rank0
    broken = run_problem(s, r)
    if broken is not None:
        return [broken]
    n = int(s.get("num_epochs"))
    if any(v.stop for v in r.validations):
        return []
    trained = r.epochs_trained
    if len(trained) < n:
        return [Problem(topic="decisions", what=f"with val.patience=1 the run trained epochs "
                        f"{trained} of {n} and no Validation reported stop=True",
                        fix="report the trainer's stop decision as stop=True on the validation "
                        "that stopped it (kit: Recorder.end(stop=True) for a trainer that "
                        "leaves its loop early)")]
    return [Problem(topic="decisions", what=f"with val.patience=1 and scores falling after "
                    f"epoch 0 the run trained all {n} epochs and no Validation reported stop",
                    fix="give val.patience to the trainer's early stopping and report its stop "
                    "decision (if the trainer never stops, PAT-1 says so and this line can be "
                    "ignored)")]


def crash_problems(s: Scenario, trace: Trace) -> list[Problem]:
    """A crash point at epoch 1: reached, and after epoch 0's training."""
    assert s.crash is not None
    where = s.crash.where
    r = trace.rank0
    if not r.crashes:
        ended = "completed" if r.status == "completed" else f"{r.status} ({r.error})"
        return [Problem(topic="crash points", what=f"{where!r} of epoch 1 was never reached "
                        f"(the run {ended}, training epochs {r.epochs_trained})",
                        fix=CRASH_FIXES[where])]
    if not any(e.epoch == 0 and e.end is not None for e in r.train_epochs):
        return [Problem(topic="epochs", subject=repr(where), what="the crash points {subject} "
                        "of epoch 1 came before epoch 0's training ended",
                        fix=f"{_ZERO_BASED}; call crash points with the epoch the records carry "
                        f"({_RECORDER})")]
    return []
