"""The conformance matrix: every built-in target's report, side by side (``trainspec matrix``).

:func:`check_targets` runs ``check`` on every built-in target whose adapter and framework are
installed and returns a :class:`ConformanceMatrix`; :func:`build` makes one from reports at
hand. Three writers, all from the same matrix (:func:`write` writes the three files):

``matrix.json`` (a contract: :func:`trainspec.conformance.report.specdocs.read_matrix` reads it)
    ``{"trainspec": VERSION, "targets": {NAME: REPORT_JSON, ...},
    "not_installed": {NAME: REASON, ...}, "complete": true}``, each report as
    :func:`trainspec.conformance.report.writers.to_json` writes it, targets in the matrix's order.
``matrix.md``
    a header table (targets across: conformance, verdict counts, environment), then one table
    per clause family: clauses down, one verdict per target across.
``matrix.html``
    one static, self-contained page (inline CSS, no script, nothing fetched): the same tables,
    each cell colored by verdict, its evidence on hover (``title``) and on click
    (``<details>``), a legend, and a note for the targets that were not installed. The page is
    well-formed XML as well as HTML, and everything taken from a report is escaped.
"""

from __future__ import annotations

import html
import importlib.util
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from trainspec.conformance.report import writers as reports_io
from trainspec.conformance.spec import clauses as registry
from trainspec.conformance.spec.results import VERDICTS, ClauseResult, Report, Verdict
from trainspec.errors import AdapterError, UsageError

if TYPE_CHECKING:
    from trainspec.conformance.targets import Target

__all__ = [
    "FILES",
    "FRAMEWORK_MODULES",
    "VERDICT_MEANINGS",
    "ConformanceMatrix",
    "build",
    "check_targets",
    "differences",
    "from_json",
    "missing_requirement",
    "to_html",
    "to_json",
    "to_markdown",
    "write",
]

FILES = ("matrix.json", "matrix.md", "matrix.html")

# built-in target -> (the modules its framework installs, the extra that installs them)
FRAMEWORK_MODULES: dict[str, tuple[tuple[str, ...], str]] = {
    "lightning": (("lightning",), "lightning"),
    "hf": (("transformers", "accelerate"), "hf"),
    "ignite": (("ignite",), "ignite"),
    "keras": (("keras",), "keras"),
}

VERDICT_MEANINGS: dict[Verdict, str] = {
    "pass": "the target meets the clause",
    "fail": "the checks observed a violation of the clause",
    "deviation": "fails, and the target declares it as a deviation, with a reason",
    "n/a": "not judged: the target lacks a capability the checks need, or not selected",
    "error": "no verdict: a check broke (in the adapter or the harness)",
    "timeout": "no verdict: a run did not finish within its time bound",
}

_ENV_FIRST = ("python", "torch", "framework")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]|\x1b\[[0-9;]*[A-Za-z]")
_DETAIL_LIMIT = 8000  # characters of a check's detail (a traceback) shown in the page


@dataclass(frozen=True, slots=True, kw_only=True)
class ConformanceMatrix:
    """The reports of the checked targets, in order, and why the others were not checked."""

    trainspec: str
    reports: Mapping[str, Report]  # target name -> its report, in the matrix's order
    not_installed: Mapping[str, str]  # target name -> why it was not checked

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
          trainspec: str | None = None) -> ConformanceMatrix:
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
                             not_installed=dict(not_installed or {}))


# ------------------------------------------------------------------------------------ run

def missing_requirement(name: str, target: Target) -> str | None:
    """Why a built-in target cannot be checked here (adapter or framework absent), or None.

    Looks the modules up without importing them: no framework is imported to find out.
    """
    module = target.factory.partition(":")[0]
    if not _importable(module):
        return f"adapter module {module} not found"
    needs, extra = FRAMEWORK_MODULES.get(name, ((), ""))
    absent = [m for m in needs if not _importable(m)]
    if absent:
        return (f"{', '.join(absent)} not installed: pip install 'trainspec[{extra}]'")
    return None


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing or broken
        return False


