"""Edit a JSON (or JSONC) object's text in place, so that only the members that differ change.

``patch_text(text, old, new)`` takes a file's text, the object it parses to (``old``) and the object wanted
(``new``), and returns the text with only the differences written: a changed value is replaced where it stands,
a removed member is cut out with its comma, an added member goes after the last member of its object. Nothing
else moves: indentation (spaces or tabs, of any width), one-line arrays and objects, key order, spacing around
``:`` and ``,``, CRLF line ends, the final newline (or its absence), ``\\u`` escapes, and (in JSONC) comments.

A new member is written in the style of its siblings: on its own line at their indentation in a multi-line
object, after a ``,`` on the same line in a one-line object; a new nested value uses the file's indentation
unit (detected from the file; two spaces when the file has none). An existing key keeps its position even when
``new`` lists it elsewhere.

Also here, for both formats: ``strip_jsonc`` (comments and trailing commas blanked, positions kept) and the
span parser (``_SpanParser``, ``_Node``) the editor reads the text's structure with.

The caller checks the result (parse it again and compare with ``new``): ``patch_text`` raises ``ValueError``
only on text that is not the JSON object ``old`` says, and otherwise returns its best edit.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

__all__ = ["patch_text", "same_json", "strip_jsonc"]

_SURROGATE_RE = re.compile("[\ud800-\udfff]")


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


def same_json(a: Any, b: Any) -> bool:
    """Whether two JSON values are equal as JSON: ``1``, ``1.0`` and ``true`` differ; key order does not count."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


@dataclass(frozen=True)
class _Style:
    """How the file writes its text: line end, one indentation level, key-value and one-line member separators."""

    nl: str
    unit: str
    colon: str
    comma: str


@dataclass(frozen=True)
class _Member:
    key: str
    key_start: int
    key_end: int
    value: _Node


def _members(parser: _SpanParser, node: _Node) -> list[_Member]:
    """``node``'s members in file order, with the end of each key (for the ``:`` spacing)."""
    out = [_Member(k, ks, parser.string_end(ks), v) for k, (ks, v) in node.members.items()]
    return sorted(out, key=lambda m: m.key_start)


def _line_indent(text: str, pos: int) -> str:
    """The whitespace that starts the line holding ``pos``."""
    start = text.rfind("\n", 0, pos) + 1
    m = re.match(r"[ \t]*", text[start:])
    return m.group(0) if m else ""


def _first_multi(parser: _SpanParser, node: _Node) -> list[_Member] | None:
    """The members of the first one-line object (depth first) with two or more members, or None."""
    if node.kind != "object":
        return None
    mems = _members(parser, node)
    if len(mems) >= 2 and "\n" not in parser.t[node.start:node.end]:
        return mems
    for m in mems:
        found = _first_multi(parser, m.value)
        if found:
            return found
    return None


def _detect(text: str, parser: _SpanParser, root: _Node) -> _Style:
    """The file's ``_Style``, read from its first members; defaults: ``\\n``, two spaces, ``": "``, ``", "``."""
    nl = "\r\n" if "\r\n" in text else "\n"
    mems = _members(parser, root)
    unit, colon = "", ": "
    if mems:
        first = mems[0]
        before = text[text.rfind("\n", 0, first.key_start) + 1:first.key_start]
        if "\n" in text[:first.key_start] and not before.strip():
            unit = before
        sep = parser.t[first.key_end:first.value.start]
        colon = sep if "\n" not in sep and sep.strip() == ":" else ": "
    if not unit:
        m = re.search(r"\n([ \t]+)\S", text)
        unit = m.group(1) if m else "  "
    pair = _first_multi(parser, root)
    if pair:
        comma = parser.t[pair[0].value.end:pair[1].key_start]
        comma = comma if comma.strip() == "," else ", "
    else:
        comma = "," if "\n" not in text.strip() and colon == ":" else ", "
    return _Style(nl=nl, unit=unit, colon=colon, comma=comma)


