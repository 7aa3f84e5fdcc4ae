"""How a run's checks are spread over worker processes: lanes that take families in turn.

A family of checks (one module of ``checks/``) stays together: its checks share runs. With
``-n N`` the run has N lanes, each a thread with its own harness, and the families wait in one
queue, the costliest first; a lane takes the next family as soon as it is free, so the lanes
end together whatever each family costs on the target (a target without several ranks is done
with DIST at once, and its lane takes the next family). With one lane the checks run in one
bucket, the single-rank ones first, while the ranks of the multi-rank world warm up.
"""

from __future__ import annotations

import importlib
import sys
import threading
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from trainspec.conformance.checks import CheckSpec
from trainspec.conformance.run.session import abort_all

__all__ = ["FAMILY_COST", "Families", "TorchImport", "family_of", "in_parallel"]

# rough seconds per family on the reference (2 cores, docs/profile-notes.md): the queue's order,
# nothing more (a lane that finishes early takes the next family)
FAMILY_COST = {"dist": 6.0, "pat": 2.5, "res": 2.5, "best": 2.0, "ckpt": 1.5, "nan": 1.5,
               "ft": 1.0, "loop": 1.0, "dbg": 0.5}


def family_of(spec: CheckSpec) -> str:
    return spec.func.__module__.rsplit(".", 1)[-1]


class Families:
    """The families of ``specs`` still to run, the costliest first; :meth:`take` is safe from
    any lane's thread."""

    def __init__(self, specs: Sequence[CheckSpec]) -> None:
        groups: dict[str, list[CheckSpec]] = {}
        for spec in specs:
            groups.setdefault(family_of(spec), []).append(spec)
        self._queue = deque(sorted(groups.values(),
                                   key=lambda g: -FAMILY_COST.get(family_of(g[0]), 2.0)))
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._queue)

    def take(self) -> list[CheckSpec] | None:
        """The next family's checks; None when none is left."""
        with self._lock:
            return self._queue.popleft() if self._queue else None


def in_parallel(lanes: int, lane: Callable[[], None]) -> None:
    """``lane()`` in ``lanes`` threads at once; an interrupt stops every worker first."""
    pool = ThreadPoolExecutor(max_workers=lanes, thread_name_prefix="trainspec")
    try:
        for future in [pool.submit(lane) for _ in range(lanes)]:
            future.result()
    except KeyboardInterrupt:
        abort_all()  # before the pool waits for its threads: they wait on workers
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


class TorchImport:
    """torch imported in a thread while the first worker starts: the traces carry tensors,
    and decoding the first one then finds torch imported instead of paying for it (this
    process is otherwise idle until its workers are warm). Code of this process that imports
    a torch submodule meanwhile imports ``torch`` itself first (waiting for this import):
    a submodule imported while the package is half-made deadlocks the two imports."""

    def __init__(self) -> None:
        self._thread = threading.Thread(target=importlib.import_module, args=("torch",),
                                        name="trainspec-import-torch", daemon=True)
        self._lock = threading.Lock()

    def start_once(self) -> None:
        with self._lock:
            if self._thread.ident is None and "torch" not in sys.modules:
                self._thread.start()

    def join(self) -> None:
        """Wait for the import (never left importing while the interpreter shuts down)."""
        with self._lock:
            if self._thread.ident is not None:
                self._thread.join()
