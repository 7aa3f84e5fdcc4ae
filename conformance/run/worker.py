"""A worker process: imports torch and the adapter once, then forks one child per run.

The harness starts one worker per rank and speaks JSON lines with it over stdin and a private
copy of stdout (fd 1 itself is pointed at stderr, so whatever the trainer prints cannot corrupt
the protocol). Each run happens in a forked child, which makes every run start from the same warm
state, lets a crash scenario really kill the process that trains, and bounds every run: a child
that outlives its time is made to dump every thread's stack (faulthandler) and is killed with its
whole process group. Nothing crosses a process boundary as a pickle.

Run as ``python -m trainspec.conformance.run.worker``.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import sys
import traceback
import warnings
from pathlib import Path
from typing import IO, Any

from trainspec.conformance.run.child import child_main, set_parent_death_signal

__all__ = ["main"]


def _wait(pid: int, timeout_s: float) -> int | None:
    """The child's wait status, or None when it is still running at the deadline."""
    fd = os.pidfd_open(pid)
    try:
        ready, _, _ = select.select([fd], [], [], max(timeout_s, 0.0))
    finally:
        os.close(fd)
    if not ready:
        return None
    _, status = os.waitpid(pid, 0)
    return status


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _run(req: dict[str, Any], adapter: Any) -> dict[str, Any]:
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the child: never returns into the worker's loop
        code = 1
        try:
            os.setpgid(0, 0)
            set_parent_death_signal()
            code = child_main(req, adapter)
        finally:
            os._exit(code)
    timeout_s = float(req["timeout_s"])
    status = _wait(pid, timeout_s)
    stack = ""
    if status is None:
        log_path = Path(req["job_dir"]) / f"rank{req['rank']}.log"
        offset = log_path.stat().st_size if log_path.exists() else 0
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGUSR1)
        status = _wait(pid, 1.0)
        if log_path.exists():
            with log_path.open(errors="replace") as f:
                f.seek(offset)
                stack = f.read()[-20000:]
        _kill_group(pid)
        if status is None:
            _, status = os.waitpid(pid, 0)
        _kill_group(pid)
        return {"status": "timeout", "stack": stack, "timeout_s": timeout_s}
    _kill_group(pid)  # grandchildren (loader workers, launchers) go with it
    if os.WIFSIGNALED(status):
        return {"status": "killed", "signal": os.WTERMSIG(status)}
    code = os.WEXITSTATUS(status)
    return {"status": "exited", "code": code}


def _describe_files(adapter: Any, root: Path) -> list[dict[str, Any]]:
    """The adapter's description of the files a run left (the seed's names by default)."""
    from trainspec.conformance.run.files import describe_seed_files

    describe = getattr(adapter, "describe_checkpoints", None)
    entries = describe(root) if callable(describe) else describe_seed_files(root)
    json.dumps(entries)  # JSON or nothing: a TypeError here becomes a worker_error reply
    return list(entries)


def _load_adapter(spec: dict[str, Any], cache: dict[str, Any]) -> Any:
    key = json.dumps(spec, sort_keys=True)
    if key not in cache:
        from trainspec.conformance.run.adapter import load_object

        factory = load_object(spec["factory"])
        cache[key] = factory(*spec.get("args", []))
    return cache[key]


def _warm_up() -> None:
    import torch

    torch.set_num_threads(1)
    # the first optimizer pays torch._dynamo's import (~1 s): once here, not in every child
    model = torch.nn.Linear(2, 2)
    torch.optim.Adam(model.parameters()).step()
    torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.zeros(2, 2)))


def _serve(proto: IO[str]) -> None:
    cache: dict[str, Any] = {}
    for line in sys.stdin:
        req = json.loads(line)
        reply: dict[str, Any] = {"id": req.get("id")}
        try:
            if req["op"] == "shutdown":
                break
            if req["op"] == "ping":
                reply["ok"] = True
            else:
                adapter = _load_adapter(req["adapter"], cache)
                for module in req.get("preload", []):
                    __import__(module)
                if req["op"] == "describe":
                    lacking = [m for m in ("capabilities", "environment", "run")
                               if not callable(getattr(adapter, m, None))]
                    if lacking:
                        raise TypeError(f"{type(adapter).__qualname__} is not an adapter: it "
                                        f"lacks {', '.join(lacking)}")
                    reply["name"] = str(adapter.name)
                    reply["capabilities"] = sorted(adapter.capabilities())
                    environment = adapter.environment()
                    try:
                        json.dumps(environment)
                    except (TypeError, ValueError) as e:
                        raise TypeError(f"environment() returned a value that is not JSON: "
                                        f"{e}") from None
                    reply["environment"] = environment
                    sources = getattr(adapter, "framework_sources", None)
                    if callable(sources):
                        reply["sources"] = sources()
                elif req["op"] in ("run", "property"):
                    reply.update(_run(req, adapter))
                elif req["op"] == "files":
                    reply["files"] = _describe_files(adapter, Path(req["ckpt_root"]))
                else:
                    raise ValueError(f"unknown op {req['op']!r}")
        except (Exception, SystemExit) as e:  # an adapter module may sys.exit on import
            reply["status"] = "worker_error"
            reply["error"] = f"{type(e).__name__}: {e}"
            reply["traceback"] = traceback.format_exc()[-8000:]
        proto.write(json.dumps(reply) + "\n")
        proto.flush()


def main() -> None:
    proto = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # prints from imported code land on stderr, never in the protocol
    sys.stdout = sys.stderr
    warnings.simplefilter("ignore")  # the trainer's warnings are not the worker's business
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the harness decides when workers stop
    _warm_up()
    proto.write(json.dumps({"ready": True, "pid": os.getpid()}) + "\n")
    proto.flush()
    _serve(proto)


if __name__ == "__main__":
    main()
