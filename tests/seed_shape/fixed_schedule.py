"""A trainer that always validates after every epoch: it has no ``val.first`` and no
``val.every_n_epochs`` setting, so its adapter cannot declare ``val_first`` or ``val_every_n``.
The checks must still judge every case that needs neither (tests/test_one_fault.py)."""

from __future__ import annotations

from trainspec.adapters.base_trainer import BaseTrainerAdapter
from trainspec.conformance.run.adapter import CAPABILITIES, Capability

__all__ = ["ValidatesEveryEpoch"]


class ValidatesEveryEpoch(BaseTrainerAdapter):
    """The reference, declared without ``val_first`` and ``val_every_n``."""

    def capabilities(self) -> frozenset[Capability]:
        return CAPABILITIES - {"val_first", "val_every_n"}
