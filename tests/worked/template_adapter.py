"""The adapter of ``template_trainer.py``: a class with hooks, 1-based epochs, its own file
names, and decisions it keeps to itself (a comparison, a local counter, a ``break``).

    trainspec check tests.worked.template_adapter:TemplateAdapter --world-size 1
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch.nn import functional
from torch.utils.data import DataLoader

from tests.worked.template_trainer import ConfigParser, Trainer, inf
from trainspec import kit

# checkpoint-epoch<N>.pth every save_period epochs (the newest is what a resume loads), a copy
# as model_best.pth on an improvement; the epoch saved is 1-based. Every file pickles the
# config object (a ConfigParser holding the run's folders as pathlib paths): no weights-only
# load takes it, and the kit's default reading (the file's own classes) does, unasked
LAYOUT = kit.FileLayout(roles={"checkpoint-epoch*.pth": "last", "model_best.pth": "best"},
                        keys={"model": "state_dict", "optimizer": "optimizer", "config": "config"},
                        epoch_base=1)


class TemplateAdapter:
    name = "pytorch-template (shape)"

    def capabilities(self) -> frozenset[kit.Capability]:
        # ckpt.every_n_epochs is save_period, val.patience early_stop, ckpt.load_from --resume
        return frozenset({"checkpoint", "resume", "early_stopping"})

    def environment(self) -> dict[str, str | None]:
        return {"framework": None, "trainer": "tests.worked.template_trainer:Trainer"}

    def describe_checkpoints(self, root: Path) -> list[kit.FileRecord]:
        return LAYOUT.describe(root)

    def run(self, scenario: kit.Scenario, ctx: kit.RunContext) -> None:
        task, get = scenario.task, scenario.get
        torch.manual_seed(get("seed"))
        data = kit.task_data(task, get("seed"))
        loader = DataLoader(data["train"], batch_size=task.batch_size, shuffle=task.shuffle)
        model = kit.task_model(task)
        optimizer = kit.task_optimizer(task, model.parameters())
        schedulers = kit.task_schedulers(task, optimizer, len(loader) * get("num_epochs"))
        rec = kit.Recorder(scenario, ctx, epoch_base=1, files=LAYOUT, model=model,
                           optimizer=optimizer, schedulers=schedulers)
        patience = get("val.patience")
        config = {"arch": type(model).__name__, "optimizer": {"type": task.optimizer},
                  "trainer": {"epochs": get("num_epochs"), "save_dir": str(ctx.ckpt_root),
                              "save_period": get("ckpt.every_n_epochs") or 1,
                              "monitor": ("min" if get("val.minimize") else "max") + " val_score",
                              "early_stop": inf if patience is None else patience}}

        class Hooked(Trainer):
            def _train_epoch(self, epoch: int) -> dict[str, Any]:
                rec.train_start(epoch)
                return super()._train_epoch(epoch)

            def _valid_epoch(self, epoch: int) -> dict[str, Any]:
                rec.train_end(epoch, batches=len(loader), loader_len=len(loader))
                rec.val_start(epoch)
                score = rec.score(epoch) + 0.0  # a float object of its own
                # train() keeps this very object as its best when it improves on it
                rec.validation(epoch, score=score, improved=lambda: self.mnt_best is score,
                               stop=None)
                return {"score": score}

        trainer = Hooked(model, functional.cross_entropy, optimizer,
                         ConfigParser(config, get("ckpt.load_from")), loader,
                         DataLoader(data["val"]), schedulers[0] if schedulers else None,
                         resume=get("ckpt.load_from"))  # its one way to load a file: resume
        rec.setup(epoch=trainer.start_epoch, train_len=len(loader))
        said: list[str] = []  # its stop is a `break` after a log line: its log says it stopped
        kit.observe(trainer.logger, "info", before=lambda message, *a: said.append(message))
        trainer.train()
        best = LAYOUT.snapshot(ctx.ckpt_root, "best")  # it keeps its best in model_best.pth only
        rec.end(best_model=None if best is None else best.weights,
                stop=any("Training stops" in m for m in said))
