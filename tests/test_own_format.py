"""The trainer is judged, not the suite's reading of its files: its own resume always runs, a
planted payload sits in its own format, and a torn write is judged at the path it tore.

The trainers (tests/own_format/, tests/mutants/ckpt.py) are in the shapes issue 23 met: one
that cannot load its own files, one whose folder checkpoints hold a file its resume unpickles
unsafely, one that runs the planted code and then raises, one that overwrites its best file in
place while writing numbered files anew.
"""

from __future__ import annotations

import pickletools
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harnesses import repo_harness
from trainspec.conformance.checks import planted
from trainspec.conformance.checks.chains import resume_cause, trainer_frame
from trainspec.conformance.checks.torn import _kept
from trainspec.conformance.run.files import FileRecord
from trainspec.conformance.run.harness import Harness
from trainspec.conformance.run.reading import actionable_line
from trainspec.conformance.runner import resolve_target, run_checks
from trainspec.conformance.spec.results import Report, normal_cause, shared_causes

ROOT = Path(__file__).resolve().parent.parent
OWN = "tests.own_format.trainers"


def _check(harness: Harness, trainer: str, clauses: str) -> Report:
    return run_checks(resolve_target(base_trainer=trainer), clauses=clauses, world_size=1,
                      harness=harness, max_examples=20)


def _verdicts(report: Report) -> dict[str, str]:
    return {c.id: c.verdict for c in report.clauses if c.id in report.selected}


# ---------------------------------------------------------------- the trainer's own resume


@pytest.mark.slow
def test_a_trainer_that_cannot_load_its_own_files_fails_on_its_own_resume_error(
        harness: Harness) -> None:
    """Its best-file clauses are judged on what its files hold (read as the trainer wrote
    them, in the hand-written checks and the generated runs alike) and pass; its resume and
    finetune clauses fail with the error its own resume raised, with the trainer's frame,
    grouped once; the suite never stops before running the trainer."""
    clauses = ("RES-1", "RES-3", "RES-5", "FT-1", "FT-4", "CKPT-5")
    report = _check(harness, f"{OWN}:CannotLoadItsOwnFiles",
                    ",".join((*clauses, "BEST-2", "BEST-3")))
    assert _verdicts(report) == {**dict.fromkeys(clauses, "fail"), "BEST-2": "pass",
                                 "BEST-3": "pass"}, {c.id: c.evidence for c in report.clauses}
    for best in ("BEST-2", "BEST-3"):  # no check of them failed, none read "epoch None"
        checks = report.clause(best).checks
        assert [ch.outcome for ch in checks if ch.outcome not in ("passed", "n/a")] == []
        assert not [ch.evidence for ch in checks if "None" in ch.evidence]
    assert "with epoch" in report.clause("BEST-3").evidence  # best.pt's own epoch, read
    for clause in clauses:
        evidence = report.clause(clause).evidence
        assert "from last.pt raised CheckpointCorruptError" in evidence, evidence
        assert "GLOBAL getattr" in evidence
        assert "(at trainspec/reference/checkpoint.py:" in evidence
        assert "does not load" not in evidence  # not the suite's reading of the file
    groups = shared_causes(report.clauses)
    assert len(groups) == 1, groups
    cause, ids = groups[0]
    assert cause.startswith("the trainer's resume raised CheckpointCorruptError: "
                            "<the checkpoint>: refused to load"), cause
    assert set(ids) == set(clauses), [(c.id, [(ch.name, ch.outcome, ch.evidence, ch.cause)
                                              for ch in c.checks])
                                      for c in report.clauses if c.id not in ids]


