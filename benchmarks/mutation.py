"""The suite's reach, measured: single-point mutants of the reference, each checked by the suite.

cosmic-ray (an existing mutation-testing engine) makes the mutants: its operators walk the
reference's source (parso trees) and each mutant is one operator applied at one position. Why
cosmic-ray and not mutmut: cosmic-ray's mutant is the module's source, written to a file, so
every process that imports it runs it (the check's worker, the run forked from it, the ranks of
a multi-rank run, a generated run forked from a property child); mutmut 3 switches mutants by
an environment variable read in trampolines that only its own pytest run sets up, and the
suite's forked runs are not pytest. cosmic-ray's own runner mutates the file in place, one
mutant at a time; this module keeps its operators and its mutation of the code and runs the
mutants itself, each in a package tree of its own (``trainspec`` with the mutated
``reference``, the rest the project's own files), so two run at once, and a run that is cut
short leaves the project's files untouched.

A mutant is checked by ``trainspec check reference`` on the clauses whose runs execute the
mutated lines (the map: each clause's check run once under the suite's profiler,
``TRAINSPEC_PROFILE_DIR``, with ``TRAINSPEC_TRACE_LINES`` noting every line of the reference
run, in every process its runs take, the generated runs forked from a property's child and the
forked file reads included; the reference functions each clause's runs call are noted too, the
map a mutant falls back on where a file has no line map). A mutant whose lines no clause's
runs execute is not run: no run can differ from the reference's (``unexecuted``, triaged as a
survivor is: what the spec asks of those lines, if anything, is a scenario no check makes).
Killed: a check failed, errored or timed out (the check's process is
ended at the first such check's progress line: the rest need not run, so a killed mutant costs
a few seconds; a ``--fresh`` run checks each mutant first on the clauses that killed it last
time, an order that changes no outcome). Survived: every clause passed. Each survivor is
triaged in ``benchmarks/mutation_triage.toml``: *equivalent* (why no observable can change),
*outside* (what changes is something no clause speaks of: a log, a message, a folder the runs
never need), *unreached* (the line runs only on hardware the machine lacks: CUDA),
*unobservable* (what breaks is only a sentence the spec's sentence map declares unobservable,
named in the triage and checked there: the fsync of a write, which only a power loss shows), or
*gap* (a slip the suite misses: a check to write). Only gaps count against the score.

Mutations no run can observe are not generated: a type annotation (never evaluated: every
module has ``from __future__ import annotations``) and an ``if TYPE_CHECKING:`` block.

    python -m benchmarks.mutation map                  # the clause and line map (minutes),
                                                       # again whenever the reference or a
                                                       # check changes
    python -m benchmarks.mutation run                  # every mutant, resumable, -j 2
    python -m benchmarks.mutation run --fresh          # every mutant again (each first on the
                                                       # clauses that killed it last time)
    python -m benchmarks.mutation run --sample 30 --seed 0 --killed-before --require-killed
                                                       # the CI sample
    python -m benchmarks.mutation report               # docs/mutation.md from the results
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import hashlib
import json
import os
import pstats
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
from collections import Counter
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from trainspec.conformance.run.profiling import TRACE_LINES_ENV

__all__ = ["FILES", "OPERATORS", "Mutant", "Outcome", "clause_map", "generate", "main"]

ROOT = Path(__file__).resolve().parent.parent
# the reference's loop, checkpoint, resume, patience, best-selection, debug and distributed code
FILES = ("reference/trainer.py", "reference/checkpoint.py", "reference/distributed.py")
_SAME = ("AddNot", "ReplaceTrueWithFalse", "ReplaceFalseWithTrue", "ReplaceAndWithOr",
         "ReplaceOrWithAnd", "ReplaceBreakWithContinue", "ReplaceContinueWithBreak",
         "NumberReplacer", "ZeroIterationForLoop", "RemoveDecorator",
         "ReplaceUnaryOperator_Delete_Not", "ReplaceUnaryOperator_Delete_USub",
         "ReplaceUnaryOperator_USub_UAdd")
# arithmetic: each operator replaced by its nearest neighbour, not by all ten others
_BINARY = ("Add_Sub", "Sub_Add", "Mul_Div", "Div_Mul", "FloorDiv_Div", "Div_FloorDiv",
           "Mod_FloorDiv", "Pow_Mul", "BitOr_BitAnd", "BitAnd_BitOr")
# comparisons: the boundary flip and the negation of each
_COMPARE = ("Lt_LtE", "LtE_Lt", "Gt_GtE", "GtE_Gt", "Lt_GtE", "Gt_LtE", "LtE_Gt", "GtE_Lt",
            "Eq_NotEq", "NotEq_Eq", "Is_IsNot", "IsNot_Is")
OPERATORS = (*(f"core/{n}" for n in _SAME), *(f"core/ReplaceBinaryOperator_{n}" for n in _BINARY),
             *(f"core/ReplaceComparisonOperator_{n}" for n in _COMPARE))
# triage kinds left out of the score (unreached: the line runs only on hardware this machine
# lacks, CUDA; a GPU session judges it)
_UNSCORED = ("equivalent", "outside", "unreached", "unobservable")
_KINDS = (*_UNSCORED, "gap")
MAP_PATH = ROOT / "benchmarks" / "mutation_map.json"
TRIAGE_PATH = ROOT / "benchmarks" / "mutation_triage.toml"
RESULTS_PATH = ROOT / "benchmarks" / "mutation_results.jsonl"
NEXT_RESULTS_PATH = ROOT / "benchmarks" / "mutation_results.next.jsonl"  # a --fresh run
DOC_PATH = ROOT / "docs" / "mutation.md"
_CHECK_TIMEOUT_S = 600.0  # one mutant's whole check
_RUN_TIMEOUT_S = 30  # each run of it (the reference's take well under a second)


@dataclass(frozen=True, slots=True)
class Mutant:
    """One operator applied at one position of one file."""

    id: str  # FILE:OPERATOR:OCCURRENCE (stable while the file does not change)
    file: str
    operator: str
    occurrence: int
    line: int
    function: str  # the innermost function's qualified name, "" at module or class level
    before: str  # the mutated line as it is
    end_line: int = 0  # the mutated code's last line (0: ``line``)

    def after(self) -> str:
        """The mutated line as the mutant has it."""
        lines = mutated_source(self).splitlines()
        return lines[self.line - 1].strip() if self.line - 1 < len(lines) else ""


@dataclass(frozen=True, slots=True)
class Outcome:
    id: str
    # killed, survived, timeout (killed by the bound: the check hung), error (the check broke),
    # incompetent (the mutated code is not Python: never run, not scored), unexecuted (no
    # clause's runs execute the mutated lines, per the line map: never run, triaged as a
    # survivor is)
    status: str
    clauses: list[str]  # the clauses it was checked on
    failed: list[str]  # the clauses whose verdict was fail, error or timeout
    seconds: float
    detail: str = ""


# ------------------------------------------------------------------------------- generate


def _unobservable(tree: ast.Module) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """Source ranges no run evaluates: annotations, ``if TYPE_CHECKING:`` blocks."""
    spans: list[ast.expr | ast.stmt] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.arg | ast.AnnAssign) and node.annotation is not None:
            spans.append(node.annotation)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.returns:
            spans.append(node.returns)
        elif isinstance(node, ast.If) and isinstance(node.test, ast.Name) \
                and node.test.id == "TYPE_CHECKING":
            spans.append(node)
    return [((s.lineno, s.col_offset), (s.end_lineno or s.lineno, s.end_col_offset or 0))
            for s in spans]


def _functions(tree: ast.Module) -> list[tuple[int, int, int, str]]:
    """(first line with decorators, def line, last line, qualified name) of every function."""
    found: list[tuple[int, int, int, str]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    first = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                    found.append((first, child.lineno, child.end_lineno or child.lineno, name))
                visit(child, f"{name}.")

    visit(tree, "")
    return found


def _innermost(functions: Sequence[tuple[int, int, int, str]], line: int) -> str:
    inside = [f for f in functions if f[0] <= line <= f[2]]
    return max(inside, key=lambda f: f[0])[3] if inside else ""


def generate(files: Sequence[str] = FILES) -> list[Mutant]:
    """Every mutant of ``files`` under :data:`OPERATORS`, in a stable order."""
    from cosmic_ray.ast import ast_nodes, get_ast
    from cosmic_ray.plugins import get_operator

    mutants: list[Mutant] = []
    for file in files:
        source = (ROOT / file).read_text()
        lines = source.splitlines()
        tree = ast.parse(source)
        hidden, functions = _unobservable(tree), _functions(tree)
        for name in OPERATORS:
            operator = get_operator(name)()
            occurrence = 0
            for node in ast_nodes(get_ast(source)):
                for start, end in operator.mutation_positions(node):
                    index, occurrence = occurrence, occurrence + 1
                    if any(a <= start and end <= b for a, b in hidden):
                        continue
                    line = start[0]
                    mutants.append(Mutant(
                        id=f"{file}:{name.removeprefix('core/')}:{index}", file=file,
                        operator=name.removeprefix("core/"), occurrence=index, line=line,
                        function=_innermost(functions, line), before=lines[line - 1].strip(),
                        end_line=end[0]))
    return mutants


def mutated_source(mutant: Mutant) -> str:
    from cosmic_ray.mutating import mutate_code
    from cosmic_ray.plugins import get_operator

    code = mutate_code((ROOT / mutant.file).read_text(),
                       get_operator(f"core/{mutant.operator}")(), mutant.occurrence)
    if code is None:
        raise SystemExit(f"mutant {mutant.id}: the operator no longer applies there (the "
                         "file changed since the mutants were listed); run again")
    return str(code)


# ----------------------------------------------------------------------------- the clause map


_PROGRESS = re.compile(r"^\[\s*\d+/\d+\] (failed|error|timeout)\s+(\S+) ")


def _check(args: Sequence[str], *, env: dict[str, str], cwd: Path, timeout_s: float,
           stop_at_failure: bool = False) -> tuple[int | None, str, list[str]]:
    """``python -m trainspec check ARGS`` in its own process group: (exit status, or None when
    it outlived ``timeout_s``; the output's tail; the checks its progress lines show failing).
    ``stop_at_failure``: the check is ended at the first failing check's progress line (the
    status is then 1): a mutant is killed once one check fails, the rest need not run."""
    proc = subprocess.Popen([sys.executable, "-m", "trainspec", "check", *args], cwd=cwd,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    assert proc.stdout is not None
    lines: list[str] = []
    failing: list[str] = []
    timer = threading.Timer(timeout_s, lambda: _kill_group(proc.pid))
    timer.start()
    try:
        for line in proc.stdout:
            lines.append(line)
            found = _PROGRESS.match(line)
            if found:
                failing.append(found.group(2))
                if stop_at_failure:
                    break
    finally:
        timer.cancel()
        _kill_group(proc.pid)  # strays of the check's group, or the rest of its checks
        proc.stdout.close()
        code = proc.wait()
    out = "".join(lines)[-4000:]
    if failing and stop_at_failure:
        return 1, out, failing
    return (None if code == -signal.SIGKILL else code), out, failing


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def clause_map(jobs: int = 2, say: Any = print) -> dict[str, Any]:
    """Which clauses' check runs reach what: ``functions``, each reference function
    (``FILE:QUALNAME``) -> the clauses whose runs call it; ``lines``, each reference file ->
    each line -> the clauses whose runs execute it."""
    clauses = _every_clause()
    funcs = {f: _functions(ast.parse((ROOT / f).read_text())) for f in FILES}
    called: dict[str, set[str]] = {}
    ran: dict[str, dict[int, set[str]]] = {f: {} for f in FILES}

    def one(clause: str) -> None:
        with tempfile.TemporaryDirectory(prefix="trainspec-map-") as tmp:
            env = {**os.environ, "TRAINSPEC_PROFILE_DIR": str(Path(tmp) / "prof"),
                   TRACE_LINES_ENV: str((ROOT / "reference").resolve())}
            code, out, _ = _check(["reference", "--clauses", clause, "-n", "1"], env=env,
                                  cwd=Path(tmp), timeout_s=_CHECK_TIMEOUT_S)
            if code != 0:
                raise SystemExit(f"the reference does not pass {clause} (exit {code}):\n{out}")
            for prof in Path(tmp, "prof").glob("*.prof"):
                for filename, first, _ in pstats.Stats(str(prof)).stats:  # type: ignore[attr-defined]
                    rel = _relative(filename)
                    if rel in funcs:
                        for start, at, _end, name in funcs[rel]:
                            if start <= first <= at:
                                called.setdefault(f"{rel}:{name}", set()).add(clause)
            for noted in Path(tmp, "prof").glob("*.lines"):
                for filename, lines in json.loads(noted.read_text()).items():
                    rel = _relative(filename)
                    if rel in ran:
                        for line in lines:
                            ran[rel].setdefault(int(line), set()).add(clause)
        say(f"  mapped {clause}")

    with ThreadPoolExecutor(jobs) as pool:
        list(pool.map(one, clauses))
    order = clauses.index
    return {"sources": _sources(),
            "functions": {k: sorted(v, key=order) for k, v in sorted(called.items())},
            "lines": {f: {str(n): sorted(ran[f][n], key=order) for n in sorted(ran[f])}
                      for f in FILES}}


def _sources() -> dict[str, str]:
    """Each mutated file's SHA-256: a line map is only true of the source it was made from."""
    return {f: hashlib.sha256((ROOT / f).read_bytes()).hexdigest() for f in FILES}


