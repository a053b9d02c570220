"""Helpers adapters use to build ``TextTarget``s for other programs' JSON files.

Merge, never replace (docs/design.md "Writing other programs' files"): ``json_target`` parses the current file,
hands a deep copy to the adapter's ``transform`` (which sets only the keys the adapter owns), and edits the
text in place (``edit_json_text``): only the members that changed are rewritten, so every other byte (the
file's indentation, one-line arrays and objects, key order, CRLF, final newline) stays as it was. When the
transform changes nothing, the original text comes back byte for byte, so formatting alone never causes a
write.

Parsing is strict JSON (RFC 8259): Claude Code ignores the whole settings file on a comment or a trailing
comma (docs/formats/claude-code.md "Format rules"), so conduit refuses such a file instead of "fixing" it.
"""

from __future__ import annotations

import copy
import json
import math
import re
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

from conduit.adapters.base import TextTarget
from conduit.adapters.formats.jsonc import strip_jsonc
from conduit.adapters.formats.jsonedit import patch_text, same_json
from conduit.adapters.formats.masking import masker
from conduit.errors import ToolFileError

_PARSE_HINT = "the tool itself would ignore this whole file; fix it by hand, conduit left it unchanged"


def _describe(text: str, err: json.JSONDecodeError) -> str:
    """Name the likely cause of a JSON error at ``err.pos`` (comment, trailing comma) in words."""
    rest = text[err.pos :]
    if rest.startswith("//") or rest.startswith("/*") or rest.startswith("#"):
        return "a comment (JSON allows none)"
    before = text[: err.pos].rstrip()
    if before.endswith(",") and rest[:1] in ("}", "]"):
        return "a trailing comma (JSON allows none)"
    if text.startswith("\ufeff"):
        return "a byte-order mark at the start of the file"
    return err.msg


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _finite_float(text: str) -> float:
    # 1e999 parses to inf, which json.dumps would write back as the non-JSON `Infinity`.
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:20]} is out of range")
    return value


