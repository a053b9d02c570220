"""The profile's ``[mcp.servers.NAME]`` tables, checked at load time and resolved into ``McpServer``s per tool.

Shape (docs/mcp.md)::

    [mcp.servers.files]                     # stdio: conduit's tools start the command
    command = "/usr/local/bin/mcp-files"    # absolute, or a bare name looked up on PATH
    args = ["--root", "/srv"]
    env = { LOG = "info", TOKEN = { env = "FILES_TOKEN" } }   # a value may be a key source
    cwd = "/srv"

    [mcp.servers.search]                    # streamable HTTP (transport = "sse" for the older transport)
    url = "https://mcp.example.com/mcp"
    headers = { "X-Team" = "core" }
    bearer_token = { secret = "search" }    # sent as Authorization: Bearer <token>
    tools = ["claude_code", "codex"]        # only these tools (default: every enabled tool with MCP support)
    enabled = false                         # defined but written nowhere

    [tools.gemini]
    mcp = false                             # no MCP servers for this tool; or a list of server names

Errors are ``ProfileError`` naming the file, line, key and the fix; a key source's value is never quoted.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from conduit.adapters.mcp import DEFAULT_NAME_RULE, McpServer
from conduit.adapters.registry import ADAPTERS
from conduit.daemon.config.fields import Bool
from conduit.daemon.config.sources import KeySource, read_key
from conduit.errors import ProfileError

__all__ = ["McpConfig", "McpServerConfig", "check_mcp", "resolve_server", "server_tools", "tool_servers"]

SECRET_NAME = re.compile(r"(?i)auth|token|key|secret|password|credential|cookie")
"""An env or header name whose literal value is treated as a secret (masked in diffs, file kept 0600)."""

Value = str | KeySource


class McpServerConfig(BaseModel):
    """One ``[mcp.servers.NAME]`` table: either ``command`` (stdio) or ``url`` (HTTP), never both.

    Attributes:
        command: the program a tool starts (absolute path, ``~/...``, or a bare name found on ``PATH``).
        args: its arguments; env: its variables (values: strings or key sources); cwd: its folder (absolute).
        url: an ``http://`` or ``https://`` endpoint; transport: ``http`` (streamable HTTP, default) or ``sse``.
        headers: HTTP headers (values: strings or key sources); bearer_token: sent as ``Authorization: Bearer``.
        tools: the tools that get this server (default: every enabled tool whose adapter supports MCP).
        enabled: false keeps the server defined but written nowhere (conduit's entries are removed).
    """

    model_config = ConfigDict(extra="forbid")

    command: str | None = None
    args: list[str] = Field(default_factory=list)
    env: dict[str, Value] = Field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    transport: Literal["http", "sse"] | None = None
    headers: dict[str, Value] = Field(default_factory=dict)
    bearer_token: Value | None = None
    tools: list[str] | None = None
    enabled: Bool = True

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerConfig:
        if (self.command is None) == (self.url is None):
            raise ValueError("set either `command` (a stdio server) or `url` (an HTTP server)"
                             + (", not both" if self.command is not None else ""))
        if self.command is not None:
            cmd = self.command.strip()
            if not cmd:
                raise ValueError("`command` is empty")
            if "/" in cmd and not (cmd.startswith("/") or cmd.startswith("~/")):
                raise ValueError(f"`command` \"{cmd}\" is a relative path: each tool starts it from its own "
                                 "folder; write an absolute path (or a bare name found on PATH)")
            if self.headers or self.bearer_token is not None or self.transport is not None:
                raise ValueError("`headers`, `bearer_token` and `transport` are for an HTTP server (`url`)")
        else:
            if not re.match(r"^https?://[^/\s]+", self.url or ""):
                raise ValueError("`url` must start with http:// or https:// and name a host")
            if self.args or self.env or self.cwd is not None:
                raise ValueError("`args`, `env` and `cwd` are for a stdio server (`command`)")
        if self.cwd is not None and not (self.cwd.startswith("/") or self.cwd.startswith("~")):
            raise ValueError(f"`cwd` \"{self.cwd}\" is a relative path; write an absolute one")
        return self


class McpConfig(BaseModel):
    """The ``[mcp]`` table: ``servers`` by name."""

    model_config = ConfigDict(extra="forbid")

    servers: dict[str, McpServerConfig] = Field(default_factory=dict)


def server_tools(name: str, server: McpServerConfig, tools: Mapping[str, Any]) -> list[str]:
    """The tools of the profile's ``tools`` (``{name: ToolConfig}``) that get server ``name``: enabled, with MCP
    support, named by the server's ``tools`` (when set), not excluded by the tool's ``mcp`` (false, or a list
    without ``name``); none when the server is disabled."""
    if not server.enabled:
        return []
    out = []
    for tool, cfg in tools.items():
        adapter = ADAPTERS.get(tool)
        if adapter is None or adapter.mcp is None or not getattr(cfg, "enabled", True):
            continue
        if server.tools is not None and tool not in server.tools:
            continue
        choice = getattr(cfg, "mcp", None)
        if choice is False or (isinstance(choice, list) and name not in choice):
            continue
        out.append(tool)
    return out


def check_mcp(mcp: McpConfig | None, tools: Mapping[str, Any], where: Callable[..., str]) -> None:
    """Cross-key checks: every name in a server's ``tools`` is a known tool, every name in ``[tools.X] mcp`` is a
    defined server, and each server name suits every tool it goes to (``McpSupport.name_rule``).

    Raises:
        ProfileError: naming the file, line and key, with the fix.
    """
    servers = mcp.servers if mcp is not None else {}
    for tool, cfg in tools.items():
        choice = getattr(cfg, "mcp", None)
        for name in choice if isinstance(choice, list) else []:
            if name not in servers:
                raise ProfileError(f"{where('tools', tool, 'mcp')}: MCP server `{name}` is not defined",
                                   f"servers defined: {', '.join(servers) or 'none'} ([mcp.servers.NAME])")
    for name, server in servers.items():
        for tool in server.tools or []:
            if tool not in ADAPTERS:
                raise ProfileError(f"{where('mcp', 'servers', name, 'tools')}: unknown tool `{tool}`",
                                   f"tools: {', '.join(ADAPTERS)}")
        if not re.fullmatch(DEFAULT_NAME_RULE, name):
            raise ProfileError(f"{where('mcp', 'servers', name)}: MCP server name `{name}` has characters tools "
                               "refuse", "use letters, digits, `_` and `-` (at most 64)")
        for tool in server_tools(name, server, tools):
            support = ADAPTERS[tool].mcp
            if support is not None and not support.accepts(name):
                raise ProfileError(f"{where('mcp', 'servers', name)}: {ADAPTERS[tool].display_name} refuses the "
                                   f"MCP server name `{name}` (it must match {support.name_rule})",
                                   f"rename the server, or set tools = [...] without {tool}")


def _value(raw: Value, label: str, environ: Mapping[str, str] | None) -> tuple[str, str | None, bool]:
    """(value, the ``env`` variable it came from or None, whether it is a secret) for one env/header value.
    Raises ``KeyError_`` when a key source cannot be read (the message names the source, never a value)."""
    if isinstance(raw, KeySource):
        return read_key(raw, environ=environ).key, raw.env, True
    return raw, None, bool(SECRET_NAME.search(label))


def resolve_server(name: str, cfg: McpServerConfig, environ: Mapping[str, str] | None = None) -> McpServer:
    """The ``McpServer`` for ``[mcp.servers.NAME]``, its key sources read (``read_key``: each value registered
    with the redactor). Raises ``KeyError_`` for a key source that cannot be read."""
    refs: dict[str, str] = {}
    secrets: set[str] = set()

    def values(table: Mapping[str, Value]) -> dict[str, str]:
        out = {}
        for k, raw in table.items():
            out[k], ref, secret = _value(raw, k, environ)
            if ref:
                refs[k] = ref
            if secret:
                secrets.add(k)
        return out

    if cfg.command is not None:
        home = (os.environ if environ is None else environ).get("HOME")

        def expand(path: str) -> str:  # a tool does not expand ~ in a command or a folder
            return home.rstrip("/") + path[1:] if path.startswith("~/") and home else path

        cwd = expand(cfg.cwd) if cfg.cwd is not None else None
        return McpServer(name=name, transport="stdio", command=expand(cfg.command.strip()), args=tuple(cfg.args),
                         env=values(cfg.env), cwd=cwd, env_refs=refs, secrets=frozenset(secrets))
    bearer, bearer_env = None, None
    if cfg.bearer_token is not None:
        bearer, bearer_env, _ = _value(cfg.bearer_token, "Authorization", environ)
    return McpServer(name=name, transport=cfg.transport or "http", url=cfg.url, headers=values(cfg.headers),
                     bearer=bearer, bearer_env=bearer_env, env_refs=refs, secrets=frozenset(secrets))


def tool_servers(mcp: McpConfig | None, tools: Mapping[str, Any], tool: str,
                 environ: Mapping[str, str] | None = None) -> tuple[McpServer, ...] | None:
    """The servers ``tool`` gets, in profile order (``ToolSettings.mcp``); None when the profile has no ``[mcp]``
    table. Raises ``KeyError_`` for a key source that cannot be read."""
    if mcp is None:
        return None
    return tuple(resolve_server(name, cfg, environ) for name, cfg in mcp.servers.items()
                 if tool in server_tools(name, cfg, tools))