def load_map(path: Path = MAP_PATH) -> dict[str, Any]:
    """The clause and line map, refused when missing or made from other sources (its lines
    would name other code: a mutant could be skipped, or checked on the wrong clauses)."""
    if not path.exists():
        raise SystemExit(f"{path.name} is missing: make it with python -m benchmarks.mutation "
                         "map")
    mapping: dict[str, Any] = json.loads(path.read_text())
    changed = [f for f, digest in _sources().items()
               if mapping.get("sources", {}).get(f) != digest]
    if changed:
        raise SystemExit(f"{path.name} was made from other sources of {', '.join(changed)}: "
                         "make it again with python -m benchmarks.mutation map (minutes)")
    return mapping


def _relative(filename: str) -> str:
    real = os.path.realpath(filename)
    with contextlib.suppress(ValueError):
        return Path(real).relative_to(ROOT).as_posix()
    return ""


# ---------------------------------------------------------------------------------- running


@contextlib.contextmanager
def _tree() -> Iterator[Path]:
    """A package tree of its own: ``trainspec`` as the project's, with ``reference`` a copy."""
    root = Path(tempfile.mkdtemp(prefix="trainspec-mutant-"))
    try:
        package = root / "trainspec"
        package.mkdir()
        for entry in (ROOT / "trainspec").iterdir():
            if entry.name in ("reference", "__pycache__"):
                continue
            (package / entry.name).symlink_to(entry.resolve())
        shutil.copytree(ROOT / "reference", package / "reference",
                        ignore=shutil.ignore_patterns("__pycache__"))
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def check_mutant(mutant: Mutant, clauses: Sequence[str] | None, tree: Path,
                 first: Sequence[str] = ()) -> Outcome:
    """Write the mutant into ``tree`` and check it on ``clauses``; the file is restored.
    ``first``: clauses checked on their own before the rest (those that killed it before).
    ``clauses`` None: no clause's runs execute the mutated lines (the line map), so no run
    can differ: not run (``unexecuted``), unless some clause killed it before."""
    if clauses is None and not first:
        span = f"{mutant.line}" if mutant.end_line <= mutant.line else \
            f"{mutant.line}-{mutant.end_line}"
        return Outcome(id=mutant.id, status="unexecuted", clauses=[], failed=[], seconds=0.0,
                       detail=f"no clause's runs execute line {span} (the line map)")
    clauses = list(clauses or ())  # [] (or None, killed before): every clause
    target = tree / "trainspec" / mutant.file
    original, code_text = target.read_text(), mutated_source(mutant)
    try:
        compile(code_text, mutant.file, "exec")
    except SyntaxError as e:  # the operator broke the syntax (a `/` of positional-only args)
        return Outcome(id=mutant.id, status="incompetent", clauses=list(clauses), failed=[],
                       seconds=0.0, detail=f"not Python: {e}")
    target.write_text(code_text)
    shutil.rmtree(target.parent / "__pycache__", ignore_errors=True)
    began = time.monotonic()
    try:
        code, out, failed = _check_tree(tree, first) if first else (0, "", [])
        rest = [c for c in clauses or _every_clause() if c not in first]
        if code == 0 and rest:
            code, out, failed = _check_tree(tree, rest)
    finally:
        target.write_text(original)
    seconds = round(time.monotonic() - began, 1)
    if code is None:
        status = "timeout"
    elif code == 0:
        status = "survived"
    elif code == 1 and failed:
        status = "killed"
    else:
        status = "error"  # the check itself broke (a usage or internal error): not a kill
    # the output's last line, the tree's path taken out (the results file is published)
    last = next((x for x in reversed(out.splitlines()) if x.strip()), "")
    return Outcome(id=mutant.id, status=status, clauses=list(clauses), failed=failed,
                   seconds=seconds, detail="" if status in ("killed", "survived") else
                   last.replace(str(tree), "<tree>")[-500:])


