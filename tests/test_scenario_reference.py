"""The scenario reference cannot drift: every key, capability and record field has its entry."""

from __future__ import annotations

import dataclasses
import inspect
import re
import sys
from pathlib import Path

from trainspec.conformance.checks import CHECKS
from trainspec.conformance.checks.uses import (
    ADAPTER_RECORDS,
    flat_defaults,
    record_fields,
    scenario_uses,
)
from trainspec.conformance.report.scenario_page import render_scenario_reference
from trainspec.conformance.run import records
from trainspec.conformance.run.adapter import CAPABILITIES
from trainspec.conformance.spec.scenario_keys import (
    CAPABILITY_MEANINGS,
    FIELD_RULES,
    KEYS,
    LOAD_FROM,
)

ROOT = Path(__file__).resolve().parent.parent


def test_every_config_key_of_the_scenario_has_exactly_one_entry() -> None:
    documented = [k.key for k in KEYS]
    assert len(documented) == len(set(documented))
    assert set(documented) == set(flat_defaults())


def test_every_capability_has_a_meaning_and_every_gated_key_a_real_capability() -> None:
    assert set(CAPABILITY_MEANINGS) == set(CAPABILITIES)
    assert {k.capability for k in KEYS} - {None} <= set(CAPABILITIES)


def test_every_field_an_adapter_reports_has_its_rule() -> None:
    fields = {f"{name}.{f.name}" for name in ADAPTER_RECORDS
              for f in dataclasses.fields(getattr(records, name))}
    assert set(FIELD_RULES) == fields


def test_the_checks_code_tells_which_clauses_set_a_key_and_which_cases_a_capability_gates() -> None:
    uses = scenario_uses()
    assert "LOOP-3" in uses.key_clauses["test.enable"]
    assert "DBG-6" in uses.key_clauses["save_preds.enable"]
    assert set(uses.key_clauses["ckpt.resume"]) >= {"RES-1", "RES-3", "FT-1"}
    gated = {(name, how) for name, _, how in uses.capability_checks["val_first"]}
    assert ("check_loop_zero_epochs_is_eval_only", "some cases") in gated  # LOOP-3, per case
    assert ("check_loop_zero_epochs_is_eval_only", "every case") in {
        (name, how) for name, _, how in uses.capability_checks["eval_only"]}


def test_the_published_page_is_the_one_the_code_writes() -> None:
    uses = scenario_uses()
    page = render_scenario_reference(flat_defaults(), uses.key_clauses, uses.capability_checks,
                                     record_fields())
    assert (ROOT / "docs" / "spec" / "scenario.md").read_text(encoding="utf-8") == page
    assert "| `ckpt.load_from` | `null` |" in page


def test_what_the_reference_says_ckpt_load_from_holds_is_what_the_checks_give() -> None:
    held = " ".join(text for _, text in LOAD_FROM)
    named = set(re.findall(r"`([^`]+)`", held))  # the paths the rows quote
    assert named >= {"nowhere/missing-ckpt.pt", "corrupt-last.pt", "garbage-last.pt"}
    # the code of the modules that hold the checks of CKPT-3 and CKPT-4
    specs = {spec.clauses: spec for spec in CHECKS.values()
             if spec.clauses in {("CKPT-3",), ("CKPT-4",)}}
    code = "".join(inspect.getsource(sys.modules[spec.func.__module__])
                   for spec in specs.values())
    assert {name for name in named if f'"{name}"' not in code} == set()
    # CKPT-3's row says any trainer that checkpoints gets it, resume or not
    assert specs[("CKPT-3",)].requires == {"checkpoint"}
    assert any("CKPT-3" in run and "resume or not" in run for run, _ in LOAD_FROM)
