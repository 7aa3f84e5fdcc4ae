"""Checkpoint files as the checks see them: roles, progress and keys, described by adapters."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from trainspec.conformance.checks import CHECKS, run_check
from trainspec.conformance.run.files import FileRecord, describe_seed_files, seed_role
from trainspec.conformance.run.harness import AdapterSpec, Harness
from trainspec.conformance.runner import open_context, resolve_target

ROOT = Path(__file__).resolve().parent.parent


class _RunsCode:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.mkdir, (self.marker,))


def test_seed_names_map_to_roles_and_temporaries_to_none() -> None:
    assert [seed_role(n) for n in ("last.pt", "best.pt", "epoch_12.pt", ".last.pt.7.tmp",
                                   "metrics.jsonl")] == ["last", "best", "epoch", None, None]


def test_a_seed_checkpoint_is_described_by_its_progress_and_keys(tmp_path: Path) -> None:
    torch.save({"epoch": 3, "train_step": 12, "run_id": "r", "config": {}}, tmp_path / "last.pt")
    (record,) = describe_seed_files(tmp_path)
    assert (record.role, record.epoch, record.step, record.error) == ("last", 3, 12, None)
    assert record.keys == ("config", "epoch", "run_id", "train_step")
    assert record.types["run_id"] == "str"


def test_describing_a_malicious_checkpoint_records_an_error_and_runs_nothing(
        tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    torch.save({"epoch": 0, "payload": _RunsCode(str(marker))}, tmp_path / "best.pt")
    (record,) = describe_seed_files(tmp_path)
    assert record.error
    assert not marker.exists()


def test_the_checks_read_the_adapters_own_description_of_its_files(harness: Harness) -> None:
    target = resolve_target("tests.file_roles.blind:BlindToCheckpoints")
    assert target.adapter == AdapterSpec(factory="tests.file_roles.blind:BlindToCheckpoints")
    ctx, _ = open_context(target, harness, world_size=1)
    result = run_check(CHECKS["check_checkpoint_files_and_contents"], ctx)
    assert result.outcome == "failed"
    # every case is reported: the missing epoch_<e>.pt files, and (graver, so first) the
    # final last.pt the adapter never names
    assert "no file the run left is described as its last checkpoint" in result.evidence
    assert any("expected three, holding epochs 0, 2, 4" in c.evidence for c in result.failing)


def test_ckpt_1_judges_what_an_adapter_says_a_file_holds_not_the_seed_key_names() -> None:
    from trainspec.conformance.checks.ckpt import _content_problem

    def record(**entry: object) -> FileRecord:
        return FileRecord.from_json({"relpath": "last.ckpt", "size": 1, "mtime_ns": 1,
                                     "role": "last", "epoch": 1, "step": 4, **entry})

    framework = record(keys=["epoch", "global_step", "state_dict"],
                       holds=["epoch", "step", "model", "optimizer", "scheduler"])
    assert _content_problem(framework) == (
        "lacks run_id, config (it holds epoch, step, model, optimizer, scheduler)")
    complete = record(holds=["epoch", "step", "run_id", "config", "model", "optimizer",
                             "scheduler"])
    assert _content_problem(complete) is None
    # without holds, the seed's key names are what counts
    assert _content_problem(record(keys=["epoch", "global_step", "state_dict"])) == (
        "lacks train_step, run_id, config, model_state_dict, optimizer_state_dict, "
        "scheduler_state_dict")


def test_a_pickled_config_object_is_read_and_its_weights_only_refusal_kept_apart(
        tmp_path: Path) -> None:
    from trainspec.reference.config import TrainConfig

    config = TrainConfig.from_mapping({"num_epochs": 2})
    torch.save({"epoch": 1, "train_step": 4, "run_id": "r", "config": config},
               tmp_path / "last.pt")
    (record,) = describe_seed_files(tmp_path)
    # read as its trainer reads it: progress and keys are there to judge
    assert (record.error, record.epoch, record.step) == (None, 1, 4)
    assert record.types["config"] == "TrainConfig"
    # the weights-only refusal is a fact of its own, on its actionable line, without escapes
    assert record.weights_only_error is not None
    assert "Unsupported global: GLOBAL trainspec.reference.config." in \
        record.weights_only_error
    assert "This file can still be loaded" not in record.weights_only_error
    assert "\x1b" not in record.weights_only_error
    again = FileRecord.from_json(record.to_json())
    assert again == record
    # a description from before the field existed still reads
    old = {k: v for k, v in record.to_json().items() if k != "weights_only_error"}
    assert FileRecord.from_json(old).weights_only_error is None


def test_a_file_that_would_call_a_function_is_not_read_another_way(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    torch.save({"epoch": 0, "payload": _RunsCode(str(marker))}, tmp_path / "last.pt")
    (record,) = describe_seed_files(tmp_path)
    assert record.error is not None
    assert record.weights_only_error is not None
    assert "mkdir is not plain data" in record.error
    assert record.epoch is None
    assert not marker.exists()


def test_ckpt_1_alone_names_the_weights_only_refusal() -> None:
    from trainspec.conformance.checks.ckpt import _content_problem

    refused = "UnpicklingError: Weights only load failed: Unsupported global: GLOBAL a.B"
    record = FileRecord(relpath="last.pt", size=1, mtime_ns=1, role="last", epoch=0, step=1,
                        keys=("config", "epoch"), types={"config": "B"},
                        weights_only_error=refused)
    assert _content_problem(record) == f"does not load with weights_only=True ({refused})"
    torn = FileRecord(relpath="last.pt", size=1, mtime_ns=1, role="last",
                      error="RuntimeError: PytorchStreamReader failed", weights_only_error=refused)
    assert _content_problem(torn) == "does not load (RuntimeError: PytorchStreamReader failed)"
