"""One worker process, seen from the harness: its pipe of typed JSON lines and its log.

The process starts warm (torch imported) and unbound; :meth:`WorkerProcess.bind` sends the
adapter it serves until it is closed. Requests and replies are the types of
:mod:`trainspec.conformance.run.protocol`; :mod:`trainspec.conformance.run.worker` is the
other end.
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TypeVar

from trainspec.conformance.run.protocol import (
    AdapterSpec,
    Bind,
    Describe,
    Ready,
    Reply,
    Request,
    Shutdown,
    Warm,
    decode_reply,
    encode,
)
from trainspec.conformance.run.template import (
    START_TIMEOUT_S,
    ForkedProcess,
    log_tail,
    template_for,
)
from trainspec.conformance.run.template import kill_all as kill_templates
from trainspec.errors import ConfigError, HarnessError

__all__ = ["MIN_FREE_RUN_B", "MIN_FREE_START_B", "START_TIMEOUT_S", "WorkerProcess",
           "abort_all", "close_all", "is_aborted", "profile_workers", "profiled", "require_disk",
           "reset_abort", "worker_environ"]

T = TypeVar("T")


# every live worker of this process, so that an interrupt (SIGINT, SIGTERM) can stop them all at
# once, whichever thread waits on them; once aborted, no new worker starts until reset
_LIVE: set[WorkerProcess] = set()
_LIVE_LOCK = threading.Lock()
_ABORTED = threading.Event()
# a folder every worker started from now on writes its cProfile statistics into (one file per
# worker and per run's child): a benchmark's hook (docs/profile-notes.md), None when off
_PROFILE_DIR: list[Path] = []


# the scratch folder's free space: below the first no run can be trusted to write its records
# (checked when a harness opens); below the second a broken run is blamed on the disk
MIN_FREE_START_B = 64 * 2**20
MIN_FREE_RUN_B = 8 * 2**20


# the launcher's view of this process (torchrun's, SLURM's): a worker's runs get their own
# rank's environment in the run request, and a single-rank run must not look like one rank of
# the user's launch (a framework reading RANK or SLURM_PROCID would join a world that is not
# there)
_LAUNCH_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                "GROUP_WORLD_SIZE", "ROLE_RANK", "ROLE_WORLD_SIZE", "ROLE_NAME", "MASTER_ADDR",
                "MASTER_PORT")
_LAUNCH_PREFIXES = ("TORCHELASTIC_", "SLURM_", "PMI_", "OMPI_COMM_WORLD_")


def worker_environ(environ: Mapping[str, str]) -> dict[str, str]:
    """A worker's environment: this process's, without the launcher's rank variables, and
    with CUDA's availability read through NVML (``torch.cuda.is_available()`` then does not
    initialise CUDA in a process that forks runs)."""
    env = {k: v for k, v in environ.items()
           if k not in _LAUNCH_VARS and not k.startswith(_LAUNCH_PREFIXES)}
    env.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
    return env


def require_disk(root: Path, need_b: int, *, during: str = "") -> None:
    """The scratch folder's disk has ``need_b`` bytes free, or an error naming the resource:
    a full disk is the machine's problem, never the trainer's ``fail``."""
    try:
        free_b = shutil.disk_usage(root).free
    except OSError:
        return
    if free_b >= need_b:
        return
    where = f"the run of {during!r} broke and " if during else ""
    message = (f"{where}the scratch folder's disk is full: {free_b // 1024} KiB free under "
               f"{root.parent} (TMPDIR), trainspec needs {need_b // 2**20} MiB. Free space "
               "there or point TMPDIR at a larger disk.")
    raise HarnessError(message) if during else ConfigError(message)


def profile_workers(folder: Path | None) -> None:
    """Workers started from now on profile themselves and their runs into ``folder``."""
    _PROFILE_DIR[:] = [] if folder is None else [folder]


def profiled(folder: Path, call: Callable[[], T]) -> T:
    """``call()`` profiled into ``folder`` (run/profiling.py), the workers it starts
    profiling themselves and their runs there too."""
    from trainspec.conformance.run.profiling import profiled as block

    folder.mkdir(parents=True, exist_ok=True)
    profile_workers(folder)
    with block(folder, "main"):
        return call()


def abort_all() -> None:
    """Kill every live worker's process group now (no graceful shutdown) and refuse new ones:
    a thread blocked on a worker's reply wakes up to a closed pipe."""
    _ABORTED.set()
    with _LIVE_LOCK:
        live = list(_LIVE)
    for worker in live:
        worker.kill()
    kill_templates()


