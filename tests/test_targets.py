"""Targets resolve from strings alone: no torch, no trainer import, usage errors for bad names."""

from __future__ import annotations

import subprocess
import sys

import pytest

from trainspec.conformance import runner, targets
from trainspec.conformance.targets import BASE_TRAINER_ADAPTER, Target, resolve_target
from trainspec.errors import UsageError


def test_resolving_a_target_imports_neither_torch_nor_the_trainer() -> None:
    code = ("import sys\n"
            "from trainspec.conformance.targets import resolve_target\n"
            "resolve_target('mypkg.adapters:MyAdapter')\n"
            "resolve_target(base_trainer='mypkg.trainers:Base')\n"
            "resolve_target('lightning')\n"
            "heavy = sorted(m for m in ('torch', 'mypkg', 'lightning') if m in sys.modules)\n"
            "assert not heavy, heavy\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=False, timeout=60)
    assert done.returncode == 0, done.stderr


def test_the_runner_re_exports_the_targets() -> None:
    assert runner.resolve_target is targets.resolve_target
    assert runner.Target is targets.Target
    assert runner.BUILTIN_TARGETS is targets.BUILTIN_TARGETS


def test_a_base_trainer_goes_through_the_seed_shape_adapter() -> None:
    target = resolve_target(base_trainer="mypkg.trainers:Base")
    assert target == Target(label="mypkg.trainers:Base", factory=BASE_TRAINER_ADAPTER,
                            args=("mypkg.trainers:Base",), is_base_trainer=True)
    assert target.adapter.factory == BASE_TRAINER_ADAPTER
    assert target.adapter.args == ("mypkg.trainers:Base",)
    assert target.reproducer_args == "base_trainer='mypkg.trainers:Base'"


def test_the_default_target_is_the_reference() -> None:
    assert resolve_target() is resolve_target("reference")
    assert resolve_target().reproducer_args == "'reference'"


@pytest.mark.parametrize(("target", "base_trainer", "message"), [
    ("nosuch", None, r"target 'nosuch': expected one of reference, lightning"),
    ("mypkg.adapters:", None, r"target 'mypkg.adapters:': expected one of"),
    (":MyAdapter", None, r"target ':MyAdapter': expected one of"),
    (None, "mypkg.trainers", r"--base-trainer: expected MODULE:CLASS"),
    ("hf", "mypkg.trainers:Base", r"both name a trainer: give one of them"),
])
def test_a_malformed_target_is_a_usage_error(target: str | None, base_trainer: str | None,
                                             message: str) -> None:
    with pytest.raises(UsageError, match=message):
        resolve_target(target, base_trainer)
