"""The reference BaseTrainer: a training loop that meets every clause of the spec.

Torch is its only runtime dependency. Subclass :class:`BaseTrainer`, supply ``setup``,
``train_epoch`` and ``val_epoch`` (and ``test``), then ``Trainer(cfg, rank, world_size).train()``.
"""

from trainspec.reference.checkpoint import find_checkpoint, load_checkpoint, save_checkpoint
from trainspec.reference.config import (
    CkptConfig,
    DdpConfig,
    SavePredsConfig,
    TestConfig,
    TrainConfig,
    ValConfig,
)
from trainspec.reference.loaders import OneBatchLoader
from trainspec.reference.trainer import PREEMPTED_EXIT_CODE, BaseTrainer, Stateful

__all__ = [
    "PREEMPTED_EXIT_CODE",
    "BaseTrainer",
    "CkptConfig",
    "DdpConfig",
    "OneBatchLoader",
    "SavePredsConfig",
    "Stateful",
    "TestConfig",
    "TrainConfig",
    "ValConfig",
    "find_checkpoint",
    "load_checkpoint",
    "save_checkpoint",
]
