"""The adapter of ``bundle_loop.py``: a loop function with callbacks, 1-based epochs, a
checkpoint spread over several files (its epoch in ``last.epoch`` and in the best file's name)
and decisions seen from the files it writes and the flag its callbacks set.

    trainspec check tests.worked.bundle_adapter:BundleAdapter --world-size 1
"""

from __future__ import annotations

import re
from pathlib import Path

import torch
from torch.utils.data import DataLoader

from tests.worked import bundle_loop as bundle
from trainspec import kit

_BEST = re.compile(r"checkpoint_epoch_(\d+)\.ckpt")


def _progress(path: Path, content: object) -> tuple[int | None, int | None]:
    """The best file's epoch is in its name, the last file's in last.epoch beside it."""
    named = _BEST.fullmatch(path.name)
    if named:
        return int(named.group(1)), None
    beside = path.parent / "last.epoch"
    return (int(beside.read_text()) if beside.is_file() else None), None


LAYOUT = kit.FileLayout(roles={"checkpoint.ckpt": "last", "checkpoint_epoch_*.ckpt": "best"},
                        keys={"model": ""}, epoch_base=1, progress=_progress)


class BundleAdapter:
    name = "poutyne ModelBundle (shape)"

    def capabilities(self) -> frozenset[kit.Capability]:
        return frozenset({"checkpoint", "resume", "early_stopping", "test_pass"})

    def environment(self) -> dict[str, str | None]:
        return {"framework": None, "trainer": "tests.worked.bundle_loop:train_bundle"}

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
        rec = kit.Recorder(scenario, ctx, epoch_base=1, files=LAYOUT, model=model,
                           optimizer=optimizer, schedulers=[scheduler])
        # it resumes from the folder it writes in: ckpt.load_from names a file there
        load_from = get("ckpt.load_from")
        folder = (ctx.ckpt_root / load_from).parent if load_from else ctx.ckpt_root
        mode = "min" if get("val.minimize") else "max"

        class Hooks(bundle.Callback):  # first in the list: sees each epoch begin
            def on_epoch_begin(self, epoch: int) -> None:
                rec.train_start(epoch)

        class Decided(bundle.Callback):  # last: every other callback has acted
            def on_epoch_end(self, epoch: int, logs: bundle.Logs) -> None:
                wrote = (folder / f"checkpoint_epoch_{epoch}.ckpt").is_file()  # a new best
                rec.decide(improved=wrote, stop=self.run.stop_training)

        def scripted(m: torch.nn.Module) -> float:  # the validation, after the epoch trained
            epoch = rec.epoch or 1
            rec.train_end(epoch, batches=len(loader), loader_len=len(loader))
            rec.val_start(epoch)
            score = rec.score(epoch)
            rec.validation(epoch, score=score, improved=None, stop=None)
            return score

        patience = get("val.patience")
        stopping = [] if patience is None else [
            bundle.EarlyStopping(monitor="val_score", mode=mode, patience=patience)]
        kit.observe(bundle, "fit", before=lambda *a, **k: k["callbacks"].insert(0, Hooks()))
        started = (folder / "last.epoch").is_file()
        rec.setup(epoch=int((folder / "last.epoch").read_text()) + 1 if started else 1,
                  train_len=len(loader))
        bundle.train_bundle(str(folder), model, optimizer, scheduler, loader, scripted,
                            epochs=get("num_epochs"), monitor_mode=mode,
                            callbacks=[*stopping, Decided()])
        if get("test.enable"):
            rec.test(model)  # the bundle restored its best weights into the model
        best = LAYOUT.snapshot(folder, "best")
        rec.end(best_model=None if best is None else best.weights)
