"""Debug-mode loader truncation (DBG-1)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import islice
from typing import Any, Protocol, TypeVar

__all__ = ["OneBatchLoader", "SizedIterable"]

T_co = TypeVar("T_co", covariant=True)


class SizedIterable(Protocol[T_co]):
    def __iter__(self) -> Iterator[T_co]: ...
    def __len__(self) -> int: ...


class OneBatchLoader(Iterable[T_co]):
    """A loader capped at its first batch.

    Iteration and ``len`` see the cap (``min(len, 1)``: an empty split stays empty); every other
    attribute (``dataset``, ``batch_size``, ``sampler`` ...) passes through to the loader.
    """

    def __init__(self, loader: SizedIterable[T_co]) -> None:
        self.loader = loader

    def __iter__(self) -> Iterator[T_co]:
        return islice(iter(self.loader), 1)

    def __len__(self) -> int:
        return min(len(self.loader), 1)

    def __getattr__(self, name: str) -> Any:
        if name == "loader":  # not yet set (copy, unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.loader, name)

    def __repr__(self) -> str:
        return f"OneBatchLoader({self.loader!r})"
