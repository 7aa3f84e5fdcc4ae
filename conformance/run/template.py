"""A warm template that new workers are forked from, instead of each importing torch anew.

A worker's start is a new interpreter importing torch and paying a first optimizer step:
about 2 s of CPU. A check session that binds many adapters in turn (the project's tests check
one mutant after another; a harness warms a spare worker whenever adapters vary) paid it for
every worker. The template is one such worker that never binds: each new worker is a child
forked from it, already warm, which then binds its adapter as a started worker does. No worker
sees another's adapter, module globals or registries: each is forked from a template that never
loaded one.

The template serves a Unix socket: a request carries the new worker's stdin, stdout and log
(file descriptors, ``SCM_RIGHTS``); the reply is the child's pid; when a child ends, the
template reaps it and sends its exit status, which :class:`ForkedProcess` (the
``subprocess.Popen`` subset the harness uses) reads.

Run as ``python -m trainspec.conformance.run.worker --template FD``.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

from trainspec.errors import HarnessError

__all__ = ["START_TIMEOUT_S", "ForkedProcess", "Template", "hold", "kill_all", "log_tail",
           "release", "serve_template", "template_for"]

# a worker's own start, or the template's (torch imported, warm): the suite's code only
START_TIMEOUT_S = 60.0


def log_tail(path: Path, limit: int = 2000) -> str:
    """The last ``limit`` characters of a worker's (or the template's) log."""
    with contextlib.suppress(OSError):
        return path.read_text(errors="replace")[-limit:].strip() or "(empty)"
    return "(unreadable)"


class Template:
    """The harness's side: the template process, and the exit statuses of its children."""

    def __init__(self, env: dict[str, str], log_path: Path) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.log_path, self._log = log_path, log_path.open("ab")
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "trainspec.conformance.run.worker", "--template",
                 str(theirs.fileno())],
                pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=self._log, env=env, start_new_session=True)
        finally:
            theirs.close()
        self._sock = ours
        self._buffer = b""
        self._exits: dict[int, int] = {}  # pid -> returncode (Popen's sign convention)
        self._lock = threading.Lock()
        self._ready = False
        self.gone = False

    def spawn(self, log: IO[bytes], env: dict[str, str]) -> ForkedProcess:
        """A new worker forked from the template, its stderr on ``log``, its environment
        ``env`` (sent first on its stdin)."""
        stdin_r, stdin_w = os.pipe()
        stdout_r, stdout_w = os.pipe()
        try:
            with self._lock:
                if not self._ready:
                    self._until(lambda: b"ready\n" in self._buffer or None, START_TIMEOUT_S)
                    self._buffer = self._buffer.replace(b"ready\n", b"", 1)
                    self._ready = True
                try:
                    socket.send_fds(self._sock, [b"spawn\n"],
                                    [stdin_r, stdout_w, log.fileno()])
                except OSError as e:  # it died (killed, or its socket closed)
                    self.gone = True
                    raise HarnessError(f"the worker template {self.proc.pid} is gone ({e})"
                                       ) from None
                pid = self._until(self._take_pid, START_TIMEOUT_S)
        except BaseException:
            for fd in (stdin_w, stdout_r):
                os.close(fd)
            raise
        finally:
            os.close(stdin_r)
            os.close(stdout_w)
        stdin = os.fdopen(stdin_w, "wb")
        sent = json.dumps(env).encode()
        with contextlib.suppress(OSError):  # it died at once: its first request says so
            stdin.write(len(sent).to_bytes(8, "big") + sent)
            stdin.flush()
        return ForkedProcess(self, pid, stdin, os.fdopen(stdout_r, "rb", 0))

    def _take_pid(self) -> int | None:
        head, found, rest = self._buffer.partition(b"\n")
        while found and head.startswith(b"exit "):  # an exit before the pid: keep it aside
            self._note_exit(head)
            self._buffer = rest
            head, found, rest = self._buffer.partition(b"\n")
        if found and head.startswith(b"pid "):
            self._buffer = rest
            return int(head.split()[1])
        return None

    def _note_exit(self, line: bytes) -> None:
        _, pid, code = line.split()
        self._exits[int(pid)] = int(code)

    def _until(self, found: Callable[[], int | bool | None], timeout_s: float) -> int:
        """Read the template's socket until ``found()`` gives something (not None)."""
        deadline = time.monotonic() + timeout_s
        while (result := found()) is None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise HarnessError(f"the worker template {self.proc.pid} did not answer "
                                   f"within {timeout_s:.0f} s; its log: {log_tail(self.log_path)}")
            if not self._read(left):
                raise HarnessError(f"the worker template {self.proc.pid} ended (status "
                                   f"{self.proc.poll()}); its log: {log_tail(self.log_path)}")
        return int(result)

    def _read(self, timeout_s: float) -> bool:
        """What the template sent within ``timeout_s``; False once its socket is closed."""
        ready, _, _ = select.select([self._sock], [], [], max(timeout_s, 0.0))
        if not ready:
            return True
        chunk = self._sock.recv(1 << 16)
        if not chunk:
            self.gone = True
            return False
        self._buffer += chunk
        return True

    def returncode(self, pid: int) -> int | None:
        """``pid``'s exit status once the template has reaped it, without waiting."""
        with self._lock:  # no pid is awaited outside spawn: every whole line is an exit
            while not self.gone and select.select([self._sock], [], [], 0)[0]:
                self._read(0.0)
            *lines, self._buffer = self._buffer.split(b"\n")
            for line in lines:
                if line.startswith(b"exit "):
                    self._note_exit(line)
            if pid not in self._exits and self.gone and (code := _ended(pid)) is not None:
                self._exits[pid] = code  # the template ended first
            return self._exits.get(pid)

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)

    def close(self) -> None:
        """End the template (its children are the harness's to stop)."""
        with self._lock:
            self.gone = True
            with contextlib.suppress(OSError):
                self._sock.close()
        try:
            self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            self.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=5)
        self._log.close()


