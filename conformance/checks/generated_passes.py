"""The generated runs' engine: its passes over the chains of
:mod:`trainspec.conformance.checks.generated`, counted in trainer runs.

The engine works in two passes, both counted in trainer runs (never in seconds, so that a
target gets the same examples, and so the same verdicts, on a quiet machine and a loaded one):

- ``judge``: up to ``max_examples`` chains, or until the run budget is spent; every chain's
  first divergence is charged to its clause (the first chain to show each clause's slip is
  kept), and a chain that matches the model throughout is evidence for every clause it speaks
  of;
- ``shrink=<clause>``: the same draw again, failing on the first chain charged to that
  clause, and shrunk within a budget of runs of its own.

A memo file (JSON lines, one per chain judged) holds every chain's divergences, so that the
shrink pass replays the draw up to its failure without running the trainer again. A failure
comes back with the sentence it breaks and the example as JSON, which ``replay=`` runs again.
"""

from __future__ import annotations

import contextlib
import json
import math
import shutil
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, assume, given, seed, settings
from hypothesis.configuration import set_hypothesis_home_dir
from hypothesis.errors import Flaky, Unsatisfiable

from trainspec.conformance.checks.attribution import finite_control, validated_scores
from trainspec.conformance.checks.base import SCRATCH
from trainspec.conformance.checks.generated import (
    DRAW_SEED,
    examples,
    feasible,
    judge_example,
    quotas,
)
from trainspec.conformance.checks.generated_examples import describe_example, speaks_for
from trainspec.conformance.checks.generated_runs import RUNS, Broke
from trainspec.conformance.checks.model_compare import Divergence
from trainspec.conformance.run.scenario import Scenario

__all__ = ["run_generated"]


class _Spent(BaseException):
    """The judge pass spent its budget of runs: the draw ends (not an Exception, so hypothesis
    neither shrinks it nor counts it as a failure)."""



def run_generated(name: str, adapter: Any, *, max_examples: int) -> dict[str, Any]:
    """The property runner. ``name`` is ``judge;runs=<budget>;memo=<path>``,
    ``shrink=<clause>;kind=<kind>;runs=<budget>;memo=<path>`` or ``replay=<example JSON>``.

    ``judge`` returns the clauses charged (``found``: clause -> its first chain's failure,
    unshrunk), the chains that matched the model (``clean``) and, per clause, how many of them
    gave it something to judge (``judged``), and how many chains drawn spoke of it, clean or
    not (``spoke``). ``shrink`` returns the failure of the smallest
    chain charged to the clause that it found within its budget (``passed`` when the draw did
    not meet the clause's failure again: the caller keeps the unshrunk one).
    """
    if name.startswith("replay="):
        example = json.loads(name.removeprefix("replay="))
        found = _judged(adapter, example, _Memo(None))
        return _result(found[0], example, 1) if found else {"passed": True, "examples": 1}
    asked = dict(part.partition("=")[::2] for part in name.split(";"))
    memo = _Memo(Path(asked["memo"]) if asked.get("memo") else None)
    budget = int(asked.get("runs") or 0)
    try:
        ranks = asked.get("ranks") == "1"
        if "shrink" in asked:
            return _shrink(asked["shrink"], asked.get("kind", ""), adapter, memo, budget,
                           max_examples, ranks)
        return _judge_pass(adapter, memo, budget, max_examples, ranks)
    except Broke as broke:
        return {"broke": broke.status, "error": broke.error, "detail": broke.detail,
                "examples": 0}


def _judge_pass(adapter: Any, memo: _Memo, budget: int, max_examples: int, ranks: bool
                ) -> dict[str, Any]:
    """Up to ``max_examples`` chains (and multi-rank runs, with ``ranks``), or ``budget``
    trainer runs: each chain's first divergence charged to its clause, each clean chain
    evidence for the clauses it speaks of."""
    found: dict[str, dict[str, Any]] = {}
    judged: dict[str, int] = {}
    spoke: dict[str, int] = {}  # clause -> chains drawn that speak of it, clean or not
    count, clean, spent, start = [0], [0], [False], RUNS[0]

    def once(example: dict[str, Any]) -> None:
        assume(feasible(example))
        if RUNS[0] - start >= budget:
            spent[0] = True
            raise _Spent
        count[0] += 1
        ds = _judged(adapter, example, memo)
        speaks = speaks_for(example)
        for clause in speaks:
            spoke[clause] = spoke.get(clause, 0) + 1
        if not ds:  # matched the model throughout: evidence for each clause it speaks of
            clean[0] += 1
            for clause in speaks:
                judged[clause] = judged.get(clause, 0) + 1
        else:  # the first divergence is charged; the rest may follow from it
            found.setdefault(ds[0].clause, _result(ds[0], example, count[0]))

    with contextlib.suppress(_Spent):  # the budget of runs is spent: the draw ends
        for kind, n in quotas(frozenset(adapter.capabilities()), max_examples,
                              multi_rank=ranks).items():
            _draw(once, adapter, n, kind)
    return {"passed": True, "examples": count[0], "judged": judged, "spoke": spoke,
            "clean": clean[0], "found": found, "runs": RUNS[0] - start, "out_of_budget": spent[0]}


