"""The shields.io endpoint badge (``check --badge FILE.json``)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from trainspec.conformance import api
from trainspec.conformance.cli import main
from trainspec.conformance.report.badge import badge, write_badge
from trainspec.conformance.spec import clauses as registry
from trainspec.conformance.spec.results import ClauseResult, Report, Verdict
from trainspec.errors import UsageError

N = len(registry.CLAUSES)


def report_of(verdicts: dict[str, Verdict] | None = None) -> Report:
    chosen = verdicts or {}
    clauses = tuple(ClauseResult(id=c.id, level=c.level, title=c.title,
                                 verdict=chosen.get(c.id, "pass"), evidence="e")
                    for c in registry.CLAUSES)
    return Report(trainspec="0.1.0", target="reference", environment={}, clauses=clauses,
                  duration_s=1.0)


def test_a_conformant_target_gets_a_green_badge_counting_its_passing_clauses() -> None:
    assert badge(report_of()) == {"schemaVersion": 1, "label": "trainspec",
                                  "message": f"{N}/{N}", "color": "green"}


def test_deviations_do_not_count_as_passing_and_are_named() -> None:
    assert badge(report_of({"RES-4": "deviation", "PAT-1": "deviation"}))["message"] == \
        f"{N - 2}/{N} (2 deviations)"
    one = badge(report_of({"RES-4": "deviation"}))
    assert (one["message"], one["color"]) == (f"{N - 1}/{N} (1 deviation)", "green")


@pytest.mark.parametrize("verdict", ["fail", "error", "timeout", "n/a"])
def test_a_must_clause_that_does_not_pass_turns_the_badge_red(verdict: Verdict) -> None:
    assert badge(report_of({"LOOP-1": verdict})) == {
        "schemaVersion": 1, "label": "trainspec", "message": f"{N - 1}/{N}", "color": "red"}


def test_check_writes_the_badge_when_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                           ) -> None:
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)

    def run(plan: api.Plan, **kwargs: object) -> Report:
        return report_of({"RES-3": "fail"})

    fake: Callable[..., Report] = run
    monkeypatch.setattr(api, "run", fake)
    assert main(["check", "--badge", str(tmp_path / "out" / "badge.json")]) == 1
    data = json.loads((tmp_path / "out" / "badge.json").read_text())
    assert data == {"schemaVersion": 1, "label": "trainspec", "message": f"{N - 1}/{N}",
                    "color": "red"}


def test_an_unwritable_badge_path_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(UsageError, match=r"--badge .*cannot write the badge"):
        write_badge(report_of(), tmp_path / "file" / "badge.json")
