"""Targets for the tool files that are not strict JSON: TOML and YAML here; dotenv and JSONC in their modules.

Each helper returns a ``TextTarget`` whose ``render`` changes only what the adapter owns and gives back the
original text byte for byte when nothing owned changed, so a second sync writes nothing (docs/design.md
"Writing other programs' files"). Comments, key order and layout of everything else survive:

- TOML (Codex ``config.toml``): tomlkit, which round-trips comments and whitespace.
- YAML (Continue ``config.yaml``, Aider ``.aider.conf.yml``): ruamel.yaml in round-trip mode, with the file's
  own sequence indentation detected so a dump does not re-indent untouched lists.
- dotenv (Gemini CLI ``.env``, Codex ``.env``): ``conduit.adapters.formats.dotenvfile`` (python-dotenv reads, conduit
  edits by line).
- JSONC (OpenCode ``opencode.jsonc``, Gemini CLI ``settings.json``): ``conduit.adapters.formats.jsonc``.

Secrets in diffs: each target's ``mask`` parses the text and redacts the values under its secret key names
(``conduit.adapters.formats.masking``). Parse errors become ``ToolFileError`` naming the file, line and column; the
writer then leaves the file alone.
"""

from __future__ import annotations

import copy
import io
import re
import shutil
import subprocess
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import tomlkit
import tomlkit.exceptions

from conduit.adapters.base import TextTarget
from conduit.adapters.formats.dotenvfile import dotenv_target, read_dotenv, set_dotenv
from conduit.adapters.formats.jsonc import Edit, edit_jsonc, jsonc_target, parse_jsonc, strip_jsonc
from conduit.adapters.formats.masking import mask_values, masker
from conduit.errors import ToolFileError

if TYPE_CHECKING:
    from ruamel.yaml import YAML

# ruamel.yaml (~40 ms to import) is imported by the YAML functions below when they run: only Continue and Aider
# files are YAML, so `conduit sync` for the other tools never loads it (tests/cli/test_cli_start.py).

__all__ = [
    "Edit", "dotenv_target", "dump_yaml", "edit_jsonc", "jsonc_target", "parse_jsonc", "parse_toml", "parse_yaml",
    "plain_target", "read_dotenv", "set_dotenv", "strip_jsonc", "tool_version", "toml_target", "yaml_target",
]

_FIX_HINT = "fix the file by hand (or move it away); conduit left it unchanged"


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

    mask = masker(lambda text: parse_toml(text, path=path).unwrap(), secret_keys)
    return TextTarget(path=path, render=render, mask=mask, mode=mode, create=create, label=label or path.name)


# ------------------------------------------------------------------------------------------------- YAML


def _yaml_for(text: str | None) -> YAML:
    from ruamel.yaml import YAML

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
    from ruamel.yaml.error import YAMLError

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

    mask = masker(lambda text: _plain(parse_yaml(text, path=path)), secret_keys)
    return TextTarget(path=path, render=render, mask=mask, mode=mode, create=create, label=label or path.name)


# ------------------------------------------------------------------------------------------------ others


def read_parsed(path: Path, parse: Callable[..., Any]) -> tuple[Any, str | None]:
    """``parse(text, path=path)`` of the file, for reporting: (document, None); ``({}, None)`` when missing;
    ``({}, message)`` when unreadable."""
    try:
        return parse(path.read_text(encoding="utf-8"), path=path), None
    except FileNotFoundError:
        return {}, None
    except (ToolFileError, OSError, UnicodeDecodeError) as exc:
        return {}, str(exc)


def toml_data(text: str | None, *, path: Path) -> dict[str, Any]:
    """A TOML file as plain data (``parse_toml(...).unwrap()``)."""
    return parse_toml(text, path=path).unwrap()


def plain_target(path: Path, content: str, *, mode: int = 0o600, label: str = "") -> TextTarget:
    """A file conduit owns whole (a key file): its content is exactly ``content``, all of it masked in diffs."""
    return TextTarget(path=path, render=lambda _text: content, mask=lambda text: mask_values(text, [text.strip()]),
                      mode=mode, create=True, label=label or path.name)


def tool_version(exe: str, *args: str, timeout_s: float = 5) -> str | None:
    """First line of ``<exe> --version`` (or ``args``) when the tool is on PATH, else None. Never raises."""
    found = shutil.which(exe)
    if not found:
        return None
    try:
        out = subprocess.run([found, *(args or ("--version",))], capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = (out.stdout or out.stderr).strip().splitlines()
    return lines[0].strip() if lines else None
