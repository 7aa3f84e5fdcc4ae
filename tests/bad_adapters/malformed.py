"""An adapter whose records do not decode: a validation whose epoch is not an integer."""

from __future__ import annotations

from tests.bad_adapters.common import ShellAdapter
from trainspec.conformance.run.adapter import RunContext
from trainspec.conformance.run.records import Setup, Validation
from trainspec.conformance.run.scenario import Scenario


class RecordsAMalformedValidation(ShellAdapter):
    name = "records a malformed validation"

    def run(self, scenario: Scenario, ctx: RunContext) -> None:
        ctx.record(Setup(epoch=0, train_step=0, train_len=6))
        # what mypy refuses in typed code, and an untyped adapter can still send
        ctx.record(Validation(epoch="two", phase="epoch", score=0.5,  # type: ignore[arg-type]
                              improved=True, stop=False, weights={}))
