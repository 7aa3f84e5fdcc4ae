"""The harness: the worlds of worker processes a check session runs scenarios on.

A :class:`Harness` holds one scratch folder, the bound on every run and the worlds
(:class:`~trainspec.conformance.run.world.World`: one worker process per rank, bound to one
adapter, reused for every run) of the adapters it serves. The workers of one adapter are
shared between its worlds: rank 0 of a multi-rank world is the single-rank world's worker.
No process outlives :meth:`Harness.close`.
"""

from __future__ import annotations

import itertools
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from trainspec.conformance.run import template
from trainspec.conformance.run.protocol import AdapterSpec, Description, PropertyOutcome
from trainspec.conformance.run.scenario import Scenario
from trainspec.conformance.run.session import (
    MIN_FREE_START_B,
    WorkerProcess,
    close_all,
    require_disk,
)
from trainspec.conformance.run.trace import Trace
from trainspec.conformance.run.world import World
from trainspec.errors import ConfigError

if TYPE_CHECKING:
    from trainspec.conformance.run.launched import LaunchWorld, Ranks

__all__ = ["AdapterRuns", "AdapterSpec", "Harness", "PropertyOutcome", "World"]

Backend = Literal["gloo", "nccl"]
# a property that counts its trainer runs is bounded by this much per run it may make
_PER_RUN_BOUND_S = 3.0


