"""The adapter of ``imagenet_loop.py``: a loop function with no hooks, whose module functions
(``train``, ``validate``, ``save_checkpoint``) are wrapped for the run, and whose improvement
decision is a local variable it passes on to ``save_checkpoint``.

    trainspec check tests.worked.imagenet_adapter:ImagenetAdapter --world-size 1
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from torch.nn import functional
from torch.utils.data import DataLoader

from tests.worked import imagenet_loop as loop
from trainspec import kit

# checkpoint.pth.tar after every epoch, copied to model_best.pth.tar on an improvement; its
# "epoch" is the next epoch to run, so 1 for a file written after epoch 0
LAYOUT = kit.FileLayout(roles={"checkpoint.pth.tar": "last", "model_best.pth.tar": "best"},
                        keys={"model": "state_dict", "optimizer": "optimizer",
                              "scheduler": "scheduler"}, epoch_base=1)


class ImagenetAdapter:
    name = "imagenet example (shape)"

    def capabilities(self) -> frozenset[kit.Capability]:
        return frozenset({"checkpoint", "resume"})  # --resume; no early stopping, no test pass

    def environment(self) -> dict[str, str | None]:
        return {"framework": None, "trainer": "tests.worked.imagenet_loop:main_worker"}

    def describe_checkpoints(self, root: Path) -> list[kit.FileRecord]:
        return LAYOUT.describe(root)

    def run(self, scenario: kit.Scenario, ctx: kit.RunContext) -> None:
        task, get = scenario.task, scenario.get
        torch.manual_seed(get("seed"))
        data = kit.task_data(task, get("seed"))
        loader = DataLoader(data["train"], batch_size=task.batch_size, shuffle=task.shuffle)
        model = kit.task_model(task)
        optimizer = kit.task_optimizer(task, model.parameters())
        scheduler = kit.task_schedulers(task, optimizer, len(loader) * get("num_epochs"))[0]
        rec = kit.Recorder(scenario, ctx, files=LAYOUT, model=model, optimizer=optimizer,
                           schedulers=[scheduler])
        load_from = get("ckpt.load_from")
        args = loop.Args(epochs=get("num_epochs"),
                         resume=os.path.abspath(load_from) if load_from else "")
        os.chdir(ctx.ckpt_root)  # it writes into the working folder (a forked run's own)
        now: dict[str, int] = {}

        def train_start(*a: Any) -> None:  # train(loader, model, criterion, optimizer, epoch)
            if not now:
                rec.setup(epoch=a[4], train_len=len(loader))  # after its resume, if any
            now["epoch"] = a[4]
            rec.train_start(a[4])

        def scripted(*a: Any) -> float:  # validate() gives the scenario's score
            rec.val_start(now["epoch"])
            score = rec.score(now["epoch"])
            rec.validation(now["epoch"], score=score, improved=None, stop=None)
            return score

        kit.observe(loop, "train", before=train_start, after=lambda _, *a: rec.train_end(
            a[4], batches=len(loader), loader_len=len(loader)))
        loop.validate = scripted  # type: ignore[assignment]
        # is_best, a local variable of the loop, is handed to save_checkpoint: seen there
        kit.observe(loop, "save_checkpoint",
                    after=lambda _, state, is_best: rec.decide(stop=False, improved=is_best))
        loop.main_worker(args, model, functional.cross_entropy, optimizer, scheduler, loader,
                         DataLoader(data["val"]))
        if not now:
            rec.setup(epoch=args.start_epoch, train_len=len(loader))
        best = LAYOUT.snapshot(ctx.ckpt_root, "best")  # no best model in memory: the file's
        rec.end(best_model=None if best is None else best.weights)
