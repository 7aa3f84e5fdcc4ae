"""Audit mode for a real Lightning job: a callback that logs what the run decided.

Add it to the job's ``Trainer`` and audit the run folder afterwards::

    from trainspec.adapters.lightning.audit import audit_callback

    trainer = lightning.Trainer(callbacks=[audit_callback(), checkpoint, early_stopping], ...)
    trainer.fit(model, ...)
    trainer.test(model, ckpt_path="best")      # optional: the test pass is logged too
    # then: trainspec audit <run folder>

The callback reads the job's own callbacks when fit starts: the ``ModelCheckpoint`` with a
monitored metric keeps the best model (its ``mode`` says whether lower is better; its
``best_model_score`` moving is an improvement) and ``EarlyStopping`` decides the stop
(``trainer.should_stop``). Lightning runs the checkpoint and early-stopping callbacks after
every other callback, so a validation is held until the next epoch's start or the end of fit,
when both have acted on it. It changes nothing in the run: it reads, digests the weights and
lists the run folder. Lightning is imported inside :func:`audit_callback` only.
"""

from __future__ import annotations

import functools
import math
from pathlib import Path
from typing import Any

from trainspec.conformance.run.audithooks import AuditHooks, shared_run_id
from trainspec.conformance.run.auditlog import AuditConfig

__all__ = ["LightningAudit", "audit_callback"]


def audit_callback(run_dir: Path | str | None = None, *, run_id: str | None = None,
                   monitor: str | None = None) -> Any:
    """A Lightning ``Callback`` that writes the run's audit log.

    ``run_dir``: where the log goes (default: the best-keeping ``ModelCheckpoint``'s
    ``dirpath``, else the Trainer's ``default_root_dir``); give the folder the job's
    checkpoints are in, so the log lists them. ``run_id``: the same on every rank (default:
    :func:`~trainspec.conformance.run.audithooks.shared_run_id`). ``monitor``: the logged
    metric that is the run's score (default: the one its ``ModelCheckpoint`` or
    ``EarlyStopping`` monitors)."""
    return _callback_class()(run_dir, run_id=run_id, monitor=monitor)


