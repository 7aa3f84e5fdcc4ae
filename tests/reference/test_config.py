"""The reference's config: validated keys, the seed's spellings, and debug's derived config."""

from __future__ import annotations

import copy
import io
import math
from typing import Any

import pytest
import torch
from omegaconf import OmegaConf

from tests.reference.reference_helpers import ScriptedTrainer
from trainspec.errors import ConfigError
from trainspec.reference import TrainConfig


def seed_style_config(**top: Any) -> dict[str, Any]:
    """A nested config in the seed's shape, with the model's own keys beside the loop's."""
    return {
        "seed": 0, "num_epochs": 5, "debug": True, "grad_accum_steps": 4,
        "val": {"first": False, "every_n_epochs": 1, "patience": None},
        "ckpt": {"enable": True, "dir": "checkpoints-never-created", "every_n_epochs": 1},
        "save_preds": {"enable": True},
        "ddp": {"backend": "gloo", "timeout": 30},
        "data_root": "/data", "wandb": {"mode": "online"},
        **top,
    }


@pytest.mark.clause("DBG-2", "DBG-3", "DBG-4", "DBG-6")
def test_debug_derives_its_config_without_touching_a_dict_config() -> None:
    user = seed_style_config()
    before = copy.deepcopy(user)
    trainer = ScriptedTrainer(user, scores=[0.1])
    effective = trainer.cfg
    assert (effective.num_epochs, effective.grad_accum_steps) == (1, 1)
    assert not effective.ckpt.enable
    assert not effective.save_preds.enable
    assert user == before


@pytest.mark.clause("DBG-2", "DBG-3", "DBG-4", "DBG-6")
def test_debug_derives_its_config_without_touching_an_omegaconf_config() -> None:
    user = OmegaConf.create(seed_style_config())
    before = OmegaConf.to_container(user)
    trainer = ScriptedTrainer(user, scores=[0.1])
    assert trainer.cfg.num_epochs == 1
    assert not trainer.cfg.ckpt.enable
    assert trainer.user_cfg.num_epochs == 5
    assert trainer.user_cfg.ckpt.enable
    assert OmegaConf.to_container(user) == before


def test_a_config_without_debug_is_its_own_effective_config() -> None:
    cfg = TrainConfig.from_mapping(seed_style_config(debug=False))
    assert cfg.effective() is cfg


def test_unknown_top_level_keys_are_kept_for_the_model() -> None:
    cfg = TrainConfig.from_mapping(seed_style_config())
    assert cfg.extra == {"data_root": "/data", "wandb": {"mode": "online"}}
    assert cfg.ddp.timeout_s == 30.0  # the seed's `ddp.timeout` spelling


def test_an_unknown_key_inside_a_section_is_refused_by_name() -> None:
    with pytest.raises(ConfigError, match=r"val\.patiense: expected one of \[.*'patience'"):
        TrainConfig.from_mapping({"val": {"patiense": 3}})


@pytest.mark.parametrize(("mapping", "message"), [
    ({"val": {"patience": 0}}, r"val\.patience: expected an integer >= 1 or null \(unset\)"),
    ({"val": {"patience": True}}, r"val\.patience: expected .* got True"),
    ({"val": {"patience": -1}}, r"val\.patience: .*leave it unset to never stop early"),
    ({"num_epochs": -1}, r"num_epochs: expected an integer >= 0.* 0 for an eval-only run"),
    ({"val": {"every_n_epochs": 0}}, r"val\.every_n_epochs: expected an integer >= 1"),
    ({"grad_clip": math.nan}, r"grad_clip: expected a finite number > 0"),
    ({"ddp": {"timeout_s": 0}}, r"ddp\.timeout_s: expected a finite number > 0"),
    ({"ddp": {"backend": "mpi"}}, r"ddp\.backend: expected 'gloo', 'nccl' or null"),
    ({"ckpt": {"every_n_epochs": -1}}, r"ckpt\.every_n_epochs: .*leave it unset"),
    ({"ckpt": {"resume": "yes"}}, r"ckpt\.resume: expected true or false, got 'yes'"),
    ({"val": 3}, r"val: expected a mapping of val\.\* keys"),
])
def test_a_bad_value_is_refused_naming_the_key_and_the_fix(mapping: dict[str, Any],
                                                          message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        TrainConfig.from_mapping(mapping)


@pytest.mark.clause("PAT-4")
def test_patience_is_unset_by_default_and_unset_is_none() -> None:
    assert TrainConfig().val.patience is None
    assert TrainConfig.from_mapping({"val": {"patience": None}}).val.patience is None


@pytest.mark.clause("CKPT-1")
def test_the_config_a_checkpoint_carries_loads_weights_only() -> None:
    cfg = TrainConfig.from_mapping(seed_style_config(debug=False))
    buffer = io.BytesIO()
    torch.save(cfg.to_dict(), buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=True)
    assert loaded == cfg.to_dict()
    assert TrainConfig.from_mapping(loaded) == cfg  # and rebuilds the same config
