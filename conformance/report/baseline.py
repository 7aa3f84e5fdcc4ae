"""Baselines: adopt the gate gradually by failing only on regressions.

``trainspec check --save-baseline FILE`` records the verdict of every clause the run checked::

    {"trainspec": "0.1.0", "target": "reference", "clauses": {"LOOP-1": "pass", ...}}

``trainspec check --baseline FILE`` then exits by regressions instead of conformance: 1 when a
clause got worse than in the baseline, 0 otherwise, and lists the clauses that got better so the
baseline can be tightened. A report written by ``--report`` serves as a baseline too.

Verdicts are ranked, best first (:data:`ORDER`)::

    pass > deviation > n/a > fail > timeout > error

A clause regresses when its verdict now ranks below the baseline's. So ``pass`` -> ``fail``,
``error`` or ``timeout`` regresses, and so does ``pass`` -> ``n/a`` (the clause is no longer
verified). A run that used to complete and now hangs or breaks regresses too: ``fail`` ->
``timeout`` or ``error``. The other way, ``error`` or ``timeout`` -> ``fail`` is better, not a
regression: the run now completes and the violation it shows is one the baseline already
accepted for that clause (and a newer trainspec that adds a check to a "no check yet" clause
does not break the gate).

Only the clauses this run checked are compared. A checked clause that is not in the baseline (a
newer trainspec's clause, or a baseline saved with ``--clauses``) is reported as new, never as a
regression. A baseline saved for another target is an error: a baseline describes one trainer.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainspec.conformance.report.output import write_text
from trainspec.conformance.spec import clauses as registry
from trainspec.conformance.spec.results import VERDICTS, Report, Verdict
from trainspec.errors import UsageError

__all__ = [
    "ORDER",
    "Baseline",
    "Change",
    "Comparison",
    "compare",
    "from_report",
    "read_baseline",
    "write_baseline",
]

ORDER: tuple[Verdict, ...] = ("pass", "deviation", "n/a", "fail", "timeout", "error")
"""Verdicts from best to worst: a move to the right is a regression."""

_RANK: dict[Verdict, int] = {v: len(ORDER) - i for i, v in enumerate(ORDER)}
_SAVE = "trainspec check [TARGET] --save-baseline {path}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Baseline:
    """The verdicts one target got, clause ID -> verdict, and the trainspec that judged them."""

    trainspec: str
    target: str
    verdicts: dict[str, Verdict]
    source: str = "baseline"

    def require_target(self, target: str) -> None:
        """Raise :class:`UsageError` unless the baseline was saved for ``target``."""
        if target != self.target:
            raise UsageError(
                f"--baseline {self.source}: saved for target {self.target!r}, but this run "
                f"checks {target!r}. A baseline compares a trainer with its own earlier "
                f"verdicts: save one for this target with `"
                + _SAVE.format(path=self.source) + "`.")


@dataclass(frozen=True, slots=True, kw_only=True)
class Change:
    """A clause whose verdict differs from the baseline's (``before`` None: not in it)."""

    id: str
    before: Verdict | None
    after: Verdict


@dataclass(frozen=True, slots=True, kw_only=True)
class Comparison:
    """A report against a baseline: what regressed, what got better, what is new."""

    baseline: Baseline
    regressed: tuple[Change, ...]
    better: tuple[Change, ...]
    new: tuple[Change, ...]
    unchanged: int
    not_checked: int  # clauses of the baseline this run did not check

    @property
    def exit_status(self) -> int:
        """1 when a clause regressed, else 0 (``--baseline`` exits with it)."""
        return 1 if self.regressed else 0

    def headline(self) -> str:
        """``1 regressed, 2 better, 0 new, 39 unchanged``."""
        out = (f"{len(self.regressed)} regressed, {len(self.better)} better, "
               f"{len(self.new)} new, {self.unchanged} unchanged")
        if self.not_checked:
            out += f", {self.not_checked} not checked in this run"
        return out

    def format(self) -> str:
        """The section printed after the terminal table."""
        b = self.baseline
        lines = [f"baseline {b.source} (trainspec {b.trainspec}, {b.target}): {self.headline()}"]
        changes = [("regressed", c) for c in self.regressed] + \
            [("better", c) for c in self.better] + [("new", c) for c in self.new]
        width = max((len(c.id) for _, c in changes), default=0)
        for kind, c in changes:
            lines.append(f"  {kind:<9}  {c.id:<{width}}  {_before(c)} -> {c.after}")
        if self.better:
            lines.append(f"  tighten the baseline: run again with --save-baseline {b.source}")
        return "\n".join(lines)

    def to_markdown(self) -> str:
        """The section appended to the Markdown report."""
        b = self.baseline
        status = "**regressed**" if self.regressed else "no regression"
        lines = [f"### Against the baseline `{b.source}`: {status}", "",
                 f"Saved by trainspec {b.trainspec} for `{b.target}`: {self.headline()}.", ""]
        changes = [("**regressed**", c) for c in self.regressed] + \
            [("better", c) for c in self.better] + [("new", c) for c in self.new]
        if changes:
            lines += ["| ID | Baseline | Now | Change |", "|----|----------|-----|--------|"]
            lines += [f"| {c.id} | {_before(c)} | {c.after} | {kind} |" for kind, c in changes]
            lines.append("")
        if self.better:
            lines.append(f"Better than the baseline: tighten it with `--save-baseline {b.source}`.")
        return "\n".join(lines).rstrip("\n")


def _before(change: Change) -> str:
    return change.before if change.before is not None else "(not in the baseline)"


