"""The command line (a contract, design.md): ``trainspec check | list | explain | matrix``
(and ``audit``, in :mod:`trainspec.conformance.audit_cli`).

Exit status: 0 conformant, 1 not conformant, 2 usage or configuration error, 3 internal error,
130 interrupted. With ``check --baseline FILE``, 0 and 1 say instead whether a clause regressed
against the baseline (:mod:`trainspec.conformance.report.baseline`). ``list`` reads only the clause
registry; the commands that run checks import torch when they start, not before.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import os
import signal
import sys
import textwrap
import threading
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn, TextIO

from trainspec.conformance import api
from trainspec.conformance.api import OPTIONS, Option, option
from trainspec.conformance.audit_cli import add_audit_command
from trainspec.conformance.command import SignalStop, require_writable
from trainspec.conformance.spec import clauses as registry
from trainspec.conformance.spec.links import DOCS_URL_ENV
from trainspec.errors import AdapterError, ConfigError, UsageError

if TYPE_CHECKING:
    from trainspec.conformance.launching import RunPlan
    from trainspec.conformance.report.baseline import Baseline, Comparison
    from trainspec.conformance.spec.results import CheckResult, Report

__all__ = ["main"]

class _Parser(argparse.ArgumentParser):
    """argparse with the project's error prefix; exits 2 on a usage error, as argparse does."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(2, f"trainspec: error: {message}\n")


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status (the console script exits with it).

    Called as the process's command line (``argv`` None), it also becomes a subreaper: any
    process a worker or a run left behind (``setsid``, a daemon started at import) is
    re-parented to it and killed before it exits.
    """
    parser = _build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # --help, or a usage error argparse has already printed
        return e.code if isinstance(e.code, int) else 2
    command: Callable[[argparse.Namespace], int] = args.func
    profile_dir = os.environ.get(PROFILE_DIR_ENV)
    if profile_dir:  # a benchmark's hook (docs/profile-notes.md): every process profiles itself
        from trainspec.conformance.run.session import profiled

        status = profiled(Path(profile_dir), lambda: _main(command, args, argv is None))
    else:
        status = _main(command, args, argv is None)
    if argv is None:  # the process ends here: its reports are written, its workers gone
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        os._exit(status)  # without tearing torch's modules down one by one (~0.2 s)
    return status


# the folder the suite's process, its workers and their runs write cProfile statistics into
PROFILE_DIR_ENV = "TRAINSPEC_PROFILE_DIR"


def _main(command: Callable[[argparse.Namespace], int], args: argparse.Namespace,
          is_process: bool) -> int:
    if is_process:
        from trainspec.conformance.run.child import become_subreaper

        become_subreaper()
    try:
        return _dispatch(command, args, is_final=is_process)
    finally:
        if is_process:
            from trainspec.conformance.run.child import sweep_children

            sweep_children()


def _dispatch(command: Callable[[argparse.Namespace], int], args: argparse.Namespace, *,
              is_final: bool = False) -> int:
    stop = SignalStop(is_final=is_final)
    try:
        with stop.on_signals():
            status = command(args)
        if stop.is_stopped:  # swallowed where no exception escapes (a finalizer): stop anyway
            raise KeyboardInterrupt
        return status
    except KeyboardInterrupt:
        # one path for SIGINT and SIGTERM: the runner has killed the workers, the harness
        # removed its scratch folder (in a finally), and the reports of what was done are out
        name = signal.Signals(stop.signum).name
        print(f"trainspec: interrupted by {name}; worker processes were stopped and the "
              "scratch folder removed", file=sys.stderr)
        return 128 + stop.signum
    except (UsageError, ConfigError, AdapterError) as e:
        print(f"trainspec: error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `trainspec list | head`: the reader left, nothing to report
        _silence_stdout()
        return 0
    except Exception as e:
        code = errno.ENOMEM if isinstance(e, MemoryError) else getattr(e, "errno", None)
        if code in _RESOURCE_ERRNOS:  # the machine's limit, not a bug of the suite
            print(f"trainspec: error: the machine ran out of {_RESOURCE_ERRNOS[code]} ({e}); "
                  "free some and run again", file=sys.stderr)
            return 2
        traceback.print_exc()
        print("trainspec: internal error: the suite itself broke (traceback above). This is a "
              "bug in trainspec; please report it with the traceback and the command line.",
              file=sys.stderr)
        return 3


# harness resources: running out of them is the machine's problem, not the suite's
_RESOURCE_ERRNOS = {errno.ENOSPC: "disk space (ENOSPC)", errno.EMFILE: "file descriptors "
                    "(EMFILE: raise ulimit -n)", errno.ENFILE: "file descriptors (ENFILE)",
                    errno.ENOMEM: "memory (ENOMEM)", errno.EAGAIN: "processes (EAGAIN)"}


# ----------------------------------------------------------------------------------- parser

def _build_parser() -> _Parser:
    parser = _Parser(prog="trainspec", description="Check a PyTorch trainer against the "
                     "trainspec clauses. Exit status: 0 conformant, 1 not conformant, 2 usage "
                     "or configuration error, 3 internal error.")
    from trainspec import __version__

    parser.add_argument("--version", action="version", version=f"trainspec {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    check = sub.add_parser("check", help="run the checks on a trainer and report each clause",
                           description="Run the checks of the selected clauses on a trainer; "
                           "print one line per clause and write the requested reports.")
    check.add_argument("target", nargs="?", default=None, metavar="TARGET",
                       help=option("target").help)
    _add_options(check, [o for o in OPTIONS if o.key != "target"])
    check.add_argument("--report", type=Path, metavar="FILE.json", help="write the JSON report")
    check.add_argument("--junit", type=Path, metavar="FILE.xml", help="write JUnit XML")
    check.add_argument("--markdown", type=Path, metavar="FILE.md", help="write a Markdown report")
    check.add_argument("-v", "--verbose", action="store_true",
                       help="after the table, print every failing check's detail: traceback, "
                       "stuck ranks' stacks, a property check's reproducer")
    check.add_argument("--save-baseline", type=Path, metavar="FILE.json",
                       help="save every checked clause's verdict as a baseline for --baseline")
    check.add_argument("--baseline", type=Path, metavar="FILE.json",
                       help="exit by regressions instead of conformance: 1 only when a clause "
                       "got worse than in this baseline (pass > deviation > n/a > fail > "
                       "timeout > error); list the clauses that got better")
    check.add_argument("--self-test", action="store_true",
                       help="validate the adapter's reports in a few short runs (records, "
                       "0-based epochs, scores, decisions, file roles, crash points): one line "
                       "per problem with its fix; exit 0 when clean, 1 when not")
    check.add_argument("--badge", type=Path, metavar="FILE.json",
                       help="write a shields.io endpoint badge: passing clauses, green when "
                       "conformant, red when not")
    check.set_defaults(func=_cmd_check)

    listing = sub.add_parser("list", help="every clause: ID, level, title",
                             description="List every clause of the spec: ID, level, title.")
    listing.set_defaults(func=_cmd_list)

    explain = sub.add_parser("explain", help="a clause's text, rationale and checks",
                             description="Show a clause's normative text, rationale, what the "
                             "suite observes, and the checks that verify it.")
    explain.add_argument("clause_id", metavar="ID",
                         help="a clause ID such as RES-3, or a sentence ID such as RES-3.2")
    explain.set_defaults(func=_cmd_explain)

    _add_matrix_command(sub)
    add_audit_command(sub)
    return parser


def _add_matrix_command(sub: argparse._SubParsersAction[_Parser]) -> None:
    matrix = sub.add_parser("matrix", help="check every installed built-in target side by side",
                            description="Run `check` on every built-in target whose adapter "
                            "and framework are installed; write matrix.json, matrix.md and "
                            "matrix.html. Exit status 0 once written, whatever the verdicts "
                            "(1 with --compare when a verdict differs from the published one); "
                            "2 when no target could be checked.")
    matrix.add_argument("--out", type=Path, default=Path("trainspec-matrix"), metavar="DIR",
                        help="output folder (default: trainspec-matrix)")
    matrix.add_argument("--targets", metavar="NAMES",
                        help="comma-separated built-in targets (default: every built-in "
                        "target whose framework is installed)")
    _add_options(matrix, [option(k) for k in ("clauses", "world_size", "timeout_s",
                                              "workers", "profile")])
    matrix.add_argument("--compare", type=Path, metavar="MATRIX_JSON",
                        help="then compare every verdict with a published matrix.json (e.g. "
                        "docs/matrix.json): list each difference and exit 1 if any")
    matrix.set_defaults(func=_cmd_matrix)


def _add_options(parser: argparse.ArgumentParser, options: Sequence[Option]) -> None:
    """The options of the shared table (the pytest plugin adds the same ones)."""
    for o in options:
        flags = [o.short, o.flag] if o.short else [o.flag]
        if o.is_switch:
            parser.add_argument(*flags, dest=o.key, action="store_true", help=o.help)
        else:
            parser.add_argument(*flags, dest=o.key, default=o.default, metavar=o.metavar,
                                type=o.convert or str, choices=o.choices, help=o.help)


# ---------------------------------------------------------------------------------- check

def _cmd_check(args: argparse.Namespace) -> int:
    # the plan validates every option before any worker starts
    plan = api.plan_from(lambda o: getattr(args, o.key),
                         docs_url=os.environ.get(DOCS_URL_ENV))
    if args.self_test:
        from trainspec.conformance.selftest import self_test

        tested = self_test(plan)
        print("\n".join(tested.lines(verbose=args.verbose)))
        return 0 if tested.passed else 1
    from trainspec.conformance.launching import check_here  # alone, or one rank of a launch

    return check_here(plan, lambda p, run: _check(p, args, run))


def _check(plan: api.Plan, args: argparse.Namespace, run: RunPlan) -> int:
    from trainspec.conformance.report import text

    baseline = _read_baseline(args.baseline, plan.target.label)  # so does a bad --baseline
    require_writable(args)  # and a report that could not be written
    from trainspec.conformance.runner import Interrupted

    try:
        result = run(plan, _Progress(len(plan.checks), sys.stderr))
    except Interrupted as e:  # what was done is reported; the rest is error "interrupted"
        with contextlib.suppress(Exception):
            _write_reports(e.report, args)
        raise
    print(text.format_table(result, color=_use_color(sys.stdout)))
    if args.verbose:
        details = text.format_details(result)
        if details:
            print("\n" + details)
    comparison = None
    if baseline is not None:
        from trainspec.conformance.report.baseline import compare

        comparison = compare(result, baseline)
        print(comparison.format())
    _write_reports(result, args, comparison)
    if comparison is not None:
        return comparison.exit_status
    return 0 if result.conformant else 1


def _read_baseline(path: Path | None, target: str) -> Baseline | None:
    """The ``--baseline`` file, checked against the target this run names."""
    if path is None:
        return None
    from trainspec.conformance.report.baseline import read_baseline

    baseline = read_baseline(path)
    baseline.require_target(target)
    return baseline


def _write_reports(result: Report, args: argparse.Namespace,
                   comparison: Comparison | None = None) -> None:
    from trainspec.conformance.report import json_io, junit, text

    if args.report is not None:
        json_io.write_json(result, args.report)
    if args.junit is not None:
        junit.write_junit(result, args.junit)
    if args.markdown is not None:
        text.write_markdown(result, args.markdown, baseline=comparison)
    if args.save_baseline is not None:
        from trainspec.conformance.report.baseline import write_baseline

        saved = write_baseline(result, args.save_baseline)
        print(f"trainspec: saved the verdicts of {len(saved.verdicts)} clauses to "
              f"{args.save_baseline} (compare later runs with --baseline)", file=sys.stderr)
    if args.badge is not None:
        from trainspec.conformance.report.badge import write_badge

        write_badge(result, args.badge)
    text.append_step_summary(result, os.environ.get("GITHUB_STEP_SUMMARY"), baseline=comparison)


class _Progress:
    """One short line per completed check: ``[ 3/15] passed  check_... 0.12s``."""

    def __init__(self, total: int, stream: TextIO) -> None:
        self.total, self.stream = total, stream
        self.done = 0
        self._lock = threading.Lock()  # results may arrive from parallel workers

    def __call__(self, result: CheckResult) -> None:
        with self._lock:
            self.done += 1
            width = len(str(max(self.total, self.done)))
            print(f"[{self.done:>{width}}/{self.total}] {result.outcome:<7} {result.name} "
                  f"{result.duration_s:.2f}s", file=self.stream, flush=True)


def _use_color(stream: TextIO) -> bool:
    return stream.isatty() and not os.environ.get("NO_COLOR")


# ---------------------------------------------------------------------------- list, explain

def _cmd_list(args: argparse.Namespace) -> int:
    width = max(len(c.id) for c in registry.CLAUSES)
    for clause in registry.CLAUSES:
        print(f"{clause.id:<{width}}  {clause.level:<6}  {clause.title}")
    return 0


def _cmd_explain(args: argparse.Namespace) -> int:
    clause = registry.get(args.clause_id.partition(".")[0])  # "RES-5" of "RES-5.2" too
    from trainspec.conformance.checks import CHECKS
    from trainspec.conformance.checks.coverage import explain_lines

    def para(label: str, text: str) -> str:
        return textwrap.fill(text, width=88, initial_indent=f"{label:<12}",
                             subsequent_indent=" " * 12)

    lines = [f"{clause.id} ({clause.level}): {clause.title}",
             f"family: {clause.family}, {registry.FAMILY_TITLES[clause.family]}", "",
             para("Text:", clause.text), para("Rationale:", clause.rationale),
             para("Observable:", clause.observable), "", "Checks:"]
    checks = [spec for spec in CHECKS.values() if clause.id in spec.clauses]
    lines += [f"  {spec.name}: {spec.doc}" for spec in checks] or ["  no check yet"]
    lines += explain_lines(args.clause_id)  # each sentence, its checks and mutants
    print("\n".join(lines))
    return 0


# ----------------------------------------------------------------------------------- matrix

def _cmd_matrix(args: argparse.Namespace) -> int:
    from trainspec.conformance.report import matrix as matrices
    from trainspec.conformance.report import matrix_files
    from trainspec.conformance.report.text import format_summary

    registry.select(args.clauses)  # a bad --clauses fails before any worker starts
    # read before the run: a bad file fails in a second
    published = None if args.compare is None else matrices.read_published(args.compare)
    names = None if args.targets is None else [
        n.strip() for n in args.targets.split(",") if n.strip()]
    result = api.check_matrix(
        names, clauses=args.clauses, world_size=args.world_size, timeout_s=args.timeout_s,
        workers=args.workers, profile=args.profile,
        progress=lambda line: print(line, file=sys.stderr, flush=True))
    if not result.reports:
        raise UsageError("matrix: no built-in target could be checked (not installed: "
                         + "; ".join(f"{n}: {why}" for n, why in result.not_installed.items())
                         + "). Install a framework, e.g. pip install 'trainspec[lightning]'.")
    written = matrix_files.write(result, args.out)
    width = max(len(n) for n in [*result.reports, *result.not_installed])
    for name, r in result.reports.items():
        print(f"{name + ':':<{width + 1}} {format_summary(r)}")
    for name, why in result.not_installed.items():
        print(f"{name + ':':<{width + 1}} not installed ({why})")
    print(f"wrote {', '.join(str(p) for p in written)}")
    if published is not None:
        changed = matrices.differences(published, result)
        for line in changed:
            print(f"changed: {line}")
        if changed:
            print(f"{len(changed)} difference(s) from {args.compare}: remake the published "
                  "matrix (`trainspec matrix --out docs`) if they are meant")
            return 1
        print(f"same verdicts as {args.compare}")
    return 0


def _silence_stdout() -> None:
    # Python flushes stdout at exit; point it at /dev/null so that flush cannot fail again.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
