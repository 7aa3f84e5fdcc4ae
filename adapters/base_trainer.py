"""The adapter for base classes in the seed's shape (``--base-trainer MODULE:CLASS``).

The class is constructed as ``Cls(cfg, rank, world_size)`` with abstract ``setup(ckpt)``,
``train_epoch()`` and ``val_epoch() -> bool``, and the seed's helpers (design.md). The suite
supplies the model trainer itself: the probe, a subclass that uses the base the way a real one
does. The config is the class's typed config when it declares one (``config_type`` with a
``from_mapping`` constructor, as the reference does), else an omegaconf ``DictConfig`` with the
seed's keys, including the ones the seed reads outside the outline.
"""

from __future__ import annotations

from typing import Any

from trainspec.conformance.run.adapter import CAPABILITIES, Capability, RunContext, load_object
from trainspec.conformance.run.probe import make_probe
from trainspec.conformance.run.scenario import Scenario
from trainspec.errors import AdapterError

__all__ = ["BaseTrainerAdapter"]

_REQUIRED = ("setup", "train_epoch", "val_epoch", "train", "save_if_best", "step_patience",
             "reduce_mean", "add_checkpoint_items", "make_ddp", "clip_and_log_grad_norm")


class BaseTrainerAdapter:
    """Runs scenarios through the probe, a model trainer built on the given base class."""

    def __init__(self, trainer: str | type[Any] = "trainspec.reference:BaseTrainer") -> None:
        self.trainer_ref = trainer if isinstance(trainer, str) else \
            f"{trainer.__module__}:{trainer.__qualname__}"
        self._cls: type[Any] | None = None if isinstance(trainer, str) else trainer
        self.last_trainer: Any = None

    @property
    def name(self) -> str:
        return f"base-trainer {self.trainer_ref}"

    @property
    def trainer_class(self) -> type[Any]:
        if self._cls is None:
            cls = load_object(self.trainer_ref)
            if not isinstance(cls, type):
                raise AdapterError(f"{self.trainer_ref}: expected a class, got "
                                   f"{type(cls).__name__}")
            missing = [m for m in _REQUIRED if not hasattr(cls, m)]
            if missing:
                raise AdapterError(
                    f"{self.trainer_ref}: not in the seed's shape, it lacks {', '.join(missing)}. "
                    "--base-trainer takes a class built like trainspec.reference.BaseTrainer; "
                    "write an adapter (MODULE:OBJECT target) for anything else.")
            self._cls = cls
        return self._cls

    def capabilities(self) -> frozenset[Capability]:
        return CAPABILITIES

    def environment(self) -> dict[str, str | None]:
        # the class is imported and its shape checked here, in the worker, once (every run is
        # a fork of it): a wrong --base-trainer is a usage error before any check, never a
        # verdict
        self.trainer_class  # noqa: B018
        return {"framework": None, "trainer": self.trainer_ref}

    def build_config(self, scenario: Scenario, ctx: RunContext) -> Any:
        config: dict[str, Any] = dict(scenario.config)
        config["ckpt"] = {**config.get("ckpt", {})}
        if not config["ckpt"].get("dir"):
            config["ckpt"]["dir"] = str(ctx.ckpt_root)
        config_type = getattr(self.trainer_class, "config_type", None)
        if config_type is not None and hasattr(config_type, "from_mapping"):
            return config_type.from_mapping(config)
        try:
            from omegaconf import OmegaConf
        except ImportError as e:
            raise AdapterError(
                f"{self.trainer_ref} takes a DictConfig, and omegaconf is not installed. "
                "pip install omegaconf, or give the class a typed config_type.") from e
        seed_keys = {"data_root": str(ctx.ckpt_root), "precision": "fp32",
                     "wandb": {"mode": "offline"}, "num_workers": 0, "disable_pbar": True,
                     "save_preds": {"enable": False}}
        ddp = dict(config.get("ddp", {}))
        ddp.setdefault("timeout", ddp.get("timeout_s"))
        return OmegaConf.create({**seed_keys, **config, "ddp": ddp})

    def run(self, scenario: Scenario, ctx: RunContext) -> None:
        probe_cls = make_probe(self.trainer_class, scenario, ctx)
        cfg = self.build_config(scenario, ctx)
        trainer = probe_cls(cfg, ctx.rank, ctx.world_size)
        # kept referenced: a worker process ends without freeing it (torch can deadlock
        # freeing a gloo group's DDP reducer while a collective's tensors await the GIL)
        self.last_trainer = trainer
        trainer.train()
        ctx.record(trainer.probe_end())
