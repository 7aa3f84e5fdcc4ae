"""``trainspec check`` inside the user's own launch (``torchrun``, ``srun``): one rank each.

Rank 0 judges: it runs every check as the suite does on its own, its multi-rank runs served
by the launched processes (:mod:`trainspec.conformance.run.launched`), and it alone writes
the reports, whose environment names the launcher, the nodes and the world size. Every other
rank serves its rank of those runs (:mod:`trainspec.conformance.run.follower`) and exits with
the status rank 0 ends with, whatever ended it (an error, an interrupt): one status for the
whole job.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from collections.abc import Callable

from trainspec.conformance import api
from trainspec.conformance.api import Plan
from trainspec.conformance.run.launch import Launch
from trainspec.conformance.spec.results import CheckResult, Report
from trainspec.errors import AdapterError, ConfigError, UsageError

__all__ = ["RunPlan", "check_here", "in_launch"]

# the checks' run: the plan and a progress callback -> the report (or Interrupted)
RunPlan = Callable[[Plan, Callable[[CheckResult], None] | None], Report]


def check_here(plan: Plan, judge: Callable[[Plan, RunPlan], int]) -> int:
    """``judge(plan, run)``'s status in a process on its own; this process's part of the
    check (:func:`in_launch`) when torchrun or srun started it as one rank of several."""
    from trainspec.conformance.run.launch import detect_launch

    launch = detect_launch(os.environ)
    if launch is None:
        return judge(plan, lambda p, progress: api.run(p, on_result=progress))
    return in_launch(plan, launch, judge)


def in_launch(plan: Plan, launch: Launch, judge: Callable[[Plan, RunPlan], int]) -> int:
    """The exit status of this process's part of a check in ``launch``.

    ``judge(plan, run)`` is what the command does on its own (run, print, write the reports,
    the status), given the plan for the launch's world and the run to call; it runs on rank 0
    only.
    """
    from trainspec.conformance.run.control import Channel, open_store

    channel = Channel(launch, open_store(launch),
                      beat_store=open_store(launch, is_client=True))
    try:
        if not launch.is_judge:
            from trainspec.conformance.run.follower import Follower

            return Follower(channel).serve()
        return _judge(plan, launch, channel, judge)
    finally:
        channel.close()


def _judge(plan: Plan, launch: Launch, channel: object,
           judge: Callable[[Plan, RunPlan], int]) -> int:
    from trainspec.conformance.run.control import Channel
    from trainspec.conformance.run.harness import Harness
    from trainspec.conformance.run.launched import Ranks
    from trainspec.conformance.runner import Interrupted
    from trainspec.conformance.runner import run as run_checks

    assert isinstance(channel, Channel)
    ranks = Ranks.greet(launch, channel)
    # every multi-rank run spans the launch: its world size is the launch's; one lane, since
    # the launched ranks serve one run at a time
    launched = dataclasses.replace(plan, world_size=launch.world_size, workers=1)
    if plan.world_size != launch.world_size:
        print(f"trainspec: the launch has {launch.world_size} ranks: the multi-rank runs use "
              f"all of them (--world-size {plan.world_size} set aside)", file=sys.stderr)
    status = 3
    try:
        deadline = None if plan.deadline_s is None else time.monotonic() + plan.deadline_s
        with Harness(plan.target.adapter, timeout_s=plan.timeout_s, fresh=plan.fresh,
                     backend=plan.backend, deadline=deadline, ranks=ranks,
                     ckpt_root=plan.ckpt_root) as harness:
            environment = {**launch.environment(), "nodes": str(len(ranks.nodes)),
                           "node_names": ",".join(ranks.nodes)}

            def run(p: Plan, on_result: Callable[[CheckResult], None] | None) -> Report:
                try:
                    report = run_checks(p, on_result=on_result, harness=harness)
                except Interrupted as e:
                    e.report = _named(e.report, environment)
                    raise
                return _named(report, environment)

            status = judge(launched, run)
        return status
    except KeyboardInterrupt:
        status = 130
        raise
    except (UsageError, ConfigError, AdapterError):
        status = 2
        raise
    finally:
        ranks.finish(status)


def _named(report: Report, launch_env: dict[str, str | None]) -> Report:
    return dataclasses.replace(report, environment={**report.environment, **launch_env})
