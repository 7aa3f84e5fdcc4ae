"""The write watch sees a checkpoint write whatever library makes it, and tears the right file.

In process, without a run: the kill is replaced by an exception, the records kept in a list.
"""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest
import torch

from trainspec.conformance.run.records import Crash, Record
from trainspec.conformance.run.scenario import CrashPoint
from trainspec.conformance.run.writewatch import WriteWatch


class Killed(Exception):
    pass


@pytest.fixture
def records(monkeypatch: pytest.MonkeyPatch) -> list[Record]:
    def kill(pid: int, sig: int) -> None:
        raise Killed

    monkeypatch.setattr(os, "kill", kill)  # the watch kills with os.kill
    return []


def watch(root: Path, records: list[Record], *, fraction: float = 0.5,
          file: str = "") -> WriteWatch:
    crash = CrashPoint(where="write", epoch=2, fraction=fraction, file=file)
    w = WriteWatch(root, 0, crash, records.append)
    w.enter_epoch(2)
    return w


def torn(records: list[Record]) -> Crash:
    crashes = [r for r in records if isinstance(r, Crash)]
    assert len(crashes) == 1
    return crashes[0]


def test_a_native_writer_is_torn_in_place(tmp_path: Path, records: list[Record]) -> None:
    """safetensors writes from Rust: no Python call to wrap, the folder shows the write."""
    from safetensors.torch import save_file

    (tmp_path / "model.safetensors").write_bytes(b"old")
    w = watch(tmp_path, records)
    save_file({"w": torch.zeros(64)}, str(tmp_path / "model.safetensors"))
    size = (tmp_path / "model.safetensors").stat().st_size
    with pytest.raises(Killed):
        w.look()
    crash = torn(records)
    assert crash.path == "model.safetensors"
    assert crash.bytes == size // 2 == (tmp_path / "model.safetensors").stat().st_size


def test_bytes_serialized_in_memory_then_written(tmp_path: Path, records: list[Record]) -> None:
    """torch.save into a buffer, the bytes written with open(): Lightning's way."""
    w = watch(tmp_path, records, fraction=0.0)
    buffer = io.BytesIO()
    torch.save({"w": torch.ones(8)}, buffer)
    with open(tmp_path / "last.ckpt", "wb") as f:
        f.write(buffer.getvalue())
    with pytest.raises(Killed):
        w.on_audit("open", (str(tmp_path / "metrics.json"), "r", 0))  # the next thing seen
    assert torn(records).path == "last.ckpt"
    assert (tmp_path / "last.ckpt").stat().st_size == 0


def test_an_atomic_write_tears_the_temporary(tmp_path: Path, records: list[Record]) -> None:
    """Renamed over the checkpoint afterwards: torn before the rename, the old file kept."""
    (tmp_path / "best.pt").write_bytes(b"previous")
    w = watch(tmp_path, records, file="best.pt")
    tmp = tmp_path / "tmpx123"
    tmp.write_bytes(b"x" * 100)
    w.look()  # a temporary is not the file asked for
    assert not records
    with pytest.raises(Killed):
        w.on_audit("os.rename", (str(tmp), str(tmp_path / "best.pt"), -1, -1))
    assert torn(records).path == "tmpx123"
    assert tmp.stat().st_size == 50
    assert (tmp_path / "best.pt").read_bytes() == b"previous"


def test_logs_and_other_epochs_are_never_torn(tmp_path: Path, records: list[Record]) -> None:
    w = watch(tmp_path, records)
    w.on_audit("open", (str(tmp_path / "metrics.jsonl"), "a", 0))
    (tmp_path / "metrics.jsonl").write_text("{}\n")
    w.look()
    assert not [r for r in records if isinstance(r, Crash)]
    w.enter_epoch(3)  # epoch 2 ended with no checkpoint written: nothing to tear later
    (tmp_path / "last.pt").write_bytes(b"x" * 10)
    w.look()
    assert not [r for r in records if isinstance(r, Crash)]
    assert os.path.getsize(tmp_path / "last.pt") == 10
