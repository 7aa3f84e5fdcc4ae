"""``trainspec audit RUN_DIR [MORE ...]``: the command line of the audit (design.md).

The same reports (``--report``, ``--junit``, ``--markdown``), deviations, baselines and exit
status as ``check``: 0 conformant, 1 not conformant (with ``--baseline``: 1 when a clause
regressed), 2 a usage error (no log, a log that does not read, logs that are not one run).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

__all__ = ["add_audit_command"]


def add_audit_command(sub: argparse._SubParsersAction[Any]) -> None:
    audit = sub.add_parser(
        "audit", help="judge a real, recorded training run against the clauses it can show",
        description="Judge the run that audit logs record (a run folder holding "
        "trainspec-audit/, its resumes' folders, or log files) against every clause one run "
        "can show; the others are n/a. Exit status as for check.")
    audit.add_argument("paths", nargs="+", type=Path, metavar="RUN_DIR",
                       help="a run folder, a folder of run folders, or a log file; give a "
                       "resumed run's folders together")
    audit.add_argument("--deviations", type=Path, metavar="FILE.toml",
                       help="clauses the trainer declares it does not meet (TOML)")
    for flag, metavar, what in (("--report", "FILE.json", "the JSON report"),
                                ("--junit", "FILE.xml", "JUnit XML"),
                                ("--markdown", "FILE.md", "a Markdown report"),
                                ("--save-baseline", "FILE.json", "the verdicts as a baseline"),
                                ("--baseline", "FILE.json", "exit by regressions against "
                                 "this baseline instead of by conformance")):
        audit.add_argument(flag, type=Path, metavar=metavar, help=f"write {what}"
                           if not flag.endswith("baseline") or flag.startswith("--save")
                           else what)
    audit.set_defaults(func=_cmd_audit)


def _cmd_audit(args: argparse.Namespace) -> int:
    from trainspec.conformance.audit import audit
    from trainspec.conformance.deviations import load_deviations
    from trainspec.conformance.report import json_io, junit, text
    from trainspec.conformance.report.baseline import compare, read_baseline, write_baseline

    deviations = {} if args.deviations is None else load_deviations(args.deviations)
    baseline = None if args.baseline is None else read_baseline(args.baseline)
    report = audit(args.paths, deviations=deviations)
    if baseline is not None:
        baseline.require_target(report.target)
    print(text.format_table(report, color=sys.stdout.isatty() and not os.environ.get(
        "NO_COLOR")))
    comparison = None if baseline is None else compare(report, baseline)
    if comparison is not None:
        print(comparison.format())
    if args.report is not None:
        json_io.write_json(report, args.report)
    if args.junit is not None:
        junit.write_junit(report, args.junit)
    if args.markdown is not None:
        text.write_markdown(report, args.markdown, baseline=comparison)
    if args.save_baseline is not None:
        write_baseline(report, args.save_baseline)
    text.append_step_summary(report, os.environ.get("GITHUB_STEP_SUMMARY"),
                             baseline=comparison)
    if comparison is not None:
        return comparison.exit_status
    return 0 if report.conformant else 1
