"""What a run must show before a check may pass on it: that it carried its scenario out.

A check compares what a run did with what the clause asks; a run that did nothing leaves
nothing to compare, and "best.pt rewritten at each of 0 improvements" would be a pass. So every
run a passing check judged must show its scenario carried out (:func:`shortfall`):

- a run asked to finish: on every rank its end recorded and the adapter's run returned,
  every epoch up to the last one trained unless the trainer itself flagged a stop, and a
  validation after every epoch the schedule names (``val.every_n_epochs``, the final epoch,
  ``val.first`` for a run that is not a resume);
- a run asked to be interrupted: the interruption point reached on the rank the scenario
  interrupts; a run that completed without reaching it (a trainer without that point, a
  write it never made, an epoch it stopped before) is judged as a whole run, and the check
  says ``n/a`` for that point (``checks/chains.py``);
- a run that ended otherwise while the check passed (a trainer refusing a checkpoint): the
  trainer raised, or called ``sys.exit`` with a message; a run killed by a signal or ended
  without a word shows nothing attempted.

These are judged after the check's own comparison, and only when it passes, so a check's
evidence for a violation is always its own. Whether the decisions were the right ones stays
each clause's matter: here only that the scenario's steps were taken.
"""

from __future__ import annotations

from trainspec.conformance.run.records import RunExit
from trainspec.conformance.run.scenario import Scenario
from trainspec.conformance.run.trace import RankTrace, Trace

__all__ = ["shortfall"]


def shortfall(s: Scenario, trace: Trace) -> str | None:
    """What the runs of ``s`` lack to show they carried it out; None when nothing lacks.

    A rank that timed out or broke the harness is not judged here (the caller raises
    :class:`~trainspec.conformance.checks.base.RunBroke` for it).
    """
    multi = len(trace.ranks) > 1
    for r in trace.ranks:
        missing = _rank_shortfall(s, r)
        if missing is not None:
            return f"{'on rank ' + str(r.rank) + ' ' if multi else ''}{missing}"
    return None


def _rank_shortfall(s: Scenario, r: RankTrace) -> str | None:
    crash = s.crash
    if crash is not None and r.rank == crash.rank and not r.crashes \
            and r.status == "completed":
        # a point the run never reached (a trainer without it, a write it never made, an
        # epoch it stopped before): judged as a whole run; the check says n/a for the point
        crash = None
    if crash is not None:
        if r.rank != crash.rank:
            return None
        if not r.crashes:
            return (f"never reached the interruption point ({crash.where} of epoch "
                    f"{crash.epoch}); it {_ended(r)}")
        return None
    if r.status != "completed":
        if r.status == "raised" or (r.status == "exited" and _said_why(r)):
            return None  # the trainer refused (a checkpoint that does not fit, is missing...)
        return f"{_ended(r)}: nothing shows it attempted what the scenario asked"
    if r.end is None:
        return (f"recorded no end (it recorded {_kinds(r)}): the run did not carry out the "
                "scenario")
    return _loop_shortfall(s, r)


def _loop_shortfall(s: Scenario, r: RankTrace) -> str | None:
    """Training up to the last epoch (or the trainer's own stop), validations on schedule."""
    num_epochs = int(s.get("num_epochs"))
    last = min(num_epochs - 1, 0) if s.get("debug") else num_epochs - 1
    trained = r.epochs_trained
    stopped = any(v.stop for v in r.validations)
    start = r.setup.epoch if r.setup is not None else 0
    if last >= 0 and start <= last and last not in trained and not stopped:
        return (f"trained epochs {trained} and ended without a stop verdict; the scenario "
                f"asked for every epoch up to {last}: the run did not carry out the scenario")
    every = int(s.get("val.every_n_epochs") or 1)
    validated = {v.epoch for v in r.validations if v.phase == "epoch"}
    for e in r.train_epochs:
        due = e.epoch % every == 0 or e.epoch == last  # as the oracle's schedule (LOOP-2)
        if e.end is not None and due and e.epoch not in validated:
            return (f"trained epoch {e.epoch} and recorded no validation after it (the "
                    f"schedule asks for one: every_n_epochs={every}, last epoch {last}): "
                    "the run did not carry out the scenario")
    resumes = bool(s.get("ckpt.resume")) and s.get("ckpt.load_from") is not None \
        and not s.get("ckpt.model_only")
    if s.get("val.first") and not resumes and not any(v.phase == "first"
                                                      for v in r.validations):
        return ("recorded no val.first validation, which the scenario asked for: the run did "
                "not carry out the scenario")
    return None


def _said_why(r: RankTrace) -> bool:
    return any(isinstance(x, RunExit) and x.message for x in r.records)


def _ended(r: RankTrace) -> str:
    return f"{'completed' if r.status == 'completed' else r.status}" + (
        f" ({r.error})" if r.error else "") + f" after recording {_kinds(r)}"


def _kinds(r: RankTrace) -> str:
    """The records of a run, counted by kind: ``setup, 3 train_start, 2 val``."""
    counts: dict[str, int] = {}
    for kind in r.kinds:
        counts[kind] = counts.get(kind, 0) + 1
    shown = [k if n == 1 else f"{n} {k}" for k, n in counts.items()
             if k not in ("write", "done")]
    return ", ".join(shown) if shown else "nothing"
