"""Merging MCP servers into a tool's server map (a JSON object such as ``mcpServers``, or TOML tables such as
Codex's ``[mcp_servers.NAME]``), entry by entry, under ``conduit.adapters.mcp.McpLedger``'s ownership rules.

Only the entries the ledger settles are touched: every other entry, and everything outside the map, keeps its
place and its bytes (the JSON text is edited in place by ``conduit.adapters.formats.jsonfile.json_target``; TOML
by tomlkit). A new entry goes after the map's last one; an entry conduit replaces keeps its position.

Use ``mcp_json_target`` for a file that only conduit's MCP servers bring it to (Claude Code's ``~/.claude.json``),
or ``merge_json_servers`` inside an adapter's own JSON transform for a file it already writes; Codex-style TOML
uses ``merge_toml_servers``; ``read_servers`` reads a map back for ``conduit mcp list``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping, MutableMapping, Sequence
from pathlib import Path
from typing import Any

import tomlkit
import tomlkit.items

from conduit.adapters.base import TextTarget
from conduit.adapters.formats.jsonc import parse_jsonc
from conduit.adapters.formats.jsonfile import as_object, json_target, parse_json_object, read_text_quietly
from conduit.adapters.formats.textformats import parse_toml, parse_yaml
from conduit.adapters.mcp import ABSENT, McpLedger, McpServer, McpSupport, standard_entry
from conduit.errors import ToolFileError

__all__ = ["EntryFn", "jsonc_server_edits", "mcp_json_target", "mcp_json_targets", "mcp_secret_keys", "merge_json_servers", "merge_server_map",
           "merge_toml_servers", "read_servers", "wanted_entries"]

EntryFn = Callable[[McpServer], dict[str, Any]]
"""A tool's entry for one server: ``McpServer`` -> the plain JSON value its map holds under the server's name."""


def wanted_entries(servers: Sequence[McpServer] | None, support: McpSupport,
                   entry: EntryFn = standard_entry) -> dict[str, Any] | None:
    """``{name: entry}`` of the servers a tool gets, in profile order; servers of a transport the tool cannot
    express (``support.transports``) are left out. None when ``servers`` is None (the profile has no ``[mcp]``:
    the tool's MCP entries are left alone)."""
    if servers is None:
        return None
    return {s.name: entry(s) for s in servers if s.transport in support.transports}


def mcp_secret_keys(servers: Iterable[McpServer] | None) -> frozenset[str]:
    """The key names to mask in a file holding ``servers`` (their secret env/header names)."""
    out: set[str] = set()
    for s in servers or ():
        out |= s.secret_names()
    return frozenset(out)


def merge_server_map(current: MutableMapping[str, Any], wanted: Mapping[str, Any], ledger: McpLedger,
                     path: Path, make: Callable[[Any], Any] = lambda v: v) -> bool:
    """Settle every name conduit wrote before or wants now in the map ``current``, in place. ``make`` turns a
    wanted plain value into what the map stores (a tomlkit table...). Returns whether anything changed.
    Calls ``ledger.begin(path)``: one map per file."""
    ledger.begin(path)
    changed = False
    names = list(dict.fromkeys([*ledger.owned(path), *wanted]))
    for name in names:
        got = current.get(name, ABSENT)
        plain = got.unwrap() if hasattr(got, "unwrap") else got
        value = ledger.settle(path, name, plain, wanted.get(name))
        if value is ABSENT:
            if got is not ABSENT:
                del current[name]
                changed = True
        elif value is not plain and value != plain:
            current[name] = make(value)
            changed = True
    return changed


def _map_at(doc: dict[str, Any], key: Sequence[str], path: Path, create: bool) -> dict[str, Any] | None:
    """The object at ``key`` in ``doc`` (created when ``create``); None when missing and not created.
    Raises ``ToolFileError`` when a value on the way is not an object."""
    node = doc
    for i, k in enumerate(key):
        where = f"{path}: `{'.'.join(key[: i + 1])}`"
        if k not in node:
            if not create:
                return None
            node[k] = {}
        node = as_object(node[k], where=where)
    return node


def merge_json_servers(doc: dict[str, Any], key: Sequence[str], wanted: Mapping[str, Any] | None,
                       ledger: McpLedger, path: Path) -> None:
    """Merge ``wanted`` (``wanted_entries``) into the JSON object map at ``key`` of ``doc``, in place (for an
    adapter's own ``json_target`` transform). Nothing happens when ``wanted`` is None; the map is created only
    when there is something to put in it.

    Raises:
        ToolFileError: the map (or an object on its key path) is not an object.
    """
    if wanted is None:
        return
    target = _map_at(doc, key, path, create=bool(wanted))
    if target is None:
        ledger.begin(path)
        return
    merge_server_map(target, wanted, ledger, path)


def mcp_json_target(path: Path, support: McpSupport, servers: Sequence[McpServer], ledger: McpLedger, *,
                    entry: EntryFn = standard_entry, label: str = "", create: bool = True) -> TextTarget:
    """A strict-JSON ``TextTarget`` that changes only conduit's entries of the map ``support.key`` in ``path``
    (every other byte kept: ``json_target``). Mode 0600 (the loosest an existing file may keep) when an entry
    holds a secret, else 0644 is allowed."""
    wanted = wanted_entries(servers, support, entry)

    def transform(doc: dict[str, Any]) -> dict[str, Any]:
        merge_json_servers(doc, support.key, wanted, ledger, path)
        return doc

    secret = any(s.holds_secret() for s in servers)
    return json_target(path, transform, secret_keys=mcp_secret_keys(servers), mode=0o600 if secret else 0o644,
                       create=create, label=label or path.name)


def jsonc_server_edits(doc: dict[str, Any], key: Sequence[str], wanted: Mapping[str, Any] | None,
                       ledger: McpLedger, path: Path) -> list[tuple[tuple[str, ...], Any]]:
    """The ``conduit.adapters.formats.jsonc.Edit``s that merge ``wanted`` into the map at ``key`` of a JSONC
    document (Gemini CLI ``settings.json``): one edit per entry conduit adds or changes, so comments elsewhere in
    the map stay; when an entry goes, one edit of the whole map (a JSONC edit cannot delete a member).

    Raises:
        ToolFileError: the map (or an object on its key path) is not an object.
    """
    if wanted is None:
        return []
    found = _map_at(copy.deepcopy(doc), key, path, create=True)
    before = dict(found or {})
    after = dict(before)
    merge_server_map(after, wanted, ledger, path)
    if not after and key and key[-1] not in _walk(doc, key[:-1]):
        return []
    if any(name not in after for name in before):
        return [(tuple(key), after)]
    return [((*key, name), value) for name, value in after.items()
            if name not in before or before[name] != value]


def _walk(doc: dict[str, Any], key: Sequence[str]) -> dict[str, Any]:
    """The object at ``key`` of ``doc``, or ``{}``."""
    node: Any = doc
    for k in key:
        node = node.get(k) if isinstance(node, dict) else None
    return node if isinstance(node, dict) else {}


def mcp_json_targets(path: Path | None, support: McpSupport | None, servers: Sequence[McpServer] | None,
                     ledger: McpLedger | None, *, entry: EntryFn = standard_entry, label: str = "") -> list[TextTarget]:
    """``[mcp_json_target(...)]`` for an adapter's ``plan`` to add to its targets, or ``[]`` when there is nothing
    to do: no ``[mcp]`` in the profile (``servers`` None), no support, or no server for this tool and no file yet
    (a missing file is never created empty). ``ledger`` None: a fresh one."""
    if path is None or support is None or servers is None:
        return []
    if not wanted_entries(servers, support, entry) and not path.exists():
        return []
    return [mcp_json_target(path, support, servers, ledger or McpLedger(), entry=entry, label=label)]


def _toml_value(value: Any) -> Any:
    """A plain value as tomlkit writes it inside a server table: objects become inline tables."""
    if isinstance(value, dict):
        inline = tomlkit.inline_table()
        for k, v in value.items():
            inline[k] = _toml_value(v)
        return inline
    return value


def _toml_table(entry: Any) -> tomlkit.items.Table:
    """A server entry (plain dict) as a ``[mcp_servers.NAME]`` table; nested objects inline (``env = {...}``)."""
    table = tomlkit.table()
    for k, v in dict(entry).items():
        table[k] = _toml_value(v)
    table.add(tomlkit.nl())  # a blank line before the next table, as people and `codex mcp add` write it
    return table


def merge_toml_servers(doc: tomlkit.TOMLDocument, key: str, wanted: Mapping[str, Any] | None, ledger: McpLedger,
                       path: Path) -> None:
    """Merge ``wanted`` into the TOML tables ``[key.NAME]`` of ``doc`` (Codex ``mcp_servers``), in place; every
    other table (``[projects.*]``...) and comment stays. Nothing happens when ``wanted`` is None.

    Raises:
        ToolFileError: ``key`` holds something other than a table.
    """
    if wanted is None:
        return
    if key not in doc:
        if not wanted:
            ledger.begin(path)
            return
        doc[key] = tomlkit.table(is_super_table=True)
    servers = doc[key]
    if not isinstance(servers, dict):
        raise ToolFileError(f"{path}: `{key}` is a {type(servers).__name__}, not a table",
                            "fix it by hand (or remove it); conduit left the file unchanged")
    merge_server_map(servers, wanted, ledger, path, make=_toml_table)


def read_servers(path: Path, support: McpSupport) -> tuple[dict[str, Any], str | None]:
    """The server map at ``support.key`` of ``path`` as plain data, and None; ``({}, None)`` when the file or the
    map is missing; ``({}, message)`` when the file cannot be read or parsed. Never raises."""
    text, problem = read_text_quietly(path)
    if text is None:
        return {}, problem
    parse: dict[str, Callable[..., Any]] = {"json": parse_json_object, "jsonc": parse_jsonc,
                                            "toml": lambda t, path: parse_toml(t, path=path).unwrap(),
                                            "yaml": parse_yaml}
    try:
        node: Any = parse[support.format](text, path=path)
    except ToolFileError as exc:
        return {}, exc.message
    for k in support.key:
        node = node.get(k) if isinstance(node, dict) else None
    if isinstance(node, list):  # a list of tables keyed by name (Mistral Vibe [[mcp_servers]], Continue)
        node = {e["name"]: e for e in node if isinstance(e, dict) and isinstance(e.get("name"), str)}
    return (dict(node) if isinstance(node, dict) else {}), None
