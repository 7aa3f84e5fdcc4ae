"""Root causes and remedies: what an adapter declares, how it travels, what the matrix shows.

Capabilities are configuration surfaces only (the removed behaviour names are refused, naming
why); a remedy is a documented non-default switch that the matrix verifies by judging its
failing clauses again with it on.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from tests.test_matrix import _report
from trainspec.conformance.report import json_io, matrix_files, matrix_html
from trainspec.conformance.report import matrix as matrices
from trainspec.conformance.report.matrix_causes import RemedyRun, causes_behind
from trainspec.conformance.run.describe import describe_adapter
from trainspec.conformance.run.protocol import Description
from trainspec.conformance.spec import clauses as registry
from trainspec.conformance.spec.causes import Remedy, RootCause
from trainspec.conformance.spec.results import Report
from trainspec.conformance.targets import BUILTIN_TARGETS, resolve_target, with_remedies
from trainspec.errors import AdapterError, UsageError

NAN = RootCause(summary="NaN counts as an improvement", source="fw/ckpt.py, Saver.better",
                clauses=("NAN-1", "NAN-2", "BEST-1"))
PATIENCE = Remedy(name="keep_state", setting="Callback(restore=True)", clauses=("RES-3",),
                  docs="fw/callbacks.py, Callback.restore")
USELESS = Remedy(name="sigterm_handler", setting="Trainer(handle_sigterm=True)",
                 clauses=("CKPT-5",), docs="fw/trainer.py, Trainer.handle_sigterm")


class _Adapter:
    name = "fw"

    def __init__(self, caps: Any = frozenset({"checkpoint"}), causes: Any = (NAN,),
                 remedies: Any = (PATIENCE,)) -> None:
        self.caps, self.causes, self.fixes = caps, causes, remedies

    def capabilities(self) -> Any:
        return self.caps

    def environment(self) -> dict[str, str | None]:
        return {"framework": "fw 1.0"}

    def run(self, scenario: object, ctx: object) -> None:
        raise AssertionError("not run")

    def root_causes(self) -> Any:
        return self.causes

    def remedies(self) -> Any:
        return self.fixes


def test_a_description_carries_root_causes_and_remedies_through_json() -> None:
    described = describe_adapter(_Adapter())
    assert described.root_causes == (NAN,)
    assert described.remedies == (PATIENCE,)
    assert Description.from_json(described.to_json()) == described


@pytest.mark.parametrize(("name", "why"), [
    ("sigterm", "CKPT-5 is judged for every target that checkpoints and resumes"),
    ("rng_state", "RES-4 is judged for every target that resumes")])
def test_a_removed_behaviour_capability_is_refused_naming_why(name: str, why: str) -> None:
    with pytest.raises(AdapterError, match=f"'{name}' \\({why}: drop it\\)"):
        describe_adapter(_Adapter(caps=frozenset({"checkpoint", name})))


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"causes": {"NAN-1": "x"}}, r"root_causes\(\) returned .*expected a list of .*RootCause"),
    ({"remedies": [PATIENCE, PATIENCE]}, r"names \['keep_state'\] more than once"),
    ({"causes": [dataclasses.replace(NAN, clauses=("NAN-9",))]},
     r"names unknown clauses \['NAN-9'\]"),
])
def test_malformed_causes_or_remedies_are_an_adapter_error(kwargs: dict[str, Any],
                                                           message: str) -> None:
    with pytest.raises(AdapterError, match=message):
        describe_adapter(_Adapter(**kwargs))


def _with_causes(report: Report, applied: tuple[str, ...] = ()) -> Report:
    return dataclasses.replace(report, root_causes=(NAN,), remedies=(PATIENCE, USELESS),
                               applied_remedies=applied)


def test_a_report_keeps_causes_remedies_and_applied_remedies_through_json() -> None:
    report = _with_causes(_report("fw", {"NAN-1": "fail"}), applied=("keep_state",))
    data = json_io.to_json(report)
    assert data["applied_remedies"] == ["keep_state"]
    assert list(data)[-1] == "complete"
    again = json_io.from_json(data)  # check evidence is not in the JSON: compare the rest
    assert (again.root_causes, again.remedies, again.applied_remedies) == (
        report.root_causes, report.remedies, report.applied_remedies)
    plain = json_io.to_json(_report("fw", {}))
    assert not {"root_causes", "remedies", "applied_remedies"} & set(plain)


def test_a_report_with_a_malformed_remedy_is_not_read() -> None:
    data = json_io.to_json(_with_causes(_report("fw", {})))
    data["remedies"][0]["clauses"] = []
    with pytest.raises(UsageError, match="'clauses' should be a non-empty list"):
        json_io.from_json(data)


def test_remedies_go_to_the_adapter_factory_and_never_to_a_base_trainer() -> None:
    hf = with_remedies(BUILTIN_TARGETS["hf"], "restore_callback_states, jit_checkpoint")
    assert hf.adapter.args == ("restore_callback_states", "jit_checkpoint")
    assert "remedies='restore_callback_states,jit_checkpoint'" in hf.reproducer_args
    with pytest.raises(UsageError, match="base class in the seed's shape"):
        with_remedies(BUILTIN_TARGETS["reference"], "anything")
    with pytest.raises(UsageError, match="base class in the seed's shape"):
        with_remedies(resolve_target(base_trainer="pkg.mod:Trainer"), "anything")
    with pytest.raises(UsageError, match="comma-separated remedy names"):
        with_remedies(BUILTIN_TARGETS["hf"], "a,,b")


def _matrix_with_remedies() -> matrices.ConformanceMatrix:
    fw = _with_causes(_report("fw", {"NAN-1": "fail", "BEST-1": "fail", "RES-3": "fail",
                                     "CKPT-5": "fail", "LOOP-2": "fail"}))
    fixed = _report("fw", {}, evidence={"RES-3": "RES-3 passes with the remedy"})
    unfixed = _report("fw", {"CKPT-5": "fail"},
                      evidence={"CKPT-5": "CKPT-5: still went on to the end"})
    runs = [RemedyRun.of("keep_state", fixed, ["RES-3"]),
            RemedyRun.of("sigterm_handler", unfixed, ["CKPT-5"])]
    return matrices.build([fw], {}, remedy_runs={"fw": runs})


def test_a_failing_cell_says_whether_each_verified_remedy_fixes_it() -> None:
    page = matrices.to_markdown(_matrix_with_remedies())
    assert ("**fail**; passes with Callback(restore=True) (verified)" in page)
    assert "**fail**; Trainer(handle_sigterm=True) does not fix it (fail)" in page
    # the evidence of both runs
    assert "with `Trainer(handle_sigterm=True)`: fail: CKPT-5: still went on to the end" in page
    html = matrix_html.to_html(_matrix_with_remedies())
    assert "fail; passes with Callback(restore=True) (verified)" in html


def test_the_root_causes_behind_the_fails_come_above_the_clause_tables() -> None:
    m = _matrix_with_remedies()
    behind, unnamed = causes_behind(m.reports["fw"], m.shown)
    assert behind == [(NAN, ["BEST-1", "NAN-1"])]  # registry order; NAN-2 passes: not listed
    assert unnamed == ["LOOP-2", "RES-3", "CKPT-5"]
    page = matrices.to_markdown(m)
    why = page.index("### Why fw fails")
    assert why < page.index("### LOOP:")
    assert "- NaN counts as an improvement: BEST-1, NAN-1 (`fw/ckpt.py, Saver.better`)" in page
    assert "- no root cause named by the adapter: LOOP-2, RES-3, CKPT-5" in page
    html = matrix_html.to_html(m)
    assert html.index("Why fw fails") < html.index("<h2>Clauses</h2>")


def test_remedy_runs_round_trip_through_the_matrix_json(tmp_path: Path) -> None:
    m = _matrix_with_remedies()
    matrix_files.write(m, tmp_path)
    again = matrices.from_json(json.loads((tmp_path / "matrix.json").read_text()))
    assert again.remedy_runs == m.remedy_runs
    assert matrices.to_markdown(again) == matrices.to_markdown(m)


def test_malformed_remedy_runs_are_a_usage_error() -> None:
    data = matrices.to_json(_matrix_with_remedies())
    data["remedy_runs"]["fw"][0]["clauses"]["RES-3"]["verdict"] = "fixed"
    with pytest.raises(UsageError, match="verdict 'fixed', expected one of"):
        matrices.from_json(data)


def test_every_clause_a_builtin_adapter_names_exists() -> None:
    from trainspec.adapters.hf import HFTrainerAdapter

    ids = {c.id for c in registry.CLAUSES}
    adapter = HFTrainerAdapter()
    for cause in adapter.root_causes():
        assert set(cause.clauses) <= ids, cause
    for remedy in adapter.remedies():
        assert set(remedy.clauses) <= ids, remedy
