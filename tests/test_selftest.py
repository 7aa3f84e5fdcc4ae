"""``trainspec check TARGET --self-test``: the reference and the worked adapters come out
clean (exit 0); each adapter of tests/bad_adapters/reports.py, which reports the reference
wrongly in one way, gets the one line that names its fault and its fix (exit 1); a target that
is no adapter exits 2 before any run.

The faults that change what a run does (crash points, epochs) are self-tested for real; those
that change only what it reports (records, files) are judged on the reference's own runs,
reported through the same bad adapter's distortion: one worker start instead of one each.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest

from tests.bad_adapters import reports
from trainspec.conformance.api import plan
from trainspec.conformance.checks.selftest import (
    Problem,
    merged,
    plain_problems,
    plain_scenario,
    stop_problems,
    stop_scenario,
)
from trainspec.conformance.cli import main
from trainspec.conformance.run.harness import Harness
from trainspec.conformance.run.scenario import Scenario
from trainspec.conformance.run.trace import Trace, parse_rank
from trainspec.conformance.selftest import self_test

pytestmark = pytest.mark.slow  # each self-test starts a worker (torch) and makes ~7 short runs

BAD = "tests.bad_adapters.reports:"

# adapter -> (topic, words of the problem line) it must be told, one line each
FAULTS: dict[str, list[tuple[str, str]]] = {
    "OneBasedEpochs": [("epochs", "TrainStart epochs [1, 2, 3] for num_epochs=3: 1-based"),
                       ("epochs", "'train_start', 'train_end', 'val_start', 'val_after_save', "
                                  "'write' of epoch 1 came before epoch 0's training ended")],
    # train_start and train_end the suite finds in the records, a write in the folder: only
    # the validation's points need the adapter
    "NoCrashPoints": [("crash points", f"'{where}' of epoch 1 was never reached")
                      for where in ("val_start", "val_after_save")],
    "NoDecisions": [("decisions", "no Validation reported improved=True"),
                    ("decisions", "no Validation reported stop=True")],
    "MissingRecords": [("records", "no Setup recorded"),
                       ("records", "RunEnd.best_model is None"),
                       ("records", "no TestPass recorded")],
    "MeasuredScores": [("scores", "reported score 0.25; the scenario scripts 0.5")],
    "NoFileRoles": [("files", "no file is described as 'last'"),
                    ("files", "no file is described as 'best'")],
}


def _problem_lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith("[")]


@pytest.fixture(scope="module")
def harness() -> Iterator[Harness]:
    """One harness for every target: its spare worker is warm when the next target comes."""
    with Harness(plan("reference").target.adapter, timeout_s=30.0) as shared:
        yield shared


def test_the_reference_is_clean_and_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "reference", "--self-test"]) == 0
    out = capsys.readouterr().out
    assert _problem_lines(out) == []
    assert "self-test of reference: no problem found" in out


@pytest.mark.parametrize("target", ["tests.worked.template_adapter:TemplateAdapter",
                                    "tests.worked.imagenet_adapter:ImagenetAdapter",
                                    "tests.worked.bundle_adapter:BundleAdapter",
                                    "tests.guides.tiny_adapter:TinyAdapter"])
def test_the_guides_adapters_are_clean(target: str, harness: Harness) -> None:
    tested = self_test(plan(target), harness=harness)
    assert tested.problems == ()
    assert tested.runs >= 2


RUN_FAULTS = ("OneBasedEpochs", "NoCrashPoints")  # these change what the run does


@pytest.fixture(scope="module")
def reference_runs(harness: Harness) -> list[tuple[Scenario, Trace]]:
    """The reference's plain and early-stop runs of the self-test."""
    return [(s, harness.run(s)) for s in (plain_scenario(), stop_scenario())]


def _reported_by(adapter: reports.Reporting, trace: Trace) -> Trace:
    """``trace`` as ``adapter`` would have reported the same run."""
    ranks = []
    for r in trace.ranks:
        kept = [c for c in (adapter.change(x) for x in r.records) if c is not None]
        ranks.append(parse_rank(r.rank, kept, r.status, r.error, r.detail))
    files = trace.files
    if isinstance(adapter, reports.NoFileRoles):
        files = tuple(dataclasses.replace(f, role=None) for f in trace.files)
    return dataclasses.replace(trace, ranks=tuple(ranks), files=tuple(files))


def _lines_of(adapter: str, harness: Harness, runs: list[tuple[Scenario, Trace]],
              capsys: pytest.CaptureFixture[str]) -> list[str]:
    if adapter == "OneBasedEpochs":  # through the command line: its exit status too
        assert main(["check", BAD + adapter, "--self-test"]) == 1
        return _problem_lines(capsys.readouterr().out)
    if adapter in RUN_FAULTS:
        return [p.line() for p in self_test(plan(BAD + adapter), harness=harness).problems]
    bad = getattr(reports, adapter)()
    caps = bad.capabilities()
    (plain, plain_trace), (stop, stop_trace) = runs
    found = plain_problems(plain, _reported_by(bad, plain_trace), caps)
    found += stop_problems(stop, _reported_by(bad, stop_trace))
    return [p.line() for p in merged(found)]


@pytest.mark.parametrize("adapter", sorted(FAULTS))
def test_each_reporting_fault_gets_one_line_with_its_fix(
        adapter: str, harness: Harness, reference_runs: list[tuple[Scenario, Trace]],
        capsys: pytest.CaptureFixture[str]) -> None:
    lines = _lines_of(adapter, harness, reference_runs, capsys)
    assert len(lines) == len(FAULTS[adapter]), lines
    for (topic, words), line in zip(FAULTS[adapter], lines, strict=True):
        assert line.startswith(f"[{topic}] "), line
        assert words in line, line
        assert ". Fix: " in line, line


def test_a_target_that_is_no_adapter_exits_2_before_any_run(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "tests.bad_adapters.not_adapters:WithoutRun", "--self-test"]) == 2
    assert "trainspec: error:" in capsys.readouterr().err


def test_problems_that_differ_only_in_their_subject_merge_into_one_line() -> None:
    def crash(where: str) -> Problem:
        return Problem(topic="epochs", subject=repr(where), what="the points {subject} came",
                       fix="count from 0")

    other = Problem(topic="files", what="{not a subject}", fix="name them")
    lines = [p.line() for p in merged([crash("a"), other, crash("b")])]
    assert lines == ["[epochs] the points 'a', 'b' came. Fix: count from 0",
                     "[files] {not a subject}. Fix: name them"]
