"""The guide's worked adapters: each within its size goal (at most 60 lines of code for a
class-based trainer, 90 for a framework runner or a callback library, the count the guide's
captions state), each checked on a subset of the clauses with the verdicts a reading of its
trainer predicts (the guide "The adapter contract" gives the reading clause by clause, in
tables this test ties to ``EXPECTED``), and no ``error``: the adapter reports what the suite
needs.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from trainspec.conformance.api import check
from trainspec.conformance.spec.results import Verdict

WORKED = Path(__file__).resolve().parent / "worked"
GUIDE = WORKED.parent.parent / "docs" / "guides" / "adapter-contract.md"

# the size goals, by the trainer's shape (code_lines, the count the guide's captions state)
CLASS_BASED = ("imagenet_adapter", "template_adapter")  # at most 60 lines of code
RUNNER_SHAPED = ("bundle_adapter", "engine_adapter")  # a runner or callbacks: at most 90

# adapter -> the verdicts its trainer's source predicts, clause by clause
EXPECTED: dict[str, dict[str, Verdict]] = {
    # pytorch-template: a class with hooks, 1-based epochs, decisions in local variables
    "template_adapter:TemplateAdapter": {
        "LOOP-1": "pass",  # epochs 1..N in order, one pass each
        # (BEST-2 left out: model_best.pth is a saved copy, but with ckpt.enable=false the
        # template keeps no best weights at all; generated runs show it as a fail when their
        # time budget reaches such a run, which depends on the machine's load)
        "BEST-3": "fail",  # its files record no step
        "PAT-1": "fail",  # stops when the count exceeds early_stop: one epoch late
        "RES-2": "fail",  # the LR scheduler is never saved
        "RES-3": "fail",  # the patience counter is a local variable, lost on resume
        "CKPT-1": "fail",  # no step, run id or scheduler in the files
        "CKPT-3": "pass",  # torch.load's default is weights_only=True
    },
    # imagenet example: a loop function, module functions wrapped, decision handed on
    "imagenet_adapter:ImagenetAdapter": {
        "LOOP-1": "pass",
        "BEST-2": "pass",  # model_best.pth.tar is a copy of the file
        "RES-2": "pass",  # optimizer and scheduler saved and restored
        "RES-4": "fail",  # no RNG state saved: the data order differs after a resume
        "RES-5": "fail",  # Adam's state goes into SGD without a word
        "CKPT-3": "pass",
        "CKPT-4": "fail",  # a missing --resume file is only printed; training starts afresh
    },
    # poutyne's ModelBundle: a loop with callbacks, a checkpoint spread over several files
    "bundle_adapter:BundleAdapter": {
        "LOOP-1": "pass",
        "LOOP-4": "pass",  # test() once, after the loop
        "BEST-4": "pass",  # the best checkpoint is restored before the test
        "PAT-1": "pass",  # wait >= patience
        "NAN-3": "fail",  # +inf is strictly greater: an improvement that resets the counter
        "RES-2": "fail",  # the optimizer is saved before the LR scheduler steps
        "RES-3": "fail",  # early stopping resets its counter when training begins
        "CKPT-2": "fail",  # checkpoint.ckpt is written in place
    },
    # a training engine's runner: hooks by priority, files holding framework objects (the
    # message hub's buffers), progress under meta, a process-wide message hub
    "engine_adapter:EngineAdapter": {
        # EpochBasedTrainLoop.run validates when (epoch + 1) % val_interval == 0: with
        # val.every_n_epochs=2 after epochs 1 and 3, not 0 and 2
        "LOOP-2": "fail",
        # CheckpointHook.after_val_epoch writes best_score_epoch_<n>.pth only when score > best
        # (strictly), the model's weights with meta's epoch and iter as they are then
        "BEST-2": "pass",
        "BEST-3": "pass",
        # EarlyStoppingHook's min_delta is 0.1 by default: a gain under it is no improvement,
        # so it stops one validation early (its count is right: wait_count >= patience)
        "PAT-1": "fail",
        # save_checkpoint records the next epoch and the iteration in meta; Runner.train sets
        # both from it on a resume
        "RES-1": "pass",
        # the schedulers step before after_train_epoch, where CheckpointHook saves optimizer
        # and param_schedulers; Runner.train restores both
        "RES-2": "pass",
        # EarlyStoppingHook keeps wait_count and its best in itself: never saved
        "RES-3": "fail",
        # load_from without resume loads state_dict alone: epoch 0, iter 0, a fresh optimizer
        "FT-1": "pass",
        # the message hub's HistoryBuffer pickles through a bound class method (getattr): no
        # file loads weights_only=True; its one periodic file is written on the interval only
        # (no last file after every epoch at every_n_epochs=2), and save_last=false has no
        # switch in it
        "CKPT-1": "fail",
        "CKPT-3": "fail",  # Runner.train loads with weights_only=False: a planted payload runs
        # torch.load(load_from) tries the path as given, not under the work_dir; torch's errors
        # for a truncated or garbage file do not name it
        "CKPT-4": "fail",
    },
}


def code_lines(path: Path) -> int:
    """Lines of code: neither blank, nor a comment, nor part of a docstring."""
    source = path.read_text(encoding="utf-8")
    docstrings: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value,
                                                                         str):
            docstrings.update(range(body[0].lineno, (body[0].end_lineno or 0) + 1))
    return sum(1 for number, line in enumerate(source.splitlines(), 1)
               if line.strip() and not line.strip().startswith("#") and number not in docstrings)


def _module(adapter: str) -> str:
    return adapter.partition(":")[0]


def test_every_worked_adapter_has_one_size_goal() -> None:
    assert sorted(CLASS_BASED + RUNNER_SHAPED) == sorted(map(_module, EXPECTED))


@pytest.mark.parametrize("module", CLASS_BASED)
def test_an_adapter_for_a_class_based_trainer_is_at_most_60_lines_of_code(module: str) -> None:
    assert code_lines(WORKED / f"{module}.py") <= 60


@pytest.mark.parametrize("module", RUNNER_SHAPED)
def test_an_adapter_for_a_framework_runner_or_callbacks_is_at_most_90_lines_of_code(
        module: str) -> None:
    assert code_lines(WORKED / f"{module}.py") <= 90


_CAPTION = re.compile(r":caption: tests/worked/(\w+)\.py \((\d+) lines of code\)")
_ROW = re.compile(r"^\| ([A-Z]+-\d+(?:, [A-Z]+-\d+)*) \| ([\w/]+) \|", re.MULTILINE)


def _guide_sections() -> dict[str, tuple[int, str]]:
    """Each worked adapter in the guide: the count its caption states, and the text after the
    caption up to the next caption or section (its verdict table)."""
    text = GUIDE.read_text(encoding="utf-8")
    found = list(_CAPTION.finditer(text))
    sections = {}
    for m, after in zip(found, [*found[1:], None], strict=True):
        end = len(text) if after is None else after.start()
        section = text[m.end():end].split("\n## ", 1)[0]
        sections[m.group(1)] = (int(m.group(2)), section)
    return sections


def test_each_caption_in_the_guide_states_its_adapters_count_of_code_lines() -> None:
    sections = _guide_sections()
    assert sorted(sections) == sorted(map(_module, EXPECTED))
    assert {m: count for m, (count, _) in sections.items()} == {
        m: code_lines(WORKED / f"{m}.py") for m in sections}


@pytest.mark.parametrize("adapter", sorted(EXPECTED))
def test_the_guides_verdict_table_agrees_with_the_expected_verdicts(adapter: str) -> None:
    _, section = _guide_sections()[_module(adapter)]
    table = {clause: verdict for ids, verdict in _ROW.findall(section)
             for clause in ids.split(", ")}
    assert {c: table.get(c) for c in EXPECTED[adapter]} == EXPECTED[adapter]


def test_code_lines_leave_out_docstrings_comments_and_blanks(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text('"""Doc\nstring."""\n\n# a comment\nx = 1\n\n\ndef f() -> None:\n'
                      '    """Doc."""\n    return None\n')
    assert code_lines(sample) == 3


@pytest.mark.slow
@pytest.mark.parametrize("adapter", sorted(EXPECTED))
def test_each_worked_adapter_gets_the_verdicts_its_trainer_predicts(adapter: str) -> None:
    want = EXPECTED[adapter]
    report = check(f"tests.worked.{adapter}", clauses=",".join(want), world_size=1)
    got = {c.id: c.verdict for c in report.clauses if c.id in want}
    assert got == want, {c.id: c.evidence for c in report.clauses if got.get(c.id) != want.get(
        c.id)}
