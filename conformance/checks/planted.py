"""CKPT-3's planted checkpoints: a copy of a checkpoint the trainer wrote, in its own format,
with one of the files it may unpickle replaced by a crafted one.

A crafted file is the trainer's own file with a few pickle opcodes put in front of each pickle
it holds (the whole file for a plain pickle or a legacy torch file, each ``*.pkl`` member of a
torch zip archive): ``os.mkdir(<marker>)``, its result popped, then the file's own content. A
full unpickler runs the call and then reads the checkpoint as usual, so a loader that runs the
code goes on as if nothing happened; a weights-only load refuses the file at its first opcode.
The crafting is done on bytes: the suite's process never unpickles anything.

Whether the trainer opened a crafted file is read from its access time: the copy's access time
is set before its modification time, which makes the filesystem update it on the first read
(``relatime``); where the filesystem does not (``noatime``), the run's own words stand in.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import struct
import zipfile
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Plant", "crafted_bytes", "pickled_files", "plant", "reads_show"]

_PROTO = 0x80  # the first opcode of a pickle of protocol 2 or later
_ZIP = b"PK\x03\x04"
MAX_FILES = 8  # crafted files tried, one copy each: the checkpoint's own first
# where a refused load shows itself in an error or a traceback
_LOAD_WORDS = re.compile(r"torch/serialization\.py|weights_only|[Uu]npickl|torch\.load|mkdir")


def payload(marker: str) -> bytes:
    """Pickle opcodes that call ``os.mkdir(marker)`` and leave the stack as they found it:
    GLOBAL os.mkdir, the marker's path, TUPLE1, REDUCE, POP."""
    raw = marker.encode()
    return b"cos\nmkdir\n" + b"X" + struct.pack("<I", len(raw)) + raw + b"\x85R0"


def is_pickled(head: bytes) -> bool:
    """Whether a file starting with ``head`` is one a trainer unpickles: a torch zip archive,
    a plain pickle or a legacy torch file."""
    return head.startswith(_ZIP) or (len(head) > 1 and head[0] == _PROTO and 2 <= head[1] <= 5)


def crafted_bytes(data: bytes, marker: str) -> bytes | None:
    """``data`` (a file's bytes) with the payload before each pickle it holds; None when it
    holds none (a zip archive without ``.pkl`` members, or no pickle at all)."""
    if data.startswith(_ZIP):
        out = io.BytesIO()
        found = False
        with zipfile.ZipFile(io.BytesIO(data)) as z, \
                zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as w:
            for info in z.infolist():
                member = z.read(info)
                if info.filename.endswith(".pkl"):
                    member, found = payload(marker) + member, True
                w.writestr(info.filename, member)
        return out.getvalue() if found else None
    return payload(marker) + data if is_pickled(data[:2]) else None


def pickled_files(root: Path, checkpoint: Path) -> list[Path]:
    """The files under ``root`` a trainer may unpickle, relative to ``root``: those of the
    checkpoint (the file, or every file in the folder) first, then the others beside it (a
    checkpoint spread over several files), at most :data:`MAX_FILES`."""
    def pickled(p: Path) -> bool:
        if not p.is_file() or p.is_symlink():
            return False
        with p.open("rb") as f:
            head = f.read(4)
        if head.startswith(_ZIP):  # a zip archive holds pickles only as .pkl members (torch)
            try:
                with zipfile.ZipFile(p) as z:
                    return any(name.endswith(".pkl") for name in z.namelist())
            except (zipfile.BadZipFile, OSError):
                return False
        return is_pickled(head)

    own = [checkpoint] if checkpoint.is_file() else sorted(checkpoint.rglob("*"))
    rest = sorted(p for p in root.rglob("*") if p not in own and not p.is_relative_to(checkpoint))
    found = [p for p in own + rest if pickled(p)]
    return [p.relative_to(root) for p in found[:MAX_FILES]]


@dataclass(frozen=True, slots=True, kw_only=True)
class Plant:
    """A planted copy: its folder, the one crafted file in it, the marker its code creates."""

    root: Path
    crafted: Path  # relative to root
    marker: Path
    atime_ns: int

    @property
    def has_run(self) -> bool:
        """The crafted file's code ran: the marker it creates exists."""
        return self.marker.exists()

    def was_read(self) -> bool:
        """The crafted file was read since it was planted (its access time moved on)."""
        path = self.root / self.crafted
        return path.exists() and os.stat(path).st_atime_ns > self.atime_ns


def plant(source: Path, into: Path, crafted: Path) -> Plant:
    """A copy of the folder ``source`` under ``into`` with the file ``crafted`` (relative to
    ``source``) replaced by its crafted bytes."""
    root = into / "planted"
    shutil.copytree(source, root, symlinks=True)
    marker = into / f"code-ran-{'-'.join(crafted.parts)}"
    path = root / crafted
    made = crafted_bytes(path.read_bytes(), str(marker))
    if made is None:  # listed by pickled_files, so not expected: a file of no pickle
        raise ValueError(f"{crafted}: holds no pickle to craft")
    path.write_bytes(made)
    stat = os.stat(path)
    atime = stat.st_mtime_ns - 10**10  # before the change: the first read moves it on
    os.utime(path, ns=(atime, stat.st_mtime_ns))
    return Plant(root=root, crafted=crafted, marker=marker, atime_ns=os.stat(path).st_atime_ns)


def atime_tells(folder: Path) -> bool:
    """Whether reads under ``folder`` move a file's access time on, as :meth:`Plant.was_read`
    needs (a plain read of bytes, in this process)."""
    probe = folder / "atime-probe"
    probe.write_bytes(b"probe")
    stat = os.stat(probe)
    os.utime(probe, ns=(stat.st_mtime_ns - 10**10, stat.st_mtime_ns))
    before = os.stat(probe).st_atime_ns
    probe.read_bytes()
    moved = os.stat(probe).st_atime_ns > before
    probe.unlink()
    return moved


def reads_show(said: str, crafted: Path) -> bool:
    """Whether a run's error and traceback show it opened the crafted file: they name it or
    come from an unpickler, a weights-only refusal or the payload's call."""
    return crafted.name in said or bool(_LOAD_WORDS.search(said))
