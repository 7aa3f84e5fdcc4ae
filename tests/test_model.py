"""The executable model of the spec against hand-worked rows.

Each row's expectation is worked out from the clause text alone, and cites the sentences it
follows; none is read off the model's output.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import pytest

from trainspec.conformance.spec.model import (
    FileExpect,
    ModelConfig,
    Score,
    expect_chain,
    expect_run,
    pooled_score,
)

NAN = math.nan


def script(scores: Sequence[float], first: float | None = None) -> Score:
    def score(epoch: int | None) -> float:
        return NAN if epoch is None and first is None else \
            first if epoch is None and first is not None else scores[epoch or 0]

    return score


def files(*rows: tuple[str, int, int]) -> tuple[FileExpect, ...]:
    role = {"last.pt": "last", "best.pt": "best"}
    return tuple(FileExpect(role=role.get(n, "epoch"), name=n, epoch=e, step=s)  # type: ignore[arg-type]
                 for n, e, s in sorted(rows))


def test_a_fresh_run_validates_every_epoch_and_keeps_the_strictly_better_scores() -> None:
    # LOOP-1.1, LOOP-2.1, BEST-1.1 (0.6 beats 0.5), BEST-1.3 (the tie 0.5 does not)
    run = expect_run(ModelConfig(num_epochs=3), script([0.5, 0.5, 0.6]), steps_per_epoch=2)
    assert run.epochs_trained == (0, 1, 2)
    assert run.steps_after == (2, 4, 6)
    assert [(v.epoch, v.improved, v.stop) for v in run.validations] == [
        (0, True, False), (1, False, False), (2, True, False)]
    # BEST-3.1, BEST-3.4, BEST-3.6 (best.pt of epoch 2, step 6); CKPT-1.1 (last.pt each epoch)
    assert run.files == files(("best.pt", 2, 6), ("last.pt", 2, 6))
    assert run.best == (2, True)
    assert run.test_passes == 1
    assert run.test_on == "best"


def test_a_gain_below_a_hundredth_still_improves() -> None:
    # BEST-1.1: strictly better is enough; no threshold
    run = expect_run(ModelConfig(num_epochs=2), script([0.5, 0.5004]))
    assert [v.improved for v in run.validations] == [True, True]


def test_a_nonfinite_score_never_improves_and_counts_once_for_patience() -> None:
    # NAN-1.1, NAN-2.1 (0.1 after a NaN first is an improvement), NAN-3.1, PAT-1.1
    run = expect_run(ModelConfig(num_epochs=4, patience=2), script([NAN, 0.1, NAN, math.inf]))
    assert [(v.improved, v.stop) for v in run.validations] == [
        (False, False), (True, False), (False, False), (False, True)]
    assert run.stop_epoch == 3


def test_val_first_exhausting_patience_stops_before_training_and_still_tests() -> None:
    # LOOP-2.4, LOOP-2.5, PAT-1.4, LOOP-4.3; nothing improved: the final weights (BEST-4.2)
    cfg = ModelConfig(num_epochs=3, val_first=True, patience=1)
    run = expect_run(cfg, script([0.5, 0.6, 0.7], first=NAN))
    assert [v.epoch for v in run.validations] == [None]
    assert run.stop_epoch == -1
    assert run.epochs_trained == ()
    assert run.test_passes == 1
    assert run.test_on == "final"
    assert run.files == ()


def test_a_val_first_improvement_writes_best_of_epoch_minus_one() -> None:
    # BEST-3.5: -1 for the val.first validation; a later epoch that does not improve keeps it
    cfg = ModelConfig(num_epochs=1, val_first=True)
    run = expect_run(cfg, script([0.2], first=0.9))
    assert run.files == files(("best.pt", -1, 0), ("last.pt", 0, 1))
    assert run.best_epoch == -1


def test_numbered_files_follow_every_n_epochs_and_save_last_off_leaves_no_last() -> None:
    # CKPT-1.2, CKPT-1.3 (epochs 0, 2, 4 with every_n_epochs=2)
    cfg = ModelConfig(num_epochs=5, ckpt_every_n_epochs=2, save_last=False, minimize=True)
    run = expect_run(cfg, script([0.5, 0.6, 0.7, 0.8, 0.9]))
    assert run.files == files(("best.pt", 0, 1), ("epoch_0.pt", 0, 1), ("epoch_2.pt", 2, 3),
                              ("epoch_4.pt", 4, 5))


def test_a_resume_after_a_relapse_refills_patience_on_its_next_improvement() -> None:
    # scores 0.5 (better), 0.4, 0.6 (better), 0.5, 0.4 with patience 2: the counter stands at
    # 1 in epoch 1's file; epoch 2 refills it to 2 (PAT-2.1), so the stop is after epoch 4
    # (PAT-1.1); the resume continues at 2 with the file's step (RES-1.1, RES-1.2, RES-3.3)
    cfg = ModelConfig(num_epochs=5, patience=2, ckpt_every_n_epochs=1)
    chain = expect_chain(cfg, script([0.5, 0.4, 0.6, 0.5, 0.4]), kind="resumed",
                         steps_per_epoch=3, interrupted_at=None, file_index=1)
    assert chain.start_file == FileExpect(role="epoch", name="epoch_1.pt", epoch=1, step=6)
    run = chain.run
    assert run is not None
    assert run.start_epoch == 2
    assert run.start_step == 6
    assert [(v.epoch, v.improved, v.stop) for v in run.validations] == [
        (2, True, False), (3, False, False), (4, False, True)]
    # its own folder: epoch files 2..4, last.pt of 4, best.pt of its improvement at 2
    assert run.files == files(("best.pt", 2, 9), ("epoch_2.pt", 2, 9), ("epoch_3.pt", 3, 12),
                              ("epoch_4.pt", 4, 15), ("last.pt", 4, 15))


def test_a_resume_from_the_early_stop_checkpoint_trains_nothing_and_tests_once() -> None:
    # the uninterrupted run stopped after epoch 2 (patience 2): its decisions are the resumed
    # run's (RES-3.3), so nothing follows but the test pass (LOOP-4.2) on the best weights of
    # epoch 0, kept from the checkpoint (RES-3.1, BEST-4.1)
    cfg = ModelConfig(num_epochs=5, patience=2)
    chain = expect_chain(cfg, script([0.5, 0.4, 0.3, 0.2, 0.1]), kind="resumed",
                         steps_per_epoch=1, interrupted_at=None, file_index=0)
    assert chain.start_file is not None
    assert chain.start_file.epoch == 2
    run = chain.run
    assert run is not None
    assert run.epochs_trained == ()
    assert run.validations == ()
    assert run.test_passes == 1
    assert run.best == (0, False)
    assert run.files == ()


def test_a_resume_from_the_final_epoch_trains_nothing() -> None:
    # LOOP-1.3: start = k+1 = num_epochs, an empty range
    chain = expect_chain(ModelConfig(num_epochs=2), script([0.1, 0.2]), kind="resumed",
                         steps_per_epoch=1, interrupted_at=None, file_index=0)
    assert chain.run is not None
    assert chain.run.start_epoch == 2
    assert chain.run.epochs_trained == ()


def test_an_interruption_after_best_selection_leaves_that_epochs_best_but_not_its_last() -> None:
    # RES-3.5: epoch 2's checkpoints follow its validation, so last.pt holds epoch 1;
    # best.pt is written within the validation (BEST-3.1); the resume repeats epoch 2 (RES-3.4)
    cfg = ModelConfig(num_epochs=4)
    chain = expect_chain(cfg, script([0.1, 0.2, 0.3, 0.4]), kind="resumed", steps_per_epoch=1,
                         interrupted_at=("val_after_save", 2), file_index=0)
    assert chain.reached
    assert chain.source.files == files(("best.pt", 2, 3), ("last.pt", 1, 2))
    assert chain.run is not None
    assert chain.run.epochs_trained == (2, 3)
    assert [v.epoch for v in chain.run.validations] == [2, 3]


def test_an_interruption_the_run_never_reaches_leaves_the_whole_run() -> None:
    # the run stops after epoch 1 (patience 1), so train_start of epoch 3 never comes
    cfg = ModelConfig(num_epochs=5, patience=1)
    chain = expect_chain(cfg, script([0.5, 0.4, 0.6, 0.7, 0.8]), kind="resumed",
                         steps_per_epoch=1, interrupted_at=("train_start", 3), file_index=0)
    assert not chain.reached
    assert chain.source.epochs_trained == (0, 1)


def test_an_interruption_in_epoch_zero_leaves_nothing_to_resume() -> None:
    chain = expect_chain(ModelConfig(num_epochs=3), script([0.1, 0.2, 0.3]), kind="resumed",
                         steps_per_epoch=1, interrupted_at=("train_end", 0), file_index=0)
    assert chain.resumable == ()
    assert chain.run is None


def test_a_finetune_runs_val_first_and_tracks_afresh() -> None:
    # FT-1.2 (epoch 0, step 0), FT-4.1 (the first score improves whatever the source's best),
    # LOOP-2.3 (val.first runs: a finetune is no resume, LOOP-2.6 does not apply)
    cfg = ModelConfig(num_epochs=2, val_first=True)
    chain = expect_chain(cfg, script([0.3, 0.2], first=0.1), kind="finetuned",
                         steps_per_epoch=2, interrupted_at=None, file_index=0)
    run = chain.run
    assert run is not None
    assert (run.start_epoch, run.start_step) == (0, 0)
    assert [(v.epoch, v.improved) for v in run.validations] == [
        (None, True), (0, True), (1, False)]


@pytest.mark.parametrize(("epochs", "trained"), [(3, (0,)), (0, ())])
def test_debug_caps_epochs_steps_once_and_writes_nothing(epochs: int,
                                                         trained: tuple[int, ...]) -> None:
    # DBG-2.1, DBG-2.2 (0 stays 0), DBG-3.1, DBG-4.1 (one batch, one optimizer step)
    run = expect_run(ModelConfig(num_epochs=epochs), script([0.1, 0.2, 0.3]), kind="debug",
                     steps_per_epoch=6)
    assert run.epochs_trained == trained
    assert run.steps_after == tuple(1 for _ in trained)
    assert run.files == ()


def test_the_pooled_score_is_totals_over_counts_and_nan_when_no_rank_counted() -> None:
    assert pooled_score([(3.0, 1.0), (1.0, 3.0)]) == 1.0  # DIST-1.1: not (3 + 1/3) / 2
    assert math.isnan(pooled_score([(0.0, 0.0), (0.0, 0.0)]))  # DIST-1.3
    assert math.isnan(pooled_score([(NAN, 1.0), (0.5, 1.0)]))  # a NaN on one rank pools NaN


def test_a_config_reads_the_outline_keys() -> None:
    cfg = ModelConfig.from_mapping({"num_epochs": 4, "val": {"first": True, "patience": 2},
                                    "ckpt": {"every_n_epochs": 2, "save_last": False}})
    assert (cfg.num_epochs, cfg.val_first, cfg.patience, cfg.ckpt_every_n_epochs,
            cfg.save_last) == (4, True, 2, 2, False)


def test_a_resumed_run_needs_its_files_epoch_and_step() -> None:
    with pytest.raises(ValueError, match="epoch and step of its file"):
        expect_run(ModelConfig(), script([0.1, 0.2, 0.3]), kind="resumed")
