"""The harness <-> worker protocol: every request and reply survives its JSON line."""

from __future__ import annotations

import pytest

from trainspec.conformance.run.protocol import (
    AdapterSpec,
    Bind,
    Describe,
    Description,
    Failure,
    Property,
    PropertyOutcome,
    PropertyReply,
    Ready,
    Reply,
    Request,
    Run,
    RunReply,
    Shutdown,
    as_run_reply,
    decode_reply,
    decode_request,
    encode,
)
from trainspec.errors import HarnessError

REQUESTS: list[Request] = [
    Bind(adapter=AdapterSpec(factory="pkg:Adapter", args=("a", "b"), preload=("torchmetrics",))),
    Describe(),
    Run(scenario={"name": "loop", "config": {"num_epochs": 2}}, rank=1, job_dir="j",
        ckpt_root="c", timeout_s=5.0, env={"RANK": "1"}, preload=("torchmetrics",),
        describe_files=True),
    Property(name="decisions", runner="pkg.mod:run", max_examples=60, job_dir="j",
             timeout_s=90.0),
    Shutdown(),
]
REPLIES: list[Reply] = [
    Ready(pid=42),
    Description(name="reference", capabilities=frozenset({"checkpoint", "resume"}),
                environment={"framework": None, "torch": "2.13.0"},
                sources={"NAN-1": "pkg/callbacks.py, f"}),
    RunReply(status="exited", code=0, files=({"relpath": "last.pt", "size": 10},)),
    RunReply(status="timeout", stack="Thread 1 ...", timeout_s=5.0, files_error="boom"),
    RunReply(status="killed", signal=9),
    PropertyReply(run=RunReply(status="exited", code=0),
                  result={"passed": False, "examples": 3, "evidence": "PAT-5: x"}),
    Failure(error="AdapterError: capabilities() declared unknown names", kind="invalid"),
]


@pytest.mark.parametrize("request_", REQUESTS, ids=lambda r: type(r).__name__)
def test_a_request_decodes_to_what_was_encoded(request_: Request) -> None:
    assert decode_request(encode(request_)) == request_


@pytest.mark.parametrize("reply", REPLIES, ids=lambda r: type(r).__name__)
def test_a_reply_decodes_to_what_was_encoded(reply: Reply) -> None:
    assert decode_reply(encode(reply)) == reply


@pytest.mark.parametrize("line", ['{"op": "dance"}', "[1, 2]", "not json", '{"reply": 3}'])
def test_a_line_of_no_known_kind_is_a_harness_error(line: str) -> None:
    with pytest.raises(HarnessError, match="protocol: expected"):
        decode_request(line)


def test_a_failure_to_serve_a_run_reads_as_a_lost_run_with_its_traceback() -> None:
    lost = as_run_reply(Failure(error="ValueError: no", traceback="Traceback ..."))
    assert (lost.status, lost.error, lost.traceback) == ("lost", "ValueError: no",
                                                          "Traceback ...")


def test_a_property_result_becomes_a_typed_outcome() -> None:
    failed = PropertyOutcome.from_json({"passed": False, "examples": 7, "evidence": "PAT-5: x",
                                        "scenario": {"name": "property"}})
    assert failed == PropertyOutcome(verdict="failed", examples=7, evidence="PAT-5: x",
                                     scenario={"name": "property"})
    assert PropertyOutcome.from_json({"passed": True, "examples": 60}).verdict == "passed"
