"""A run's observables against the model's, each divergence charged to the sentence it breaks.

:func:`divergences` compares one rank's trace and the files its run left with a
:class:`~trainspec.conformance.spec.model.RunExpect`, gravest first: where the run starts, the
validations in order (schedule, pooled score, improvement, stop), the epochs trained and their
steps, the best weights, the test pass, then every checkpoint file. Which sentence a divergence
breaks depends on the kind of run: a resumed run's decisions are RES-3's, a finetune's
tracking FT-4's, a fresh run's the oracle's (PAT-5).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from trainspec.conformance.checks.common import fmt_scores, label, weights_diff
from trainspec.conformance.run.files import FileRecord
from trainspec.conformance.run.trace import RankTrace
from trainspec.conformance.spec.model import (
    RunExpect,
    RunKind,
    ValidationExpect,
)

__all__ = ["MULTI_RANK", "Divergence", "divergences", "file_divergences", "rank_divergences",
           "schedule_divergences"]


MULTI_RANK = "multi-rank"  # the kind of a generated chain on several ranks


@dataclass(frozen=True, slots=True, kw_only=True)
class Divergence:
    sentence: str  # "RES-3.3"
    evidence: str  # one line: observed vs expected
    cause: str = ""  # the words a hand-written check would group the same fault under
    crashed: bool = False  # the run raised instead of completing
    decided: str = ""  # "improved" or "stop": the decision of a validation that departed

    @property
    def clause(self) -> str:
        return self.sentence.rpartition(".")[0]


def _same(a: float, b: float) -> bool:
    """Equal, both NaN, or equal once each is rounded to float32: a trainer that logs its
    score as a float32 tensor (as frameworks do) reports the value it pooled."""
    if (math.isnan(a) and math.isnan(b)) or a == b:
        return True
    try:
        return struct.pack("f", a) == struct.pack("f", b)
    except OverflowError:
        return False


def _start(kind: RunKind, want: RunExpect, r: RankTrace) -> list[Divergence]:
    """Where the run's first epoch started (its Setup record may be written before the
    framework has loaded the checkpoint, so only training shows where it starts; a run that
    trained nothing is judged by its epochs)."""
    if not r.train_epochs:
        return []
    first = r.train_epochs[0]
    epoch_s = {"resumed": "RES-1.1", "finetuned": "FT-1.2"}.get(kind, "LOOP-1.2")
    if first.epoch != want.start_epoch:
        return [Divergence(sentence=epoch_s, evidence=f"the {kind} run started at epoch "
                           f"{first.epoch}; expected {want.start_epoch}")]
    step_s = {"resumed": "RES-1.2", "finetuned": "FT-1.2"}.get(kind)
    if step_s is not None and first.start_step != want.start_step:
        return [Divergence(sentence=step_s, evidence=f"the {kind} run started at train_step "
                           f"{first.start_step}; expected {want.start_step}")]
    return []


def _decision_sentence(kind: RunKind, what: str, v: ValidationExpect | None) -> str:
    if what == "improved" and v is not None and not math.isfinite(v.score):
        return "NAN-1.1"  # a non-finite score taken as an improvement, in any kind of run
    if kind == "resumed":
        return "RES-3.3"  # the same decisions as the uninterrupted run
    # a finetune tracks afresh (FT-4): its slips read as a fresh run's would
    if what == "improved":
        return "BEST-1.1"
    return "PAT-5.1"


def _validations(kind: RunKind, want: RunExpect, r: RankTrace) -> list[Divergence]:
    out = _schedule_or_decisions(kind, kind, want, r)
    if out and out[0].sentence.startswith("LOOP-2.") and any(
            e >= want.num_epochs for e in r.epochs_trained):
        # validations after epochs past the run's end follow from those epochs: the epochs'
        # sentence is the cause (past an early stop, the stop decision is: kept as it is)
        return _epochs(kind, want, r) or out
    return out


def _schedule_or_decisions(kind: RunKind, name: str, want: RunExpect, r: RankTrace, *,
                           judged: int | None = None) -> list[Divergence]:
    """The validations in order against the model's: schedule, pooled score, improvement,
    stop (the first ``judged`` only, where given: their count is not judged)."""
    seen = list(r.validations)
    expected = list(want.validations)
    for i, (v, d) in enumerate(zip(seen[:judged], expected, strict=False)):
        got = None if v.phase == "first" else v.epoch
        where = f"the {name} run's validation {i} (after {label(d.epoch)})"
        if got != d.epoch:
            sentence = "LOOP-2.1"
            if None in (got, d.epoch):
                sentence = "LOOP-2.6" if kind == "resumed" else "LOOP-2.3"
            return [Divergence(sentence=sentence, evidence=f"{where} ran after {label(got)}; "
                               f"expected the validations after "
                               f"{[label(x.epoch) for x in expected]}")]
        if not _same(v.score, d.score):
            return [Divergence(sentence="DIST-1.1", evidence=f"{where} pooled the score "
                               f"{v.score!r}; expected {d.score!r}")]
        if v.improved != d.improved:
            so_far = fmt_scores([x.score for x in expected[: i + 1]])
            return [Divergence(sentence=_decision_sentence(kind, "improved", d),
                               decided="improved", evidence=f"{where} was "
                               f"{'taken' if v.improved else 'not taken'} as an improvement; "
                               f"expected "
                               f"{'an improvement' if d.improved else 'none'} (scores "
                               f"{so_far})")]
        if v.stop != d.stop:
            return [Divergence(sentence=_decision_sentence(kind, "stop", d), decided="stop",
                               evidence=f"{where} {'stopped' if v.stop else 'did not stop'} "
                               f"the run; expected {'a stop' if d.stop else 'no stop'}")]
    if judged is not None or len(seen) == len(expected):
        return []
    more = len(seen) > len(expected)
    # the model's run stopped early: in this run, or before the file a resume starts from
    # (the run trained an epoch before num_epochs that the model's never reaches)
    stopped = (bool(expected) and expected[-1].stop) or any(
        want.start_epoch <= e < want.num_epochs and e not in want.epochs_trained
        for e in r.epochs_trained)
    sentence = _decision_sentence(kind, "stop", None) if more and stopped \
        else "LOOP-2.2" if not more else "LOOP-2.1"
    if kind == "debug" and more and not stopped:  # validations of epochs past the cap
        sentence = "DBG-2.1" if want.epochs_trained else "DBG-2.2"
    return [Divergence(sentence=sentence, evidence=f"the {name} run validated after "
                       f"{[label(None if v.phase == 'first' else v.epoch) for v in seen]}"
                       f"; expected {[label(x.epoch) for x in expected]}")]


def schedule_divergences(kind: str, want: RunExpect, r: RankTrace, *,
                         cut_in_validation: bool) -> list[Divergence]:
    """When an interrupted run validated, and what it decided there, against the model (a
    fresh run's sentences); ``cut_in_validation``: it was interrupted inside its last
    validation, which may have left no record, or one whose decisions were not all acted on.
    A schedule or decision slip is charged here before the files it leaves."""
    seen = [None if v.phase == "first" else v.epoch for v in r.validations]
    expected = [d.epoch for d in want.validations]
    if seen == expected or (cut_in_validation and expected and seen == expected[:-1]):
        judged = len(seen) - 1 if cut_in_validation and seen == expected else len(seen)
        return _schedule_or_decisions("fresh", kind, want, r, judged=judged)
    i = next((i for i, (a, b) in enumerate(zip(seen, expected, strict=False)) if a != b),
             min(len(seen), len(expected)))
    sentence = "LOOP-2.2" if i == len(seen) else "LOOP-2.1"
    if i < min(len(seen), len(expected)) and None in (seen[i], expected[i]):
        sentence = "LOOP-2.3"
    return [Divergence(sentence=sentence, evidence=f"the {kind} run validated after "
                       f"{[label(x) for x in seen]}; expected {[label(x) for x in expected]}")]


def _epochs(kind: RunKind, want: RunExpect, r: RankTrace) -> list[Divergence]:
    trained = tuple(r.epochs_trained)
    if trained != want.epochs_trained:
        sentence = "RES-1.3" if kind == "resumed" else "DBG-2.1" if kind == "debug" \
            else "LOOP-1.1"
        return [Divergence(sentence=sentence, evidence=f"the {kind} run trained epochs "
                           f"{list(trained)}; expected {list(want.epochs_trained)}")]
    for e, step in zip(r.train_epochs, want.steps_after, strict=True):
        if kind in ("resumed", "debug") and e.end_step is not None and e.end_step != step:
            # a debug epoch steps once: more is more than one batch (DBG-1.1)
            if kind == "debug" and e.end_step < step:
                continue  # no step at all: DBG-4's own check judges it
            sentence = "RES-1.2" if kind == "resumed" else "DBG-1.1"
            return [Divergence(sentence=sentence, evidence=f"the {kind} run ended epoch "
                               f"{e.epoch} at train_step {e.end_step}; expected {step}")]
    return []


def _best(kind: RunKind, want: RunExpect, r: RankTrace,
          source: RankTrace | None) -> list[Divergence]:
    sentence = "RES-3.1" if kind == "resumed" else "BEST-2.1"
    if r.end is None:
        return []
    if want.best is None:
        return []  # what a run holds without an improvement shows in its test (BEST-4.2)
    epoch, in_run = want.best
    where = r if in_run else source
    held = None if where is None else next(
        (v for v in where.validations if (None if v.phase == "first" else v.epoch) == epoch),
        None)
    if held is None:
        return []  # that validation's divergence was reported, or the source was cut short
    diff = weights_diff(held.weights, r.best_model)
    if diff is not None:
        return [Divergence(sentence=sentence, evidence=f"the {kind} run's best weights are not "
                           f"those validated after {label(epoch)}, the best score: {diff}")]
    return []


def _test(kind: RunKind, want: RunExpect, r: RankTrace) -> list[Divergence]:
    if len(r.tests) != want.test_passes:
        sentence = "LOOP-4.4" if want.test_passes == 0 else \
            "LOOP-4.2" if want.stop_epoch is not None else "LOOP-4.1"
        return [Divergence(sentence=sentence, evidence=f"the {kind} run ran the test pass "
                           f"{len(r.tests)} times; expected {want.test_passes}")]
    if r.tests and want.test_on == "best" and r.best_model is not None:
        diff = weights_diff(r.best_model, r.tests[0].weights)
        if diff is not None:
            return [Divergence(sentence="BEST-4.1", evidence=f"the {kind} run's test pass did "
                               f"not evaluate the best weights: {diff}")]
    if r.tests and want.test_on == "final" and r.final_weights is not None:
        diff = weights_diff(r.final_weights, r.tests[0].weights)
        if diff is not None:
            return [Divergence(sentence="BEST-4.2", evidence=f"nothing improved, yet the {kind} "
                               f"run's test pass did not evaluate the final weights: {diff}")]
    return []


def _name(f: FileRecord) -> str:
    """The file's name, without the run's own folder (a run id differs every run)."""
    return f.relpath.rpartition("/")[2]


def file_divergences(kind: str, want: RunExpect, files: Sequence[FileRecord]
                     ) -> list[Divergence]:
    """Every checkpoint file the run left in its own folder against the model's."""
    roles = [f for f in files if f.role in ("last", "best", "epoch")]
    if want.kind == "debug":
        if roles:
            return [Divergence(sentence="DBG-3.1", evidence=f"the debug run wrote "
                               f"{sorted(_name(f) for f in roles)}; expected no checkpoint")]
        return []
    if not want.ckpt_enable:  # CKPT-1 and BEST-3 govern runs with checkpointing enabled
        return []
    out: list[Divergence] = []
    expected = {(f.role, f.epoch if f.role == "epoch" else None): f for f in want.files}
    seen: dict[tuple[str, int | None], FileRecord] = {}
    for f in roles:
        key = (str(f.role), f.epoch if f.role == "epoch" else None)
        if key not in seen or f.mtime_ns > seen[key].mtime_ns:
            seen[key] = f
    for key, exp in expected.items():
        got = seen.get(key)
        if got is None:
            sentence = {"last": "CKPT-1.1", "best": "BEST-3.1"}.get(exp.role, "CKPT-1.3")
            out.append(Divergence(sentence=sentence, evidence=f"the {kind} run left no "
                                  f"{exp.name}; expected one of epoch {exp.epoch}"))
        elif (got.epoch, got.step) != (exp.epoch, exp.step):
            sentence = {"best": "BEST-3.4" if got.epoch != exp.epoch else "BEST-3.6"}.get(
                exp.role, "CKPT-1.5")
            out.append(Divergence(sentence=sentence, evidence=f"the {kind} run's {_name(got)} "
                                  f"holds epoch {got.epoch}, step {got.step}; expected epoch "
                                  f"{exp.epoch}, step {exp.step}"))
    for key, got in seen.items():
        if key not in expected:
            sentence = {"last": "CKPT-1.2", "best": "BEST-3.2"}.get(key[0], "CKPT-1.3")
            out.append(Divergence(sentence=sentence, evidence=f"the {kind} run left "
                                  f"{_name(got)} (epoch {got.epoch}); expected no such file "
                                  f"(files expected: {sorted(f.name for f in want.files)})"))
    return out


def divergences(want: RunExpect, r: RankTrace, files: Sequence[FileRecord], *,
                source: RankTrace | None = None) -> list[Divergence]:
    """Every way the run departs from the model, gravest first (one per observable)."""
    kind = want.kind
    out = _start(kind, want, r)
    out += _validations(kind, want, r)
    if not out:  # epochs follow from the decisions: judged only when those agree
        out += _epochs(kind, want, r)
    out += _best(kind, want, r, source)
    out += _test(kind, want, r)
    out += file_divergences(kind, want, files)
    return out


# what a rank other than 0 breaks when it departs where rank 0 follows the model: it does not
# share rank 0's pooled score, improvement (DIST-3.1) or stop (DIST-2.1), epochs or best
# weights; where it does not start where the file ends, it did not resume (RES-1.1 stays)
_ON_ANOTHER_RANK = {"DIST-1.1": "DIST-1.2", "PAT-5.1": "DIST-2.1", "RES-3.3": "DIST-2.1",
                    "LOOP-1.1": "DIST-2.1", "RES-1.3": "DIST-2.1", "BEST-2.1": "DIST-3.2",
                    "RES-3.1": "DIST-3.2"}
_DECIDED_ON_ANOTHER_RANK = {"improved": "DIST-3.1", "stop": "DIST-2.1"}


def _local_charge(r: RankTrace, d: Divergence, i: int, n: int, want: RunExpect,
                  others: Callable[[], Sequence[tuple[str, RunExpect]]]) -> Divergence | None:
    """Handed rank-local scores, rank ``r``'s departure ``d`` at validation ``i`` as DIST-3.3
    where it compared another score than rank 0's: another rank taking another improvement,
    or rank 0 whose decisions so far are those ``others()`` expects from another rank's
    scores; None where it is charged as any departure is."""
    if d.decided != "improved":  # handed rank-local scores, compared against rank 0's?
        return None
    if r.rank > 0:
        compared = fmt_scores([x.score for x in want.validations[: i + 1]])
        return replace(d, sentence="DIST-3.3", evidence=(
            f"rank {r.rank} of {n}: {d.evidence}; rank 0's own scores, which every rank "
            f"compares: {compared}"))
    taken = [(v.improved, v.stop) for v in r.validations[: i + 1]]
    for what, other in others():
        if taken == [(x.improved, x.stop) for x in other.validations[: i + 1]]:
            return replace(d, sentence="DIST-3.3", evidence=(
                f"rank {r.rank} of {n}: {d.evidence}; its decisions so far are those {what} "
                "give, not rank 0's"))
    return None


def _on_rank(r: RankTrace, d: Divergence, i: int | None, n: int, want: RunExpect,
             counted: Callable[[int | None], bool]) -> Divergence:
    """Rank ``r``'s departure ``d`` (at validation ``i``, where one) charged in a run of ``n``
    ranks: NaN pooled where some rank counted, or a number where none did, is DIST-1.3's;
    another rank's, where rank 0 follows the model, the DIST sentence of what it does not
    share with rank 0."""
    sentence = d.sentence
    if sentence == "DIST-1.1" and i is not None and r.rank == 0:
        v, x = r.validations[i], want.validations[i]
        nothing = not counted(None if v.phase == "first" else v.epoch)
        if (nothing and not math.isnan(v.score)) or (
                math.isnan(v.score) and not nothing and not math.isnan(x.score)):
            sentence = "DIST-1.3"
    if r.rank > 0:
        sentence = _DECIDED_ON_ANOTHER_RANK.get(d.decided) or _ON_ANOTHER_RANK.get(
            sentence, sentence)
    return replace(d, sentence=sentence, evidence=f"rank {r.rank} of {n}: {d.evidence}")


def rank_divergences(want: RunExpect, ranks: Sequence[RankTrace], files: Sequence[FileRecord],
                     *, counted: Callable[[int | None], bool],
                     own_score: Callable[[int, int | None], float] | None = None,
                     others: Callable[[], Sequence[tuple[str, RunExpect]]] = lambda: (),
                     decisions_only: bool = False,
                     source: RankTrace | None = None) -> list[Divergence]:
    """Every rank of a multi-rank run (fresh, or resumed or finetuned from a file of
    ``source``, rank 0 of the run before) against the model (``want``, its scores pooled over
    the ranks), validation by validation across the ranks, so that the first departure in the
    run is the one charged: rank 0's as a run of its kind's (its files too), another rank's,
    where rank 0 follows the model, as the DIST sentence it breaks (it pooled another score,
    took another improvement or stop, trained other epochs, holds other best weights). Rank
    0 pooling NaN where some rank counted, or a number where none did, is DIST-1.3's
    (``counted(epoch)``: whether any rank counted a sample in that validation). A rank cut
    short is judged on what it recorded (that it did not end is the caller's to say).
    ``own_score(rank, epoch)``: scores handed rank-local, each rank records its own and
    ``want`` decides on rank 0's (:func:`_local_charge`, with ``others``).
    ``decisions_only``: where each rank started and what it decided, nothing after (rank 0
    broke off: what it recorded before, and the other ranks, may show why)."""
    n = len(ranks)
    kind = want.kind
    name = f"{kind} {n}-rank"
    wants = [want] * n if own_score is None else [
        replace(want, validations=tuple(replace(v, score=own_score(r, v.epoch))
                                        for v in want.validations)) for r in range(n)]

    def on(r: RankTrace, d: Divergence, i: int | None = None) -> Divergence:
        local = None if own_score is None or i is None else _local_charge(
            r, d, i, n, want, others)
        return local or _on_rank(r, d, i, n, want, counted)

    for r in ranks:
        found = _start(kind, wants[r.rank], r)
        if found:
            return [on(r, found[0])]
    for i in range(1, len(want.validations) + 1):
        for r in ranks:
            found = _schedule_or_decisions(kind, name, wants[r.rank], r, judged=i)
            if found:
                return [on(r, found[0], i - 1)]
    if decisions_only:
        return []
    done = [r for r in ranks if r.status == "completed"]
    for judge in (_validations, _epochs, lambda k, w, r: _best(k, w, r, source)):
        for r in done:
            found = judge(kind, wants[r.rank], r)
            if found:
                return [on(r, found[0])]
    out = _test(kind, want, ranks[0]) if ranks[0] in done else []
    return out + file_divergences(name, want, files)
