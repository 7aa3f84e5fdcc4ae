"""``trainspec check TARGET --self-test``: the reference and the worked adapters come out
clean (exit 0); each adapter of tests/bad_adapters/reports.py, which reports the reference
wrongly in one way, gets the one line that names its fault and its fix (exit 1); each case of
tests/bad_adapters/files.py gets its files judged rightly: the adapter's faults with their fix,
the trainer's facts (a file that records no epoch, a file its own reader cannot read) named
with the checks that will judge them, never with a fix, and never failing the self-test; a
target that is no adapter exits 2 before any run.

The faults that change what a run does (crash points, epochs) are self-tested for real; those
that change only what it reports (records, files) are judged on the reference's own runs,
reported through the same bad adapter's distortion: one worker start instead of one each. The
file cases are judged on their own plain run (the files are what they change).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest

from tests.bad_adapters import files, reports
from trainspec.conformance.api import plan
from trainspec.conformance.cli import main
from trainspec.conformance.run.harness import Harness
from trainspec.conformance.run.scenario import Scenario
from trainspec.conformance.run.trace import Trace, parse_rank
from trainspec.conformance.selftest import SelfTest, self_test
from trainspec.conformance.selftest.findings import Problem, merged
from trainspec.conformance.selftest.runs import (
    plain_problems,
    plain_scenario,
    stop_problems,
    stop_scenario,
)

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
                       ("records", "RunEnd.best_model is None (BEST-2, NAN-1 and NAN-2 "
                                   "compare it with the best validation's weights): the best "
                                   "file best.pt holds weights"),
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
                                    "tests.worked.engine_adapter:EngineAdapter",
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


# ------------------------------------------------------------------------------ the files
FIX, FACT = ". Fix: ", ". A fact of the trainer, not an adapter problem: the checks will judge it"
BAD_FILES = "tests.bad_adapters.files:"
LOST_BEST = "RunEnd.best_model is None (BEST-2, NAN-1 and NAN-2 compare it with the best " \
            "validation's weights): the best file best.pt does not load as the trainer reads it"

# case of tests/bad_adapters/files.py -> the lines its plain run must get, in order: (topic,
# words, FIX for the adapter's problem or FACT for the trainer's), and what no line may say
FILE_CASES: dict[str, tuple[list[tuple[str, str, str]], tuple[str, ...]]] = {
    "Checkpointing": ([], ()),
    "PickledBestRead": ([], ()),
    # the adapter reports the best file's weights already: the fix is the reader, not that
    "PickledBest": ([("files", f"{LOST_BEST}: RuntimeError: Invalid magic number", FIX)],
                    ("report the best weights", "report them")),
    "PickledFilesBestInMemory": ([("files", "best.pt (best), last.pt (last) do not load as the "
                                   "trainer reads them: RuntimeError", FIX)], ()),
    # the adapter gives the trainer's own reader already: nothing to fix but the trainer
    "OwnReaderFails": ([("files", f"{LOST_BEST}: UnpicklingError", FACT),
                        ("files", "last.pt (last) does not load as the trainer reads it", FACT)],
                       ("report the best weights", "report them", FIX)),
    "BestWithoutEpoch": ([("files", "best.pt (best) records no epoch (best.pt holds "
                           "model_state_dict)", FACT)], ("FileLayout(keys=", FIX)),
    "EpochUnderOwnKey": ([("files", "best.pt (best), last.pt (last) hold the epoch under "
                           "'cur_epoch', which the layout does not read", FIX)], ()),
    "FinalNextEpoch": ([("files", "last.pt (last) records epoch 3 after epochs [0, 1, 2] (the "
                         "next epoch to run)", FACT)], ("epoch_base", FIX)),
    "NextEpochEverywhere": ([("epochs", "best.pt (best), last.pt (last) record epoch 3 after "
                              "epochs [0, 1, 2]: 1-based", FIX)], ()),
    # the adapter's Recorder reads the files already: one line, on the key, not on the Recorder
    "ModelKeyWrong": ([("files", LOST_BEST.replace("does not load as the trainer reads it",
                                                   "loads, but its model weights are not where "
                                                   "the layout looks"), FIX)],
                      ("Recorder(files=", "report them")),
}
# the fix each adapter's problem must name (the words after "Fix: ")
FILE_FIXES = {"PickledBest": "FileLayout(load=...)", "PickledFilesBestInMemory": "load=",
              "EpochUnderOwnKey": "FileLayout(keys={'epoch': 'cur_epoch'})",
              "NextEpochEverywhere": "FileLayout(epoch_base=1)",
              "ModelKeyWrong": "FileLayout(keys={'model': ...})"}


@pytest.mark.parametrize("case", sorted(FILE_CASES))
def test_each_file_case_is_told_its_fix_or_named_as_the_trainers(case: str,
                                                                  harness: Harness) -> None:
    spec = plan(BAD_FILES + case).target.adapter
    s = plain_scenario()
    trace = harness.using(spec).run(s)
    found = merged(plain_problems(s, trace, getattr(files, case)().capabilities()))
    lines = [p.line() for p in found]
    want, never = FILE_CASES[case]
    assert len(lines) == len(want), lines
    for (topic, words, whose), p, line in zip(want, found, lines, strict=True):
        assert line.startswith(f"[{topic}] "), line
        assert words in line, line
        assert whose in line, line
        assert p.is_trainer_fact == (whose == FACT), line
        if whose == FIX:
            assert FILE_FIXES[case] in line.partition(FIX)[2], line
    for line in lines:
        assert not any(w in line for w in never), line


def test_a_trainers_fact_alone_passes_the_self_test_and_exits_0(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", BAD_FILES + "BestWithoutEpoch", "--self-test"]) == 0
    out = capsys.readouterr().out
    assert [line.startswith("[files] best.pt (best) records no epoch") and FACT in line
            for line in _problem_lines(out)] == [True]
    assert "no problem found: the adapter reports what the checks read; 1 fact of the " \
           "trainer the checks will judge" in out
    assert f"next: trainspec check {BAD_FILES}BestWithoutEpoch" in out


def test_a_finding_is_the_adapters_problem_or_the_trainers_fact_never_both() -> None:
    with pytest.raises(ValueError, match=r"give a fix .* or judged_by"):
        Problem(topic="files", what="x", fix="do y", judged_by="CKPT-1")
    with pytest.raises(ValueError, match=r"give a fix .* or judged_by"):
        Problem(topic="files", what="x")
    fact = Problem(topic="files", what="a.pt records no epoch", judged_by="CKPT-1")
    problem = Problem(topic="records", what="no Setup recorded", fix="record it")
    assert [p.line() for p in merged([fact, problem])] == [
        "[records] no Setup recorded. Fix: record it", f"[files] a.pt records no epoch{FACT} "
        "(CKPT-1)"]
    tested = SelfTest(target="t", problems=(fact,), runs=1, duration_s=0.0)
    assert tested.passed
    assert not SelfTest(target="t", problems=(fact, problem), runs=1, duration_s=0.0).passed


def test_problems_that_differ_only_in_their_subject_merge_into_one_line() -> None:
    def crash(where: str) -> Problem:
        return Problem(topic="epochs", subject=repr(where), what="the points {subject} came",
                       fix="count from 0")

    other = Problem(topic="files", what="{not a subject}", fix="name them")
    lines = [p.line() for p in merged([crash("a"), other, crash("b")])]
    assert lines == ["[epochs] the points 'a', 'b' came. Fix: count from 0",
                     "[files] {not a subject}. Fix: name them"]
