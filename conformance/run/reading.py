"""The trainer's own reader: a checkpoint file read the way its trainer reads it.

A file is read, in this order, until one way gives its content:

1. ``torch.load(weights_only=True)``. When that refuses the file, the refusal is kept apart
   (``weights_only_error``: CKPT-1's matter alone) and the file is read again:
2. with the file's own classes allowed (those of the trainer's packages: any package the
   worker imported that is neither the standard library, torch nor numpy, and the packages an
   adapter names in ``modules``) and the plain data of the standard library and numpy
   (``pathlib`` paths, ``datetime``, ``enum`` members, ``argparse.Namespace``, ``collections``,
   numpy arrays and scalars). A function (``os.system``, ``eval``, ``builtins.getattr``) is
   never allowed here, so nothing runs.
3. Only for a file the trainer itself wrote during the run (the write watch saw it: see
   :func:`trusting`), never a file the suite planted (CKPT-3's): by the adapter's ``load``
   (its trainer's own reader), or else by a full unpickle, once a scan of the pickle found no
   global that reaches the system. Either runs in a process forked for the read, which ends
   with it: objects the file rebuilds (a framework's registries) never reach the run or the
   worker; what comes back is the content as plain data (dicts, lists, numbers, strings,
   tensors), which loads weights-only.

``error`` then says why the file does not load at all. The suite's own process never calls
any of this: it runs in a worker or a run's child, next to the trainer.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import select
import signal
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainspec.conformance.run.pickles import dangerous_globals, restricted_pickle_module
from trainspec.conformance.run.profiling import dump_forked
from trainspec.conformance.spec.printable import strip_escapes

__all__ = ["MISSING", "CheckpointRead", "Loader", "actionable_line", "error_line",
           "in_reader_fork", "is_trusted", "lookup", "plain_data", "read_checkpoint",
           "trusting"]

# the trainer's own reader, as an adapter states it: a path to the file's content
#: The trainer's own reader of a file it wrote (``FileLayout(load=...)``): a path to its content.
Loader = Callable[[Path], object]

# a line that says what went wrong ("Unsupported global: ...", "Trying to load unsupported
# GLOBAL posix.mkdir"), as against the advice around it ("This file can still be loaded")
_SAYS_WHAT = re.compile(r"\berror\s*:|unsupported|not allowed|^\w*(?:Error|Exception)\b",
                        re.IGNORECASE)


def actionable_line(message: str, *, max_chars: int = 300) -> str:
    """The line of a (multi-line) error message that says what went wrong, without terminal
    escapes: the first line, unless a later one names the error itself; then the first
    line's first sentence leads it (torch's weights-only refusal reads "Weights only load
    failed: Trying to load unsupported GLOBAL posix.mkdir ...", not its advice)."""
    lines = [line.strip() for line in strip_escapes(message).splitlines() if line.strip()]
    if not lines:
        return ""
    line = lines[0]
    if len(lines) > 1 and not _SAYS_WHAT.search(line):
        later = next((x for x in lines[1:] if _SAYS_WHAT.search(x)), None)
        if later is not None:
            head = line.split(". ")[0].rstrip(".:")
            line = f"{head}: {later}" if len(head) <= 80 else later
    line = line.split(" Please use `torch.serialization.")[0]  # torch's advice, not the error
    return line if len(line) <= max_chars else line[: max_chars - 3] + "..."


def error_line(e: BaseException) -> str:
    """The exception's type and the line of its message that says what went wrong."""
    return f"{type(e).__name__}: {actionable_line(str(e))}"


# -------------------------------------------------------------- which files the trainer wrote

_TRUST: list[Callable[[Path], bool]] = []


@contextlib.contextmanager
def trusting(written: Callable[[Path], bool]) -> Iterator[None]:
    """Within it, ``written(path)`` says whether the trainer wrote ``path`` during the run:
    the run's write watch in its child, the run's records of writes in the worker."""
    _TRUST.append(written)
    try:
        yield
    finally:
        _TRUST.remove(written)


def is_trusted(path: Path) -> bool:
    """Whether the trainer itself wrote ``path`` in the run being read (never a file the suite
    planted): only such a file is read by its trainer's own reader or unpickled in full."""
    return bool(_TRUST) and _TRUST[-1](path)


# -------------------------------------------------------------------------------- reading

MISSING: Any = object()  # what :func:`lookup` gives for a key a content lacks


def lookup(content: object, key: str) -> Any:
    """``content``'s value at ``key``, a dotted path through dicts and attributes
    (``"meta.epoch"``); a key as a whole wins over a path (``"trainer_state.json"``).
    :data:`MISSING` when there is none."""
    if isinstance(content, Mapping) and key in content:
        return content[key]
    head, dot, rest = key.partition(".")
    if isinstance(content, Mapping):
        value = content.get(head, MISSING)
    else:
        value = vars(content).get(head, MISSING) if hasattr(content, "__dict__") else MISSING
    if value is MISSING or not dot:
        return value
    return lookup(value, rest)


@dataclass(frozen=True, slots=True)
class CheckpointRead:
    """A checkpoint's top-level dict (None when it does not load at all), why it does not
    load at all (``error``), and why it does not load weights-only (``weights_only_error``:
    set whenever the weights-only load refused it, even when it was read another way).
    ``how`` names the way that read it; ``types`` the type names of its top-level values when
    it came back as plain data (a read in a forked process)."""

    content: dict[str, Any] | None
    error: str | None = None
    weights_only_error: str | None = None
    how: str = "weights_only"
    types: Mapping[str, str] = field(default_factory=dict)


