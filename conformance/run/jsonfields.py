"""Typed reading of JSON objects that cross a process boundary: records and file descriptions.

Whatever an adapter hands the harness arrives as JSON. :class:`FieldReader` reads one object's
fields with the type each must have, and a field that is missing or of the wrong type raises
:class:`RecordError` naming the object and the field, never a bare ``KeyError`` deep in a
check. :func:`encode` and :func:`decode` carry tensors as flat lists (float32 values round-trip
exactly through Python floats, so bitwise comparisons stay bitwise).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

__all__ = ["FieldReader", "RecordError", "decode", "encode"]


class RecordError(ValueError):
    """A record or description that does not decode: the message names it and the field."""


def encode(obj: object) -> object:
    """A JSON-able form of nested containers of tensors, numbers and strings."""
    torch = sys.modules.get("torch")  # without torch imported, nothing is a tensor
    if torch is not None and isinstance(obj, torch.Tensor):
        t = obj.detach().cpu()
        return {"__tensor__": str(t.dtype).removeprefix("torch."), "shape": list(t.shape),
                "data": t.reshape(-1).tolist()}
    if isinstance(obj, Mapping):
        return {str(k): encode(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [encode(v) for v in obj]
    if obj is None or isinstance(obj, bool | int | float | str):
        return obj  # NaN and infinities travel as JSON's NaN/Infinity literals
    return repr(obj)


def decode(obj: object) -> object:
    """Inverse of :func:`encode` (tuples come back as lists)."""
    if isinstance(obj, dict):
        if "__tensor__" in obj:
            import torch  # paid by the first tensor read, not by importing the suite

            dtype = getattr(torch, str(obj["__tensor__"]))
            return torch.tensor(obj["data"], dtype=dtype).reshape(obj["shape"])
        return {k: decode(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [decode(v) for v in obj]
    return obj


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class FieldReader:
    """Typed access to one JSON object's fields; ``noun`` and ``path`` name it in every error
    (``record 'train_start.best_file'``, ``file 'last.pt'``)."""

    def __init__(self, noun: str, path: str, data: Mapping[str, object]) -> None:
        self.noun, self.path, self.data = noun, path, data

    def bad(self, name: str, expected: str) -> RecordError:
        value = self.data.get(name, "<missing>")
        return RecordError(f"{self.noun} {self.path!r}: field {name!r} should be {expected}, "
                           f"got {str(value)[:80]!r}")

    def integer(self, name: str) -> int:
        value = self.data.get(name)
        if isinstance(value, int) and _is_int(value):
            return value
        raise self.bad(name, "an integer")

    def opt_int(self, name: str) -> int | None:
        return None if self.data.get(name) is None else self.integer(name)

    def number(self, name: str, default: float | None = None) -> float:
        value = decode(self.data.get(name))
        if value is None and default is not None:
            return default
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        raise self.bad(name, "a number")

    def text(self, name: str, default: str | None = None) -> str:
        value = self.data.get(name, default)
        if isinstance(value, str):
            return value
        raise self.bad(name, "a string")

    def opt_text(self, name: str) -> str | None:
        return None if self.data.get(name) is None else self.text(name)

    def flag(self, name: str) -> bool:
        value = self.data.get(name)
        if isinstance(value, bool):
            return value
        raise self.bad(name, "true or false")

    def opt_flag(self, name: str) -> bool | None:
        return None if self.data.get(name) is None else self.flag(name)

    def weights(self, name: str) -> dict[str, torch.Tensor]:
        value = decode(self.data.get(name))
        torch = sys.modules.get("torch")  # imported by decode when it met a tensor
        if isinstance(value, dict) and (not value or (torch is not None and all(
                isinstance(v, torch.Tensor) for v in value.values()))):
            return {str(k): v for k, v in value.items()}
        raise self.bad(name, "a dict of tensors")

    def opt_weights(self, name: str) -> dict[str, torch.Tensor] | None:
        return None if self.data.get(name) is None else self.weights(name)

    def nested(self, name: str) -> object:
        """Nested state (an optimizer's state dict) as it was encoded, tensors decoded."""
        return decode(self.data.get(name))

    def strings(self, name: str, expected: str) -> dict[str, str]:
        value = self.data.get(name) or {}
        if not isinstance(value, dict):
            raise self.bad(name, expected)
        return {str(k): str(v) for k, v in value.items()}

    def names(self, name: str) -> tuple[str, ...]:
        value = self.data.get(name) or []
        if not isinstance(value, list):
            raise self.bad(name, "a list of names")
        return tuple(str(v) for v in value)

    def sizes(self, name: str) -> dict[str, int | None]:
        value = self.data.get(name, {})
        if not isinstance(value, dict) or not all(v is None or _is_int(v)
                                                  for v in value.values()):
            raise self.bad(name, "a dict of loader names to integers or null")
        return {str(k): v for k, v in value.items()}

    def object(self, name: str, expected: str) -> FieldReader:
        value = self.data.get(name)
        if not isinstance(value, dict):
            raise self.bad(name, expected)
        return FieldReader(self.noun, f"{self.path}.{name}", value)

    def optional_object(self, name: str, expected: str) -> FieldReader | None:
        return None if self.data.get(name) is None else self.object(name, expected)
