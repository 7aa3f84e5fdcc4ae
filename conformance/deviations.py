"""The deviations file: clauses a target declares it does not meet, each with its reason.

```toml
[deviations]
"RES-4" = "our scheduler is rebuilt from the config on resume (issue #123)"
```

A declared deviation turns that clause's ``fail`` into ``deviation``; one that passes is flagged
in the report so it can be removed. Every mistake in the file is a :class:`UsageError` that names
the file, the key, what was expected and the fix: a deviation file that silently matches nothing
would hide real failures.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from trainspec.conformance.spec import clauses as registry
from trainspec.errors import UsageError

__all__ = ["load_deviations"]

_MAX_BYTES = 2**20  # a deviations file is a few lines: past this it is not one
_EXAMPLE = '[deviations]\n"RES-4" = "why this target does not meet it"'


def load_deviations(path: str | Path) -> dict[str, str]:
    """Clause ID (upper case) -> reason, from the ``[deviations]`` table of a TOML file.

    Raises:
        UsageError: the file is missing or unreadable, is not TOML, has no ``[deviations]``
            table, names an unknown clause, names a clause twice, or gives a reason that is
            not a non-empty string.
    """
    where = Path(path)
    try:
        with where.open("rb") as f:  # bounded: /dev/zero or an endless pipe is refused
            raw = f.read(_MAX_BYTES + 1)
        if len(raw) > _MAX_BYTES:
            raise UsageError(f"--deviations {where}: larger than {_MAX_BYTES // 2**20} MiB, so "
                             f"not a deviations file (one is a few lines). Write it as:\n"
                             f"{_EXAMPLE}")
        text = raw.decode("utf-8")
    except FileNotFoundError:
        raise UsageError(f"--deviations {where}: no such file. Give the path of a TOML file "
                         f"such as:\n{_EXAMPLE}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"--deviations {where}: cannot read it ({e}). Give a readable UTF-8 "
                         "TOML file.") from None
    try:
        data = tomllib.loads(text)
    except RecursionError:  # arrays nested past what the parser follows
        raise UsageError(f"--deviations {where}: nested too deeply to be a deviations file. "
                         f"Write it as:\n{_EXAMPLE}") from None
    except tomllib.TOMLDecodeError as e:
        raise UsageError(f"--deviations {where}: not valid TOML ({e}). Fix the syntax; the "
                         f"expected form is:\n{_EXAMPLE}") from None
    table = data.get("deviations")
    if not isinstance(table, dict):
        found = "no such table" if table is None else f"a {type(table).__name__}"
        top = ", ".join(sorted(data)) or "nothing"
        raise UsageError(f"--deviations {where}: expected a [deviations] table of "
                         f'"ID" = "reason", found {found} (top-level keys: {top}). '
                         f"Write it as:\n{_EXAMPLE}")
    out: dict[str, str] = {}
    for key, reason in table.items():
        clause_id = _clause_id(where, key)
        if not isinstance(reason, str) or not reason.strip():
            raise UsageError(f"--deviations {where}: [deviations] {key!r}: expected a "
                             f"non-empty string giving the reason, found {reason!r}. Say why "
                             "the target does not meet the clause (a link to an issue helps).")
        if clause_id in out:
            raise UsageError(f"--deviations {where}: [deviations] names {clause_id} twice "
                             f"(as {key!r} and an earlier spelling). Keep one entry.")
        out[clause_id] = reason.strip()
    return out


def _clause_id(where: Path, key: str) -> str:
    try:
        return registry.get(key).id
    except UsageError as e:
        raise UsageError(f"--deviations {where}: [deviations] {key!r}: {e}") from None
