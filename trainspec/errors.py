"""The one exception hierarchy of trainspec.

Every error the project raises on purpose derives from :class:`TrainspecError`, so a caller can
catch them all at once. Messages name the subject, what was expected, what was found, and the fix.
"""

from __future__ import annotations

__all__ = [
    "AdapterError",
    "CheckpointCorruptError",
    "CheckpointError",
    "CheckpointNotFoundError",
    "CheckpointWriteError",
    "ConfigError",
    "HarnessError",
    "ResumeMismatchError",
    "TrainspecError",
    "UsageError",
]


class TrainspecError(Exception):
    """Base class of every error trainspec raises on purpose."""


class ConfigError(TrainspecError, ValueError):
    """A configuration value is missing, of the wrong type, or out of range."""


class CheckpointError(TrainspecError):
    """A checkpoint cannot be found, read, or applied to the run."""


class CheckpointNotFoundError(CheckpointError, FileNotFoundError):
    """No checkpoint exists at any of the locations tried."""


class CheckpointCorruptError(CheckpointError):
    """A checkpoint file exists but is truncated, corrupt, or holds objects a safe load refuses."""


class CheckpointWriteError(CheckpointError, OSError):
    """A checkpoint could not be written (a full disk, a folder that is not writable); the
    previous file at that path is intact."""


class ResumeMismatchError(CheckpointError):
    """Checkpoint state no longer fits the run it is being resumed into."""


class UsageError(TrainspecError):
    """The command line or the API was called with arguments that cannot work."""


class AdapterError(TrainspecError):
    """An adapter broke its protocol: bad capabilities, wrong return types, a missing method."""


class HarnessError(TrainspecError):
    """The conformance harness itself could not run a scenario (a worker died, a pipe broke)."""
