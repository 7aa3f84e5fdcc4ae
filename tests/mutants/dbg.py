"""DBG mutants: slips in debug mode."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from itertools import islice
from typing import Any

from tests.mutants.registry import mutant_of
from trainspec.reference import BaseTrainer, OneBatchLoader, TrainConfig


class _AlwaysOneBatch:
    """A truncated loader whose len() is 1 even for an empty split."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader

    def __iter__(self) -> Iterator[Any]:
        return islice(iter(self.loader), 1)

    def __len__(self) -> int:
        return 1

    def __getattr__(self, name: str) -> Any:
        if name == "loader":
            raise AttributeError(name)
        return getattr(self.loader, name)


@mutant_of("check_debug_caps_every_split_at_one_batch",
           expect="eval_loader has len() 1 and yielded 0 batches",
           proves=("DBG-1.2", "DBG-1.3"))
class DebugLoaderLiesAboutLength(BaseTrainer):
    """Truncates with a loader that reports len() 1 for an empty split."""

    def _truncate_loaders(self) -> None:
        for name in self.loader_names:
            loader = getattr(self, name, None)
            if loader is not None:
                setattr(self, name, _AlwaysOneBatch(loader))


def _debug_config(**changes: Any) -> type[TrainConfig]:
    """A config class whose debug derivation forgets one of its duties."""

    class BrokenDebug(TrainConfig):
        def effective(self) -> TrainConfig:
            out = super().effective()
            if not self.debug:
                return out
            return dataclasses.replace(out, **{k: v(self) for k, v in changes.items()})

    return BrokenDebug


@mutant_of("check_debug_caps_epochs_at_one",
           expect="num_epochs=3 trained epochs [0, 1, 2], expected [0]",
           proves=("DBG-2.1",))
class DebugKeepsAllEpochs(BaseTrainer):
    """Debug does not cap num_epochs."""

    config_type = _debug_config(num_epochs=lambda c: c.num_epochs)


@mutant_of("check_debug_writes_nothing", expect="debug mode left 4 file(s) in ckpt.dir",
           proves=("DBG-3.1",))
class DebugWritesCheckpoints(BaseTrainer):
    """Debug leaves checkpointing on."""

    config_type = _debug_config(ckpt=lambda c: c.ckpt)


@mutant_of("check_debug_still_steps_the_optimizer",
           expect="grad_accum_steps=4 took 0 optimizer steps",
           proves=("DBG-4.1", "DBG-4.2"))
@mutant_of("check_debug_steps_under_several_ranks",
           expect="with grad_accum_steps=4, rank 0 took no optimizer step",
           proves=("DBG-4.1", "DBG-4.2"))
class DebugKeepsGradAccum(BaseTrainer):
    """Debug keeps grad_accum_steps, so the single batch never reaches an optimizer step."""

    config_type = _debug_config(grad_accum_steps=lambda c: c.grad_accum_steps)


@mutant_of("check_debug_disables_prediction_dumps", expect="debug mode left save_preds.enable=True",
           proves=("DBG-6.1",))
class DebugKeepsPredictionDumps(BaseTrainer):
    """Debug leaves save_preds.enable as the user set it."""

    config_type = _debug_config(save_preds=lambda c: c.save_preds)


@mutant_of("check_debug_sizes_schedules_from_full_length",
           expect="setup saw len(train_loader) = 1, expected the full 6",
           proves=("DBG-5.1", "DBG-5.2"))
class DebugTruncatesInSetup(BaseTrainer):
    """Truncates each loader as setup assigns it, so setup sizes schedules from one batch."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in self.loader_names and getattr(self, "cfg", None) is not None \
                and self.cfg.debug and not isinstance(value, OneBatchLoader):
            value = OneBatchLoader(value)
        super().__setattr__(name, value)

    def _truncate_loaders(self) -> None:
        return None


@mutant_of("check_debug_truncates_under_several_ranks",
           expect="rank 0 trained 3 batches with len() 3",
           proves=("DBG-1.1", "DBG-1.2"))
class DebugDoesNotTruncate(BaseTrainer):
    """Debug mode leaves the loaders whole."""

    def _truncate_loaders(self) -> None:
        return None


class _BareOneBatch:
    """A truncated loader that knows only how to iterate and its length."""

    def __init__(self, loader: Any) -> None:
        self._batches = list(islice(iter(loader), 1))

    def __iter__(self) -> Iterator[Any]:
        return iter(self._batches)

    def __len__(self) -> int:
        return len(self._batches)


@mutant_of("check_debug_caps_every_split_at_one_batch",
           expect="the truncated train loader's batch_size reads None, expected 4",
           proves=("DBG-1.4",))
class DebugLoaderHidesAttributes(BaseTrainer):
    """Truncates each split to a list of its first batch: dataset, batch_size, sampler are
    gone."""

    def _truncate_loaders(self) -> None:
        for name in self.loader_names:
            loader = getattr(self, name, None)
            if loader is not None:
                setattr(self, name, _BareOneBatch(loader))


@mutant_of("check_debug_caps_epochs_at_one",
           expect="debug mode with num_epochs=0 trained epochs [0]; 0 must stay 0",
           proves=("DBG-2.2",))
class DebugForcesOneEpoch(BaseTrainer):
    """Debug sets num_epochs to 1 instead of capping it: an eval-only run trains."""

    config_type = _debug_config(num_epochs=lambda c: 1)


class _ConfigWithWandb(TrainConfig):
    """A config whose W&B section is read from the top-level ``wandb`` key (offline unless
    given)."""

    @property
    def wandb(self) -> Mapping[str, Any]:
        section = self.extra.get("wandb")
        return section if isinstance(section, Mapping) else {"mode": "offline"}


@mutant_of("check_debug_writes_nothing", expect="debug mode left wandb.mode='offline'",
           proves=("DBG-3.2",))
class DebugKeepsWandb(BaseTrainer):
    """Logs to W&B as the user's config says, debug or not: the derivation never turns the
    sink off."""

    config_type = _ConfigWithWandb


class _MutatingDebug(TrainConfig):
    """Caps the epochs in the caller's config itself (the seed's ``cfg.num_epochs = 1``)."""

    def effective(self) -> TrainConfig:
        if self.debug:
            object.__setattr__(self, "num_epochs", min(self.num_epochs, 1))
        return super().effective()


@mutant_of("check_debug_caps_epochs_at_one",
           expect="after the debug run the user's config says num_epochs=1; it was 3",
           proves=("DBG-2.3",))
class DebugMutatesConfig(BaseTrainer):
    """Debug writes its one-epoch cap into the config the caller passed."""

    config_type = _MutatingDebug
