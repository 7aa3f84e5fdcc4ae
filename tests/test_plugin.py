"""The pytest plugin: one item per check, outcomes as in the report, deviations as strict xfail.

Each real suite run costs a few seconds (a worker process per pytest process), so the runs below
each cover several behaviours.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

# Imported here, before any in-process run: pytester drops the modules a run imports when it
# ends, and torch cannot be imported a second time into one process.
from trainspec.conformance.checks import CHECKS

pytest_plugins = ["pytester"]

# A base trainer in the seed's shape that takes every score, ties and NaN included, as an
# improvement: it violates BEST-1 and NAN-1.
EVERYTHING_IMPROVES = """
from trainspec.reference import BaseTrainer


class EverythingImproves(BaseTrainer):
    def is_improvement(self, score: float) -> bool:
        return True
"""


def test_without_its_options_the_plugin_adds_nothing(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_plain="def test_one():\n    pass\n")
    result = pytester.runpytest_inprocess("-p", "trainspec")
    result.assert_outcomes(passed=1)
    assert "trainspec::" not in result.stdout.str()


@pytest.mark.parametrize(("args", "message"), [
    (["--trainspec-clauses=LOOP,XYZ"],
     "trainspec: --trainspec-clauses: unknown clause or family 'XYZ'"),
    (["--trainspec-target=nosuch"], "trainspec: target 'nosuch': expected one of reference"),
    (["--trainspec-world-size=0"], "trainspec: --trainspec-world-size: expected 1 or more"),
])
def test_bad_options_are_usage_errors(pytester: pytest.Pytester, args: list[str],
                                      message: str) -> None:
    result = pytester.runpytest_inprocess("--trainspec-target=reference", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{message}*"])


def test_items_have_stable_ids_that_name_check_and_clauses(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_inprocess("--trainspec-target=reference",
                                          "--trainspec-clauses=LOOP", "--collect-only", "-q",
                                          "-k", "LOOP-1 or LOOP-2")
    result.stdout.fnmatch_lines([
        "trainspec::check_loop_trains_each_epoch_once_in_order[[]LOOP-1[]]",
        "trainspec::check_loop_validates_on_schedule[[]LOOP-2[]]",
    ])
    assert "LOOP-3" not in result.stdout.str()
    loop = [name for name, spec in CHECKS.items() if {"LOOP-1", "LOOP-2"} & set(spec.clauses)]
    result.stdout.fnmatch_lines([f"{len(loop)}/* tests collected (* deselected)*"])


@pytest.mark.slow
def test_reference_passes_under_xdist_and_a_stale_deviation_xpasses_strict(
        pytester: pytest.Pytester) -> None:
    pytester.makefile(".toml", deviations='[deviations]\n"LOOP-1" = "fixed long ago"\n')
    result = pytester.runpytest_subprocess(
        "-p", "trainspec", "--trainspec-target=reference", "--trainspec-clauses=LOOP-1,BEST-2",
        "--trainspec-deviations=deviations.toml", "-n", "2", "--junitxml=junit.xml")
    # LOOP-1 and BEST-2 each have a hand-written check and a generated-runs check: the two
    # BEST-2 items pass, the two LOOP-1 items xpass strictly against the stale deviation
    result.assert_outcomes(passed=2, failed=2)
    result.stdout.fnmatch_lines([
        "*[[]XPASS(strict)[]] declared deviation (LOOP-1: fixed long ago)*",
        "FAILED trainspec::check_loop_trains_each_epoch_once_in_order[[]LOOP-1[]]*",
    ])
    cases = ET.parse(pytester.path / "junit.xml").getroot().iter("testcase")
    props = {case.get("name"): {(p.get("name"), p.get("value")) for p in case.iter("property")}
             for case in cases}
    assert ("clause", "LOOP-1") in props["check_loop_trains_each_epoch_once_in_order[LOOP-1]"]
    assert ("outcome", "passed") in props["check_best_weights_are_a_copy[BEST-2]"]


@pytest.mark.slow
def test_violations_fail_with_evidence_and_declared_ones_xfail(pytester: pytest.Pytester
                                                               ) -> None:
    pytester.makepyfile(broken=EVERYTHING_IMPROVES)
    pytester.makefile(".toml", deviations='[deviations]\n"NAN-1" = "we keep NaN scores"\n')
    result = pytester.runpytest_inprocess(
        "--trainspec-base-trainer=broken:EverythingImproves", "--trainspec-world-size=1",
        "--trainspec-clauses=BEST-1,NAN-1", "--trainspec-deviations=deviations.toml",
        "-k", "not oracle", "-rfx")
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed", 0) >= 1
    assert outcomes.get("xfailed", 0) >= 1
    assert "passed" not in outcomes
    result.stdout.fnmatch_lines([
        "*BEST-1: the validation after epoch * was taken as an improvement; expected none*",
        "XFAIL trainspec::check_*[[]NAN-1[]]* - declared deviation (NAN-1: we keep NaN scores)",
    ])


@pytest.mark.slow
def test_a_target_that_cannot_load_errors_and_x_stops_at_the_first(pytester: pytest.Pytester
                                                                   ) -> None:
    result = pytester.runpytest_inprocess("--trainspec-target=no_such_module:Adapter",
                                           "--trainspec-clauses=LOOP", "-x")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*the harness for no_such_module:Adapter could not start*"
                                 "no_such_module*"])
