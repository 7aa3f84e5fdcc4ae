"""Audit mode for trainers in the seed's shape (the reference ``BaseTrainer`` and its kin).

``audited(MyTrainer)`` is a subclass of ``MyTrainer`` that runs exactly as it does and logs
what it decides to the run folder (:mod:`trainspec.conformance.run.auditlog`)::

    from trainspec.kit import audited
    trainer = audited(MLPTrainer)(cfg, rank=rank, world_size=world_size)
    trainer.train()          # then: trainspec audit <the run folder>

It observes the base's own helpers: ``save_if_best`` (the score this rank passed, the
improvement verdict, the step and the weights at that moment), ``step_patience`` and the
``val_epoch`` verdict, ``train_epoch``, ``test`` and ``train``. Nothing is scripted and
nothing is interrupted: the trainer's real scores go into the log. The log lives in
``ckpt_dir`` (``ckpt.dir/<run_id>`` when checkpointing is off).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

from trainspec.conformance.run.auditlog import (
    MAX_BYTES,
    AuditConfig,
    AuditLog,
    folder_listing,
    weights_digest,
)
from trainspec.conformance.run.files import as_int

__all__ = ["audit_config", "audited"]


def _get(cfg: Any, dotted: str) -> Any:
    node = cfg
    for key in dotted.split("."):
        node = node.get(key) if isinstance(node, Mapping) else getattr(node, key, None)
        if node is None:
            return None
    return node


def _opt(value: Any, kind: type) -> Any:
    return None if value is None else kind(value)


def audit_config(cfg: Any) -> AuditConfig:
    """A seed-shaped config (the reference's ``TrainConfig`` or a ``DictConfig``) in the spec's
    terms."""
    patience = _get(cfg, "val.patience")
    return AuditConfig(
        num_epochs=_opt(_get(cfg, "num_epochs"), int),
        val_first=bool(_get(cfg, "val.first")), minimize=bool(_get(cfg, "val.minimize")),
        val_every_n_epochs=_opt(_get(cfg, "val.every_n_epochs"), int) or 1,
        patience=_opt(patience, int), has_patience=patience is not None,
        start_patience=_opt(_get(cfg, "val.start_patience"), int) or 0,
        test_enable=_opt(_get(cfg, "test.enable"), bool),
        ckpt_enable=_opt(_get(cfg, "ckpt.enable"), bool),
        save_last=_opt(_get(cfg, "ckpt.save_last"), bool),
        ckpt_every_n_epochs=_opt(_get(cfg, "ckpt.every_n_epochs"), int),
        debug=bool(_get(cfg, "debug")))


def audited(base: type[Any], *, max_bytes: int = MAX_BYTES) -> type[Any]:
    """A subclass of the seed-shaped ``base`` that logs its real run for ``trainspec audit``."""
    return _audited(base, max_bytes)  # type: ignore[arg-type]  # classes hash by identity


@cache
def _audited(base: type[Any], max_bytes: int) -> type[Any]:
    name = f"Audited[{base.__name__}]"
    return type(name, (_Audit, base), {"__qualname__": name, "_audit_max_bytes": max_bytes})


# the overrides call into the trainer class below them, which only the subclass knows
_Base: Any = object


class _Audit(_Base):  # type: ignore[misc]
    """The audit's overrides; :func:`audited` puts them above a trainer class, whose
    methods they call through ``super()``."""

    _audit: AuditLog

    def __init__(self, cfg: Any, *args: Any, **kwargs: Any) -> None:
        self._audit_resumed: dict[str, object] | None = None
        self._audit_trained = False
        self._audit_val: tuple[float, bool, int, str] | None = None
        self._audit_pools: list[float] = []  # what reduce_mean returned in this validation
        self._audit_final: str | None = None
        super().__init__(cfg, *args, **kwargs)
        _open_log(self, self._audit_max_bytes)

    def setup(self, ckpt: Mapping[str, object] | None) -> None:
        if ckpt is not None and getattr(self, "is_resumed", False):
            self._audit_resumed = {
                "epoch": as_int(ckpt.get("epoch")), "run_id": ckpt.get("run_id"),
                "train_step": as_int(ckpt.get("train_step")),
                "path": str(getattr(self, "ckpt_path", ""))}
        super().setup(ckpt)

    def train(self) -> None:
        try:
            super().train()
        except SystemExit as e:
            self._audit.close(exit=e.code if isinstance(e.code, int) else 1)
            raise
        except BaseException as e:
            self._audit.close(raised=f"{type(e).__name__}: {e}"[:500])
            raise
        self._audit.end(train_step=int(self.train_step), final_weights=None,
                        best_model=self.best_model)

    def train_epoch(self) -> None:
        epoch, step = int(self.epoch), int(self.train_step)
        self._audit.event("train_start", epoch=epoch, train_step=step,
                          files=folder_listing(self._audit.run_dir))
        self._audit_trained = True
        super().train_epoch()
        self._audit.event("train_end", epoch=epoch, train_step=int(self.train_step),
                          optimizer_steps=int(self.train_step) - step)

    def reduce_mean(self, total: float, count: float) -> float:
        pooled = float(super().reduce_mean(total, count))
        self._audit_pools.append(pooled)
        return pooled

    def save_if_best(self, score: float, metrics: Mapping[str, float] | None = None
                     ) -> bool:
        improved = bool(super().save_if_best(score, metrics))
        self._audit_val = (float(score), improved, int(self.train_step),
                           weights_digest(self.unwrapped(self.model).state_dict()))
        return improved

    def val_epoch(self) -> bool:
        self._audit_val, self._audit_pools = None, []
        stop = bool(super().val_epoch())
        held = self._take_val()
        phase = "epoch" if self._audit_trained else "first"
        if held is None:  # the trainer decided without save_if_best: no score to judge
            self._audit.event("val", epoch=int(self.epoch), phase=phase, score=None,
                              improved=None, stop=stop, train_step=int(self.train_step))
        else:
            score, improved, step, weights = held
            # a score reduce_mean returned in this validation is a pooled mean (DIST-1);
            # another (a metric object's own sync, a rank-local metric) is not known to be one
            pooled = True if any(p == score or (math.isnan(p) and math.isnan(score))
                                 for p in self._audit_pools) else None
            self._audit.validation(epoch=int(self.epoch), phase=phase, score=score,
                                   improved=improved, stop=stop, train_step=step,
                                   weights=weights, pooled=pooled)
        return stop

    def _take_val(self) -> tuple[float, bool, int, str] | None:
        held, self._audit_val = self._audit_val, None
        return held

    def test(self) -> None:
        model = self.unwrapped(self.model)
        self._audit.event("final", weights=weights_digest(model.state_dict()))
        super().test()
        self._audit.event("test", weights=weights_digest(model.state_dict()))

def _open_log(trainer: Any, max_bytes: int) -> None:
    run_id = str(getattr(trainer, "run_id", "run"))
    run_dir = trainer.ckpt_dir
    if run_dir is None:  # checkpointing off (or debug): the run folder the config names
        run_dir = Path(str(_get(trainer.cfg, "ckpt.dir") or "checkpoints")) / run_id
    cls = type(trainer).__bases__[-1]  # the trainer class audited
    trainer._audit = AuditLog(
        Path(run_dir), rank=int(trainer.rank), world_size=int(trainer.world_size),
        run_id=run_id, trainer=f"{cls.__module__}.{cls.__qualname__}",
        config=audit_config(trainer.cfg), resumed_from=trainer._audit_resumed,
        max_bytes=max_bytes)
    train_loader = getattr(trainer, "train_loader", None)
    trainer._audit.event("setup", epoch=int(trainer.epoch), train_step=int(trainer.train_step),
                         train_len=None if train_loader is None else len(train_loader),
                         user_num_epochs=_opt(_get(getattr(trainer, "user_cfg", None),
                                                   "num_epochs"), int))
