"""Judging a real run's loop and weights: epochs, validation schedule, test pass (LOOP), the
best weights and what the test saw (BEST-2, BEST-4), and debug runs (DBG-2, DBG-4)."""

from __future__ import annotations

from trainspec.conformance.audit.decisions import result
from trainspec.conformance.audit.logs import Log
from trainspec.conformance.audit.runs import AuditedRun, Launch
from trainspec.conformance.audit.sequence import Validations
from trainspec.conformance.spec.oracle import expected_validations
from trainspec.conformance.spec.results import CheckResult

__all__ = ["judge_loop", "judge_weights"]


def _start(launch: Launch) -> int:
    setups = launch.main.of("setup")
    return setups[0].number("epoch") if setups else 0


def judge_loop(run: AuditedRun, seq: Validations) -> list[CheckResult]:
    return [_epochs(run), _schedule(run), _eval_only(run), _test_pass(run), *_debug(run)]


def _epochs(run: AuditedRun) -> CheckResult:
    name = "audit_epochs_train_once_in_order"
    for launch in run.launches:
        log, start, cfg = launch.main, _start(launch), launch.main.config
        epochs = [e.number("epoch") for e in log.of("train_start")]
        if epochs != list(range(start, start + len(epochs))):
            return result(name, "LOOP-1", "failed", f"epochs trained {epochs[:12]}; expected "
                          f"{start}, {start + 1}, ... each once (LOOP-1.1) at {log.where()}")
        if not launch.is_resume and start != 0:
            return result(name, "LOOP-1", "failed", f"a fresh run started at epoch {start} "
                          f"(LOOP-1.2) at {log.where()}")
        stopped = any(e.get("stop") for e in log.of("val"))
        if launch.has_ended and not stopped and cfg.num_epochs is not None \
                and epochs and epochs[-1] != cfg.num_epochs - 1:
            return result(name, "LOOP-1", "failed", f"the run ended after epoch {epochs[-1]} "
                          f"without an early stop; num_epochs={cfg.num_epochs} "
                          f"({log.where()})")
    count = sum(len(launch.main.of("train_end")) for launch in run.launches)
    return result(name, "LOOP-1", "passed", f"{count} epoch(s) trained in order, each once, "
                  f"over {len(run.launches)} launch(es)")


def _schedule(run: AuditedRun) -> CheckResult:
    name, cfg = "audit_validation_runs_when_due", run.last.main.config
    for launch in run.launches:
        log, start, cfg = launch.main, _start(launch), launch.main.config
        if cfg.num_epochs is None or cfg.val_every_n_epochs is None or cfg.val_first is None:
            return result(name, "LOOP-2", "n/a", "the log's config lacks num_epochs, "
                          f"val.every_n_epochs or val.first ({log.where()})")
        trained = [e.number("epoch") for e in log.of("train_end")]
        due = expected_validations(num_epochs=cfg.num_epochs,
                                   every_n_epochs=cfg.val_every_n_epochs,
                                   first=cfg.val_first and not launch.is_resume, start=start)
        vals = log.of("val")
        got = [None if e.get("phase") == "first" else e.number("epoch") for e in vals]
        stop = next((i for i, e in enumerate(vals) if e.get("stop")), None)
        if stop is not None:  # nothing is due after the stop
            due = due[: due.index(got[stop]) + 1] if got[stop] in due else due
        if not launch.has_ended:  # cut short: only what its epochs reached was due
            due = [d for d in due if d is None or (trained and d <= trained[-1])]
        if got != due:
            sentence = "LOOP-2.6" if launch.is_resume and None in got else "LOOP-2.3" if (
                (None in got) != (None in due)) else "LOOP-2.1"
            return result(name, "LOOP-2", "failed", f"{sentence}: validated at "
                          f"{_epochs_text(got)}; due at {_epochs_text(due)} "
                          f"(val.every_n_epochs={cfg.val_every_n_epochs}, val.first="
                          f"{cfg.val_first}, num_epochs={cfg.num_epochs}) at {log.where()}")
    return result(name, "LOOP-2", "passed", f"{len(seq_vals(run))} validation(s), each when "
                  f"due (val.every_n_epochs={cfg.val_every_n_epochs}, val.first={cfg.val_first})")


def seq_vals(run: AuditedRun) -> list[object]:
    return [e for launch in run.launches for e in launch.main.of("val")]


def _epochs_text(epochs: list[int | None]) -> str:
    return "[" + ", ".join("first" if e is None else str(e) for e in epochs[:14]) + "]"


def _eval_only(run: AuditedRun) -> CheckResult:
    name, cfg = "audit_zero_epochs_is_eval_only", run.first.main.config
    if cfg.num_epochs != 0:
        return result(name, "LOOP-3", "n/a", "not observable from this run: num_epochs is "
                      f"{cfg.num_epochs}, not 0")
    log = run.first.main
    steps = [e.number("train_step") for e in log.events if e.kind in ("setup", "end")]
    if log.of("train_start") or len(set(steps)) > 1:
        return result(name, "LOOP-3", "failed", f"num_epochs=0 but the run trained "
                      f"(steps {steps}) at {log.where()}")
    raised = _raised(log)
    missing = [what for what, due, seen in (
        ("the val.first validation", cfg.val_first, log.of("val")),
        ("the test pass", cfg.test_enable, log.of("test"))) if due and not seen]
    if raised is not None or (missing and run.first.has_ended):
        why = f"the run raised {raised}" if raised is not None else "the run returned"
        return result(name, "LOOP-3", "failed", f"num_epochs=0: {why} without "
                      f"{' and '.join(missing) or 'finishing'} (LOOP-3.2: they still run as "
                      f"configured) at {log.where()}")
    return result(name, "LOOP-3", "passed", "num_epochs=0: no training, no optimizer step")


