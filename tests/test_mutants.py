"""Meta-tests: every check fails its mutant, and the reference passes every clause checked.

A check that cannot fail is a defect. Each check below is paired with a deliberately broken
trainer (tests/mutants/) and shown to come out ``failed``, which makes its clause ``fail``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from trainspec.conformance.checks import CHECKS, run_check
from trainspec.conformance.run.harness import Harness
from trainspec.conformance.runner import judge_clauses, open_context, resolve_target, run_checks
from trainspec.conformance.spec.results import CheckResult

ROOT = Path(__file__).resolve().parent.parent

# check name -> the mutants (tests.mutants.<module>:<class>) it must fail
MUTANTS: dict[str, list[str]] = {
    "check_loop_trains_each_epoch_once_in_order": ["loop:SkipsTheLastEpoch"],
    "check_loop_validates_on_schedule": ["loop:SkipsTheFinalValidation"],
    "check_loop_zero_epochs_is_eval_only": ["loop:TrainsOnceWhenZeroEpochs"],
    "check_loop_tests_once_after_the_loop": ["loop:SkipsTestAfterEarlyStop"],
    "check_best_needs_a_strictly_better_score": ["best:TieCountsAsImprovement"],
    "check_best_selection_matches_the_oracle": ["best:TieCountsAsImprovement"],
    "check_best_weights_are_a_copy": ["best:BestModelAliasesWeights"],
    "check_best_file_follows_improvements": ["best:WritesBestEveryValidation"],
    "check_test_sees_best_weights": ["best:KeepsLastAsBest"],
    "check_nonfinite_scores_never_improve": ["nan:NanWinsBest"],
    "check_leading_nonfinite_scores_leave_best_clean": ["nan:NanPoisonsIncumbent"],
    "check_nonfinite_runs_match_the_oracle": ["nan:NanPoisonsIncumbent", "nan:NanWinsBest"],
    "check_nonfinite_score_counts_once_for_patience": ["nan:NanStopsAtOnce"],
    "check_patience_stops_exactly_on_time": ["pat:StopsOneValidationLate"],
    "check_improvement_refills_patience": ["pat:NeverRefillsPatience"],
    "check_start_patience_delays_counting": ["pat:IgnoresStartPatience"],
    "check_unset_patience_never_stops": ["pat:UnsetPatienceIsNumEpochs"],
    "check_decisions_match_the_oracle": ["pat:StartPatienceOffByOne"],
    "check_resume_continues_at_the_next_epoch": ["res:RepeatsTheCheckpointEpoch",
                                                 "res:SavesAStaleStepCount"],
    "check_resume_restores_every_registered_item": ["res:ForgetsOptimizerState"],
    "check_resume_keeps_best_and_patience": ["res:ForgetsBestOnResume",
                                             "res:ForgetsPatienceOnResume",
                                             "res:CheckpointsBeforeValidation",
                                             "res:TakesBestScoreFromBestFile"],
    "check_resume_is_bitwise_exact": ["res:ForgetsRngState", "res:RestoresTorchRngOnly"],
    "check_resume_refuses_state_that_does_not_fit": ["res:SkipsStateThatDoesNotFit"],
    "check_finetune_starts_a_new_run": ["ft:RestoresStateOnFinetune", "ft:FinetuneKeepsTheEpoch"],
    "check_model_only_restores_weights_only": ["ft:ModelOnlyIgnored"],
    "check_finetune_accepts_a_new_optimizer": ["ft:RestoresStateOnFinetune"],
    "check_finetune_tracks_best_afresh": ["ft:FinetuneKeepsBest", "ft:FinetuneKeepsPatience"],
    "check_debug_caps_every_split_at_one_batch": ["dbg:DebugLoaderLiesAboutLength"],
    "check_debug_caps_epochs_at_one": ["dbg:DebugKeepsAllEpochs"],
    "check_debug_writes_nothing": ["dbg:DebugWritesCheckpoints"],
    "check_debug_still_steps_the_optimizer": ["dbg:DebugKeepsGradAccum"],
    "check_debug_sizes_schedules_from_full_length": ["dbg:DebugTruncatesInSetup"],
    "check_debug_disables_prediction_dumps": ["dbg:DebugKeepsPredictionDumps"],
    "check_checkpoint_files_and_contents": ["ckpt:EpochCheckpointsOffByOne",
                                            "ckpt:LastCheckpointOnlyAtTheEnd",
                                            "ckpt:LastCheckpointOnlyOnImprovement",
                                            "ckpt:CheckpointOmitsTheOptimizer"],
    "check_checkpoint_errors_name_the_file": ["ckpt:MissingCheckpointStartsFresh",
                                              "ckpt:VagueCheckpointErrors"],
    "check_interrupted_write_keeps_the_previous_file": ["ckpt:WritesCheckpointsInPlace"],
    "check_loading_never_runs_embedded_code": ["ckpt:UnsafeCheckpointLoad"],
    "check_sigterm_leaves_a_resumable_checkpoint": ["ckpt:IgnoresSigterm",
                                                    "ckpt:SigtermWithoutCheckpoint"],
    "check_a_lost_rank_fails_every_rank_in_time": ["dist:NoProcessGroupTimeout"],
    "check_pooled_mean_is_sum_over_counts": ["dist:MeanOfRankMeans"],
    "check_ranks_stop_together": ["dist:StopVerdictOnRankZeroOnly"],
    "check_ranks_agree_on_best": ["dist:BestWeightsOnRankZeroOnly"],
    "check_only_rank_zero_writes": ["dist:EveryRankWritesCheckpoints",
                                    "dist:WritesCheckpointsInBackground"],
    "check_ranks_decide_as_one_rank": ["dist:MeanOfRankMeans"],
    "check_resume_continues_under_several_ranks": ["res:RepeatsTheCheckpointEpoch"],
    "check_resume_decides_alike_under_several_ranks": ["res:ForgetsBestOnResume"],
    "check_debug_truncates_under_several_ranks": ["dbg:DebugDoesNotTruncate"],
    "check_debug_steps_under_several_ranks": ["dbg:DebugKeepsGradAccum"],
    "check_ranks_stop_together_on_rank_local_scores": ["dist:DecidesOnLocalScore"],
    "check_ranks_agree_on_best_on_rank_local_scores": ["dist:DecidesOnLocalScore"],
}

PAIRS = [(check, mutant) for check, mutants in MUTANTS.items() for mutant in mutants]


@pytest.fixture(scope="module")
def harness() -> Iterator[Harness]:
    # workers import the mutants as tests.mutants.*, from the repository root
    previous = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), previous) if p)
    try:
        with Harness(resolve_target("reference").adapter, timeout_s=60) as h:
            yield h
    finally:
        if previous is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = previous


def run_one(harness: Harness, base_trainer: str, check_name: str) -> CheckResult:
    spec = CHECKS[check_name]
    target = resolve_target(base_trainer=base_trainer)
    ctx, _ = open_context(target, harness, world_size=2 if spec.multi_rank else 1,
                          max_examples=40)
    return run_check(spec, ctx)


def test_every_check_has_a_mutant() -> None:
    assert set(MUTANTS) == set(CHECKS)


@pytest.mark.parametrize(("check_name", "mutant"), PAIRS, ids=[f"{c}-{m}" for c, m in PAIRS])
def test_the_check_fails_its_mutant(harness: Harness, check_name: str, mutant: str) -> None:
    result = run_one(harness, f"tests.mutants.{mutant}", check_name)
    assert result.outcome == "failed", f"{check_name} on {mutant}: {result.outcome}: " \
        f"{result.evidence}\n{result.detail}"
    assert any(result.evidence.startswith(f"{c}:") for c in result.clauses) \
        or "scenario" in result.evidence
    # files are named relative to the harness's temporary folder, never by this machine's path
    assert str(harness.root) not in result.evidence + result.detail
    clauses = judge_clauses([result], list(result.clauses), {}, world_size=2)
    assert {c.id: c.verdict for c in clauses if c.id in result.clauses} == \
        dict.fromkeys(result.clauses, "fail")


def test_the_reference_passes_every_checked_clause(harness: Harness) -> None:
    checked = sorted({c for spec in CHECKS.values() for c in spec.clauses})
    report = run_checks(resolve_target("reference"), clauses=",".join(checked), world_size=2,
                        harness=harness, max_examples=40)
    bad = [(c.id, c.verdict, c.evidence) for c in report.clauses
           if c.id in checked and c.verdict != "pass"]
    assert not bad
