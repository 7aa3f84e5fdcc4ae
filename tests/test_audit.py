"""``trainspec audit``: real runs of the reference and of mutants, a resumed run, bad logs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.mutants.best import WritesBestEveryValidation
from tests.mutants.loop import SkipsTheFinalValidation
from trainspec.conformance.audit import NOT_OBSERVABLE, AuditLogError, audit
from trainspec.conformance.cli import main
from trainspec.conformance.spec.results import Report
from trainspec.kit import audited
from trainspec.reference.config import CkptConfig, TrainConfig, ValConfig
from trainspec.reference.example import MLPTrainer


def _cfg(root: Path, **over: Any) -> TrainConfig:
    val = over.pop("val", ValConfig(first=True, patience=3))
    return TrainConfig(seed=0, num_epochs=over.pop("num_epochs", 4), val=val,
                       ckpt=CkptConfig(dir=str(root), every_n_epochs=2, **over),
                       extra={"lr": 0.05})


def _train(cls: type[Any], cfg: TrainConfig) -> Path:
    trainer = audited(cls)(cfg)
    trainer.train()
    assert trainer.ckpt_dir is not None
    return Path(trainer.ckpt_dir)


def _mutant(mutant: type[Any]) -> type[Any]:
    return type(mutant.__name__, (mutant, MLPTrainer), {})


def _verdicts(report: Report) -> dict[str, str]:
    return {c.id: c.verdict for c in report.clauses}


@pytest.fixture(scope="module")
def clean_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _train(MLPTrainer, _cfg(tmp_path_factory.mktemp("clean")))


def test_a_real_run_of_the_reference_passes_every_clause_it_shows(clean_run: Path) -> None:
    report = audit([clean_run])
    verdicts = _verdicts(report)
    assert report.conformant
    for clause in ("LOOP-1", "LOOP-2", "LOOP-4", "BEST-1", "BEST-2", "BEST-3", "BEST-4",
                   "PAT-1", "PAT-5", "CKPT-1"):
        assert verdicts[clause] == "pass", report.clause(clause).evidence
    assert report.clause("RES-2").evidence == NOT_OBSERVABLE
    assert verdicts["FT-1"] == "n/a"


def test_the_cli_writes_the_same_reports_as_check(clean_run: Path, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "audit.json"
    assert main(["audit", str(clean_run), "--report", str(out), "--junit",
                 str(tmp_path / "a.xml"), "--markdown", str(tmp_path / "a.md")]) == 0
    data = json.loads(out.read_text())
    assert data["conformant"] is True
    assert {c["id"]: c["verdict"] for c in data["clauses"]}["BEST-3"] == "pass"
    assert (tmp_path / "a.xml").read_text().startswith("<?xml")
    assert "BEST-3" in capsys.readouterr().out


def test_a_mutant_that_rewrites_best_every_validation_is_caught(tmp_path: Path) -> None:
    run = _train(_mutant(WritesBestEveryValidation),
                 _cfg(tmp_path, val=ValConfig(first=True, patience=None), num_epochs=6))
    report = audit([run])
    assert report.clause("BEST-3").verdict == "fail"
    assert "did not improve but best.pt was rewritten" in report.clause("BEST-3").evidence
    assert not report.conformant


def test_a_mutant_that_skips_the_final_validation_is_caught(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, val=ValConfig(every_n_epochs=2), num_epochs=4)
    report = audit([_train(_mutant(SkipsTheFinalValidation), cfg)])
    assert report.clause("LOOP-2").verdict == "fail"
    assert "due at [0, 2, 3]" in report.clause("LOOP-2").evidence


def test_a_resumed_run_is_judged_across_its_launches(tmp_path: Path) -> None:
    first = _train(MLPTrainer, _cfg(tmp_path, num_epochs=2))
    # the run goes on from its last.pt for two more epochs: a resume
    cfg = _cfg(tmp_path, num_epochs=4, load_from=str(first / "last.pt"), resume=True)
    second = _train(MLPTrainer, cfg)
    report = audit([first, second])
    assert report.clause("RES-1").verdict == "pass", report.clause("RES-1").evidence
    assert report.clause("RES-3").verdict == "pass", report.clause("RES-3").evidence
    assert report.clause("LOOP-2").verdict == "pass", report.clause("LOOP-2").evidence
    assert report.environment["launches"] == "2"


def _log_of(run: Path) -> Path:
    return next((run / "trainspec-audit").glob("*.jsonl"))


def _bad_copy(run: Path, tmp_path: Path, edit: Any) -> Path:
    folder = tmp_path / "bad" / "trainspec-audit"
    folder.mkdir(parents=True)
    lines = _log_of(run).read_text().splitlines(keepends=True)
    (folder / "x.rank0.jsonl").write_text("".join(edit(lines)))
    return folder.parent


@pytest.mark.parametrize(("edit", "match"), [
    (lambda lines: [*lines[:3], lines[3][:20]], r"x\.rank0\.jsonl:4: the last line is cut"),
    (lambda lines: [*lines[:2], "{not json\n", *lines[3:]], r":3: not a JSON line"),
    (lambda lines: [lines[0].replace("trainspec-audit/1", "trainspec-audit/9"), *lines[1:]],
     r":1: format 'trainspec-audit/9'"),
    (lambda lines: [lines[0], *lines[2:]], r":2: event number 2, expected 1"),
    (lambda lines: [*lines[:2], '{"n":2,"ev":"val","score":NaN}\n'], r":3: not a JSON line"),
    (lambda lines: [*lines[:2], '{"n":2,"ev":"__import__(\'os\')"}\n'], r":3: unknown event"),
])
def test_a_bad_log_is_a_usage_error_naming_the_file_and_line(
        clean_run: Path, tmp_path: Path, edit: Any, match: str) -> None:
    with pytest.raises(AuditLogError, match=match):
        audit([_bad_copy(clean_run, tmp_path, edit)])


def test_ranks_that_disagree_on_the_run_id_are_refused(clean_run: Path, tmp_path: Path) -> None:
    folder = tmp_path / "ranks" / "trainspec-audit"
    folder.mkdir(parents=True)
    header, *rest = _log_of(clean_run).read_text().splitlines(keepends=True)
    for rank, run_id in ((0, "a"), (1, "b")):
        data = {**json.loads(header), "rank": rank, "world_size": 2, "run_id": run_id}
        (folder / f"{run_id}.rank{rank}.jsonl").write_text(json.dumps(data) + "\n"
                                                          + "".join(rest))
    with pytest.raises(AuditLogError, match="the ranks disagree on the run id"):
        audit([folder.parent])


def test_a_folder_without_a_log_exits_2(tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["audit", str(tmp_path)]) == 2
    assert "no audit log in" in capsys.readouterr().err
