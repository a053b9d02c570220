"""The one sanitizer for text from outside conduit: nothing another program wrote reaches a terminal or a log raw.

Outside text is anything conduit did not write itself: a gateway's answer bodies and headers, model ids, vLLM's
log, the routing file, the model caches, tool files. Printed as it came, an ``ESC [ 2 J`` clears the screen, an
OSC 52 sequence writes the clipboard, an OSC 8 sequence hides a link, a ``\\r`` or a newline forges a log line.
``clean`` writes every control and format character (Unicode categories Cc, Cf, Zl, Zp: ESC, BEL, DEL, the C1
controls, zero-width and bidirectional marks, line and paragraph separators) as a visible escape, ``\\x1b`` or
``\\u202e``; ``one_line`` does the same to newlines and tabs too (a field shown on one line) and caps the
length. Backslashes are left alone, so cleaning twice changes nothing.

Example::

    one_line("gpt\\x1b]52;c;aGk=\\x07\\nINFO forged", 40)   # 'gpt\\\\x1b]52;c;aGk=\\\\x07\\\\nINFO forged'
"""

from __future__ import annotations

import re
import unicodedata

__all__ = ["clean", "log_safe", "one_line", "safe_number"]

_BAD = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u00ad\u061c\u180e\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff"
                  r"\ufff9-\ufffb]|[^\x00-\x7f]")
"""A fast first look: C0/C1 controls (newline and tab aside) and any non-ASCII character (checked by category)."""
_LINE = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(ch: str) -> str:
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def _unsafe(ch: str) -> bool:
    return unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn") and ch not in "\n\t"


def clean(text: str, *, keep_newlines: bool = True) -> str:
    """``text`` with every control and format character written as a visible escape (``\\x1b``, ``\\u200b``).
    Newlines and tabs stay when ``keep_newlines`` (a multi-line message); a carriage return never does."""
    if not keep_newlines:
        text = text.replace("\n", "\\n").replace("\t", "\\t")
    if not _BAD.search(text):
        return text
    return "".join(_LINE.get(ch, _escape(ch)) if ch == "\r" or _unsafe(ch) else ch for ch in text)


def one_line(text: object, limit: int | None = None) -> str:
    """``str(text)`` as one line: ``clean`` with newlines and tabs escaped too, cut to ``limit`` characters
    (then ending ``...``; None: no limit)."""
    out = clean(str(text), keep_newlines=False)
    if limit is not None and len(out) > limit:
        return out[:max(0, limit - 3)] + "..."
    return out


def log_safe(message: str) -> str:
    """A log record's message: ``clean`` (newlines kept), and every line after the first indented by two
    spaces, so text from outside (a routing file's ``why``, a server's message) can never start a line that
    looks like a record of its own (a forged ``2025-01-01 00:00:00 INFO ...``)."""
    return clean(message).replace("\n", "\n  ")


def safe_number(value: object, *, low: float, high: float, integer: bool = False) -> float | int | None:
    """``value`` when it is a finite number within ``[low, high]`` (an integer when ``integer``: an integral
    float becomes an ``int``), else None. Booleans and strings are not numbers. For figures read from files
    other programs (or a person) may have written: a state file's timestamp, a cached token limit."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            return None
        if integer:
            if not value.is_integer():
                return None
            value = int(value)
    if not low <= value <= high:
        return None
    return value