def _every_clause() -> list[str]:
    from trainspec.conformance.spec.clauses import select

    return list(select(None))


def _check_tree(tree: Path, clauses: Sequence[str]) -> tuple[int | None, str, list[str]]:
    """One ``trainspec check`` of the tree's reference on ``clauses`` (none: every clause),
    ended at its first failing check: (exit status, output, the clauses of the checks that
    failed, errored or timed out)."""
    from trainspec.conformance.checks import CHECKS

    with tempfile.TemporaryDirectory(prefix="run-", dir=tree) as work:
        env = {**os.environ, "PYTHONPATH": str(tree)}
        env.pop("TRAINSPEC_PROFILE_DIR", None)
        args = ["reference", "-n", "1", "--timeout", str(_RUN_TIMEOUT_S)]
        if clauses:
            args += ["--clauses", ",".join(clauses)]
        code, out, failing = _check(args, env=env, cwd=Path(work), timeout_s=_CHECK_TIMEOUT_S,
                                    stop_at_failure=True)
    failed = [c for name in failing if name in CHECKS for c in CHECKS[name].clauses]
    return code, out, list(dict.fromkeys(failed))


def clauses_for(mutant: Mutant, mapping: dict[str, Any]) -> list[str] | None:
    """The clauses whose runs execute the mutated lines, where the map has the file's lines
    (None: no clause's runs execute them); else those whose runs call the mutant's function
    ([]: every clause, for a mutant outside any function)."""
    lines = mapping.get("lines", {}).get(mutant.file)
    if lines is not None:
        found = {c for n in range(mutant.line, max(mutant.line, mutant.end_line) + 1)
                 for c in lines.get(str(n), ())}
        order = _every_clause()
        return sorted(found, key=order.index) or None
    functions = mapping.get("functions", {})
    return functions.get(f"{mutant.file}:{mutant.function}", []) if mutant.function else []


