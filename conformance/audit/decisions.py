"""Judging the decisions of a real run: improvements, NaNs, patience and stops (BEST-1, NAN,
PAT), against the oracle on the run's own scores.

A clause whose situation the run never met (no NaN score, no validation below
``val.start_patience``) is ``n/a`` with that reason: a real run shows what it shows.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from trainspec.conformance.audit.sequence import Step, Validations, fmt_score
from trainspec.conformance.spec.results import CheckOutcome, CheckResult

__all__ = ["judge_decisions", "result"]


def result(name: str, clause: str, outcome: CheckOutcome, evidence: str) -> CheckResult:
    """One audit check's verdict on one clause."""
    return CheckResult(name=name, clauses=(clause,), outcome=outcome, evidence=evidence,
                       duration_s=0.0, cause=evidence if outcome == "failed" else "")


def judge_decisions(seq: Validations) -> list[CheckResult]:
    if seq.outcome is None or not seq.steps:
        why = ("no validation with a score was logged" if not seq.steps else
               "the log's config lacks val.minimize, val.patience or num_epochs")
        return [result("audit_decisions", c, "n/a", why) for c in
                ("BEST-1", "NAN-1", "NAN-2", "NAN-3", "PAT-1", "PAT-2", "PAT-3", "PAT-4",
                 "PAT-5")]
    return [*_improvements(seq), *_stops(seq)]


def _mismatch(seq: Validations, i: int, what: str, got: bool, expected: bool) -> str:
    step = seq.steps[i]
    return (f"{step.name} scored {fmt_score(step.score)} and was {'' if got else 'not '}taken "
            f"as {what}; the oracle says {'yes' if expected else 'no'} (scores so far "
            f"{seq.scores_text(i)}, {seq.config_text()}) at {step.where}")


def _misjudged(seq: Validations) -> list[int]:
    """The validations whose improvement flag differs from the oracle's, in order."""
    assert seq.outcome is not None
    return [i for i, (s, d) in enumerate(zip(seq.steps, seq.outcome.decisions, strict=False))
            if s.improved is not None and s.improved != d.improved]


def _improvements(seq: Validations) -> list[CheckResult]:
    assert seq.outcome is not None
    wrong: dict[str, str] = {}
    for i in _misjudged(seq):
        step, decision = seq.steps[i], seq.outcome.decisions[i]
        assert step.improved is not None
        clause = "NAN-1" if not math.isfinite(step.score) else (
            "NAN-2" if all(not math.isfinite(s.score) for s in seq.steps[:i]) and i
            else "BEST-1")
        wrong.setdefault(clause, _mismatch(seq, i, "an improvement", step.improved,
                                           decision.improved))
    n = len(seq.outcome.decisions)
    finite = [s for s in seq.steps[:n] if math.isfinite(s.score)]
    leading = next((i for i, s in enumerate(seq.steps) if math.isfinite(s.score)), None)
    met = {"BEST-1": (bool(finite), "no finite score"),
           "NAN-1": (len(finite) < n, "no non-finite score in this run"),
           "NAN-2": (leading is not None and leading > 0,
                     "no non-finite score before the first finite one")}
    out = []
    for clause, (is_met, why) in met.items():
        if clause in wrong:
            out.append(result("audit_improvements_match_the_oracle", clause, "failed",
                              wrong[clause]))
        elif is_met:
            out.append(result("audit_improvements_match_the_oracle", clause, "passed",
                              f"{n} improvement verdicts equal the oracle's on the run's "
                              f"scores {seq.scores_text()}"))
        else:
            out.append(result("audit_improvements_match_the_oracle", clause, "n/a",
                              f"not observable from this run: {why}"))
    return out


def _stop_divergence(seq: Validations) -> tuple[str, Step | None]:
    """The first stop decision that differs from the oracle's: its evidence ("" when none
    does) and, when a non-finite score caused it, that score's validation (NAN-3's fault
    alone, charged there: PAT-1 and PAT-2 judge the decisions at finite scores; PAT-3's own
    situation, a non-improvement below start_patience, stays charged)."""
    assert seq.outcome is not None
    stopped = next((i for i, s in enumerate(seq.steps) if s.stop), None)
    expected = None if seq.outcome.stop_epoch is None else len(seq.outcome.decisions) - 1
    is_complete = bool(seq.steps[-1].log.of("end"))
    if stopped is None and expected is not None and (is_complete
                                                     or expected < len(seq.steps) - 1):
        at, evidence = expected, (_mismatch(seq, expected, "a stop", False, True)
                                  + "; the run went on (PAT-1.3: never later)")
    elif stopped is not None and (expected is None or stopped < expected):
        at, evidence = stopped, (_mismatch(seq, stopped, "a stop", True, False)
                                 + "; the run stopped there (PAT-1.2: never earlier)")
    elif stopped is not None and expected is not None and stopped > expected:
        at, evidence = expected, (_mismatch(seq, expected, "a stop", False, True)
                                  + f"; the run stopped only at {seq.steps[stopped].name}")
    else:
        return "", None
    # the cause: the divergent validation's own non-finite score, or an earlier non-finite
    # score the trainer took as an improvement against the oracle (its patience reset there);
    # not the val.first validation's, which PAT-1.4 governs whatever its score
    misjudged = set(_misjudged(seq))
    cause = next((s for k, s in enumerate(seq.steps[: at + 1]) if not math.isfinite(s.score)
                  and (k == at or k in misjudged)), None)
    return evidence, None if cause is None or cause.epoch is None else cause


