"""No check passes a trainer that does nothing, crashes, hangs or quits early.

Each trainer of ``tests/bad_adapters/rel2_vacuous.py`` declares every capability and never
carries a scenario out. Every check is judged against each, and must come out ``failed``
(``timeout`` also for the one that hangs): never ``passed``, never ``n/a``, never ``error``
(the suite did not break; the trainer did nothing). The checks that once passed a trainer doing
nothing must say what the runs lacked.

Every check against every trainer runs on simulated runs: the trace each run of that trainer
leaves (its records and how its process ended, as the harness reports them), built in this
process in milliseconds; property runs of the trainers that return run in this process for
real. A sample then goes through the real harness, so that what a child records of a
``sys.exit`` or an ``os._exit`` is what the simulation assumes.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.bad_adapters import rel2_vacuous
from trainspec.conformance.checks import CHECKS, CheckContext, run_check
from trainspec.conformance.checks.model_based import ENGINE_MEMO
from trainspec.conformance.run.adapter import CAPABILITIES, load_object
from trainspec.conformance.run.harness import Harness
from trainspec.conformance.run.protocol import PropertyOutcome
from trainspec.conformance.run.records import Done, Record, RunEnd, RunExit, Setup
from trainspec.conformance.run.scenario import Scenario
from trainspec.conformance.run.trace import RunStatus, Trace, parse_rank
from trainspec.conformance.runner import open_context, resolve_target
from trainspec.conformance.spec.results import CheckResult

ROOT = Path(__file__).resolve().parent.parent
MODULE = "tests.bad_adapters.rel2_vacuous"
SET_UP = Setup(epoch=0, train_step=0, train_len=6)


@dataclass(frozen=True, slots=True, kw_only=True)
class Behaviour:
    """How each run of a trainer ends: as the harness reports it, and what the run recorded."""

    status: RunStatus
    records: tuple[Record, ...]
    error: str = ""
    says: str = ""  # a fragment the evidence of every check judging the runs holds
    property_ends: str = ""  # how its property runs end ("" : run in this process)


BEHAVIOURS: dict[str, Behaviour] = {
    "DoesNothing": Behaviour(status="completed", records=(Done(),)),
    "SetsUpAndEnds": Behaviour(status="completed", records=(
        SET_UP, RunEnd(train_step=0, final_weights={}, best_model=None), Done())),
    "Segfaults": Behaviour(status="killed", records=(SET_UP,), error="killed by SIGSEGV",
                           says="SIGSEGV", property_ends="killed"),
    "Hangs": Behaviour(status="timeout", records=(SET_UP,), error="still running after 2 s",
                       property_ends="timeout"),
    "ExitsWithStatusZero": Behaviour(status="completed", records=(SET_UP,),
                                     says="before the adapter's run returned",
                                     property_ends="exited"),
    "CallsSysExit": Behaviour(status="completed", records=(SET_UP, RunExit(code=0, message="")),
                              says="sys.exit(0)", property_ends="exited"),
    "SaysByeAndExits": Behaviour(status="exited", error="exited with status 1",
                                 records=(SET_UP, RunExit(code=1, message="bye")), says="bye",
                                 property_ends="exited"),
}
# the checks that passed (or were n/a for) a trainer doing nothing before a pass needed
# evidence of the scenario carried out: they must now say what the runs lacked
ONCE_VACUOUS = ("check_best_file_follows_improvements", "check_pooled_mean_is_sum_over_counts",
                "check_ranks_agree_on_best", "check_ranks_agree_on_best_on_rank_local_scores",
                "check_only_rank_zero_writes", "check_ranks_decide_as_one_rank",
                "check_debug_writes_nothing", "check_loading_never_runs_embedded_code",
                "check_interrupted_write_keeps_the_previous_file",
                "check_debug_disables_prediction_dumps")
LACKED = ("recorded no end (it recorded nothing)", "nothing shows")


@dataclass(slots=True, kw_only=True)
class SimulatedRuns:
    """A :class:`~trainspec.conformance.checks.base.Runs` whose every run ends as
    ``behaviour`` says, on every rank, without a process."""

    trainer: str
    root: Path
    behaviour: Behaviour
    asked: list[str] = field(default_factory=list)

    def run(self, scenario: Scenario, *, ckpt_root: Path | None = None,
            timeout_s: float | None = None) -> Trace:
        self.asked.append(scenario.name)
        b = self.behaviour
        ranks = tuple(parse_rank(rank, list(b.records), b.status, b.error, "")
                      for rank in range(scenario.world_size))
        return Trace(scenario_name=scenario.name, ranks=ranks)

    def new_ckpt_root(self, label: str) -> Path:
        path = self.root / f"{len(list(self.root.iterdir()))}-{label}"
        path.mkdir(parents=True)
        return path

    def property(self, name: str, *, runner: str, max_examples: int,
                 max_runs: int = 0) -> PropertyOutcome:
        ends = self.behaviour.property_ends
        if ends:
            return PropertyOutcome(verdict="broke", status=ends,
                                   error=f"the property run {ends}")
        adapter = getattr(rel2_vacuous, self.trainer)()
        judge = load_object(runner)  # the runner a child would run next to the trainer
        return PropertyOutcome.from_json(judge(name, adapter, max_examples=max_examples))


# the model-based family's engine, per trainer: its checks share one engine's runs on a
# target, as they do within one `trainspec check` (its state holds no path)
_ENGINES: dict[str, object] = {}


def simulate(trainer: str, check_name: str, root: Path) -> tuple[CheckResult, SimulatedRuns]:
    spec = CHECKS[check_name]
    runs = SimulatedRuns(trainer=trainer, root=root, behaviour=BEHAVIOURS[trainer])
    # every check of one `trainspec check` sees its world size (2 by default), so that the
    # engine the checks share draws the same chains, multi-rank ones included, for each
    ctx = CheckContext(runs=runs, capabilities=CAPABILITIES, world_size=2, max_examples=4)
    if trainer in _ENGINES:
        ctx.memo[ENGINE_MEMO] = _ENGINES[trainer]
    result = run_check(spec, ctx)
    if ENGINE_MEMO in ctx.memo:
        _ENGINES[trainer] = ctx.memo[ENGINE_MEMO]
    return result, runs


@pytest.mark.parametrize("check_name", sorted(CHECKS))
@pytest.mark.parametrize("trainer", sorted(BEHAVIOURS))
def test_no_check_passes_a_trainer_that_never_carries_a_scenario_out(
        tmp_path: Path, trainer: str, check_name: str) -> None:
    result, runs = simulate(trainer, check_name, tmp_path)
    shown = f"{trainer} / {check_name}: {result.outcome}: {result.evidence}\n{result.detail}"
    allowed = ("failed", "timeout") if trainer == "Hangs" else ("failed",)
    if result.outcome == "n/a" and check_name.startswith("check_generated_runs_"):
        # a generated clause no chain judged rests on its hand-written checks (which fail this
        # trainer): every chain speaking of it showed a slip, charged to the clause it breaks
        assert "showed another clause's slip first; set aside the chains whose first slip " \
            "is charged to" in result.evidence, shown
        return
    assert result.outcome in allowed, shown
    says = BEHAVIOURS[trainer].says
    if says and runs.asked:  # a property check asks for no run: its evidence is its own
        assert says in result.evidence, shown


@pytest.mark.parametrize("check_name", ONCE_VACUOUS)
def test_a_check_that_once_passed_a_trainer_doing_nothing_says_what_the_runs_lacked(
        tmp_path: Path, check_name: str) -> None:
    result, _ = simulate("DoesNothing", check_name, tmp_path)
    assert result.outcome == "failed", result.evidence
    assert any(words in result.evidence for words in LACKED), result.evidence


# ----------------------------------------------------------------- through the real harness

@pytest.fixture(scope="module")
def on_path() -> Iterator[None]:
    """Workers import the trainers as tests.bad_adapters.*, from the repository root."""
    previous = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), previous) if p)
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = previous


@pytest.fixture(scope="module")
def harness(on_path: None) -> Iterator[Harness]:
    # a short bound: none of these trainers trains, and the one that hangs waits it out
    with Harness(resolve_target(f"{MODULE}:DoesNothing").adapter, timeout_s=2.0) as h:
        yield h


# (trainer, check): the once-vacuous CKPT-3 and BEST-3, and a multi-rank one
SAMPLE = [(t, c) for t in sorted(BEHAVIOURS)
          for c in ("check_loading_never_runs_embedded_code",
                    "check_best_file_follows_improvements")] + [
    ("DoesNothing", "check_ranks_agree_on_best"), ("SetsUpAndEnds", "check_debug_writes_nothing")]


@pytest.mark.slow
@pytest.mark.parametrize(("trainer", "check_name"), SAMPLE)
def test_the_real_harness_agrees_with_the_simulation(harness: Harness, tmp_path: Path,
                                                     trainer: str, check_name: str) -> None:
    spec = CHECKS[check_name]
    ctx, _ = open_context(resolve_target(f"{MODULE}:{trainer}"), harness,
                          world_size=2 if spec.multi_rank else 1, max_examples=4)
    result = run_check(spec, ctx)
    shown = f"{trainer} / {check_name}: {result.outcome}: {result.evidence}"
    assert result.outcome in (("failed", "timeout") if trainer == "Hangs" else ("failed",)), \
        shown
    assert BEHAVIOURS[trainer].says in result.evidence, shown
    assert result.outcome == simulate(trainer, check_name, tmp_path)[0].outcome


def test_a_run_that_broke_quotes_the_rank_where_the_trouble_began() -> None:
    from trainspec.conformance.checks.base import RunBroke
    from trainspec.conformance.run.records import RunError

    store = RunError(type="DistStoreError", message="wait timeout after 3000ms", traceback="",
                     ours=False, t=5.0)
    rank0 = parse_rank(0, [SET_UP, store], "raised", "DistStoreError: wait timeout", "")
    rank1 = parse_rank(1, [SET_UP], "timeout", "still running after 3 s", "sleep()")
    broke = RunBroke(Trace(scenario_name="s", ranks=(rank0, rank1)), Scenario(name="s"))
    assert str(broke) == "scenario 's': the run timeout on rank 1: still running after 3 s"
    first = RunError(type="ValueError", message="rank 1 broke", traceback="", ours=False, t=1.0)
    later = parse_rank(0, [SET_UP, store], "raised", "DistStoreError: wait timeout", "")
    earlier = parse_rank(1, [SET_UP, first], "raised", "ValueError: rank 1 broke", "")
    broke = RunBroke(Trace(scenario_name="s", ranks=(later, earlier)), Scenario(name="s"))
    assert broke.rank.rank == 1  # the rank that raised first
