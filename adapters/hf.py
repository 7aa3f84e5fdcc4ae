"""The adapter for the Hugging Face transformers ``Trainer`` (``trainspec check hf``).

The Trainer is configured the way its documentation tells a user to, for the scenario's keys,
and never bent to pass a check:

- ``TrainingArguments(eval_strategy="epoch", metric_for_best_model="score",
  greater_is_better=not val.minimize, num_train_epochs=num_epochs, seed=seed,
  gradient_accumulation_steps=grad_accum_steps, max_grad_norm=grad_clip, eval_on_start=val.first,
  use_cpu=True, report_to="none", ...)``, with ``output_dir`` the run's checkpoint folder;
- several ranks: each rank's process is started as torchrun starts it (``RANK``,
  ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``/``MASTER_PORT``), and the same script runs on
  each, as HF's distributed-training docs say; the Trainer reads that environment through
  accelerate and runs DDP, with ``ddp_backend`` (``ddp.backend``, gloo when unset: the only
  collective backend accelerate takes with ``use_cpu``; any other is refused) and
  ``ddp_timeout=ddp.timeout_s``, the TrainingArguments fields for a distributed run. Both are
  passed on several ranks only: with ``ddp_backend`` set and no distributed launch, accelerate's
  PartialState asks torch for a world size and fails. With ``use_cpu=True`` under that
  environment accelerate's PartialState is a MULTI_CPU state that calls ``init_process_group``
  itself, and TrainingArguments hands it the backend but not ``ddp_timeout`` (only its non-CPU
  branches pass a timeout): on the CPU the group keeps torch's default timeout, whatever
  ``ddp_timeout`` says (the Trainer's, reported under DIST-5). Without ``use_cpu`` a CPU-only
  machine gets the timeout but a DistributedType.NO state: no DDP at all. ``trainer.end()``,
  the documented last call of a script, destroys the process group;
- checkpoints: ``save_strategy="epoch"`` and ``load_best_model_at_end=True`` when
  ``ckpt.enable``. ``save_total_limit=2`` keeps the newest checkpoint and the best one (the
  Trainer protects both); 1 would not do: at the end of training the Trainer deletes every
  checkpoint but the best when the limit is 1, leaving no last state to resume or finetune from.
  With ``ckpt.every_n_epochs`` set no limit is given (the Trainer cannot keep every n-th epoch's
  checkpoint beside the last, so it keeps them all); with ``ckpt.save_last=false``,
  ``save_strategy="best"`` and a limit of 1 (only checkpoints of improvements). Without
  ``ckpt.enable``: ``save_strategy="no"``, no best model is kept (the Trainer keeps best weights
  only as a checkpoint directory) and the test pass sees the final weights;
- ``EarlyStoppingCallback(early_stopping_patience=val.patience)`` when patience is set (its
  ``early_stopping_threshold`` stays at 0.0: strictly better counts);
- ``grad_clip`` maps to ``max_grad_norm``; unset means no clipping, 0.0 in the Trainer's terms
  (its own default, 1.0, would clip);
- the task's optimizer and LinearLR schedule are passed as ``optimizers=(optimizer, scheduler)``
  (without a schedule, ``lr_scheduler_type="constant"``); an extra registered scheduler becomes
  one ``ChainedScheduler``, the Trainer having a single scheduler slot;
- resume: ``trainer.train(resume_from_checkpoint=ckpt.load_from)`` with
  ``restore_callback_states_from_checkpoint=True``, the documented switch that restores
  EarlyStoppingCallback's counter (off by default); finetune: the checkpoint directory's
  ``model.safetensors`` (or a weights file) loaded into the model, then a fresh ``train()``;
- SIGTERM: ``enable_jit_checkpoint=True`` (the Trainer's just-in-time checkpoint on SIGTERM);
- the test pass: ``trainer.predict(test split)`` after ``train()``, on the weights the Trainer
  holds then (the best checkpoint's, loaded by ``load_best_model_at_end``, or the final ones).

The model is a ``torch.nn.Module`` around the suite's task model whose forward returns
``{"loss", "logits"}``; a data collator turns the task's (x, y) pairs into ``{"x", "labels"}`` and
draws once from python's and numpy's generators per batch, as a pipeline's augmentations would.
The scripted score reaches the Trainer as its evaluation metric, the way a per-sample metric
does (a token accuracy: correct tokens over counted tokens, summed over samples). Each sample of
the validation split carries a second label, ``tally``, its (total, count) in the validation in
progress (``label_names=["labels", "tally"]``): a rank's scripted (total, count) sits on the
first validation sample that rank evaluates, and every other sample carries (0, 0). Which
samples a rank evaluates is accelerate's documented sharding of the Trainer's eval loader
(``BatchSamplerShard``, ``split_batches=False``): whole batches dealt in turn, batch ``b`` to
rank ``b % world_size``, with padding from the split's start to even them out. The Trainer
gathers every rank's labels (``gather_for_metrics``, which drops the padding) before calling
``compute_metrics`` on every rank, and ``compute_metrics`` returns ``{"score": sum of totals /
sum of counts}`` over the gathered tallies (NaN when nothing was counted): the pooling across
ranks is the Trainer's, a sample counted twice or missed would show in the score. With
``Task.metric == "torchmetrics"`` the two sums are torchmetrics ``SumMetric``s over the gathered
tallies (``sync_on_compute=False``: the Trainer has already gathered them; torchmetrics' own
sync would count each sample once per rank); with ``"local"`` ``compute_metrics`` returns this
rank's own total / count, a score the ranks do not share (each rank's Trainer then keeps its own
best and patience). ``per_device_eval_batch_size`` is the task's batch size, cut to
``ceil(n_val / world_size)`` when the ranks outnumber the validation batches, so that every rank
evaluates samples of its own; a rank with a scripted count and still no sample (more ranks than
samples) cannot be staged, and the adapter refuses the scenario. A validation's event reports
``eval_score`` as the Trainer recorded it.

A small callback turns the Trainer's hooks into the suite's events. A validation's ``improved``
is whether the Trainer's own ``state.best_metric`` moved at that evaluation (from its initial
incumbent, -inf or +inf, when unset); its ``stop`` is whether EarlyStoppingCallback decided to
stop there (its counter reached its patience: the exact condition on which it sets
``control.should_training_stop``; that flag alone cannot tell, as the Trainer also raises it
when the last step is reached). Both are read once the Trainer has acted on the evaluation
(best metric, checkpoint, early stopping): at ``on_save``, or at the next epoch's start, or when
training ends. The Trainer runs early stopping (``on_evaluate``) before it selects the best
metric and saves: the nearest point to the seed's "after save_if_best" is after the save, where
the validation is complete and persisted, so its event is recorded there before the crash point.
An epoch's state (weights, optimizer, scheduler, RNG digests) is recorded at its first
``on_step_begin``: the Trainer restores the RNG state of a resumed run inside the epoch, after
``on_epoch_begin``.

Checkpoints are directories ``checkpoint-<step>/`` (model.safetensors, optimizer.pt,
scheduler.pt, rng_state.pth, trainer_state.json, training_args.bin). The Trainer has no single
"last" file; :meth:`HFTrainerAdapter.describe_checkpoints` maps its own notions onto the suite's
roles: "last" is the directory with the highest step (what ``get_last_checkpoint`` and
``resume_from_checkpoint=True`` pick), "best" is ``best_model_checkpoint`` as the newest complete
``trainer_state.json`` records it, every other checkpoint directory is "epoch". A directory both
newest and best is described twice, once per role. Its ``epoch`` is the last epoch it completed,
zero-based (``floor(trainer_state.epoch) - 1``: the Trainer counts epochs done, as a float), its
``step`` the state's ``global_step``.

Not declared: ``val_every_n`` (the nearest the Trainer has, ``eval_strategy="steps"`` with
``eval_steps = n * steps per epoch``, validates after epochs n-1, 2n-1, ... (zero-based) and the
last, where the spec asks for 0, n, 2n, ... and the last; and ``load_best_model_at_end`` would
then tie saving to the same interval), ``start_patience``
(EarlyStoppingCallback has no counterpart), ``debug`` (the Trainer has no debug mode cutting
every split to one batch).

transformers is imported inside the methods only: importing this module never imports it.
"""

