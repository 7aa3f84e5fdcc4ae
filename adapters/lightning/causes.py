"""What the lightning target says of Lightning beyond its verdicts (read in Lightning 2.6's
sources; paths relative to site-packages): the source behind each failing clause
(``SOURCES``, ``LightningAdapter.framework_sources()``), the few behaviours behind them
(``ROOT_CAUSES``; the matrix pages list those behind failing clauses above the clause table),
and the documented switches, off by default, that should fix some (``REMEDIES``;
``trainspec check lightning --remedies NAME`` runs with one on, the matrix verifies each).
"""

from __future__ import annotations

from trainspec.conformance.spec.causes import Remedy, RootCause

__all__ = ["REMEDIES", "ROOT_CAUSES", "SOURCES"]

_MC = "lightning/pytorch/callbacks/model_checkpoint.py, ModelCheckpoint"
_ES = "lightning/pytorch/callbacks/early_stopping.py, EarlyStopping"
_NAN_BEST = (f"{_MC}._update_best_and_save: a NaN score is replaced by -inf (mode max) or "
             "+inf (mode min) and saved while the top-k list is not full; "
             "check_monitor_top_k compares with torch.gt/torch.lt, so +inf beats any best")
_NO_TRACKING = ("lightning/pytorch/trainer/connectors/callback_connector.py, "
                "_CallbackConnector._configure_checkpoint_callbacks: with "
                "enable_checkpointing=False (ckpt.enable=false) there is no ModelCheckpoint, "
                "and ModelCheckpoint is the only place Lightning tracks a best score")
_EVERY_N = ("lightning/pytorch/loops/training_epoch_loop.py, "
            "_TrainingEpochLoop._should_check_val_epoch: validates when (current_epoch + 1) % "
            "check_val_every_n_epoch == 0")
_SIGTERM = ("lightning/pytorch/trainer/connectors/signal_connector.py, "
            "_SignalConnector._sigterm_notifier_fn only sets received_sigterm; the loops "
            "(lightning/pytorch/loops/training_epoch_loop.py, "
            "_TrainingEpochLoop.on_advance_end; evaluation_loop.py; fit_loop.py, "
            "_FitLoop.on_advance_end) then raise SIGTERMException, a SystemExit without a code "
            "(exit status 0), and nothing saves on the way out unless an "
            "OnExceptionCheckpoint callback is given")
_NO_RNG = ("lightning/pytorch/trainer/connectors/checkpoint_connector.py, "
           "_CheckpointConnector.dump_checkpoint: a checkpoint holds epoch, global_step, "
           "state_dict, loops, callbacks, optimizer_states and lr_schedulers, no RNG state; a "
           "resumed fit draws the next epoch's order (RandomSampler) from torch's generator "
           "as seed_everything left it at the start of the new process")

_NEW_DIRPATH = (f"{_MC}.load_state_dict: when the resumed run's dirpath differs from the one "
                "the checkpoint records (a resume writing into a folder of its own), "
                "best_model_score, best_k_models, kth_value and last_model_path are not "
                "reloaded (a warning says so), only best_model_path: the resumed run's first "
                "validation meets no incumbent, so a tie or a worse score is an improvement")

SOURCES: dict[str, str] = {
    "BEST-1": _NO_TRACKING,
    "PAT-5": f"{_NO_TRACKING}; {_EVERY_N}; {_ES}._evaluate_stopping_criteria (check_finite)",
    "LOOP-2": _EVERY_N,
    "BEST-4": f"{_NAN_BEST}; Trainer.test(ckpt_path='best') then loads that file",
    "NAN-1": _NAN_BEST,
    "NAN-2": _NAN_BEST,
    "NAN-3": f"{_ES}._evaluate_stopping_criteria: check_finite=True (the default) stops "
             "training at the first non-finite score; with check_finite=False a NaN counts "
             "as a non-improvement, but monitor_op (torch.gt for mode max, torch.lt for min) "
             "takes +inf (-inf) as an improvement that resets wait_count",
    "RES-3": _NEW_DIRPATH,
    "RES-4": _NO_RNG,
    "DIST-1": ("lightning/pytorch/trainer/connectors/logger_connector/result.py, "
               "_ResultMetric.compute: a mean logged with sync_dist=True and a batch_size is "
               "sync(sum of value * batch_size) / sync(cumulated_batch_size), both synced with "
               "the 'mean' op; lightning/fabric/utilities/distributed.py, _sync_ddp: on gloo that "
               "op is a SUM then result.copy_(result / world_size), which truncates the integer "
               "cumulated_batch_size: where the ranks' counts do not sum to a multiple of the "
               "world size the pooled mean is off (counts 1 and 0 on 2 ranks: 0.25 / 0 = inf)"),
    "DIST-3": (f"{_MC}.check_monitor_top_k: each rank compares its own logged monitor "
               "(self.log's sync_dist=False, the default, leaves it rank-local), then "
               "trainer.strategy.reduce_boolean_decision(...) keeps an improvement only when "
               "every rank saw one: one verdict, the ranks' AND, not rank 0's score"),
    "RES-5": "lightning/pytorch/strategies/strategy.py, Strategy.load_optimizer_state_dict: "
             "optimizer.load_state_dict(opt_state) for whatever optimizer "
             "configure_optimizers returns, with no check that it is the one the checkpoint "
             "was written with",
    "DBG-3": f"{_MC}.on_train_end: writes last.ckpt when save_last is set and none was saved, "
             "without the fast_dev_run guard its other save paths have "
             "(_should_skip_saving_checkpoint)",
    "CKPT-1": f"{_MC}.on_validation_end: last.ckpt is written only when a top-k checkpoint "
              "was saved at this step (save_last: 'a copy whenever a checkpoint file gets "
              "saved'), and every_n_epochs saves when (current_epoch + 1) % every_n_epochs == "
              "0; lightning/pytorch/trainer/connectors/checkpoint_connector.py, "
              "_CheckpointConnector.dump_checkpoint stores no run id",
    "CKPT-4": "lightning/fabric/utilities/cloud_io.py, _load: the error of torch.load on a "
              "damaged file is raised as is, without the checkpoint's path",
    "CKPT-5": _SIGTERM,
}

