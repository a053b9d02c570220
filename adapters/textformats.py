"""Targets for the tool files that are not strict JSON: TOML, YAML, dotenv and JSONC.

Each helper returns a ``TextTarget`` whose ``render`` changes only what the adapter owns and gives back the
original text byte for byte when nothing owned changed, so a second sync writes nothing (DESIGN.md "Writing
other programs' files"). Comments, key order and layout of everything else survive:

- TOML (Codex ``config.toml``): tomlkit, which round-trips comments and whitespace.
- YAML (Continue ``config.yaml``, Aider ``.aider.conf.yml``): ruamel.yaml in round-trip mode, with the file's
  own sequence indentation detected so a dump does not re-indent untouched lists.
- dotenv (Gemini CLI ``.env``, Codex ``.env``): line editing; other lines, comments, ``export`` prefixes,
  quoting style and order are kept; a new variable is appended.
- JSONC (OpenCode ``opencode.jsonc``, Gemini CLI ``settings.json``): surgical text edits in the manner of
  Microsoft's ``jsonc-parser`` ``modify``: the value at a key path is replaced in place, a missing member is
  inserted before its object's closing brace, and nothing else in the text moves; the result is parsed again
  and compared with the intended document, and a file that cannot be edited safely is refused with a message.

Parse errors become ``ToolFileError`` naming the file, line and column; the writer then leaves the file alone.
"""

from __future__ import annotations

import copy
import io
import json
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomlkit
import tomlkit.exceptions
from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from conduit.adapters.base import TextTarget
from conduit.errors import ToolFileError
from conduit.redact import fingerprint

_FIX_HINT = "fix the file by hand (or move it away); conduit left it unchanged"


# ---------------------------------------------------------------------------------------------- masking


def mask_assignments(text: str, secret_names: Collection[str]) -> str:
    """Replace the value assigned to each name in ``secret_names`` by its fingerprint, in any of the formats
    here (``NAME=v``, ``NAME = "v"``, ``name: v``, ``"name": "v"``); the layout is kept for diffs."""
    if not secret_names:
        return text
    names = "|".join(re.escape(n) for n in secret_names)
    head = r"""(?P<head>(?:^|[\s{,"'])(?:export\s+)?(?:""" + names + r""")["']?\s*[:=]\s*)"""
    pattern = re.compile(head + r"""(?P<q>["']?)(?P<v>[^"'\s#,{}][^"'\s#,}]*)(?P=q)""", re.MULTILINE)
    return pattern.sub(lambda m: f"{m.group('head')}{m.group('q')}{fingerprint(m.group('v'))}{m.group('q')}",
                       text)


def _target(path: Path, render: Callable[[str | None], str], secret_names: Collection[str], mode: int,
            create: bool, label: str) -> TextTarget:
    names = tuple(secret_names)
    return TextTarget(path=path, render=render, mask=lambda text: mask_assignments(text, names), mode=mode,
                      create=create, label=label or path.name)


# ------------------------------------------------------------------------------------------------- TOML


def parse_toml(text: str | None, *, path: Path) -> tomlkit.TOMLDocument:
    """Parse TOML keeping comments and layout. None or blank -> an empty document.

    Raises:
        ToolFileError: not valid TOML (message names the file, line and column).
    """
    if text is None or not text.strip():
        return tomlkit.document()
    try:
        return tomlkit.parse(text)
    except tomlkit.exceptions.ParseError as exc:
        reason = re.sub(r"\s+at line \d+ col \d+$", "", str(exc))
        raise ToolFileError(f"{path}:{exc.line}:{exc.col}: not valid TOML: {reason}", _FIX_HINT) from None


def toml_target(path: Path, transform: Callable[[tomlkit.TOMLDocument], None], *, secret_keys: Collection[str],
                mode: int = 0o600, create: bool = True, label: str = "") -> TextTarget:
    """A target for a TOML file: ``transform`` mutates the parsed tomlkit document (set owned keys only).

    The original text is returned unchanged when the document's data did not change.
    """

    def render(text: str | None) -> str:
        doc = parse_toml(text, path=path)
        before = copy.deepcopy(doc.unwrap())
        transform(doc)
        if text is not None and doc.unwrap() == before:
            return text
        out = tomlkit.dumps(doc)
        return out if out.endswith("\n") else out + "\n"

    return _target(path, render, secret_keys, mode, create, label)