def test_a_resume_that_raised_is_one_cause_whatever_the_files_path() -> None:
    """The error line is cut at 300 characters, path included: the cause is made from the
    whole message in the traceback, so a deeper folder or another file name moves nothing."""
    message = ("refused to load, the checkpoint holds objects a weights-only load does not "
               "allow (Unsupported global: GLOBAL getattr was not an allowed global by "
               "default). Loading it fully could execute code embedded in it; re-save it with "
               "tensors, numbers, strings and plain containers only.")
    causes = set()
    for path in ("/tmp/a/last.pt", "/tmp/" + "deeper/" * 20 + "run-7/epoch_0.pt"):
        error = f"CheckpointCorruptError: {actionable_line(f'{path}: {message}')}"
        traceback = ("Traceback (most recent call last):\n  File \"t.py\", line 1, in load\n"
                     f"trainspec.errors.CheckpointCorruptError: {path}: {message}\n")
        causes.add(normal_cause(resume_cause(error, traceback, path)))
    (cause,) = causes
    assert cause.startswith("the trainer's resume raised CheckpointCorruptError: "
                            "<the checkpoint>: refused to load")
    assert resume_cause("OSError: boom at /x/f.pt", "", "/x/f.pt") == \
        "the trainer's resume raised OSError: boom at <the checkpoint>"


def test_the_trainers_frame_is_its_innermost_frame_outside_libraries() -> None:
    traceback = (
        'Traceback (most recent call last):\n'
        '  File "/x/trainspec/conformance/run/child.py", line 260, in _run_child\n'
        '    adapter.run(scenario, ctx)\n'
        '  File "/repo/mytrainer/engine.py", line 215, in train\n'
        '    ckpt = torch.load(self.load_from)\n'
        '           ^^^^^^^^^^^^^^^^^^^^^^^^^^\n'
        '  File "/venv/lib/python3.11/site-packages/torch/serialization.py", line 1470, in load\n'
        '    raise pickle.UnpicklingError(_get_wo_message(str(e))) from None\n'
        '_pickle.UnpicklingError: Weights only load failed\n')
    assert trainer_frame(traceback) == \
        " (at /repo/mytrainer/engine.py:215 in train: ckpt = torch.load(self.load_from))"
    assert trainer_frame("no traceback here") == ""


# ---------------------------------------------------------------- CKPT-3, the planted copy


@pytest.mark.slow
def test_a_folder_checkpoint_whose_resume_unpickles_one_inner_file_fails_ckpt_3() -> None:
    """The crafted copy is a folder of the trainer's own format: its weights file is refused
    weights-only, and its trainer_state.pkl, unpickled with pickle.load, runs the code; its
    resume from its own folders is judged as it resumes (and passes)."""
    target = resolve_target(f"{OWN}:FolderAdapter")
    with repo_harness(target.adapter, timeout_s=60) as h:
        report = run_checks(target, clauses="CKPT-3,RES-1,FT-1", world_size=1, harness=h,
                            max_examples=20)
    assert _verdicts(report) == {"CKPT-3": "fail", "RES-1": "pass", "FT-1": "pass"}
    assert report.clause("CKPT-3").evidence.startswith(
        "CKPT-3: the embedded code ran: the resume from a copy of last executed code embedded "
        "in last/trainer_state.pkl")
    # every case runs: the finetune's is reported too; the crafted last/weights.pt, refused
    # weights-only, passes; best/, which a run from last/ never opens, is not judged
    cases = {c.name: c for c in report.clause("CKPT-3").checks[0].cases}
    assert {n: c.outcome for n, c in cases.items() if "weights.pt" in n} == {
        "the resume from a copy with last/weights.pt crafted": "passed",
        "the finetune from a copy with last/weights.pt crafted": "passed",
        "the resume from a copy with best/weights.pt crafted": "not judged",
        "the finetune from a copy with best/weights.pt crafted": "not judged"}
    finetune = cases["the finetune from a copy with last/trainer_state.pkl crafted"]
    assert finetune.outcome == "failed"
    assert "the finetune from a copy of last executed code embedded in " \
        "last/trainer_state.pkl" in finetune.evidence


