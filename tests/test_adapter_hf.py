"""The transformers Trainer adapter: it runs through ``trainspec check``, maps the scenario's keys
onto ``TrainingArguments`` as documented, reports the Trainer's own decisions, and describes its
checkpoint directories under the suite's roles.

Whether the Trainer conforms is what the report says; these tests only ask that the adapter
works: runs complete, no clause comes out ``error`` (an error means the adapter is broken), and
what the adapter reports is what the Trainer decided.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.adapter_runs import check_clauses
from trainspec.adapters.hf import HFTrainerAdapter, training_arguments
from trainspec.adapters.hf.task import (
    eval_batch_size,
    eval_holders,
    pooled_tally,
    sample_tallies,
)
from trainspec.conformance.checks.common import make_scenario
from trainspec.conformance.run.files import FileRecord
from trainspec.conformance.run.memory import MemoryContext
from trainspec.conformance.run.records import Record, Validation
from trainspec.conformance.run.scenario import CrashWhere, Scenario, ScoreScript, Task
from trainspec.errors import AdapterError

TARGET = "trainspec.adapters.hf:HFTrainerAdapter"
# every family but DIST (one process) and DBG (no debug mode: n/a), without the property checks
# (BEST-1, NAN-1/2, PAT-5: a minute of generated runs) and CKPT-4, whose corrupt-file case copies
# the last checkpoint as one file (a Trainer checkpoint is a directory)
SELECTED = ("LOOP", "BEST-2", "BEST-3", "BEST-4", "NAN-3", "PAT-1", "PAT-2", "PAT-4", "RES", "FT",
            "CKPT-1", "CKPT-2", "CKPT-3", "CKPT-5")


def _needs_transformers() -> None:
    pytest.importorskip("transformers")
    pytest.importorskip("accelerate")


def test_hf_adapter_gets_a_verdict_for_every_clause(tmp_path: Path) -> None:
    _needs_transformers()
    selected = check_clauses(TARGET, SELECTED, tmp_path, framework="transformers ",
                             timeout_s=600)
    assert len(selected) >= 20, "the selected clauses are missing from the report"
    verdicts = {cid: c["verdict"] for cid, c in selected.items()}
    # what the Trainer does meet, as the adapter reports it (a regression in the adapter's
    # events would turn these)
    for cid in ("LOOP-1", "LOOP-3", "LOOP-4", "BEST-3", "BEST-4", "PAT-2", "RES-1",
                "RES-2", "RES-4", "FT-1", "FT-2", "FT-3", "FT-4", "CKPT-3"):
        assert verdicts[cid] == "pass", (cid, verdicts[cid])
    # at its defaults the Trainer neither restores the early-stopping counter on resume nor
    # handles SIGTERM (the remedies are verified by the matrix). BEST-2 is left out: with
    # save_strategy='no' the Trainer keeps no best weights, which generated runs show as a
    # fail when their time budget reaches such a run (it depends on the machine's load)
    for cid in ("RES-3", "CKPT-5"):
        assert verdicts[cid] == "fail", (cid, verdicts[cid])
        assert selected[cid]["framework_source"].startswith("transformers/"), cid


def test_importing_the_adapter_does_not_import_transformers() -> None:
    code = ("import sys, trainspec.adapters.hf as m; "
            "assert not {'transformers', 'accelerate', 'safetensors'} & set(sys.modules); "
            "print(m.HFTrainerAdapter().name)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "hf"


@pytest.mark.parametrize("selected", [("DIST-1", "DIST-4", "DIST-6")])
def test_hf_adapter_runs_on_two_ranks(tmp_path: Path, selected: tuple[str, ...]) -> None:
    # the Trainer joining the suite's 2-rank world (gloo, DDP), its score pooled by the Trainer
    _needs_transformers()
    chosen = check_clauses(TARGET, selected, tmp_path, world_size=2)
    # the Trainer gathers every rank's tallies before compute_metrics: exact pooling, one
    # verdict for all ranks, as one rank decides
    assert chosen["DIST-1"]["verdict"] == "pass"
    assert chosen["DIST-6"]["verdict"] == "pass"
    # every rank saves its own rng_state_<rank>.pth: a framework finding, with its source
    assert chosen["DIST-4"]["verdict"] == "fail"
    assert "rng_state_1.pth" in chosen["DIST-4"]["evidence"]
    assert chosen["DIST-4"]["framework_source"].startswith("transformers/trainer.py")


def test_undeclared_capabilities_are_the_ones_the_trainer_cannot_express() -> None:
    caps = HFTrainerAdapter().capabilities()
    assert not caps & {"val_every_n", "start_patience", "debug"}
    assert {"checkpoint", "resume", "finetune", "early_stopping", "val_first",
            "multi_rank"} <= caps


def test_the_trainer_runs_at_its_defaults_unless_a_remedy_is_named(tmp_path: Path) -> None:
    # restore_callback_states_from_checkpoint and enable_jit_checkpoint are off by default:
    # the adapter keeps them off, and turns each on only as a named remedy
    s = make_scenario("defaults", [0.1, 0.2])
    args = training_arguments(s, tmp_path)
    assert args["restore_callback_states_from_checkpoint"] is False
    assert args["enable_jit_checkpoint"] is False
    on = training_arguments(s, tmp_path, frozenset({"restore_callback_states",
                                                    "jit_checkpoint"}))
    assert on["restore_callback_states_from_checkpoint"] is True
    assert on["enable_jit_checkpoint"] is True
    names = {r.name for r in HFTrainerAdapter().remedies()}
    assert names == {"restore_callback_states", "jit_checkpoint"}
    with pytest.raises(AdapterError, match="unknown remedies"):
        HFTrainerAdapter("restore_callbacks")


@pytest.mark.parametrize(("cfg", "expected"), [
    ({}, {"save_strategy": "epoch", "save_total_limit": 2, "load_best_model_at_end": True,
          "max_grad_norm": 0.0, "greater_is_better": True, "eval_on_start": False}),
    ({"ckpt.enable": False}, {"save_strategy": "no", "save_total_limit": None,
                              "load_best_model_at_end": False, "enable_jit_checkpoint": False}),
    ({"ckpt.save_last": False}, {"save_strategy": "best", "save_total_limit": 1}),
    ({"ckpt.every_n_epochs": 2}, {"save_strategy": "epoch", "save_total_limit": None}),
    ({"grad_clip": 0.5, "val.minimize": True, "val.first": True, "grad_accum_steps": 3},
     {"max_grad_norm": 0.5, "greater_is_better": False, "eval_on_start": True,
      "gradient_accumulation_steps": 3}),
])
def test_config_keys_map_onto_training_arguments(cfg: dict[str, Any],
                                                 expected: dict[str, Any],
                                                 tmp_path: Path) -> None:
    s = make_scenario("args", [0.1, 0.2], cfg=cfg)
    args = training_arguments(s, tmp_path)
    assert {k: args[k] for k in expected} == expected
    fixed = {"eval_strategy": "epoch", "metric_for_best_model": "score",
             "restore_callback_states_from_checkpoint": False, "output_dir": str(tmp_path),
             "num_train_epochs": 2, "report_to": "none", "use_cpu": True,
             "label_names": ["labels", "tally"], "per_device_eval_batch_size": 4}
    assert {k: args[k] for k in fixed} == fixed
    # one rank: no distributed field (ddp_backend without a distributed launch fails in
    # accelerate's PartialState)
    assert not {"ddp_backend", "ddp_timeout"} & set(args)


@pytest.mark.parametrize(("cfg", "expected"), [
    ({}, {"ddp_backend": "gloo", "ddp_timeout": 30.0}),
    ({"ddp.backend": "gloo", "ddp.timeout_s": 1.5}, {"ddp_backend": "gloo", "ddp_timeout": 1.5}),
])
def test_several_ranks_add_the_documented_ddp_fields(cfg: dict[str, Any],
                                                     expected: dict[str, Any],
                                                     tmp_path: Path) -> None:
    s = make_scenario("args", [0.1, 0.2], cfg=cfg, world_size=2)
    args = training_arguments(s, tmp_path)
    assert {k: args[k] for k in expected} == expected
    assert args["use_cpu"] is True


def test_eval_samples_are_dealt_as_accelerate_deals_whole_batches() -> None:
    assert eval_holders(8, 4, 1) == [0] * 8
    assert eval_holders(8, 4, 2) == [0, 0, 0, 0, 1, 1, 1, 1]
    assert eval_holders(10, 2, 3) == [0, 0, 1, 1, 2, 2, 0, 0, 1, 1]
    # more ranks than batches: the eval batch is cut so that every rank holds samples
    assert eval_batch_size(Task(), 2) == 4
    assert set(eval_holders(8, eval_batch_size(Task(), 3), 3)) == {0, 1, 2}
    assert set(eval_holders(8, eval_batch_size(Task(), 8), 8)) == set(range(8))


def test_each_ranks_tally_sits_on_the_first_sample_it_evaluates() -> None:
    tallies = sample_tallies([(3.0, 1.0), (1.0, 3.0)], eval_holders(8, 4, 2))
    assert tallies == [(3.0, 1.0), (0.0, 0.0), (0.0, 0.0), (0.0, 0.0),
                       (1.0, 3.0), (0.0, 0.0), (0.0, 0.0), (0.0, 0.0)]


@pytest.mark.parametrize("metric", ["reduce_mean", "torchmetrics"])
@pytest.mark.parametrize(("pairs", "expected"), [
    ([(3.0, 1.0), (1.0, 3.0)], 1.0),  # sum/sum, not the mean of rank means (2.1667)
    ([(1.2, 1.0), (0.0, 0.0)], 1.2),  # a rank without samples adds nothing
    ([(0.0, 0.0), (0.0, 0.0)], math.nan),  # nothing counted
    ([(math.nan, 1.0), (1.0, 1.0)], math.nan),  # NaN on one rank
    ([(math.inf, 1.0), (1.0, 1.0)], math.inf),
])
def test_the_gathered_tallies_pool_to_sum_over_sum(pairs: list[tuple[float, float]],
                                                   expected: float, metric: str) -> None:
    gathered = sample_tallies(pairs, eval_holders(8, 4, 2))
    got = pooled_tally(gathered, metric)
    assert (math.isnan(got) and math.isnan(expected)) or math.isclose(got, expected,
                                                                       rel_tol=1e-6)


class _RankContext:
    """A RunContext for one rank of ``world_size`` that records nothing."""

    def __init__(self, root: Path, world_size: int) -> None:
        self._root, self._world_size = root, world_size

    @property
    def rank(self) -> int:
        return 0

    @property
    def world_size(self) -> int:
        return self._world_size

    @property
    def ckpt_root(self) -> Path:
        return self._root

    def record(self, record: Record) -> None:
        return None

    def crash_point(self, where: CrashWhere, epoch: int) -> None:
        return None


def test_a_rank_with_a_count_but_no_validation_sample_is_refused(tmp_path: Path) -> None:
    _needs_transformers()
    # 8 validation samples over 9 ranks: rank 8 evaluates padding only, its count is lost
    s = Scenario(name="unheld", world_size=9, scores=ScoreScript.of([0.5])) \
        .with_config(num_epochs=1)
    with pytest.raises(AdapterError, match="cannot stage rank 8"):
        HFTrainerAdapter().run(s, _RankContext(tmp_path, 9))


def test_a_collective_backend_other_than_gloo_is_refused(tmp_path: Path) -> None:
    _needs_transformers()
    s = make_scenario("nccl", [0.5], cfg={"ddp.backend": "nccl"}, world_size=2)
    with pytest.raises(AdapterError, match="accelerate takes gloo only"):
        HFTrainerAdapter().run(s, _RankContext(tmp_path, 2))


def _validations(scores: list[float], first: float | None = None,
                 **cfg: Any) -> list[tuple[str, int, float, bool, bool]]:
    _needs_transformers()
    s = make_scenario("hf-events", scores, first=first, cfg=cfg)
    with tempfile.TemporaryDirectory(prefix="trainspec-hf-test-") as root:
        ctx = MemoryContext(Path(root))
        HFTrainerAdapter().run(s, ctx)
    return [(r.phase, r.epoch, r.score, r.improved, r.stop) for r in ctx.records
            if isinstance(r, Validation)]


def test_events_report_the_trainers_own_decisions() -> None:
    # the Trainer's best metric starts at -inf: +inf is a new best; its EarlyStoppingCallback
    # never counts the first evaluation (state.best_metric is still None then)
    seen = _validations([math.nan, 0.5, math.inf, 0.4], **{"val.patience": 1})
    assert [(e, i, s) for _, e, _, i, s in seen] == [
        (0, False, False), (1, True, False), (2, True, False), (3, False, True)]
    assert math.isnan(seen[0][2])
    assert seen[2][2] == math.inf
    # eval_on_start: a validation before training that never competes for the best
    first = _validations([0.5, 0.4], first=0.9, **{"val.patience": 1})
    assert [(p, i, s) for p, _, _, i, s in first] == [
        ("first", False, False), ("epoch", True, False), ("epoch", False, True)]


def _write_checkpoint(root: Path, step: int, epoch: float, best: str | None,
                      complete: bool = True, ranks: int = 1) -> Path:
    from safetensors.torch import save_file

    d = root / f"checkpoint-{step}"
    d.mkdir(parents=True)
    save_file({"net.weight": torch.full((2, 4), float(step)), "net.bias": torch.zeros(2)},
              str(d / "model.safetensors"))
    if not complete:  # cut short: the Trainer writes trainer_state.json last
        return d
    rng = ["rng_state.pth"] if ranks == 1 else [f"rng_state_{r}.pth" for r in range(ranks)]
    for name in ("optimizer.pt", "scheduler.pt", *rng):
        torch.save({"state": {}, "step": step}, d / name)
    state = {"epoch": epoch, "global_step": step, "best_metric": 0.5,
             "best_model_checkpoint": None if best is None else str(root / best)}
    (d / "trainer_state.json").write_text(json.dumps(state))
    return d


def _described(root: Path) -> list[FileRecord]:
    """The adapter's description of ``root``, read back as the harness reads it."""
    return HFTrainerAdapter().describe_checkpoints(root)