class LightningAudit:
    """The callback's body (:func:`audit_callback` mixes it into Lightning's ``Callback``)."""

    def __init__(self, run_dir: Path | str | None = None, *, run_id: str | None = None,
                 monitor: str | None = None) -> None:
        self.run_dir, self.run_id, self.monitor = run_dir, run_id, monitor
        self.hooks: AuditHooks | None = None
        self.keeper: Any = None  # the ModelCheckpoint keeping the best model
        self.stopper: Any = None  # the EarlyStopping
        self.best_before: tuple[str, str] = ("", "")
        self.start_step = 0
        self.ended: int | None = None  # the epoch whose training end was logged

    # ------------------------------------------------------------------ fit

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self.keeper = next((c for c in trainer.checkpoint_callbacks
                            if getattr(c, "monitor", None) and c.save_top_k != 0), None)
        self.stopper = next(iter(trainer.early_stopping_callbacks), None)
        monitor = self.monitor or getattr(self.keeper, "monitor", None) \
            or getattr(self.stopper, "monitor", None)
        self.monitor = monitor
        epoch, step = int(trainer.current_epoch), int(trainer.global_step)
        resumed = None
        if trainer.ckpt_path is not None and (epoch or step):
            resumed = {"epoch": epoch - 1, "train_step": step, "run_id": None,
                       "path": str(trainer.ckpt_path)}
        self.best_before = self.best_state()
        self.hooks = AuditHooks(
            self.folder(trainer), run_id=shared_run_id(self.run_id),
            trainer=f"lightning:{type(pl_module).__module__}.{type(pl_module).__qualname__}",
            config=self.config(trainer), rank=int(trainer.global_rank),
            world_size=int(trainer.world_size), resumed_from=resumed)
        self.hooks.setup(epoch=epoch, train_step=step,
                         train_len=_count(trainer.num_training_batches))

    def folder(self, trainer: Any) -> Path:
        if self.run_dir is not None:
            return Path(self.run_dir)
        dirpath = getattr(self.keeper, "dirpath", None)
        return Path(dirpath) if dirpath else Path(trainer.default_root_dir)

    def config(self, trainer: Any) -> AuditConfig:
        """The job's settings in the spec's terms (None where Lightning has no such one)."""
        keeper, stopper = self.keeper, self.stopper
        mode = getattr(keeper, "mode", None) or getattr(stopper, "mode", None)
        max_epochs = trainer.max_epochs
        return AuditConfig(
            num_epochs=None if max_epochs is None or max_epochs < 0 else int(max_epochs),
            val_first=False,  # Lightning validates after epochs; its sanity check is no verdict
            val_every_n_epochs=_count(trainer.check_val_every_n_epoch),
            minimize=None if mode is None else mode == "min",
            patience=None if stopper is None else int(stopper.patience),
            has_patience=stopper is not None, start_patience=None,  # EarlyStopping has none
            test_enable=None,  # a test pass is a call of its own after fit: logged if it runs
            ckpt_enable=None, save_last=None if keeper is None else bool(keeper.save_last),
            ckpt_every_n_epochs=None, debug=bool(trainer.fast_dev_run))

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        if self.hooks is None:
            return
        self.start_step, self.ended = int(trainer.global_step), None
        self.hooks.train_start(int(trainer.current_epoch), train_step=self.start_step,
                               decided=lambda: self.decided(trainer))

    def end_epoch(self, trainer: Any) -> None:
        """Log the epoch's training end once: at its validation's start, or at its end."""
        epoch = int(trainer.current_epoch)
        if self.hooks is None or self.ended == epoch:
            return
        self.ended = epoch
        self.hooks.train_end(epoch, train_step=int(trainer.global_step),
                             optimizer_steps=int(trainer.global_step) - self.start_step)

    def on_validation_start(self, trainer: Any, pl_module: Any) -> None:
        if not trainer.sanity_checking and trainer.state.fn == "fit":
            self.end_epoch(trainer)

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        if self.hooks is None or trainer.sanity_checking or trainer.state.fn != "fit":
            return
        logged = trainer.callback_metrics.get(self.monitor) if self.monitor else None
        self.hooks.hold(epoch=int(trainer.current_epoch),
                        score=math.nan if logged is None else float(logged),
                        weights=pl_module, train_step=int(trainer.global_step))

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        self.end_epoch(trainer)

    def on_fit_end(self, trainer: Any, pl_module: Any) -> None:
        if self.hooks is None:
            return
        self.hooks.final(pl_module)
        best = self.best_weights()
        self.hooks.end(train_step=int(trainer.global_step),
                       decided=lambda: self.decided(trainer), best_model=best, close=False)

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        if self.hooks is not None:
            self.hooks.raised(exception)
            self.hooks = None

    # ------------------------------------------------------------------ test

    def on_test_start(self, trainer: Any, pl_module: Any) -> None:
        if self.hooks is not None:
            self.hooks.test(pl_module)

    def on_test_end(self, trainer: Any, pl_module: Any) -> None:
        if self.hooks is not None:
            self.hooks.close()
            self.hooks = None

    # ------------------------------------------------------------------ decisions

    def best_state(self) -> tuple[str, str]:
        """The best keeper's best score and file, comparable across validations."""
        keeper = self.keeper
        if keeper is None:
            return "", ""
        score = keeper.best_model_score
        return ("" if score is None else repr(float(score))), str(keeper.best_model_path)

    def decided(self, trainer: Any) -> tuple[bool | None, bool]:
        """(improved, stop) once every callback acted on the held validation."""
        now = self.best_state()
        improved = None if self.keeper is None else now != self.best_before
        self.best_before = now
        return improved, bool(trainer.should_stop)

    def best_weights(self) -> dict[str, Any] | None:
        """The best file's weights (what Lightning's ``ckpt_path="best"`` loads), read
        weights-only: a file Lightning wrote that does not load so is left out."""
        path = self.best_state()[1]
        if not path or not Path(path).is_file():
            return None
        import torch

        try:
            ckpt = torch.load(path, map_location="cpu", weights_only=True)
        except Exception:  # not readable weights-only: BEST-2 is then not judged
            return None
        state = ckpt.get("state_dict") if isinstance(ckpt, dict) else None
        return dict(state) if isinstance(state, dict) else None


def _count(value: Any) -> int | None:
    return int(value) if isinstance(value, int | float) and math.isfinite(value) else None


@functools.cache
def _callback_class() -> type[LightningAudit]:
    from lightning.pytorch.callbacks import Callback

    class AuditCallback(LightningAudit, Callback):
        """Audit mode for a Lightning job (``trainspec audit``)."""

    return AuditCallback
