"""``conduit mcp list``: for each ``[mcp.servers.NAME]`` of the profile and each tool of it, whether the tool will
load the server, read from the tool's files and conduit's records (``mcp.json``); read-only, no key is read and
no value of ``env``/``headers`` is ever shown.

States (``McpCell.state``):
- ``written``: the entry is in the tool's user file, as conduit wrote it;
- ``overridden``: a project file in the working folder (``.mcp.json``, a project ``.codex/config.toml``...)
  defines a server of the same name, which the tool uses instead;
- ``disabled_by_tool``: the entry is there but the tool's own switch turns it off (``disabled = true``,
  ``enabled = false``);
- ``drifted``: conduit wrote it and it was changed since (``conduit sync`` writes it back);
- ``persons``: an entry of that name that conduit did not write (kept, never changed);
- ``not_written``: not in the file yet (run ``conduit sync``);
- ``disabled``: ``enabled = false`` in the profile; ``excluded``: ``tools = [...]`` or ``[tools.X] mcp`` leave
  this tool out (or the tool is off); ``transport``: the tool cannot express this transport;
- ``no_mcp``: the tool does not read MCP servers (said once per tool, in ``McpView.no_mcp``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from conduit.adapters.base import Env
from conduit.adapters.formats.mcpmap import read_servers
from conduit.adapters.mcp import entry_digest
from conduit.adapters.registry import ADAPTERS
from conduit.daemon.config.mcpconfig import server_tools
from conduit.daemon.config.profile import LoadedProfile
from conduit.daemon.sync.mcpstate import read_mcp_records

__all__ = ["McpCell", "McpView", "mcp_view"]


@dataclass
class McpCell:
    """One server in one tool: ``state`` (module docstring), the ``file`` looked at, a ``detail`` in words."""

    state: str
    file: str | None = None
    detail: str = ""

    def as_dict(self) -> dict[str, Any]:
        """``{"state", "file", "detail"}`` for ``--json``."""
        return {"state": self.state, "file": self.file, "detail": self.detail}


@dataclass
class McpView:
    """``servers``: ``{name: {"transport", "enabled", "tools": {tool: McpCell}}}``; ``no_mcp``: the profile's tools
    that do not read MCP servers."""

    servers: dict[str, dict[str, Any]] = field(default_factory=dict)
    no_mcp: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """The whole view as JSON-able data."""
        return {"servers": {n: {**s, "tools": {t: c.as_dict() for t, c in s["tools"].items()}}
                            for n, s in self.servers.items()}, "no_mcp": self.no_mcp}


def _disabled(entry: Any) -> bool:
    """The tool's own off switch in an entry (Cline/Claude ``disabled: true``, Codex ``enabled = false``)."""
    return isinstance(entry, dict) and (entry.get("disabled") is True or entry.get("enabled") is False)


def _cell(tool: str, name: str, env: Env, records: dict[str, dict[str, str]]) -> McpCell:
    """The state of server ``name`` in ``tool``'s files (the server is meant for this tool)."""
    adapter = ADAPTERS[tool]
    support, path = adapter.mcp, adapter.mcp_path(env)
    if support is None or path is None:
        return McpCell("no_mcp")
    found, error = read_servers(path, support)
    if error:
        return McpCell("not_written", str(path), error)
    for rel in support.project_files:
        project = env.cwd / rel
        if project != path and name in read_servers(project, support)[0]:
            return McpCell("overridden", str(path), f"{project} defines `{name}` too; the tool uses that one")
    if name not in found:
        return McpCell("not_written", str(path), "run `conduit sync`")
    rec = records.get(str(path), {}).get(name)
    if rec is None:
        return McpCell("persons", str(path), "an entry conduit did not write: kept as it is")
    if entry_digest(found[name]) != rec:
        return McpCell("drifted", str(path), "changed since conduit wrote it; `conduit sync` writes it back")
    if _disabled(found[name]):
        return McpCell("disabled_by_tool", str(path), "turned off in the tool")
    return McpCell("written", str(path))


def mcp_view(profile: LoadedProfile, env: Env) -> McpView:
    """Every server of ``profile`` against every tool of it (see the module docstring). Never raises for a
    missing or unreadable tool file (the cell says so)."""
    prof = profile.model
    view = McpView(no_mcp=[t for t in prof.tools if t in ADAPTERS and ADAPTERS[t].mcp is None])
    records = read_mcp_records()
    servers = prof.mcp.servers if prof.mcp is not None else {}
    for name, cfg in servers.items():
        transport = "stdio" if cfg.command is not None else (cfg.transport or "http")
        targets = set(server_tools(name, cfg, prof.tools))
        cells: dict[str, McpCell] = {}
        for tool in prof.tools:
            adapter = ADAPTERS.get(tool)
            if adapter is None or adapter.mcp is None:
                continue
            if not cfg.enabled:
                cells[tool] = McpCell("disabled", detail="enabled = false in the profile")
            elif tool not in targets:
                cells[tool] = McpCell("excluded", detail="not for this tool (tools = [...], [tools.X] mcp, or off)")
            elif transport not in adapter.mcp.transports:
                cells[tool] = McpCell("transport", detail=f"{adapter.display_name} has no {transport} servers")
            else:
                cells[tool] = _cell(tool, name, env, records.get(tool, {}))
        view.servers[name] = {"transport": transport, "enabled": cfg.enabled, "tools": cells}
    return view