@pytest.mark.slow
def test_ckpt_3_passes_only_on_a_crafted_file_the_trainer_opened(harness: Harness) -> None:
    """The reference opens the crafted last.pt, refuses it, and says so: a pass naming what
    was opened; a loader that runs the payload then raises fails for the code that ran."""
    report = _check(harness, "trainspec.reference:BaseTrainer", "CKPT-3")
    assert _verdicts(report) == {"CKPT-3": "pass"}
    assert "opened by the trainer (resume: last.pt; finetune: last.pt): the code never ran" in \
        report.clause("CKPT-3").evidence
    report = _check(harness, "tests.mutants.ckpt:ChecksItsFilesAfterUnpickling", "CKPT-3")
    evidence = report.clause("CKPT-3").evidence
    assert evidence.startswith("CKPT-3: the embedded code ran: the resume from a copy of "
                               "last.pt"), evidence
    assert "no sign that it loaded" not in evidence


def test_a_crafted_torch_file_leads_with_the_call_and_keeps_its_content(tmp_path: Path) -> None:
    """The payload comes first (a weights-only load refuses it at once, naming os.mkdir); a
    full unpickle, in a process of its own, runs it and then reads the file's own dict."""
    import torch

    source = tmp_path / "last.pt"
    torch.save({"epoch": 3, "w": torch.ones(2)}, source)
    marker = tmp_path / "ran"
    crafted = tmp_path / "crafted.pt"
    made = planted.crafted_bytes(source.read_bytes(), str(marker))
    assert made is not None
    crafted.write_bytes(made)
    with pytest.raises(Exception, match="mkdir"):
        torch.load(crafted, weights_only=True)
    assert not marker.exists()
    script = ("import sys, torch; c = torch.load(sys.argv[1], weights_only=False); "
              "print(c['epoch'])")
    out = subprocess.run([sys.executable, "-c", script, str(crafted)], capture_output=True,
                         text=True, check=True, timeout=120)
    assert out.stdout.strip() == "3"
    assert marker.is_dir()


def test_a_plain_pickle_is_crafted_and_other_files_are_left_alone(tmp_path: Path) -> None:
    data = b"\x80\x04\x95\x05\x00\x00\x00\x00\x00\x00\x00}\x94."  # pickle of {}
    made = planted.crafted_bytes(data, "/nowhere/marker")
    assert made is not None
    assert made.endswith(data)
    first = next(pickletools.genops(made))
    assert (first[0].name, first[1]) == ("GLOBAL", "os mkdir")
    assert planted.crafted_bytes(b'{"epoch": 3}', "/nowhere/marker") is None
    folder = tmp_path / "ckpt"
    (folder / "last").mkdir(parents=True)
    (folder / "last" / "state.pkl").write_bytes(data)
    (folder / "last" / "config.json").write_text("{}")
    (folder / "rng.pkl").write_bytes(data)
    assert planted.pickled_files(folder, folder / "last") == [Path("last/state.pkl"),
                                                                Path("rng.pkl")]


# ---------------------------------------------------------------- CKPT-2, path by path


def _file(name: str, *, epoch: int | None = 1, error: str | None = None) -> FileRecord:
    return FileRecord(relpath=f"run-1/{name}", size=10, mtime_ns=1, role="best", epoch=epoch,
                      error=error)


def test_a_torn_new_path_is_not_ckpt_2s_matter() -> None:
    before = [_file("best.pt")]
    after = (_file("best.pt"), _file("epoch_2.pt", epoch=None, error="truncated"))
    assert _kept("epoch_2.pt", before, after) == [
        "(is a new path, torn with no previous version to keep: not CKPT-2's matter)"]