from __future__ import annotations

import json
import math
import os
import random
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch.nn import functional

from trainspec.conformance.run.adapter import Capability, RunContext
from trainspec.conformance.run.files import as_int, file_entry
from trainspec.conformance.run.probe import plain_weights, rng_digests, task_data, task_model
from trainspec.conformance.run.scenario import Scenario, Task
from trainspec.conformance.run.trace import encode
from trainspec.errors import AdapterError

__all__ = ["HFTrainerAdapter", "training_arguments"]

MONITOR = "score"
TALLY = "tally"  # the validation samples' second label: their (total, count)
_PREFIX = "net."  # the model's attribute holding the task's model
_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")
_WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
_STATE_FILE = "trainer_state.json"
# torch files a resume reads, loaded weights-only when described; training_args.bin (a pickled
# TrainingArguments) is written "as good practice" and never read back by the Trainer
_RESUME_FILES = ("optimizer.pt", "scheduler.pt", "rng_state.pth")
# on several ranks each rank saves its own RNG state, rng_state_<rank>.pth, instead
_RANK_RNG = re.compile(r"^rng_state_(\d+)\.pth$")


def _offline() -> None:
    """No network: the Hub is never contacted (a user's explicit setting is kept)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")


class _Model(torch.nn.Module):
    """The task's model, with a forward the Trainer understands: ``{"loss", "logits"}``."""

    def __init__(self, net: torch.nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, x: torch.Tensor, labels: torch.Tensor | None = None,
                tally: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        # ``tally`` is a label the metric reads and the loss does not: the Trainer passes every
        # label to forward, and keeps only the inputs forward names
        logits: torch.Tensor = self.net(x)
        if labels is None:
            return {"logits": logits}
        return {"loss": functional.cross_entropy(logits, labels), "logits": logits}


def _collate(batch: Sequence[tuple[torch.Tensor, ...]]) -> dict[str, torch.Tensor]:
    """The task's (x, y) pairs, or (x, y, tally) triples of a scored split, as the model's
    keyword arguments; one draw from python's and numpy's generators per batch, as a
    pipeline's augmentations would (RES-4)."""
    random.random()
    try:
        import numpy
    except ImportError:
        pass
    else:
        numpy.random.random()
    columns = list(zip(*batch, strict=True))
    out = {"x": torch.stack(columns[0]), "labels": torch.stack(columns[1])}
    if len(columns) > 2:
        out[TALLY] = torch.stack(columns[2])
    return out


def _rank_batches(n_samples: int, batch_size: int, world_size: int) -> int:
    """How many batches one rank draws from a split: accelerate deals whole batches in turn
    and evens them out across ranks (``BatchSamplerShard``, ``even_batches=True``)."""
    batches = -(-n_samples // batch_size)
    return -(-batches // world_size)


def eval_batch_size(task: Task, world_size: int) -> int:
    """``per_device_eval_batch_size``: the task's batch size, cut when the ranks outnumber the
    validation batches so that every rank evaluates validation samples of its own."""
    return max(1, min(task.batch_size, -(-task.n_val // world_size)))


def eval_holders(n_samples: int, batch_size: int, world_size: int) -> list[int]:
    """The rank that evaluates each sample of an evaluation split, as accelerate shards the
    Trainer's eval loader (``BatchSamplerShard``, ``split_batches=False``): whole batches dealt
    in turn, batch ``b`` to rank ``b % world_size``. What a rank is dealt beyond these, to even
    the batches out, repeats the split's first samples: padding, which ``gather_for_metrics``
    drops."""
    return [(i // batch_size) % world_size for i in range(n_samples)]


def sample_tallies(pairs: Sequence[tuple[float, float]], holders: Sequence[int]
                   ) -> list[tuple[float, float]]:
    """Each sample's (total, count) in one validation: rank r's scripted pair on the first
    sample rank r evaluates, (0, 0) on every other sample. Summed over the samples, each once,
    they give sum(totals) and sum(counts) exactly (a sum with zeros rounds nothing)."""
    out = [(0.0, 0.0)] * len(holders)
    for rank, pair in enumerate(pairs):
        first = next((i for i, holder in enumerate(holders) if holder == rank), None)
        if first is not None:
            out[first] = (float(pair[0]), float(pair[1]))
    return out


def pooled_tally(tally: Any, metric: str) -> float:
    """``compute_metrics``' score: sum of totals over sum of counts of the gathered tallies
    (NaN when nothing was counted); summed as they are, or by two torchmetrics ``SumMetric``s."""
    rows = torch.as_tensor(tally, dtype=torch.float64).reshape(-1, 2)
    if metric == "torchmetrics":
        from torchmetrics.aggregation import SumMetric

        # NaN kept, as the probe keeps it; no sync: the Trainer has gathered every rank's rows
        sums = [SumMetric(nan_strategy="disable", sync_on_compute=False) for _ in range(2)]
        for metric_sum, column in zip(sums, rows.unbind(dim=1), strict=True):
            metric_sum.update(column)
        total, count = (float(m.compute()) for m in sums)
    else:
        total, count = (float(column.sum()) for column in rows.unbind(dim=1))
    return math.nan if count == 0 else total / count


class _Scored(torch.utils.data.Dataset[tuple[torch.Tensor, ...]]):
    """An evaluation split whose samples carry, after (x, y), their tally in the evaluation in
    progress (read when the sample is loaded)."""

    def __init__(self, split: torch.utils.data.Dataset[tuple[torch.Tensor, ...]], size: int,
                 tally: Callable[[int], tuple[float, float]]) -> None:
        self.split, self.size, self.tally = split, size, tally

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> tuple[torch.Tensor, ...]:
        x, y = self.split[index]
        return x, y, torch.tensor(self.tally(index), dtype=torch.float64)


def _weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return plain_weights((model.net if isinstance(model, _Model) else model).state_dict())


def _net_state(state: dict[str, Any]) -> dict[str, torch.Tensor]:
    return {k.removeprefix(_PREFIX): v for k, v in state.items()
            if isinstance(v, torch.Tensor) and k.startswith(_PREFIX)}


def _completed_epoch(epoch: object) -> int | None:
    """The last epoch a Trainer state has completed, zero-based; -1 before the first."""
    if isinstance(epoch, bool) or not isinstance(epoch, int | float) or not math.isfinite(epoch):
        return None
    return math.floor(epoch + 1e-6) - 1


def _reason(e: BaseException) -> str:
    """One plain line: the exception's type and its message's first sentence."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(e)).strip()
    first = text.splitlines()[0] if text else ""
    return f"{type(e).__name__}: {first.split('. ')[0]}"


def _step(path: Path) -> int:
    match = _CHECKPOINT.match(path.name)
    return int(match.group(1)) if match else -1


def _checkpoint_dirs(root: Path) -> list[Path]:
    """The Trainer's checkpoint directories under ``root``, oldest step first."""
    if not root.is_dir():
        return []
    return sorted((p for p in root.iterdir() if p.is_dir() and _CHECKPOINT.match(p.name)),
                  key=_step)


def _read_state(directory: Path) -> tuple[dict[str, Any] | None, str | None]:
    """A checkpoint's trainer_state.json, or why it cannot be read."""
    path = directory / _STATE_FILE
    if not path.is_file():
        return None, f"incomplete: no {_STATE_FILE} (the Trainer writes it last)"
    try:
        state = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        return None, f"{_STATE_FILE}: {_reason(e)}"
    if not isinstance(state, dict):
        return None, f"{_STATE_FILE}: not an object"
    return state, None


def _load_weights_file(path: Path) -> dict[str, torch.Tensor]:
    """A weights file: safetensors (safe by construction) or a torch file loaded weights-only."""
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        return load_file(str(path), device="cpu")
    content = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(content, dict):
        raise ValueError(f"{path}: not a state dict but a {type(content).__name__}")
    return content


def _weights_file(directory: Path) -> Path | None:
    return next((directory / n for n in _WEIGHT_FILES if (directory / n).is_file()), None)


def _load_torch_file(path: Path) -> tuple[Any, str | None, str | None]:
    """(content, how it loaded, error): weights-only, then weights-only with numpy's array
    types allowlisted, as the Trainer itself loads rng_state.pth (never a full unpickling)."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True), "weights-only", None
    except Exception as e:  # the file is what is being judged: record, do not raise
        plain = _reason(e)
    try:
        from transformers.trainer_pt_utils import safe_globals

        allowlisted: Callable[[], Any] = safe_globals  # untyped in transformers
        with allowlisted():
            content = torch.load(path, map_location="cpu", weights_only=True)
    except Exception:
        return None, None, plain
    return content, "weights-only, numpy arrays allowlisted (as the Trainer loads it)", None


def _describe_dir(directory: Path, root: Path, role: str | None) -> dict[str, Any]:
    """One checkpoint directory as one entry: its files are its top-level keys."""
    files = sorted(p for p in directory.rglob("*") if p.is_file())
    stats = [p.stat() for p in files]
    entry: dict[str, Any] = {
        "relpath": str(directory.relative_to(root)), "size": sum(s.st_size for s in stats),
        "mtime_ns": max([directory.stat().st_mtime_ns, *(s.st_mtime_ns for s in stats)]),
        "role": role, "epoch": None, "step": None,
        "keys": [str(p.relative_to(directory)) for p in files], "types": {}, "error": None}
    problems: list[str] = []
    state, error = _read_state(directory)
    if state is None:
        problems.append(str(error))
    else:
        entry["epoch"] = _completed_epoch(state.get("epoch"))
        entry["step"] = as_int(state.get("global_step"))
        entry["types"][_STATE_FILE] = "json"
    weights = _weights_file(directory)
    if weights is None:
        problems.append(f"no {' or '.join(_WEIGHT_FILES)}")
    else:
        try:
            _load_weights_file(weights)
            entry["types"][weights.name] = "safetensors" if weights.suffix == ".safetensors" \
                else "dict"
        except Exception as e:  # the file is what is being judged
            problems.append(f"{weights.name}: {_reason(e)}")
    for name in (*_resume_files(directory), "training_args.bin"):
        path = directory / name
        needed = name != "training_args.bin"  # never read back by the Trainer
        if not path.is_file():
            if needed:
                problems.append(f"no {name}")
            continue
        content, how, load_error = _load_torch_file(path)
        if load_error is not None:
            entry["types"][name] = f"does not load weights-only ({load_error})"
            if needed:
                problems.append(f"{name} does not load weights-only ({load_error})")
        else:
            entry["types"][name] = f"{type(content).__name__} ({how})"
    if problems:
        entry["error"] = "; ".join(problems)
    # in the spec's terms (CKPT-1): the config is only in training_args.bin, a pickle no
    # weights-only load reads, and HF records no run id
    present = {"epoch": entry["epoch"] is not None, "step": entry["step"] is not None,
               "model": weights is not None, "optimizer": (directory / "optimizer.pt").is_file(),
               "scheduler": (directory / "scheduler.pt").is_file()}
    entry["holds"] = [name for name, held in present.items() if held]
    return entry


def _resume_files(directory: Path) -> list[str]:
    """The torch files a resume from ``directory`` reads: the optimizer, the scheduler, and the
    RNG state, one file per rank (rng_state_<rank>.pth) when saved on several ranks."""
    ranks = sorted(int(m.group(1)) for p in directory.iterdir()
                   if (m := _RANK_RNG.match(p.name)))
    if ranks and not (directory / "rng_state.pth").is_file():
        return [*_RESUME_FILES[:-1], *(f"rng_state_{rank}.pth" for rank in ranks)]
    return list(_RESUME_FILES)


def _best_name(dirs: Sequence[Path]) -> str | None:
    """The best checkpoint's directory name, as the newest complete trainer_state.json says."""
    for directory in reversed(dirs):
        state, _ = _read_state(directory)
        if state is not None:
            best = state.get("best_model_checkpoint")
            return Path(best).name if isinstance(best, str) and best else None
    return None


def _snapshot(directory: Path | None) -> dict[str, Any] | None:
    """Identity and content of a checkpoint directory, in the suite's BestFile shape."""
    if directory is None or not directory.is_dir():
        return None
    entry = _describe_dir(directory, directory.parent, None)
    out: dict[str, Any] = {"path": str(directory), "mtime_ns": entry["mtime_ns"],
                           "size": entry["size"], "epoch": entry["epoch"],
                           "step": entry["step"]}
    weights = _weights_file(directory)
    if weights is None:
        out["error"] = entry["error"]
        return out
    try:
        out["weights"] = encode(_net_state(_load_weights_file(weights)))
    except Exception as e:  # the file is what is being judged: record, do not raise
        out["error"] = f"{weights.name}: {_reason(e)}"
    return out


def _finetune_weights(load_from: str) -> dict[str, torch.Tensor]:
    """The model weights of a checkpoint directory (or of a weights file), for a finetune."""
    path = Path(load_from)
    if path.is_dir():
        found = _weights_file(path)
        if found is None:
            raise FileNotFoundError(f"checkpoint {path}: no {' or '.join(_WEIGHT_FILES)} in "
                                    "this directory")
        path = found
    elif not path.is_file():
        raise FileNotFoundError(f"checkpoint {path}: no such file or directory")
    return _load_weights_file(path)


def _optimizers(task: Task, model: _Model, total_steps: int
                ) -> tuple[torch.optim.Optimizer, Any]:
    """The task's optimizer and schedule, as the probe builds them."""
    params = list(model.net.parameters())
    groups: list[dict[str, Any]] = [{"params": params}]
    if task.extra_param_group:
        groups = [{"params": params[:-1]}, {"params": params[-1:], "lr": task.lr / 2}]
    optimizer: torch.optim.Optimizer
    if task.optimizer == "sgd":
        optimizer = torch.optim.SGD(groups, lr=task.lr, momentum=0.9)
    else:
        optimizer = torch.optim.Adam(groups, lr=task.lr)
    if not task.scheduler:
        return optimizer, None
    scheduler: Any = torch.optim.lr_scheduler.LinearLR(
        optimizer, start_factor=1.0, end_factor=0.1, total_iters=total_steps)
    if task.extra_scheduler:
        second = torch.optim.lr_scheduler.StepLR(optimizer, step_size=3)
        scheduler = torch.optim.lr_scheduler.ChainedScheduler([scheduler, second])
    return optimizer, scheduler


def _unheld_rank(scenario: Scenario) -> str | None:
    """Why the scenario's scores cannot be staged, if a rank with a scripted count evaluates
    no validation sample (every sample it is dealt is padding, dropped by the Trainer)."""
    task, n = scenario.task, scenario.world_size
    held = set(eval_holders(task.n_val, eval_batch_size(task, n), n))
    script = scenario.scores
    validations = range(len(script.epochs))
    for epoch in validations if script.first is None else (None, *validations):
        for rank in sorted(set(range(n)) - held):
            if script.pairs(epoch, rank) != (0.0, 0.0):
                return (f"the hf adapter cannot stage rank {rank}'s scripted (total, count) "
                        f"{script.pairs(epoch, rank)}: the Trainer's eval loader deals the "
                        f"{task.n_val} validation samples in batches over {n} ranks, and rank "
                        f"{rank} evaluates none of them (only padding, which "
                        "gather_for_metrics drops); run on fewer ranks")
    return None


def training_arguments(scenario: Scenario, ckpt_root: Path) -> dict[str, Any]:
    """The ``TrainingArguments`` keywords for a scenario's keys (see the module's doc)."""
    get, task = scenario.get, scenario.task
    ckpt_on = bool(get("ckpt.enable"))
    limit: int | None
    if not ckpt_on:
        save_strategy, limit = "no", None
    elif get("ckpt.every_n_epochs"):
        save_strategy, limit = "epoch", None  # every checkpoint kept: no every-n-th rotation
    elif get("ckpt.save_last"):
        save_strategy, limit = "epoch", 2  # the newest and the best (1 drops the newest at end)
    else:
        save_strategy, limit = "best", 1  # a checkpoint on each improvement only
    grad_clip = get("grad_clip")
    # on several ranks, the fields HF's docs give for a distributed run (see the module's doc)
    ddp: dict[str, Any] = {} if scenario.world_size == 1 else {
        "ddp_backend": get("ddp.backend") or "gloo", "ddp_timeout": get("ddp.timeout_s")}
    return {
        "output_dir": str(ckpt_root), "num_train_epochs": int(get("num_epochs")),
        "per_device_train_batch_size": task.batch_size,
        "per_device_eval_batch_size": eval_batch_size(task, scenario.world_size),
        "gradient_accumulation_steps": int(get("grad_accum_steps")),
        "max_grad_norm": 0.0 if grad_clip is None else float(grad_clip),
        "eval_strategy": "epoch", "eval_on_start": bool(get("val.first")),
        "save_strategy": save_strategy, "save_total_limit": limit,
        "load_best_model_at_end": ckpt_on, "metric_for_best_model": MONITOR,
        "greater_is_better": not get("val.minimize"),
        "restore_callback_states_from_checkpoint": True, "enable_jit_checkpoint": ckpt_on,
        "train_sampling_strategy": "random" if task.shuffle else "sequential",
        "lr_scheduler_type": "linear" if task.scheduler else "constant",
        "seed": int(get("seed")), "use_cpu": True, "report_to": "none", "disable_tqdm": True,
        "logging_strategy": "no", "dataloader_pin_memory": False,
        "label_names": ["labels", TALLY], **ddp,
    }


class HFTrainerAdapter:
    """Runs scenarios through ``transformers.Trainer`` on the CPU, on one rank or several."""

    name = "hf"

    def capabilities(self) -> frozenset[Capability]:
        # not declared: val_every_n, start_patience, debug (see the module's doc)
        return frozenset({"checkpoint", "resume", "finetune", "early_stopping", "val_first",
                          "test_pass", "grad_accum", "rng_state", "eval_only", "sigterm",
                          "multi_rank"})

    def framework_sources(self) -> dict[str, str]:
        """Where in transformers 5.24 the behaviour behind each failing clause comes from (read
        in the installed sources; paths relative to site-packages)."""
        best = ("transformers/trainer.py, Trainer._determine_best_metric: the incumbent starts "
                "at -inf (greater_is_better) or +inf and a score replaces it when np.greater/"
                "np.less says so, so +inf (maximizing) or -inf (minimizing) is a new best; NaN "
                "compares False and never is")
        first = ("transformers/trainer.py, Trainer._inner_training_loop: eval_on_start runs "
                 "self._evaluate() without _determine_best_metric, so the val.first score is "
                 "never a best candidate; transformers/trainer_callback.py, "
                 "EarlyStoppingCallback.check_metric_value resets its counter while "
                 "state.best_metric is None: the first validation after training starts never "
                 "counts against patience, whatever its score, and val.first's neither")
        no_copy = ("with save_strategy='no' (ckpt.enable=false) the Trainer keeps no best "
                   "weights: best_model_checkpoint, a saved directory, is its only copy "
                   "(Trainer._save_checkpoint, Trainer._load_best_model)")
        rank_local = ("transformers/trainer.py, Trainer._determine_best_metric and "
                      "transformers/trainer_callback.py, EarlyStoppingCallback.on_evaluate judge "
                      "the metrics compute_metrics returned on each rank, with no broadcast from "
                      "rank 0 nor reduction of the stop decision: a rank-local score gives each "
                      "rank its own best and stop, and a rank that stops leaves the others in "
                      "DDP's all-reduce (Trainer._finalize_training's store_flos all_gather "
                      "against the next epoch's backward), bounded only by the process group's "
                      "timeout (see DIST-5)")
        return {
            "BEST-1": f"{first}; {no_copy}",
            "PAT-5": f"{first}; {no_copy}",
            "LOOP-2": "transformers/trainer.py, Trainer._inner_training_loop: "
                      "if args.eval_on_start: self._evaluate(...) runs at the start of every "
                      "train() call, a resumed one (epochs_trained > 0) included",
            "PAT-1": first,
            "NAN-1": best,
            "NAN-2": best,
            "NAN-3": f"{best}; transformers/trainer_callback.py, EarlyStoppingCallback."
                     "check_metric_value takes the same np.greater/np.less verdict, so that +inf "
                     "refills patience",
            "RES-5": "transformers/trainer.py, Trainer._load_optimizer_and_scheduler: "
                     "optimizer.load_state_dict and lr_scheduler.load_state_dict on whatever the "
                     "Trainer holds, with no check that they are the ones saved; torch accepts an "
                     "Adam state in an SGD and raises its own message otherwise",
            "CKPT-1": "transformers/trainer.py, Trainer._save_checkpoint: a checkpoint is a "
                      "directory checkpoint-<step>/ (no run id; the config only in "
                      "training_args.bin, a pickled TrainingArguments that no weights-only load "
                      "reads; rng_state.pth loads weights-only only with numpy's array types "
                      "allowlisted); transformers/trainer_utils.py, rotate_checkpoints keeps the "
                      "newest save_total_limit checkpoints and the best, with no interval",
            "CKPT-2": "transformers/trainer.py, Trainer._save_checkpoint writes straight into "
                      "checkpoint-<step>/ (model, training_args.bin, optimizer.pt, scheduler.pt, "
                      "rng_state.pth, trainer_state.json last), with no temporary directory "
                      "renamed into place; transformers/trainer_utils.py, get_last_checkpoint "
                      "(resume_from_checkpoint=True) picks the highest step, complete or not",
            "CKPT-4": "transformers/trainer.py, Trainer._load_from_checkpoint: "
                      "safetensors.torch.load_file(safe_weights_file) on a damaged file raises "
                      "safetensors' own error, which does not name the checkpoint",
            "CKPT-5": "transformers/trainer_jit_checkpoint.py, CheckpointManager: SIGTERM arms a "
                      "timer of kill_wait=3 s (not a TrainingArguments field); only then does "
                      "JITCheckpointCallback save at the next step or epoch boundary and stop, "
                      "and on_train_end restores the old handler: a run that ends within 3 s "
                      "of SIGTERM goes on to the end",
            "DIST-2": rank_local,
            "DIST-3": rank_local,
            "DIST-4": "transformers/trainer.py, Trainer._save_rng_state: on several ranks every "
                      "process saves its own rng_state_<process_index>.pth into the checkpoint "
                      "directory; Trainer._save_checkpoint: its one dist.barrier() comes after "
                      "the model is saved and before optimizer.pt, scheduler.pt, the RNG files "
                      "and trainer_state.json, and none follows, so another rank starts the next "
                      "epoch while rank 0 still writes",
            "DIST-5": "transformers/training_args.py, TrainingArguments._setup_devices: with "
                      "use_cpu the PartialState kwargs get ddp_backend but not ddp_timeout (only "
                      "the non-CPU branches pass timedelta(seconds=ddp_timeout)); "
                      "accelerate/state.py, PartialState.__init__ then calls "
                      "init_process_group(backend, rank=..., world_size=...) for MULTI_CPU, with "
                      "torch's default timeout (without use_cpu on a CPU-only machine the timeout "
                      "is passed, but the state is DistributedType.NO and the Trainer runs no "
                      "DDP)",
        }

    def environment(self) -> dict[str, str | None]:
        from importlib.metadata import PackageNotFoundError, version

        _offline()
        import transformers
        from transformers import Trainer  # noqa: F401  (paid once here, in the worker: every
        # run is a fork of it)

        try:
            accelerate: str | None = version("accelerate")
        except PackageNotFoundError:
            accelerate = None
        return {"framework": f"transformers {transformers.__version__}",
                "accelerate": accelerate}

    def describe_checkpoints(self, root: Path) -> list[dict[str, Any]]:
        """Every file under ``root`` (role None), then every ``checkpoint-<step>/`` directory
        as one entry with its role: "last" (the highest step), "best" (the state's
        ``best_model_checkpoint``; a directory both newest and best is listed under each role)
        or "epoch" (any other). Its keys are the files it holds; its ``error`` names what a
        resume needs and cannot read (a missing trainer_state.json: a checkpoint cut short)."""
        entries: list[dict[str, Any]] = []
        if not root.exists():
            return entries
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            entries.append(file_entry(path, root, None))
        dirs = _checkpoint_dirs(root)
        best = _best_name(dirs)
        for directory in dirs:
            roles = [r for r, mine in (("last", directory == dirs[-1]),
                                       ("best", directory.name == best)) if mine] or ["epoch"]
            entries += [_describe_dir(directory, root, role) for role in roles]
        return entries

    def run(self, scenario: Scenario, ctx: RunContext) -> None:
        _Run(scenario, ctx).run()


class _Run:
    """One run of a scenario: the model, the arguments, the callbacks, the Trainer."""

    def __init__(self, scenario: Scenario, ctx: RunContext) -> None:
        self.scenario, self.ctx = scenario, ctx
        self.get = scenario.get
        self.phase = "first"  # the evaluation in progress: "first" (eval_on_start), "epoch"
        self.epoch = 0
        self.pending: dict[str, Any] | None = None
        self.trainer: Any = None
        self.final: dict[str, torch.Tensor] = {}
        self.tested_best = False

    def _refuse(self) -> None:
        """Keys this adapter cannot express (undeclared capabilities) fail loudly."""
        get = self.get
        cannot = {"val.every_n_epochs": get("val.every_n_epochs") != 1,
                  "val.start_patience": bool(get("val.start_patience")),
                  "debug": bool(get("debug"))}
        named = [k for k, bad in cannot.items() if bad]
        if named:
            raise AdapterError(f"the hf adapter cannot express {', '.join(named)} (see "
                               "trainspec.adapters.hf)")
        backend = get("ddp.backend")
        if self.ctx.world_size > 1 and backend not in (None, "gloo"):
            raise AdapterError(f"ddp.backend={backend!r}: the hf adapter trains on the CPU "
                               "(use_cpu=True), where accelerate takes gloo only; run the check "
                               "without --backend, or with --backend gloo")
        unheld = _unheld_rank(self.scenario)
        if unheld is not None:
            raise AdapterError(unheld)

    def run(self) -> None:
        _offline()
        import transformers
        from transformers import (
            EarlyStoppingCallback,
            Trainer,
            TrainerCallback,
            TrainingArguments,
        )

        self._refuse()
        s, ctx, get = self.scenario, self.ctx, self.get
        task = s.task
        seed = int(get("seed"))
        transformers.set_seed(seed)
        splits = task_data(task, seed)
        model = _Model(task_model(task))
        num_epochs = int(get("num_epochs"))
        # this rank's share of the batches (accelerate deals whole batches, evened out)
        train_len = _rank_batches(len(splits["train"]), task.batch_size, ctx.world_size)
        total_steps = max(1, train_len * max(num_epochs, 1))
        load_from = get("ckpt.load_from")
        resume = bool(get("ckpt.resume")) and not get("ckpt.model_only") \
            and load_from is not None
        if load_from is not None and not resume:  # finetune: the weights, a fresh run
            model.load_state_dict(_finetune_weights(str(load_from)))
        optimizer, scheduler = _optimizers(task, model, total_steps)

        ckpt_on = bool(get("ckpt.enable"))
        args = TrainingArguments(**training_arguments(s, ctx.ckpt_root))

        callbacks: list[Any] = []
        patience = get("val.patience")
        if patience is not None:
            callbacks.append(EarlyStoppingCallback(early_stopping_patience=int(patience)))
        callbacks.append(self._events(TrainerCallback))

        def compute_metrics(prediction: Any) -> dict[str, float]:
            if self.phase == "test":
                return {}
            if task.metric == "local":  # this rank's own score, never shared with the others
                total, count = s.scores.pairs(self.validation(), ctx.rank)
                return {MONITOR: math.nan if count == 0 else total / count}
            # the tallies of every rank's samples, gathered by the Trainer (label_ids[1])
            return {MONITOR: pooled_tally(prediction.label_ids[1], task.metric)}

        self.final = _weights(model)
        val = _Scored(splits["val"], task.n_val, self.tally)
        # the test split carries the label too (the Trainer computes a loss only when every
        # label is present); the test pass scores nothing
        test = _Scored(splits["test"], task.n_test, lambda index: (0.0, 0.0))
        self.trainer = trainer = Trainer(
            model=model, args=args, train_dataset=splits["train"], eval_dataset=val,
            data_collator=_collate, compute_metrics=compute_metrics, callbacks=callbacks,
            optimizers=(optimizer, scheduler))
        ctx.emit({"ev": "setup", "ckpt_given": load_from is not None,
                  "train_len_seen": train_len, "schedule_steps": total_steps,
                  "epoch": 0, "train_step": 0,
                  "cfg_seen": {"num_epochs": num_epochs,
                               "grad_accum_steps": get("grad_accum_steps"),
                               "ckpt.enable": ckpt_on, "save_preds.enable": None,
                               "wandb.mode": None}})
        trainer.train(resume_from_checkpoint=str(load_from) if resume else None)
        self.flush()
        best = self.best_dir()
        self.tested_best = ckpt_on and best is not None
        if get("test.enable"):
            self.phase = "test"
            trainer.predict(test)
        snapshot = _snapshot(best)
        best_model = None if snapshot is None else snapshot.get("weights")
        ctx.emit({"ev": "end", "epoch": max(self.epoch, 0),
                  "train_step": int(trainer.state.global_step), "best_file": snapshot,
                  "final_weights": encode(self.final), "best_model": best_model})
        end: Callable[[], None] = trainer.end  # untyped in transformers
        end()  # the documented last call of a script: destroys the process group, if any

    def validation(self) -> int | None:
        """The validation in progress, as the score script names it (None: val.first)."""
        return None if self.phase == "first" else self.epoch

    def tally(self, index: int) -> tuple[float, float]:
        """Validation sample ``index``'s (total, count) in the validation in progress."""
        s, task, n = self.scenario, self.scenario.task, self.ctx.world_size
        pairs = [s.scores.pairs(self.validation(), rank) for rank in range(n)]
        holders = eval_holders(task.n_val, eval_batch_size(task, n), n)
        return sample_tallies(pairs, holders)[index]

    def _events(self, base: type[Any]) -> Any:
        """The callback turning the Trainer's hooks into the suite's events."""
        run, ctx, task = self, self.ctx, self.scenario.task

        class Events(base):  # type: ignore[misc]
            def __init__(self) -> None:
                self.batches = self.steps = self.start_step = 0
                self.started = False

            def on_epoch_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
                run.flush()
                epoch = _completed_epoch(state.epoch)
                run.epoch, run.phase = (0 if epoch is None else epoch + 1), "epoch"
                ctx.crash_point("train_start", run.epoch)
                self.batches = self.steps = 0
                self.start_step, self.started = int(state.global_step), False

            def on_step_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
                if self.started:
                    return
                self.started = True  # the Trainer has restored a resumed run's RNG by now
                trainer = run.trainer
                snapshot: dict[str, Any] = {"weights": _weights(trainer.model),
                                            "optimizer": trainer.optimizer.state_dict(),
                                            "rng": rng_digests()}
                if task.scheduler:
                    snapshot["scheduler"] = trainer.lr_scheduler.state_dict()
                last = run.last_dir()
                last_epoch = None
                if last is not None:
                    state_json, _ = _read_state(last)
                    last_epoch = None if state_json is None else \
                        _completed_epoch(state_json.get("epoch"))
                ctx.emit({"ev": "train_start", "epoch": run.epoch,
                          "train_step": int(state.global_step), "state": encode(snapshot),
                          "last_file_epoch": last_epoch, "best_file": _snapshot(run.best_dir())})

            def on_substep_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
                self.batches += 1

            def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
                self.batches += 1
                self.steps += 1

            def on_epoch_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
                epoch = run.epoch
                run.final = _weights(run.trainer.model)
                loader = kw.get("train_dataloader")
                planned = run.planned()
                ctx.emit({"ev": "train_end", "epoch": epoch,
                          "train_step": int(state.global_step), "batches": self.batches,
                          "optimizer_steps": self.steps,
                          "loader_len": len(loader) if loader is not None else self.batches,
                          "loader_batch_size": getattr(loader, "batch_size", None) or getattr(
                              getattr(loader, "batch_sampler", None), "batch_size", None),
                          "loader_lens": planned, "loader_batches": planned})
                ctx.crash_point("train_end", epoch)
                if control.should_evaluate:
                    ctx.crash_point("val_start", epoch)

            def on_evaluate(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
                if run.phase == "test":
                    return
                phase = run.phase
                metrics = kw.get("metrics") or {}
                score = metrics.get(f"eval_{MONITOR}")  # the score as the Trainer recorded it
                run.pending = {
                    "ev": "val", "epoch": run.epoch if phase == "epoch" else 0, "phase": phase,
                    "score": None if score is None else float(score),
                    "weights": encode(_weights(run.trainer.model)),
                    "best_before": state.best_metric}

            def on_save(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
                run.flush()

            def on_train_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
                run.flush()

            def on_predict(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
                ctx.emit({"ev": "test", "used_best": run.tested_best,
                          "weights": encode(_weights(run.trainer.model))})

        return Events()

    def planned(self) -> dict[str, int | None]:
        """How many batches the Trainer draws from each evaluation split on this rank: its
        share of all of them, evened out with padding (it has no third, eval split)."""
        task, n = self.scenario.task, self.ctx.world_size
        size = eval_batch_size(task, n)
        return {"val_loader": _rank_batches(task.n_val, size, n),
                "test_loader": _rank_batches(task.n_test, size, n),
                "eval_loader": None}

    def last_dir(self) -> Path | None:
        dirs = _checkpoint_dirs(self.ctx.ckpt_root)
        return dirs[-1] if dirs else None

    def best_dir(self) -> Path | None:
        """The Trainer's best checkpoint directory (its live state), if it exists."""
        best = None if self.trainer is None else self.trainer.state.best_model_checkpoint
        return Path(best) if isinstance(best, str) and best and Path(best).is_dir() else None

    def early_stopping(self) -> Any:
        """The EarlyStoppingCallback in use (a resume replaces it with a restored copy)."""
        return next((cb for cb in self.trainer.callback_handler.callbacks
                     if type(cb).__name__ == "EarlyStoppingCallback"), None)

    def flush(self) -> None:
        """Emit the pending validation once the Trainer has acted on it, then the crash point
        after its save."""
        if self.pending is None or self.trainer is None:
            return
        pending, self.pending = self.pending, None
        state = self.trainer.state
        before = pending.pop("best_before")
        greater = bool(self.trainer.args.greater_is_better)
        incumbent = (-math.inf if greater else math.inf) if before is None else before
        after = state.best_metric
        improved = after is not None and repr(float(after)) != repr(float(incumbent))
        es = self.early_stopping()
        stop = es is not None and \
            es.early_stopping_patience_counter >= es.early_stopping_patience
        self.ctx.emit({**pending, "improved": improved, "stop": bool(stop),
                       "best_file": _snapshot(self.best_dir())})
        if pending["phase"] == "epoch":
            self.ctx.crash_point("val_after_save", int(pending["epoch"]))

