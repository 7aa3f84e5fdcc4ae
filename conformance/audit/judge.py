"""``trainspec audit``: a recorded real run judged clause by clause.

Every clause of the spec gets a verdict: from the audit checks that can see it in the logs
(:mod:`~trainspec.conformance.audit.decisions`, :mod:`~trainspec.conformance.audit.loop`,
:mod:`~trainspec.conformance.audit.files`, and resumes and ranks here), or ``n/a`` with the
reason "not observable from one run" (a crash, a corrupt file, another config: what only the
suite's scenarios can set up). Deviations apply as in ``trainspec check``.
"""

from __future__ import annotations

import platform
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from trainspec.conformance.audit.decisions import judge_decisions, result
from trainspec.conformance.audit.files import judge_files
from trainspec.conformance.audit.loop import judge_loop, judge_weights
from trainspec.conformance.audit.runs import AuditedRun, load_run
from trainspec.conformance.audit.sequence import Validations, validations
from trainspec.conformance.spec import clauses as registry
from trainspec.conformance.spec.results import (
    CheckResult,
    ClauseResult,
    Report,
    Verdict,
    worst_verdict,
)

__all__ = ["NOT_OBSERVABLE", "audit", "audit_run"]

NOT_OBSERVABLE = "n/a (not observable from one run)"


def audit(paths: Sequence[Path], *, deviations: Mapping[str, str] | None = None) -> Report:
    """The report on the run the given folders and logs hold.

    Raises:
        AuditLogError: no log, or logs that do not read or are not one run.
    """
    started = time.monotonic()
    run = load_run(paths)
    return audit_run(run, deviations=deviations or {}, started=started)


def audit_run(run: AuditedRun, *, deviations: Mapping[str, str],
              started: float | None = None) -> Report:
    seq = validations(run)
    results = [*judge_loop(run, seq), *judge_decisions(seq), *judge_weights(run, seq),
               *judge_files(run, seq), *_resume(run, seq), *_ranks(run)]
    import trainspec

    main = run.first.main
    judged = _clauses(results, deviations)
    return Report(trainspec=trainspec.__version__, target=f"audit:{main.trainer}",
                  environment={"python": platform.python_version(), "torch": None,
                               "framework": None, "run_id": main.run_id,
                               "launches": str(len(run.launches)),
                               "logs": str(len(run.paths))},
                  clauses=judged,
                  duration_s=round(time.monotonic() - (started or time.monotonic()), 3),
                  # conformance is judged on what the run shows: the n/a clauses are not
                  # selected, so they neither pass nor block
                  selected=tuple(c.id for c in judged if c.verdict != "n/a"))


def _clauses(results: list[CheckResult], deviations: Mapping[str, str]
             ) -> tuple[ClauseResult, ...]:
    out = []
    for clause in registry.CLAUSES:
        mine = [r for r in results if clause.id in r.clauses]
        reason = deviations.get(clause.id)
        verdict: Verdict
        if not mine:
            verdict, evidence, note = "n/a", NOT_OBSERVABLE, ""
        else:
            verdict = worst_verdict([r.outcome for r in mine])
            worst = next(r for r in mine if worst_verdict([r.outcome]) == verdict)
            evidence, note = worst.evidence, ""
            if reason is not None and verdict == "fail":
                verdict = "deviation"
            elif reason is not None and verdict == "pass":
                note = "declared as a deviation but passes: remove it from the deviations file"
        out.append(ClauseResult(id=clause.id, level=clause.level, title=clause.title,
                                verdict=verdict, evidence=evidence, checks=tuple(mine),
                                deviation_reason=reason, note=note,
                                cause=evidence if verdict in ("fail", "deviation") else ""))
    return tuple(out)