def test_a_path_that_held_a_complete_file_is_judged_lost_or_damaged() -> None:
    before = [_file("best.pt")]
    damaged = (_file("best.pt", epoch=None, error="EOFError"),)
    assert _kept("best.pt", before, damaged) == [
        "best.pt, which held a complete checkpoint of epoch 1 before the write, no longer "
        "loads (EOFError)"]
    assert _kept("best.pt", before, ()) == [
        "best.pt, which held a complete checkpoint of epoch 1 before the write, is gone"]
    assert _kept("best.pt", before, (_file("best.pt", epoch=2),)) == []
    # a file that never loaded is not one a torn write damaged
    assert _kept("best.pt", [_file("best.pt", error="refused")], damaged) == [
        "(did not load before the write either (refused): not judged)"]


@pytest.mark.slow
def test_ckpt_2_blames_the_best_file_overwritten_in_place(harness: Harness) -> None:
    """Each kill is a case; the best file's are the failing ones, the numbered file torn
    anew is not judged."""
    report = _check(harness, "tests.mutants.ckpt:OverwritesTheBestFileInPlace", "CKPT-2")
    assert _verdicts(report) == {"CKPT-2": "fail"}
    (result,) = report.clause("CKPT-2").checks
    failing = {c.name: c.evidence for c in result.failing}
    assert set(failing) == {f"the write of best.pt, killed at {p}" for p in ("0%", "50%")}
    for evidence in failing.values():
        assert "best.pt, which held a complete checkpoint of epoch 1 before the write, no " \
            "longer loads" in evidence
        assert "epoch_2.pt" not in evidence  # torn too, but a new path: nothing of it was lost
    assert report.clause("CKPT-2").evidence == failing["the write of best.pt, killed at 0%"]


@pytest.mark.slow
def test_ckpt_2_judges_the_file_a_torn_temporary_file_stands_for(harness: Harness) -> None:
    """A kill inside the write of ``.last.pt.<pid>.tmp`` is judged at last.pt (the run's
    folder is named anew each run): removed before the write, it is lost."""
    report = _check(harness, f"{OWN}:RemovesTheOldFileFirst", "CKPT-2")
    assert _verdicts(report) == {"CKPT-2": "fail"}
    (result,) = report.clause("CKPT-2").checks
    failing = {c.name: c.evidence for c in result.failing}
    assert set(failing) == {f"the {w}, killed at {p}" for w in ("epoch's first write",
                                                               "write of best.pt")
                            for p in ("0%", "50%", "100%")}
    first = failing["the epoch's first write, killed at 0%"]
    assert "killed after writing 0% of .last.pt." in first
    assert "last.pt, which held a complete checkpoint of epoch 1 before the write, is gone" in \
        first


# ---------------------------------------------------------------- CKPT-4, both halves


@pytest.mark.slow
def test_ckpt_4_reports_the_corrupt_files_when_the_missing_path_fails_too(
        harness: Harness) -> None:
    """A trainer that starts afresh on any checkpoint it cannot load fails both halves: the
    missing path, and each corrupt file, every one a case reported with its evidence."""
    report = _check(harness, "tests.mutants.ckpt:MissingCheckpointStartsFresh", "CKPT-4")
    assert _verdicts(report) == {"CKPT-4": "fail"}
    (result,) = report.clause("CKPT-4").checks
    failing = {c.name: c.evidence for c in result.failing}
    assert list(failing) == ["a missing path",
                             "a corrupt file: a checkpoint truncated to half its size",
                             "a corrupt file: a file of garbage bytes"]
    assert "ckpt.load_from=nowhere/missing-ckpt.pt (no such file) did not raise; the run " \
        "trained [0, 1] from scratch" in failing["a missing path"]
    assert "a checkpoint truncated to half its size (corrupt-last.pt) did not raise; the run " \
        "trained [0, 1]" in failing["a corrupt file: a checkpoint truncated to half its size"]
    assert "a file of garbage bytes (garbage-last.pt) did not raise" in \
        failing["a corrupt file: a file of garbage bytes"]
    assert report.clause("CKPT-4").evidence == failing["a missing path"]
