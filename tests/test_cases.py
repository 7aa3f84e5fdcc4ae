"""Every case of a check runs and is reported; one cause is grouped wherever it decides.

The case mechanism (``ctx.case``, conformance/checks/cases.py) on hand-made checks that make no
run; a mutant with two independent slips in one clause through the real harness; and one cause
behind several clauses, grouped in every writer.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path

from trainspec.conformance.checks import CHECKS, CheckContext, CheckFailed, NotApplicable
from trainspec.conformance.checks.base import CheckSpec, run_check
from trainspec.conformance.report import json_io, junit
from trainspec.conformance.report import text as tables
from trainspec.conformance.run.harness import Harness
from trainspec.conformance.run.protocol import PropertyOutcome
from trainspec.conformance.run.scenario import Scenario
from trainspec.conformance.run.trace import Trace
from trainspec.conformance.runner import judge_clauses, open_context, resolve_target
from trainspec.conformance.spec import clauses as registry
from trainspec.conformance.spec.results import CaseResult, CheckResult, ClauseResult, Report


class _NoRuns:
    """Runs for checks that make none."""

    def __init__(self, root: Path) -> None:
        self._root = root

    @property
    def root(self) -> Path:
        return self._root

    def run(self, scenario: Scenario, *, ckpt_root: Path | None = None,
            timeout_s: float | None = None) -> Trace:
        raise AssertionError("these checks make no run")

    def new_ckpt_root(self, label: str) -> Path:
        return self._root / label

    def property(self, name: str, *, runner: str, max_examples: int,
                 max_runs: int = 0) -> PropertyOutcome:
        raise AssertionError("these checks run no property")


def _run(tmp_path: Path, body: object) -> CheckResult:
    assert callable(body)
    spec = CheckSpec(name="check_made_up_cases", clauses=("LOOP-1",), requires=frozenset(),
                     func=body)
    return run_check(spec, CheckContext(runs=_NoRuns(tmp_path), capabilities=frozenset()))


def test_a_check_whose_first_case_fails_still_runs_and_reports_the_later_ones(
        tmp_path: Path) -> None:
    ran = []

    def body(ctx: CheckContext) -> str:
        for name in ("first", "second", "third"):
            with ctx.case(name):
                ran.append(name)
                if name != "second":
                    raise CheckFailed(f"LOOP-1: the {name} case went wrong", f"{name} detail",
                                      cause="the same slip")
        return "all fine"

    result = _run(tmp_path, body)
    assert ran == ["first", "second", "third"]
    assert result.outcome == "failed"
    assert result.evidence == "LOOP-1: the first case went wrong"
    assert result.detail == "first detail"
    assert [(c.name, c.outcome) for c in result.cases] == [
        ("first", "failed"), ("second", "passed"), ("third", "failed")]
    assert [c.evidence for c in result.failing] == ["LOOP-1: the first case went wrong",
                                                    "LOOP-1: the third case went wrong"]
    assert result.cause == "the same slip"  # every failing case shares it


def test_the_gravest_failing_case_leads_whatever_the_order_declared(tmp_path: Path) -> None:
    def body(ctx: CheckContext) -> str:
        with ctx.case("a wrong value"):
            raise CheckFailed("LOOP-1: a value is off", cause="one slip")
        with ctx.case("a file kept", severity="loss"):
            raise CheckFailed("LOOP-1: the file is gone", cause="another slip")
        with ctx.case("an unreachable point"):
            raise NotApplicable("the trainer has no such point")
        return "never a pass"

    result = _run(tmp_path, body)
    assert result.evidence == "LOOP-1: the file is gone"
    assert [(c.severity, c.name) for c in result.failing] == [("loss", "a file kept"),
                                                             ("wrong", "a wrong value")]
    assert result.cause == ""  # two causes: grouped under neither
    assert CaseResult(name="an unreachable point", outcome="not judged",
                      evidence="the trainer has no such point") in result.cases


def test_a_check_whose_every_case_is_not_applicable_is_n_a(tmp_path: Path) -> None:
    def body(ctx: CheckContext) -> str:
        for point in ("train_start", "val_start"):
            with ctx.case(point):
                raise NotApplicable(f"{point} not reached")
        return "not a pass either"

    result = _run(tmp_path, body)
    assert (result.outcome, result.evidence) == ("n/a", "train_start not reached; val_start "
                                                        "not reached")


def test_a_pass_names_its_cases_and_those_not_judged(tmp_path: Path) -> None:
    def body(ctx: CheckContext) -> str:
        with ctx.case("judged"):
            pass
        with ctx.case("unreachable"):
            raise NotApplicable("never reached")
        return "the judged case passed"

    result = _run(tmp_path, body)
    assert result.outcome == "passed"
    assert result.evidence == "the judged case passed (not judged: never reached)"
    assert tables.case_lines(result) == ["passed: judged", "not judged: unreachable: never "
                                         "reached"]


def test_a_failure_outside_any_case_is_the_last_case_and_keeps_the_earlier_ones(
        tmp_path: Path) -> None:
    def body(ctx: CheckContext) -> str:
        with ctx.case("earlier"):
            pass
        raise CheckFailed("LOOP-1: the rest went wrong")

    result = _run(tmp_path, body)
    assert [(c.name, c.outcome) for c in result.cases] == [("earlier", "passed"),
                                                           ("", "failed")]
    assert result.evidence == "LOOP-1: the rest went wrong"


def test_cases_do_not_nest(tmp_path: Path) -> None:
    def body(ctx: CheckContext) -> str:
        with ctx.case("outer"), ctx.case("inner"):
            pass
        return "unreachable"

    result = _run(tmp_path, body)
    assert result.outcome == "error"
    assert "case 'inner' opened inside case 'outer': cases do not nest" in result.evidence


# ------------------------------------------------------------- a mutant with two slips

def test_a_mutant_with_two_slips_in_one_clause_shows_both_in_every_writer(
        harness: Harness, tmp_path: Path) -> None:
    target = resolve_target(base_trainer="tests.mutants.best:StaleStepAndBestLostOnThePeriod")
    ctx, _ = open_context(target, harness, world_size=1, max_examples=20)
    result = run_check(CHECKS["check_best_file_follows_improvements"], ctx)
    assert result.outcome == "failed"
    failing = result.failing
    # the lost best model leads, though its scenario comes second; the stale step follows
    assert failing[0].severity == "loss"
    assert failing[0].name == "best-file-periodic, epoch 1"
    assert "epoch 1 improved but best.pt was not rewritten" in failing[0].evidence
    assert result.evidence == failing[0].evidence
    stale = [c for c in failing if "says train_step" in c.evidence]
    assert stale
    assert (stale[0].name, stale[0].severity) == ("best-file, epoch 0", "wrong")
    assert {"best-file", "best-file-periodic"} <= {c.name for c in result.cases
                                                   if c.outcome == "passed"}
    report = _report(judge_clauses([result], ["BEST-3"], {}, 1))
    table = tables.format_table(report, color=False)
    assert f"more failing case{'s' if len(failing) > 2 else ''})" in table
    assert table.count("BEST-3  MUST") == 1  # one line per clause
    for text in (tables.format_details(report), tables.to_markdown(report),
                 _junit_text(report, tmp_path)):
        assert "best.pt was not rewritten" in text, text
        assert "says train_step" in text, text
        assert "passed: " in text
    back = json_io.from_json(json_io.to_json(report)).clause("BEST-3").checks[0]
    assert back.cases == result.cases


# ------------------------------------------------------------- one cause, grouped

CAUSE = "the run raised: RuntimeError: cannot restore the sampler"


def _failed(name: str, clause: str, causes: list[str]) -> CheckResult:
    cases = tuple(CaseResult(name=f"case {i}", outcome="failed", evidence=f"{clause}: {c}",
                             severity="crash", cause=c) for i, c in enumerate(causes))
    return CheckResult(name=name, clauses=(clause,), outcome="failed",
                       evidence=cases[0].evidence, duration_s=0.1, cases=cases,
                       cause=causes[0] if len(set(causes)) == 1 else "")


def _report(clauses: tuple[ClauseResult, ...]) -> Report:
    return Report(trainspec="0.1.0", target="fw", environment={"python": "3.11"},
                  clauses=clauses, duration_s=1.0,
                  selected=tuple(c.id for c in clauses if c.verdict != "n/a"))


def _junit_text(report: Report, tmp_path: Path) -> str:
    path = tmp_path / "junit.xml"
    junit.write_junit(report, path)
    return "\n".join(e.text or "" for e in ET.parse(path).iter() if e.tag == "failure") + \
        "\n".join(e.get("value", "") for e in ET.parse(path).iter() if e.tag == "property")


def test_one_cause_behind_every_failing_case_of_several_clauses_is_grouped_in_every_writer(
        tmp_path: Path) -> None:
    results = [_failed("check_res_1", "RES-1", [CAUSE, CAUSE]),
               _failed("check_res_2", "RES-2", [CAUSE]),
               _failed("check_ft_1", "FT-1", [CAUSE, CAUSE, CAUSE]),
               # one of its cases stems from another cause: not grouped
               _failed("check_res_3", "RES-3", [CAUSE, "best.pt missing"])]
    selected = ["RES-1", "RES-2", "RES-3", "FT-1"]
    report = _report(judge_clauses(results, selected, {}, 1))
    assert {c.id: c.cause for c in report.clauses if c.id in selected} == {
        "RES-1": CAUSE, "RES-2": CAUSE, "RES-3": "", "FT-1": CAUSE}
    order = [c.id for c in registry.CLAUSES if c.id in {"RES-1", "RES-2", "FT-1"}]
    group = f"3 clauses ({', '.join(order)}): {CAUSE}"
    assert group in tables.format_table(report, color=False)
    assert f"- {group}" in tables.to_markdown(report)
    assert json_io.to_json(report)["shared_causes"] == [{"cause": CAUSE, "clauses": order}]
    text = _junit_text(report, tmp_path)
    assert f"one cause behind 3 clauses ({', '.join(order)}): {CAUSE}" in text
    assert f"{', '.join(order)}: {CAUSE}" in text  # the suite's property
    assert "RES-3" not in group


def test_the_pytest_failure_text_lists_every_failing_case_with_its_detail() -> None:
    from trainspec.conformance.plugin import _render

    result = _failed("check_res_1", "RES-1", ["first cause", "second cause"])
    cases = (*(replace(c, detail=f"detail of {c.name}") for c in result.cases),
             CaseResult(name="a third", outcome="passed"))
    text = _render(replace(result, cases=cases, detail="detail of case 0"))
    assert text.splitlines()[:2] == ["RES-1: first cause", "detail of case 0"]
    assert "failed (crash): case 1: RES-1: second cause\ndetail of case 1" in text
    assert text.endswith("passed: a third")
