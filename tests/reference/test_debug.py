"""DBG: debug mode derives a short, file-less run without touching the user's config."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from tests.reference.reference_helpers import ScriptedTrainer, files_under, make_config
from trainspec.reference import OneBatchLoader


def batches(n: int) -> DataLoader[tuple[torch.Tensor, ...]]:
    return DataLoader(TensorDataset(torch.arange(float(n * 2))), batch_size=2)


@pytest.mark.clause("DBG-1")
@pytest.mark.parametrize(("num_batches", "expected"), [(5, 1), (1, 1), (0, 0)])
def test_a_debug_loader_yields_at_most_one_batch_on_every_pass(num_batches: int,
                                                              expected: int) -> None:
    loader = OneBatchLoader(batches(num_batches))
    assert len(loader) == expected
    for _ in range(2):  # every pass, not only the first
        assert len(list(loader)) == expected


@pytest.mark.clause("DBG-1")
def test_a_debug_loader_passes_other_attributes_through() -> None:
    inner = batches(5)
    loader = OneBatchLoader(inner)
    assert loader.batch_size == 2
    assert loader.dataset is inner.dataset
    assert loader.sampler is inner.sampler
    first = next(iter(loader))
    assert torch.equal(first[0], torch.tensor([0.0, 1.0]))


class WithEvalLoader(ScriptedTrainer):
    """Has a fourth split, and an empty test split."""

    def setup(self, ckpt: dict[str, object] | None) -> None:
        super().setup(ckpt)
        self.eval_loader = batches(3)
        self.test_loader = batches(0)


@pytest.mark.clause("DBG-1")
def test_debug_caps_every_split_of_the_trainer_at_one_batch() -> None:
    trainer = WithEvalLoader(make_config(debug=True, num_epochs=3), scores=[0.1])
    lengths = {name: len(getattr(trainer, name)) for name in trainer.loader_names}
    assert lengths == {"train_loader": 1, "val_loader": 1, "test_loader": 0, "eval_loader": 1}
    assert [len(list(getattr(trainer, n))) for n in trainer.loader_names] == [1, 1, 0, 1]
    trainer.train()
    assert trainer.train_step == 1


@pytest.mark.clause("DBG-2")
@pytest.mark.parametrize(("num_epochs", "trained"), [(5, [0]), (1, [0]), (0, [])])
def test_debug_caps_epochs_at_one_and_keeps_zero(num_epochs: int, trained: list[int]) -> None:
    cfg = make_config(debug=True, num_epochs=num_epochs, val={"first": True})
    trainer = ScriptedTrainer(cfg, scores=[0.1], first_score=0.0)
    trainer.train()
    assert trainer.trained_epochs == trained
    assert trainer.validated_epochs == [-1, *trained]  # eval-only stays eval-only
    assert trainer.cfg.num_epochs == len(trained)
    assert cfg.num_epochs == num_epochs  # the user's config is untouched


@pytest.mark.clause("DBG-3")
def test_debug_writes_no_file(tmp_path: Path) -> None:
    cfg = make_config(tmp_path, debug=True, num_epochs=2,
                      ckpt={"every_n_epochs": 1, "save_last": True})
    trainer = ScriptedTrainer(cfg, scores=[0.1, 0.2])
    trainer.train()
    assert trainer.improved_epochs == [0]
    assert trainer.ckpt_dir is None
    assert list(files_under(tmp_path)) == []  # no checkpoint, no metrics.jsonl
    assert cfg.ckpt.enable  # the user's config still says checkpoints on


class StepsOnBoundariesOnly(ScriptedTrainer):
    steps_on_last_batch = False


@pytest.mark.clause("DBG-4")
def test_a_debug_epoch_still_takes_an_optimizer_step() -> None:
    cfg = make_config(debug=True, grad_accum_steps=4)
    trainer = StepsOnBoundariesOnly(cfg, scores=[0.1])
    trainer.train()
    assert trainer.cfg.grad_accum_steps == 1
    assert cfg.grad_accum_steps == 4
    assert trainer.train_step == 1
    changed = [k for k, v in trainer.weights_after[0].items()
               if not v.equal(trainer.initial_weights[k])]
    assert changed


@pytest.mark.clause("DBG-5")
def test_setup_sizes_the_schedule_from_the_full_loader_length() -> None:
    trainer = ScriptedTrainer(make_config(debug=True, num_epochs=4), scores=[0.1])
    assert trainer.len_train_loader_in_setup == 6
    assert trainer.scheduler.total_iters == 6
    assert len(trainer.train_loader) == 1


class DumpsPredictions(ScriptedTrainer):
    def test(self) -> None:
        super().test()
        if self.cfg.save_preds.enable:
            Path(self.cfg.extra["preds_file"]).write_text("0.1\n0.2\n")


@pytest.mark.clause("DBG-6")
@pytest.mark.parametrize("debug", [False, True])
def test_debug_turns_prediction_dumps_off(tmp_path: Path, debug: bool) -> None:
    preds = tmp_path / "preds.txt"
    cfg = make_config(debug=debug, save_preds={"enable": True}, preds_file=str(preds))
    trainer = DumpsPredictions(cfg, scores=[0.1, 0.2, 0.3])
    trainer.train()
    assert trainer.cfg.save_preds.enable is not debug
    assert preds.exists() is not debug
    assert cfg.save_preds.enable