class Harness:
    """The worlds a check session uses, a scratch folder, and the bound on every run.

    Its worlds serve ``adapter``; a check session for another adapter shares the scratch
    folder and bound through :meth:`using` (tests check many mutants with one harness).
    Satisfies :class:`~trainspec.conformance.checks.base.Runs` for its own adapter.
    """

    def __init__(self, adapter: AdapterSpec, *, timeout_s: float = 60.0,
                 fresh: bool = False, backend: Backend | None = None,
                 deadline: float | None = None, ranks: Ranks | None = None,
                 ckpt_root: Path | None = None) -> None:
        self.adapter = adapter
        self.timeout_s = timeout_s
        self.fresh = fresh  # new worker processes for every run: isolation over speed
        # gloo or nccl for multi-rank runs; None: the trainer picks (nccl with enough GPUs)
        self.backend = backend
        self.deadline = deadline  # time.monotonic() past which no run may go on; None: none
        # every folder of the suite's runs (job folders, checkpoints, property runs' folders,
        # worker logs) lies under this one root, removed by close() whatever happens
        self.root = Path(tempfile.mkdtemp(prefix="trainspec-"))
        try:
            require_disk(self.root, MIN_FREE_START_B)
        except ConfigError:
            shutil.rmtree(self.root, ignore_errors=True)
            raise
        # the checkpoint folders of the runs: under the scratch root (node-local), or in a
        # folder of this harness's own under ``ckpt_root`` (--ckpt-root: shared storage)
        self._ckpt_base = None if ckpt_root is None else self._shared_base(ckpt_root)
        # the launched processes serving ranks > 0 (inside torchrun/srun); None: this
        # process starts its multi-rank worlds itself
        self.ranks = ranks
        self.worlds: dict[tuple[AdapterSpec, int], World | LaunchWorld] = {}
        # each adapter's workers, shared by its worlds (World.slots); none in fresh mode
        self._slots: dict[AdapterSpec, list[WorkerProcess]] = {}
        self._warm: tuple[str, ...] = ()  # modules the multi-rank runs import (expect)
        self._dirs = itertools.count()
        self._spare: WorkerProcess | None = None  # started ahead of need once adapters vary
        # workers forked from one warm template, not each a new interpreter importing torch
        template.hold()
        self._holds_template = True
        if ranks is not None:  # the other ranks warm up while the single-rank runs go on
            ranks.bind(adapter, self.root, self._ckpt_base)

    def _shared_base(self, ckpt_root: Path) -> Path:
        try:
            ckpt_root.mkdir(parents=True, exist_ok=True)
            return Path(tempfile.mkdtemp(prefix="trainspec-ckpt-", dir=ckpt_root))
        except OSError as e:
            shutil.rmtree(self.root, ignore_errors=True)
            raise ConfigError(f"--ckpt-root {ckpt_root}: cannot make a folder there ({e}); "
                              "name a writable folder every node sees") from None

    def world(self, size: int, adapter: AdapterSpec | None = None) -> World:
        """The world of ``size`` ranks bound to ``adapter`` (the harness's own by default),
        started by this process."""
        found = self._world(size, adapter)
        if not isinstance(found, World):
            raise ConfigError(f"a world of {size} ranks is served by the launch")
        return found

    def _world(self, size: int, adapter: AdapterSpec | None = None) -> World | LaunchWorld:
        """The world of ``size`` ranks bound to ``adapter``: a launch's when ranks > 0 are
        launched processes."""
        spec = adapter or self.adapter
        if size > 1 and self.ranks is not None and (spec, size) not in self.worlds:
            from trainspec.conformance.run.launched import LaunchWorld

            self.worlds[spec, size] = LaunchWorld(
                size, self.root, spec, ranks=self.ranks,
                slots=self._slots.setdefault(spec, []), spawn_log=self._log_path("r0"),
                is_shared=self._ckpt_base is not None)
        if (spec, size) not in self.worlds:
            if spec != self.adapter:
                self._retire_others(spec)
            slots = None if self.fresh else self._slots.setdefault(spec, [])
            self.worlds[spec, size] = World(size, self.root, spec, fresh=self.fresh,
                                            spawn=self._take_spare, slots=slots)
            if spec != self.adapter:  # another adapter may well follow: warm one up now
                self._spare = self._spare or WorkerProcess(self._log_path("spare"))
        return self.worlds[spec, size]

    def _retire_others(self, keep: AdapterSpec) -> None:
        """Close the worlds of adapters other than the harness's own and ``keep``: a harness
        checking many adapters in turn holds the processes of two at most."""
        for key in [k for k in self.worlds if k[0] not in (self.adapter, keep)]:
            self.worlds.pop(key).close()
        for spec in [s for s in self._slots if s not in (self.adapter, keep)]:
            close_all(self._slots.pop(spec))

    def expect(self, size: int, preload: Sequence[str] = ()) -> None:
        """Start now the workers a world of ``size`` ranks of the harness's own adapter needs
        beyond those it has: they import and warm up while other runs go on, ``preload`` too
        (modules its runs import, e.g. torchmetrics; a worker already running imports them
        in the first run that needs them)."""
        if self.fresh or size < 2 or (self.adapter, size) in self.worlds or self.ranks:
            return
        slots = self._slots.setdefault(self.adapter, [])
        self._warm = tuple(preload)
        while len(slots) < size:
            worker = WorkerProcess(self._log_path(f"r{len(slots)}"))
            worker.bind(self.adapter, warm=preload, settle=True)
            slots.append(worker)

    def hand_over(self) -> None:
        """Once a rank started ahead of need is bound and warm, it serves the single-rank
        runs, and the worker that served them imports what the multi-rank runs need
        (:meth:`expect`'s preload) meanwhile, not in the first run that needs it. Cheap to
        call between runs: it waits for nothing."""
        slots = self._slots.get(self.adapter, [])
        if len(slots) < 2 or set(self._warm) <= slots[0].warmed or not slots[1].settled():
            return
        slots[0], slots[1] = slots[1], slots[0]
        slots[1].warm(self._warm)

    def release_unused(self, size: int) -> None:
        """Stop the workers :meth:`expect` started for a world of ``size`` ranks that never
        came to be (its checks needed a capability the target lacks)."""
        slots = self._slots.get(self.adapter, [])
        if (self.adapter, size) in self.worlds or len(slots) < 2:
            return
        used = {id(w) for world in self.worlds.values() for w in world.workers}
        close_all([w for w in slots if id(w) not in used])
        slots[:] = [w for w in slots if id(w) in used]

    def _take_spare(self, log_path: Path) -> WorkerProcess:
        spare, self._spare = self._spare, None
        return spare if spare is not None else WorkerProcess(log_path)

    def _log_path(self, label: str) -> Path:
        logs = self.root / "workers"
        logs.mkdir(parents=True, exist_ok=True)
        return logs / f"{label}-{time.monotonic_ns()}.log"

    def using(self, adapter: AdapterSpec) -> Harness | AdapterRuns:
        """The runs of ``adapter`` on this harness (itself for its own adapter)."""
        return self if adapter == self.adapter else AdapterRuns(harness=self, adapter=adapter)

    def new_ckpt_root(self, label: str) -> Path:
        path = (self._ckpt_base or self.root) / "runs" / f"{next(self._dirs)}-{label}"[:100]
        path.mkdir(parents=True)
        return path

    def describe(self, adapter: AdapterSpec | None = None) -> Description:
        """What ``adapter`` (the harness's own by default) says of itself, validated."""
        return self.world(1, adapter).describe(self.timeout_s)

    def bound_s(self, timeout_s: float) -> float:
        """A run's bound: ``timeout_s``, cut to what is left before the deadline (at least a
        second, so a run cut by the deadline still reports where it was)."""
        if self.deadline is None:
            return timeout_s
        return min(timeout_s, max(self.deadline - time.monotonic(), 1.0))

    def run(self, scenario: Scenario, *, adapter: AdapterSpec | None = None,
            ckpt_root: Path | None = None, timeout_s: float | None = None) -> Trace:
        root = ckpt_root if ckpt_root is not None else self.new_ckpt_root(scenario.name)
        preload = ("torchmetrics",) if scenario.task.metric == "torchmetrics" else ()
        if self.backend and scenario.world_size > 1:
            scenario = scenario.with_config(**{"ddp.backend": self.backend})
        return self._world(scenario.world_size, adapter).run(
            scenario, ckpt_root=root, timeout_s=self.bound_s(timeout_s or self.timeout_s),
            preload=preload)

    def property(self, name: str, *, runner: str, max_examples: int,
                 adapter: AdapterSpec | None = None, max_runs: int = 0) -> PropertyOutcome:
        """A property run (``runner``: MODULE:FUNCTION judging it next to the trainer);
        ``max_runs``: the trainer runs it may make, where it counts them."""
        # a property is many runs: its bound scales with the examples it may take, and with
        # the runs it counts (a guard against hangs only: each run has its own bound)
        return self.world(1, adapter).run_property(
            name, runner=runner, max_examples=max_examples,
            timeout_s=self.bound_s(self.timeout_s + 0.5 * max_examples
                                   + _PER_RUN_BOUND_S * max_runs),
            run_timeout_s=self.bound_s(self.timeout_s))

    def close(self) -> None:
        """Stop every worker and remove the scratch root (in a ``finally``: an interrupt while
        the workers shut down still removes it)."""
        try:
            in_worlds = [w for world in self.worlds.values() for w in world.slots]
            spare = [self._spare] if self._spare is not None else []
            rest = [w for ws in self._slots.values() for w in ws if w not in in_worlds] + spare
            for worker in in_worlds + rest:  # all asked first: they exit side by side
                worker.stop_soon()
            close_all(rest)
            self._spare = None
            for world in list(self.worlds.values()):
                world.close()
            self.worlds.clear()
            self._slots.clear()
        finally:
            if self._holds_template:
                self._holds_template = False
                template.release()
            shutil.rmtree(self.root, ignore_errors=True)
            if self._ckpt_base is not None:
                shutil.rmtree(self._ckpt_base, ignore_errors=True)

    def __enter__(self) -> Harness:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True, slots=True, kw_only=True)
class AdapterRuns:
    """The runs of one adapter on a harness that serves another (its scratch folder and
    bound); satisfies :class:`~trainspec.conformance.checks.base.Runs`."""

    harness: Harness
    adapter: AdapterSpec

    @property
    def root(self) -> Path:
        return self.harness.root

    def run(self, scenario: Scenario, *, ckpt_root: Path | None = None,
            timeout_s: float | None = None) -> Trace:
        return self.harness.run(scenario, adapter=self.adapter, ckpt_root=ckpt_root,
                                timeout_s=timeout_s)

    def new_ckpt_root(self, label: str) -> Path:
        return self.harness.new_ckpt_root(label)

    def property(self, name: str, *, runner: str, max_examples: int,
                 max_runs: int = 0) -> PropertyOutcome:
        return self.harness.property(name, runner=runner, max_examples=max_examples,
                                     adapter=self.adapter, max_runs=max_runs)
