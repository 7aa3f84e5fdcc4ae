"""What every scenario key, capability and record field means: the scenario reference's text.

Pure data, no torch. The reference page (``docs/spec/scenario.md``) is generated from these
tables together with what the code itself says (each key's default from
``kit.default_config()``, the clauses whose checks read it, the checks each capability gates),
so the page cannot drift from the suite; ``tests/test_scenario_reference.py`` fails when a key,
a capability or a record field lacks its entry here, or an entry names none.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["CAPABILITY_MEANINGS", "FIELD_RULES", "KEYS", "LOAD_FROM", "KeyDoc"]


@dataclass(frozen=True, slots=True, kw_only=True)
class KeyDoc:
    """One config key of a scenario: what it means, the values the suite gives it, and the
    capability an adapter declares when its trainer has the key (None: every trainer has it)."""

    key: str  # dotted, as in ``Scenario.with_config``
    meaning: str
    values: str
    capability: str | None = None


KEYS: tuple[KeyDoc, ...] = (
    KeyDoc(key="seed", meaning="the seed of every RNG the run draws from",
           values="an int"),
    KeyDoc(key="num_epochs", meaning="the epochs a fresh run trains (0 ... num_epochs-1); 0 is "
           "an eval-only run", values="an int >= 0"),
    KeyDoc(key="debug", meaning="debug mode: a truncated, side-effect-free run (one batch per "
           "loader, no files, no logging service, no saved predictions)",
           values="true or false", capability="debug"),
    KeyDoc(key="val.first", meaning="one validation before the first training epoch of a "
           "fresh run (phase \"first\"); it counts for best tracking and patience",
           values="true or false", capability="val_first"),
    KeyDoc(key="val.every_n_epochs", meaning="validate after epoch e when e % n == 0, and after "
           "the final epoch", values="an int >= 1", capability="val_every_n"),
    KeyDoc(key="val.minimize", meaning="the direction of improvement: lower scores are better "
           "when true", values="true or false"),
    KeyDoc(key="val.patience", meaning="early stopping: stop right after the p-th consecutive "
           "counted non-improvement; unset (null) never stops early",
           values="null or an int >= 1", capability="early_stopping"),
    KeyDoc(key="val.start_patience", meaning="non-improvements at epochs below it are not "
           "counted (improvements before it still count)", values="an int >= 0",
           capability="start_patience"),
    KeyDoc(key="test.enable", meaning="the test pass, once, after the epoch loop",
           values="true or false", capability="test_pass"),
    KeyDoc(key="ckpt.enable", meaning="checkpoint files at all (last, best, numbered). The "
           "property checks and the generated runs draw it for a trainer that declares "
           "checkpoint; with false no file is judged, but best_model still is. Map it onto the "
           "trainer's own switch: where that switch also ends its best tracking (its only best "
           "is the file it writes), report best_model=None; where the trainer has no switch "
           "(its best tracking always writes a file), leave the key unmapped and read "
           "best_model from the best file. Never cut the trainer's best tracking to honour it",
           values="true or false", capability="checkpoint"),
    KeyDoc(key="ckpt.dir", meaning="the run directory the files go into; empty means the "
           "folder the suite gives the run (`RunContext.ckpt_root`)",
           values="empty in every scenario: write under ctx.ckpt_root", capability="checkpoint"),
    KeyDoc(key="ckpt.load_from", meaning="the checkpoint a resume or finetune starts from "
           "(see below); null: a fresh run", values="null; an absolute path (a file, or a "
           "folder for folder checkpoints); in CKPT-4, also a relative path that does not "
           "exist", capability="resume"),
    KeyDoc(key="ckpt.resume", meaning="continue the interrupted run saved in ckpt.load_from "
           "(optimizer, scheduler, best tracking, patience, epoch and step restored)",
           values="true or false", capability="resume"),
    KeyDoc(key="ckpt.model_only", meaning="with ckpt.load_from: load the weights only and start "
           "a new run (a finetune), even when ckpt.resume is true",
           values="true or false", capability="finetune"),
    KeyDoc(key="ckpt.every_n_epochs", meaning="a numbered file after epoch e when e % n == 0; "
           "unset: none. A trainer with one kind of periodic file maps it there; one that "
           "cannot write numbered files leaves them out (CKPT-1 judges what it writes)",
           values="null or an int >= 1", capability="checkpoint"),
    KeyDoc(key="ckpt.save_last", meaning="the last file after every epoch; false: none",
           values="true or false", capability="checkpoint"),
    KeyDoc(key="grad_accum_steps", meaning="batches per optimizer step; `train_step` counts "
           "optimizer steps, not batches", values="an int >= 1", capability="grad_accum"),
    KeyDoc(key="grad_clip", meaning="clip the gradient norm to this value; null: no clipping",
           values="null or a float > 0"),
    KeyDoc(key="weight_decay", meaning="the optimizer's weight decay",
           values="a float >= 0"),
    KeyDoc(key="ddp.backend", meaning="the torch.distributed backend of a multi-rank run; null "
           "on one rank", values="null, gloo or nccl", capability="multi_rank"),
    KeyDoc(key="ddp.timeout_s", meaning="the bound on every collective, in seconds (DIST-5)",
           values="a float > 0", capability="multi_rank"),
    KeyDoc(key="save_preds.enable", meaning="save the test pass's predictions to a file; debug "
           "mode turns it off (DBG-6)", values="true or false", capability="debug"),
)

LOAD_FROM: tuple[tuple[str, str], ...] = (
    ("fresh run", "null"),
    ("resume (RES, CKPT-4, CKPT-5, LOOP-1 and LOOP-2 on a resumed run)",
     "the absolute path of the newest last file the interrupted run left, as the adapter "
     "described it (a file, or a folder for folder checkpoints); the resumed run gets the same "
     "ckpt_root and writes into it"),
    ("finetune (FT)", "the absolute path of the last file a completed source run left, in "
     "another folder than the finetune's own ckpt_root; ckpt.resume=false, or "
     "ckpt.model_only=true with ckpt.resume=true (FT-2)"),
    ("CKPT-3 (for every trainer that declares checkpoint, resume or not)",
     "the absolute path of a crafted copy of a checkpoint the trainer wrote: a completed run's "
     "whole folder is copied elsewhere (not the run's ckpt_root), and load_from names the "
     "newest last file or folder in the copy under the trainer's own name; in each copy one "
     "file the trainer may unpickle (the checkpoint's own first, then those beside it) is "
     "replaced by the same file with code put in front of each pickle it holds (at most 8 "
     "copies). Given as a "
     "resume (ckpt.resume=true) and as a finetune (ckpt.resume=false); the code must never "
     "run"),
    ("CKPT-4 (a missing file)", "`nowhere/missing-ckpt.pt`, relative and absent, with "
     "ckpt.resume=true: the error must name it as given and under the run's ckpt.dir "
     "(ckpt_root)"),
    ("CKPT-4 (corrupt files)", "absolute paths, in a folder of their own, with "
     "ckpt.resume=true: `corrupt-last.pt`, a copy of the last file (or folder) the trainer "
     "wrote in a completed run with every file in it truncated to half its size, and "
     "`garbage-last.pt`, a file of garbage bytes: each error must name the file"),
)

CAPABILITY_MEANINGS: Mapping[str, str] = {
    "checkpoint": "writes checkpoint files (last, best, numbered) under the run directory",
    "resume": "ckpt.resume continues an interrupted run from ckpt.load_from",
    "finetune": "loads a checkpoint's weights only and starts a new run (ckpt.model_only)",
    "early_stopping": "val.patience stops the run early",
    "start_patience": "val.start_patience exempts early epochs from patience",
    "val_first": "val.first validates before the first training epoch",
    "val_every_n": "val.every_n_epochs validates on a grid of epochs",
    "test_pass": "test.enable runs a test pass after the loop",
    "debug": "debug mode (a truncated, side-effect-free run)",
    "grad_accum": "grad_accum_steps accumulates gradients over several batches",
    "multi_rank": ("runs on several ranks of one torch.distributed group. Each rank's run "
                   "gets torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, "
                   "MASTER_PORT) and makes the default process group itself; in one case of "
                   "DIST-2 and DIST-3 the group is made before the trainer is built, as a "
                   "launch script that calls init_process_group first does, and the trainer "
                   "must use it (one that raises on every rank there has that case not "
                   "judged)"),
    "eval_only": "num_epochs=0 runs (no training, validation and test only)",
}

# the one rule for each field an adapter reports (records an adapter builds, or the Recorder
# builds for it); "Record.field"
FIELD_RULES: Mapping[str, str] = {
    "Setup.epoch": "the 0-based epoch the loop starts at: 0 fresh, k+1 resumed from epoch k",
    "Setup.train_step": "optimizer steps taken before this run's first step (0 fresh)",
    "Setup.train_len": "len(train_loader) as set-up saw it, before debug truncation",
    "Setup.config": "the config the trainer saw at set-up (ConfigSeen)",
    "ConfigSeen.wandb_mode": "the logging service's mode the trainer set, when it has one",
    "ConfigSeen.save_preds_enable": "save_preds.enable as the trainer sees it (DBG-6)",
    "ConfigSeen.num_epochs": "num_epochs as the trainer sees it",
    "TrainStart.epoch": "the 0-based epoch starting",
    "TrainStart.train_step": "optimizer steps taken before this epoch",
    "TrainStart.state": "the trainer's state at the epoch's start (TrainerState)",
    "TrainStart.last_file_epoch": "the epoch the last file records, as visible now",
    "TrainStart.best_file": "the newest best file, as visible now (rank 0)",
    "TrainEnd.epoch": "the 0-based epoch that ended",
    "TrainEnd.train_step": "optimizer steps taken so far; under gradient accumulation it "
                           "counts optimizer steps, never batches",
    "TrainEnd.batches": "batches the epoch trained on",
    "TrainEnd.optimizer_steps": "optimizer steps the epoch took",
    "TrainEnd.loader_len": "len(train_loader) this epoch",
    "TrainEnd.loader_batch_size": "the train loader's batch size, when it has one",
    "TrainEnd.eval_lens": "len() of each evaluation loader by name (val_loader, test_loader, "
                          "eval_loader; None: the trainer has none), for DBG-1; "
                          "Recorder.train_end(eval_lens=...)",
    "TrainEnd.eval_batches": "batches each evaluation loader yielded, for DBG-1; the "
                             "Recorder's default: eval_lens",
    "TrainerState.weights": "the model's weights (plain_weights)",
    "TrainerState.optimizer": "the optimizer's state_dict, None when the trainer has none",
    "TrainerState.scheduler": "the LR scheduler's state_dict, None when it has none",
    "TrainerState.rng": "digests of the RNG states (rng_digests)",
    "Validation.epoch": "the 0-based epoch just trained (for val.first, the epoch the run "
                        "starts at; phase tells them apart)",
    "Validation.phase": "\"first\" before any training of this run, \"epoch\" after an epoch",
    "Validation.score": "the pooled score the trainer computed on this rank (NaN allowed)",
    "Validation.improved": "the trainer's own decision: this score improved",
    "Validation.stop": "the trainer's own decision: stop after this validation",
    "Validation.weights": "the model's weights when validated",
    "Validation.best_file": "the newest best file right after the validation (rank 0)",
    "TestPass.weights": "the weights the test pass evaluated",
    "RunEnd.train_step": "optimizer steps at the end of the run",
    "RunEnd.final_weights": "the weights after the last training step",
    "RunEnd.best_model": "the trainer's best weights: in memory, or read from its best file "
                         "when it keeps them only there; None only when it has no best at all",
    "RunEnd.best_file": "the newest best file at the end (rank 0)",
    "RunEnd.user_config": "the config passed to the trainer, read at the end (DBG-2)",
    "FileSnapshot.path": "the file's path",
    "FileSnapshot.mtime_ns": "its modification time",
    "FileSnapshot.size": "its size in bytes",
    "FileSnapshot.epoch": "the 0-based epoch it records",
    "FileSnapshot.step": "the step it records",
    "FileSnapshot.weights": "the weights it holds",
    "FileSnapshot.error": "why it could not be read, as its trainer reads it",
}