def _raised(log: Log) -> str | None:
    """The error a launch's trainer raised, from its close line (None: it returned, or was
    killed and left no close line)."""
    raised = (log.closed or {}).get("raised")
    return None if raised is None else str(raised)


def _test_pass(run: AuditedRun) -> CheckResult:
    name, cfg, launch = "audit_test_pass_runs_once_after_the_loop", run.last.main.config, \
        run.last
    if cfg.test_enable is None or not (launch.has_ended or _raised(launch.main)):
        return result(name, "LOOP-4", "n/a", "not observable from this run: " + (
            "the trainer has no test.enable" if cfg.test_enable is None
            else "its last launch did not return"))
    log = launch.main
    tests = log.of("test")
    raised = _raised(log)
    if cfg.test_enable and not tests and raised is not None and _loop_done(launch):
        return result(name, "LOOP-4", "failed", f"with test.enable the run raised {raised} "
                      f"after its loop, before the test pass (LOOP-4.1) at {log.where()}")
    last_loop = max((e.line for e in log.events if e.kind in ("val", "train_end")), default=0)
    if cfg.test_enable and (len(tests) != 1 or tests[0].line < last_loop):
        return result(name, "LOOP-4", "failed", f"with test.enable the test pass ran "
                      f"{len(tests)} time(s){' before the loop ended' if tests else ''}; "
                      f"expected once, after the loop (LOOP-4.1) at {log.where()}")
    if not cfg.test_enable and tests:
        return result(name, "LOOP-4", "failed", f"test.enable=false but the test pass ran "
                      f"(LOOP-4.4) at {log.where(tests[0])}")
    return result(name, "LOOP-4", "passed", f"test pass ran {len(tests)} time(s) with "
                  f"test.enable={cfg.test_enable}")


def _loop_done(launch: Launch) -> bool:
    """Every epoch the config asks for was trained, or the run stopped early."""
    log, cfg = launch.main, launch.main.config
    ends = [e.number("epoch") for e in log.of("train_end")]
    return any(e.get("stop") for e in log.of("val")) or cfg.num_epochs == 0 or (
        cfg.num_epochs is not None and bool(ends) and ends[-1] == cfg.num_epochs - 1)


def _debug(run: AuditedRun) -> list[CheckResult]:
    cfg = run.first.main.config
    if not cfg.debug:
        return [result("audit_debug_run", c, "n/a", "not observable from this run: not in "
                       "debug mode") for c in ("DBG-2", "DBG-4")]
    log = run.first.main
    ends = log.of("train_end")
    out = [result("audit_debug_runs_one_epoch", "DBG-2", "failed" if len(ends) > 1 else
                  "passed", f"the debug run trained {len(ends)} epoch(s) (DBG-2.1: at most 1)")]
    idle = [e.number("epoch") for e in ends if int(str(e.get("optimizer_steps") or 0)) < 1]
    out.append(result("audit_debug_epoch_steps", "DBG-4", "failed" if idle else "passed",
                      f"debug epoch(s) {idle} took no optimizer step (DBG-4.1)" if idle else
                      f"each of {len(ends)} debug epoch(s) stepped the optimizer"))
    return out


def judge_weights(run: AuditedRun, seq: Validations) -> list[CheckResult]:
    """BEST-2 (the best weights are those of the oracle's best validation) and BEST-4 (the
    test saw them, or the final weights without an improvement)."""
    launch = run.last
    end = next(iter(launch.main.of("end")), None)
    best = None if seq.outcome is None or seq.outcome.best_index is None \
        else seq.steps[seq.outcome.best_index]
    out = []
    if end is None or best is None or end.get("best_model") is None:
        out.append(result("audit_best_weights_are_the_best", "BEST-2", "n/a",
                          "not observable from this run: " + (
                              "its last launch did not return" if end is None else
                              "no improvement" if best is None else
                              "the trainer keeps no best weights in memory")))
    elif end.get("best_model") != best.event.get("weights"):
        out.append(result("audit_best_weights_are_the_best", "BEST-2", "failed",
                          f"the best weights at the end are not those of {best.name}, the "
                          f"oracle's best (scores {seq.scores_text()}), at {best.where}: a "
                          "copy taken then must not change (BEST-2.1)"))
    else:
        out.append(result("audit_best_weights_are_the_best", "BEST-2", "passed",
                          f"the best weights at the end are those of {best.name}"))
    tests = launch.main.of("test")
    final = next(iter(launch.main.of("final")), None)
    if not tests or (best is None and final is None):
        out.append(result("audit_test_sees_the_best_weights", "BEST-4", "n/a",
                          "not observable from this run: no test pass logged"))
        return out
    want = best.event.get("weights") if best is not None else final.get("weights")  # type: ignore[union-attr]
    what = best.name if best is not None else "the final weights (no improvement)"
    ok = tests[-1].get("weights") == want
    out.append(result("audit_test_sees_the_best_weights", "BEST-4", "passed" if ok else
                      "failed", f"the test pass saw the weights of {what}" if ok else
                      f"the test pass saw other weights than those of {what} (BEST-4.1) at "
                      f"{launch.main.where(tests[-1])}"))
    return out