def check_targets(names: Sequence[str] | None = None, *, clauses: str | None = None,
                  world_size: int = 2, timeout_s: float = 60.0, workers: int = 1,
                  profile: Literal["fast", "ci"] = "fast",
                  progress: Callable[[str], None] | None = None) -> ConformanceMatrix:
    """Check every built-in target (or those of ``names``) whose adapter and framework are
    installed; ``progress`` gets one line as each target starts, finishes or is skipped.

    A target whose adapter cannot be loaded (:class:`~trainspec.errors.AdapterError`) is
    reported as not installed, with the adapter's message; other errors propagate.

    Raises:
        UsageError: a name is not a built-in target.
    """
    from trainspec.conformance import api
    from trainspec.conformance.targets import BUILTIN_TARGETS

    chosen = list(BUILTIN_TARGETS) if names is None else list(names)
    unknown = [n for n in chosen if n not in BUILTIN_TARGETS]
    if unknown:
        raise UsageError(f"matrix: unknown target(s) {', '.join(unknown)}: expected built-in "
                         f"targets ({', '.join(BUILTIN_TARGETS)})")
    say = progress or (lambda line: None)
    done: dict[str, Report] = {}
    missing: dict[str, str] = {}
    for i, name in enumerate(chosen, start=1):
        head = f"trainspec matrix: [{i}/{len(chosen)}] {name}"
        why = missing_requirement(name, BUILTIN_TARGETS[name])
        if why is None:
            say(f"{head}: checking")
            try:
                result = api.check(name, clauses=clauses, world_size=world_size,
                                   timeout_s=timeout_s, workers=workers, profile=profile)
            except AdapterError as e:
                why = str(e).splitlines()[0] if str(e) else type(e).__name__
            else:
                done[name] = result
                say(f"{head}: done: {reports_io.format_summary(result)}")
        if why is not None:
            missing[name] = why
            say(f"{head}: not installed ({why}); skipped")
    return build(done, missing)


# ----------------------------------------------------------------------------------- JSON

def to_json(matrix: ConformanceMatrix) -> dict[str, Any]:
    """The ``matrix.json`` object; ``"complete": true`` last, so a cut-short file shows."""
    return {"trainspec": matrix.trainspec,
            "targets": {n: reports_io.to_json(r) for n, r in matrix.reports.items()},
            "not_installed": dict(matrix.not_installed), "complete": True}


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
    reports = {str(n): reports_io.from_json(raw, source=f"{source}, target {n}")
               for n, raw in targets.items()}
    return ConformanceMatrix(trainspec=str(data.get("trainspec", "?")), reports=reports,
                             not_installed={str(k): str(v) for k, v in skipped.items()})


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
        lines += ["| " + " | ".join(_md(c) for c in row) + " |" for row in _header_rows(matrix)]
        lines.append("")
    shown = matrix.shown if names else ()
    for family in registry.FAMILIES:
        rows = [c for c in registry.clauses_of(family) if c.id in shown]
        if not rows:
            continue
        lines += [f"### {family}: {registry.FAMILY_TITLES[family]}", "",
                  "| Clause | Level | " + " | ".join(_md(n) for n in names) + " |",
                  "|---|---|" + "---|" * len(names)]
        for clause in rows:
            cells = [_MD_MARKERS[_verdict(matrix, n, clause.id)] for n in names]
            lines.append(f"| {clause.id} {_md(clause.title)} | {clause.level} | "
                         + " | ".join(cells) + " |")
        lines.append("")
    for name in names:
        findings = [c for c in matrix.reports[name].clauses
                    if c.id in shown and c.verdict in ("fail", "deviation", "error", "timeout")]
        if findings:
            lines += [f"### Evidence: {_md(name)}", ""]
            lines += [f"- **{c.id}** {c.verdict}: {_md(c.evidence)}" for c in findings]
            lines.append("")
    hidden = len(registry.CLAUSES) - len(shown)
    if names and hidden:
        lines += [f"{hidden} clauses not selected (`--clauses`): not shown.", ""]
    if matrix.not_installed:
        lines += ["Not installed: " + ", ".join(f"{_md(n)} ({_md(why)})" for n, why in
                                                matrix.not_installed.items()) + ".", ""]
    return "\n".join(lines)


def _md(text: str) -> str:
    return _clean(text).replace("|", "\\|").replace("\n", " ")


def _header_rows(matrix: ConformanceMatrix) -> list[list[str]]:
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


# ----------------------------------------------------------------------------------- HTML

_CSS = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif;
       margin: 1.5rem; color: #1f2328; background: #fff; }
