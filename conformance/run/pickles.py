"""What a pickle may rebuild when a trainer's file is read, and what it must never call.

:func:`allowed_global` is the restricted reading's allow-list: plain data of the standard
library and numpy, and the classes (or constants) of the trainer's own packages, never a
function. :func:`dangerous_globals` scans a file's pickles opcode by opcode (nothing is
unpickled) for the globals a payload calls (``os.system``, ``builtins.eval``): a file that names
one is never unpickled in full, even one the trainer wrote.
"""

from __future__ import annotations

import _compat_pickle
import functools
import importlib
import io
import pickle
import pickletools
import sys
import types
import zipfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

__all__ = ["allowed_global", "dangerous_globals", "restricted_pickle_module"]


# ------------------------------------------------------------------ what may be rebuilt

# modules whose objects act on the process or the system: never allowed, whatever the object
_SYSTEM_MODULES = frozenset({
    "os", "posix", "nt", "subprocess", "sys", "shutil", "socket", "importlib", "pickle",
    "_pickle", "marshal", "ctypes", "multiprocessing", "runpy", "code", "codeop", "pty",
    "webbrowser", "antigravity", "this", "io", "_io", "pathlib", "tempfile", "signal",
    "threading", "_thread", "asyncio", "functools", "operator", "codecs", "zipimport", "pydoc",
    "inspect", "gc", "atexit", "ssl", "http", "urllib", "smtplib", "ftplib", "sqlite3",
    "shelve", "dbm", "mmap", "select", "selectors", "concurrent", "logging", "zipfile",
    "tarfile", "glob", "fileinput", "site", "sysconfig", "platform", "ensurepip", "venv",
    "pip", "setuptools", "distutils", "types", "builtins", "torch", "numpy", "_posixsubprocess",
    "posixpath", "ntpath", "nturl2path", "resource", "fcntl", "termios", "pdb", "bdb", "cmd",
    "timeit", "trace", "cProfile", "profile", "faulthandler", "_ctypes", "xmlrpc",
})
# plain data of the standard library and numpy: rebuilt whatever module it lives in
_PLAIN = frozenset({
    "builtins.dict", "builtins.list", "builtins.tuple", "builtins.set", "builtins.frozenset",
    "builtins.int", "builtins.float", "builtins.complex", "builtins.str", "builtins.bytes",
    "builtins.bytearray", "builtins.bool", "builtins.slice", "builtins.range",
    "builtins.object", "types.SimpleNamespace",
    "pathlib.Path", "pathlib.PosixPath", "pathlib.WindowsPath", "pathlib.PurePath",
    "pathlib.PurePosixPath", "pathlib.PureWindowsPath",
    "datetime.datetime", "datetime.date", "datetime.time", "datetime.timedelta",
    "datetime.timezone", "argparse.Namespace", "collections.OrderedDict",
    "collections.defaultdict", "collections.deque", "collections.Counter", "decimal.Decimal",
    "fractions.Fraction", "uuid.UUID", "typing.Any",
    "numpy.ndarray", "numpy.dtype", "numpy.core.multiarray._reconstruct",
    "numpy._core.multiarray._reconstruct", "numpy.core.multiarray.scalar",
    "numpy._core.multiarray.scalar",
})
_STDLIB = frozenset(sys.stdlib_module_names)


def allowed_global(name: str, modules: Iterable[str] = ()) -> object | None:
    """The object ``module.qualname`` names when the restricted reading may rebuild it: plain
    data, or a class (or a constant) of the trainer's packages or of ``modules``; None for
    anything else, and always for a function or an object of a module that reaches the
    system."""
    parts = name.split(".")
    head, named = parts[0], tuple(modules)
    is_named = any(name.startswith(m + ".") for m in named)
    if name not in _PLAIN:
        if head in _SYSTEM_MODULES:
            # numpy's dtype classes (numpy.dtypes.Float64DType) are data; nothing else is
            if not (name.startswith("numpy.dtypes.") and name.endswith("DType")):
                return None
        elif head in _STDLIB and not is_named:
            return None
        elif head not in sys.modules and not is_named:
            return None  # never import a package on a file's say-so
    obj = _resolve(parts)
    if obj is None:
        return None
    return obj if name in _PLAIN or isinstance(obj, type) or not callable(obj) else None


