"""A worker process: imports torch and the adapter once, then forks one child per run.

The harness starts one worker per rank and speaks the typed requests and replies of
:mod:`trainspec.conformance.run.protocol` with it, one JSON line each, over stdin and a private
copy of stdout (fd 1 itself is pointed at stderr, so whatever the trainer prints cannot corrupt
the protocol). Each run happens in a forked child, which makes every run start from the same warm
state, lets a crash scenario really kill the process that trains, and bounds every run: a child
that outlives its time is made to dump every thread's stack (faulthandler) and is killed with its
whole process group. Nothing crosses a process boundary as a pickle. A worker serves one
adapter: the first request binds it, and the adapter is built once.

Run as ``python -m trainspec.conformance.run.worker``.
"""

from __future__ import annotations

import contextlib
import faulthandler
import gc
import json
import os
import select
import signal
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from types import FrameType
from typing import IO, NoReturn, TypeVar

from trainspec.conformance.run.child import (
    become_subreaper,
    child_main,
    children,
    set_parent_death_signal,
    sweep_children,
)
from trainspec.conformance.run.describe import describe_adapter, describe_files, written_paths
from trainspec.conformance.run.profiling import profiled
from trainspec.conformance.run.protocol import (
    AdapterSpec,
    Bind,
    Describe,
    Failure,
    Property,
    PropertyReply,
    Ready,
    Reply,
    Run,
    RunReply,
    Shutdown,
    Warm,
    decode_request,
    encode,
)
from trainspec.conformance.run.template import serve_template
from trainspec.errors import AdapterError, HarnessError

__all__ = ["main"]

T = TypeVar("T")

# ``--profile DIR``: the worker and each run's child write cProfile statistics there (a
# benchmark's hook, run/profiling.py); empty when off
_PROFILE_DIR: list[str] = []


def _profile_dir() -> str | None:
    return _PROFILE_DIR[0] if _PROFILE_DIR else None


class Overdue(Exception):
    """Adapter code the worker runs itself (``describe_checkpoints``) outlived its bound."""


def bounded(call: Callable[[], T], timeout_s: float, what: str) -> T:
    """``call()`` within ``timeout_s`` (a SIGALRM timer: the worker is single-threaded); past
    it, :class:`Overdue` names ``what`` and the stack it was stuck in."""
    def overdue(signum: int, frame: FrameType | None) -> None:
        stack = "".join(traceback.format_stack(frame)[-12:]) if frame else ""
        raise Overdue(f"{what} did not return within {timeout_s:g} s (--timeout); it was "
                      f"stuck in:\n{stack}")

    previous = signal.signal(signal.SIGALRM, overdue)
    signal.setitimer(signal.ITIMER_REAL, max(timeout_s, 0.01))
    try:
        return call()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# set by SIGUSR2: the harness gives up on the running child (its peers have all ended and it
# is past their grace), which then ends as one past its bound does
_CUT = [False]


def _on_cut(signum: int, frame: FrameType | None) -> None:
    _CUT[0] = True


