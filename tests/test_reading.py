"""The trainer's own reader: files read as their trainer reads them, and never a payload run."""

from __future__ import annotations

import argparse
import collections
import dataclasses
import datetime
import enum
import json
import os
from collections.abc import Iterator
from pathlib import Path, PosixPath
from typing import Any

import numpy
import pytest
import torch

from tests.worked.template_adapter import TemplateAdapter
from tests.worked.template_trainer import ConfigParser
from trainspec import kit
from trainspec.conformance.api import check
from trainspec.conformance.run.memory import MemoryContext, run_in_fork
from trainspec.conformance.run.reading import read_checkpoint, trusting
from trainspec.conformance.run.scenario import Scenario


class Mode(enum.Enum):
    FAST = "fast"


@dataclasses.dataclass
class RunConfig:
    """A config object of the kind template trainers pickle into every checkpoint."""

    save_dir: Path
    started: datetime.datetime
    mode: Mode
    args: argparse.Namespace


class Buffer:
    """A framework object rebuilt through a bound class method (``getattr`` on unpickling)."""

    def __init__(self, values: list[float]) -> None:
        self.values = values

    @classmethod
    def rebuild(cls, values: list[float]) -> Buffer:
        return cls(values)

    def __reduce__(self) -> tuple[Any, tuple[list[float]]]:
        return (Buffer.rebuild, (self.values,))


class _RunsCode:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.mkdir, (self.marker,))


@pytest.fixture
def everything_trusted() -> Iterator[None]:
    with trusting(lambda path: True):
        yield


def _config(tmp_path: Path) -> RunConfig:
    return RunConfig(save_dir=tmp_path / "runs", started=datetime.datetime(2026, 1, 2),
                     mode=Mode.FAST, args=argparse.Namespace(lr=0.1, out=Path("out")))


def test_a_config_object_holding_paths_is_read_with_its_own_classes(tmp_path: Path) -> None:
    torch.save({"epoch": 3, "config": _config(tmp_path),
                "history": collections.defaultdict(list, {"loss": [1.0]}),
                "scores": numpy.arange(3.0), "best": numpy.float32(0.5)}, tmp_path / "f.pt")
    read = read_checkpoint(tmp_path / "f.pt")
    assert (read.error, read.how) == (None, "own_classes")
    assert read.weights_only_error is not None
    assert "RunConfig" in read.weights_only_error
    assert read.content is not None
    assert read.content["config"].save_dir == tmp_path / "runs"
    assert kit.lookup(read.content, "config.args.lr") == 0.1


def test_a_file_needing_getattr_is_refused_unless_the_trainer_wrote_it(
        tmp_path: Path) -> None:
    torch.save({"meta": {"epoch": 2}, "hub": Buffer([0.5])}, tmp_path / "f.pt")
    refused = read_checkpoint(tmp_path / "f.pt")
    assert refused.content is None
    assert refused.error is not None
    assert "builtins.getattr is not plain data" in refused.error
    with trusting(lambda path: path == tmp_path / "f.pt"):
        read = read_checkpoint(tmp_path / "f.pt")
    assert (read.error, read.how, read.types["hub"]) == (None, "unpickled", "Buffer")
    assert read.content is not None
    assert kit.lookup(read.content, "meta.epoch") == 2
    assert read.content["hub"] == {"__type__": "Buffer", "values": [0.5]}


def test_the_adapters_load_reads_what_the_trainer_wrote(tmp_path: Path,
                                                        everything_trusted: None) -> None:
    torch.save({"meta": {"epoch": 2}, "hub": Buffer([0.5])}, tmp_path / "f.pt")
    read = read_checkpoint(tmp_path / "f.pt",
                           load=lambda p: {**torch.load(p, weights_only=False), "seen": 1})
    assert (read.error, read.how) == (None, "load")
    assert read.content is not None
    assert read.content["seen"] == 1


def test_a_payload_never_runs_even_in_a_file_the_trainer_wrote(
        tmp_path: Path, everything_trusted: None) -> None:
    marker = tmp_path / "ran"
    torch.save({"epoch": 0, "payload": _RunsCode(str(marker))}, tmp_path / "f.pt")
    read = read_checkpoint(tmp_path / "f.pt")
    assert read.content is None
    assert read.error is not None
    assert "not unpickled in full: it names posix.mkdir" in read.error
    assert not marker.exists()


