"""The pytest plugin (entry point ``trainspec``): costs nothing until its options are used.

``pytest --trainspec-target=reference`` (or ``--trainspec-base-trainer=MODULE:CLASS``) adds one
item per selected check, with a node ID that names the check and its clauses,
``trainspec::check_loop_trains_each_epoch_once_in_order[LOOP-1]``, so ``-k``, ``-x``, ``--lf``
and pytest-xdist's ``-n`` work as on any test. Outcomes map as in the report: a violated clause
fails with the evidence line; ``n/a`` skips with the reason; a harness error or a timeout is an
ERROR (the check could not judge); a declared deviation is a strict xfail, so a deviation that
no longer fails shows as XPASS(strict) and can be removed.

Nothing heavy is imported at module level: the options come from the torch-free table
:data:`trainspec.conformance.api.OPTIONS`, and the plan (with it the checks, and torch) is
built only when they are given. Each pytest process (each xdist worker) starts its own harness
on its first item and closes it when pytest unconfigures.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from trainspec.conformance.api import Option, Plan
    from trainspec.conformance.checks import CheckContext
    from trainspec.conformance.run.harness import Harness
    from trainspec.conformance.spec.results import CheckResult

__all__ = [
    "ClauseViolated",
    "TrainspecCollector",
    "TrainspecItem",
    "pytest_addoption",
    "pytest_collection_modifyitems",
    "pytest_configure",
]


def pytest_addoption(parser: pytest.Parser) -> None:
    from trainspec.conformance.api import OPTIONS  # torch-free

    group = parser.getgroup("trainspec", "trainspec conformance checks")
    for o in OPTIONS:
        if not o.in_plugin:
            continue
        if o.is_switch:
            group.addoption(o.plugin_flag, action="store_true", default=False, help=o.help)
        else:
            group.addoption(o.plugin_flag, default=o.default, metavar=o.metavar,
                            type=o.convert or str, choices=o.choices, help=o.help)


@dataclass(slots=True)
class _Session:
    """The harness of this pytest process, started on the first item that needs it."""

    plan: Plan
    harness: Harness | None = None
    context: CheckContext | None = None
    broken: str | None = None  # why the harness could not start: every item errors with it
    results: dict[str, CheckResult] = field(default_factory=dict)

    def context_or_fail(self) -> CheckContext:
        if self.context is None and self.broken is None:
            try:
                self.context = self._open()
            except Exception as e:
                self.broken = f"{type(e).__name__}: {e}"
        if self.context is None:
            pytest.fail(f"trainspec: the harness for {self.plan.target.label} could not "
                        f"start: {self.broken}", pytrace=False)
        return self.context

    def _open(self) -> CheckContext:
        from trainspec.conformance.run.harness import Harness
        from trainspec.conformance.runner import open_context

        plan = self.plan
        self.harness = Harness(plan.target.adapter, timeout_s=plan.timeout_s, fresh=plan.fresh,
                               backend=plan.backend)
        context, _ = open_context(plan.target, self.harness, world_size=plan.world_size,
                                  max_examples=plan.max_examples)
        return context

    def close(self) -> None:
        if self.harness is not None:
            self.harness.close()
            self.harness = None


_PLAN = pytest.StashKey["Plan"]()
_SESSION = pytest.StashKey[_Session]()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "trainspec_clause(*ids): the spec clauses a trainspec "
                            "check verifies")
    if config.getoption("trainspec_target") is None and \
            config.getoption("trainspec_base_trainer") is None:
        return
    config.stash[_PLAN] = _plan(config)


def _plan(config: pytest.Config) -> Plan:
    """The plan of the ``--trainspec-*`` options; a bad one is a usage error before any item
    runs. (Selecting the checks imports them, and torch, once per pytest process.)"""
    from trainspec.conformance import api
    from trainspec.conformance.spec.links import DOCS_URL_ENV
    from trainspec.errors import UsageError

    def value(o: Option) -> object:
        dest = o.plugin_flag.removeprefix("--").replace("-", "_")
        return config.getoption(dest) if o.in_plugin else o.default

    try:
        return api.plan_from(value, docs_url=os.environ.get(DOCS_URL_ENV))
    except UsageError as e:
        message = str(e)
        for o in api.OPTIONS:  # the plan names the command line's spelling: say ours
            if message.startswith(o.flag + " ") or message.startswith(o.flag + ":"):
                message = o.plugin_flag + message.removeprefix(o.flag)
        raise pytest.UsageError(f"trainspec: {message}") from None


@pytest.hookimpl(tryfirst=True)  # before -k / -m deselect, so they see these items
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config,
                                  items: list[pytest.Item]) -> None:
    if _PLAN not in config.stash:
        return
    # An explicit node ID: the items read ``trainspec::<check>[<clauses>]`` wherever pytest
    # runs from, on every xdist worker alike.
    collector = TrainspecCollector.from_parent(session, name="trainspec", nodeid="trainspec")
    items.extend(session.genitems(collector))


class TrainspecCollector(pytest.Collector):
    """The checks of the selected clauses, in registry order."""

    def collect(self) -> Iterable[pytest.Item]:
        from trainspec.conformance.checks import selected_checks

        plan = self.config.stash[_PLAN]
        # every check of the selected clauses, multi-rank ones too: under one rank they skip
        # with the reason (n/a in the report) rather than vanish from the session
        for spec in selected_checks(plan.clauses, world_size=None):
            yield TrainspecItem.from_parent(self, name=f"{spec.name}[{','.join(spec.clauses)}]",
                                            check_name=spec.name, clause_ids=spec.clauses,
                                            multi_rank=spec.multi_rank)


class ClauseViolated(Exception):
    """The target violated a clause (or timed out where a deviation is declared)."""

    def __init__(self, result: CheckResult) -> None:
        super().__init__(result.evidence)
        self.result = result


class TrainspecItem(pytest.Item):
    """One check on the target under test."""

    def __init__(self, *, check_name: str, clause_ids: tuple[str, ...], multi_rank: bool,
                 **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.check_name, self.clause_ids, self.multi_rank = check_name, clause_ids, multi_rank
        self.result: CheckResult | None = None
        self.add_marker(pytest.mark.trainspec_clause(*clause_ids))
        self.extra_keyword_matches.update(clause_ids)
        self.user_properties.extend(("clause", c) for c in clause_ids)
        deviations = self.config.stash[_PLAN].deviations
        # Strict xfail only when every clause of the check is declared: a failure of an
        # undeclared clause is a failure, as in the report.
        if all(c in deviations for c in clause_ids):
            reasons = "; ".join(f"{c}: {deviations[c]}" for c in clause_ids)
            self.add_marker(pytest.mark.xfail(reason=f"declared deviation ({reasons})",
                                              strict=True, raises=ClauseViolated))

    def setup(self) -> None:
        from trainspec.conformance.checks import CHECKS, run_check

        plan = self.config.stash[_PLAN]
        if self.multi_rank and plan.world_size < 2:
            pytest.skip(f"n/a: {self.check_name} needs several ranks; "
                        f"--trainspec-world-size={plan.world_size}")
        session = self.config.stash.get(_SESSION, None)
        if session is None:
            session = _Session(plan)
            self.config.stash[_SESSION] = session
            self.config.add_cleanup(session.close)
        ctx = session.context_or_fail()
        self.result = result = run_check(CHECKS[self.check_name], ctx)
        self.user_properties.append(("outcome", result.outcome))
        self.user_properties.append(("evidence", result.evidence))
        if result.outcome == "n/a":
            pytest.skip(f"n/a: {result.evidence}")
        declared = all(c in plan.deviations for c in self.clause_ids)
        if result.outcome == "error" or (result.outcome == "timeout" and not declared):
            pytest.fail(_render(result), pytrace=False)

    def runtest(self) -> None:
        result = self.result
        if result is not None and result.outcome in ("failed", "timeout"):
            raise ClauseViolated(result)
        if result is not None:
            self.add_report_section("call", "evidence", result.evidence)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException],
                     style: object = None) -> str:
        if isinstance(excinfo.value, ClauseViolated):
            return _render(excinfo.value.result)
        return str(super().repr_failure(excinfo))

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, f"trainspec {self.check_name} [{', '.join(self.clause_ids)}]"


def _render(result: CheckResult) -> str:
    """The evidence line (the node ID already names the check), then the detail; with several
    failing cases, then every case (each failing one with its detail)."""
    head = result.evidence if result.outcome == "failed" else \
        f"{result.outcome}: {result.evidence}"
    text = f"{head}\n{result.detail}" if result.detail else head
    if len(result.failing) < 2:
        return text
    from trainspec.conformance.report.text import case_lines

    more = [line for case in result.failing[1:] for line in
            (case_lines(replace(result, cases=(case,)))[0], case.detail) if line]
    passed = case_lines(replace(result, cases=tuple(c for c in result.cases
                                                    if c.outcome != "failed")))
    return "\n".join([text, "more failing cases:", *more, *passed])
