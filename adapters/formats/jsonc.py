"""JSONC (JSON with ``//`` and ``/* */`` comments and trailing commas): parse, and edit without moving comments.

Used for OpenCode's ``opencode.jsonc`` and Gemini CLI's ``settings.json``. Edits are surgical, in the manner of
Microsoft's ``jsonc-parser`` ``modify``: the value at a key path is replaced in place, a missing member is
inserted before its object's closing brace, and nothing else in the text moves; the result is parsed again
and compared with the intended document, and a file that cannot be edited safely is refused with a message.

Errors: ``ToolFileError`` naming the file, line and column (not JSONC), or saying to edit by hand (an edit
that would not read back as intended); the writer then leaves the file alone.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conduit.adapters.base import TextTarget
from conduit.adapters.formats.masking import masker
from conduit.errors import ToolFileError

__all__ = ["Edit", "edit_jsonc", "jsonc_target", "parse_jsonc", "strip_jsonc"]

_FIX_HINT = "fix the file by hand (or move it away); conduit left it unchanged"


def strip_jsonc(text: str, *, commas: bool = True) -> str:
    """``text`` with comments and (with ``commas``) trailing commas blanked out (same length, same line breaks),
    so that positions in the result are positions in the original."""
    out = list(text)
    i, n = 0, len(text)
    last_sig = -1  # index of the last significant character (for trailing commas)
    while i < n:
        c = text[i]
        if c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            last_sig = min(j, n - 1)
            i = j + 1
            continue
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            for k in range(i, j):
                out[k] = " "
            i = j
            continue
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            for k in range(i, j):
                if out[k] != "\n":
                    out[k] = " "
            i = j
            continue
        if commas and c in "}]" and last_sig >= 0 and out[last_sig] == ",":
            out[last_sig] = " "
        if not c.isspace():
            last_sig = i
        i += 1
    return "".join(out)


@dataclass
class _Node:
    """A JSON value's span in the text; objects know their members' key start and value node."""

    start: int
    end: int
    kind: str  # object, array, scalar
    members: dict[str, tuple[int, _Node]] = field(default_factory=dict)


class _SpanParser:
    """A recursive-descent JSON parser over comment-stripped text that records spans (values are parsed by
    ``json`` separately; this one only needs structure)."""

    def __init__(self, text: str) -> None:
        self.t, self.i = text, 0

    def ws(self) -> None:
        while self.i < len(self.t) and self.t[self.i].isspace():
            self.i += 1

    def value(self) -> _Node:
        self.ws()
        start, c = self.i, self.t[self.i]
        if c == "{":
            node = _Node(start, start, "object")
            self.i += 1
            self.ws()
            while self.t[self.i] != "}":
                self.ws()
                key_start = self.i
                key = json.loads(self.t[key_start:self.string_end(key_start)])
                self.i = self.string_end(key_start)
                self.ws()
                self.i += 1  # ':'
                node.members[key] = (key_start, self.value())
                self.ws()
                if self.t[self.i] == ",":
                    self.i += 1
                    self.ws()
            self.i += 1
            node.end = self.i
            return node
        if c == "[":
            self.i += 1
            self.ws()
            while self.t[self.i] != "]":
                self.value()
                self.ws()
                if self.t[self.i] == ",":
                    self.i += 1
                    self.ws()
            self.i += 1
            return _Node(start, self.i, "array")
        if c == '"':
            self.i = self.string_end(start)
            return _Node(start, self.i, "scalar")
        m = re.compile(r"-?[0-9.eE+-]+|true|false|null").match(self.t, self.i)
        assert m is not None
        self.i = m.end()
        return _Node(start, self.i, "scalar")

    def string_end(self, i: int) -> int:
        j = i + 1
        while self.t[j] != '"':
            j += 2 if self.t[j] == "\\" else 1
        return j + 1


def trailing_comma_line(text: str) -> int | None:
    """The line (1-based) of the first trailing comma outside comments and strings, or None."""
    kept, stripped = strip_jsonc(text, commas=False), strip_jsonc(text)
    at = next((k for k, (a, b) in enumerate(zip(kept, stripped, strict=True)) if a == "," and b == " "), None)
    return None if at is None else text.count("\n", 0, at) + 1


def parse_jsonc(text: str | None, *, path: Path) -> dict[str, Any]:
    """Parse a JSONC object (``//`` and ``/* */`` comments, trailing commas). None or blank -> ``{}``.

    Raises:
        ToolFileError: not valid JSONC (file, line, column), or the top level is not an object.
    """
    if text is None or not text.strip():
        return {}
    try:
        doc = json.loads(strip_jsonc(text.lstrip("\ufeff") if text.startswith("\ufeff") else text))
    except json.JSONDecodeError as err:
        raise ToolFileError(f"{path}: not valid JSON (JSONC) at line {err.lineno}, column {err.colno}: "
                            f"{err.msg}", _FIX_HINT) from None
    if not isinstance(doc, dict):
        raise ToolFileError(f"{path}: the top level is not a JSON object ({{...}})", _FIX_HINT)
    return doc


def _indent_unit(text: str) -> str:
    m = re.search(r"\n([ \t]+)\S", text)
    return m.group(1) if m else "  "


def _line_indent(text: str, pos: int) -> str:
    start = text.rfind("\n", 0, pos) + 1
    m = re.match(r"[ \t]*", text[start:])
    return m.group(0) if m else ""


def _dump_at(value: Any, unit: str, base: str) -> str:
    out = json.dumps(value, ensure_ascii=False, indent=unit if isinstance(value, dict | list) and value else None)
    return out.replace("\n", "\n" + base)


def _set_in_text(text: str, keys: Sequence[str], value: Any) -> str:
    """Return ``text`` with the member at ``keys`` set to ``value`` (surgical; see module docstring)."""
    stripped = strip_jsonc(text)
    node = _SpanParser(stripped).value()
    unit = _indent_unit(text)
    for depth, key in enumerate(keys):
        if node.kind == "object" and key in node.members:
            node = node.members[key][1]
            continue
        rest = keys[depth + 1:]
        for k in reversed(rest):
            value = {k: value}
        if node.kind != "object":  # a non-object in the way: replace it by the nested object
            base = _line_indent(text, node.start)
            return text[:node.start] + _dump_at({key: value}, unit, base) + text[node.end:]
        if node.members:
            last_key_start, last = list(node.members.values())[-1]
            indent = _line_indent(text, last_key_start)
            member = f"{json.dumps(key, ensure_ascii=False)}: {_dump_at(value, unit, indent)}"
            # after the last value: an optional (trailing) comma, then an optional line comment
            i = last.end
            while i < len(text) and text[i] in " \t":
                i += 1
            had_comma = i < len(text) and text[i] == ","
            if had_comma:
                i += 1
            j = i
            while j < len(text) and text[j] in " \t":
                j += 1
            if text.startswith("//", j):
                nl = text.find("\n", j)
                i = len(text) if nl < 0 else nl
            if had_comma:
                return text[:i] + f"\n{indent}{member}," + text[i:]
            insert = f"\n{indent}{member}"
            return text[:last.end] + "," + text[last.end:i] + insert + text[i:]
        parent_indent = _line_indent(text, node.start)
        member = f"{json.dumps(key, ensure_ascii=False)}: {_dump_at(value, unit, parent_indent + unit)}"
        inner = text[node.start + 1:node.end - 1]
        if inner.strip():  # only comments inside: keep them, add the member after them
            return (text[:node.end - 1].rstrip() + f"\n{parent_indent}{unit}{member}\n{parent_indent}"
                    + text[node.end - 1:])
        return text[:node.start + 1] + f"\n{parent_indent}{unit}{member}\n{parent_indent}" + text[node.end - 1:]
    base = _line_indent(text, node.start)
    return text[:node.start] + _dump_at(value, unit, base) + text[node.end:]


def _get(doc: Any, keys: Sequence[str]) -> tuple[bool, Any]:
    for key in keys:
        if not isinstance(doc, dict) or key not in doc:
            return False, None
        doc = doc[key]
    return True, doc


def _set(doc: dict[str, Any], keys: Sequence[str], value: Any) -> None:
    for key in keys[:-1]:
        if not isinstance(doc.get(key), dict):
            doc[key] = {}
        doc = doc[key]
    doc[keys[-1]] = value


Edit = tuple[tuple[str, ...], Any]
"""(key path, wanted value) for a JSONC edit."""


def edit_jsonc(text: str | None, edits: Sequence[Edit], *, path: Path) -> str:
    """Apply ``edits`` to JSONC ``text``, keeping comments and layout; unchanged values are not touched.

    Raises:
        ToolFileError: the text is not JSONC, or the edited text would not read back as intended (then
            nothing is written and the message says to edit the file by hand).
    """
    doc = parse_jsonc(text, path=path)
    wanted = copy.deepcopy(doc)
    todo = []
    for keys, value in edits:
        found, current = _get(wanted, keys)
        if not (found and json.dumps(current) == json.dumps(value)):
            todo.append((keys, value))
        _set(wanted, keys, value)
    if not todo and text is not None:
        return text
    if text is None or not text.strip():
        return json.dumps(wanted, ensure_ascii=False, indent=2) + "\n"
    out = text
    try:
        for keys, value in todo:
            out = _set_in_text(out, keys, value)
        ok = parse_jsonc(out, path=path) == wanted
    except (ToolFileError, IndexError, ValueError, AssertionError):
        ok = False
    if not ok:
        raise ToolFileError(f"{path}: conduit could not edit this JSONC file without disturbing its comments",
                            "set the values shown by `conduit sync --dry-run` by hand; the file is unchanged")
    return out


def jsonc_target(path: Path, edits: Callable[[dict[str, Any]], Sequence[Edit]], *,
                 secret_keys: Collection[str], mode: int = 0o600, create: bool = True,
                 label: str = "", no_trailing_commas: str | None = None) -> TextTarget:
    """A target for a JSONC file: ``edits`` maps the current document to the (key path, value) pairs wanted.
    ``no_trailing_commas``: the name of a tool that reads the file as JSON with comments but refuses trailing
    commas (Gemini CLI: strip-json-comments, then ``JSON.parse``); a file holding one is refused with its line
    rather than synced and called in sync while the tool rejects it."""

    def render(text: str | None) -> str:
        line = trailing_comma_line(text) if no_trailing_commas and text else None
        if line is not None:
            raise ToolFileError(f"{path}:{line}: a trailing comma, which {no_trailing_commas} refuses (it reads "
                                "comments but not trailing commas, and then ignores the whole file)",
                                f"remove the comma at line {line}; conduit left the file unchanged")
        return edit_jsonc(text, edits(parse_jsonc(text, path=path)), path=path)

    return TextTarget(path=path, render=render, mask=masker(lambda text: parse_jsonc(text, path=path), secret_keys),
                      mode=mode, create=create, label=label or path.name)
