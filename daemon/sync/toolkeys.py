"""conduit's own key files for tools that read the key from a file (``<config>/conduit/tool-keys/CHANNEL.key``,
0600: OpenCode's and Kilo's ``{file:...}``, Pi's ``!cat``, OpenClaw's file SecretRef), removed when no tool
uses them any more.

Several tools share one channel's key file, so no adapter can delete it on its own when its tool stops using it
(``key_source = "env"``, another channel, the tool removed from the profile). After a real sync, a key file is
stale when no tool of that sync wrote it and no tool file conduit knows still names it (its file name: a tool
may quote the path; a tool removed from the profile keeps its file, which may still point there); a stale file would be a copy of the key that nothing
reads, so it is removed. A sync in which a tool failed removes nothing: that tool's file may still need it.
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path

from conduit.adapters.base import Env
from conduit.adapters.registry import ADAPTERS
from conduit.daemon.sync.engine import SyncReport

__all__ = ["remove_stale_tool_keys", "tool_keys_dir"]

log = logging.getLogger(__name__)
_READ_CAP = 4 << 20
"""Bytes of a tool file searched for a key file's path at most (settings files are a few KiB)."""


def tool_keys_dir(env: Env) -> Path:
    """``<config>/conduit/tool-keys`` (``$XDG_CONFIG_HOME/conduit``, as the daemon's paths)."""
    return env.config_home() / "conduit" / "tool-keys"


def remove_stale_tool_keys(report: SyncReport, env: Env) -> list[Path]:
    """Remove the key files of ``tool_keys_dir`` that ``report``'s sync did not write and no tool file names;
    returns the files removed (logged, paths only). Call it after a real sync only (not a dry run); nothing is
    removed when a tool of the sync failed (``error``). Never raises: a file that cannot be read or removed is
    kept."""
    folder = tool_keys_dir(env)
    if not folder.is_dir() or any(t.status == "error" for t in report.tools):
        return []
    written = {r.path for t in report.tools for r in t.results}
    stale = [p for p in sorted(folder.glob("*.key")) if p not in written and p.is_file()]
    if not stale:
        return []
    named = _tool_files_text(env)
    if named is None:
        return []
    removed = []
    for path in stale:
        if path.name in named:  # the name, not the whole path: a tool may quote it (Pi's ``!cat '...'``)
            continue
        with contextlib.suppress(OSError):
            path.unlink()
            removed.append(path)
            log.info("removed %s: no tool uses this key file any more", path)
    return removed


def _tool_files_text(env: Env) -> str | None:
    """The text of every tool file the adapters report for doctor (each absolute path among
    ``inspect(env).details``' values naming a regular file: ``file``, Pi's ``models``...), joined: a key file
    named in none of them is used by no tool conduit knows. None when an adapter could not say (its
    ``inspect`` raised): then nothing is known to be unused."""
    parts = []
    for adapter in ADAPTERS.values():
        try:
            details = adapter.inspect(env).details
        except Exception:  # noqa: BLE001 - an odd tool file: what it names is unknown, so nothing is removed
            return None
        for value in details.values():
            if isinstance(value, str) and value.startswith("/"):
                parts.append(_read_capped(Path(value)))
    return "\n".join(parts)


def _read_capped(path: Path) -> str:
    """The first ``_READ_CAP`` bytes of a regular file as text; ``""`` for anything else. Never raises."""
    with contextlib.suppress(OSError, ValueError):
        if not path.is_file():
            return ""
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            return os.read(fd, _READ_CAP).decode("utf-8", "replace")
        finally:
            os.close(fd)
    return ""
