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
@pytest.mark.xfail(strict=True, reason="known gap (issue 23): the snapshot the Recorder takes "
                   "of the engine's last file when an epoch starts reads no epoch (its pickles "
                   "need getattr), so CKPT-1's 'last.pt after every epoch' case reports epoch "
                   "None instead of the weights-only refusal its contents case finds")
def test_an_engine_whose_files_need_getattr_has_its_best_files_judged_on_content() -> None:
    report = check("tests.worked.engine_adapter:EngineAdapter",
                   clauses="BEST-2,BEST-3,RES-1,RES-2,CKPT-1", world_size=1)
    got = {c.id: c.verdict for c in report.clauses}
    assert (got["BEST-2"], got["BEST-3"], got["RES-1"], got["RES-2"]) == (
        "pass", "pass", "pass", "pass"), {c.id: c.evidence for c in report.clauses}
    ckpt1 = next(c for c in report.clauses if c.id == "CKPT-1")
    assert ckpt1.verdict == "fail"
    assert "does not load with weights_only=True" in ckpt1.evidence
