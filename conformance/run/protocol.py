"""The harness <-> worker protocol: typed requests and replies, one JSON line each.

A worker is bound to one adapter when it starts: :class:`Bind` is its first request, and every
later request (:class:`Describe`, :class:`Run`, :class:`Property`, :class:`Shutdown`) is about
that adapter. Each reply is typed too: :class:`Ready` once the worker has started,
:class:`Description` for ``describe``, :class:`RunReply` for a run (with the files the run left,
described by the adapter right after the child ended), :class:`PropertyReply` for a property
run, and :class:`Failure` when the worker could not do what was asked (the adapter would not
load or described itself wrongly).

The adapter's self-description is validated once, in the worker, next to the adapter
(``describe.describe_adapter``); the harness trusts a :class:`Description` it decodes.
"""

from __future__ import annotations

import json
import reprlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from trainspec.conformance.run.adapter import CAPABILITIES, Capability
from trainspec.conformance.run.outcome import PropertyOutcome
from trainspec.conformance.spec.causes import Remedy, RootCause
from trainspec.errors import AdapterError, HarnessError

__all__ = ["JSON", "AdapterSpec", "Bind", "Describe", "Description", "Failure",
           "InvalidDescription", "Property", "PropertyOutcome", "PropertyReply", "Ready",
           "Reply", "Request", "Run", "RunReply", "RunStatus", "Shutdown", "Warm",
           "as_run_reply", "decode_reply", "decode_request", "encode"]

JSON = dict[str, object]  # one decoded JSON object: checked field by field on decoding
RunStatus = Literal["exited", "killed", "timeout", "lost"]


def _str(data: Mapping[str, object], key: str, default: str = "") -> str:
    value = data.get(key, default)
    return value if isinstance(value, str) else str(value)


def _int(data: Mapping[str, object], key: str) -> int | None:
    value = data.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _float(data: Mapping[str, object], key: str) -> float | None:
    value = data.get(key)
    return None if isinstance(value, bool) or not isinstance(value, int | float) else value


def _strs(data: Mapping[str, object], key: str) -> tuple[str, ...]:
    value = data.get(key, ())
    return tuple(str(v) for v in value) if isinstance(value, list | tuple) else ()


def _object(data: Mapping[str, object], key: str) -> JSON:
    value = data.get(key, {})
    return {str(k): v for k, v in value.items()} if isinstance(value, dict) else {}



# ---------------------------------------------------------------------------------- requests

@dataclass(frozen=True, slots=True, kw_only=True)
class AdapterSpec:
    """How a worker builds the adapter: ``factory(*args)`` with ``factory`` as MODULE:OBJECT."""

    factory: str
    args: tuple[str, ...] = ()
    preload: tuple[str, ...] = ()  # modules the worker imports once bound (paid once)

    def to_json(self) -> JSON:
        return {"factory": self.factory, "args": list(self.args), "preload": list(self.preload)}

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> AdapterSpec:
        return cls(factory=_str(data, "factory"), args=_strs(data, "args"),
                   preload=_strs(data, "preload"))


@dataclass(frozen=True, slots=True, kw_only=True)
class Bind:
    """The worker's first request: build this adapter and serve it until shutdown.

    ``warm``: modules to import once it is built, when they import (runs that need one name
    it in their own ``preload``, where a failure to import is the run's)."""

    adapter: AdapterSpec
    warm: tuple[str, ...] = ()

    def to_json(self) -> JSON:
        return {"op": "bind", "adapter": self.adapter.to_json(), "warm": list(self.warm)}

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> Bind:
        return cls(adapter=AdapterSpec.from_json(_object(data, "adapter")),
                   warm=_strs(data, "warm"))


@dataclass(frozen=True, slots=True, kw_only=True)
class Describe:
    """What the bound adapter says of itself (a :class:`Description`)."""

    def to_json(self) -> JSON:
        return {"op": "describe"}

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> Describe:
        return cls()


@dataclass(frozen=True, slots=True, kw_only=True)
class Run:
    """One rank of one run, in a forked child bounded by ``timeout_s``.

    ``describe_files``: after the child ends, describe what it left under ``ckpt_root`` (one
    rank of a run does it, for the whole run).
    """

    scenario: JSON  # the Scenario's JSON: the child decodes it
    rank: int
    job_dir: str
    ckpt_root: str
    timeout_s: float
    env: Mapping[str, str] = field(default_factory=dict)
    preload: tuple[str, ...] = ()  # modules this run needs beyond the adapter's own
    describe_files: bool = False

    def to_json(self) -> JSON:
        return {"op": "run", "scenario": self.scenario, "rank": self.rank,
                "job_dir": self.job_dir, "ckpt_root": self.ckpt_root,
                "timeout_s": self.timeout_s, "env": dict(self.env),
                "preload": list(self.preload), "describe_files": self.describe_files}

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> Run:
        return cls(scenario=_object(data, "scenario"), rank=_int(data, "rank") or 0,
                   job_dir=_str(data, "job_dir"), ckpt_root=_str(data, "ckpt_root"),
                   timeout_s=_float(data, "timeout_s") or 0.0,
                   env={k: str(v) for k, v in _object(data, "env").items()},
                   preload=_strs(data, "preload"),
                   describe_files=data.get("describe_files") is True)


