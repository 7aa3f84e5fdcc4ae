"""The matrix's files: ``matrix.json``, ``matrix.md`` and ``matrix.html``, written together."""

from __future__ import annotations

import json
from pathlib import Path

from trainspec.conformance.report.matrix import ConformanceMatrix, to_json, to_markdown
from trainspec.conformance.report.matrix_html import to_html
from trainspec.errors import UsageError

__all__ = ["FILES", "write"]

FILES = ("matrix.json", "matrix.md", "matrix.html")


def write(matrix: ConformanceMatrix, out_dir: str | Path) -> list[Path]:
    """Write ``matrix.json``, ``matrix.md`` and ``matrix.html`` into ``out_dir``.

    Raises:
        UsageError: the folder cannot be created or a file cannot be written.
    """
    where = Path(out_dir)
    texts = {"matrix.json": json.dumps(to_json(matrix), indent=2, ensure_ascii=False) + "\n",
             "matrix.md": to_markdown(matrix), "matrix.html": to_html(matrix)}
    written = []
    for name in FILES:
        path = where / name
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(texts[name], encoding="utf-8", errors="backslashreplace")
        except OSError as e:
            raise UsageError(f"--out {where}: cannot write {name} ({e}). Give a writable "
                             "folder.") from None
        written.append(path)
    return written