def run(mutants: Sequence[Mutant], mapping: dict[str, Any], results: Path, *,
        jobs: int, say: Any = print, first: dict[str, list[str]] | None = None
        ) -> list[Outcome]:
    """Check every mutant not in ``results`` yet, ``jobs`` at once, appending each outcome as
    it comes (an interrupted run resumes where it stopped). ``first``: mutant ID -> clauses
    to check it on before the rest."""
    # an outcome whose check broke is no verdict on the mutant: checked again
    done = {o.id: o for o in load_results(results) if o.status != "error"}
    todo = [m for m in mutants if m.id not in done]
    say(f"{len(mutants)} mutants: {len(mutants) - len(todo)} checked before, {len(todo)} to "
        f"check, {jobs} at a time")
    lock = threading.Lock()
    counts: Counter[str] = Counter(done[m.id].status for m in mutants if m.id in done)
    began = time.monotonic()
    checked = [0]  # outcomes of this run

    def one(mutant: Mutant) -> Outcome:
        with lock:
            tree = free.pop()
        try:
            outcome = check_mutant(mutant, clauses_for(mutant, mapping), tree,
                                   (first or {}).get(mutant.id, ()))
        finally:
            with lock:
                free.append(tree)
        with lock:
            with results.open("a") as f:
                f.write(json.dumps(asdict(outcome)) + "\n")
            counts[outcome.status] += 1
            checked[0] += 1
            n = checked[0]
            left = (time.monotonic() - began) / n * (len(todo) - n)
            say(f"[{n}/{len(todo)}] {outcome.status:<8} {mutant.id} ({outcome.seconds:.0f} s; "
                f"{', '.join(f'{k} {v}' for k, v in sorted(counts.items()))}; about "
                f"{left / 60:.0f} min left)")
        return outcome

    with contextlib.ExitStack() as stack, ThreadPoolExecutor(jobs) as pool:
        free = [stack.enter_context(_tree()) for _ in range(jobs)]
        list(pool.map(one, todo))
    done = {o.id: o for o in load_results(results)}
    return [done[m.id] for m in mutants if m.id in done]


