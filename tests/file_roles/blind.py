"""An adapter that runs the reference but describes no file as a checkpoint."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from trainspec.adapters.base_trainer import BaseTrainerAdapter
from trainspec.conformance.run.files import FileRecord, describe_seed_files


class BlindToCheckpoints(BaseTrainerAdapter):
    """Every file loses its role: the checkpoint clauses must see no checkpoint at all."""

    def describe_checkpoints(self, root: Path) -> list[FileRecord]:
        return [dataclasses.replace(entry, role=None) for entry in describe_seed_files(root)]
