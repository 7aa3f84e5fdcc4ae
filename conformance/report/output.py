"""Writing one output file of the CLI: a path that cannot be written is a usage error."""

from __future__ import annotations

from pathlib import Path

from trainspec.errors import UsageError

__all__ = ["write_text"]


def write_text(path: str | Path, text: str, option: str, what: str = "report") -> None:
    """Write one output file of the CLI; a path that cannot be written is a usage error."""
    where = Path(path)
    try:
        where.parent.mkdir(parents=True, exist_ok=True)
        # a lone surrogate left anywhere is written as an escape, never a UnicodeEncodeError
        where.write_text(text, encoding="utf-8", errors="backslashreplace")
    except OSError as e:
        raise UsageError(f"{option} {where}: cannot write the {what} ({e}). "
                         "Give a path in a writable folder.") from None
