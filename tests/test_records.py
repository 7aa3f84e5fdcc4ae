"""Records: every kind survives the JSON codec, a bad one is named precisely, a torn line is
dropped, and a rank's trace is built from records alone."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
import torch

from trainspec.conformance.checks import CHECKS, run_check
from trainspec.conformance.run.files import error_line
from trainspec.conformance.run.harness import Harness
from trainspec.conformance.run.memory import MemoryContext
from trainspec.conformance.run.records import (
    RECORD_TYPES,
    ConfigSeen,
    Crash,
    Done,
    FileSnapshot,
    ItemsOnRaise,
    Record,
    RecordError,
    RunEnd,
    RunError,
    RunExit,
    Setup,
    TestPass,
    TrainEnd,
    TrainerState,
    TrainStart,
    Validation,
    Write,
    from_json,
    kind_of,
    to_json,
)
from trainspec.conformance.run.trace import (
    MALFORMED,
    MAX_RECORDS,
    MAX_RUN_BYTES,
    OVERFLOW,
    parse_rank,
    read_records,
)
from trainspec.conformance.runner import open_context, resolve_target
from trainspec.errors import AdapterError


def _weights(seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {"weight": torch.randn(3, 4, generator=g), "bias": torch.randn(3, generator=g)}


def _state() -> TrainerState:
    model = torch.nn.Linear(4, 3)
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.ones(2, 4)).sum().backward()
    optimizer.step()
    return TrainerState(weights=_weights(1), optimizer=optimizer.state_dict(),
                        scheduler={"last_epoch": 3, "_last_lr": [0.001]},
                        rng={"torch": "ab12", "python": "cd34"})


def _snapshot() -> FileSnapshot:
    return FileSnapshot(path="run/best.pt", mtime_ns=17, size=1024, epoch=2, step=12,
                        weights=_weights(2))


ONE_OF_EACH: tuple[Record, ...] = (
    Setup(epoch=0, train_step=0, train_len=6,
          config=ConfigSeen(wandb_mode="disabled", save_preds_enable=False)),
    TrainStart(epoch=1, train_step=6, state=_state(), last_file_epoch=0, best_file=_snapshot()),
    TrainEnd(epoch=1, train_step=12, batches=6, optimizer_steps=6, loader_len=6,
             loader_batch_size=4, eval_lens={"val_loader": 2, "eval_loader": None},
             eval_batches={"val_loader": 2, "eval_loader": None}),
    Validation(epoch=1, phase="epoch", score=math.nan, improved=False, stop=True,
               weights=_weights(3), best_file=FileSnapshot(path="run/best.pt", mtime_ns=1,
                                                           size=3, error="truncated")),
    TestPass(weights=_weights(4)),
    RunEnd(train_step=12, final_weights=_weights(5), best_model=None, best_file=_snapshot(),
           user_config=ConfigSeen(num_epochs=3)),
    ItemsOnRaise(changed=("optimizer",), unchanged=("scheduler2",)),
    Write(path="run/last.pt", via="torch.save", t=1.5),
    Crash(where="write", how="sigkill", epoch=None, bytes=100, t=2.5),
    RunError(type="ValueError", message="no", traceback="Traceback ...", ours=False, t=3.5),
    RunExit(code=3, message="3", t=4.5),
    Done(t=5.5),
)


def _through_json(record: Record) -> Record:
    return from_json(json.loads(json.dumps(to_json(record))))


def _as_text(record: Record) -> str:
    return json.dumps(to_json(record), sort_keys=True)


def test_one_of_each_covers_every_record_kind() -> None:
    assert sorted(kind_of(r) for r in ONE_OF_EACH) == sorted(RECORD_TYPES)


@pytest.mark.parametrize("record", ONE_OF_EACH, ids=kind_of)
def test_every_record_kind_survives_the_json_codec(record: Record) -> None:
    back = _through_json(record)
    assert type(back) is type(record)
    assert _as_text(back) == _as_text(record)


def test_tensors_come_back_bitwise_with_their_dtype_and_shape() -> None:
    weights = {"w": torch.tensor([[0.1, -1e-30], [3.0e38, 1 / 3]], dtype=torch.float32),
               "steps": torch.tensor([7], dtype=torch.int64)}
    back = _through_json(TestPass(weights=weights))
    assert isinstance(back, TestPass)
    for name, tensor in weights.items():
        assert back.weights[name].dtype == tensor.dtype
        assert torch.equal(back.weights[name], tensor)


def test_a_nan_score_stays_nan() -> None:
    original = ONE_OF_EACH[3]
    back = _through_json(original)
    assert isinstance(back, Validation)
    assert math.isnan(back.score)


def test_a_trainer_state_walks_its_parts_by_name() -> None:
    state = _state()
    assert state.part("weights") is state.weights
    assert state.part("rng") == {"torch": "ab12", "python": "cd34"}
    assert TrainerState(weights={}).part("scheduler") is None


def test_a_malformed_record_names_the_record_and_the_field() -> None:
    line = to_json(ONE_OF_EACH[3]) | {"epoch": "two"}
    with pytest.raises(RecordError, match=r"record 'val': field 'epoch' should be an "
                                          r"integer, got 'two'"):
        from_json(line)


def test_a_malformed_nested_part_names_its_path() -> None:
    line = to_json(ONE_OF_EACH[1])
    line["best_file"] = {"path": "best.pt", "mtime_ns": "soon", "size": 1}
    with pytest.raises(RecordError, match=r"record 'train_start.best_file': field 'mtime_ns'"):
        from_json(line)


def test_an_unknown_kind_lists_the_known_ones() -> None:
    with pytest.raises(RecordError, match=r"unknown kind 'validation'; expected one of"):
        from_json({"ev": "validation"})


def _write_lines(path: Path, lines: list[str]) -> None:
    path.write_text("".join(line + "\n" for line in lines))


def test_a_line_torn_by_a_kill_is_dropped(tmp_path: Path) -> None:
    path = tmp_path / "rank0.events.jsonl"
    whole = [json.dumps(to_json(r)) for r in ONE_OF_EACH[:3]]
    torn = json.dumps(to_json(ONE_OF_EACH[3]))[:40]
    path.write_text("\n".join(whole) + "\n" + torn)
    records = read_records(path)
    assert [kind_of(r) for r in records] == ["setup", "train_start", "train_end"]


def test_a_malformed_record_makes_the_rank_an_adapter_error_that_names_it(
        tmp_path: Path) -> None:
    path = tmp_path / "rank0.events.jsonl"
    bad = to_json(ONE_OF_EACH[3]) | {"epoch": None}
    _write_lines(path, [json.dumps(to_json(ONE_OF_EACH[0])), json.dumps(bad),
                        json.dumps(to_json(Done()))])
    records = read_records(path)
    assert [kind_of(r) for r in records] == ["setup", "error", "done"]
    rank = parse_rank(0, records, "completed", "", "")
    assert rank.status == "raised"
    assert rank.is_ours
    assert rank.error.startswith(f"{MALFORMED}: record 'val': field 'epoch' should be an "
                                 "integer")
    assert "line 2 of rank0.events.jsonl" in rank.detail
    assert rank.setup == ONE_OF_EACH[0]


def test_a_rank_trace_pairs_epochs_and_keeps_an_epoch_cut_by_a_kill() -> None:
    start, end = ONE_OF_EACH[1], ONE_OF_EACH[2]
    assert isinstance(start, TrainStart)
    assert isinstance(end, TrainEnd)
    cut = TrainStart(epoch=2, train_step=12, state=start.state)
    crash = Crash(where="train_end", how="sigkill", epoch=2, t=9.0)
    rank = parse_rank(0, [ONE_OF_EACH[0], start, end, ONE_OF_EACH[3], cut, crash],
                      "killed", "killed by SIGKILL", "")
    assert rank.epochs_trained == [1, 2]
    assert (rank.train_epochs[0].end_step, rank.train_epochs[1].end_step) == (12, None)
    assert rank.train_epochs[0].best_file is start.best_file
    assert rank.crashes == (crash,)
    assert rank.kinds == ["setup", "train_start", "train_end", "val", "train_start", "crash"]
    assert not rank.is_ours
    assert rank.end is None
    assert rank.best_model is None


def test_a_memory_context_keeps_records_as_a_real_run_reads_them(tmp_path: Path) -> None:
    ctx = MemoryContext(tmp_path)
    for record in ONE_OF_EACH[:6]:
        ctx.record(record)
    assert [_as_text(r) for r in ctx.records] == [_as_text(r) for r in ONE_OF_EACH[:6]]
    start = ctx.records[1]
    assert isinstance(start, TrainStart)
    optimizer = start.state.optimizer
    assert isinstance(optimizer, dict)
    assert set(optimizer["state"]) == {"0", "1"}


def test_a_run_with_a_malformed_record_is_an_adapter_error_naming_the_field() -> None:
    root = str(Path(__file__).resolve().parent.parent)
    previous = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (root, previous) if p)
    try:
        target = resolve_target("tests.bad_adapters.malformed:RecordsAMalformedValidation")
        with Harness(target.adapter, timeout_s=30) as harness:
            ctx, _ = open_context(target, harness, world_size=1)
            result = run_check(CHECKS["check_loop_trains_each_epoch_once_in_order"], ctx)
    finally:
        if previous is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = previous
    assert result.outcome == "error"
    assert "the run raised: RecordError: record 'val': field 'epoch' should be an integer, " \
        "got 'two'" in result.evidence
    assert "line 2 of rank0.events.jsonl" in result.detail


# ------------------------------------------------- bounded reading, and how a run ended

def _flood(path: Path, count: int) -> None:
    _write_lines(path, [json.dumps(to_json(Done(t=float(i)))) for i in range(count)])


def test_a_flood_of_records_is_read_up_to_the_bound_and_named(tmp_path: Path) -> None:
    path = tmp_path / "rank0.events.jsonl"
    _flood(path, 50)
    records = read_records(path, max_records=10)
    assert len(records) == 11  # the bound, then the overflow standing for the rest
    overflow = records[-1]
    assert isinstance(overflow, RunError)
    assert overflow.type == OVERFLOW
    assert "more than 10 records" in overflow.message
    rank = parse_rank(0, records, "completed", "", "")
    assert rank.status == "raised"
    assert rank.is_ours  # the run could not be judged: an error, not the trainer's failure
    assert rank.error.startswith(f"{OVERFLOW}: rank0.events.jsonl: the run recorded more")


def test_a_flood_that_outlives_its_bound_is_a_timeout_naming_the_overflow(
        tmp_path: Path) -> None:
    path = tmp_path / "rank0.events.jsonl"
    _flood(path, 200)
    records = read_records(path, max_bytes=1000)
    rank = parse_rank(0, records, "timeout", "still running after 3 s", "stack")
    assert rank.status == "timeout"
    assert rank.error.startswith("still running after 3 s; RecordOverflow: ")
    assert "the run recorded more than 1000 bytes" in rank.error
    assert len(records) < 200


def test_a_line_longer_than_a_record_may_be_is_not_read_into_memory(tmp_path: Path) -> None:
    path = tmp_path / "rank0.events.jsonl"
    path.write_text(json.dumps(to_json(ONE_OF_EACH[0])) + "\n" + "x" * 5000 + "\n")
    records = read_records(path, max_line_bytes=1000)
    assert kind_of(records[0]) == "setup"
    last = records[-1]
    assert isinstance(last, RunError)
    assert "line 2 is longer than 1000 bytes" in last.message


def test_a_record_nested_too_deep_is_malformed_not_a_crash(tmp_path: Path) -> None:
    path = tmp_path / "rank0.events.jsonl"
    _write_lines(path, ["[" * 200_000 + "]" * 200_000])
    (record,) = read_records(path)
    assert isinstance(record, RunError)
    assert record.type == MALFORMED
    assert "nested too deep" in record.message


def test_the_reference_sized_bounds_are_far_above_a_real_run() -> None:
    # the reference's largest run records 31 KB in 62 records (measured over the whole
    # suite; see MAX_RECORDS): the bounds leave two to three orders of magnitude
    assert MAX_RUN_BYTES >= 1000 * 31_000
    assert MAX_RECORDS >= 300 * 62


def test_a_process_that_exits_with_status_zero_mid_run_did_not_complete() -> None:
    rank = parse_rank(0, [ONE_OF_EACH[0]], "completed", "", "")
    assert rank.status == "exited"
    assert "before the adapter's run returned" in rank.error


def test_sys_exit_zero_mid_run_did_not_complete_and_says_so() -> None:
    rank = parse_rank(0, [ONE_OF_EACH[0], RunExit(code=0, message="")], "completed", "", "")
    assert rank.status == "exited"
    assert rank.error.startswith("the run called sys.exit(0) before the run recorded its end")


def test_sys_exit_with_a_message_keeps_it() -> None:
    rank = parse_rank(0, [RunExit(code=1, message="bye")], "exited", "exited with status 1",
                      "")
    assert rank.error == "the run called sys.exit('bye'): exited with status 1"
    plain = parse_rank(0, [RunExit(code=143, message="")], "exited", "exited with status 143",
                       "")
    assert plain.error == "exited with status 143"


def test_a_run_that_returned_after_its_end_completed() -> None:
    end = next(r for r in ONE_OF_EACH if isinstance(r, RunEnd))
    assert parse_rank(0, [ONE_OF_EACH[0], end, Done()], "completed", "", "").status == \
        "completed"
    # in memory (a property run) there is no Done: the end record is enough
    assert parse_rank(0, [ONE_OF_EACH[0], end], "completed", "", "").status == "completed"


def test_a_raised_run_quotes_the_line_that_says_what_went_wrong() -> None:
    message = ("\x1b[31mWeights only load failed. This file can still be loaded, to do so "
               "you have two options.\x1b[0m\n\t(1) Re-running with weights_only=False...\n"
               "\tWeightsUnpickler error: Unsupported global: GLOBAL posix.mkdir\n\nCheck the "
               "documentation.")
    error = RunError(type="UnpicklingError", message=message, traceback="tb", ours=False)
    rank = parse_rank(0, [error], "raised", "UnpicklingError: first line", "tb")
    assert rank.error == ("UnpicklingError: Weights only load failed: WeightsUnpickler error: "
                          "Unsupported global: GLOBAL posix.mkdir")


def test_error_line_keeps_a_plain_message_and_drops_colours() -> None:
    assert error_line(ValueError("\x1b[1;31mloss is nan\x1b[0m\nmore")) == \
        "ValueError: loss is nan"
    assert error_line(KeyError("epoch")) == "KeyError: 'epoch'"


def test_a_record_that_does_not_travel_as_json_is_the_adapters_error(tmp_path: Path) -> None:
    from trainspec.conformance.run.child import ChildContext
    from trainspec.conformance.run.scenario import Scenario

    fd = os.open(tmp_path / "events", os.O_WRONLY | os.O_CREAT)
    try:
        ctx = ChildContext(rank=0, world_size=1, ckpt_root=tmp_path, events_fd=fd,
                           scenario=Scenario(name="s"))
        with pytest.raises(AdapterError, match=r"RunContext\.record: dict is not a record"):
            ctx.record({"ev": "val"})  # type: ignore[arg-type]
        with pytest.raises(AdapterError, match="complex"):
            ctx.record(TestPass(weights={"w": torch.ones(2, dtype=torch.complex64)}))
    finally:
        os.close(fd)