def is_aborted() -> bool:
    return _ABORTED.is_set()


def reset_abort() -> None:
    """Allow workers again (a new run in the same process, after an interrupted one)."""
    _ABORTED.clear()


class WorkerProcess:
    """One worker process and its pipe of typed JSON lines; bound to one adapter."""

    def __init__(self, log_path: Path) -> None:
        if _ABORTED.is_set():
            raise HarnessError("interrupted: no new worker starts once the run is stopping")
        env = {**worker_environ(os.environ), "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1",
               "TORCH_CPP_LOG_LEVEL": os.environ.get("TORCH_CPP_LOG_LEVEL", "ERROR")}
        self.log_path = log_path
        self._log = log_path.open("ab")
        profile = ["--profile", str(_PROFILE_DIR[0])] if _PROFILE_DIR else []
        self.proc: subprocess.Popen[bytes] | ForkedProcess = self._forked(env, log_path) or \
            subprocess.Popen(
                [sys.executable, "-m", "trainspec.conformance.run.worker", *profile],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log, env=env,
                start_new_session=True,  # replies are read from the pipe itself (os.read),
            )                            # lines kept here: several can come at once
        self._lines = b""  # what the worker wrote that is not read as a reply yet
        self._ended = False  # its protocol pipe is closed
        self._ready = False
        self._busy = False  # a request sent and not answered: close kills without waiting
        self._stopping = False  # asked to shut down (stop_soon)
        self._settling = False  # a describe sent with the bind, not answered yet
        self.warmed: frozenset[str] = frozenset()  # the modules it was asked to import
        with _LIVE_LOCK:
            _LIVE.add(self)

    def _forked(self, env: dict[str, str], log_path: Path) -> ForkedProcess | None:
        """A worker forked from the warm template for ``env`` while a harness holds one
        (:mod:`~trainspec.conformance.run.template`): no interpreter start, no torch import;
        None when there is none, when profiling (a worker profiles itself from its start),
        or when the template broke (the worker then starts as a new interpreter)."""
        template = None if _PROFILE_DIR else template_for(env, log_path.parent)
        if template is None:
            return None
        try:
            return template.spawn(self._log, env)
        except HarnessError:
            if _ABORTED.is_set():
                raise
            return None

    def bind(self, adapter: AdapterSpec, warm: Sequence[str] = (), *,
             settle: bool = False) -> None:
        """Send the adapter the worker serves (it builds it once; no reply: a failure to build
        it answers every later request), and modules to import once it is built. Sent at
        once, not after the worker's ready line: the worker reads it as soon as it is warm,
        while this process goes on. ``settle``: a describe follows, whose answer
        :meth:`settled` looks for (then the worker is bound and warm)."""
        self._write(Bind(adapter=adapter, warm=tuple(warm)))
        self.warmed = frozenset(warm)
        if settle:
            self._write(Describe())
            self._settling = True

    def warm(self, modules: Sequence[str]) -> None:
        """Have the idle worker import ``modules`` now (no reply)."""
        self._write(Warm(modules=tuple(modules)))
        self.warmed |= frozenset(modules)

    def settled(self) -> bool:
        """Whether the worker is bound and warm (after a bind with ``settle``), without
        waiting; False while it is not, or once it is gone."""
        try:
            while self._settling and self.has_reply():
                if not self._ready:
                    self.wait_ready()
                else:
                    self.receive(0.0)  # its description: the bind and the imports are done
                    self._settling = False
        except HarnessError:
            return False
        return not self._settling

    def wait_ready(self) -> None:
        """Wait until the worker has started (torch imported, warm)."""
        if not self._ready:
            reply = self.receive(START_TIMEOUT_S)
            if not isinstance(reply, Ready):
                raise HarnessError(f"worker {self.proc.pid}: expected its ready line, got "
                                   f"{reply}; its log: {self.log_tail()}")
            self._ready = True

    def send(self, request: Request) -> None:
        self.wait_settled()
        self._write(request)

    def wait_settled(self) -> None:
        """Wait until the worker has started and, after a bind with ``settle``, is bound and
        warm (the description asked with the bind comes first)."""
        self.wait_ready()
        if self._settling:
            self.receive(START_TIMEOUT_S)
            self._settling = False

    def _write(self, request: Request) -> None:
        assert self.proc.stdin is not None
        try:
            self._busy = not isinstance(request, Bind | Warm)  # those have no reply
            self.proc.stdin.write((encode(request) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError) as e:
            raise HarnessError(f"worker {self.proc.pid} {self.exit_status()} ({e}); "
                               f"its log: {self.log_tail()}") from None

    def fileno(self) -> int:
        """The pipe its replies come on (to wait on several workers at once)."""
        assert self.proc.stdout is not None
        return self.proc.stdout.fileno()

    def has_reply(self) -> bool:
        """Whether a whole reply (or the end of the pipe) is here, reading without waiting."""
        if b"\n" not in self._lines and not self._ended:
            self._read(0.0)
        return b"\n" in self._lines or self._ended

    def _read(self, timeout_s: float) -> None:
        """What the worker has written, once something is there or ``timeout_s`` passed."""
        ready, _, _ = select.select([self.fileno()], [], [], max(timeout_s, 0.0))
        if ready:
            chunk = os.read(self.fileno(), 1 << 16)
            self._lines += chunk
            self._ended = not chunk

    def receive(self, timeout_s: float) -> Reply:
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self._lines:
            if self._ended:
                raise HarnessError(f"worker {self.proc.pid} {self.exit_status()}; "
                                   f"its log: {self.log_tail()}")
            left = deadline - time.monotonic()
            if left <= 0 and not self.has_reply():
                raise HarnessError(f"worker {self.proc.pid} did not answer within "
                                   f"{timeout_s:.0f} s; its log: {self.log_tail()}")
            self._read(left)
        line, _, self._lines = self._lines.partition(b"\n")
        self._busy = False
        return decode_reply(line.decode(errors="replace"))

    def exit_status(self) -> str:
        """How the worker ended, in words (it closed its pipe: give it a moment to be reaped)."""
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=2)
        code = self.proc.returncode
        if code is None:
            return "closed its protocol pipe but is still running"
        if code < 0:
            return f"was killed by {signal.Signals(-code).name}"
        return f"exited with status {code}"

    def dump_stacks(self) -> str:
        """Every thread's stack of a worker that does not answer (faulthandler on SIGUSR1,
        into its log), and the log's tail."""
        offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(self.proc.pid, signal.SIGUSR1)
        time.sleep(0.5)
        with contextlib.suppress(OSError), self.log_path.open(errors="replace") as f:
            f.seek(offset)
            stack = f.read()[-8000:].strip()
            if stack:
                return stack
        return self.log_tail()

    def log_tail(self, limit: int = 2000) -> str:
        return log_tail(self.log_path, limit)

    def cut(self) -> None:
        """Have the worker end its running child as one past its bound (SIGUSR2): the other
        ranks of its run have ended."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(self.proc.pid, signal.SIGUSR2)

    def kill(self) -> None:
        """Kill the worker's process group now (its runs die with it: parent-death signal)."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)

    def stop_soon(self) -> None:
        """Send the shutdown, once, without waiting (the worker sweeps what its runs left,
        then exits at once); nothing when it cannot read one: busy (a run in flight: an
        interrupt, a timeout), aborted or gone. :meth:`close` then waits for it."""
        with _LIVE_LOCK:
            _LIVE.discard(self)
        if self._stopping or self._busy or _ABORTED.is_set() or self.proc.poll() is not None \
                or self.proc.stdin is None or self.proc.stdin.closed:
            return
        with contextlib.suppress(OSError, ValueError):
            self.proc.stdin.write((encode(Shutdown()) + "\n").encode())
            self.proc.stdin.close()
            self._stopping = True

    def close(self) -> None:
        self.stop_soon()
        if self._stopping:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=2)
        self.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)
        for stream in (self.proc.stdout, self.proc.stdin):
            with contextlib.suppress(OSError, ValueError):
                if stream is not None:
                    stream.close()
        self._log.close()


def close_all(workers: Sequence[WorkerProcess]) -> None:
    """Stop every worker of ``workers``: all are asked to stop first, then each is waited for
    (they exit side by side, not one after another), and whatever is left is killed."""
    for worker in workers:
        worker.stop_soon()
    for worker in workers:
        worker.close()