def _resume(run: AuditedRun, seq: Validations) -> list[CheckResult]:
    """RES-1 (each resume continues at k+1 with k's step) and RES-3 (its decisions are the
    oracle's over the whole run's scores)."""
    resumes = [(i, launch) for i, launch in enumerate(run.launches) if i and launch.is_resume]
    if not resumes:
        return [result("audit_resume", c, "n/a", "not observable from one run: no resumed "
                       "launch among the logs") for c in ("RES-1", "RES-3")]
    problems = []
    for i, launch in resumes:
        before, log = run.launches[i - 1].main, launch.main
        resumed = log.resumed_from or {}
        k, step = resumed.get("epoch"), resumed.get("train_step")
        setup = next(iter(log.of("setup")), None)
        if setup is None or not isinstance(k, int):
            problems.append(f"RES-1: {log.where()} records no resume point")
            continue
        if setup.number("epoch") != k + 1:
            problems.append(f"RES-1.1: resumed from a checkpoint of epoch {k} but continued "
                            f"at epoch {setup.number('epoch')} ({log.where(setup)})")
        saved = [e.number("train_step") for e in before.of("train_end") if e.number("epoch") == k]
        if setup.number("train_step") != step or (saved and saved[-1] != step):
            problems.append(f"RES-1.2: resumed at step {setup.number('train_step')}; the "
                            f"checkpoint of epoch {k} says {step}, the earlier launch ended "
                            f"epoch {k} at step {saved[-1] if saved else '?'} "
                            f"({log.where(setup)})")
    res1 = result("audit_resume_continues", "RES-1", "failed" if problems else "passed",
                  "; ".join(problems) if problems else
                  f"{len(resumes)} resume(s), each at the next epoch with the saved step")
    wrong = _resumed_mismatch(seq)
    res3 = result("audit_resume_keeps_the_decisions", "RES-3", "failed" if wrong else "passed",
                  wrong or f"the decisions of {len(seq.steps)} validations over "
                  f"{len(run.launches)} launches equal the oracle's on the whole run's scores")
    return [res1, res3]


def _resumed_mismatch(seq: Validations) -> str:
    if seq.outcome is None:
        return ""
    for step, decision in zip(seq.steps, seq.outcome.decisions, strict=False):
        if step.launch and (step.improved != decision.improved or step.stop != decision.stop):
            return (f"after the resume, {step.name} scored {step.score:.6g}: improved="
                    f"{step.improved}, stop={step.stop}; the oracle over the whole run says "
                    f"improved={decision.improved}, stop={decision.stop} (scores "
                    f"{seq.scores_text()}) at {step.where} (RES-3.3)")
    return ""


def _ranks(run: AuditedRun) -> list[CheckResult]:
    """DIST-1 (the same pooled score), DIST-2 (the same stops) and DIST-3 (the same
    improvements and best weights) on every rank."""
    if all(launch.world_size == 1 for launch in run.launches):
        return [result("audit_ranks_agree", c, "n/a", "not observable from this run: one "
                       "rank") for c in ("DIST-1", "DIST-2", "DIST-3")]
    found: dict[str, str] = {}
    pooled = 0  # validations whose score every rank logged as a pooled mean
    for launch in run.launches:
        main = launch.main
        for other in launch.logs[1:]:
            pairs = list(zip(main.of("val"), other.of("val"), strict=False))
            both = [a.get("pooled") is True and b.get("pooled") is True for a, b in pairs]
            pooled += sum(both)
            for key, clause in (("score", "DIST-1"), ("stop", "DIST-2"),
                                ("improved", "DIST-3")):
                for (a, b), is_pooled in zip(pairs, both, strict=True):
                    if key == "score" and not is_pooled:
                        continue  # not known to be a pooled mean: a rank-local metric differs
                    if a.get(key) != b.get(key):
                        found.setdefault(clause, (
                            f"rank {other.rank} logged {key}={b.get(key)} at "
                            f"{other.where(b)}, rank 0 {key}={a.get(key)} at {main.where(a)}"))
            trained = [[e.number("epoch") for e in log.of("train_end")] for log in (main, other)]
            if trained[0] != trained[1] or len(main.of("val")) != len(other.of("val")):
                found.setdefault("DIST-2", f"rank 0 trained epochs {trained[0][-8:]}, rank "
                                 f"{other.rank} {trained[1][-8:]} ({other.where()})")
            bests = [next((e.get("best_model") for e in log.of("end")), None)
                     for log in (main, other)]
            if bests[0] != bests[1]:
                found.setdefault("DIST-3", f"rank {other.rank} ends with other best weights "
                                 f"than rank 0 (DIST-3.2) at {other.where()}")
    out = [result("audit_ranks_agree", c, "failed" if c in found else "passed",
                  found.get(c, f"every rank logged the same {what}"))
           for c, what in (("DIST-1", "pooled scores"), ("DIST-2", "stop verdicts and epochs"),
                           ("DIST-3", "improvements and best weights"))]
    if not pooled and "DIST-1" not in found:
        out[0] = result("audit_ranks_agree", "DIST-1", "n/a", "not observable from this run: "
                        "the log does not say its scores are pooled means (a rank-local "
                        "metric is the trainer's choice; DIST-3 judges the decisions on it)")
    return out
