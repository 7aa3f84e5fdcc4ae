"""The reference trainer's typed configuration.

The keys are the outline's (``val.patience``, ``ckpt.resume``, ...). A config is built from
keyword arguments or from any nested mapping (a plain dict or an omegaconf ``DictConfig``) and
validated on construction: a bad value raises :class:`~trainspec.errors.ConfigError` naming the
key, the value, the allowed range and the fix. Unknown top-level keys of a mapping (a model's own
settings, the seed's ``data_root`` or ``wandb``) are kept in ``extra`` for the subclass to read.

Configs are frozen. Debug mode does not mutate the user's config: :meth:`TrainConfig.effective`
derives the config a run actually follows.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Self

from trainspec.errors import ConfigError

__all__ = [
    "CkptConfig",
    "DdpConfig",
    "SavePredsConfig",
    "TestConfig",
    "TrainConfig",
    "ValConfig",
]

Backend = Literal["gloo", "nccl"]


def _fail(key: str, expected: str, value: object, fix: str) -> ConfigError:
    return ConfigError(f"{key}: expected {expected}, got {value!r}. {fix}")


def _int(key: str, value: object, *, minimum: int, fix: str) -> int:
    # bool is an int subclass: `val.patience: true` is a typo, not the number 1
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise _fail(key, f"an integer >= {minimum}", value, fix)
    return value


def _optional_int(key: str, value: object, *, minimum: int, fix: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise _fail(key, f"an integer >= {minimum} or null (unset)", value, fix)
    return value


def _bool(key: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise _fail(key, "true or false", value, f"Set {key} to a boolean.")
    return value


def _float(key: str, value: object, *, minimum: float, strict: bool, fix: str) -> float:
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if ok:
        number = float(value)  # type: ignore[arg-type]
        ok = number > minimum if strict else number >= minimum
        if ok and math.isfinite(number):
            return number
    bound = f"> {minimum}" if strict else f">= {minimum}"
    raise _fail(key, f"a finite number {bound}", value, fix)


@dataclass(frozen=True, slots=True, kw_only=True)
class ValConfig:
    """When validation runs and how its score drives best-model selection and early stopping."""

    first: bool = False
    every_n_epochs: int = 1
    minimize: bool = False
    patience: int | None = None
    start_patience: int = 0

    def __post_init__(self) -> None:
        _bool("val.first", self.first)
        _int("val.every_n_epochs", self.every_n_epochs, minimum=1,
             fix="Validate every epoch with 1, or every n-th epoch with n.")
        _bool("val.minimize", self.minimize)
        _optional_int("val.patience", self.patience, minimum=1,
                      fix="Set a positive number of validations, or leave it unset to never "
                      "stop early.")
        _int("val.start_patience", self.start_patience, minimum=0,
             fix="Set the first epoch whose non-improvement counts, 0 to count from the start.")


@dataclass(frozen=True, slots=True, kw_only=True)
class TestConfig:
    """Whether the test pass runs once the loop ends."""

    __test__ = False  # not a pytest test class, despite the name
    enable: bool = True

    def __post_init__(self) -> None:
        _bool("test.enable", self.enable)


@dataclass(frozen=True, slots=True, kw_only=True)
class CkptConfig:
    """Where checkpoints go, what is loaded, and whether loading resumes or finetunes."""

    enable: bool = True
    dir: str = "checkpoints"
    load_from: str | None = None
    resume: bool = False
    model_only: bool = False
    every_n_epochs: int | None = None
    save_last: bool = True
    # false trades durability for speed: writes stay atomic against a crash of the process,
    # but a power loss may lose the newest file (docs/benchmarks.md measures the cost)
    fsync: bool = True

    def __post_init__(self) -> None:
        _bool("ckpt.enable", self.enable)
        _bool("ckpt.fsync", self.fsync)
        if not isinstance(self.dir, str) or not self.dir:
            raise _fail("ckpt.dir", "a non-empty path", self.dir, "Set ckpt.dir to a folder.")
        if self.load_from is not None and (not isinstance(self.load_from, str)
                                           or not self.load_from):
            raise _fail("ckpt.load_from", "a checkpoint path or null", self.load_from,
                        "Set ckpt.load_from to a .pt file, or leave it unset.")
        _bool("ckpt.resume", self.resume)
        _bool("ckpt.model_only", self.model_only)
        _optional_int("ckpt.every_n_epochs", self.every_n_epochs, minimum=1,
                      fix="Set a positive epoch interval, or leave it unset for no epoch_<e>.pt.")
        _bool("ckpt.save_last", self.save_last)


@dataclass(frozen=True, slots=True, kw_only=True)
class DdpConfig:
    """The process group: backend (``None`` picks nccl with CUDA, else gloo) and its timeout."""

    backend: Backend | None = None
    timeout_s: float = 300.0

    def __post_init__(self) -> None:
        if self.backend not in (None, "gloo", "nccl"):
            raise _fail("ddp.backend", "'gloo', 'nccl' or null (automatic)", self.backend,
                        "Use gloo on CPU and nccl on CUDA devices.")
        _float("ddp.timeout_s", self.timeout_s, minimum=0.0, strict=True,
               fix="Set how many seconds a collective may wait for a peer before failing.")


@dataclass(frozen=True, slots=True, kw_only=True)
class SavePredsConfig:
    """Whether the test pass dumps its predictions to a file (debug turns this off)."""

    enable: bool = False

    def __post_init__(self) -> None:
        _bool("save_preds.enable", self.enable)


_SECTIONS: dict[str, type[Any]] = {
    "val": ValConfig,
    "test": TestConfig,
    "ckpt": CkptConfig,
    "ddp": DdpConfig,
    "save_preds": SavePredsConfig,
}


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainConfig:
    """Everything the reference loop reads, validated on construction."""

    seed: int = 0
    num_epochs: int = 1
    debug: bool = False
    grad_accum_steps: int = 1
    grad_clip: float | None = None
    weight_decay: float = 0.0
    val: ValConfig = field(default_factory=ValConfig)
    test: TestConfig = field(default_factory=TestConfig)
    ckpt: CkptConfig = field(default_factory=CkptConfig)
    ddp: DdpConfig = field(default_factory=DdpConfig)
    save_preds: SavePredsConfig = field(default_factory=SavePredsConfig)
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _int("seed", self.seed, minimum=0, fix="Set a non-negative integer seed.")
        _int("num_epochs", self.num_epochs, minimum=0,
             fix="Set the number of epochs to train, 0 for an eval-only run.")
        _bool("debug", self.debug)
        _int("grad_accum_steps", self.grad_accum_steps, minimum=1,
             fix="Set how many batches accumulate into one optimizer step, 1 for none.")
        if self.grad_clip is not None:
            _float("grad_clip", self.grad_clip, minimum=0.0, strict=True,
                   fix="Set a positive max gradient norm, or leave it unset for no clipping.")
        _float("weight_decay", self.weight_decay, minimum=0.0, strict=False,
               fix="Set a non-negative weight decay.")
        for name, section in _SECTIONS.items():
            value = getattr(self, name)
            if not isinstance(value, section):
                raise _fail(name, f"a {section.__name__}", value,
                            f"Pass {name} as a mapping or a {section.__name__}.")

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, Any]) -> Self:
        """Build a config from a nested mapping: a dict, or an omegaconf ``DictConfig``.

        Sections (``val``, ``ckpt``, ...) are mappings of their keys; an unknown key inside a
        section is an error (a typo there silently changes semantics); unknown top-level keys
        are kept in ``extra``.
        """
        plain = _to_plain(mapping)
        if not isinstance(plain, dict):
            raise _fail("config", "a mapping of config keys", mapping,
                        "Pass a dict or a DictConfig.")
        known = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        kwargs: dict[str, Any] = {}
        extra: dict[str, Any] = {}
        for key, value in plain.items():
            if key not in known:
                extra[key] = value
            elif key in _SECTIONS:
                kwargs[key] = _section(key, _SECTIONS[key], value)
            else:
                kwargs[key] = value
        return cls(**kwargs, extra=extra)

    def effective(self) -> TrainConfig:
        """The config a run follows: this one, or its debug derivation.

        Debug caps every epoch count at one (0 stays 0, eval-only), writes no checkpoint, and
        forces one batch per optimizer step, or the single debug batch would never reach one.
        Prediction dumps are off: a truncated file would be scored as a whole one.
        """
        if not self.debug:
            return self
        return dataclasses.replace(
            self,
            num_epochs=min(self.num_epochs, 1),
            grad_accum_steps=1,
            ckpt=dataclasses.replace(self.ckpt, enable=False),
            save_preds=dataclasses.replace(self.save_preds, enable=False),
        )

    def to_dict(self) -> dict[str, Any]:
        """A plain, weights-only-loadable dict of the config (for checkpoints and logs)."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "extra":
                out.update(_to_plain(value))
            elif dataclasses.is_dataclass(value):
                out[f.name] = dataclasses.asdict(value)  # type: ignore[arg-type]
            else:
                out[f.name] = value
        return out


def _section(name: str, section: type[Any], value: object) -> object:
    if isinstance(value, section):
        return value
    if not isinstance(value, dict):
        raise _fail(name, f"a mapping of {name}.* keys", value, f"Write {name} as a mapping.")
    allowed = {f.name for f in dataclasses.fields(section)}
    items = dict(value)
    if section is DdpConfig and "timeout" in items and "timeout_s" not in items:
        items["timeout_s"] = items.pop("timeout")  # the seed's spelling
    unknown = sorted(set(items) - allowed)
    if unknown:
        raise _fail(f"{name}.{unknown[0]}", f"one of {sorted(allowed)}", unknown[0],
                    "Fix the key's spelling; unknown keys inside a section are rejected.")
    return section(**items)


def _to_plain(value: object) -> Any:
    """Nested mappings and sequences (an omegaconf DictConfig or ListConfig among them, which
    resolve their interpolations on access) as plain dicts and lists."""
    if isinstance(value, Mapping):
        return {str(k): _to_plain(v) for k, v in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        return [_to_plain(v) for v in value]
    return value