def _stops(seq: Validations) -> list[CheckResult]:
    assert seq.outcome is not None
    cfg = seq.config
    evidence, nan_step = _stop_divergence(seq)
    ok = not evidence
    same = f"stop decisions equal the oracle's on the scores {seq.scores_text()}"
    out = []

    def judge(clause: str, is_met: Callable[[Step, int], bool], why: str) -> None:
        met = any(is_met(s, k) for k, s in enumerate(seq.steps))
        if nan_step is not None and met and clause in ("PAT-1", "PAT-2"):
            out.append(result("audit_stops_match_the_oracle", clause, "passed",
                              "stop decisions at finite scores equal the oracle's; the one "
                              "that differs follows the non-finite score of "
                              f"{nan_step.name}: NAN-3's fault, charged there"))
        elif not ok and met:
            out.append(result("audit_stops_match_the_oracle", clause, "failed", evidence))
        elif met:
            out.append(result("audit_stops_match_the_oracle", clause, "passed", same))
        else:
            out.append(result("audit_stops_match_the_oracle", clause, "n/a",
                              f"not observable from this run: {why}"))

    counted = _counted(seq)
    if cfg.has_patience:
        judge("PAT-1", lambda s, k: True, "")
        judge("PAT-2", lambda s, k: k > 0 and bool(s.improved) and counted[k - 1],
              "no improvement after a counted non-improvement")
        judge("PAT-3", lambda s, k: not s.improved and (s.epoch or 0) < (cfg.start_patience
                                                                          or 0),
              "no non-improvement below val.start_patience")
        judge("NAN-3", lambda s, k: not math.isfinite(s.score), "no non-finite score")
        out.append(result("audit_stops_match_the_oracle", "PAT-4", "n/a",
                          "not observable from this run: val.patience is set"))
    else:
        judge("PAT-4", lambda s, k: True, "")
        for clause in ("PAT-1", "PAT-2", "PAT-3", "NAN-3"):
            out.append(result("audit_stops_match_the_oracle", clause, "n/a",
                              "not observable from this run: val.patience is unset"))
    # a stop clause charged with its own slip (PAT-3's start_patience) keeps PAT-5 failing
    charged = any(r.outcome == "failed" for r in out if r.clauses[0].startswith("PAT-"))
    out.append(_decisions(seq, evidence, None if charged else nan_step))
    return out


def _decisions(seq: Validations, evidence: str, nan_step: Step | None) -> CheckResult:
    """PAT-5 on every decision. As check's property does, it leads with a slip of its own:
    when the first flag that differs is a non-finite score's (NAN-1's or NAN-2's) and any stop
    that differs follows a non-finite score (NAN-3's), the decisions after it are that
    fault's consequences, charged there."""
    first = next(iter(_misjudged(seq)), None)
    if first is None and not evidence:
        return result("audit_decisions_match_the_oracle", "PAT-5", "passed",
                      f"improvement and stop decisions of {len(seq.steps)} validations equal "
                      f"the oracle's on {seq.scores_text()}")
    flag_nan = first is not None and not math.isfinite(seq.steps[first].score)
    if (first is None or flag_nan) and (not evidence or nan_step is not None):
        at = seq.steps[first] if first is not None else nan_step
        assert at is not None
        return result("audit_decisions_match_the_oracle", "PAT-5", "passed",
                      "decisions at finite scores equal the oracle's until the non-finite "
                      f"score of {at.name}; those that differ follow it: NAN-1/NAN-2/NAN-3's "
                      "fault, charged there")
    return result("audit_decisions_match_the_oracle", "PAT-5", "failed",
                  evidence or "an improvement verdict differs from the oracle's "
                  "(see BEST-1, NAN-1)")


def _counted(seq: Validations) -> list[bool]:
    """Whether each validation was a counted non-improvement (by the oracle)."""
    assert seq.outcome is not None
    start = seq.config.start_patience or 0
    return [not d.improved and (d.epoch or 0) >= start for d in seq.outcome.decisions] + \
        [False] * (len(seq.steps) - len(seq.outcome.decisions))