def _wait(pid: int, timeout_s: float, *, cuttable: bool = False) -> int | None:
    """The child's wait status, or None when it is still running at the deadline (or, when
    ``cuttable``, once the harness cut it short)."""
    fd = os.pidfd_open(pid)
    deadline = time.monotonic() + max(timeout_s, 0.0)
    try:
        while True:  # in steps, to see a cut (select resumes after a signal: PEP 475)
            left = deadline - time.monotonic()
            ready, _, _ = select.select([fd], [], [], max(min(left, 0.1), 0.0))
            if ready:
                break
            if left <= 0 or (cuttable and _CUT[0]):
                return None
    finally:
        os.close(fd)
    _, status = os.waitpid(pid, 0)
    return status


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def refuse_fork_after_cuda() -> None:
    """CUDA does not survive a fork once initialised: a child forked from a worker that holds
    a CUDA context fails in its first CUDA call, or hangs. The worker warms up on CPU only;
    when something it imported (the adapter, its framework) initialised CUDA anyway, every
    run says so instead of breaking in the trainer."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        raise HarnessError("CUDA was initialised in the worker before it forked a run (the "
                           "adapter's module, its factory or its environment() touched a "
                           "device); runs fork from the worker, which CUDA does not survive. "
                           "Move device work into the adapter's run().")


def _run_child(request: Run | Property, adapter: object) -> RunReply:
    """Fork a child for ``request``, wait for it within the bound, and say how it ended."""
    refuse_fork_after_cuda()
    sys.stdout.flush()
    sys.stderr.flush()
    before = children()  # a daemon the adapter started at import stays; a run's strays go
    _CUT[0] = False
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:  # the child: never returns into the worker's loop
        code = 1
        try:
            os.setpgid(0, 0)
            set_parent_death_signal()
            signal.signal(signal.SIGUSR2, signal.SIG_DFL)  # the worker's, not the run's
            # temporary folders of the run (a property run's, the trainer's) go under its job
            # folder, inside the harness's scratch root: removed with it whatever happens
            tempfile.tempdir = request.job_dir
            # the child reads the request's JSON (child.py owns that side)
            with profiled(_profile_dir(), f"child-{request.to_json()['op']}"):
                code = child_main(request.to_json(), adapter)
        finally:
            os._exit(code)
    status = _wait(pid, request.timeout_s, cuttable=True)
    if status is None:
        reply = _timed_out(pid, request, time.monotonic() - started)
        sweep_children(keep=before)
        return reply
    _kill_group(pid)  # grandchildren (loader workers, launchers) go with it
    sweep_children(keep=before)  # and those that left its group (setsid), re-parented here
    if os.WIFSIGNALED(status):
        return RunReply(status="killed", signal=os.WTERMSIG(status))
    return RunReply(status="exited", code=os.WEXITSTATUS(status))


def _timed_out(pid: int, request: Run | Property, ran_s: float) -> RunReply:
    """A child past its bound (or cut short): dump every thread's stack into its log, then
    kill its group."""
    rank = request.rank if isinstance(request, Run) else 0
    log_path = Path(request.job_dir) / f"rank{rank}.log"
    offset = log_path.stat().st_size if log_path.exists() else 0
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGUSR1)
    status = _wait(pid, 1.0)
    stack = ""
    if log_path.exists():
        with log_path.open(errors="replace") as f:
            f.seek(offset)
            stack = f.read()[-20000:]
    _kill_group(pid)
    if status is None:
        os.waitpid(pid, 0)
    _kill_group(pid)
    if _CUT[0]:
        return RunReply(status="timeout", stack=stack, timeout_s=round(ran_s, 1), error=(
            f"still running after {ran_s:.1f} s, cut short: another rank's run had ended, or "
            f"no rank had recorded anything, long before (the bound was "
            f"{request.timeout_s:g} s)"))
    return RunReply(status="timeout", stack=stack, timeout_s=request.timeout_s)


def _run(request: Run, adapter: object) -> RunReply:
    for module in request.preload:
        __import__(module)
    reply = _run_child(request, adapter)
    if not request.describe_files:
        return reply
    # the files the run wrote are the trainer's own: read its way (never a planted one)
    written = written_paths(Path(request.job_dir) / f"rank{request.rank}.events.jsonl")
    try:  # the files the run left, described now: no second round trip
        files = bounded(lambda: describe_files(adapter, Path(request.ckpt_root), written),
                        request.timeout_s, f"{type(adapter).__qualname__}.describe_checkpoints")
    except Exception as e:
        return replace(reply, files_error=f"{type(e).__name__}: {e}\n"
                       f"{traceback.format_exc()[-8000:]}")
    return replace(reply, files=files)


def _property(request: Property, adapter: object) -> PropertyReply:
    from trainspec.conformance.run.adapter import load_object

    load_object(request.runner)  # its imports (hypothesis) paid once here, not in every child
    reply = _run_child(request, adapter)
    out = Path(request.job_dir) / "property.json"
    if reply.status == "exited" and reply.code == 0 and out.exists():
        result = json.loads(out.read_text())
        if isinstance(result, dict):
            return PropertyReply(run=reply, result=result)
    return PropertyReply(run=reply)


def _bind(spec: AdapterSpec) -> object:
    """Build the adapter the worker serves; its preloads are imported once, here."""
    from trainspec.conformance.run.adapter import load_object

    factory = load_object(spec.factory)
    adapter: object = factory(*spec.args)
    for module in spec.preload:
        __import__(module)
    return adapter


def _warm_up() -> None:
    import torch

    torch.set_num_threads(1)
    # the first optimizer pays torch._dynamo's import (~1 s): once here, not in every child
    model = torch.nn.Linear(2, 2)
    torch.optim.Adam(model.parameters()).step()
    torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.zeros(2, 2)))


def _failure(e: BaseException) -> Failure:
    return Failure(error=f"{type(e).__name__}: {e}", traceback=traceback.format_exc()[-8000:])


def _answer(request: Describe | Run | Property, adapter: object) -> Reply:
    try:
        if isinstance(request, Describe):
            try:
                return describe_adapter(adapter)
            except AdapterError as e:  # the message says it all: no traceback
                return Failure(error=str(e), kind="invalid")
        if isinstance(request, Run):
            return _run(request, adapter)
        return _property(request, adapter)
    except (Exception, SystemExit) as e:
        return _failure(e)


def _serve(proto: IO[str]) -> None:
    """Bind (the first request), then answer every request until shutdown or end of input.

    The adapter describes itself once, when it is bound: what its ``environment()`` imports
    (a framework) is then paid once in every worker, not in every run's child, and a
    ``describe`` request gets that description.
    """
    adapter: object = None
    unbound = Failure(error="HarnessError: the worker was never bound to an adapter (the "
                      "harness sends bind first)")
    broken: Failure | None = unbound
    described: Reply = unbound
    for line in sys.stdin:
        try:
            request = decode_request(line)
        except HarnessError as e:
            reply: Reply = _failure(e)
        else:
            if isinstance(request, Shutdown):
                break
            if isinstance(request, Bind):  # no reply: a failure answers every later request
                try:
                    adapter, broken = _bind(request.adapter), None
                except (Exception, SystemExit) as e:  # an adapter module may sys.exit
                    broken = _failure(e)
                described = broken if broken is not None else _answer(Describe(), adapter)
                _warm(request.warm if broken is None else ())
                continue
            if isinstance(request, Warm):  # no reply either
                _warm(request.modules if broken is None else ())
                continue
            if isinstance(request, Describe):
                reply = described
            else:
                reply = broken if broken is not None else _answer(request, adapter)
        proto.write(encode(reply) + "\n")
        proto.flush()


def _warm(modules: Sequence[str]) -> None:
    """Import ``modules`` ahead of the runs that need them (a run needing one that does not
    import says so itself), then freeze what the worker holds: never collected, forks stay
    light."""
    for module in modules:
        with contextlib.suppress(Exception):
            __import__(module)
    gc.freeze()


def main(argv: Sequence[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["--template"] and len(args) > 1:  # workers are forked from this one
        os.dup2(2, 1)  # its fd 1 is a worker's protocol only once forked (_become_worker)
        _start()
        serve_template(int(args[1]), _serve_after_fork)
        os._exit(0)
    if args[:1] == ["--profile"] and len(args) > 1:
        _PROFILE_DIR[:] = [args[1]]
    with profiled(_profile_dir(), "worker"):
        _start()
        _become_worker()
    _exit_now()


def _serve_after_fork() -> None:
    """A worker forked from the template: serve, then exit."""
    _become_worker()
    _exit_now()


def _exit_now() -> NoReturn:
    """Served and swept: exit now, without tearing down torch's modules one by one."""
    sys.stderr.flush()
    os._exit(0)


def _start() -> None:
    """What a worker (or the template workers are forked from) does before it serves: its
    signals set, torch imported and warm, all it holds frozen (never collected, forks stay
    light)."""
    warnings.simplefilter("ignore")  # the trainer's warnings are not the worker's business
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the harness decides when workers stop
    signal.signal(signal.SIGUSR2, _on_cut)
    # a worker that stops answering (a hang in the adapter's import) shows where it is stuck
    faulthandler.register(signal.SIGUSR1, file=sys.stderr, all_threads=True)
    _warm_up()
    gc.freeze()


def _become_worker() -> None:
    """Serve the harness on this process's stdin and stdout (fd 1 then points at stderr):
    the ready line, then every request until shutdown; what the runs left is swept."""
    proto = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # prints from imported code land on stderr, never in the protocol
    sys.stdout = sys.stderr
    become_subreaper()  # what a run or the adapter leaves behind is swept, not orphaned
    proto.write(encode(Ready(pid=os.getpid())) + "\n")
    proto.flush()
    try:
        _serve(proto)
    finally:
        sweep_children()


if __name__ == "__main__":
    main()
