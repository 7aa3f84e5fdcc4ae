"""The self-test's reading of the files a run left: each ``last`` and ``best`` file loads as
its trainer reads it and records the epoch it was written after; ``RunEnd.best_model`` is
there, or the line says why not.

What is the adapter's to fix is kept apart from what is the trainer's own. A file the trainer's
own reader (the adapter's ``FileLayout(load=...)``) cannot read, a file that records no epoch,
a final file that records the next epoch while the others record the epoch done: these are
facts of the trainer, named with the checks that will judge them, never given an adapter fix.
A line never prescribes what the adapter already does: best weights read from a file that
does not load come with the file and why, not with "report the best weights".
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from trainspec.conformance.run.files import FileRecord
from trainspec.conformance.run.records import FileSnapshot
from trainspec.conformance.run.trace import Trace
from trainspec.conformance.selftest.findings import Problem

__all__ = ["best_model_problems", "file_problems"]

# how run/reading.py says a file was read by the reader the adapter gave (FileLayout(load=))
_BY_OWN_READER = "read by the adapter's load="
# how it says a file was not unpickled for the code its pickle names
_NOT_UNPICKLED = "not unpickled in full"
# run/layout.py's words for a file that loads but holds no weights where the layout looks
_NO_WEIGHTS = "no model weights under"

# a key that names the epoch a file was written after (not the best one, not a count)
_EPOCH_KEY = re.compile(r"(?:^|[_.])(?:cur|current|last|done|completed)?_?epochs?(?:$|[_.])",
                        re.IGNORECASE)
_NOT_THE_EPOCH = re.compile(r"best|num|max|total|n_epochs", re.IGNORECASE)

# the checks that judge a fact of a file, by the file's role
_LOADS = {"last": "CKPT-1 (a checkpoint loads) and the resume and finetune clauses, through "
                  "the trainer's own resume",
          "best": "CKPT-1 (a checkpoint loads), BEST-2 and BEST-3 (the best weights and file)",
          "epoch": "CKPT-1 (a checkpoint loads)"}
_EPOCH = {"last": "CKPT-1 (a checkpoint records its epoch; the final last file's) and RES-1 "
                  "(the epoch a resume from it starts at)",
          "best": "CKPT-1 (a checkpoint records its epoch) and BEST-3 (the best file's epoch)",
          "epoch": "CKPT-1 (the periodic files' epochs)"}


def _named(files: Sequence[FileRecord]) -> str:
    return ", ".join(f"{f.relpath} ({f.role})" for f in files)


def _verb(files: Sequence[FileRecord], one: str, several: str) -> str:
    return one if len(files) == 1 else several


def _judges(files: Sequence[FileRecord], table: dict[str, str]) -> str:
    return "; ".join(dict.fromkeys(table[f.role] for f in files if f.role is not None))


# ------------------------------------------------------------------- files that do not load


def _unreadable(files: Sequence[FileRecord], lead: str, error: str) -> Problem:
    """``files`` (of one kind of failure, ``error`` the first's) do not load as their trainer
    reads them: the adapter's to fix, or, when the trainer's own reader failed, the
    trainer's fact. ``lead`` says what it means for the run (best weights lost with them)."""
    named = files[0].relpath if lead else _named(files)
    what = f"{lead}{named} {_verb(files, 'does', 'do')} not load as the trainer reads " \
           f"{_verb(files, 'it', 'them')}: {error}"
    if _BY_OWN_READER in error:
        return Problem(topic="files", what=f"{what}; the trainer cannot read its own "
                       f"{_verb(files, 'file', 'files')} (unless FileLayout(load=...) is not "
                       "its reader)", judged_by=_judges(files, _LOADS))
    if _NOT_UNPICKLED in error:
        return Problem(topic="files", what=what, fix="give the trainer's own reader (kit: "
                       "FileLayout(load=...)): a file whose pickle names code that reaches "
                       "the system is unpickled by it only")
    return Problem(topic="files", what=what, fix="if the trainer reads its files otherwise "
                   "than with torch.load (a format or a reader of its own), give that reader "
                   "(kit: FileLayout(load=...)); if it cannot read them either, that is the "
                   "trainer's fault, which the checks will judge (nothing in them can be read)")


def _error_kind(error: str) -> int:
    return 0 if _BY_OWN_READER in error else 1 if _NOT_UNPICKLED in error else 2


def _unloaded_problems(files: Sequence[FileRecord]) -> list[Problem]:
    """One line per kind of failure, naming every ``last`` and ``best`` file of that kind."""
    by_kind: dict[int, list[FileRecord]] = {}
    for f in files:
        if f.role in ("last", "best") and f.error:
            by_kind.setdefault(_error_kind(f.error), []).append(f)
    return [_unreadable(group, "", group[0].error or "") for _, group in sorted(by_kind.items())]


# ------------------------------------------------------------------------- RunEnd.best_model


def _lost_best(trace: Trace) -> FileRecord | None:
    """The newest best file, when ``RunEnd.best_model`` is None and that file does not load:
    the reason the best weights are missing, named once (by :func:`best_model_problems`)."""
    r = trace.rank0
    best = trace.newest("best")
    if r.end is None or r.end.best_model is not None or best is None or not best.error:
        return None
    return best


def best_model_problems(trace: Trace) -> list[Problem]:
    """``RunEnd.best_model`` None, and why: the best file does not load, or loads without
    weights where the layout looks, or holds them and the adapter does not report them."""
    r = trace.rank0
    if r.end is None or r.end.best_model is not None:
        return []
    lead = "RunEnd.best_model is None (BEST-2, NAN-1 and NAN-2 compare it with the best " \
           "validation's weights): "
    lost = _lost_best(trace)
    if lost is not None:
        return [_unreadable([lost], lead + "the best file ", lost.error or "")]
    snap: FileSnapshot | None = r.end.best_file
    name = "" if snap is None else snap.path.rsplit("/", 1)[-1]
    if snap is not None and snap.error and _NO_WEIGHTS in snap.error:
        return [Problem(topic="files", what=f"{lead}the best file {name} loads, but its model "
                        f"weights are not where the layout looks ({snap.error})",
                        fix="name the key that holds them (kit: FileLayout(keys={'model': "
                        "...}), '' for a file that is the bare state dict)")]
    if snap is not None and snap.error:  # a best file the adapter does not describe as one
        seen = FileRecord(relpath=name, size=snap.size, mtime_ns=snap.mtime_ns, role="best",
                          error=snap.error)
        return [_unreadable([seen], lead + "the best file ", snap.error)]
    if snap is not None and snap.weights is not None:
        return [Problem(topic="records", what=f"{lead}the best file {name} holds weights",
                        fix="report them, or the best weights the trainer keeps in memory "
                        "(kit: Recorder.end(best_model=LAYOUT.snapshot(root, 'best').weights))")]
    return [Problem(topic="records", what=lead.removesuffix(": "), fix="report the best "
                    "weights the trainer keeps: in memory, or those of its best file (kit: "
                    "FileLayout.snapshot(root, 'best').weights; when no file is described as "
                    "'best', that line is the cause)")]


# ------------------------------------------------------------------------------ the files


def file_problems(trace: Trace) -> list[Problem]:
    """The files of a trainer that declares checkpoint: roles, loads, epochs, and what the
    records say of them."""
    r = trace.rank0
    if not trace.files:
        return [Problem(topic="files", what="nothing was written under ctx.ckpt_root",
                        fix="point the trainer's checkpoint folder at ctx.ckpt_root")]
    names = ", ".join(sorted(f.relpath for f in trace.files)[:6])
    out = []
    roles = {f.role for f in trace.files}
    for role, why in (("last", "the resume checks resume from it"),
                      ("best", "BEST-3 and RES-3 read it")):
        if role not in roles and (role == "last" or any(v.improved for v in r.validations)):
            out.append(Problem(topic="files", what=f"no file is described as {role!r} ({why}; "
                               f"files: {names})", fix="name the files last.pt, best.pt and "
                               "epoch_<e>.pt, or describe your own names in "
                               "describe_checkpoints(root) (kit: FileLayout(roles={...}))"))
    lost = _lost_best(trace)
    out += _unloaded_problems([f for f in trace.files if f is not lost])
    out += _epoch_problems(trace)
    if any(f.role == "last" and f.epoch is not None for f in trace.files) and \
            len(r.train_epochs) > 1 and all(e.last_file_epoch is None for e in r.train_epochs[1:]):
        out += _no_last_file_epoch(trace)
    best_files = [f for f in trace.files if f.role == "best" and not f.error]
    improved = [v for v in r.validations if v.improved]
    if best_files and improved and all(v.best_file is None for v in improved):
        out.append(Problem(topic="records", what="Validation.best_file is never given, though "
                           "'best' files exist (BEST-3 reads it)", fix="report a snapshot of "
                           "the newest best file after each validation (kit: "
                           "Recorder(files=FileLayout(...)) does)"))
    return out


def _no_last_file_epoch(trace: Trace) -> list[Problem]:
    """``TrainStart.last_file_epoch`` never given though the last files record their epoch:
    the layout's snapshots failed (said once: the best weights' line may name it already),
    or the adapter takes none."""
    r = trace.rank0
    snaps = [*(e.best_file for e in r.train_epochs), *(v.best_file for v in r.validations),
             None if r.end is None else r.end.best_file]
    failed = next((x.error for x in snaps if x is not None and x.error), None)
    what = "TrainStart.last_file_epoch is never given, though 'last' files exist (CKPT-1 and " \
           "DIST-4 read it)"
    if failed is None:
        return [Problem(topic="records", what=what, fix="report the epoch the newest last file "
                        "records (kit: Recorder(files=FileLayout(...)) does)")]
    said = r.end is not None and r.end.best_model is None and r.end.best_file is not None \
        and r.end.best_file.error == failed
    if said:
        return []
    return [Problem(topic="files", what=f"{what}: the layout's snapshots of the files fail "
                    f"({failed})", fix="name the key that holds the weights (kit: FileLayout("
                    "keys={'model': ...}))" if _NO_WEIGHTS in failed else "make the layout "
                    "read the files as the trainer does (kit: FileLayout(keys=..., progress=...))")]


# ---------------------------------------------------------------------------- their epochs


def _read_keys(f: FileRecord) -> tuple[str, ...]:
    """What the layout found in ``f``, in the spec's terms; the seed's key names when the
    adapter says nothing of it (the seed's reading reads ``epoch``)."""
    return f.keys if f.holds is None else f.holds


def _epoch_key(f: FileRecord) -> str | None:
    """A key of ``f`` that holds an epoch its layout does not read; None when it holds none
    the suite can see (its top-level keys; a folder's are the files inside)."""
    for key in f.keys:
        if key == "epoch" and "epoch" in _read_keys(f):
            continue  # read, and not an integer: said apart
        kind = f.types.get(key)
        if _EPOCH_KEY.search(key) and not _NOT_THE_EPOCH.search(key) and (
                kind is None or kind in ("int", "float", "Tensor")):
            return key
    return None


def _numbering_is_right(trace: Trace) -> bool:
    """Whether the run's files, read while it ran, record the epoch they were written after
    (the last file at each epoch's start, the best file after each improvement), never the
    next one: then a final file ahead of them is the trainer's own doing."""
    r = trace.rank0
    offsets = [e.last_file_epoch - (e.epoch - 1) for e in r.train_epochs[1:]
               if e.last_file_epoch is not None]
    offsets += [v.best_file.epoch - v.epoch for v in r.validations
                if v.improved and v.phase == "epoch" and v.best_file is not None
                and v.best_file.epoch is not None]
    return 0 in offsets and all(o <= 0 for o in offsets)


def _epoch_problems(trace: Trace) -> list[Problem]:
    trained = trace.rank0.epochs_trained
    if not trained:
        return []
    files = [f for f in trace.files if f.role is not None and not f.error]
    out = []
    unread = [f for f in files if f.epoch is None and "epoch" in _read_keys(f)]
    if unread:
        out.append(Problem(topic="files", what=f"{_named(unread)}: the epoch is not an integer "
                           "where the layout reads it", fix="read it with a progress function "
                           "(kit: FileLayout(progress=...))"))
    keyed = {f.relpath: k for f in files if f.epoch is None and f not in unread
             and (k := _epoch_key(f)) is not None}
    for key in dict.fromkeys(keyed.values()):
        which = [f for f in files if keyed.get(f.relpath) == key]
        what = f"{_named(which)} {_verb(which, 'holds', 'hold')} the epoch under {key!r}"
        out.append(Problem(topic="files", what=f"{what}, which the layout does not read",
                           fix=f"read it there (kit: FileLayout(keys={{'epoch': {key!r}}}))"))
    none = [f for f in files if f.epoch is None and f not in unread and f.relpath not in keyed]
    if none:
        held = ", ".join(none[0].keys[:8]) or "no key"
        out.append(Problem(topic="files", what=f"{_named(none)} {_verb(none, 'records', 'record')}"
                           f" no epoch ({none[0].relpath} holds {held})",
                           judged_by=_judges(none, _EPOCH)))
    ahead = [f for f in files if f.epoch is not None and f.epoch > max(trained)]
    if not ahead:
        return out
    said = f"{_named(ahead)} {_verb(ahead, 'records', 'record')} epoch {ahead[0].epoch} after " \
           f"epochs {trained}"
    if _numbering_is_right(trace):
        out.append(Problem(topic="files", what=f"{said} (the next epoch to run), while the files "
                           "read during the run record the epoch they were written after",
                           judged_by=_judges(ahead, _EPOCH)))
    else:
        out.append(Problem(topic="epochs", what=f"{said}: 1-based, or the next epoch to run",
                           fix="describe the epoch a file was written after, 0-based (kit: "
                           "FileLayout(epoch_base=1))"))
    return out