h1 { font-size: 1.5rem; margin: 0 0 .25rem; }
h2 { font-size: 1.15rem; margin: 1.5rem 0 .5rem; }
table { border-collapse: collapse; }
th, td { border: 1px solid #d0d7de; padding: .3rem .55rem; text-align: left;
         vertical-align: top; }
thead th { background: #f6f8fa; position: sticky; top: 0; }
tr.family th { background: #eaeef2; font-weight: 600; }
td.id, code, pre { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; }
td.id { white-space: nowrap; }
td.v { min-width: 6.5rem; white-space: nowrap; }
td.v details[open] { white-space: normal; }
summary { cursor: pointer; }
.ev { margin: .35rem 0 0; max-width: 36rem; font-weight: normal; color: #1f2328;
      overflow-wrap: anywhere; }
.ev pre { white-space: pre-wrap; font-size: 12px; max-height: 24rem; overflow: auto; }
.ev ul { margin: .25rem 0; padding-left: 1.1rem; }
.v-pass { background: #dafbe1; color: #116329; }
.v-fail { background: #ffebe9; color: #a40e26; font-weight: 600; }
.v-deviation { background: #fff8c5; color: #7d4e00; }
.v-na { background: #f3f4f6; color: #59636e; }
.v-error { background: #fbefff; color: #8250df; font-weight: 600; }
.v-timeout { background: #fff1e5; color: #953800; font-weight: 600; }
.legend td.v { text-align: center; }
.skipped { border-left: 4px solid #d0d7de; padding: .25rem .75rem; color: #59636e; }
.muted { color: #59636e; }
""".strip()


def to_html(matrix: ConformanceMatrix) -> str:
    """``matrix.html``: one static page, no script and nothing fetched (see the module doc)."""
    title = f"trainspec {matrix.trainspec} conformance matrix"
    names = matrix.targets
    out = ["<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8" />',
           '<meta name="viewport" content="width=device-width, initial-scale=1" />',
           f"<title>{_h(title)}</title>", f"<style>\n{_CSS}\n</style>", "</head>", "<body>",
           f"<h1>{_h(title)}</h1>",
           f'<p class="muted">Written by <code>trainspec matrix</code>: every built-in target '
           f"whose adapter and framework are installed, checked against the {len(matrix.shown)} "
           "clauses shown. Hover over a verdict for its evidence; click it for the checks."
           "</p>"]
    if names:
        out += _html_targets(matrix)
    else:
        out.append("<p>No target was checked.</p>")
    if matrix.not_installed:
        out += ['<div class="skipped" id="not-installed">', "<p>Not installed, not checked:</p>",
                "<ul>"]
        out += [f"<li><strong>{_h(n)}</strong>: {_h(why)}</li>"
                for n, why in matrix.not_installed.items()]
        out += ["</ul>", "</div>"]
    out += _html_legend()
    if names:
        out += _html_clauses(matrix)
    out += ["</body>", "</html>", ""]
    return "\n".join(out)


def _html_targets(matrix: ConformanceMatrix) -> list[str]:
    out = ["<h2>Targets</h2>", '<table class="targets">', "<thead><tr><th></th>"
           + "".join(f'<th scope="col">{_h(n)}</th>' for n in matrix.targets) + "</tr></thead>",
           "<tbody>"]
    for label, *values in _header_rows(matrix):
        if label == "conformant":
            cells = "".join(f'<td class="v {_css("pass" if v == "yes" else "fail")}">{_h(v)}'
                            "</td>" for v in values)
        else:
            cells = "".join(f"<td>{_h(v)}</td>" for v in values)
        out.append(f'<tr><th scope="row">{_h(label)}</th>{cells}</tr>')
    out += ["</tbody>", "</table>"]
    return out


def _html_legend() -> list[str]:
    out = ["<h2>Legend</h2>", '<table class="legend">', "<tbody>"]
    out += [f'<tr><td class="v {_css(v)}">{_h(v)}</td><td>{_h(VERDICT_MEANINGS[v])}</td></tr>'
            for v in VERDICTS]
    out += ["</tbody>", "</table>",
            '<p class="muted">A target is conformant when every MUST clause passes or is a '
            "declared deviation.</p>"]
    return out


def _html_clauses(matrix: ConformanceMatrix) -> list[str]:
    names = matrix.targets
    shown = set(matrix.shown)
    width = 3 + len(names)
    out = ["<h2>Clauses</h2>", '<table class="matrix">',
           '<thead><tr><th scope="col">ID</th><th scope="col">Level</th>'
           '<th scope="col">Clause</th>'
           + "".join(f'<th scope="col">{_h(n)}</th>' for n in names) + "</tr></thead>"]
    for family in registry.FAMILIES:
        rows = [c for c in registry.clauses_of(family) if c.id in shown]
        if not rows:
            continue
        out += [f'<tbody id="{family.lower()}">',
                f'<tr class="family"><th colspan="{width}" scope="rowgroup">{_h(family)}: '
                f"{_h(registry.FAMILY_TITLES[family])}</th></tr>"]
        for clause in rows:
            cells = "".join(_html_cell(matrix, n, clause.id) for n in names)
            out.append(f'<tr id="{clause.anchor}"><td class="id">{_h(clause.id)}</td>'
                       f"<td>{clause.level}</td><td>{_h(clause.title)}</td>{cells}</tr>")
        out.append("</tbody>")
    out.append("</table>")
    hidden = len(registry.CLAUSES) - len(shown)
    if hidden:
        out.append(f'<p class="muted">{hidden} clauses not selected (<code>--clauses</code>): '
                   "not shown.</p>")
    return out


def _html_cell(matrix: ConformanceMatrix, target: str, clause_id: str) -> str:
    try:
        clause = matrix.reports[target].clause(clause_id)
    except KeyError:
        return f'<td class="v {_css("n/a")}" title="not in this report">n/a</td>'
    verdict = clause.verdict
    evidence = _evidence(clause)
    title = f' title="{_h(evidence)}"' if evidence else ""
    body = _cell_details(clause, evidence)
    if not body:
        return f'<td class="v {_css(verdict)}"{title}>{_h(verdict)}</td>'
    return (f'<td class="v {_css(verdict)}"{title}><details><summary>{_h(verdict)}</summary>'
            f'<div class="ev">{body}</div></details></td>')


def _cell_details(clause: ClauseResult, evidence: str) -> str:
    parts = [f"<p>{_h(evidence)}</p>"] if evidence else []
    checks = []
    for c in clause.checks:
        line = f"<code>{_h(c.name)}</code> {_h(c.outcome)}, {c.duration_s:.2f} s"
        if c.outcome != "passed" and c.evidence and c.evidence not in evidence:
            line += f": {_h(c.evidence)}"
        if c.outcome != "passed" and c.detail:
            detail = c.detail if len(c.detail) <= _DETAIL_LIMIT else (
                c.detail[:_DETAIL_LIMIT] + "\n... (cut; run `trainspec check -v` for all of it)")
            line += f"<pre>{_h(detail.rstrip())}</pre>"
        checks.append(f"<li>{line}</li>")
    if checks:
        parts.append(f"<ul>{''.join(checks)}</ul>")
    return "".join(parts)


def _evidence(clause: ClauseResult) -> str:
    """What a cell's hover shows: the evidence, the declared reason, a note."""
    if clause.verdict == "deviation":
        text = f"declared deviation: {clause.deviation_reason}; observed: {clause.evidence}"
    else:
        text = clause.evidence
    if clause.note:
        text = f"{text} ({clause.note})" if text else clause.note
    return text


def _css(verdict: str) -> str:
    return "v-na" if verdict == "n/a" else f"v-{verdict}"


def _clean(text: str) -> str:
    """Without control characters (terminal colors in a traceback): XML forbids most."""
    return _CONTROL.sub("", text)


def _h(text: str) -> str:
    """Escaped for HTML text and double- or single-quoted attributes."""
    return html.escape(_clean(text), quote=True)


# ---------------------------------------------------------------------------------- files

def write(matrix: ConformanceMatrix, out_dir: str | Path) -> list[Path]:
    """Write ``matrix.json``, ``matrix.md`` and ``matrix.html`` into ``out_dir``.

    Raises:
        UsageError: the folder cannot be created or a file cannot be written.
    """
    where = Path(out_dir)
    texts = {"matrix.json": json.dumps(to_json(matrix), indent=2, ensure_ascii=False) + "\n",
             "matrix.md": to_markdown(matrix), "matrix.html": to_html(matrix)}
    written = []
    for name in FILES:
        path = where / name
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(texts[name], encoding="utf-8")
        except OSError as e:
            raise UsageError(f"--out {where}: cannot write {name} ({e}). Give a writable "
                             "folder.") from None
        written.append(path)
    return written