# ------------------------------------------------------------------------------------------------- YAML


def _yaml_for(text: str | None) -> YAML:
    yaml = YAML(typ="rt")
    yaml.preserve_quotes = True
    yaml.width = 4096
    offset = 0
    if text:
        # The indentation of the first block sequence under a key: "key:\n  - a" has offset 2.
        m = re.search(r"^(?P<p>[ ]*)[^\s#-][^\n]*:[ \t]*\n(?:[ \t]*(?:#[^\n]*)?\n)*(?P<c>[ ]*)- ", text, re.MULTILINE)
        if m and len(m.group("c")) > len(m.group("p")):
            offset = len(m.group("c")) - len(m.group("p"))
    yaml.indent(mapping=2, sequence=offset + 2, offset=offset)
    return yaml


def _plain(node: Any) -> Any:
    """ruamel's round-trip containers as plain dicts/lists, for comparisons."""
    if isinstance(node, Mapping):
        return {str(k): _plain(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_plain(v) for v in node]
    return node


def parse_yaml(text: str | None, *, path: Path) -> Any:
    """Parse a YAML mapping in round-trip mode. None or blank -> an empty ``CommentedMap``.

    Raises:
        ToolFileError: not valid YAML, or the top level is not a mapping.
    """
    from ruamel.yaml.comments import CommentedMap

    if text is None or not text.strip():
        return CommentedMap()
    try:
        doc = _yaml_for(text).load(text)
    except YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ToolFileError(f"{where}: not valid YAML: {problem}", _FIX_HINT) from None
    if doc is None:
        return CommentedMap()
    if not isinstance(doc, Mapping):
        raise ToolFileError(f"{path}: the top level is not a mapping (key: value)", _FIX_HINT)
    return doc


def dump_yaml(doc: Any, *, like: str | None) -> str:
    """Dump a round-trip document in the indentation style of the original text ``like``."""
    buf = io.StringIO()
    _yaml_for(like).dump(doc, buf)
    return buf.getvalue()


def yaml_target(path: Path, transform: Callable[[Any], None], *, secret_keys: Collection[str],
                mode: int = 0o600, create: bool = True, label: str = "") -> TextTarget:
    """A target for a YAML mapping file: ``transform`` mutates the round-trip document (owned keys only)."""

    def render(text: str | None) -> str:
        doc = parse_yaml(text, path=path)
        before = copy.deepcopy(_plain(doc))
        transform(doc)
        if text is not None and _plain(doc) == before:
            return text
        return dump_yaml(doc, like=text)

    return _target(path, render, secret_keys, mode, create, label)


# ----------------------------------------------------------------------------------------------- dotenv

_DOTENV_LINE = re.compile(
    r"^(?P<lead>\s*(?:export\s+)?)(?P<name>[A-Za-z_][A-Za-z0-9_.]*)(?P<eq>\s*=\s*)(?P<rest>.*?)(?P<nl>\r?\n)?$")


def _dotenv_value(rest: str) -> tuple[str, str]:
    """(value, quote) of the text after ``=``: quotes removed, an unquoted trailing `` # comment`` dropped."""
    rest = rest.strip()
    if len(rest) >= 2 and rest[0] in "\"'`":
        q = rest[0]
        end = rest.find(q, 1)
        if end > 0:
            value = rest[1:end]
            if q == '"':
                value = value.replace("\\n", "\n").replace('\\"', '"')
            return value, q
    return re.split(r"\s+#", rest, maxsplit=1)[0].strip(), ""


def read_dotenv(text: str | None) -> dict[str, str]:
    """The variables a dotenv file defines (later lines win, as in dotenv, dotenvy and python-dotenv)."""
    out: dict[str, str] = {}
    for line in (text or "").splitlines():
        m = _DOTENV_LINE.match(line)
        if m and not line.lstrip().startswith("#"):
            out[m.group("name")] = _dotenv_value(m.group("rest"))[0]
    return out


def _dotenv_render(value: str, quote: str) -> str:
    if quote == "'" and "'" not in value:
        return f"'{value}'"
    if quote or re.search(r"[\s#\"'`\\$=]", value) or not value:
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return value


def set_dotenv(text: str | None, wanted: Mapping[str, str | None]) -> str:
    """Set (or, for ``None``, remove) variables in dotenv text, keeping every other line as it is.

    A variable already present keeps its line, ``export`` prefix and quoting style, and a line whose value is
    already right is not touched at all; a new variable is appended at the end.
    """
    lines = (text or "").splitlines(keepends=True)
    seen: set[str] = set()
    out: list[str] = []
    for line in lines:
        m = _DOTENV_LINE.match(line)
        if not m or line.lstrip().startswith("#") or m.group("name") not in wanted:
            out.append(line)
            continue
        name = m.group("name")
        seen.add(name)
        value = wanted[name]
        if value is None:
            continue
        current, quote = _dotenv_value(m.group("rest"))
        if current == value:
            out.append(line)
        else:
            rest = m.group("rest")
            found = None if quote else re.search(r"\s+#.*$", rest)
            comment = found.group(0) if found else ""
            out.append(f"{m.group('lead')}{name}{m.group('eq')}{_dotenv_render(value, quote)}{comment}"
                       f"{m.group('nl') or ''}")
    missing = [(n, v) for n, v in wanted.items() if v is not None and n not in seen]
    if missing:
        if out and not out[-1].endswith("\n"):
            out[-1] += "\n"
        out += [f"{n}={_dotenv_render(v, '')}\n" for n, v in missing if v is not None]
    return "".join(out)


def dotenv_target(path: Path, wanted: Mapping[str, str | None], *, secret_keys: Collection[str],
                  mode: int = 0o600, create: bool = True, label: str = "") -> TextTarget:
    """A target for a dotenv file setting the variables in ``wanted`` (``None`` removes one)."""
    return _target(path, lambda text: set_dotenv(text, wanted), secret_keys, mode, create, label)


# ------------------------------------------------------------------------------------------------ JSONC


def strip_jsonc(text: str) -> str:
    """``text`` with comments and trailing commas blanked out (same length, same line breaks), so that
    positions in the result are positions in the original."""
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
        if c in "}]" and last_sig >= 0 and out[last_sig] == ",":
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
                 label: str = "") -> TextTarget:
    """A target for a JSONC file: ``edits`` maps the current document to the (key path, value) pairs wanted."""

    def render(text: str | None) -> str:
        return edit_jsonc(text, edits(parse_jsonc(text, path=path)), path=path)

    return _target(path, render, secret_keys, mode, create, label)


def plain_target(path: Path, content: str, *, mode: int = 0o600, label: str = "") -> TextTarget:
    """A file conduit owns whole (a key file): its content is exactly ``content``; fully masked in diffs."""
    return TextTarget(path=path, render=lambda _text: content, mask=lambda text: fingerprint(text.strip()),
                      mode=mode, create=True, label=label or path.name)


__all__ = [
    "Edit", "dotenv_target", "dump_yaml", "edit_jsonc", "jsonc_target", "mask_assignments", "parse_jsonc",
    "parse_toml", "parse_yaml", "plain_target", "read_dotenv", "set_dotenv", "strip_jsonc", "tool_version", "toml_target",
    "yaml_target",
]


def tool_version(exe: str, *args: str, timeout_s: float = 5) -> str | None:
    """First line of ``<exe> --version`` (or ``args``) when the tool is on PATH, else None. Never raises."""
    import shutil
    import subprocess

    found = shutil.which(exe)
    if not found:
        return None
    try:
        out = subprocess.run([found, *(args or ("--version",))], capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = (out.stdout or out.stderr).strip().splitlines()
    return lines[0].strip() if lines else None
