"""The adapter that lets ``trainspec check`` drive the tiny loop of ``tiny_loop.py``.

    trainspec check tests.guides.tiny_adapter:TinyAdapter --clauses LOOP,BEST,NAN,PAT \
        --world-size 1
"""

from __future__ import annotations

from typing import Any

import torch

from tests.guides.tiny_loop import LoopConfig, fit
from trainspec.conformance.run.adapter import Capability, RunContext
from trainspec.conformance.run.recording import trainer_state
from trainspec.conformance.run.records import (
    RunEnd,
    Setup,
    TestPass,
    TrainEnd,
    TrainStart,
    Validation,
)
from trainspec.conformance.run.scenario import Scenario
from trainspec.conformance.run.task import plain_weights


class _Seen:
    """What the loop's log has said so far."""

    def __init__(self) -> None:
        self.epoch: int | None = None  # the epoch in training: None before any
        self.step = 0
        self.final: dict[str, torch.Tensor] = {}  # the weights after the last epoch


class TinyAdapter:
    name = "tiny loop"

    def capabilities(self) -> frozenset[Capability]:
        # what the loop really does; no checkpoint, resume, debug or multi_rank: their
        # clauses come out n/a
        return frozenset({"early_stopping", "start_patience", "val_first", "val_every_n",
                          "test_pass", "eval_only"})

    def environment(self) -> dict[str, str | None]:
        return {"framework": None, "trainer": "tests.guides.tiny_loop:fit"}

    def run(self, scenario: Scenario, ctx: RunContext) -> None:
        task, get = scenario.task, scenario.get
        torch.manual_seed(get("seed"))
        model = torch.nn.Linear(task.features, task.classes)
        optimizer = torch.optim.Adam(model.parameters(), lr=task.lr)
        x = torch.randn(task.n_train, task.features)
        y = (x.sum(dim=1) > 0).long()
        batches = list(zip(torch.split(x, task.batch_size), torch.split(y, task.batch_size),
                           strict=True))
        seen = _Seen()
        ctx.record(Setup(epoch=0, train_step=0, train_len=len(batches)))

        def log(event: str, **info: Any) -> None:  # the loop's log -> the suite's records
            if event == "train_start":
                seen.epoch = info["epoch"]
                ctx.record(TrainStart(epoch=info["epoch"], train_step=info["step"],
                                      state=trainer_state(model, optimizer)))
            elif event == "train_end":
                ctx.record(TrainEnd(epoch=info["epoch"], train_step=info["step"],
                                    batches=info["batches"], optimizer_steps=info["batches"],
                                    loader_len=len(batches)))
            elif event == "val":
                ctx.record(Validation(**info, weights=plain_weights(model.state_dict())))
            elif event == "end":  # before the loop loads the best weights for its test
                seen.step, seen.final = info["step"], plain_weights(model.state_dict())

        def scripted_score(_: torch.nn.Module) -> float:  # the scenario sets every score
            return scenario.scores.pooled(seen.epoch, ctx.world_size)

        cfg = LoopConfig(num_epochs=get("num_epochs"), val_every_n_epochs=get(
            "val.every_n_epochs"), val_first=get("val.first"), minimize=get("val.minimize"),
            patience=get("val.patience"), start_patience=get("val.start_patience"),
            test=get("test.enable"))
        best = fit(model, optimizer, batches, scripted_score, cfg, log=log,
                   test=lambda m: ctx.record(TestPass(weights=plain_weights(m.state_dict()))))
        ctx.record(RunEnd(train_step=seen.step, final_weights=seen.final,
                          best_model=None if best is None else plain_weights(best)))