def restricted_pickle_module(modules: Iterable[str] = ()) -> types.ModuleType:
    """A ``pickle_module`` for ``torch.load(weights_only=False)`` that rebuilds only what
    ``torch.load(weights_only=True)`` does, plus what :func:`allowed_global` allows: the
    file's own classes and plain data, and never a function; a refused global raises
    ``UnpicklingError`` naming it."""
    named = tuple(modules)

    class Unpickler(pickle.Unpickler):
        def find_class(self, module: str, name: str) -> Any:
            # protocol 2 (torch.save's) names Python 2's modules: __builtin__.list
            if (module, name) in _compat_pickle.NAME_MAPPING:
                module, name = _compat_pickle.NAME_MAPPING[module, name]
            module = _compat_pickle.IMPORT_MAPPING.get(module, module)
            full = f"{module}.{name}"
            found = _torch_allowed().get(full)
            if found is None:
                found = allowed_global(full, named)
            if found is None:
                raise pickle.UnpicklingError(f"{full} is not plain data")
            return found

    def load(file: Any, **kwargs: Any) -> Any:
        return Unpickler(file, **kwargs).load()

    module = types.ModuleType("trainspec_restricted_pickle")
    module.Unpickler = Unpickler  # type: ignore[attr-defined]
    module.load = load  # type: ignore[attr-defined]
    return module


@functools.cache
def _torch_allowed() -> dict[str, object]:
    """What ``torch.load(weights_only=True)`` rebuilds by default (tensors, storages, dtypes)."""
    from torch import _weights_only_unpickler as weights_only

    user = weights_only._get_user_allowed_globals()  # type: ignore[no-untyped-call]
    return {**weights_only._get_allowed_globals(), **user}


def _resolve(parts: list[str]) -> object | None:
    for split in range(len(parts) - 1, 0, -1):  # the longest importable module prefix
        try:
            obj: object = importlib.import_module(".".join(parts[:split]))
            for attr in parts[split:]:
                obj = getattr(obj, attr)
        except (ImportError, AttributeError):
            continue
        return obj
    return None


# globals whose call reaches the process or the system: a full unpickle never goes ahead when
# a pickle names one (the usual payloads; the boundary itself is that the trainer wrote it)
_DANGEROUS_BUILTINS = frozenset({"eval", "exec", "compile", "__import__", "open", "input",
                                 "breakpoint", "globals", "locals", "vars", "setattr",
                                 "delattr", "exit", "quit", "help", "memoryview"})


def dangerous_globals(path: Path) -> list[str]:
    """The globals the pickles in ``path`` name that reach the system (``os.system``,
    ``builtins.eval``...), found by reading the opcodes (nothing is unpickled); a file that
    cannot be scanned names ``"<unscannable: why>"``."""
    try:
        found = [g for data in _pickles(path) for g in _globals_of(data)]
    except Exception as e:  # not a pickle we can follow: never unpickled then
        return [f"<unscannable: {type(e).__name__}: {e}>"]
    out = []
    for name in found:
        module, _, attr = name.partition(" ")
        head = module.split(".")[0]
        if (head == "builtins" and attr in _DANGEROUS_BUILTINS) or (
                head in _SYSTEM_MODULES - {"builtins", "torch", "numpy", "collections",
                                           "functools", "operator", "types", "codecs"}
                and f"{module}.{attr}" not in _PLAIN) or (head == "_codecs" and attr != "encode"):
            out.append(f"{module}.{attr}")
    return out


def _pickles(path: Path) -> Iterator[bytes]:
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as archive:
            for info in archive.infolist():
                if info.filename.endswith(".pkl"):
                    yield archive.read(info)
        return
    data = path.read_bytes()  # the legacy format, or a plain pickle: pickles one after another
    stream = io.BytesIO(data)
    while stream.tell() < len(data):
        start = stream.tell()
        for _ in pickletools.genops(stream):
            pass
        yield data[start:stream.tell()]
        if stream.tell() == start:
            break


def _globals_of(data: bytes) -> Iterator[str]:
    """``"module name"`` for every GLOBAL, INST and STACK_GLOBAL of one pickle."""
    memo: dict[int, object] = {}
    recent: list[object] = []
    for op, arg, _ in pickletools.genops(data):
        if op.name in ("GLOBAL", "INST"):
            yield str(arg)
        elif op.name == "STACK_GLOBAL" and len(recent) >= 2:
            yield f"{recent[-2]} {recent[-1]}"
        if op.name in ("SHORT_BINUNICODE", "BINUNICODE", "UNICODE", "BINUNICODE8",
                       "SHORT_BINSTRING", "BINSTRING", "STRING"):
            recent.append(arg)
        elif op.name in ("BINPUT", "LONG_BINPUT", "PUT") and recent:
            memo[int(str(arg))] = recent[-1]
        elif op.name == "MEMOIZE" and recent:
            memo[len(memo)] = recent[-1]
        elif op.name in ("BINGET", "LONG_BINGET", "GET"):
            recent.append(memo.get(int(str(arg)), ""))
        elif op.name != "STACK_GLOBAL":
            recent.append("")
        del recent[:-2]
