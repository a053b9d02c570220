"""``conduit mcp add`` / ``rm``: add or remove one ``[mcp.servers.NAME]`` table in the profile with tomlkit,
keeping every comment and the layout of the rest; the new profile is validated before it is written
(``conduit.daemon.config.edit.save_profile``), so an edit never leaves an invalid profile behind."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import tomlkit

from conduit.daemon.config.edit import save_profile
from conduit.daemon.config.profile import LoadedProfile, load_profile
from conduit.errors import BadArguments, ProfileError

__all__ = ["add_server", "remove_server"]


def add_server(path: str | Path | None, name: str, *, command: str | None = None, args: Sequence[str] = (),
               url: str | None = None, tools: Sequence[str] | None = None) -> LoadedProfile:
    """Add ``[mcp.servers.NAME]`` (stdio ``command`` + ``args``, or ``url``) and save the profile.

    Raises:
        BadArguments: a server of that name exists already, or the new table is invalid (a relative command
            path, a bad name...): exit 3, nothing is written.
        ProfileError: the profile itself does not load.
    """
    loaded = load_profile(path)
    doc = tomlkit.parse(loaded.text)
    mcp = doc.get("mcp")
    if mcp is None:
        mcp = tomlkit.table(is_super_table=True)
        doc["mcp"] = mcp
    servers = mcp.get("servers")
    if servers is None:
        servers = tomlkit.table(is_super_table=True)
        mcp["servers"] = servers
    if name in servers:
        raise BadArguments(f"{loaded.path}: MCP server `{name}` is already defined ([mcp.servers.{name}])",
                           f"edit it there, or `conduit mcp rm {name}` first")
    table = tomlkit.table()
    if command is not None:
        table["command"] = command
        if args:
            table["args"] = list(args)
    if url is not None:
        table["url"] = url
    if tools:
        table["tools"] = list(tools)
    servers[name] = table
    try:
        new = save_profile(loaded.path, tomlkit.dumps(doc))
    except ProfileError as err:  # the profile was valid before: the new table, i.e. the command line, is wrong
        raise BadArguments(err.message, err.hint) from None
    assert new is not None
    return new


def remove_server(path: str | Path | None, name: str) -> LoadedProfile:
    """Remove ``[mcp.servers.NAME]`` and save the profile; ``[mcp]`` itself stays (so conduit keeps managing, and
    the next sync removes its entries of NAME from every tool where they are still conduit's).

    Raises:
        BadArguments: no server of that name (exit 3).
    """
    loaded = load_profile(path)
    doc = tomlkit.parse(loaded.text)
    servers = (doc.get("mcp") or {}).get("servers")
    if not isinstance(servers, dict) or name not in servers:
        defined = ", ".join(servers) if isinstance(servers, dict) and servers else "none"
        raise BadArguments(f"{loaded.path}: no MCP server `{name}` in the profile", f"servers defined: {defined}")
    del servers[name]
    for cfg in (doc.get("tools") or {}).values():  # a [tools.X] mcp list naming it would now be an error
        choice = cfg.get("mcp") if isinstance(cfg, dict) else None
        if isinstance(choice, list) and name in choice:
            choice.remove(name)
    new = save_profile(loaded.path, tomlkit.dumps(doc))
    assert new is not None
    return new
