"""Text that is safe to print and to write into any report: one sanitizer for every writer.

Evidence quotes what a trainer said (an exception message, a traceback, a config value), and a
trainer may say anything: terminal colours (``\\x1b[31m``, as rich and loguru print them), NUL,
lone surrogates from a bad decode, megabytes on one line. XML forbids most control characters
(a JUnit file holding one does not parse), a terminal obeys them, and UTF-8 cannot encode a lone
surrogate. :func:`printable` strips terminal escape sequences, writes every other character
that is not printable text as a visible escape (``\\x00``, ``\\ud800``), and cuts very long lines.
"""

from __future__ import annotations

import re

__all__ = ["MAX_LINE_CHARS", "printable", "strip_escapes"]

MAX_LINE_CHARS = 4000  # a line longer than this is cut, saying how much was cut

# terminal escape sequences: CSI (colours, cursor moves), OSC (titles, links), and the
# two-character ones; the 8-bit CSI (\x9b) too
_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x9b[0-?]*[ -/]*[@-~]"
                      r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-Z\\-_]")
# what is left that is not printable text: C0 controls but tab and newline, DEL, C1 controls,
# lone surrogates, and the non-characters XML forbids
_UNPRINTABLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff\ufffe\uffff]")


def strip_escapes(text: str) -> str:
    """``text`` without terminal escape sequences (colours)."""
    return _ESCAPES.sub("", text)


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str, *, max_line_chars: int = MAX_LINE_CHARS) -> str:
    """``text`` fit for a terminal, XML, HTML, Markdown and UTF-8: escape sequences stripped,
    other control characters and lone surrogates written as visible escapes, a CR-LF read as
    a newline, and each line cut at ``max_line_chars``."""
    text = strip_escapes(text.replace("\r\n", "\n"))
    text = _UNPRINTABLE.sub(_escape, text)
    if len(text) <= max_line_chars:
        return text
    lines = text.split("\n")
    return "\n".join(line if len(line) <= max_line_chars else
                     f"{line[:max_line_chars]}... ({len(line) - max_line_chars} characters cut)"
                     for line in lines)
