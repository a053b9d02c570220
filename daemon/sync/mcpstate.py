"""Who owns an MCP server entry in a tool's file: the records in ``state_dir()/mcp.json``.

Shape (0600): ``{tool: {file path: {server name: sha256 hex of the entry conduit wrote}}}``
(``conduit.adapters.mcp.McpLedger``). Digests only: an entry may hold a header token, the record never does.
``with_mcp`` hands a tool's records to its adapter before a render; the engine calls ``remember_mcp`` after the
write, which keeps the new records of every file written without an error (nothing in a dry run). A damaged or
missing file is no records: conduit then takes only entries equal to what it writes for its own.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from conduit.adapters.base import ToolSettings
from conduit.adapters.mcp import McpLedger
from conduit.adapters.writer.results import WriteResult
from conduit.daemon.config.paths import state_dir
from conduit.errors import ConduitError
from conduit.fileio import atomic_write, locked, make_private_dirs, read_regular_file

__all__ = ["MCP_STATE_MAX_BYTES", "mcp_state_path", "read_mcp_records", "remember_mcp", "with_mcp"]

MCP_STATE_MAX_BYTES = 1 << 20
"""Cap on ``mcp.json`` (bytes); a real one is a few kilobytes."""

_DIGEST = re.compile(r"^[0-9a-f]{64}$")


def mcp_state_path() -> Path:
    """``state_dir()/mcp.json``."""
    return state_dir() / "mcp.json"


def read_mcp_records() -> dict[str, dict[str, dict[str, str]]]:
    """The whole record file, only well-formed records kept; ``{}`` when missing, unreadable or damaged."""
    try:
        data = json.loads(read_regular_file(mcp_state_path(), max_bytes=MCP_STATE_MAX_BYTES, what="MCP record"))
    except (OSError, ConduitError, ValueError, RecursionError):
        return {}
    if not isinstance(data, dict):
        return {}
    out: dict[str, dict[str, dict[str, str]]] = {}
    for tool, files in data.items():
        if not isinstance(files, dict):
            continue
        out[tool] = {p: {n: d for n, d in names.items() if isinstance(d, str) and _DIGEST.match(d)}
                     for p, names in files.items() if isinstance(names, dict)}
    return out


def with_mcp(settings: ToolSettings) -> ToolSettings:
    """``settings`` with ``mcp_ledger`` loaded from the records of ``settings.tool``. Never raises."""
    return dataclasses.replace(settings, mcp_ledger=McpLedger(before=read_mcp_records().get(settings.tool, {})))


def remember_mcp(settings: ToolSettings, results: Iterable[WriteResult], *, dry_run: bool) -> None:
    """Save the records ``settings.mcp_ledger`` collected for the files in ``results`` written without an error;
    nothing in a dry run or when nothing changed. A failure to save is not fatal (conduit's entries then count
    as the person's until they equal what conduit writes)."""
    ledger = settings.mcp_ledger
    if dry_run or ledger is None:
        return
    new = ledger.records({str(r.path) for r in results if r.error is None})
    path = mcp_state_path()
    if read_mcp_records().get(settings.tool, {}) == new:
        return
    try:
        make_private_dirs(path.parent)
        with locked(path.with_name(path.name + ".lock"), timeout_s=5.0):
            every: dict[str, Any] = read_mcp_records()
            every[settings.tool] = new
            atomic_write(path, (json.dumps({t: f for t, f in every.items() if f}, indent=1, sort_keys=True)
                                + "\n").encode("utf-8"), 0o600)
    except OSError:
        pass
