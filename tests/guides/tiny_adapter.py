"""The adapter that lets ``trainspec check`` drive the tiny loop of ``tiny_loop.py``.

    trainspec check tests.guides.tiny_adapter:TinyAdapter --clauses LOOP,BEST,NAN,PAT \
        --world-size 1
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import DataLoader

from tests.guides.tiny_loop import LoopConfig, fit
from trainspec import kit


class TinyAdapter:
    name = "tiny loop"

    def capabilities(self) -> frozenset[kit.Capability]:
        # what the loop really does; no checkpoint, resume, debug or multi_rank: their
        # clauses come out n/a
        return frozenset({"early_stopping", "start_patience", "val_first", "val_every_n",
                          "test_pass", "eval_only"})

    def environment(self) -> dict[str, str | None]:
        return {"framework": None, "trainer": "tests.guides.tiny_loop:fit"}

    def run(self, scenario: kit.Scenario, ctx: kit.RunContext) -> None:
        task, get = scenario.task, scenario.get
        torch.manual_seed(get("seed"))
        # the suite's task: the same data, model and optimizer for every target
        batches = list(DataLoader(kit.task_data(task, get("seed"))["train"],
                                  batch_size=task.batch_size))
        model = kit.task_model(task)
        optimizer = kit.task_optimizer(task, model.parameters())
        # the Recorder makes the records: weights copied, optimizer steps counted
        rec = kit.Recorder(scenario, ctx, model=model, optimizer=optimizer)
        rec.setup(epoch=0, train_len=len(batches))

        def log(event: str, **info: Any) -> None:  # the loop's log -> the suite's records
            if event == "train_start":
                rec.train_start(info["epoch"])
            elif event == "train_end":
                rec.train_end(info["epoch"], batches=info["batches"], loader_len=len(batches))
            elif event == "val":  # the loop's own verdicts, final when it logs them
                rec.validation(None if info["phase"] == "first" else info["epoch"],
                               score=info["score"], improved=info["improved"],
                               stop=info["stop"])

        cfg = LoopConfig(num_epochs=get("num_epochs"), val_every_n_epochs=get(
            "val.every_n_epochs"), val_first=get("val.first"), minimize=get("val.minimize"),
            patience=get("val.patience"), start_patience=get("val.start_patience"),
            test=get("test.enable"))
        # every score is scripted: that of the epoch under way (None before any: val.first)
        best = fit(model, optimizer, batches, lambda _: rec.score(rec.epoch), cfg, log=log,
                   test=rec.test)
        rec.end(best_model=best)  # the final weights are those at the last epoch's end
