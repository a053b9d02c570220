"""TOML syntax errors in plain words: what is wrong on the line, and what to write instead.

tomlkit reports a parse error as its parser sees it ("Unexpected character: 'c'", "Control characters (codes
less than 0x1f and 0x7f) are not allowed in strings, use \\u000a instead", "Unexpected character: '\\x00'" at
the end of the file), with a 0-based column. ``toml_problem`` turns its ``ParseError`` and the text parsed into
a ``TomlProblem``: a 1-based line and column and one sentence a person can act on, never quoting the line (it
may hold a key: a ``secrets.toml``, or a key pasted into the profile).

Sources: tomlkit's ``exceptions.py`` (the error classes and their messages) and ``parser.py`` (which class is
raised where).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tomlkit import exceptions as tx

__all__ = ["TomlProblem", "toml_problem"]

_KEY_EQ = re.compile(r"^\s*([A-Za-z0-9_.\"' -]+?)\s*=\s*(.*)$")
_DUPLICATE = re.compile(r'Key "(.+?)" already exists')
_INVALID_KEY = re.compile(r'Invalid key "(.+?)"')


@dataclass(frozen=True)
class TomlProblem:
    """A TOML syntax error for a person.

    Attributes:
        line: 1-based line number; column: 1-based column (None when only the line is known, or the end of
            the file was reached).
        reason: one sentence, no quotation of the text.
    """

    line: int
    column: int | None
    reason: str

    def where(self) -> str:
        """``line L, column C`` (or ``line L``)."""
        return f"line {self.line}" + (f", column {self.column}" if self.column else "")


def toml_problem(exc: tx.ParseError, text: str) -> TomlProblem:
    """Plain words for tomlkit's ``exc`` raised while parsing ``text`` (see the module docstring)."""
    lines = text.splitlines()
    line, col = max(int(exc.line), 1), int(exc.col) + 1
    src = lines[line - 1] if line <= len(lines) else ""
    at_eof = isinstance(exc, tx.UnexpectedEofError) or (isinstance(exc, tx.UnexpectedCharError) and "\\x00" in str(exc))
    if at_eof:
        return _at_end(lines)
    message = str(exc)
    if m := _DUPLICATE.search(message):
        line = _defining_line(lines, line, m.group(1))  # tomlkit may report the line after it
        what = "table" if lines[line - 1].lstrip().startswith("[") else "key"
        return TomlProblem(line, None, f"the {what} `{m.group(1)}` is written twice; keep one of them")
    if m := _INVALID_KEY.search(message):
        if " " in m.group(1).strip():
            return TomlProblem(line, col, "a key name holds a space; write it without the space, "
                               "or in quotes if the space is meant")
        return TomlProblem(line, col, "this key name is not valid TOML; use letters, digits, `_` and `-`")
    if isinstance(exc, tx.InvalidControlChar) or isinstance(exc, tx.InvalidCharInStringError):
        if src.count('"') % 2 or src.count("'") % 2:
            return TomlProblem(line, col, "a quoted value is not closed: add the closing quote on this line")
        if isinstance(exc, tx.InvalidCharInStringError):
            return TomlProblem(line, col, "a backslash in a \"...\" string starts an escape; write `\\\\` for a "
                               "backslash, or use '...' quotes (no escapes there)")
        return TomlProblem(line, col, "a quoted value holds a control character (a tab or line break); remove it")
    if isinstance(exc, tx.EmptyKeyError):
        return TomlProblem(line, col, "a line starts with `=`: the key name before it is missing")
    if isinstance(exc, tx.EmptyTableNameError):
        return TomlProblem(line, col, "a table header `[]` has no name; write [tools.NAME] or [channels.NAME]")
    if isinstance(exc, (tx.InvalidNumberError, tx.InvalidNumberOrDateError, tx.InvalidDateTimeError,
                        tx.InvalidDateError, tx.InvalidTimeError)):
        return TomlProblem(line, col, "this value is not a valid number or date; if it is text, put it in quotes")
    if isinstance(exc, tx.UnexpectedCharError):
        opened = _open_before(lines, line)
        if opened is not None:
            return TomlProblem(opened, None, "a list `[` or table `{` opened on this line is never closed: add the "
                               "`]` or `}`")
        return _unexpected(src, line, col)
    reason = re.sub(r"\s+at line \d+ col \d+$", "", message)
    return TomlProblem(line, col, f"this is not valid TOML ({reason})")


def _unexpected(src: str, line: int, col: int) -> TomlProblem:
    """An unexpected character on line ``src``: the usual mistakes first (a header without ``]``, text
    without quotes, two values on one line)."""
    stripped = src.strip()
    if stripped.startswith("[") and not stripped.rstrip("#").rstrip().endswith("]"):
        return TomlProblem(line, col, "a table header is not closed: end it with `]` (`[[` with `]]`)")
    m = _KEY_EQ.match(src)
    if m and col > len(src) - len(src.lstrip()) + len(m.group(1)):
        key, value = m.group(1).strip(), m.group(2).strip()
        if value and value[0] not in "\"'[{0123456789+-" and value.split()[0] not in ("true", "false"):
            return TomlProblem(line, col, f"the value of `{key}` is text without quotes: write {key} = \"...\"")
        return TomlProblem(line, col, f"`{key} = ...` has something after its value; one value per line "
                           "(a comment starts with #)")
    if m is None and stripped and not stripped.startswith(("#", "[")):
        return TomlProblem(line, col, "this line is neither `key = value`, a [table] header nor a # comment")
    return TomlProblem(line, col, "a character here is not valid TOML")


def _defining_line(lines: list[str], line: int, key: str) -> int:
    """The last line at or before ``line`` that sets ``key`` (``key = ...``) or opens a table ending in it."""
    pattern = re.compile(rf"^\s*(?:{re.escape(key)}\s*=|\[+[^\]]*\b{re.escape(key)}\s*\]+)")
    for n in range(min(line, len(lines)), 0, -1):
        if pattern.match(lines[n - 1]):
            return n
    return min(max(line, 1), max(len(lines), 1))


def _open_before(lines: list[str], line: int) -> int | None:
    """The 1-based line where a ``[`` or ``{`` value opened before line ``line`` is still open there (quotes
    and comments skipped), or None."""
    depth, opened, quote = 0, 0, ""
    for n, src in enumerate(lines[: line - 1], start=1):
        if depth == 0 and src.lstrip().startswith("["):
            continue  # a table header
        for ch in src:
            if quote:
                quote = "" if ch == quote else quote
            elif ch in "\"'":
                quote = ch
            elif ch == "#":
                break
            elif ch in "[{":
                depth, opened = depth + 1, opened if depth else n
            elif ch in "]}":
                depth = max(depth - 1, 0)
        quote = ""
    return opened if depth else None


def _at_end(lines: list[str]) -> TomlProblem:
    """The file ended inside a value: find the last line that opens ``[``, ``{`` or a quote without closing."""
    for n in range(len(lines), 0, -1):
        src = lines[n - 1].split("#", 1)[0]
        for open_, close, what in (("[", "]", "`]`"), ("{", "}", "`}`"), ('"""', '"""', '`"""`')):
            if src.count(open_) > src.count(close) or (open_ == close and src.count(open_) % 2):
                return TomlProblem(n, None, f"a value that starts on this line is never closed: add the {what}")
    return TomlProblem(max(len(lines), 1), None, "the file ends in the middle of a value (a closing bracket, "
                       "brace or quote is missing)")
