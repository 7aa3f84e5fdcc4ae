"""The executable model of the spec: every observable of a run, as a pure function of its scenario.

The oracle (:mod:`trainspec.conformance.spec.oracle`) decides one sequence of validations. The
model puts those decisions into whole runs of every kind the clauses speak of: a fresh run, a
run resumed from a file an earlier run left (interrupted anywhere, or after its final epoch or
its early stop), a finetune from such a file, and a debug run. For each it says which epochs
are trained from which step, which validations run with which pooled score and verdicts,
which validation holds the best weights, whether the test pass runs and on which weights, and
which checkpoint files the run leaves in its own folder, with the epoch and step each holds.

Pure: no torch, no processes. The model-based checks (``checks/model_based.py``) compare
generated runs with it; every expectation cites the sentence of the spec it comes from.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from trainspec.conformance.spec.oracle import decide, expected_validations

__all__ = [
    "Chain",
    "FileExpect",
    "Interruption",
    "ModelConfig",
    "RunExpect",
    "RunKind",
    "ValidationExpect",
    "expect_chain",
    "expect_run",
    "pooled_score",
]

RunKind = Literal["fresh", "resumed", "finetuned", "debug"]
# where a source run is interrupted (a kill there leaves what the run wrote before it)
Interruption = Literal["train_start", "train_end", "val_start", "val_after_save"]
Score = Callable[[int | None], float]  # the pooled score of the validation after an epoch
RankPairs = Sequence[tuple[float, float]]  # (total, count) per rank


def pooled_score(pairs: RankPairs) -> float:
    """Sum of every rank's totals over the sum of their counts; NaN when none counted
    (DIST-1.1, DIST-1.3)."""
    count = sum(c for _, c in pairs)
    return math.nan if count == 0 else sum(t for t, _ in pairs) / count


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelConfig:
    """The config keys the model reads (the outline's names, flattened)."""

    num_epochs: int = 3
    val_first: bool = False
    val_every_n_epochs: int = 1
    minimize: bool = False
    patience: int | None = None
    start_patience: int = 0
    test_enable: bool = True
    ckpt_enable: bool = True
    ckpt_every_n_epochs: int | None = None
    save_last: bool = True

    @classmethod
    def from_mapping(cls, config: Mapping[str, Any]) -> ModelConfig:
        """From the nested config of a scenario (``{"val": {"first": ...}, ...}``)."""
        val, ckpt = config.get("val", {}), config.get("ckpt", {})
        return cls(num_epochs=int(config.get("num_epochs", 3)),
                   val_first=bool(val.get("first", False)),
                   val_every_n_epochs=int(val.get("every_n_epochs", 1)),
                   minimize=bool(val.get("minimize", False)), patience=val.get("patience"),
                   start_patience=int(val.get("start_patience", 0)),
                   test_enable=bool(config.get("test", {}).get("enable", True)),
                   ckpt_enable=bool(ckpt.get("enable", True)),
                   ckpt_every_n_epochs=ckpt.get("every_n_epochs"),
                   save_last=bool(ckpt.get("save_last", True)))

    def effective(self, kind: RunKind) -> ModelConfig:
        """The config the run follows: debug caps the epochs at 1, 0 staying 0 (DBG-2.1,
        DBG-2.2), and writes no checkpoint (DBG-3.1)."""
        if kind != "debug":
            return self
        return replace(self, num_epochs=min(self.num_epochs, 1), ckpt_enable=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class ValidationExpect:
    """One validation the run makes: ``epoch`` None for val.first."""

    epoch: int | None
    score: float
    improved: bool
    stop: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class FileExpect:
    """A checkpoint file the run leaves in its own folder, as its final version holds it."""

    role: Literal["last", "best", "epoch"]
    name: str  # last.pt, best.pt, epoch_<e>.pt
    epoch: int  # the last completed epoch; -1 for a best.pt of the val.first validation
    step: int


@dataclass(frozen=True, slots=True, kw_only=True)
class RunExpect:
    """Everything the clauses say a run does."""

    kind: RunKind
    start_epoch: int
    start_step: int
    epochs_trained: tuple[int, ...]
    steps_after: tuple[int, ...]  # train_step after each epoch trained
    validations: tuple[ValidationExpect, ...]
    stop_epoch: int | None  # -1: stopped at val.first; None: no early stop
    # the validation whose weights are best: (epoch, in this run?); None when none improved
    best: tuple[int | None, bool] | None
    test_passes: int
    test_on: Literal["best", "final"]
    files: tuple[FileExpect, ...]
    exit_status: int = 0
    # checkpointing on (the run's effective ckpt.enable): CKPT-1 and BEST-3 speak of files
    # only then; what a run writes with it off, no clause of those governs (debug: DBG-3)
    ckpt_enable: bool = True
    num_epochs: int = 0  # the run's epochs, capped as its kind caps them (a debug run's one)

    @property
    def best_epoch(self) -> int | None:
        """-1 for the val.first weights; None when nothing improved."""
        if self.best is None:
            return None
        return -1 if self.best[0] is None else self.best[0]


@dataclass(frozen=True, slots=True, kw_only=True)
class Chain:
    """A source run (interrupted or not), the file a second run starts from, and that run."""

    source: RunExpect  # what the source run did up to its interruption (or its end)
    reached: bool  # the interruption was reached (else the source ran to its end)
    resumable: tuple[FileExpect, ...]  # the files the source left that a run resumes from
    start_file: FileExpect | None  # the one chosen; None: nothing to start from
    run: RunExpect | None  # the second run; None when there is no file to start from


@dataclass(frozen=True, slots=True, kw_only=True)
class _Whole:
    """The uninterrupted fresh run's decisions, the basis of every kind."""

    validations: tuple[ValidationExpect, ...]
    stop_epoch: int | None
    best_index: int | None
    epochs: tuple[int, ...]


def _whole(cfg: ModelConfig, score: Score) -> _Whole:
    schedule = expected_validations(num_epochs=cfg.num_epochs,
                                    every_n_epochs=cfg.val_every_n_epochs, first=cfg.val_first)
    outcome = decide([(e, score(e)) for e in schedule], minimize=cfg.minimize,
                     patience=cfg.patience, start_patience=cfg.start_patience,
                     num_epochs=cfg.num_epochs)
    vals = tuple(ValidationExpect(epoch=d.epoch, score=d.score, improved=d.improved,
                                  stop=d.stop) for d in outcome.decisions)
    epochs = () if outcome.stop_epoch == -1 else outcome.epochs_trained
    return _Whole(validations=vals, stop_epoch=outcome.stop_epoch,
                  best_index=outcome.best_index, epochs=tuple(epochs))


def _files(cfg: ModelConfig, epochs: Sequence[int], vals: Sequence[ValidationExpect],
           step_after: Mapping[int, int], start_step: int) -> tuple[FileExpect, ...]:
    """The files a run that trained ``epochs`` and made ``vals`` leaves: last.pt after every
    epoch (CKPT-1.1, CKPT-1.2), epoch_<e>.pt when ``e % every_n_epochs == 0`` (CKPT-1.3,
    CKPT-1.4), best.pt on every improvement, the last one's epoch and step (BEST-3)."""
    if not cfg.ckpt_enable:
        return ()
    out: list[FileExpect] = []
    every = cfg.ckpt_every_n_epochs
    for e in epochs:
        if every is not None and e % every == 0:
            out.append(FileExpect(role="epoch", name=f"epoch_{e}.pt", epoch=e,
                                  step=step_after[e]))
    if cfg.save_last and epochs:
        out.append(FileExpect(role="last", name="last.pt", epoch=epochs[-1],
                              step=step_after[epochs[-1]]))
    improved = [v for v in vals if v.improved]
    if improved:
        at = improved[-1].epoch
        out.append(FileExpect(role="best", name="best.pt", epoch=-1 if at is None else at,
                              step=start_step if at is None else step_after[at]))
    return tuple(sorted(out, key=lambda f: f.name))


def expect_run(cfg: ModelConfig, score: Score, *, kind: RunKind = "fresh",
               steps_per_epoch: int = 1, resume_from: int | None = None,
               resume_step: int | None = None) -> RunExpect:
    """The run of ``kind`` under ``cfg``; ``score(epoch)`` is the pooled score of the
    validation after ``epoch`` (None: val.first).

    A resumed run starts from a file of epoch ``resume_from`` holding step ``resume_step``.
    """
    eff = cfg.effective(kind)
    spe = 1 if kind == "debug" else steps_per_epoch  # DBG-1.1, DBG-4.1: one step an epoch
    whole = _whole(eff, score)
    if kind == "resumed":
        if resume_from is None or resume_step is None:
            raise ValueError("a resumed run needs the epoch and step of its file")
        k = resume_from
        start, start_step = k + 1, resume_step  # LOOP-1.3, RES-1.1
        # the checkpoint carries the decisions up to k: the rest is the uninterrupted run's
        # (RES-3.3); val.first is never repeated (LOOP-2.6)
        vals = tuple(v for v in whole.validations if v.epoch is not None and v.epoch > k)
        epochs = tuple(e for e in whole.epochs if e > k)
    else:
        start, start_step = 0, 0  # LOOP-1.2, FT-1.2; a finetune tracks afresh (FT-4)
        vals, epochs = whole.validations, whole.epochs
    step_after = {e: start_step + (i + 1) * spe for i, e in enumerate(epochs)}
    best: tuple[int | None, bool] | None = None
    if whole.best_index is not None:
        b = whole.validations[whole.best_index].epoch
        in_run = kind != "resumed" or (b is not None and resume_from is not None
                                       and b > resume_from)
        best = (b, in_run)
    stop = whole.stop_epoch if kind != "resumed" or whole.stop_epoch is None \
        or (resume_from is not None and whole.stop_epoch > resume_from) else None
    return RunExpect(kind=kind, start_epoch=start, start_step=start_step,
                     epochs_trained=epochs, steps_after=tuple(step_after[e] for e in epochs),
                     validations=vals, stop_epoch=stop, best=best,
                     test_passes=1 if eff.test_enable else 0,  # LOOP-4.1, LOOP-4.4
                     test_on="best" if best is not None else "final",  # BEST-4
                     files=_files(eff, epochs, vals, step_after, start_step),
                     ckpt_enable=eff.ckpt_enable, num_epochs=eff.num_epochs)


def _is_reached(whole: RunExpect, cfg: ModelConfig, where: Interruption, epoch: int) -> bool:
    if epoch not in whole.epochs_trained:
        return False
    if where in ("val_start", "val_after_save"):
        return any(v.epoch == epoch for v in whole.validations)
    return True


def expect_chain(cfg: ModelConfig, score: Score, *, kind: Literal["resumed", "finetuned"],
                 steps_per_epoch: int, interrupted_at: tuple[Interruption, int] | None,
                 file_index: int) -> Chain:
    """A fresh source run interrupted at ``interrupted_at`` (None: run to its end), then a
    run of ``kind`` from the ``file_index``-th (modulo) resumable file it left.

    A run interrupted at any point of epoch e has written epoch e-1's files and no later ones:
    an epoch's checkpoints follow its validation (RES-3.5). best.pt is written within the
    validation, so one interrupted after its best-model selection has e's best.pt.
    """
    whole = expect_run(cfg, score, steps_per_epoch=steps_per_epoch)
    reached = interrupted_at is not None and _is_reached(whole, cfg, *interrupted_at)
    source = whole
    if reached and interrupted_at is not None:
        where, e = interrupted_at
        epochs = tuple(x for x in whole.epochs_trained if x < e)
        vals = tuple(v for v in whole.validations
                     if v.epoch is None or v.epoch < e or (v.epoch == e and
                                                           where == "val_after_save"))
        steps = dict(zip(whole.epochs_trained, whole.steps_after, strict=True))
        files = _files(cfg, epochs, vals, steps, 0)
        # the validation interrupted after best selection: its improvement, never its stop
        vals = tuple(replace(v, stop=False) if v.epoch == e else v for v in vals)
        source = replace(whole, epochs_trained=epochs, steps_after=whole.steps_after[
            :len(epochs)], validations=vals, files=files, test_passes=0, exit_status=-1)
    resumable = tuple(f for f in source.files if f.role in ("last", "epoch"))
    if not resumable:
        return Chain(source=source, reached=reached, resumable=(), start_file=None, run=None)
    chosen = resumable[file_index % len(resumable)]
    if kind == "finetuned":
        run = expect_run(cfg, score, kind="finetuned", steps_per_epoch=steps_per_epoch)
    else:
        run = expect_run(cfg, score, kind="resumed", steps_per_epoch=steps_per_epoch,
                         resume_from=chosen.epoch, resume_step=chosen.step)
    return Chain(source=source, reached=reached, resumable=resumable, start_file=chosen,
                 run=run)
