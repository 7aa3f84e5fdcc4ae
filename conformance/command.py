"""What a command needs of its process: signals that stop it once, and report paths it can write."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

from trainspec.errors import UsageError


def require_writable(args: argparse.Namespace) -> None:
    """Every report path can be written, before the run (not found out after it)."""
    paths = {f"--{k.replace('_', '-')}": getattr(args, k)
             for k in ("report", "junit", "markdown", "save_baseline", "badge")}
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    paths["GITHUB_STEP_SUMMARY"] = Path(summary) if summary else None
    for flag, path in paths.items():
        if path is not None:
            problem = report_path_problem(Path(path))
            if problem:
                raise UsageError(f"{flag} {path}: cannot write the report there ({problem}). "
                                 "Give a file path in a writable folder.")


def report_path_problem(path: Path) -> str:
    """Why ``path`` cannot take a report ("" when it can); creates and opens nothing new."""
    if path.is_dir():
        return "it is a folder"
    if path.exists():
        if not path.is_file() and path.resolve() not in _REPORT_DEVICES:
            return "it is not a regular file"
        try:
            with path.open("ab"):  # appends nothing: the file is unchanged
                pass
        except OSError as e:
            return str(e)
        return ""
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent  # the writers create the missing folders
    if not folder.is_dir():
        return f"{folder} is not a folder"
    if not os.access(folder, os.W_OK | os.X_OK):
        return f"the folder {folder} is not writable"
    return ""


_REPORT_DEVICES = {Path(os.devnull)}


class SignalStop:
    """SIGINT and SIGTERM raise KeyboardInterrupt once; later ones are ignored until the
    command returns, so a second signal cannot cut the cleanup short (workers killed, the
    ``trainspec-*`` scratch folder removed, reports written). ``is_final``: the process ends
    with the command, so once stopped, later signals stay ignored to its very end."""

    def __init__(self, *, is_final: bool = False) -> None:
        self.signum = int(signal.SIGINT)
        self.is_final = is_final
        self.is_stopped = False

    @contextlib.contextmanager
    def on_signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield  # signal handlers belong to the main thread
            return

        def stop(signum: int, frame: FrameType | None) -> None:
            for s in STOP_SIGNALS:
                signal.signal(s, signal.SIG_IGN)
            self.signum, self.is_stopped = signum, True
            raise KeyboardInterrupt

        previous = {s: signal.signal(s, stop) for s in STOP_SIGNALS}
        try:
            yield
        finally:
            if not (self.is_stopped and self.is_final):
                for s, handler in previous.items():
                    signal.signal(s, handler)


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