ROOT_CAUSES: tuple[RootCause, ...] = (
    RootCause(summary="check_val_every_n_epoch=n validates after epochs n-1, 2n-1, ... "
                      "(1-based multiples): not after the first epoch, nor after a final "
                      "epoch off that grid",
              source="lightning/pytorch/loops/training_epoch_loop.py, "
                     "_TrainingEpochLoop._should_check_val_epoch",
              clauses=("LOOP-2", "PAT-5")),
    RootCause(summary="ModelCheckpoint is the only place Lightning tracks a best score: with "
                      "checkpointing off nothing is ever an improvement",
              source="lightning/pytorch/trainer/connectors/callback_connector.py, "
                     "_CallbackConnector._configure_checkpoint_callbacks",
              clauses=("BEST-1", "PAT-5")),
    RootCause(summary="ModelCheckpoint saves a NaN score as -inf/+inf while its top-k list "
                      "is not full, and +inf beats any best: no finiteness check",
              source=f"{_MC}._update_best_and_save, ModelCheckpoint.check_monitor_top_k",
              clauses=("NAN-1", "NAN-2", "BEST-4")),
    RootCause(summary="EarlyStopping stops at the first non-finite score "
                      "(check_finite=True by default); with check_finite=False, +inf (max) "
                      "or -inf (min) is an improvement that refills patience",
              source=f"{_ES}._evaluate_stopping_criteria",
              clauses=("NAN-3", "PAT-5")),
    RootCause(summary="a mean logged with sync_dist=True and a batch_size pools the "
                      "integer count with the 'mean' op, which on gloo sums then divides in "
                      "place, truncating: counts that do not sum to a multiple of the world "
                      "size give a wrong pooled mean (1 and 0 on 2 ranks: inf)",
              source="lightning/pytorch/trainer/connectors/logger_connector/result.py, "
                     "_ResultMetric.compute; lightning/fabric/utilities/distributed.py, "
                     "_sync_ddp",
              clauses=("DIST-1",)),
    RootCause(summary="a resume into another folder than the checkpoint's forgets the best "
                      "score: the resumed run's first validation is an improvement whatever "
                      "its score",
              source=f"{_MC}.load_state_dict", clauses=("RES-3",)),
    RootCause(summary="checkpoints hold no RNG state: a resumed fit shuffles the next epoch "
                      "from a freshly seeded generator",
              source="lightning/pytorch/trainer/connectors/checkpoint_connector.py, "
                     "_CheckpointConnector.dump_checkpoint",
              clauses=("RES-4",)),
    RootCause(summary="optimizer states are loaded into whatever configure_optimizers "
                      "returns, with no check that they fit",
              source="lightning/pytorch/strategies/strategy.py, "
                     "Strategy.load_optimizer_state_dict",
              clauses=("RES-5",)),
    RootCause(summary="under fast_dev_run ModelCheckpoint still writes last.ckpt when "
                      "training ends",
              source=f"{_MC}.on_train_end",
              clauses=("DBG-3",)),
    RootCause(summary="a checkpoint holds no run id, and last.ckpt is written only when a "
                      "top-k checkpoint is saved",
              source="lightning/pytorch/trainer/connectors/checkpoint_connector.py, "
                     f"_CheckpointConnector.dump_checkpoint; {_MC}.on_validation_end",
              clauses=("CKPT-1",)),
    RootCause(summary="a damaged checkpoint raises torch.load's own error, which does not "
                      "name the file",
              source="lightning/fabric/utilities/cloud_io.py, _load",
              clauses=("CKPT-4",)),
    RootCause(summary="on SIGTERM the loops raise SIGTERMException, a SystemExit without a "
                      "code (exit status 0), and nothing is saved unless an "
                      "OnExceptionCheckpoint is given",
              source="lightning/pytorch/trainer/connectors/signal_connector.py, "
                     "_SignalConnector._sigterm_notifier_fn; "
                     "lightning/pytorch/utilities/exceptions.py, SIGTERMException",
              clauses=("CKPT-5",)),
)

# documented switches, off by default, that should fix failing clauses
REMEDIES: tuple[Remedy, ...] = (
    Remedy(name="check_finite", setting="EarlyStopping(check_finite=False)",
           clauses=("NAN-3",),
           docs=f"{_ES}: \"check_finite: When set True, stops training when the monitor "
                "becomes NaN or infinite\" (True by default)"),
    Remedy(name="on_exception_checkpoint", setting="Trainer(callbacks=[OnExceptionCheckpoint("
                                                   "dirpath)])",
           clauses=("CKPT-5",),
           docs="lightning/pytorch/utilities/exceptions.py, SIGTERMException: \"you could use "
                "the OnExceptionCheckpoint callback that saves a checkpoint for you when this "
                "exception is raised\" (lightning/pytorch/callbacks/on_exception_checkpoint.py)"),
    Remedy(name="deterministic",
           setting="seed_everything(seed, workers=True); Trainer(deterministic=True)",
           clauses=("RES-4",),
           docs="Lightning's reproducibility guide: \"To ensure full reproducibility from run "
                "to run you need to set seeds for pseudo-random generators, and set "
                "deterministic flag in Trainer\" (seed_everything(42, workers=True), "
                "Trainer(deterministic=True)); lightning/pytorch/trainer/trainer.py, "
                "Trainer.__init__: deterministic"),
)
