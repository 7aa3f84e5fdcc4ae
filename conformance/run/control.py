"""The control channel of a launch: JSON messages between rank 0 and every other rank.

They travel over one store and nothing else: torchrun's agent store when the launch has one
(``TORCHELASTIC_USE_AGENT_STORE``), else a store rank 0 opens on ``MASTER_ADDR:MASTER_PORT``
(SLURM, or torchrun without an agent store). Every key lies under ``trainspec/``, so the
launcher's own keys are never touched. Messages from one rank to another are numbered, each
taken once (``m/SRC/DST/SEQ``, deleted once read); every process beats a counter of its own
(``hb/RANK``) twice a second from a thread with its own connection, so a peer that was killed,
or whose node was lost, is seen as silent within :data:`SILENT_AFTER_S`, whatever its main
thread is doing.
"""

from __future__ import annotations

import json
import threading
import time
from datetime import timedelta
from typing import TYPE_CHECKING

from trainspec.conformance.run.launch import Launch
from trainspec.errors import HarnessError

if TYPE_CHECKING:
    from torch.distributed import Store  # type: ignore[attr-defined]

__all__ = ["JSON", "SILENT_AFTER_S", "Channel", "open_store"]

JSON = dict[str, object]

BEAT_S = 0.5
# a peer whose counter has not moved for this long is lost (killed, or its node gone): long
# enough for a loaded machine's scheduler, short against every run's bound
SILENT_AFTER_S = 10.0
CONNECT_TIMEOUT_S = 120.0  # the ranks start within this of each other (a launcher's spread)
_PREFIX = "trainspec/"


def open_store(launch: Launch, *, timeout_s: float = CONNECT_TIMEOUT_S,
               is_client: bool = False) -> Store:
    """A connection to the launch's store (rank 0 opens it when the launcher has none,
    unless ``is_client``: a second connection to the one it opened)."""
    import torch  # noqa: F401  # the package first (see run/world.py's agent_store)
    from torch.distributed import PrefixStore, TCPStore  # type: ignore[attr-defined]

    is_master = launch.is_judge and not launch.has_agent_store and not is_client
    try:
        store = TCPStore(launch.master_addr, launch.master_port,
                         world_size=None, is_master=is_master, wait_for_workers=False,
                         timeout=timedelta(seconds=timeout_s))
    except (RuntimeError, OSError) as e:
        where = "torchrun's agent store" if launch.has_agent_store else \
            "the store rank 0 opens" if not launch.is_judge else "a store"
        raise HarnessError(
            f"rank {launch.rank} on {launch.node}: could not reach {where} at "
            f"{launch.master_addr}:{launch.master_port} within {timeout_s:g} s ({e}). Set "
            "MASTER_ADDR to rank 0's host and MASTER_PORT to a free port every node can "
            "reach.") from None
    return PrefixStore(_PREFIX, store)


class Channel:
    """Numbered JSON messages between this rank and its peers, and their heartbeats."""

    def __init__(self, launch: Launch, store: Store, beat_store: Store | None = None) -> None:
        self.launch, self.store = launch, store
        self._sent: dict[int, int] = {}
        self._taken: dict[int, int] = {}
        self._beats: dict[int, tuple[int, float]] = {}  # rank -> (counter, when it moved)
        self._stop = threading.Event()
        self._beater: threading.Thread | None = None
        if beat_store is not None:
            self._beater = threading.Thread(target=self._beat, args=(beat_store,),
                                            name="trainspec-heartbeat", daemon=True)
            self._beater.start()

    def send(self, to: int, message: JSON) -> None:
        seq = self._sent.get(to, 0)
        self._sent[to] = seq + 1
        self.store.set(f"m/{self.launch.rank}/{to}/{seq}", json.dumps(message))

    def take(self, source: int) -> JSON | None:
        """The next message from ``source``, or None when none is there yet."""
        key = f"m/{source}/{self.launch.rank}/{self._taken.get(source, 0)}"
        if not self.store.check([key]):
            return None
        raw = self.store.get(key)
        self.store.delete_key(key)
        self._taken[source] = self._taken.get(source, 0) + 1
        data = json.loads(raw.decode())
        if not isinstance(data, dict):
            raise HarnessError(f"control: expected a JSON object from rank {source}, got "
                               f"{raw[:200]!r}")
        return {str(k): v for k, v in data.items()}

    def wait(self, source: int, timeout_s: float) -> JSON:
        """The next message from ``source`` within ``timeout_s`` (while it stays alive)."""
        deadline = time.monotonic() + timeout_s
        while True:
            message = self.take(source)
            if message is not None:
                return message
            if time.monotonic() > deadline:
                raise HarnessError(f"rank {source} sent nothing within {timeout_s:g} s")
            silent = self.silent_s(source)
            if silent > SILENT_AFTER_S:
                raise HarnessError(f"rank {source} went silent {silent:.0f} s ago (its process "
                                   "was killed or its node lost)")
            time.sleep(0.02)

    def silent_s(self, rank: int) -> float:
        """For how long ``rank``'s heartbeat has not moved (0 while it beats)."""
        try:
            count = self.store.add(f"hb/{rank}", 0)
        except (RuntimeError, OSError):  # the store itself is gone: so is the launch
            return float("inf")
        now = time.monotonic()
        seen = self._beats.get(rank)
        if seen is None or seen[0] != count:
            self._beats[rank] = (count, now)
            return 0.0
        return now - seen[1]

    def _beat(self, store: Store) -> None:
        key = f"hb/{self.launch.rank}"
        while not self._stop.wait(BEAT_S):
            try:
                store.add(key, 1)
            except (RuntimeError, OSError):
                return

    def close(self) -> None:
        self._stop.set()
        if self._beater is not None:
            self._beater.join(timeout=2.0)