def parse_json_object(text: str | None, *, path: Path) -> dict[str, Any]:
    """Parse a tool's JSON file whose top level must be an object.

    Args:
        text: the file's text, or None when the file is missing. None, empty or whitespace-only -> ``{}``.
        path: the file, for messages only.

    Returns:
        The object, keys in file order.

    Raises:
        ToolFileError: not strict JSON (comment, trailing comma, NaN...) -- the message names the file, the
            line and the column; or the top level is not an object.
    """
    if text is None or not text.strip():
        return {}
    try:
        doc = json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float)
    except RecursionError:
        raise ToolFileError(f"{path}: nested too deeply to be a settings file",
                            hint="fix it by hand; conduit left it unchanged") from None
    except json.JSONDecodeError as err:
        raise ToolFileError(
            f"{path}: not valid JSON at line {err.lineno}, column {err.colno}: {_describe(text, err)}",
            hint=_PARSE_HINT,
        ) from None
    except ValueError as err:  # NaN / Infinity / 1e999, refused by _reject_constant and _finite_float
        raise ToolFileError(f"{path}: not valid JSON: {err}", hint=_PARSE_HINT) from None
    if not isinstance(doc, dict):
        kind = {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(
            type(doc), "a number"
        )
        raise ToolFileError(
            f"{path}: the top level is {kind}, expected a JSON object ({{...}})",
            hint="fix it by hand; conduit left it unchanged",
        )
    return doc


_SURROGATE_RE = re.compile("[\ud800-\udfff]")
_INDENT_RE = re.compile(r"\n([ \t]+)\S")


def _indent_of(like: str | None) -> int | str | None:
    """The indentation of ``like``: spaces count, ``"\\t"``, or None for one-line (minified) JSON."""
    if like is None or not like.strip():
        return 2
    match = _INDENT_RE.search(like)
    if match:
        ws = match.group(1)
        return "\t" if ws.startswith("\t") else len(ws)
    stripped = like.strip()
    # one line holding at least one member: minified; "{}" or anything else: the default.
    return None if "\n" not in stripped and ":" in stripped else 2


def dump_json(doc: dict[str, Any], *, like: str | None) -> str:
    """Serialize ``doc`` in the style of the original text ``like``.

    Keeps: the indentation (2 or 4 spaces, a tab, or one line, detected from ``like``; default 2 spaces),
    key order (as in ``doc``), non-ASCII characters as written (``ensure_ascii=False``), CRLF line ends, and a
    trailing newline when ``like`` had one (default: yes).
    """
    indent = _indent_of(like)
    if indent is None:
        compact = like is not None and '": ' not in like and '":' in like
        out = json.dumps(doc, ensure_ascii=False, separators=(",", ":") if compact else (", ", ": "))
    else:
        out = json.dumps(doc, ensure_ascii=False, indent=indent)
    # A lone surrogate (legal in JSON as "\\ud800", not encodable as UTF-8) goes back out as an escape.
    out = _SURROGATE_RE.sub(lambda m: f"\\u{ord(m.group()):04x}", out)
    trailing = like is None or not like.strip() or like.endswith("\n")
    if trailing:
        out += "\n"
    if like is not None and "\r\n" in like:
        out = out.replace("\n", "\r\n")
    return out


def edit_json_text(text: str | None, old: dict[str, Any], new: dict[str, Any], *, path: Path) -> str:
    """``text`` (strict JSON that parses to ``old``) changed to hold ``new``, touching only what differs.

    The edit is made in place (``conduit.adapters.formats.jsonedit``): every byte outside the changed members
    stays (indentation, one-line arrays and objects, key order, CRLF, the final newline); a new member is
    written like its siblings. A missing or blank file, or an edit that would not read back as ``new`` (which
    should not happen), gets the whole document in the file's style (``dump_json``) instead.
    """
    if text is None or not text.strip():
        return dump_json(new, like=text)
    try:
        out = patch_text(text, old, new)
        if same_json(parse_json_object(out, path=path), new):
            return out
    except (ValueError, ToolFileError):
        pass
    return dump_json(new, like=text)


def _canonical(doc: Any) -> str:
    """A comparison key that tells ``1`` from ``true`` from ``1.0`` and sees key order."""
    return json.dumps(doc, ensure_ascii=False)


def _lenient(text: str) -> Any:
    """Parse for masking only: comments and trailing commas allowed (a diff may show a file being refused)."""
    return json.loads(strip_jsonc(text))


def mask_json_keys(text: str, secret_keys: Collection[str]) -> str:
    """Replace the string value of every key named in ``secret_keys`` (at any depth) by its fingerprint.

    The values are found by parsing the text (JSON, or JSONC) and masked with ``conduit.redact.redact``
    (``conduit.adapters.formats.masking``), so the layout, and therefore a diff's line numbers, is kept; text that
    does not parse at all is searched for ``"key": "value"`` pairs instead.
    """
    return masker(_lenient, secret_keys)(text)


def json_target(
    path: Path,
    transform: Callable[[dict[str, Any]], dict[str, Any]],
    *,
    secret_keys: Collection[str],
    mode: int = 0o600,
    create: bool = True,
    label: str = "",
) -> TextTarget:
    """A ``TextTarget`` for a JSON-object file that changes only what ``transform`` changes.

    Args:
        path: the file as the tool finds it (a symlink is written through by the writer).
        transform: current object (a deep copy; may be mutated) -> wanted object. Set only owned keys;
            assigning an existing key keeps its position, new keys go last.
        secret_keys: key names whose string values are masked (fingerprinted) in diffs, at any depth.
        mode: file mode for a new file, and the loosest mode an existing file may keep.
        create: whether to create the file (and its directory) when missing.
        label: short name for reports (default: the file name).

    The render raises ``ToolFileError`` (via ``parse_json_object``) when the current file is not strict JSON.
    """
    keys = tuple(secret_keys)

    def render(text: str | None) -> str:
        doc = parse_json_object(text, path=path)
        new = transform(copy.deepcopy(doc))
        if not isinstance(new, dict):
            raise TypeError(f"transform for {path} returned {type(new).__name__}, expected dict")
        if text is not None and _canonical(new) == _canonical(doc):
            return text
        return edit_json_text(text, doc, new, path=path)

    return TextTarget(
        path=path,
        render=render,
        mask=masker(_lenient, keys),
        mode=mode,
        create=create,
        label=label or path.name,
    )


def read_json_quietly(path: Path) -> tuple[dict[str, Any], str | None]:
    """Read a JSON object for reporting (doctor, init): never raises.

    Returns:
        (the object, None); ({}, None) when the file is missing; ({}, message) when it cannot be read or parsed.
    """
    text, problem = read_text_quietly(path)
    if text is None:
        return {}, problem
    try:
        return parse_json_object(text, path=path), None
    except ToolFileError as exc:
        return {}, exc.message


def read_text_quietly(path: Path) -> tuple[str | None, str | None]:
    """A tool file's text for reporting: ``(text, None)``; ``(None, None)`` when it is missing; ``(None, message)``
    when it cannot be read (a directory, no permission, not UTF-8). Never raises."""
    try:
        return path.read_text(encoding="utf-8"), None
    except FileNotFoundError:
        return None, None
    except (OSError, UnicodeDecodeError) as exc:
        return None, f"cannot read {path}: {exc}"


def as_object(value: Any, *, where: str = "") -> dict[str, Any]:
    """``value`` when it is a JSON object; a new empty one when it is absent (None).

    Raises:
        ToolFileError: the value exists but is not an object: merge, never clobber, so conduit refuses to
            replace what it does not understand. ``where`` names the file and key for the message.
    """
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ToolFileError(f"{where or 'a value'} is a {type(value).__name__}, not an object",
                            hint="fix it by hand (or remove it); conduit left the file unchanged")
    return value
