"""One fault, one fail: a trainer's single slip is charged to its own clause, not to every
clause whose check happens to run into it.

Each test runs a small trainer of the shape the fault came from (the mutants in
tests/mutants/ carry one slip each) through the clauses the slip used to spill into, and
asserts the new verdicts and their evidence.
"""

from __future__ import annotations

from pathlib import Path

from trainspec.conformance.report.json_io import from_json, to_json
from trainspec.conformance.report.text import format_table, to_markdown
from trainspec.conformance.run.harness import Harness
from trainspec.conformance.runner import resolve_target, run_checks
from trainspec.conformance.spec.results import CheckResult, Report

ROOT = Path(__file__).resolve().parent.parent


def _check(harness: Harness, trainer: str, clauses: str) -> Report:
    return run_checks(resolve_target(base_trainer=trainer), clauses=clauses, world_size=1,
                      harness=harness, max_examples=20)


def _verdicts(report: Report) -> dict[str, str]:
    return {c.id: c.verdict for c in report.clauses if c.id in report.selected}


def test_a_config_object_pickled_into_every_checkpoint_fails_ckpt_1_alone(
        harness: Harness) -> None:
    """The files load only with the trainer's config classes allowed: resume, finetune and
    best-file behaviour are judged on what the files hold (and pass), the weights-only refusal
    is CKPT-1's, quoted by its actionable line."""
    report = _check(harness, "tests.mutants.ckpt:PicklesTheConfigAndReadsItBack",
                    "BEST,RES,FT,CKPT")
    verdicts = _verdicts(report)
    assert {c for c, v in verdicts.items() if v != "pass"} == {"CKPT-1"}, verdicts
    evidence = report.clause("CKPT-1").evidence
    assert "does not load with weights_only=True" in evidence
    assert "Unsupported global: GLOBAL trainspec.reference.config." in evidence
    assert "This file can still be loaded" not in evidence
    assert "\x1b" not in evidence


def test_a_trainer_stopping_one_validation_late_fails_pat_1_not_pat_2(
        harness: Harness) -> None:
    """Its refill works: PAT-2 judges the refill against the trainer's own stop rule."""
    report = _check(harness, "tests.mutants.pat:StopsOneValidationLate", "PAT-1,PAT-2,NAN-3")
    assert _verdicts(report) == {"PAT-1": "fail", "PAT-2": "pass", "NAN-3": "pass"}
    assert "expected ['epoch 0', 'epoch 1', 'epoch 2']" in report.clause("PAT-1").evidence


def test_nan_3_reports_the_inf_case_a_late_stopping_trainer_mishandles(
        harness: Harness) -> None:
    """The NaN cases it handles pass under its own stop rule; the +inf case that refills the
    counter is the one NAN-3 reports."""
    report = _check(harness, "tests.seed_shape.one_fault:StopsLateAndInfRefills",
                    "PAT-1,PAT-2,NAN-3")
    assert _verdicts(report) == {"PAT-1": "fail", "PAT-2": "pass", "NAN-3": "fail"}
    evidence = report.clause("NAN-3").evidence
    assert "the validation after epoch 2 scored inf and was taken as an improvement" in evidence
    assert "nan-patience" not in evidence
    assert "[0.5, nan, nan" not in evidence
    assert "judged with the trainer's own stop rule" in evidence


def _fixed_checks(report: Report, clause: str) -> list[CheckResult]:
    """The clause's hand-written checks (the generated-runs family aside)."""
    return [c for c in report.clause(clause).checks
            if not c.name.startswith("check_generated_runs")]


def test_capability_gates_are_per_case(harness: Harness) -> None:
    """A trainer without val.first or val.every_n_epochs is judged on every case that needs
    neither (n/a only when no case could run), and each pass names the cases not run."""
    target = resolve_target("tests.seed_shape.fixed_schedule:ValidatesEveryEpoch")
    report = run_checks(target, clauses="LOOP-2,LOOP-3,PAT-4,BEST-3", world_size=1,
                        harness=harness, max_examples=20)
    assert _verdicts(report) == {"LOOP-2": "pass", "LOOP-3": "pass", "PAT-4": "pass",
                                 "BEST-3": "pass"}
    (loop_3,) = _fixed_checks(report, "LOOP-3")
    assert "not run: val.first still runs at num_epochs=0 (the target does not declare " \
        "val_first)" in loop_3.evidence
    (pat_4,) = _fixed_checks(report, "PAT-4")
    assert "not run: the val.first case (the target does not declare val_first)" in \
        pat_4.evidence
    (loop_2,) = _fixed_checks(report, "LOOP-2")
    assert "not run: val.every_n_epochs=2 and 3 (the target does not declare val_every_n); " \
        "val.first (the target does not declare val_first)" in loop_2.evidence
    assert "validated after epoch 0/epoch 1/epoch 2" in loop_2.evidence


def test_one_cause_behind_several_clauses_is_grouped_in_every_report(
        harness: Harness) -> None:
    """Every resume raises the same error: the table, the Markdown and the JSON name the
    cause once, with the clauses behind it, on its actionable line without escapes."""
    report = _check(harness, "tests.seed_shape.one_fault:ResumeRaises", "RES-1,RES-2,RES-4")
    assert _verdicts(report) == {"RES-1": "fail", "RES-2": "fail", "RES-4": "fail"}
    cause = "the trainer's resume raised RuntimeError: cannot restore the sampler: no " \
        "'sampler_state' in the checkpoint"
    assert {report.clause(c).cause for c in ("RES-1", "RES-2", "RES-4")} == {cause}
    group = f"3 clauses (RES-1, RES-2, RES-4): {cause}"
    assert f"one cause behind several clauses:\n  {group}" in format_table(report, color=False)
    assert f"- {group}" in to_markdown(report)
    data = to_json(report)
    assert data["shared_causes"] == [{"cause": cause, "clauses": ["RES-1", "RES-2", "RES-4"]}]
    assert from_json(data).clause("RES-2").cause == cause
    # a reader that predates the keys still reads the report
    old = {k: v for k, v in data.items() if k != "shared_causes"}
    old["clauses"] = [{k: v for k, v in c.items() if k != "cause"} for c in data["clauses"]]
    assert from_json(old).clause("RES-2").cause == ""