def _ended(pid: int) -> int | None:
    """How a worker whose template is gone ended, or None while it runs: re-parented to this
    process (a subreaper), it is reaped here; otherwise it is looked up."""
    try:
        got, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
    else:
        return os.waitstatus_to_exitcode(status) if got == pid else None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return -signal.SIGKILL  # gone, reaped elsewhere: its status is not known here
    except PermissionError:
        pass
    return None


class ForkedProcess:
    """A worker forked from a :class:`Template`: what the harness uses of ``Popen``."""

    def __init__(self, template: Template, pid: int, stdin: IO[bytes], stdout: IO[bytes]
                 ) -> None:
        self.template, self.pid, self.stdin, self.stdout = template, pid, stdin, stdout
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self.template.returncode(self.pid)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"worker {self.pid}", timeout or 0.0)
            time.sleep(0.01)
        return code


def serve_template(sock_fd: int, become_worker: Callable[[], None]) -> None:
    """The template's loop: fork a worker for each request (``become_worker`` runs in the
    child, on the fds it was sent), reap the children, report how each ended; return when
    the harness closes the socket."""
    sock = socket.socket(fileno=sock_fd)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # wakes select through the wakeup fd
    signal.set_wakeup_fd(wake_w)
    sock.sendall(b"ready\n")
    while True:
        ready, _, _ = select.select([sock.fileno(), wake_r], [], [])
        if wake_r in ready:
            os.read(wake_r, 1 << 12)
        _reap(sock)
        if sock.fileno() not in ready:
            continue
        message, fds, _, _ = socket.recv_fds(sock, 1 << 12, 3)
        if not message:
            return
        sys.stderr.flush()  # nothing of the template's log is written twice
        pid = os.fork()
        if pid == 0:
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            for fd in (wake_r, wake_w):
                os.close(fd)
            sock.close()
            os.setsid()
            for target, fd in enumerate(fds):
                os.dup2(fd, target)
                os.close(fd)
            env = json.loads(_read_exactly(0, int.from_bytes(_read_exactly(0, 8), "big")))
            os.environ.clear()
            os.environ.update(env)
            become_worker()
            os._exit(0)
        for fd in fds:
            os.close(fd)
        sock.sendall(f"pid {pid}\n".encode())


def _read_exactly(fd: int, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = os.read(fd, n - len(data))
        if not chunk:
            os._exit(1)  # the harness is gone before the worker started
        data += chunk
    return data


def _reap(sock: socket.socket) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        with contextlib.suppress(OSError):
            sock.sendall(f"exit {pid} {os.waitstatus_to_exitcode(status)}\n".encode())


# what a template's warm-up may read from its environment (the interpreter's, the linker's,
# torch's and its libraries', the scratch folder): templates differ by these; the rest of a
# worker's environment is set in the worker once forked (a test runner's per-test variables
# would otherwise start a template per test)
_KEYED = ("PYTHON", "LD_", "OMP_", "MKL_", "KMP_", "GLIBC_", "MALLOC_", "CUDA", "NVIDIA",
          "TORCH", "PYTORCH", "NCCL", "GLOO", "HIP", "ROCM", "TRAINSPEC_", "TMPDIR", "HOME")
# the templates of this process, one per warm-up environment, while some harness holds them
_TEMPLATES: dict[tuple[tuple[str, str], ...], Template] = {}
_HOLDERS = [0]
_REGISTRY_LOCK = threading.Lock()


def hold() -> None:
    """A harness opens: workers started from now on are forked from a template."""
    with _REGISTRY_LOCK:
        _HOLDERS[0] += 1


def release() -> None:
    """A harness closed (its workers stopped): the last one ends the templates."""
    with _REGISTRY_LOCK:
        _HOLDERS[0] = max(_HOLDERS[0] - 1, 0)
        ending = list(_TEMPLATES.values()) if not _HOLDERS[0] else []
        if ending:
            _TEMPLATES.clear()
    for template in ending:
        template.close()


def kill_all() -> None:
    """An interrupt: every template killed at once (their workers are killed as workers)."""
    with _REGISTRY_LOCK:
        ending = list(_TEMPLATES.values())
        _TEMPLATES.clear()
    for template in ending:
        template.kill()
        template.close()


def template_for(env: dict[str, str], log_dir: Path) -> Template | None:
    """The template for workers of environment ``env`` (started now if there is none yet),
    or None when no harness holds templates (a worker then starts as a new interpreter)."""
    key = tuple(sorted((k, v) for k, v in env.items() if k.startswith(_KEYED)))
    with _REGISTRY_LOCK:
        if not _HOLDERS[0]:
            return None
        template = _TEMPLATES.get(key)
        if template is None or template.gone or template.proc.poll() is not None:
            if template is not None:  # it died: a new one
                template.close()
            log_dir.mkdir(parents=True, exist_ok=True)
            template = _TEMPLATES[key] = Template(
                env, log_dir / f"template-{time.monotonic_ns()}.log")
        return template
