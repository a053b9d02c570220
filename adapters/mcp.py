"""MCP servers: what one server is (``McpServer``), how a tool declares where it keeps them (``McpSupport``), and
who owns an entry in a tool's file (``McpLedger``).

The profile's ``[mcp.servers.NAME]`` tables are resolved by the daemon into one tuple of ``McpServer`` per tool
(``ToolSettings.mcp``: the servers that tool gets, already filtered by ``tools = [...]``, ``[tools.X] mcp`` and
``enabled``; None when the profile has no ``[mcp]`` table at all, so the tool's MCP entries are left alone).
An adapter whose tool reads MCP servers declares ``mcp = McpSupport(...)`` and merges the servers into its own
file in ``plan`` (``conduit.adapters.formats.mcpmap`` does it for a JSON object map or a TOML table); a tool
without MCP declares ``mcp = None`` (the ``AdapterDefaults`` value) and ``conduit mcp list`` says so once.

Ownership works as the limits do (``conduit.adapters.limits``): conduit owns an entry only while it is what conduit
wrote. The ledger keeps, per file, each server name conduit wrote with a digest (SHA-256 of its canonical JSON;
never the entry itself, which may hold a token). A render asks ``McpLedger.settle`` for each name:

- a name the profile wants that the file lacks is written, and recorded;
- a name conduit wrote whose entry is unchanged since is replaced by the wanted entry (or removed when the
  profile no longer wants it);
- a name conduit wrote whose entry changed since (the tool or a person edited it) is written back when the
  profile still wants it: the daemon's dry run then shows a diff, which is drift (``on_drift = "report"`` leaves
  it, ``conduit sync`` writes it back); when the profile no longer wants it, it stays: it is the person's now;
- a name conduit never wrote that the file holds is the person's: kept as it is, unless it already equals the
  wanted entry (then conduit takes it over);
- every other entry of the map is never looked at.

The daemon loads the records per tool and saves ``records`` after a write that succeeded (never in a dry run),
so the disk is touched by the daemon alone.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["ABSENT", "DEFAULT_NAME_RULE", "McpLedger", "McpServer", "McpSupport", "Transport", "entry_digest",
           "standard_entry"]

Transport = Literal["stdio", "http", "sse"]
"""How a tool reaches a server: ``stdio`` (it starts ``command``), ``http`` (streamable HTTP at ``url``), ``sse``
(the older HTTP+SSE transport, for tools that still need it)."""

DEFAULT_NAME_RULE = r"^[A-Za-z0-9_-]{1,64}$"
"""Server names every tool accepts: letters, digits, ``_`` and ``-``. Codex builds tool names
``mcp__<server>__<tool>`` and refuses other characters (openai/codex ``codex-rs/core/src/mcp_connection_manager.rs``,
``is_valid_mcp_server_name``); the profile refuses names outside this rule for every tool."""


class _Absent:
    """No entry of that name in the file (distinct from a JSON ``null``)."""

    def __repr__(self) -> str:
        return "ABSENT"


ABSENT: Any = _Absent()
"""``McpLedger.settle``'s "no such entry" in and out."""


@dataclass(frozen=True)
class McpServer:
    """One MCP server as the profile defines it, its key sources already read.

    Attributes:
        name: the server's name (``[mcp.servers.NAME]``), the key of its entry in each tool's file.
        transport: ``stdio``, ``http`` or ``sse``.
        command: the program a stdio server runs (an absolute path or a bare name looked up on ``PATH``); ``""``
            for an HTTP server.
        args: its arguments.
        env: variables set for a stdio server, ``{NAME: value}`` (values from key sources already read).
        cwd: the working folder of a stdio server, or None.
        url: the endpoint of an HTTP/SSE server, or None for stdio.
        headers: HTTP headers sent to it, ``{Header: value}``.
        bearer: the token sent as ``Authorization: Bearer <token>`` (the profile's ``bearer_token``), or None.
        bearer_env: when ``bearer`` came from ``{ env = "VAR" }``: ``VAR``, so a tool that can name a variable
            (Codex ``bearer_token_env_var``) writes the name instead of the token.
        env_refs: ``{env or header name: VAR}`` for each value that came from ``{ env = "VAR" }`` (a tool that
            expands ``${VAR}`` may write ``${VAR}`` instead of the value).
        secrets: the names in ``env`` and ``headers`` whose values are secrets (from a key source): masked in
            diffs, never logged; a file that holds one is written 0600.
    """

    name: str
    transport: Transport
    command: str = ""
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict, repr=False)
    cwd: str | None = None
    url: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    bearer: str | None = field(default=None, repr=False)
    bearer_env: str | None = None
    env_refs: Mapping[str, str] = field(default_factory=dict)
    secrets: frozenset[str] = frozenset()

    def all_headers(self) -> dict[str, str]:
        """``headers`` plus ``Authorization: Bearer <bearer>`` when a bearer token is set."""
        out = dict(self.headers)
        if self.bearer is not None:
            out["Authorization"] = f"Bearer {self.bearer}"
        return out

    def secret_names(self) -> frozenset[str]:
        """Key names whose values must be masked in a tool file holding this server (``Authorization`` with a
        bearer token)."""
        return self.secrets | ({"Authorization"} if self.bearer is not None else set())

    def holds_secret(self) -> bool:
        """Whether an entry written with the values themselves holds a secret (the file must then be 0600)."""
        return bool(self.secret_names())


