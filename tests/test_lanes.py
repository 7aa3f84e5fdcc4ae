"""What keeps the suite fast without weakening a check: its own process stays light, scenarios
run once, workers are shared and started ahead of need, waits by design end as soon as what
they are there to show is recorded, and a rank left alone is cut short after a grace.

docs/profile-notes.md has the measurements these choices rest on.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from trainspec.conformance.checks import CHECKS, CheckContext
from trainspec.conformance.checks.common import make_scenario
from trainspec.conformance.run.child import ChildContext
from trainspec.conformance.run.harness import AdapterSpec, Harness
from trainspec.conformance.run.probe import interrupt
from trainspec.conformance.run.protocol import PropertyOutcome
from trainspec.conformance.run.records import Done, RunError, Setup, to_json
from trainspec.conformance.run.scenario import Scenario, Task
from trainspec.conformance.run.trace import Trace
from trainspec.conformance.run.world import World
from trainspec.conformance.schedule import FAMILY_COST, Families, family_of

ROOT = Path(__file__).resolve().parent.parent


# ------------------------------------------------------------------ the suite's own process

def test_the_suite_imports_neither_torch_nor_hypothesis_to_parse_and_plan() -> None:
    # the checks of every clause, the runner, the harness and the writers: all without torch,
    # which the process imports only when a trace brings tensors (meanwhile its workers start)
    code = ("import sys\n"
            "from trainspec.conformance import api, cli, runner\n"
            "from trainspec.conformance.run import harness, world\n"
            "from trainspec.conformance.report import json_io, junit, text\n"
            "api.plan(None)\n"
            "print(sorted(m for m in ('torch', 'hypothesis', 'torchmetrics', 'numpy') "
            "if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, check=True)
    assert out.stdout.strip() == "[]", out.stderr


# ------------------------------------------------------------------------ scenarios run once

class CountingRuns:
    """A Runs that counts the runs it is asked for and returns an empty trace."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.made: list[str] = []

    def run(self, scenario: Scenario, *, ckpt_root: Path | None = None,
            timeout_s: float | None = None) -> Trace:
        self.made.append(scenario.name)
        return Trace(scenario_name=scenario.name, ranks=())

    def new_ckpt_root(self, label: str) -> Path:
        return self.root

    def property(self, name: str, *, runner: str, max_examples: int,
                 max_runs: int = 0) -> PropertyOutcome:
        raise AssertionError("no property here")


def test_scenarios_that_differ_by_name_alone_run_once(tmp_path: Path) -> None:
    runs = CountingRuns(tmp_path)
    ctx = CheckContext(runs=runs, capabilities=frozenset())
    ctx.run(make_scenario("first", [0.1, 0.2]))
    ctx.run(make_scenario("second", [0.1, 0.2]))
    ctx.run(make_scenario("third", [0.1, 0.3]))
    assert runs.made == ["first", "third"]
    # each check still sees the run under its own scenario's name (carried_out judges it so)
    assert set(ctx.judged) == {"first", "second", "third"}


# ----------------------------------------------------------------------------------- lanes

def test_families_are_taken_costliest_first_and_each_stays_whole() -> None:
    families = Families(list(CHECKS.values()))
    taken = []
    while (family := families.take()) is not None:
        assert len({family_of(spec) for spec in family}) == 1
        taken.append(family_of(family[0]))
    assert sorted(taken) == sorted({family_of(spec) for spec in CHECKS.values()})
    costs = [FAMILY_COST.get(f, 2.0) for f in taken]
    assert costs == sorted(costs, reverse=True)
    assert taken[0] == "dist"


def test_checks_whose_runs_score_through_torchmetrics_declare_it() -> None:
    # the harness has the ranks import what a check declares ahead of its runs; a check that
    # runs the torchmetrics task without declaring it would pay the import in its run
    source = {name: Path(sys.modules[spec.func.__module__].__file__ or "").read_text()
              for name, spec in CHECKS.items()}
    uses = {name for name, spec in CHECKS.items()
            if 'metric="torchmetrics"' in _body(source[name], spec.func.__name__)}
    assert uses, "the torchmetrics task is used by some check"
    assert all("torchmetrics" in CHECKS[name].imports for name in uses)


def _body(text: str, func: str) -> str:
    if f"def {func}(" not in text:  # a check registered under a made name: its module's text
        return text
    start = text.index(f"def {func}(")
    end = text.find("\n@check(", start)
    return text[start:] if end < 0 else text[start:end]


