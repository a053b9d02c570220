"""The sync daemon's state file: ``$XDG_STATE_HOME/conduit/sync.json`` (``~/.local/state/conduit/sync.json``).

Written by ``conduit daemon`` after every sync, profile error and drift check (atomically: temp file in the same
directory, fsync, ``os.replace``, mode 0600), and read by ``conduit doctor`` and the agent. Keys never appear in
it: only fingerprints (``sk-...c3f9``); diffs are masked by the writer before they get here.

Shape (``version`` 1)::

    {
      "version": 1,
      "updated_at": "2026-01-01T00:00:00.000Z",          # UTC, ISO 8601, milliseconds
      "daemon": {"pid": 1234, "started_at": "...", "debounce_ms": 50, "watching": ["/home/u/.claude", ...]},
      "profile": {"path": "...", "ok": true, "error": null, "error_at": null, "applied_at": "...",
                  "on_drift": "report"},
      "last_sync": {"at": "...", "trigger": "start" | "profile" | "key" | "drift" | "rotate", "ok": true},
      "channels": {"taotoken": {"key_fingerprint": "sk-...c3f9", "key_error": null}},
      "tools": {
        "claude_code": {
          "status": "changed" | "unchanged" | "error" | "not_found" | "unsupported" | "disabled",
          "last_sync_at": "...", "last_change_at": "...", "message": null,
          "files": ["/home/u/.claude/settings.json"],
          "restart_needed": true, "restart_hint": "...",    # set when a sync changed the tool's files
          "drift": null | {"detected_at": "...", "files": [...], "diff": "(masked)", "policy": "report",
                           "reapplied": false}
        }
      }
    }
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from conduit.daemon.config import paths
from conduit.fileio import atomic_write

STATE_VERSION = 1


def state_path() -> Path:
    """``state_dir()/sync.json`` (HOME and ``XDG_STATE_HOME`` redirect it)."""
    return paths.state_dir() / "sync.json"


def utc_now() -> str:
    """Now as ISO 8601 UTC with milliseconds and ``Z`` (``2026-01-01T00:00:00.000Z``)."""
    now = datetime.now(UTC)
    return now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond // 1000:03d}Z"


def empty_state() -> dict[str, Any]:
    """A state document with every top-level key present and nothing known yet."""
    return {"version": STATE_VERSION, "updated_at": None, "daemon": {}, "profile": {}, "last_sync": None,
            "channels": {}, "tools": {}}


def write_state(doc: dict[str, Any], path: Path | None = None) -> Path:
    """Write ``doc`` atomically (temp file in the same directory, fsync, rename, fsync of the directory), 0600.

    Args:
        doc: JSON-able state (see the module docstring); ``updated_at`` is set here.
        path: default ``state_path()``.
    Returns:
        the path written.
    Raises:
        OSError: the state directory cannot be created or written (the caller logs it; the old file stays).
    """
    path = path or state_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    doc["updated_at"] = utc_now()
    data = (json.dumps(doc, indent=2, ensure_ascii=False, default=str) + "\n").encode("utf-8")
    atomic_write(path, data, 0o600)
    return path


def read_state(path: Path | None = None) -> dict[str, Any] | None:
    """The state document, or None when there is none (no daemon has run) or it cannot be parsed."""
    path = path or state_path()
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


@dataclass(frozen=True)
class ToolFacts:
    """What the state file says about one tool, for doctor and the agent.

    Attributes:
        tool: registry name.
        status: the last sync's status for the tool, or None when never synced.
        last_sync_at: when (ISO 8601 UTC), or None.
        restart_needed: a sync changed the tool's files; sessions started before ``last_change_at`` still
            use the old settings.
        restart_hint: what to do about it.
        drift: the drift record (see the module docstring), or None.
    """

    tool: str
    status: str | None
    last_sync_at: str | None
    last_change_at: str | None
    restart_needed: bool
    restart_hint: str | None
    drift: dict[str, Any] | None


def tool_facts(doc: dict[str, Any] | None) -> dict[str, ToolFacts]:
    """Per-tool facts from a state document (``read_state()``); ``{}`` when there is none."""
    out: dict[str, ToolFacts] = {}
    for name, t in ((doc or {}).get("tools") or {}).items():
        if not isinstance(t, dict):
            continue
        out[name] = ToolFacts(tool=name, status=t.get("status"), last_sync_at=t.get("last_sync_at"),
                              last_change_at=t.get("last_change_at"), restart_needed=bool(t.get("restart_needed")),
                              restart_hint=t.get("restart_hint"), drift=t.get("drift"))
    return out


def profile_error(doc: dict[str, Any] | None) -> str | None:
    """The profile error the daemon is holding (the last good profile stays in force), or None."""
    prof = (doc or {}).get("profile") or {}
    return prof.get("error") if not prof.get("ok", True) else None


def record_report(doc: dict[str, Any], report: Any, trigger: str, *, mask: Callable[[str], str] = lambda s: s,
                  drift_check: bool = False) -> None:
    """Fold one ``SyncReport`` into the state document ``doc`` (in place): per tool its status, time, message
    (masked), files and restart-needed flag; and ``last_sync``. Shared by the daemon and by a plain
    `conduit sync` run while no daemon runs, so `conduit status` and `doctor` see either.
    """
    from conduit.adapters.registry import ADAPTERS

    now = utc_now()
    tools = doc.setdefault("tools", {})
    for tr in report.tools:
        entry = tools.setdefault(tr.tool, {"drift": None, "restart_needed": False})
        entry.update({"status": tr.status, "last_sync_at": now, "message": mask(tr.message or "") or None,
                      "files": [str(r.path) for r in tr.results]})
        if tr.status == "changed":
            entry["last_change_at"] = now
            hint = ADAPTERS[tr.tool].restart_hint
            entry["restart_needed"], entry["restart_hint"] = hint is not None, hint
        if tr.status in ("changed", "unchanged") and not drift_check:
            entry["drift"] = None
    doc["last_sync"] = {"at": now, "trigger": trigger, "ok": report.ok}