def load_results(path: Path) -> list[Outcome]:
    if not path.exists():
        return []
    return [Outcome(**json.loads(line)) for line in path.read_text().splitlines() if line]


def sample(mutants: Sequence[Mutant], n: int, seed: int) -> list[Mutant]:
    """A fixed, seeded sample of ``n`` mutants (the same for the same mutants and seed)."""
    return sorted(random.Random(seed).sample(list(mutants), min(n, len(mutants))),
                  key=mutants.index)


# ----------------------------------------------------------------------------------- report


def load_triage(path: Path = TRIAGE_PATH) -> dict[str, dict[str, str]]:
    """mutant ID -> {"kind": one of equivalent, outside, unreached, unobservable, gap, "why":
    ...}; an unobservable mutant names, in ``sentence``, the sentence it breaks, which the
    spec's sentence map must declare unobservable."""
    if not path.exists():
        return {}
    from trainspec.conformance.spec.sentences import SENTENCES

    unobservable = {s.id for s in SENTENCES if not s.observable}
    triage: dict[str, dict[str, str]] = {}
    for key, v in tomllib.loads(path.read_text()).get("mutant", {}).items():
        kind, sentence = str(v.get("kind", "")), str(v.get("sentence", ""))
        if kind not in _KINDS:
            raise SystemExit(f"{path.name}: mutant {key}: kind {kind!r} is not one of "
                             f"{', '.join(_KINDS)}")
        if kind == "unobservable" and sentence not in unobservable:
            raise SystemExit(f"{path.name}: mutant {key} is triaged unobservable, so its "
                             f"`sentence` must name a sentence the sentence map declares "
                             f"unobservable ({', '.join(sorted(unobservable))}); found "
                             f"{sentence or 'none'}")
        triage[str(key)] = {"kind": kind, "why": str(v["why"]), "sentence": sentence}
    return triage


