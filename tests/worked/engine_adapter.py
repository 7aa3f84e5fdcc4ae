"""The adapter of ``engine_runner.py``: a framework runner whose hooks run by priority, whose
checkpoint hook writes before the validation and whose early-stopping hook decides after it.

    trainspec check tests.worked.engine_adapter:EngineAdapter --world-size 1
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader

from tests.worked.engine_runner import CheckpointHook, EarlyStoppingHook, Hook, Runner
from trainspec import kit

# epoch_<n>.pth after each epoch (n 1-based), best_score_epoch_<n>.pth for the best; both
# record in meta the next epoch to run (so 1 for the first epoch) and the iteration
LAYOUT = kit.FileLayout(roles={"best_score_epoch_*.pth": "best", "epoch_*.pth": "last"},
                        keys={"model": "state_dict", "optimizer": "optimizer",
                              "scheduler": "param_schedulers"},
                        epoch_base=1,
                        progress=lambda path, c: _meta(c))


def _meta(content: Mapping[str, object]) -> tuple[int | None, int | None]:
    meta = content.get("meta")
    if not isinstance(meta, Mapping):
        return None, None
    return meta.get("epoch"), meta.get("iter")


class EngineAdapter:
    name = "engine runner (shape)"

    def capabilities(self) -> frozenset[kit.Capability]:
        # ckpt.every_n_epochs is the checkpoint hook's interval, val.every_n_epochs the loop's
        # val_interval, val.patience the early-stopping hook's patience
        return frozenset({"checkpoint", "resume", "finetune", "early_stopping", "val_every_n",
                          "eval_only"})

    def environment(self) -> dict[str, str | None]:
        return {"framework": None, "trainer": "tests.worked.engine_runner:Runner"}

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
        rec = kit.Recorder(scenario, ctx, files=LAYOUT, model=model, optimizer=optimizer,
                           schedulers=schedulers)
        rule = "less" if get("val.minimize") else "greater"
        # ckpt.enable is not mapped: the checkpoint hook is also the engine's only best tracking
        hooks: list[Hook] = [CheckpointHook(interval=get("ckpt.every_n_epochs") or 1,
                                            save_best="score", rule=rule)]
        if get("val.patience") is not None:
            hooks.append(EarlyStoppingHook("score", rule=rule, patience=get("val.patience")))

        class Scored(Runner):
            def val_step(self) -> dict[str, float]:
                score = rec.score(self.epoch) + 0.0  # a float object of its own
                self.message_hub.update_scalar("val/score", score)  # as the engine logs it
                return {"score": score}

        def validated(r: Runner, metrics: dict[str, Any]) -> None:
            # after every hook: the checkpoint hook kept this very score as its best, or not
            best = r.message_hub.runtime_info.get("best_score")
            rec.validation(r.epoch, score=metrics["score"], improved=best is metrics["score"],
                           stop=r.train_loop.stop_training)

        first, last = kit.HookBracket(
            before={"before_train": lambda r: rec.setup(epoch=r.epoch, train_len=len(loader),
                                                        train_step=r.iter),
                    "before_train_epoch": lambda r: rec.train_start(r.epoch, train_step=r.iter),
                    "after_train_epoch": lambda r: rec.train_end(
                        r.epoch, batches=len(loader), loader_len=len(loader), train_step=r.iter),
                    "before_val_epoch": lambda r: rec.val_start(r.epoch)},
            after={"after_val_epoch": validated}).hooks(base=Hook)
        runner = Scored(model, str(ctx.ckpt_root), loader, DataLoader(data["val"]), optimizer,
                        schedulers, get("num_epochs"), val_interval=get("val.every_n_epochs"),
                        hooks=hooks, load_from=get("ckpt.load_from"),
                        resume=bool(get("ckpt.resume")) and not get("ckpt.model_only"))
        runner.register_hook(first, priority="HIGHEST")
        runner.register_hook(last, priority="LOWEST")
        runner.train()
        best = LAYOUT.snapshot(ctx.ckpt_root, "best")  # its best lives in its best file only
        rec.end(best_model=None if best is None else best.weights,
                stop=runner.train_loop.stop_training)