@dataclass(frozen=True, slots=True, kw_only=True)
class Property:
    """A hypothesis property run next to the trainer: ``runner`` (MODULE:FUNCTION) judges it."""

    name: str
    runner: str
    max_examples: int
    job_dir: str
    timeout_s: float
    run_timeout_s: float = 0.0  # the bound on each run the property makes (0: none)

    def to_json(self) -> JSON:
        return {"op": "property", "property": self.name, "runner": self.runner,
                "max_examples": self.max_examples, "rank": 0, "job_dir": self.job_dir,
                "timeout_s": self.timeout_s, "run_timeout_s": self.run_timeout_s}

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> Property:
        return cls(name=_str(data, "property"), runner=_str(data, "runner"),
                   max_examples=_int(data, "max_examples") or 0, job_dir=_str(data, "job_dir"),
                   timeout_s=_float(data, "timeout_s") or 0.0,
                   run_timeout_s=_float(data, "run_timeout_s") or 0.0)


@dataclass(frozen=True, slots=True, kw_only=True)
class Shutdown:
    """Stop serving and exit."""

    def to_json(self) -> JSON:
        return {"op": "shutdown"}

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> Shutdown:
        return cls()


@dataclass(frozen=True, slots=True, kw_only=True)
class Warm:
    """Import these modules now, when they import (no reply: the worker is idle meanwhile)."""

    modules: tuple[str, ...]

    def to_json(self) -> JSON:
        return {"op": "warm", "modules": list(self.modules)}

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> Warm:
        return cls(modules=_strs(data, "modules"))


Request = Bind | Describe | Run | Property | Shutdown | Warm
_REQUESTS: dict[str, type[Request]] = {"bind": Bind, "describe": Describe, "run": Run,
                                       "property": Property, "shutdown": Shutdown, "warm": Warm}


# ----------------------------------------------------------------------------------- replies

@dataclass(frozen=True, slots=True, kw_only=True)
class Ready:
    """The worker has started (torch imported, warm) and waits for :class:`Bind`."""

    pid: int

    def to_json(self) -> JSON:
        return {"reply": "ready", "pid": self.pid}

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> Ready:
        return cls(pid=_int(data, "pid") or 0)


@dataclass(frozen=True, slots=True, kw_only=True)
class Description:
    """What an adapter says of itself, validated (:func:`describe_adapter`)."""

    name: str
    capabilities: frozenset[Capability]
    environment: Mapping[str, str | None]  # names to version strings, as reports hold
    sources: Mapping[str, str] = field(default_factory=dict)  # clause ID -> source pointer
    root_causes: tuple[RootCause, ...] = ()
    remedies: tuple[Remedy, ...] = ()

    def to_json(self) -> JSON:
        return {"reply": "description", "name": self.name,
                "capabilities": sorted(self.capabilities),
                "environment": dict(self.environment), "sources": dict(self.sources),
                "root_causes": [c.to_json() for c in self.root_causes],
                "remedies": [r.to_json() for r in self.remedies]}

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> Description:
        environment = {k: (v if v is None else str(v))
                       for k, v in _object(data, "environment").items()}
        causes, remedies = data.get("root_causes"), data.get("remedies")
        return cls(name=_str(data, "name"),
                   capabilities=frozenset(c for c in CAPABILITIES
                                          if c in _strs(data, "capabilities")),
                   environment=environment,
                   sources={k: str(v) for k, v in _object(data, "sources").items()},
                   root_causes=tuple(map(RootCause.from_json, causes or ())),  # type: ignore[call-overload]
                   remedies=tuple(map(Remedy.from_json, remedies or ())))  # type: ignore[call-overload]


