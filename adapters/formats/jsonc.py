"""JSONC (JSON with ``//`` and ``/* */`` comments and trailing commas): parse, and edit without moving comments.

Used for OpenCode's ``opencode.jsonc`` and Gemini CLI's ``settings.json``. Edits are surgical, in the manner of
Microsoft's ``jsonc-parser`` ``modify``: the value at a key path is replaced in place, a missing member is
inserted before its object's closing brace, and nothing else in the text moves; the result is parsed again
and compared with the intended document, and a file that cannot be edited safely is refused with a message.

The span parser and the in-place editor live in ``conduit.adapters.formats.jsonedit`` (shared with strict JSON,
``conduit.adapters.formats.jsonfile``); ``strip_jsonc``, ``_SpanParser`` and ``_Node`` are re-exported here.

Errors: ``ToolFileError`` naming the file, line and column (not JSONC), or saying to edit by hand (an edit
that would not read back as intended); the writer then leaves the file alone.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Any

from conduit.adapters.base import TextTarget
from conduit.adapters.formats.jsonedit import _Node as _Node  # re-exported: adapters read spans with these
from conduit.adapters.formats.jsonedit import _SpanParser as _SpanParser
from conduit.adapters.formats.jsonedit import patch_text, same_json, strip_jsonc
from conduit.adapters.formats.masking import masker
from conduit.errors import ToolFileError

__all__ = ["Edit", "edit_jsonc", "jsonc_target", "parse_jsonc", "strip_jsonc"]

_FIX_HINT = "fix the file by hand (or move it away); conduit left it unchanged"


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
    try:  # only the members that differ, each in its siblings' style (conduit.adapters.formats.jsonedit)
        out = patch_text(text, doc, wanted)
        ok = same_json(parse_jsonc(out, path=path), wanted)
    except (ToolFileError, ValueError):
        ok = False
    if not ok:  # the older member-by-member edit
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