class FakeWorker:
    """Enough of a WorkerProcess for a World's bookkeeping."""

    def __init__(self, log_path: Path) -> None:
        self.log_path, self.closed = log_path, False
        self.bound_to: AdapterSpec | None = None

    def bind(self, adapter: AdapterSpec, warm: object = ()) -> None:
        self.bound_to = adapter

    def stop_soon(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True


def test_a_multi_rank_world_shares_rank_0_with_the_single_rank_world(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("trainspec.conformance.run.world.WorkerProcess", FakeWorker)
    adapter = AdapterSpec(factory="pkg:Adapter")
    slots: list[Any] = []
    one = World(1, tmp_path, adapter, slots=slots)
    two = World(2, tmp_path, adapter, slots=slots)
    assert len(slots) == 2
    assert two.workers[0] is one.workers[0]
    assert all(w.bound_to == adapter for w in slots)
    old = list(slots)
    two.restart()  # a broken run: both of its ranks are new, and so is the shared one
    assert all(w.closed for w in old)
    assert one.workers[0] is two.workers[0]
    assert one.workers[0] is not old[0]


# ------------------------------------------------------------------------ waits by design

def _events(path: Path, *records: object) -> None:
    path.write_text("".join(json.dumps(to_json(r)) + "\n" for r in records))  # type: ignore[arg-type]


def test_a_stall_ends_once_every_other_rank_has_recorded_its_end(tmp_path: Path) -> None:
    fd = os.open(tmp_path / "rank2.events.jsonl", os.O_WRONLY | os.O_CREAT)
    try:
        ctx = ChildContext(rank=2, world_size=3, ckpt_root=tmp_path, events_fd=fd,
                           scenario=Scenario(name="s", world_size=3), job_dir=tmp_path)
        _events(tmp_path / "rank0.events.jsonl", Setup(epoch=0, train_step=0, train_len=1),
                RunError(type="DistBackendError", message="timed out", traceback="", ours=False,
                         t=1.0))
        assert not ctx.peers_ended()  # rank 1 has recorded nothing yet
        (tmp_path / "rank1.events.jsonl").write_text('{"ev": "done", "t": 2.0}\n{"ev": "se')
        assert ctx.peers_ended()  # its last whole line ends its run; a torn one is ignored
        _events(tmp_path / "rank1.events.jsonl", Setup(epoch=0, train_step=0, train_len=1))
        assert not ctx.peers_ended()
        _events(tmp_path / "rank1.events.jsonl", Done(t=3.0))
        assert ctx.peers_ended()
    finally:
        os.close(fd)


def test_a_stall_lasts_its_length_while_anything_runs_on() -> None:
    began = time.monotonic()
    with pytest.raises(RuntimeError, match="stalled"):
        interrupt("stall", 0.3, until=lambda: False)
    assert time.monotonic() - began >= 0.3
    began = time.monotonic()
    with pytest.raises(RuntimeError, match="stalled"):
        interrupt("stall", 30.0, until=lambda: True)
    assert time.monotonic() - began < 5.0


def test_only_writes_a_later_epoch_start_reads_are_slowed(tmp_path: Path) -> None:
    fd = os.open(tmp_path / "events", os.O_WRONLY | os.O_CREAT)
    try:
        s = Scenario(name="s", world_size=2, task=Task(slow_writes_s=0.3)) \
            .with_config(num_epochs=3)
        rank0 = ChildContext(rank=0, world_size=2, ckpt_root=tmp_path, events_fd=fd, scenario=s)
        rank1 = ChildContext(rank=1, world_size=2, ckpt_root=tmp_path, events_fd=fd, scenario=s)
        seen = []
        for epoch in range(3):
            rank0.writes.enter_epoch(epoch)
            rank1.writes.enter_epoch(epoch)
            seen.append((rank0.slows_writes(), rank1.slows_writes()))
        assert seen == [(True, False), (True, False), (False, False)]
    finally:
        os.close(fd)


@pytest.mark.slow
def test_a_rank_left_alone_is_cut_short_after_its_grace(tmp_path: Path) -> None:
    # rank 1 ends at once, rank 0 never does: with collectives bounded at 0.5 s, rank 0 gets
    # 0.5 + 10 s, not the run's 60 s bound, and ends as a run past its bound
    spec = AdapterSpec(factory="tests.bad_adapters.hangs:RankZeroWaitsAlone")
    s = Scenario(name="alone", world_size=2).with_config(**{"ddp.timeout_s": 0.5})
    with Harness(spec, timeout_s=60.0) as harness:
        for worker in harness.world(2).workers:
            worker.wait_ready()
        began = time.monotonic()
        trace = harness.run(s)
        took = time.monotonic() - began
    rank0, rank1 = trace.ranks
    assert rank1.status == "completed"
    assert rank0.status == "timeout"
    assert "cut short: another rank's run had ended" in rank0.error
    assert "wait_for_a_trainer_that_never_comes" in rank0.detail
    assert 10.5 <= took < 40.0