def read_checkpoint(path: Path, *, modules: Iterable[str] = (), load: Loader | None = None,
                    timeout_s: float = 60.0) -> CheckpointRead:
    """``path`` read as its trainer reads it (see the module's docstring for the order)."""
    import torch  # in the worker or the child, where it is imported already

    try:
        return _as_read(torch.load(path, map_location="cpu", weights_only=True), None,
                        "weights_only")
    except Exception as e:  # the file is what is being judged: record, do not raise
        refused = error_line(e)
    try:
        content = torch.load(path, map_location="cpu", weights_only=False,
                             pickle_module=restricted_pickle_module(modules))
        return _as_read(content, refused, "own_classes")
    except Exception as again:
        why_not = f" (not read with its own classes either: {error_line(again)})"
    if not is_trusted(path):
        return CheckpointRead(None, error=refused + why_not, weights_only_error=refused)
    if load is None:
        danger = dangerous_globals(path)
        if danger:
            return CheckpointRead(None, weights_only_error=refused, error=(
                f"{refused}; not unpickled in full: it names {', '.join(danger[:3])}, code a "
                "pickle can run"))
    how = "load" if load is not None else "unpickled"
    reader = load if load is not None else _full_unpickle
    content, types, error = _in_fork(lambda: reader(path), timeout_s)
    if error is not None:
        return CheckpointRead(None, error=f"{error} (read by {_named(how)})",
                              weights_only_error=refused, how=how)
    read = _as_read(content, refused, how)
    return read if read.content is None else CheckpointRead(
        read.content, weights_only_error=refused, how=how, types=types)


def _named(how: str) -> str:
    return {"load": "the adapter's load=", "unpickled": "a full unpickle"}.get(how, how)


def _full_unpickle(path: Path) -> object:
    import torch

    return torch.load(path, map_location="cpu", weights_only=False)


def _as_read(content: object, weights_only_error: str | None, how: str) -> CheckpointRead:
    if not isinstance(content, dict):
        return CheckpointRead(None, error=f"not a dict but a {type(content).__name__}",
                              weights_only_error=weights_only_error, how=how)
    return CheckpointRead(content, weights_only_error=weights_only_error, how=how)


# ----------------------------------------------------------------- a read in its own process

_IN_FORK = [False]


def in_reader_fork() -> bool:
    """Whether this process was forked to read one file (the write watch stands aside)."""
    return _IN_FORK[0]


def _in_fork(read: Callable[[], object], timeout_s: float
             ) -> tuple[object, dict[str, str], str | None]:
    """``read()`` in a forked process: (its content as plain data, the type names of its
    top-level values, None), or (None, {}, why it failed)."""
    import torch

    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # never returns
        code = 0
        try:
            os.close(r)
            _IN_FORK[0] = True
            try:
                content = read()
                types = {str(k): type(v).__name__ for k, v in content.items()} \
                    if isinstance(content, Mapping) else {}
                buffer = io.BytesIO()
                torch.save({"content": plain_data(content), "types": types}, buffer)
                payload = b"O" + buffer.getvalue()
            except BaseException as e:  # the file's reader failed: that is the answer
                payload = b"E" + error_line(e).encode(errors="replace")
            view = memoryview(payload)
            while view:
                view = view[os.write(w, view):]
        except BaseException:
            code = 1
        finally:
            dump_forked()
            os._exit(code)
    os.close(w)
    data = _read_all(r, pid, timeout_s)
    if data is None:
        return None, {}, f"TimeoutError: the read did not end within {timeout_s:g} s"
    if data[:1] == b"O":
        got = torch.load(io.BytesIO(data[1:]), map_location="cpu", weights_only=True)
        return got["content"], dict(got["types"]), None
    if data[:1] == b"E":
        return None, {}, data[1:].decode(errors="replace")
    return None, {}, "the process that read it died before it answered"


def _read_all(fd: int, pid: int, timeout_s: float) -> bytes | None:
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([fd], [], [], max(left, 0.0))
            if not ready:
                return None
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
    finally:  # whatever ended the wait (an answer, the bound, the worker's own alarm)
        os.close(fd)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)


def plain_data(value: object, depth: int = 0) -> object:
    """``value`` as data that loads weights-only: tensors, numbers, strings, lists and dicts
    with string keys; an object becomes a dict of its attributes (``"__type__"``: its class);
    numpy values become numbers and tensors."""
    import torch

    if value is None or isinstance(value, bool | int | float | str | bytes):
        return value
    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if isinstance(value, torch.nn.Module):
        return plain_data(value.state_dict(), depth + 1)
    if depth > 12:
        return f"<{type(value).__name__}>"
    numeric = _numpy_plain(value)
    if numeric is not MISSING:
        return numeric
    if isinstance(value, Mapping):
        return {str(k): plain_data(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [plain_data(v, depth + 1) for v in value]
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if hasattr(value, "__dict__") and not callable(value):
        return {"__type__": type(value).__qualname__,
                **{str(k): plain_data(v, depth + 1) for k, v in vars(value).items()}}
    return f"<{type(value).__name__}>"


def _numpy_plain(value: object) -> object:
    numpy = sys.modules.get("numpy")
    if numpy is None:
        return MISSING
    if isinstance(value, numpy.generic):
        return value.item()
    if isinstance(value, numpy.ndarray):
        import torch

        return torch.from_numpy(value.copy()) if value.dtype.kind in "biuf" else value.tolist()
    return MISSING
