"""The write watch: the writes a run makes into its checkpoint folder, whatever library makes
them, and the torn write of a ``write`` crash point (CKPT-2).

Writes are seen three ways, so that no writer escapes: Python's audit events (``open`` for
writing, ``os.rename``/``os.replace``), ``torch.save`` (torch writes a path from C++, with no
audit event), and the folder itself: the files new or changed since the epoch began, looked for
at the next audit event, record, crash point or ``torch.save``. The last way sees what writes
outside Python (safetensors, h5py, a framework's own writer) and what is serialized to memory
first and written afterwards.

A ``write`` crash of epoch e tears the first checkpoint write of that epoch (or the first write
of a file named ``crash.file``): the file being written is cut to ``fraction`` of its bytes and
the process is killed with SIGKILL, which is what a crash part-way through the write leaves. A
temporary file renamed over a checkpoint is torn at the rename, before it happens, so an atomic
writer keeps its old file; a write in place tears the checkpoint itself. A file opened for
appending (a log) is never torn.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from trainspec.conformance.run.reading import in_reader_fork
from trainspec.conformance.run.records import Crash, Record, Write
from trainspec.conformance.run.scenario import CrashPoint

__all__ = ["WriteWatch"]

# audit events after which a file may have changed: the folder is looked at then
_LOOK_AT = frozenset({"open", "os.rename", "os.remove", "os.rmdir", "os.mkdir", "os.truncate",
                      "os.link", "os.symlink", "os.chmod", "os.utime", "shutil.copyfile",
                      "shutil.rmtree", "shutil.make_archive"})

Stamp = tuple[int, int]  # (mtime_ns, size)


class WriteWatch:
    """Records the writes under ``root`` and tears the one the scenario's crash point names."""

    def __init__(self, root: Path, rank: int, crash: CrashPoint | None,
                 record: Callable[[Record], None]) -> None:
        self.root = str(root.resolve())
        self._record = record
        self._crash = crash if crash is not None and crash.where == "write" \
            and crash.rank == rank else None
        self._epoch: int | None = None
        self._baseline: dict[str, Stamp] = {}
        self._appended: set[str] = set()  # opened for appending: logs, never torn
        self._placed: set[str] = set()  # arrived by a rename: complete when they appear
        self._busy = False  # looking at the folder raises audit events of its own
        self.written: set[str] = set()  # every path the run wrote (the trainer's own files)

    def has_written(self, path: Path) -> bool:
        """Whether the run wrote ``path`` (a file, or a file inside a folder ``path``)."""
        full = os.path.abspath(path)
        return full in self.written or any(p.startswith(full + os.sep) for p in self.written)

    def _wrote(self, path: str, via: Literal["open", "rename", "torch.save"]) -> None:
        self.written.add(path)
        self._record(Write(path=path, via=via, t=time.time()))

    # ------------------------------------------------------------------ where writes land

    def inside(self, path: object) -> str | None:
        """``path`` as an absolute path when it lies under the root, else None."""
        if isinstance(path, bytes):
            path = path.decode(errors="replace")
        if not isinstance(path, str | os.PathLike):
            return None
        full = os.path.abspath(os.fspath(path))
        return full if full == self.root or full.startswith(self.root + os.sep) else None

    @property
    def epoch(self) -> int | None:
        """The epoch whose writes these are (its train_start seen), or None before."""
        return self._epoch

    @property
    def armed(self) -> bool:
        return self._crash is not None and self._epoch == self._crash.epoch

    def enter_epoch(self, epoch: int) -> None:
        """Epoch ``epoch`` begins: a write still pending from the last one is torn first."""
        if epoch == self._epoch:
            return
        self.look()
        self._epoch = epoch
        if self.armed:
            self._baseline = self._stamps()

    # ------------------------------------------------------------------------ observing

    def on_audit(self, event: str, args: tuple[Any, ...]) -> None:
        if in_reader_fork():  # a process forked to read one file writes nothing of the run's
            return
        if event == "open" and len(args) >= 2:
            path, mode = self.inside(args[0]), args[1]
            flags = args[2] if len(args) > 2 and isinstance(args[2], int) else 0
            text = mode if isinstance(mode, str) else ""
            if path and ("a" in text or (mode is None and flags & os.O_APPEND)):
                self._appended.add(path)
            if path and (any(c in text for c in "wax+")
                         or (mode is None and flags & (os.O_WRONLY | os.O_RDWR))):
                self._wrote(path, "open")
        elif event == "os.rename" and len(args) >= 2:
            dst = self.inside(args[1])
            if dst:
                self._wrote(dst, "rename")
                if self.armed and self._matches(dst):
                    self._tear(os.path.abspath(os.fspath(args[0])))
                self._placed.add(dst)
        if event in _LOOK_AT:
            self.look()

    def look(self) -> None:
        """Tear the first file written since the epoch began, if the crash point asks."""
        if not self.armed or self._busy or in_reader_fork():
            return
        self._busy = True
        try:
            changed = [(stamp, path) for path, stamp in self._stamps().items()
                       if self._baseline.get(path) != stamp and path not in self._appended
                       and path not in self._placed and self._matches(path)]
        finally:
            self._busy = False
        if changed:
            self._tear(min(changed)[1])

    def _matches(self, path: str) -> bool:
        name = "" if self._crash is None else self._crash.file
        return not name or name in Path(os.path.relpath(path, self.root)).parts

    def _stamps(self) -> dict[str, Stamp]:
        found: dict[str, Stamp] = {}
        for folder, _, names in os.walk(self.root):
            for name in names:
                path = os.path.join(folder, name)
                try:
                    st = os.stat(path, follow_symlinks=False)
                except OSError:
                    continue
                found[path] = (st.st_mtime_ns, st.st_size)
        return found

    # -------------------------------------------------------------------------- tearing

    def _tear(self, path: str) -> None:
        """Cut the file being written (the newest file of a folder) to the crash's share of
        its bytes, say so, and die."""
        assert self._crash is not None
        self._busy = True  # truncating raises an audit event of its own
        if os.path.isdir(path):
            files = [os.path.join(d, n) for d, _, names in os.walk(path) for n in names]
            path = max(files, key=lambda p: os.stat(p).st_mtime_ns, default=path)
        kept = 0
        if os.path.isfile(path):
            kept = int(os.stat(path).st_size * self._crash.fraction)
            os.truncate(path, kept)
        shown = os.path.relpath(path, self.root) if self.inside(path) else path
        self._record(Crash(where="write", epoch=self._crash.epoch, bytes=kept, how="sigkill",
                           path=shown, t=time.time()))
        os.kill(os.getpid(), signal.SIGKILL)

    # --------------------------------------------------------------------------- install

    def install(self, slow_writes_s: float = 0.0,
                slows: Callable[[], bool] = lambda: False) -> None:
        """Hook the audit events and ``torch.save`` (where ``slows()`` says so, a save into
        the folder pauses ``slow_writes_s`` first: DIST-4)."""
        import torch

        sys.addaudithook(self.on_audit)
        original = torch.save

        def watched_save(obj: object, f: Any, *args: Any, **kwargs: Any) -> None:
            target = None if in_reader_fork() else \
                self.inside(getattr(f, "name", None) if hasattr(f, "write") else f)
            if target:
                self._wrote(target, "torch.save")
                if slow_writes_s and slows():
                    time.sleep(slow_writes_s)
            original(obj, f, *args, **kwargs)
            if self.armed and hasattr(f, "flush"):
                f.flush()  # the bytes a kill now would leave on disk, not in a buffer
            self.look()

        torch.save = watched_save
        torch.serialization.save = watched_save
