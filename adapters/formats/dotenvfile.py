"""dotenv files (Gemini CLI ``~/.gemini/.env``, Codex ``$CODEX_HOME/.env``): read with python-dotenv, edited by line.

Reading is python-dotenv's (``dotenv_values`` on a stream, without ``${VAR}`` expansion, which the tools do not
all do): quotes, escapes such as ``K="q\\"uote"`` -> ``q"uote``, ``export`` prefixes and trailing comments
are understood as python-dotenv understands them. Editing is conduit's own and changes only the lines of the
variables conduit owns: other lines, comments, ``export`` prefixes, quoting style and order are kept, a line
whose value is already right is not touched at all, and a new variable is appended. A value is written so
that python-dotenv reads it back unchanged (double quotes with ``\\"`` and ``\\\\`` escapes when needed).
"""

from __future__ import annotations

import io
import re
from collections.abc import Collection, Mapping
from pathlib import Path

from conduit.adapters.base import TextTarget
from conduit.adapters.formats.masking import masker

__all__ = ["dotenv_target", "read_dotenv", "set_dotenv"]

_DOTENV_LINE = re.compile(
    r"^(?P<lead>\s*(?:export\s+)?)(?P<name>[A-Za-z_][A-Za-z0-9_.]*)(?P<eq>\s*=\s*)(?P<rest>.*?)(?P<nl>\r?\n)?$")


def read_dotenv(text: str | None) -> dict[str, str]:
    """The variables a dotenv file defines, as python-dotenv reads them (later lines win); a name without
    ``=`` defines nothing."""
    from dotenv import dotenv_values  # lazy, as in outranks.read_env_quietly

    values = dotenv_values(stream=io.StringIO(text or ""), interpolate=False)
    return {name: value for name, value in values.items() if value is not None}


def _render(value: str, quote: str) -> str:
    """``value`` for the right of ``=``, in the line's quoting style where python-dotenv reads it back as is."""
    if quote == "'" and "'" not in value and "\\" not in value:
        return f"'{value}'"
    if quote or re.search(r"[\s#\"'`\\$=]", value) or not value:
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return value


def _edited(m: re.Match[str], value: str) -> str:
    """The line of ``m`` with its value replaced by ``value``; the prefix, quoting and a trailing comment kept."""
    rest = m.group("rest")
    stripped = rest.strip()
    quote = stripped[0] if stripped[:1] in ("'", '"') else ""
    found = None if quote else re.search(r"\s+#.*$", rest)
    comment = found.group(0) if found else ""
    return f"{m.group('lead')}{m.group('name')}{m.group('eq')}{_render(value, quote)}{comment}{m.group('nl') or ''}"


def set_dotenv(text: str | None, wanted: Mapping[str, str | None]) -> str:
    """Set (or, for ``None``, remove) variables in dotenv text, keeping every other line as it is.

    A variable already present keeps its line, ``export`` prefix and quoting style, and a line whose value is
    already right is not touched at all; a new variable is appended at the end.
    """
    seen: set[str] = set()
    out: list[str] = []
    for line in (text or "").splitlines(keepends=True):
        m = _DOTENV_LINE.match(line)
        if not m or line.lstrip().startswith("#") or m.group("name") not in wanted:
            out.append(line)
            continue
        name = m.group("name")
        seen.add(name)
        value = wanted[name]
        if value is None:
            continue
        out.append(line if read_dotenv(line).get(name) == value else _edited(m, value))
    missing = [(n, v) for n, v in wanted.items() if v is not None and n not in seen]
    if missing:
        if out and not out[-1].endswith("\n"):
            out[-1] += "\n"
        out += [f"{n}={_render(v, '')}\n" for n, v in missing if v is not None]
    return "".join(out)


def dotenv_target(path: Path, wanted: Mapping[str, str | None], *, secret_keys: Collection[str],
                  mode: int = 0o600, create: bool = True, label: str = "") -> TextTarget:
    """A target for a dotenv file setting the variables in ``wanted`` (``None`` removes one)."""
    return TextTarget(path=path, render=lambda text: set_dotenv(text, wanted), mask=masker(read_dotenv, secret_keys),
                      mode=mode, create=create, label=label or path.name)
