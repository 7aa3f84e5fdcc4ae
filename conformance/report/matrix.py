"""The conformance matrix: every built-in target's report, side by side (``trainspec matrix``).

:func:`build` makes a :class:`ConformanceMatrix` from reports at hand
(:func:`trainspec.conformance.matrix_run.check_targets` checks the installed targets and builds
one). Three writers, all from the same matrix (:func:`write` writes the three files):

``matrix.json`` (a contract: :func:`trainspec.conformance.report.specdocs.read_matrix` reads it)
    ``{"trainspec": VERSION, "targets": {NAME: REPORT_JSON, ...},
    "not_installed": {NAME: REASON, ...}, "complete": true}``, each report as
    :func:`trainspec.conformance.report.json_io.to_json` writes it, targets in the matrix's
    order.
``matrix.md``
    a header table (targets across: conformance, verdict counts, environment), then one table
    per clause family: clauses down, one verdict per target across.
``matrix.html``
    one static, self-contained page: :mod:`trainspec.conformance.report.matrix_html`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainspec.conformance.report import json_io
from trainspec.conformance.report.matrix_causes import (
    RemedyRun,
    causes_behind,
    remedy_notes,
    remedy_phrase,
    runs_from_json,
    runs_to_json,
)
from trainspec.conformance.report.text import cited
from trainspec.conformance.spec import clauses as registry
from trainspec.conformance.spec.printable import printable
from trainspec.conformance.spec.results import VERDICTS, Report, Verdict
from trainspec.errors import UsageError

__all__ = [
    "VERDICT_MEANINGS",
    "ConformanceMatrix",
    "build",
    "cell_text",
    "clean",
    "differences",
    "from_json",
    "header_rows",
    "read_published",
    "to_json",
    "to_markdown",
]


VERDICT_MEANINGS: dict[Verdict, str] = {
    "pass": "the target meets the clause",
    "fail": "the checks observed a violation of the clause",
    "deviation": "fails, and the target declares it as a deviation, with a reason",
    "n/a": "not judged: the target lacks a capability the checks need, or not selected",
    "error": "no verdict: a check broke (in the adapter or the harness)",
    "timeout": "no verdict: a run did not finish within its time bound",
}

_ENV_FIRST = ("python", "torch", "framework")


@dataclass(frozen=True, slots=True, kw_only=True)
class ConformanceMatrix:
    """The reports of the checked targets, in order, and why the others were not checked."""

    trainspec: str
    reports: Mapping[str, Report]  # target name -> its report, in the matrix's order
    not_installed: Mapping[str, str]  # target name -> why it was not checked
    # target name -> its remedies' failing clauses judged again with the remedy on
    remedy_runs: Mapping[str, tuple[RemedyRun, ...]] = field(default_factory=dict)

    @property
    def targets(self) -> tuple[str, ...]:
        return tuple(self.reports)

    @property
    def shown(self) -> tuple[str, ...]:
        """The clauses the tables list: those selected in any report, in registry order."""
        if any(not r.selected for r in self.reports.values()):
            return tuple(c.id for c in registry.CLAUSES)
        chosen = {cid for r in self.reports.values() for cid in r.selected}
        return tuple(c.id for c in registry.CLAUSES if c.id in chosen)

    def environment_keys(self) -> tuple[str, ...]:
        """python, torch, framework, then every other key a report names, first seen first."""
        keys = list(_ENV_FIRST)
        for r in self.reports.values():
            keys += [k for k in r.environment if k not in keys]
        return tuple(keys)


def build(reports: Iterable[Report] | Mapping[str, Report],
          not_installed: Mapping[str, str] | None = None, *,
          trainspec: str | None = None,
          remedy_runs: Mapping[str, Sequence[RemedyRun]] | None = None) -> ConformanceMatrix:
    """A matrix of ``reports`` (in that order; keyed by their target, or by the mapping's keys)
    and of the targets that were not checked, with the reason.

    Raises:
        UsageError: two reports name the same target.
    """
    by_target: dict[str, Report] = {}
    if isinstance(reports, Mapping):
        by_target.update(reports)
    else:
        for r in reports:
            if r.target in by_target:
                raise UsageError(f"matrix: two reports for target {r.target!r}; give one per "
                                 "target")
            by_target[r.target] = r
    if trainspec is None:
        from trainspec import __version__

        trainspec = next((r.trainspec for r in by_target.values()), __version__)
    return ConformanceMatrix(trainspec=trainspec, reports=by_target,
                             not_installed=dict(not_installed or {}),
                             remedy_runs={n: tuple(r) for n, r in (remedy_runs or {}).items()})


# ----------------------------------------------------------------------------------- JSON

def to_json(matrix: ConformanceMatrix) -> dict[str, Any]:
    """The ``matrix.json`` object; ``"complete": true`` last, so a cut-short file shows."""
    return {"trainspec": matrix.trainspec,
            "targets": {n: json_io.to_json(r) for n, r in matrix.reports.items()},
            "not_installed": dict(matrix.not_installed),
            "remedy_runs": runs_to_json(matrix.remedy_runs), "complete": True}


def from_json(data: object, *, source: str = "matrix") -> ConformanceMatrix:
    """Rebuild a matrix from :func:`to_json`'s output (check details are not in the JSON).

    Raises:
        UsageError: ``data`` is not a complete matrix.
    """
    if not isinstance(data, dict) or data.get("complete") is not True:
        raise UsageError(f'{source}: expected a JSON object ending in "complete": true, as '
                         "`trainspec matrix` writes; the file is cut short or not a matrix")
    targets, skipped = data.get("targets"), data.get("not_installed", {})
    if not isinstance(targets, dict) or not isinstance(skipped, dict):
        raise UsageError(f'{source}: expected "targets" and "not_installed" objects, found '
                         f"{type(targets).__name__} and {type(skipped).__name__}")
    reports = {str(n): json_io.from_json(raw, source=f"{source}, target {n}")
               for n, raw in targets.items()}
    try:
        runs = runs_from_json(data.get("remedy_runs", {}), source)
    except ValueError as e:
        raise UsageError(f"{e}; write the matrix again with `trainspec matrix`") from None
    return ConformanceMatrix(trainspec=str(data.get("trainspec", "?")), reports=reports,
                             not_installed={str(k): str(v) for k, v in skipped.items()},
                             remedy_runs=runs)


_MAX_MATRIX_B = 64 * 2**20  # a published matrix.json is a few hundred KiB


def read_published(path: Path) -> ConformanceMatrix:
    """A published ``matrix.json`` (``--compare``), read bounded: an endless file is refused.

    Raises:
        UsageError: it cannot be read as a matrix; the message names the file.
    """
    try:
        with path.open("rb") as f:
            data = f.read(_MAX_MATRIX_B + 1)
        if len(data) > _MAX_MATRIX_B:
            raise ValueError(f"larger than {_MAX_MATRIX_B // 2**20} MiB")
        raw = json.loads(data.decode("utf-8"))
    except (OSError, ValueError, RecursionError) as e:
        raise UsageError(f"--compare {path}: cannot read it as JSON ({e}); expected a "
                         "matrix.json written by `trainspec matrix`") from None
    return from_json(raw, source=f"--compare {path}")


def differences(published: ConformanceMatrix, now: ConformanceMatrix) -> list[str]:
    """Where ``now`` and a ``published`` matrix disagree, one line each: a target checked in
    only one of them, or a clause whose verdict changed (with the new evidence). Empty when
    every verdict of every target they share, and the set of targets, are the same."""
    out: list[str] = []
    for name in published.reports.keys() - now.reports.keys():
        out.append(f"{name}: in the published matrix, not checked now")
    for name in now.reports.keys() - published.reports.keys():
        out.append(f"{name}: checked now, not in the published matrix")
    for name in (n for n in now.reports if n in published.reports):
        for clause in now.reports[name].clauses:
            was = _verdict(published, name, clause.id)
            if was != clause.verdict:
                out.append(f"{name} {clause.id}: published {was}, now {clause.verdict}: "
                           f"{clause.evidence}")
    return out


# ------------------------------------------------------------------------------- Markdown

_MD_MARKERS: dict[Verdict, str] = {"pass": "pass", "fail": "**fail**", "deviation": "deviation",
                                   "n/a": "n/a", "error": "**error**", "timeout": "**timeout**"}


def to_markdown(matrix: ConformanceMatrix) -> str:
    """``matrix.md``: the targets' environments, then clauses down and targets across, then
    the evidence of every clause that does not pass (fail, deviation, error, timeout)."""
    names = matrix.targets
    lines = [f"## trainspec {matrix.trainspec} conformance matrix", ""]
    if names:
        lines += ["| | " + " | ".join(_md(n) for n in names) + " |",
                  "|---|" + "---|" * len(names)]
        lines += ["| " + " | ".join(_md(c) for c in row) + " |" for row in header_rows(matrix)]
        lines.append("")
    shown = matrix.shown if names else ()
    lines += _causes_markdown(matrix, shown)
    for family in registry.FAMILIES:
        rows = [c for c in registry.clauses_of(family) if c.id in shown]
        if not rows:
            continue
        lines += [f"### {family}: {registry.FAMILY_TITLES[family]}", "",
                  "| Clause | Level | " + " | ".join(_md(n) for n in names) + " |",
                  "|---|---|" + "---|" * len(names)]
        for clause in rows:
            cells = [_md(cell_text(matrix, n, clause.id, _MD_MARKERS)) for n in names]
            lines.append(f"| {clause.id} {_md(clause.title)} | {clause.level} | "
                         + " | ".join(cells) + " |")
        lines.append("")
    for name in names:
        findings = [c for c in matrix.reports[name].clauses
                    if c.id in shown and c.verdict in ("fail", "deviation", "error", "timeout")]
        if findings:
            lines += [f"### Evidence: {_md(name)}", ""]
            for c in findings:
                lines.append(f"- **{c.id}** {c.verdict}: {_md(cited(c))}")
                lines += [f"  - with `{_md(remedy.setting)}`: {verdict}: {_md(evidence)}"
                          for remedy, verdict, evidence in remedy_notes(
                              matrix.reports[name], matrix.remedy_runs.get(name, ()), c.id)]
            lines.append("")
    hidden = len(registry.CLAUSES) - len(shown)
    if names and hidden:
        lines += [f"{hidden} clauses not selected (`--clauses`): not shown.", ""]
    if matrix.not_installed:
        lines += ["Not installed: " + ", ".join(f"{_md(n)} ({_md(why)})" for n, why in
                                                matrix.not_installed.items()) + ".", ""]
    return "\n".join(lines)


def cell_text(matrix: ConformanceMatrix, target: str, clause_id: str,
              markers: Mapping[Verdict, str]) -> str:
    """A cell: the verdict's marker, then what each verified remedy did for the clause."""
    verdict = _verdict(matrix, target, clause_id)
    report = matrix.reports.get(target)
    if report is None or verdict != "fail":
        return markers[verdict]
    notes = [remedy_phrase(remedy, v) for remedy, v, _ in
             remedy_notes(report, matrix.remedy_runs.get(target, ()), clause_id)]
    return "; ".join([markers[verdict], *notes])


def _causes_markdown(matrix: ConformanceMatrix, shown: Sequence[str]) -> list[str]:
    """Per target, the few framework behaviours behind its fails (its adapter names them)."""
    lines: list[str] = []
    for name, report in matrix.reports.items():
        behind, unnamed = causes_behind(report, shown)
        if not behind and not unnamed:
            continue
        lines += [f"### Why {_md(name)} fails", ""]
        lines += [f"- {_md(cause.summary)}: {', '.join(ids)} (`{_md(cause.source)}`)"
                  for cause, ids in behind]
        if unnamed:
            lines.append(f"- no root cause named by the adapter: {', '.join(unnamed)}")
        lines.append("")
    return lines


def _md(text: str) -> str:
    return clean(text).replace("|", "\\|").replace("\n", " ")


def header_rows(matrix: ConformanceMatrix) -> list[list[str]]:
    """Rows of the targets table: a label, then one value per target."""
    reps = list(matrix.reports.values())
    rows = [["conformant", *("yes" if r.conformant else "no" for r in reps)],
            ["verdicts", *(_counts(r, matrix.shown) for r in reps)]]
    rows += [[key, *(r.environment.get(key) or "-" for r in reps)]
             for key in matrix.environment_keys()]
    rows.append(["duration", *(f"{r.duration_s:.1f} s" for r in reps)])
    return rows


def _counts(r: Report, shown: Sequence[str]) -> str:
    """``40 pass, 2 n/a``: the verdicts of the clauses the tables show."""
    counts: dict[Verdict, int] = dict.fromkeys(VERDICTS, 0)
    for c in r.clauses:
        if c.id in shown:
            counts[c.verdict] += 1
    return ", ".join(f"{n} {v}" for v, n in counts.items() if n) or "none shown"


def _verdict(matrix: ConformanceMatrix, target: str, clause_id: str) -> Verdict:
    try:
        return matrix.reports[target].clause(clause_id).verdict
    except KeyError:  # a report from another version of the spec: not judged there
        return "n/a"


def clean(text: str) -> str:
    """Printable text (:func:`~trainspec.conformance.spec.printable.printable`): no terminal
    colours, other control characters escaped; XML forbids most of them."""
    return printable(text)