class _Patcher:
    """Collects (start, end, replacement) edits on the original text; they never overlap."""

    def __init__(self, text: str) -> None:
        self.text = text
        stripped = strip_jsonc(text)
        self.parser = _SpanParser(stripped)
        if stripped.startswith("\ufeff"):
            self.parser.i = 1
        self.root = self.parser.value()
        if self.root.kind != "object":
            raise ValueError("the top level is not an object")
        self.style = _detect(text, self.parser, self.root)
        self.ops: list[tuple[int, int, str]] = []

    def result(self) -> str:
        out = self.text
        for start, end, new in sorted(self.ops, key=lambda op: (op[0], op[1]), reverse=True):
            out = out[:start] + new + out[end:]
        return out

    # -- rendering ----------------------------------------------------------------------------------------

    def dump(self, value: Any, *, inline: bool, base: str) -> str:
        """``value`` as JSON text: on one line, or indented by the file's unit from ``base``."""
        s = self.style
        if inline:
            out = json.dumps(value, ensure_ascii=False, separators=(s.comma, s.colon))
        else:
            out = json.dumps(value, ensure_ascii=False, indent=s.unit, separators=(",", s.colon))
            out = out.replace("\n", s.nl + base)
        return _SURROGATE_RE.sub(lambda m: f"\\u{ord(m.group()):04x}", out)

    def member(self, key: str, value: Any, *, inline: bool, base: str) -> str:
        key_text = _SURROGATE_RE.sub(lambda m: f"\\u{ord(m.group()):04x}", json.dumps(key, ensure_ascii=False))
        return key_text + self.style.colon + self.dump(value, inline=inline, base=base)

    # -- diffing ------------------------------------------------------------------------------------------

    def obj(self, node: _Node, old: dict[str, Any], new: dict[str, Any], *, parent_multiline: bool) -> None:
        """Edit object ``node`` (parsed as ``old``) into ``new``."""
        multiline = "\n" in self.text[node.start:node.end]
        mems = _members(self.parser, node)
        for m in mems:
            if m.key in new and m.key in old and not same_json(old[m.key], new[m.key]):
                self.value(m, old[m.key], new[m.key], multiline=multiline)
        removed = {m.key for m in mems if m.key not in new}
        added = {k: v for k, v in new.items() if k not in old}
        if not removed and not added:
            return
        kept = [m for m in mems if m.key not in removed]
        if kept:
            self.keep_some(mems, kept, added, multiline=multiline)
        elif mems:
            self.replace_all(node, mems, added, multiline=multiline)
        else:
            self.fill_empty(node, added, multiline=parent_multiline)

    def value(self, m: _Member, old: Any, new: Any, *, multiline: bool) -> None:
        """Replace member ``m``'s value (``old``) by ``new``: objects recursively, anything else whole."""
        node = m.value
        if isinstance(old, dict) and isinstance(new, dict) and node.kind == "object":
            self.obj(node, old, new, parent_multiline=multiline)
            return
        inline = "\n" not in self.text[node.start:node.end] if node.kind != "scalar" else not multiline
        self.ops.append((node.start, node.end, self.dump(new, inline=inline, base=_line_indent(self.text, m.key_start))))

    def keep_some(self, mems: list[_Member], kept: list[_Member], added: dict[str, Any], *, multiline: bool) -> None:
        """Cut removed members (with their comma) and append ``added`` after the last kept one."""
        anchor = kept[-1]
        at = mems.index(anchor)
        for i, m in enumerate(mems[:at]):
            if m not in kept:
                self.ops.append((m.key_start, mems[i + 1].key_start, ""))
        indent = _line_indent(self.text, anchor.key_start)
        sep = ("," + self.style.nl + indent) if multiline else self.style.comma
        insert = "".join(sep + self.member(k, v, inline=not multiline, base=indent) for k, v in added.items())
        if at < len(mems) - 1:  # a removed run at the end: cut from the anchor's value to the last value
            self.ops.append((anchor.value.end, mems[-1].value.end, insert))
        elif insert:
            self.append(anchor, insert, multiline=multiline)

    def append(self, anchor: _Member, insert: str, *, multiline: bool) -> None:
        """Add ``insert`` (members, each led by a comma) after the object's last member ``anchor``; in a
        multi-line JSONC object after its trailing comma and line comment, keeping the trailing comma last."""
        text, end = self.text, anchor.value.end
        if not multiline:
            self.ops.append((end, end, insert))
            return
        i = end
        while i < len(text) and text[i] in " \t":
            i += 1
        had_comma = text.startswith(",", i)
        j = i + 1 if had_comma else i
        while j < len(text) and text[j] in " \t":
            j += 1
        close = text.find("*/", j) + 2 if text.startswith("/*", j) else -1
        comment = text.startswith("//", j) or (close > 1 and "\n" not in text[j:close])  # to the line's end
        if not had_comma and not comment:
            self.ops.append((end, end, insert))
            return
        stop = text.find("\n", j) if comment else j
        stop = len(text) if stop < 0 else stop
        if stop > 0 and text[stop - 1] == "\r":
            stop -= 1
        body = insert[1:]  # the members without the leading comma, each starting on a new line
        if had_comma:
            self.ops.append((stop, stop, body + ","))
        else:
            self.ops.append((end, end, ","))
            self.ops.append((stop, stop, body))

    def replace_all(self, node: _Node, mems: list[_Member], added: dict[str, Any], *, multiline: bool) -> None:
        """Every member removed: write ``added`` where the first one stood (or leave ``{}``)."""
        if not added:
            self.ops.append((node.start + 1, node.end - 1, ""))
            return
        indent = _line_indent(self.text, mems[0].key_start)
        sep = ("," + self.style.nl + indent) if multiline else self.style.comma
        body = sep.join(self.member(k, v, inline=not multiline, base=indent) for k, v in added.items())
        self.ops.append((mems[0].key_start, mems[-1].value.end, body))

    def fill_empty(self, node: _Node, added: dict[str, Any], *, multiline: bool) -> None:
        """Members into an empty object: one per line in a multi-line context, else on the object's line."""
        inner = self.text[node.start + 1:node.end - 1]
        if not multiline:
            body = self.style.comma.join(self.member(k, v, inline=True, base="") for k, v in added.items())
            self.ops.append((node.start + 1, node.end - 1, inner.rstrip() + " " + body if inner.strip() else body))
            return
        nl, outer = self.style.nl, _line_indent(self.text, node.start)
        indent = outer + self.style.unit
        body = ("," + nl + indent).join(self.member(k, v, inline=False, base=indent) for k, v in added.items())
        self.ops.append((node.start + 1, node.end - 1, inner.rstrip() + nl + indent + body + nl + outer))


def patch_text(text: str, old: dict[str, Any], new: dict[str, Any]) -> str:
    """``text`` (a JSON or JSONC object that parses to ``old``) edited to hold ``new``; see the module docstring.

    Raises:
        ValueError: ``text`` is not an object's text (the caller then writes the whole document instead).
    """
    try:
        p = _Patcher(text)
    except (IndexError, AssertionError, json.JSONDecodeError) as exc:
        raise ValueError(f"cannot read the text's structure: {exc}") from None
    p.obj(p.root, old, new, parent_multiline=True)
    return p.result()
