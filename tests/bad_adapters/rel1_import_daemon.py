"""An adapter module that starts a daemon at import (in a new session) and is otherwise a
working adapter on the reference trainer."""

from __future__ import annotations

import os

from tests.bad_adapters.rel1_strays import start_stray
from trainspec.adapters.base_trainer import BaseTrainerAdapter

if os.environ.get("TRAINSPEC_REL1_ARMED"):
    start_stray(new_session=True)


def make() -> BaseTrainerAdapter:
    return BaseTrainerAdapter("trainspec.reference:BaseTrainer")