@dataclass(frozen=True, slots=True, kw_only=True)
class RunReply:
    """How a run's child ended, and (when asked) the files the run left, as the adapter
    describes them (``trace.FileRecord``'s JSON)."""

    status: RunStatus
    code: int | None = None  # exited: the exit status
    signal: int | None = None  # killed: the signal number
    stack: str = ""  # timeout: every thread's stack at the deadline
    timeout_s: float | None = None
    error: str = ""  # lost: what broke; timeout: why it was cut short, when it was
    traceback: str = ""
    files: tuple[JSON, ...] | None = None  # None: not asked, or describing them failed
    files_error: str = ""  # why describing the files failed, with its traceback

    def to_json(self) -> JSON:
        out: JSON = {"reply": "run", "status": self.status, "code": self.code,
                     "signal": self.signal, "stack": self.stack, "timeout_s": self.timeout_s,
                     "error": self.error, "traceback": self.traceback,
                     "files_error": self.files_error}
        if self.files is not None:
            out["files"] = list(self.files)
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> RunReply:
        status = data.get("status")
        raw = data.get("files")
        files = None if not isinstance(raw, list) else tuple(
            {str(k): v for k, v in e.items()} for e in raw if isinstance(e, dict))
        return cls(status=status if status in ("exited", "killed", "timeout") else "lost",
                   code=_int(data, "code"), signal=_int(data, "signal"),
                   stack=_str(data, "stack"), timeout_s=_float(data, "timeout_s"),
                   error=_str(data, "error"), traceback=_str(data, "traceback"),
                   files=files, files_error=_str(data, "files_error"))

    @classmethod
    def lost(cls, error: str, traceback: str = "") -> RunReply:
        return cls(status="lost", error=error, traceback=traceback)


@dataclass(frozen=True, slots=True, kw_only=True)
class PropertyReply:
    """How a property run's child ended, and the runner's result when it finished."""

    run: RunReply
    result: JSON | None = None  # the runner's JSON result; None when the child did not finish

    def to_json(self) -> JSON:
        return {**self.run.to_json(), "reply": "property", "result": self.result}

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> PropertyReply:
        result = data.get("result")
        return cls(run=RunReply.from_json(data),
                   result={str(k): v for k, v in result.items()}
                   if isinstance(result, dict) else None)


@dataclass(frozen=True, slots=True, kw_only=True)
class Failure:
    """The worker could not serve the request: the adapter would not load or raised
    (``broke``: the error line and the worker's traceback), or it described itself wrongly
    (``invalid``: the message says what and how to fix it; no traceback)."""

    error: str
    traceback: str = ""
    kind: Literal["broke", "invalid"] = "broke"

    def to_json(self) -> JSON:
        return {"reply": "failure", "error": self.error, "traceback": self.traceback,
                "kind": self.kind}

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> Failure:
        return cls(error=_str(data, "error"), traceback=_str(data, "traceback"),
                   kind="invalid" if data.get("kind") == "invalid" else "broke")


class InvalidDescription(AdapterError):
    """The adapter described itself wrongly (a :class:`Failure` of kind ``invalid``)."""


Reply = Ready | Description | RunReply | PropertyReply | Failure
_REPLIES: dict[str, type[Reply]] = {"ready": Ready, "description": Description, "run": RunReply,
                                    "property": PropertyReply, "failure": Failure}


def as_run_reply(reply: Reply) -> RunReply:
    """A run's reply; a failure to serve the run (or any other reply) is a lost run."""
    if isinstance(reply, RunReply):
        return reply
    if isinstance(reply, Failure):
        return RunReply.lost(reply.error, reply.traceback)
    return RunReply.lost(f"expected a run reply, got {reply}")


# ------------------------------------------------------------------------------------- codec

def encode(message: Request | Reply) -> str:
    """One JSON line (no newline)."""
    return json.dumps(message.to_json())


def _decode(line: str, key: str, kinds: Mapping[str, type[Request]] | Mapping[str, type[Reply]]
            ) -> Request | Reply:
    try:
        data = json.loads(line)
    except json.JSONDecodeError as e:
        raise HarnessError(f"protocol: expected one JSON object per line, got {line[:200]!r} "
                           f"({e})") from None
    kind = data.get(key) if isinstance(data, dict) else None
    if not isinstance(kind, str) or kind not in kinds:
        raise HarnessError(f"protocol: expected a {key!r} of {', '.join(kinds)}, got "
                           f"{reprlib.repr(data)}")
    return kinds[kind].from_json(data)


def decode_request(line: str) -> Request:
    """A request line as its type; :class:`HarnessError` when it is none of them."""
    request = _decode(line, "op", _REQUESTS)
    assert isinstance(request, Request)
    return request


def decode_reply(line: str) -> Reply:
    """A reply line as its type; :class:`HarnessError` when it is none of them."""
    reply = _decode(line, "reply", _REPLIES)
    assert isinstance(reply, Ready | Description | RunReply | PropertyReply | Failure)
    return reply