# ------------------------------------------------------------------------------ comparison

def compare(report: Report, baseline: Baseline) -> Comparison:
    """Compare the clauses ``report`` checked with ``baseline``, ranked by :data:`ORDER`.

    Raises:
        UsageError: the baseline was saved for another target.
    """
    baseline.require_target(report.target)
    checked = _checked(report)
    regressed, better, new = [], [], []
    unchanged = 0
    for clause_id, after in checked.items():
        before = baseline.verdicts.get(clause_id)
        change = Change(id=clause_id, before=before, after=after)
        if before is None:
            new.append(change)
        elif _RANK[after] < _RANK[before]:
            regressed.append(change)
        elif _RANK[after] > _RANK[before]:
            better.append(change)
        else:
            unchanged += 1
    return Comparison(baseline=baseline, regressed=tuple(regressed), better=tuple(better),
                      new=tuple(new), unchanged=unchanged,
                      not_checked=sum(1 for c in baseline.verdicts if c not in checked))


def _checked(report: Report) -> dict[str, Verdict]:
    """Clause ID -> verdict of the clauses the run checked (every clause when none selected)."""
    return {c.id: c.verdict for c in report.clauses
            if not report.selected or c.id in report.selected}


# ---------------------------------------------------------------------------- file format

def from_report(report: Report, *, source: str = "baseline") -> Baseline:
    """The baseline of a report: the verdicts of the clauses it checked."""
    return Baseline(trainspec=report.trainspec, target=report.target,
                    verdicts=_checked(report), source=source)


def to_json(baseline: Baseline) -> dict[str, Any]:
    """The baseline file's JSON object."""
    return {"trainspec": baseline.trainspec, "target": baseline.target,
            "clauses": dict(baseline.verdicts)}


def write_baseline(report: Report, path: str | Path) -> Baseline:
    """Save the verdicts of the clauses ``report`` checked to ``path``; returns the baseline."""
    baseline = from_report(report, source=str(Path(path)))
    text = json.dumps(to_json(baseline), indent=2, ensure_ascii=False) + "\n"
    write_text(path, text, "--save-baseline", "baseline")
    return baseline


def read_baseline(path: str | Path) -> Baseline:
    """Read a baseline written by :func:`write_baseline`, or a report written by ``--report``.

    Raises:
        UsageError: the file is missing or unreadable, not JSON, or not a baseline (a key
            missing or mistyped, an unknown clause ID or verdict).
    """
    where = Path(path)
    save = _SAVE.format(path=where)
    limit_b = 16 * 2**20  # a baseline of every clause is a few KiB: past this it is not one
    try:
        with where.open("rb") as f:  # bounded: /dev/zero or an endless pipe is refused
            raw = f.read(limit_b + 1)
        if len(raw) > limit_b:
            raise UsageError(f"--baseline {where}: larger than {limit_b // 2**20} MiB, so not a "
                             f"baseline (one is a few KiB). Save one with `{save}`.")
        data = json.loads(raw.decode("utf-8"))
    except RecursionError:  # nesting the decoder refuses to follow: not a baseline either
        raise UsageError(f"--baseline {where}: nested too deeply to be a baseline. Save it "
                         f"again with `{save}`.") from None
    except FileNotFoundError:
        raise UsageError(f"--baseline {where}: no such file. Expected a baseline saved by "
                         f"`trainspec check --save-baseline FILE`; save one first with `{save}`."
                         ) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise UsageError(f"--baseline {where}: expected a JSON baseline, cannot read it: {e}. "
                         f"Save it again with `{save}`.") from None
    if isinstance(data, dict) and isinstance(data.get("clauses"), list):  # a --report file
        from trainspec.conformance.report.json_io import from_json

        return from_report(from_json(data, source=str(where)), source=str(where))
    return from_json_baseline(data, source=str(where))


def from_json_baseline(data: object, *, source: str = "baseline") -> Baseline:
    """Rebuild a :class:`Baseline` from :func:`to_json`'s output.

    Raises:
        UsageError: ``data`` is not a baseline; the message names the key and the fix.
    """
    if not isinstance(data, dict):
        raise _bad(source, "a JSON object", type(data).__name__)
    for key in ("trainspec", "target"):
        if not isinstance(data.get(key), str):
            raise _bad(source, f'"{key}" to be a string', repr(data.get(key)))
    raw = data.get("clauses")
    if not isinstance(raw, dict):
        raise _bad(source, '"clauses" to be an object of clause ID -> verdict', repr(raw))
    return Baseline(trainspec=data["trainspec"], target=data["target"],
                    verdicts=_verdicts(raw, source), source=source)


def _verdicts(raw: Mapping[str, object], source: str) -> dict[str, Verdict]:
    out: dict[str, Verdict] = {}
    for key, verdict in raw.items():
        try:
            clause_id = registry.get(key).id
        except UsageError:
            raise _bad(source, '"clauses" keys to be clause IDs of this trainspec '
                       "(`trainspec list`)", repr(key)) from None
        if verdict not in VERDICTS:
            raise _bad(source, f'"clauses".{key} one of {", ".join(VERDICTS)}', repr(verdict))
        if clause_id in out:
            raise _bad(source, "each clause once", f"{clause_id} twice")
        out[clause_id] = verdict
    return out


def _bad(source: str, expected: str, found: str) -> UsageError:
    return UsageError(f"--baseline {source}: not a trainspec baseline: expected {expected}, "
                      f"found {found}. Save it again with `{_SAVE.format(path=source)}`.")
