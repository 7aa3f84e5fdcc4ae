"""trainspec: what a PyTorch training loop must do, a reference trainer, and a conformance suite.

The subpackages are independent: ``trainspec.reference`` needs torch only, while
``trainspec.conformance`` (the suite) and ``trainspec.adapters`` are imported on first use, so
importing the reference trainer never pays for pytest or hypothesis.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainspec.errors import TrainspecError

if TYPE_CHECKING:
    from trainspec.conformance.api import Report, check

__version__ = "0.1.0"
__all__ = ["Report", "TrainspecError", "__version__", "check"]


def __getattr__(name: str) -> object:
    # The suite's entry points load lazily: `import trainspec.reference` stays torch-only.
    if name in {"check", "Report"}:
        from trainspec.conformance import api

        return getattr(api, name)
    raise AttributeError(f"module 'trainspec' has no attribute {name!r}")