def test_checkpoint_directories_map_onto_roles(tmp_path: Path) -> None:
    pytest.importorskip("safetensors")
    _write_checkpoint(tmp_path, 6, 1.0, "checkpoint-6")
    _write_checkpoint(tmp_path, 12, 2.0, "checkpoint-6")
    _write_checkpoint(tmp_path, 18, 3.0, None, complete=False)
    entries = _described(tmp_path)
    dirs = {(e.relpath, e.role): e for e in entries if e.role is not None}
    assert set(dirs) == {("checkpoint-18", "last"), ("checkpoint-6", "best"),
                         ("checkpoint-12", "epoch")}
    best = dirs["checkpoint-6", "best"]
    assert (best.epoch, best.step, best.error) == (0, 6, None)
    assert {"model.safetensors", "trainer_state.json"} <= set(best.keys)
    assert dirs["checkpoint-12", "epoch"].epoch == 1
    torn = dirs["checkpoint-18", "last"]
    assert torn.epoch is None
    assert "no trainer_state.json" in (torn.error or "")
    # every file is listed too, without a role
    files = {e.relpath for e in entries if e.role is None}
    assert "checkpoint-6/optimizer.pt" in files
    assert len(files) == 5 + 5 + 1


def test_a_checkpoint_both_newest_and_best_is_listed_under_each_role(tmp_path: Path) -> None:
    pytest.importorskip("safetensors")
    _write_checkpoint(tmp_path, 6, 1.0, "checkpoint-6")
    _write_checkpoint(tmp_path, 12, 2.0, "checkpoint-12")
    roles = sorted((e.relpath, e.role) for e in _described(tmp_path) if e.role)
    assert roles == [("checkpoint-12", "best"), ("checkpoint-12", "last"),
                     ("checkpoint-6", "epoch")]


def test_a_mid_epoch_checkpoint_names_the_last_epoch_it_completed(tmp_path: Path) -> None:
    pytest.importorskip("safetensors")
    _write_checkpoint(tmp_path, 15, 2.5, None)  # a just-in-time checkpoint on SIGTERM
    (entry,) = [e for e in _described(tmp_path) if e.role]
    assert (entry.role, entry.epoch, entry.step) == ("last", 1, 15)


def test_a_checkpoint_saved_on_several_ranks_holds_one_rng_file_per_rank(
        tmp_path: Path) -> None:
    pytest.importorskip("safetensors")
    _write_checkpoint(tmp_path, 6, 1.0, "checkpoint-6", ranks=2)
    entries = [e for e in _described(tmp_path) if e.role]
    assert {e.role for e in entries} == {"last", "best"}
    for entry in entries:
        assert entry.error is None
        assert {"rng_state_0.pth", "rng_state_1.pth"} <= set(entry.types)
    (tmp_path / "checkpoint-6" / "rng_state_1.pth").write_bytes(b"torn")
    (entry, *_) = [e for e in _described(tmp_path) if e.role]
    assert "rng_state_1.pth does not load weights-only" in (entry.error or "")