def render(mutants: Sequence[Mutant], outcomes: Sequence[Outcome],
           triage: dict[str, dict[str, str]], *, wall_s: float | None, wall_n: int = 0,
           wall_fresh: bool = False) -> str:
    by_id = {o.id: o for o in outcomes}
    counts = Counter(by_id[m.id].status for m in mutants if m.id in by_id)
    checked = sum(counts.values())
    survivors = [m for m in mutants if m.id in by_id
                 and by_id[m.id].status in ("survived", "unexecuted")]
    equivalent = [m for m in survivors if triage.get(m.id, {}).get("kind") in _UNSCORED]
    outside = sum(1 for m in survivors if triage.get(m.id, {}).get("kind") in _UNSCORED[1:])
    killed = counts["killed"] + counts["timeout"]
    scored = checked - len(equivalent) - counts["incompetent"]
    lines = [
        "# Mutation score of the reference",
        "",
        "Made by `python -m benchmarks.mutation report` from the results of "
        "`python -m benchmarks.mutation run` (see `benchmarks/mutation.py` for the method:",
        "cosmic-ray's operators, each mutant checked by `trainspec check reference` on the "
        "clauses whose runs execute the mutated lines, the generated runs' processes "
        "included). Do not edit by hand.",
        "",
        f"- Files: {', '.join(f'`{f}`' for f in FILES)}",
        f"- Operators ({len(OPERATORS)}): "
        + ", ".join(f"`{o.removeprefix('core/')}`" for o in OPERATORS),
        f"- Mutants generated: {len(mutants)}; checked: {checked}"
        + ("" if checked == len(mutants) else
           f" (**{len(mutants) - checked} not checked yet**: the score is of those checked)"),
        f"- Killed: {counts['killed']} (a clause failed), by the bound: {counts['timeout']}; "
        f"survived: {counts['survived']}, and {counts['unexecuted']} on lines no clause's runs "
        f"execute (the line map: not run) ({len(equivalent) - outside} triaged equivalent, "
        f"{outside} outside the spec, unreached on this machine or unobservable, "
        f"{sum(1 for m in survivors if triage.get(m.id, {}).get('kind') == 'gap')} gaps, "
        f"{sum(1 for m in survivors if m.id not in triage)} not triaged); the check "
        f"broke: {counts['error']}; not Python (an operator broke the syntax, not scored): "
        f"{counts['incompetent']}",
        f"- **Score: {killed} of {scored} scored mutants killed "
        f"({100 * killed / scored if scored else 0:.1f}%)** (equivalent, outside, "
        "unreached and unobservable mutants are not scored)",
    ]
    if wall_s is not None:
        lines.append(f"- Wall time of the last run: {wall_s / 60:.1f} min"
                     + (f" ({wall_n} mutants, two at a time"
                        + (", `run --fresh`: each first on the clauses that killed it in the "
                           "run before" if wall_fresh else "") + ")" if wall_n else ""))
    lines.append("- In CI (`.ci/run`): a fixed sample of 30 of the killed mutants, `python -m "
                 "benchmarks.mutation run --sample 30 --seed 0 --killed-before "
                 "--require-killed`, each checked first on the clauses that killed it; CI "
                 "fails unless every one is killed again")
    lines += ["", "## Per file", "", "| file | mutants | checked | killed | survived |",
              "|---|---:|---:|---:|---:|"]
    for file in FILES:
        ms = [m for m in mutants if m.file == file]
        st = Counter(by_id[m.id].status for m in ms if m.id in by_id)
        lines.append(f"| `{file}` | {len(ms)} | {sum(st.values())} | "
                     f"{st['killed'] + st['timeout']} | {st['survived']} |")
    lines += ["", "## Survivors, triaged", ""]
    if not survivors:
        lines.append("None.")
    for m in survivors:
        t = triage.get(m.id)
        kind = t["kind"] if t else "not triaged"
        ran = "no clause's runs execute it, not run" \
            if by_id[m.id].status == "unexecuted" else \
            f"checked on {_clauses_text(by_id[m.id].clauses)}"
        lines += [f"- `{m.id}` (line {m.line}, `{m.function or 'module level'}`): "
                  f"`{m.before}` → `{m.after()}`; {ran}. **{kind}**"
                  + (f" (sentence {t['sentence']})" if t and t.get("sentence") else "")
                  + (f": {t['why']}" if t else "")]
    broke = [m for m in mutants if m.id in by_id and by_id[m.id].status == "error"]
    if broke:
        lines += ["", "## Mutants whose check broke (not counted as killed)", ""]
        lines += [f"- `{m.id}`: `{m.before}` → `{m.after()}`" for m in broke]
    return "\n".join(lines) + "\n"


