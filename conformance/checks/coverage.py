"""The coverage map: every normative sentence, the checks that exercise it, the scenarios those
checks run, and the mutants that prove a check can fail it.

Computed from the declarations where the knowledge lives: each check's ``covers=(...)`` on its
``@check`` line, each mutant's ``proves=...`` on its ``@mutant_of`` line (read from the generated
:mod:`trainspec.conformance.spec.mutant_proofs`, since the mutants live in the tests), and the
scenario names each check's code builds (read from its source). ``trainspec explain`` and the
spec pages render it; tests/test_coverage.py fails when an observable sentence has neither.
"""

from __future__ import annotations

import ast
import functools
import inspect
import sys
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from trainspec.conformance.checks.base import CHECKS, CheckSpec
from trainspec.conformance.checks.model_based import JUDGED_ON
from trainspec.conformance.spec.clauses import get as get_clause
from trainspec.conformance.spec.mutant_proofs import PROOFS
from trainspec.conformance.spec.sentences import (
    OUTLINE_DIFFERENCES,
    SENTENCES,
    MutantProof,
    Sentence,
    sentences_of,
)
from trainspec.conformance.spec.sentences import get as get_sentence

__all__ = [
    "Coverage",
    "SentenceCoverage",
    "clause_markdown",
    "coverage_map",
    "declaration_problems",
    "explain_lines",
    "scenarios_of",
    "summary_markdown",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class SentenceCoverage:
    """One sentence, the checks that exercise it, their scenarios, the mutants that prove it."""

    sentence: Sentence
    checks: tuple[str, ...]
    scenarios: tuple[str, ...]
    mutants: tuple[MutantProof, ...]

    @property
    def gap(self) -> str | None:
        """What an observable sentence lacks ("no check", "no mutant"); None when nothing."""
        if not self.sentence.observable:
            return None
        if not self.checks:
            return "no check"
        return None if self.mutants else "no mutant"


@dataclass(frozen=True, slots=True, kw_only=True)
class Coverage:
    """The whole map, in registry order, with the counts the spec's introduction shows."""

    sentences: tuple[SentenceCoverage, ...]

    def of(self, sentence_id: str) -> SentenceCoverage:
        return next(s for s in self.sentences if s.sentence.id == sentence_id)

    @property
    def observable(self) -> tuple[SentenceCoverage, ...]:
        return tuple(s for s in self.sentences if s.sentence.observable)

    @property
    def with_check(self) -> int:
        return sum(bool(s.checks) for s in self.observable)

    @property
    def with_mutant(self) -> int:
        return sum(bool(s.mutants) for s in self.observable)

    @property
    def not_observable(self) -> tuple[Sentence, ...]:
        return tuple(s.sentence for s in self.sentences if not s.sentence.observable)

    @property
    def gaps(self) -> dict[str, str]:
        """Sentence ID -> what it lacks, for every observable sentence that lacks something."""
        return {s.sentence.id: s.gap for s in self.sentences if s.gap is not None}


def coverage_map(checks: Mapping[str, CheckSpec] | None = None,
                 proofs: Sequence[MutantProof] | None = None) -> Coverage:
    """The map from the registered checks and the mutants' records (by default, all of them)."""
    if checks is None and proofs is None:
        return _default_map()
    return _compute(CHECKS if checks is None else checks, PROOFS if proofs is None else proofs)


@functools.cache
def _default_map() -> Coverage:
    return _compute(CHECKS, PROOFS)


def _compute(checks: Mapping[str, CheckSpec], proofs: Sequence[MutantProof]) -> Coverage:
    out = []
    for sentence in SENTENCES:
        covering = [spec for spec in checks.values() if sentence.id in spec.covers]
        scenarios = dict.fromkeys(name for spec in covering for name in scenarios_of(spec))
        mutants = tuple(p for p in proofs if sentence.id in p.proves)
        out.append(SentenceCoverage(sentence=sentence, checks=tuple(s.name for s in covering),
                                    scenarios=tuple(scenarios), mutants=mutants))
    return Coverage(sentences=tuple(out))


def declaration_problems(checks: Mapping[str, CheckSpec] | None = None,
                         proofs: Sequence[MutantProof] | None = None) -> list[str]:
    """What is wrong with the declarations: a check that covers nothing, an unknown sentence,
    a mutant proving a sentence its check does not cover, a record naming no check."""
    checks = CHECKS if checks is None else checks
    proofs = PROOFS if proofs is None else proofs
    known = {s.id for s in SENTENCES}
    found = []
    for spec in checks.values():
        if not spec.covers:
            found.append(f"{spec.name}: covers no sentence (add covers=(...) to its @check)")
        found += [f"{spec.name}: covers {s!r}, which is no sentence ID" for s in spec.covers
                  if s not in known]
    for p in proofs:
        if not p.proves:
            found.append(f"{p.mutant} on {p.check}: proves no sentence (add proves=...)")
        declared = checks.get(p.check)
        if declared is None:
            found.append(f"{p.mutant}: declared for {p.check}, which is no registered check")
            continue
        found += [f"{p.mutant} on {p.check}: proves {s!r}, which the check does not cover"
                  for s in p.proves if s not in declared.covers]
    return found


# ---------------------------------------------------------------- scenarios named by a check

def scenarios_of(spec: CheckSpec) -> tuple[str, ...]:
    """The scenario names a check's code builds, read from its source and that of the helpers
    of its own module it calls (``make_scenario("res-fit", ...)``, ``name=f"res-fit-{item}"``,
    ``property_check(ctx, "decisions", ...)``); a formatted part reads ``*``."""
    module = sys.modules.get(spec.func.__module__)
    if module is None:
        return ()
    functions = _module_functions(module.__name__)
    if spec.func.__name__ not in functions:
        return ()  # a check registered in a loop (the model-based family): no scenario names
    found: dict[str, None] = {}
    _collect(spec.func.__name__, functions, found, set())
    return tuple(found)


@functools.cache
def _module_functions(module_name: str) -> dict[str, ast.FunctionDef]:
    tree = ast.parse(textwrap.dedent(inspect.getsource(sys.modules[module_name])))
    return {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}


def _collect(name: str, functions: Mapping[str, ast.FunctionDef], found: dict[str, None],
             visited: set[str]) -> None:
    visited.add(name)
    for node in ast.walk(functions[name]):
        if not isinstance(node, ast.Call):
            continue
        callee = node.func.id if isinstance(node.func, ast.Name) else ""
        if (callee == "make_scenario" or callee.endswith("_scenario")) and node.args:
            _add(node.args[0], found)
        if callee == "property_check" and len(node.args) > 1:
            _add(node.args[1], found, prefix="hypothesis property ")
        for keyword in node.keywords:
            if keyword.arg == "name":
                _add(keyword.value, found)
        if callee in functions and callee not in visited:
            _collect(callee, functions, found, visited)


def _add(node: ast.expr, found: dict[str, None], prefix: str = "") -> None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        found[prefix + node.value] = None
    elif isinstance(node, ast.JoinedStr):
        found[prefix + "".join(str(v.value) if isinstance(v, ast.Constant) else "*"
                               for v in node.values)] = None


# ---------------------------------------------------------------- rendering

def explain_lines(requested: str, coverage: Coverage | None = None) -> list[str]:
    """The "Sentences:" part of ``trainspec explain``: every sentence of a clause, or the one
    a sentence ID (``RES-5.2``) names, each with its checks, scenarios and mutants.

    Raises:
        UsageError: no clause or sentence has that ID.
    """
    coverage = coverage or coverage_map()
    if "." in requested:
        wanted: tuple[Sentence, ...] = (get_sentence(requested),)
    else:
        wanted = sentences_of(get_clause(requested).id)
    lines = ["", "Sentences (the normative text, one requirement each):"]
    for sentence in wanted:
        entry = coverage.of(sentence.id)
        lines.append(textwrap.fill(sentence.wording, width=88,
                                   initial_indent=f"  {sentence.id:<10}",
                                   subsequent_indent=" " * 12))
        if not sentence.observable:
            lines.append(textwrap.fill(f"not observable: {sentence.reason}", width=88,
                                       initial_indent=" " * 12, subsequent_indent=" " * 14))
            continue
        lines += [f"{'':12}check: {name}" for name in entry.checks] \
            or [f"{'':12}check: none yet (a gap)"]
        if sentence.id in JUDGED_ON:
            lines.append(f"{'':12}generated runs judged: {', '.join(JUDGED_ON[sentence.id])}")
        if entry.scenarios:
            lines.append(textwrap.fill("scenarios: " + ", ".join(entry.scenarios), width=88,
                                       initial_indent=" " * 12, subsequent_indent=" " * 14))
        lines += [textwrap.fill(f'mutant: {p.mutant} fails {p.check}: "{p.expect.strip()}"',
                                width=88, initial_indent=" " * 12, subsequent_indent=" " * 14)
                  for p in entry.mutants] or [f"{'':12}mutant: none yet (a gap)"]
    return lines


def clause_markdown(clause_id: str, coverage: Coverage | None = None) -> list[str]:
    """A clause's sentences for its spec page: a list item each, with checks and mutants."""
    coverage = coverage or coverage_map()
    lines = ["**Sentences.**", ""]
    for sentence in sentences_of(clause_id):
        entry = coverage.of(sentence.id)
        lines.append(f"- **{sentence.id}** {_quote(sentence.wording)}")
        if not sentence.observable:
            lines.append(f"  - *Not observable:* {sentence.reason}.")
            continue
        if entry.checks:
            scenarios = ", ".join(f"`{s}`" for s in entry.scenarios)
            lines.append("  - Checked by " + ", ".join(f"`{c}`" for c in entry.checks)
                         + (f" (scenarios {scenarios})" if scenarios else "") + ".")
        else:
            lines.append("  - **No check yet.**")
        if sentence.id in JUDGED_ON:
            lines.append("  - Judged on generated runs: "
                         + ", ".join(JUDGED_ON[sentence.id]) + ".")
        if entry.mutants:
            lines += _mutant_items(entry.mutants)
        else:
            lines.append("  - **No mutant yet**: nothing shows a check can fail this sentence.")
    return [*lines, ""]


def summary_markdown(coverage: Coverage | None = None) -> list[str]:
    """The spec introduction's paragraph on sentences, with the counts of the map."""
    coverage = coverage or coverage_map()
    observable = len(coverage.observable)
    hidden = "; ".join(f"{s.id} ({s.reason})" for s in coverage.not_observable)
    return [
        "Each clause's registry text is the normative one; its title is a summary. The text is "
        "split into numbered sentences, one requirement each (`RES-5.4` is the fourth of "
        "RES-5), and each page shows, under every clause, the checks that exercise each "
        "sentence, the scenarios they run, and the mutants (deliberately broken trainers) that "
        "prove those checks can fail it. `trainspec explain RES-5` (or `RES-5.4`) prints the "
        "same.",
        "",
        f"**Coverage.** {len(coverage.sentences)} sentences: {observable} observable, of which "
        f"{coverage.with_check} have a check and {coverage.with_mutant} a mutant; "
        f"{len(coverage.not_observable)} not observable: {hidden}.",
        "",
        f"**The registry and the outline.** The clause texts sharpen the one-line outline the "
        f"project started from (`spec-outline.md`); where they differ, the registry text "
        f"holds. The other clauses say what their outline rows say, in other words; these "
        f"{len(OUTLINE_DIFFERENCES)} say more:",
        "",
        *(f"- [{cid}](#{cid.lower()}) {what}." for cid, what in OUTLINE_DIFFERENCES.items()),
        "",
    ]


def _mutant_items(proofs: Sequence[MutantProof]) -> list[str]:
    """One list item per mutant, naming each check it fails and the evidence it must give."""
    by_mutant: dict[str, list[MutantProof]] = {}
    for p in proofs:
        by_mutant.setdefault(p.mutant, []).append(p)
    items = []
    for mutant, group in by_mutant.items():
        fails = "; ".join(f"`{p.check}` with `{p.expect.strip()}`" for p in group)
        items.append(f"  - Proven by the mutant `{mutant}` ({_sentence_end(group[0].slip)}), "
                     f"which fails {fails}.")
    return items


def _quote(text: str) -> str:
    return f"“{text}”"


def _sentence_end(text: str) -> str:
    """A docstring's first sentence, lower-cased at the start, without its full stop."""
    first = text.strip().rstrip(".")
    return first[:1].lower() + first[1:] if first[:2] != first[:2].upper() else first
