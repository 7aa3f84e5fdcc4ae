"""``matrix.html``: the conformance matrix as one static, self-contained page.

Inline CSS, no script, nothing fetched: the tables of :mod:`trainspec.conformance.report.matrix`,
each cell colored by verdict, its evidence on hover (``title``) and on click (``<details>``), a
legend, and a note for the targets that were not installed. The page is well-formed XML as well
as HTML, and everything taken from a report is escaped.
"""

from __future__ import annotations

import html

from trainspec.conformance.report.matrix import (
    VERDICT_MEANINGS,
    ConformanceMatrix,
    cell_text,
    clean,
    header_rows,
)
from trainspec.conformance.report.matrix_causes import causes_behind, remedy_notes
from trainspec.conformance.report.text import cited
from trainspec.conformance.spec import clauses as registry
from trainspec.conformance.spec.results import VERDICTS, ClauseResult, Verdict

__all__ = ["to_html"]

_DETAIL_LIMIT = 8000  # characters of a check's detail (a traceback) shown in the page

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
        out += _html_causes(matrix)
        out += _html_clauses(matrix)
    out += ["</body>", "</html>", ""]
    return "\n".join(out)


def _html_targets(matrix: ConformanceMatrix) -> list[str]:
    out = ["<h2>Targets</h2>", '<table class="targets">', "<thead><tr><th></th>"
           + "".join(f'<th scope="col">{_h(n)}</th>' for n in matrix.targets) + "</tr></thead>",
           "<tbody>"]
    for label, *values in header_rows(matrix):
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


_PLAIN: dict[Verdict, str] = {v: v for v in VERDICTS}


def _html_causes(matrix: ConformanceMatrix) -> list[str]:
    """Per target, the framework behaviours behind its fails, above the clause table."""
    out: list[str] = []
    for name, report in matrix.reports.items():
        behind, unnamed = causes_behind(report, matrix.shown)
        if not behind and not unnamed:
            continue
        out += [f'<h3 id="why-{_h(name)}">Why {_h(name)} fails</h3>', "<ul>"]
        out += [f"<li>{_h(cause.summary)}: <strong>{_h(', '.join(ids))}</strong> "
                f"(<code>{_h(cause.source)}</code>)</li>" for cause, ids in behind]
        if unnamed:
            out.append("<li>no root cause named by the adapter: "
                       f"{_h(', '.join(unnamed))}</li>")
        out.append("</ul>")
    return ["<h2>Root causes</h2>", *out] if out else []


def _html_cell(matrix: ConformanceMatrix, target: str, clause_id: str) -> str:
    try:
        clause = matrix.reports[target].clause(clause_id)
    except KeyError:
        return f'<td class="v {_css("n/a")}" title="not in this report">n/a</td>'
    verdict = clause.verdict
    evidence = _evidence(clause)
    title = f' title="{_h(evidence)}"' if evidence else ""
    body = _cell_details(clause, evidence) + "".join(
        f"<p>with <code>{_h(remedy.setting)}</code>: {_h(v)}: {_h(ev)}</p>"
        for remedy, v, ev in remedy_notes(matrix.reports[target],
                                          matrix.remedy_runs.get(target, ()), clause_id))
    label = cell_text(matrix, target, clause_id, _PLAIN)
    if not body:
        return f'<td class="v {_css(verdict)}"{title}>{_h(label)}</td>'
    return (f'<td class="v {_css(verdict)}"{title}><details><summary>{_h(label)}</summary>'
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
        text = f"declared deviation: {clause.deviation_reason}; observed: {cited(clause)}"
    else:
        text = cited(clause)
    if clause.note:
        text = f"{text} ({clause.note})" if text else clause.note
    return text


def _css(verdict: str) -> str:
    return "v-na" if verdict == "n/a" else f"v-{verdict}"


def _h(text: str) -> str:
    """Escaped for HTML text and double- or single-quoted attributes."""
    return html.escape(clean(text), quote=True)