def _clauses_text(clauses: Sequence[str]) -> str:
    if not clauses:
        return "every clause"
    return ", ".join(clauses) if len(clauses) <= 6 else f"{len(clauses)} clauses"


# -------------------------------------------------------------------------------------- main


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.mutation",
                                     description=(__doc__ or "").splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    mp = sub.add_parser("map", help="map each reference function to the clauses that run it")
    mp.add_argument("-j", "--jobs", type=int, default=2)
    r = sub.add_parser("run", help="check the mutants (resumable)")
    r.add_argument("-j", "--jobs", type=int, default=2)
    r.add_argument("--sample", type=int, default=None, metavar="N",
                   help="a fixed, seeded sample of N mutants instead of all")
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--killed-before", action="store_true",
                   help="draw the sample from the mutants benchmarks/mutation_results.jsonl "
                        "records as killed (the CI sample: those stay killed)")
    r.add_argument("--ids", default=None, metavar="ID,ID",
                   help="only these mutants (IDs as `list` prints them)")
    r.add_argument("--results", type=Path, default=None, metavar="FILE.jsonl",
                   help="where outcomes are appended (default: benchmarks/"
                        "mutation_results.jsonl; a sample: a temporary file)")
    r.add_argument("--fresh", action="store_true",
                   help="check every mutant again, into benchmarks/mutation_results.next.jsonl "
                        "(resumable), each first on the clauses that killed it in the recorded "
                        "results (an order only: a mutant those no longer kill is checked on "
                        "the rest); once every mutant is checked the new results replace the "
                        "recorded ones")
    r.add_argument("--require-killed", action="store_true",
                   help="exit 1 unless every mutant checked is killed or triaged equivalent "
                        "or outside the spec")
    sub.add_parser("list", help="print every mutant, one JSON object per line")
    p = sub.add_parser("report", help="write docs/mutation.md from the results")
    p.add_argument("--results", type=Path, default=RESULTS_PATH)
    p.add_argument("--wall-min", type=float, default=None,
                   help="the wall time of the run, in minutes, for the report")
    p.add_argument("--wall-mutants", type=int, default=0,
                   help="how many mutants that run checked")
    p.add_argument("--wall-fresh", action="store_true",
                   help="that run was `run --fresh` (each mutant first on its killers)")
    args = parser.parse_args(argv)
    if args.command == "map":
        mapping = clause_map(args.jobs)
        MAP_PATH.write_text(json.dumps(mapping, indent=1) + "\n")
        print(f"wrote {MAP_PATH.relative_to(ROOT)}: {len(mapping['functions'])} functions, "
              f"{sum(map(len, mapping['lines'].values()))} lines")
        return 0
    mutants = generate()
    if args.command == "list":
        for mutant in mutants:
            print(json.dumps(asdict(mutant)))
        return 0
    if args.command == "report":
        DOC_PATH.write_text(render(mutants, load_results(args.results), load_triage(),
                                   wall_s=None if args.wall_min is None
                                   else args.wall_min * 60, wall_n=args.wall_mutants,
                                   wall_fresh=args.wall_fresh))
        print(f"wrote {DOC_PATH.relative_to(ROOT)}")
        return 0
    mapping = load_map()
    pool, first = mutants, {}
    if args.killed_before or args.fresh:  # each checked first on the clauses that killed it
        first = {o.id: o.failed for o in load_results(RESULTS_PATH)
                 if o.status in ("killed", "timeout")}
    if args.killed_before:
        pool = [m for m in mutants if m.id in first]
    chosen = pool if args.sample is None else sample(pool, args.sample, args.seed)
    if args.ids:
        wanted = set(args.ids.split(","))
        unknown = wanted - {m.id for m in mutants}
        if unknown:
            raise SystemExit(f"--ids: no such mutant: {', '.join(sorted(unknown))} (the IDs "
                             "`python -m benchmarks.mutation list` prints)")
        chosen = [m for m in chosen if m.id in wanted]
    began = time.monotonic()
    with contextlib.ExitStack() as stack:
        results = args.results
        if results is None and args.sample is not None:
            results = Path(stack.enter_context(tempfile.TemporaryDirectory())) / "r.jsonl"
        elif results is None and args.fresh:
            results = NEXT_RESULTS_PATH
        outcomes = run(chosen, mapping, results or RESULTS_PATH, jobs=args.jobs,
                       say=lambda s: print(s, file=sys.stderr, flush=True), first=first)
    if args.fresh and results == NEXT_RESULTS_PATH and len(outcomes) == len(chosen) == len(
            mutants):
        NEXT_RESULTS_PATH.replace(RESULTS_PATH)
        print(f"every mutant checked: {RESULTS_PATH.relative_to(ROOT)} replaced")
    triage = load_triage()
    missed = [o for o in outcomes if o.status in ("survived", "unexecuted", "error")
              and triage.get(o.id, {}).get("kind") not in _UNSCORED]
    counts = Counter(o.status for o in outcomes)
    print(f"{len(outcomes)} mutants checked: " +
          ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) +
          f" ({(time.monotonic() - began) / 60:.1f} min this run)")
    for o in missed:
        m = next(x for x in chosen if x.id == o.id)
        print(f"  {o.status}: {o.id} (line {m.line}): {m.before!r} -> {m.after()!r} "
              f"{o.detail[-300:]}")
    return 1 if args.require_killed and missed else 0


if __name__ == "__main__":
    sys.exit(main())
