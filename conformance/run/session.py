"""One worker process, seen from the harness: its pipe of typed JSON lines and its log.

The process starts warm (torch imported) and unbound; :meth:`WorkerProcess.bind` sends the
adapter it serves until it is closed. Requests and replies are the types of
:mod:`trainspec.conformance.run.protocol`; :mod:`trainspec.conformance.run.worker` is the
other end.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import sys
from pathlib import Path
from typing import IO

from trainspec.conformance.run.protocol import (
    AdapterSpec,
    Bind,
    Ready,
    Reply,
    Request,
    Shutdown,
    decode_reply,
    encode,
)
from trainspec.errors import HarnessError

__all__ = ["START_TIMEOUT_S", "WorkerProcess"]

START_TIMEOUT_S = 60.0  # a worker's start (imports) and its answer to describe


class WorkerProcess:
    """One worker process and its pipe of typed JSON lines; bound to one adapter."""

    def __init__(self, log_path: Path) -> None:
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1",
               "TORCH_CPP_LOG_LEVEL": os.environ.get("TORCH_CPP_LOG_LEVEL", "ERROR")}
        self.log_path = log_path
        self._log = log_path.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "trainspec.conformance.run.worker"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log, env=env,
            start_new_session=True, text=True, bufsize=1,
        )
        self._ready = False

    def bind(self, adapter: AdapterSpec) -> None:
        """Send the adapter the worker serves (it builds it once; no reply: a failure to build
        it answers every later request)."""
        self.send(Bind(adapter=adapter))

    def wait_ready(self) -> None:
        """Wait until the worker has started (torch imported, warm)."""
        if not self._ready:
            reply = self.receive(START_TIMEOUT_S)
            if not isinstance(reply, Ready):
                raise HarnessError(f"worker {self.proc.pid}: expected its ready line, got "
                                   f"{reply}; its log: {self.log_tail()}")
            self._ready = True

    def send(self, request: Request) -> None:
        self.wait_ready()
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(encode(request) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError) as e:
            raise HarnessError(f"worker {self.proc.pid} is gone ({e}); "
                               f"its log: {self.log_tail()}") from None

    def receive(self, timeout_s: float) -> Reply:
        stdout: IO[str] | None = self.proc.stdout
        assert stdout is not None
        with selectors.DefaultSelector() as sel:
            sel.register(stdout, selectors.EVENT_READ)
            if not sel.select(timeout_s):
                raise HarnessError(f"worker {self.proc.pid} did not answer within "
                                   f"{timeout_s:.0f} s; its log: {self.log_tail()}")
        line = stdout.readline()
        if not line:
            raise HarnessError(f"worker {self.proc.pid} exited (status {self.proc.poll()}); "
                               f"its log: {self.log_tail()}")
        return decode_reply(line)

    def log_tail(self, limit: int = 2000) -> str:
        with contextlib.suppress(OSError):
            return self.log_path.read_text(errors="replace")[-limit:].strip() or "(empty)"
        return "(unreadable)"

    def close(self) -> None:
        if self.proc.poll() is None and self.proc.stdin is not None:
            with contextlib.suppress(OSError, ValueError):
                self.proc.stdin.write(encode(Shutdown()) + "\n")
                self.proc.stdin.close()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=2)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)
        for stream in (self.proc.stdout, self.proc.stdin):
            with contextlib.suppress(OSError, ValueError):
                if stream is not None:
                    stream.close()
        self._log.close()