@dataclass(frozen=True)
class McpSupport:
    """Where and how a tool keeps its MCP servers (the adapter's class variable ``mcp``).

    Attributes:
        file: the user file for people and docs (``~/.claude.json``); the adapter's ``mcp_path(env)`` gives the
            real path.
        key: the key path of the server map in that file (``("mcpServers",)``; Codex ``("mcp_servers",)``).
        format: the file's format, for the shared reader: ``json``, ``jsonc``, ``toml`` or ``yaml``.
        transports: the transports the tool's entries can express; a server of another transport is not written
            to this tool (``conduit mcp list`` says why).
        list_argv: the tool's own listing command (``("claude", "mcp", "list")``), or None when it has none.
        project_files: files relative to the working folder whose server of the same name wins over the user
            file's (Claude Code ``.mcp.json``; Codex ``.codex/config.toml``), read with the same ``key`` and
            ``format``.
        name_rule: a regular expression every server name written to this tool must match.
        source: where the facts come from (the tool's source file or docs page), for the docs table.
        proven: how the real-tool tier proves it (``"claude mcp list"``), or ``""``.
        shape: ``map`` (an object/table keyed by server name, the default) or ``list`` (a list of entries, each
            with a ``name`` key: Continue ``mcpServers``, Vibe ``[[mcp_servers]]``).
        restart_hint: what a person does for the tool to load changed servers when a sync changed its MCP file
            only, and that file is apart from its settings (Claude Code's ``~/.claude.json``); None: the tool's
            own ``restart_hint`` says it.
    """

    file: str
    key: tuple[str, ...]
    format: Literal["json", "jsonc", "toml", "yaml"]
    transports: frozenset[Transport]
    list_argv: tuple[str, ...] | None = None
    project_files: tuple[str, ...] = ()
    name_rule: str = DEFAULT_NAME_RULE
    source: str = ""
    proven: str = ""
    shape: Literal["map", "list"] = "map"
    restart_hint: str | None = None

    def accepts(self, name: str) -> bool:
        """Whether ``name`` matches ``name_rule``."""
        return re.fullmatch(self.name_rule, name) is not None


def standard_entry(server: McpServer, *, http_type: str | None = "http", stdio_type: str | None = None,
                   url_key: str = "url") -> dict[str, Any]:
    """The common JSON entry shape (Claude Code, Gemini CLI, Qwen Code, Cline, Copilot CLI...):
    ``{"command", "args", "env", "cwd"}`` for stdio, ``{url_key, "headers"}`` for HTTP/SSE, with ``"type"``:
    ``stdio_type`` / ``http_type`` (``"sse"`` for an SSE server whenever a type is written); a None type writes
    no ``type`` key. Empty ``args``/``env``/``headers`` and a None ``cwd`` are left out."""
    entry: dict[str, Any] = {}
    if server.transport == "stdio":
        if stdio_type is not None:
            entry["type"] = stdio_type
        entry["command"] = server.command
        if server.args:
            entry["args"] = list(server.args)
        if server.env:
            entry["env"] = dict(server.env)
        if server.cwd is not None:
            entry["cwd"] = server.cwd
        return entry
    if http_type is not None:
        entry["type"] = "sse" if server.transport == "sse" else http_type
    entry[url_key] = server.url
    headers = server.all_headers()
    if headers:
        entry["headers"] = headers
    return entry


def _plain(value: Any) -> Any:
    """A tomlkit/ruamel value as plain JSON data (``unwrap`` when it has one)."""
    unwrap = getattr(value, "unwrap", None)
    return unwrap() if callable(unwrap) else value


def entry_digest(entry: Any) -> str:
    """SHA-256 (hex) of an entry's canonical JSON (keys sorted): what the ledger records instead of the entry."""
    text = json.dumps(_plain(entry), sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass
class McpLedger:
    """The MCP ownership records of one tool: ``{file path: {server name: digest}}``.

    Attributes:
        before: the records as loaded (what earlier syncs wrote); never changed here.
        after: the records each rendered file ends with (``begin`` starts a file over).
        kept: ``{file path: [name, ...]}``: names the profile wants that a render left as the person's (an entry
            conduit did not write holds that name), for notices.
    """

    before: dict[str, dict[str, str]] = field(default_factory=dict)
    after: dict[str, dict[str, str]] = field(default_factory=dict)
    kept: dict[str, list[str]] = field(default_factory=dict)

    def begin(self, path: object) -> None:
        """A render of ``path`` starts: its records so far are discarded (the writer may render twice)."""
        self.after[str(path)] = {}
        self.kept[str(path)] = []

    def owned(self, path: object) -> list[str]:
        """The names conduit wrote into ``path`` last time."""
        return list(self.before.get(str(path), {}))

    def settle(self, path: object, name: str, current: Any, wanted: Any) -> Any:
        """The entry ``name`` of ``path`` gets (the rules in the module docstring): ``wanted`` (a plain JSON
        value), ``current`` (left as it is), or ``ABSENT`` (remove it). ``current`` is ``ABSENT`` when the file has
        no such entry; ``wanted`` is None when the profile does not want the server in this file."""
        rec = self.before.get(str(path), {}).get(name)
        mine = self.after.setdefault(str(path), {})
        unchanged = current is not ABSENT and rec is not None and entry_digest(current) == rec
        if wanted is None:
            return ABSENT if unchanged else current
        digest = entry_digest(wanted)
        if current is ABSENT or rec is not None or entry_digest(current) == digest:
            mine[name] = digest
            return wanted
        self.kept.setdefault(str(path), []).append(name)
        return current

    def records(self, paths: set[str]) -> dict[str, dict[str, str]]:
        """The records to keep when the files ``paths`` were written: their new records, the earlier ones of
        every other file; files left with none are dropped."""
        out = {p: r for p, r in self.before.items() if p not in paths or p not in self.after}
        out.update({p: r for p, r in self.after.items() if p in paths})
        return {p: r for p, r in out.items() if r}