def test_nested_keys_give_progress_and_holds(tmp_path: Path) -> None:
    layout = kit.FileLayout(roles={"epoch_*.pth": "last"}, epoch_base=1,
                            keys={"model": "state_dict", "epoch": "meta.epoch",
                                  "step": "meta.iter"})
    torch.save({"meta": {"epoch": 3, "iter": 12}, "state_dict": {"w": torch.ones(2)}},
               tmp_path / "epoch_3.pth")
    (record,) = layout.describe(tmp_path)
    assert (record.epoch, record.step, record.error) == (2, 12, None)
    assert record.holds == ("epoch", "step", "model")


def test_a_folder_checkpoint_is_one_entry_with_weights_from_the_file_inside(
        tmp_path: Path) -> None:
    layout = kit.FileLayout(roles={"checkpoint-*": "last"},
                            keys={"epoch": "trainer_state.epoch",
                                  "step": "trainer_state.global_step"})
    folder = tmp_path / "checkpoint-8"
    folder.mkdir()
    torch.save({"w": torch.full((2,), 3.0)}, folder / "model.pt")
    torch.save({"state": {}, "param_groups": []}, folder / "optimizer.pt")
    (folder / "trainer_state.json").write_text(json.dumps({"epoch": 1, "global_step": 8}))
    (record,) = layout.describe(tmp_path)
    assert (record.relpath, record.role, record.epoch, record.step, record.error) == (
        "checkpoint-8", "last", 1, 8, None)
    assert set(record.keys) == {"model", "optimizer", "trainer_state"}
    snap = layout.snapshot(tmp_path, "last")
    assert snap is not None
    assert snap.error is None
    assert snap.epoch == 1
    assert snap.weights is not None
    assert torch.equal(snap.weights["w"], torch.full((2,), 3.0))


def test_a_torn_file_inside_a_folder_checkpoint_is_its_error(tmp_path: Path) -> None:
    layout = kit.FileLayout(roles={"checkpoint-*": "last"})
    folder = tmp_path / "checkpoint-8"
    folder.mkdir()
    torch.save({"w": torch.ones(2)}, folder / "model.pt")
    (folder / "model.pt").write_bytes((folder / "model.pt").read_bytes()[:40])
    (record,) = layout.describe(tmp_path)
    assert record.error is not None
    assert record.error.startswith("model.pt: ")


# a process-wide registry keyed by time, as a training engine's message hub is
_HUBS: dict[str, list[float]] = {}


class _RegistryAdapter:
    """Raises when a previous run's hub is still registered in its process."""

    def run(self, scenario: Scenario, ctx: kit.RunContext) -> None:
        if _HUBS:
            raise RuntimeError(f"a previous run's hub is here: {sorted(_HUBS)}")
        _HUBS[datetime.datetime.now().strftime("%Y%m%d_%H%M%S")] = []


def test_each_forked_run_starts_without_the_previous_runs_registries(tmp_path: Path) -> None:
    adapter, scenario = _RegistryAdapter(), Scenario(name="fork")
    first, second = (run_in_fork(adapter, scenario, tmp_path) for _ in range(2))
    assert (first.error, second.error) == (None, None)
    assert _HUBS == {}
    # in one process the second run would have seen the first one's hub
    adapter.run(scenario, MemoryContext(tmp_path))
    with pytest.raises(RuntimeError, match="a previous run's hub is here"):
        adapter.run(scenario, MemoryContext(tmp_path))
    _HUBS.clear()


class AllowListedTemplate(TemplateAdapter):
    """The template's adapter with a hand-made allow-list around its run and its files."""

    def describe_checkpoints(self, root: Path) -> list[kit.FileRecord]:
        with torch.serialization.safe_globals([ConfigParser, PosixPath]):
            return super().describe_checkpoints(root)

    def run(self, scenario: kit.Scenario, ctx: kit.RunContext) -> None:
        with torch.serialization.safe_globals([ConfigParser, PosixPath]):
            super().run(scenario, ctx)


_TEMPLATE_CLAUSES = "LOOP-1,BEST-2,BEST-3,PAT-1,RES-2,RES-3,FT-1,CKPT-2,CKPT-3"