def _shrink(clause: str, asked_kind: str, adapter: Any, memo: _Memo, budget: int,
            max_examples: int, ranks: bool) -> dict[str, Any]:
    """The judge pass's draw of ``asked_kind`` chains again, failing on the first chain
    charged to ``clause``, shrunk within ``budget`` trainer runs (the chains the memo holds
    cost none)."""
    failure: dict[str, Any] = {}
    failing: set[str] = set()
    count, since = [0], [0]

    def once(example: dict[str, Any]) -> None:
        assume(feasible(example))
        key = json.dumps(example, sort_keys=True)
        if failing and key not in failing and key not in memo \
                and RUNS[0] - since[0] >= budget:
            return  # shrunk as far as the budget goes: keep the smallest failure found
        count[0] += 1
        ds = _judged(adapter, example, memo)
        if not ds or ds[0].clause != clause:
            return
        if not failing:
            since[0] = RUNS[0]
        failing.add(key)
        failure.clear()
        failure.update(_result(ds[0], example, count[0]))
        raise AssertionError(ds[0].evidence)

    kind = asked_kind
    n = quotas(frozenset(adapter.capabilities()), max_examples, multi_rank=ranks).get(kind, 0)
    failed = bool(n) and _draw(once, adapter, n, kind)
    if failed and not failure:
        raise AssertionError("a generated run failed, and its failure was not kept")
    return failure if failed else {"passed": True, "examples": count[0]}


def _draw(once: Any, adapter: Any, max_examples: int, kind: str) -> bool:
    """Run ``once`` on up to ``max_examples`` derandomized chains of ``kind``; whether one
    failed."""
    test = seed(DRAW_SEED)(settings(
        max_examples=max_examples, derandomize=True, database=None, deadline=None,
        suppress_health_check=list(HealthCheck), print_blob=False)(
        given(examples(kind=kind, caps=frozenset(adapter.capabilities())))(once)))
    home = tempfile.mkdtemp(prefix="trainspec-hypothesis-")
    set_hypothesis_home_dir(home)
    try:
        test()
    except (AssertionError, BaseExceptionGroup, Flaky):  # Flaky: it failed, then not
        return True
    except Unsatisfiable:  # every draw infeasible: none ran
        return False
    finally:
        set_hypothesis_home_dir(None)
        shutil.rmtree(home, ignore_errors=True)
    return False


class _Memo:
    """Every chain judged on this target, by its JSON: its divergences (JSON lines in a file
    the target's passes share; none: this process only)."""

    def __init__(self, path: Path | None) -> None:
        self.path, self.seen = path, dict[str, list[Divergence]]()
        if path is not None and path.exists():
            for line in path.read_text(encoding="utf-8").splitlines():
                entry = json.loads(line)
                self.seen[entry["key"]] = [Divergence(**d) for d in entry["divergences"]]

    def __contains__(self, key: str) -> bool:
        return key in self.seen

    def put(self, key: str, ds: list[Divergence]) -> None:
        self.seen[key] = ds
        if self.path is not None:
            entry = {"key": key, "divergences": [
                {"sentence": d.sentence, "evidence": d.evidence, "cause": d.cause,
                 "crashed": d.crashed} for d in ds]}
            try:
                with self.path.open("a", encoding="utf-8") as f:
                    f.write(json.dumps(entry) + "\n")
            except OSError:  # the folder is gone (the check is over): this process keeps it
                self.path = None


def _judged(adapter: Any, example: dict[str, Any], memo: _Memo) -> list[Divergence]:
    """The example's divergences (from the memo when it was judged before), its scratch folder
    named as the suite names it; a crash that only a non-finite score causes is NAN-3's."""
    key = json.dumps(example, sort_keys=True)
    if key in memo:
        return memo.seen[key]
    ds = _judge_in_scratch(adapter, example)
    if ds and ds[0].crashed and not all(math.isfinite(x) for x in validated_scores(
            Scenario.from_json(example["scenario"]))):
        control = {**example, "scenario": finite_control(
            Scenario.from_json(example["scenario"])).to_json()}
        again = _judge_in_scratch(adapter, control)
        if not (again and again[0].crashed):
            ds = [Divergence(sentence="NAN-3.1", cause=ds[0].cause, crashed=True,
                             evidence=f"{ds[0].evidence.partition('; expected')[0]}, on a "
                             "non-finite score (with finite stand-ins the chain completes); "
                             "expected a non-finite score to count as one non-improving "
                             "validation, not to crash the run")]
    memo.put(key, ds)
    return ds


def _judge_in_scratch(adapter: Any, example: dict[str, Any]) -> list[Divergence]:
    with tempfile.TemporaryDirectory(prefix="trainspec-gen-", ignore_cleanup_errors=True) as tmp:
        root = Path(tmp)
        return [replace(d, evidence=d.evidence.replace(str(root), SCRATCH))
                for d in judge_example(adapter, example, root)]


def _result(d: Divergence, example: dict[str, Any], count: int) -> dict[str, Any]:
    return {"passed": False, "examples": count, "sentence": d.sentence,
            "evidence": f"{d.sentence}: {d.evidence} [{describe_example(example)}]",
            "cause": d.cause, "scenario": example}
