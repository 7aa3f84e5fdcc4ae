"""What the self-test finds: :class:`Problem`, one line each, merged where they differ in
their subject only.

A problem is the adapter's: it reports something wrong or not at all, and the line names the
fix. A fact of the trainer (a file that records no epoch, a file its own reader cannot read)
is no adapter problem: its line names the checks that will judge it, and it does not fail
the self-test.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Problem", "merged", "summary"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Problem:
    """One thing an adapter reports wrong or not at all, and how to fix it (``fix``); or,
    with ``judged_by`` instead, a fact of the trainer and the checks that will judge it."""

    topic: str  # records, epochs, scores, decisions, state, files, crash points, run
    what: str  # may hold "{subject}": problems that differ in their subject only merge
    fix: str = ""
    judged_by: str = ""  # a fact of the trainer: what the checks will judge, and where
    detail: str = ""  # a traceback, for -v
    subject: str = ""

    def __post_init__(self) -> None:
        if bool(self.fix) == bool(self.judged_by):
            raise ValueError(f"self-test finding {self.what!r}: give a fix (the adapter's "
                             "problem) or judged_by (a fact of the trainer), not both")

    @property
    def is_trainer_fact(self) -> bool:
        """A fact of the trainer, not the adapter's: it does not fail the self-test."""
        return bool(self.judged_by)

    def line(self) -> str:
        what = self.what.replace("{subject}", self.subject) if self.subject else self.what
        if self.is_trainer_fact:
            return (f"[{self.topic}] {what}. A fact of the trainer, not an adapter problem: "
                    f"the checks will judge it ({self.judged_by})")
        return f"[{self.topic}] {what}. Fix: {self.fix}"


def merged(problems: Sequence[Problem]) -> list[Problem]:
    """``problems`` with those of the same topic and fix made one (the crash points of a
    trainer that gives them 1-based epochs, say), their subjects listed; the adapter's
    problems first, then the facts of the trainer."""
    out: list[Problem] = []
    seen: dict[tuple[str, str], int] = {}
    for p in sorted(problems, key=lambda p: p.is_trainer_fact):  # stable: order kept
        key = (p.topic, p.fix)
        if key not in seen or p.topic != "epochs" or p.is_trainer_fact:
            seen[key] = len(out)
            out.append(p)
            continue
        first = out[seen[key]]
        if first.subject and p.subject:
            joined = dataclasses.replace(first, subject=f"{first.subject}, {p.subject}")
        else:
            joined = dataclasses.replace(first, what=f"{first.what}; {p.what}")
        out[seen[key]] = joined
    return out


def summary(problems: Sequence[Problem]) -> str:
    """The self-test's verdict in words: the adapter's problems, then the trainer's facts."""
    facts = sum(p.is_trainer_fact for p in problems)
    found = len(problems) - facts
    said = f"{found} problem{'s' if found != 1 else ''} found" if found else \
        "no problem found: the adapter reports what the checks read"
    if facts:
        said += f"; {facts} fact{'s' if facts != 1 else ''} of the trainer the checks will judge"
    return said