@pytest.mark.slow
def test_a_config_object_with_paths_gets_the_verdicts_a_hand_made_allow_list_gets() -> None:
    default = check("tests.worked.template_adapter:TemplateAdapter",
                    clauses=_TEMPLATE_CLAUSES, world_size=1)
    listed = check("tests.test_reading:AllowListedTemplate", clauses=_TEMPLATE_CLAUSES,
                   world_size=1)
    picked = set(_TEMPLATE_CLAUSES.split(","))

    def outcomes(report: Any) -> dict[str, tuple[str, str]]:
        # every hand-written check's outcome and evidence; the generated runs' draw ends at a
        # wall-clock budget, so how far it gets (the template's BEST-2 slip with checkpoints
        # off is found near its end) depends on the machine's load, not on how files are read
        return {ch.name: (ch.outcome, ch.evidence) for c in report.clauses if c.id in picked
                for ch in c.checks if not ch.name.startswith("check_generated_runs_")}

    assert outcomes(default) == outcomes(listed)
    assert len(outcomes(default)) >= 9
    # no behaviour clause's evidence is the weights-only refusal (CKPT-1's matter alone)
    assert not [c.id for c in default.clauses if "weights_only" in c.evidence.lower()
                or "weights only" in c.evidence.lower()]


@pytest.mark.slow
def test_an_engine_whose_files_need_getattr_has_its_best_files_judged_on_content() -> None:
    """The engine's files need ``getattr`` to unpickle: read as it wrote them, its best files
    and its resumes are judged on what they hold (and pass); CKPT-1 fails for what the engine
    does, every case reported with its own evidence, the weights-only refusal included."""
    report = check("tests.worked.engine_adapter:EngineAdapter",
                   clauses="BEST-2,BEST-3,RES-1,RES-2,CKPT-1", world_size=1)
    got = {c.id: c.verdict for c in report.clauses if c.id in report.selected}
    assert got == {"BEST-2": "pass", "BEST-3": "pass", "RES-1": "pass", "RES-2": "pass",
                   "CKPT-1": "fail"}, {c.id: c.evidence for c in report.clauses}
    assert "with epoch" in report.clause("BEST-3").evidence  # its best file's own epoch, read
    ckpt1 = report.clause("CKPT-1")
    (files,) = [ch for ch in ckpt1.checks if ch.name == "check_checkpoint_files_and_contents"]
    failing = {c.name: c.evidence for c in files.failing}
    stored = ("best_score_epoch_4.pth", "epoch_2.pth", "epoch_4.pth", "epoch_5.pth")
    for name in stored:  # the weights-only refusal, CKPT-1's own matter, file by file
        refused = failing.pop(f"the contents of {name}")
        assert refused.startswith(f"CKPT-1: {name} does not load with weights_only=True "
                                  "(UnpicklingError: "), refused
        assert "GLOBAL getattr" in refused
    assert failing == {
        # gravest (a loss) first: with ckpt.every_n_epochs=2 the engine writes epoch_2/4/5.pth
        # only, so no last file exists when epoch 1 starts
        "the last checkpoint after every epoch": "CKPT-1: when epoch 1 started, the last "
        "checkpoint (epoch_2.pth, epoch_4.pth, epoch_5.pth) said epoch None; expected 0 (the "
        "last checkpoint is written after every epoch)",
        "numbered checkpoints on the interval": "CKPT-1: with ckpt.every_n_epochs=2 over 5 "
        "epochs the run wrote [] as numbered checkpoints (epochs []); expected three, holding "
        "epochs 0, 2, 4 (epoch_0.pt, epoch_2.pt, epoch_4.pt in the spec's names)",
        "ckpt-no-last": "CKPT-1: with ckpt.save_last=false and every_n_epochs unset the run "
        "wrote ['epoch_1.pth', 'epoch_2.pth']; expected no last and no numbered checkpoint"}
    assert files.failing[0].name == "the last checkpoint after every epoch"
    assert files.evidence == failing["the last checkpoint after every epoch"]
    assert {c.name for c in files.cases if c.outcome == "passed"} == {
        "the final last checkpoint", "the early-stop epoch's file"}
