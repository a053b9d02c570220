"""MCP entry shapes shared by several tools, variable references, and the merges ``conduit.adapters.formats.mcpmap``
leaves to the adapters: a list of tables keyed by ``name`` (Mistral Vibe ``[[mcp_servers]]``, Continue ``mcpServers:``).

Every merge goes through ``mcpmap.merge_server_map`` (``McpLedger``'s ownership rules): only conduit's entries and
the names the profile wants are looked at; a person's entries keep their place and content. The facts behind each
shape are in docs/formats/<tool>.md, "MCP servers".
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping, MutableMapping, Sequence
from pathlib import Path
from typing import Any

from conduit.adapters.formats.mcpmap import merge_server_map
from conduit.adapters.mcp import McpLedger, McpServer

__all__ = ["ANY_NAME", "UPPER_NAME", "NamedList", "merge_named_list", "needs_private",
           "opencode_entry", "referenced", "toml_item"]

ANY_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
"""Variable names a ``${VAR}``-style reference may carry in most tools."""
UPPER_NAME = r"[A-Z_][A-Z0-9_]*"
"""Variable names OpenClaw substitutes (upper case only: docs ``gateway/configuration/environment-variables.md``)."""


def _ref(form: str | None, var: str | None, names: str) -> str | None:
    """``form`` with ``var`` in it (``"${%s}"`` -> ``${VAR}``) when the tool expands references and ``var`` suits."""
    if form is None or var is None or not re.fullmatch(names, var):
        return None
    return form % var


def referenced(server: McpServer, form: str | None, names: str = ANY_NAME) -> tuple[dict[str, str], dict[str, str]]:
    """``(env, headers)`` of ``server`` (headers with ``Authorization: Bearer`` for a bearer token), where each value
    that came from ``{ env = "VAR" }`` is written as the reference ``form % VAR`` (``"${%s}"``, ``"{env:%s}"``)
    instead of the value; ``form`` None: the values themselves (a tool that expands no reference)."""
    env = {k: _ref(form, server.env_refs.get(k), names) or v for k, v in server.env.items()}
    headers = {k: _ref(form, server.env_refs.get(k), names) or v for k, v in server.headers.items()}
    if server.bearer is not None:
        ref = _ref(form, server.bearer_env, names)
        headers["Authorization"] = f"Bearer {ref or server.bearer}"
    return env, headers


def needs_private(servers: Sequence[McpServer] | None, form: str | None, names: str = ANY_NAME) -> bool:
    """Whether the file holding ``servers`` (written with ``referenced(server, form)``) holds a secret value, so it
    must be 0600: a secret that is not written as a reference."""
    for s in servers or ():
        if s.bearer is not None and _ref(form, s.bearer_env, names) is None:
            return True
        if any(_ref(form, s.env_refs.get(n), names) is None for n in s.secrets):
            return True
    return False


def opencode_entry(server: McpServer) -> dict[str, Any]:
    """OpenCode and Kilo CLI (``mcp.NAME``): ``{"type": "local", "command": [command, *args], "environment",
    "cwd"}`` or ``{"type": "remote", "url", "headers"}`` (a remote server is tried as streamable HTTP, then SSE);
    values from ``{ env = ... }`` written ``{env:VAR}`` (sst/opencode ``packages/opencode/src/config/config.ts``
    ``McpLocal``/``McpRemote``; the 1.18.33 and Kilo 7.7.7 binaries)."""
    env, headers = referenced(server, "{env:%s}")
    if server.transport == "stdio":
        entry: dict[str, Any] = {"type": "local", "command": [server.command, *server.args]}
        if env:
            entry["environment"] = env
        if server.cwd is not None:
            entry["cwd"] = server.cwd
        return entry
    return {"type": "remote", "url": server.url, **({"headers": headers} if headers else {})}


class NamedList(MutableMapping[str, Any]):
    """A list of tables keyed by their ``name`` seen as a map (name -> table), for ``merge_server_map``: setting a
    name that is there replaces that item in place, a new one is appended, deleting removes the item. Items that
    are not tables with a string ``name`` are never touched. ``make`` turns a plain entry into a list item."""

    def __init__(self, items: list[Any], make: Callable[[Any], Any] = lambda v: v) -> None:
        self._items, self._make = items, make

    def _index(self, name: str) -> int | None:
        for i, item in enumerate(self._items):
            if isinstance(item, Mapping) and item.get("name") == name:
                return i
        return None

    def __getitem__(self, name: str) -> Any:
        i = self._index(name)
        if i is None:
            raise KeyError(name)
        return self._items[i]

    def __setitem__(self, name: str, value: Any) -> None:
        i = self._index(name)
        if i is None:
            self._items.append(self._make(value))
        else:
            self._items[i] = self._make(value)

    def __delitem__(self, name: str) -> None:
        i = self._index(name)
        if i is None:
            raise KeyError(name)
        del self._items[i]

    def __iter__(self) -> Iterator[str]:
        return iter([str(item["name"]) for item in self._items
                     if isinstance(item, Mapping) and isinstance(item.get("name"), str)])

    def __len__(self) -> int:
        return len(list(iter(self)))


def merge_named_list(items: list[Any], wanted: Mapping[str, Any], ledger: McpLedger, path: Path,
                     make: Callable[[Any], Any] = lambda v: v) -> bool:
    """Merge ``wanted`` (each entry holding its own ``"name"``) into the list ``items`` in place (a tomlkit array
    of tables, a ruamel sequence, a list); returns whether anything changed."""
    return merge_server_map(NamedList(items, make), wanted, ledger, path, make=lambda v: v)


def toml_item(entry: Mapping[str, Any]) -> Any:
    """A plain entry as a tomlkit table for an array of tables (``[[mcp_servers]]``); its objects inline
    (``env = { ... }``)."""
    import tomlkit  # lazy: only the TOML tools need it

    def value(v: Any) -> Any:
        if isinstance(v, Mapping):
            inline = tomlkit.inline_table()
            inline.update({k: value(x) for k, x in v.items()})
            return inline
        return v

    table = tomlkit.table()
    for k, v in entry.items():
        table[k] = value(v)
    return table
