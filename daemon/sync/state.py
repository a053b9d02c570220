"""The sync daemon's state file: ``$XDG_STATE_HOME/conduit/sync.json`` (``~/.local/state/conduit/sync.json``).

Written by ``conduit daemon`` after every sync, profile error and drift check (and by a plain ``conduit sync``
while no daemon runs), atomically (temp file in the same directory, fsync, ``os.replace``, mode 0600); read by
``conduit doctor``, ``conduit key rotate`` and the agent. Keys never appear in it: only fingerprints
(``sk-...c3f9``); diffs are masked by the writer before they get here, and the daemon passes every text through
its ``Redactor`` once more on the way out (``write_state(..., redact=)``).

Shape (``version`` 1), the JSON of ``SyncState``::

    {
      "version": 1,
      "updated_at": "2026-01-01T00:00:00.000Z",          # UTC, ISO 8601, milliseconds
      "daemon": {"pid": 1234, "started_at": "...", "debounce_ms": 50, "watching": ["/home/u/.claude", ...]},
      "profile": {"path": "...", "ok": true, "error": null, "error_at": null, "applied_at": "...",
                  "on_drift": "report"},
      "last_sync": {"at": "...", "trigger": "start" | "profile" | "key" | "routing" | "models" | "drift" | "rotate", "ok": true},
      "channels": {"taotoken": {"key_fingerprint": "sk-...c3f9", "key_error": null}},
      "tools": {
        "claude_code": {
          "drift": null | {"detected_at": "...", "files": [...], "diff": "(masked)", "policy": "report",
                           "reapplied": false},
          "restart_needed": true,
          "status": "changed" | "unchanged" | "error" | "not_found" | "unsupported" | "disabled",
          "last_sync_at": "...", "message": null, "files": ["/home/u/.claude/settings.json"],
          "last_change_at": "...", "restart_hint": "...",   # set once a sync changed the tool's files
          "key_at_rest": "reference (apiKeyHelper)" | "file 0600" | "database 0600" | "none" | ...
                                                            # after a sync that left its files in sync
        }
      }
    }

A key appears in the file only once something set it (``model_dump(exclude_unset=True)``), in the order above,
so the same data gives the same bytes as the dict-based writer this replaces. Reading is tolerant: a missing,
unreadable or invalid file is the empty state; keys a newer conduit added are kept (``extra="allow"``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from conduit.adapters.registry import ADAPTERS
from conduit.daemon.config import paths
from conduit.daemon.sync.engine import SyncReport
from conduit.fileio import atomic_write, make_private_dirs

STATE_VERSION = 1


class _Part(BaseModel):
    model_config = ConfigDict(extra="allow")


class DaemonInfo(_Part):
    """The daemon that writes the file: ``pid``, ``started_at`` (UTC ISO 8601), ``debounce_ms`` (milliseconds)
    and the directories it ``watching`` (inotify)."""

    pid: int | None = None
    started_at: str | None = None
    debounce_ms: int | None = None
    watching: list[str] = Field(default_factory=list)


class ProfileInfo(_Part):
    """The profile in force: its ``path``; ``ok`` False while the file on disk is invalid (``error``, since
    ``error_at``; the last good profile stays in force); when it was ``applied_at`` and its ``on_drift``."""

    path: str | None = None
    ok: bool = True
    error: str | None = None
    error_at: str | None = None
    applied_at: str | None = None
    on_drift: str | None = None


class LastSync(_Part):
    """The last sync: when (``at``), what caused it (``trigger``), and whether every tool synced (``ok``)."""

    at: str
    trigger: str
    ok: bool


class ChannelInfo(_Part):
    """A channel's key as last read: its ``key_fingerprint`` (never the key), or why it failed (``key_error``)."""

    key_fingerprint: str | None = None
    key_error: str | None = None


class DriftRecord(_Part):
    """An owned key changed behind conduit's back: first seen ``detected_at``, in ``files``, the masked ``diff``
    the profile would write, the ``policy`` (``on_drift``), and whether (and when) it was ``reapplied``."""

    detected_at: str | None = None
    files: list[str] = Field(default_factory=list)
    diff: str = ""
    policy: str = "report"
    reapplied: bool = False
    reapplied_at: str | None = None


class ToolInfo(_Part):
    """One tool after its last sync (see the module docstring)."""

    drift: DriftRecord | None = None
    restart_needed: bool = False
    status: str | None = None
    last_sync_at: str | None = None
    message: str | None = None
    files: list[str] = Field(default_factory=list)
    last_change_at: str | None = None
    restart_hint: str | None = None
    key_at_rest: str | None = None

    @classmethod
    def new(cls) -> ToolInfo:
        """A tool seen for the first time: ``drift`` and ``restart_needed`` written from the start."""
        return cls(drift=None, restart_needed=False)


class SyncState(_Part):
    """The whole state document (see the module docstring). ``SyncState()`` is the empty state."""

    version: int = STATE_VERSION
    updated_at: str | None = None
    daemon: DaemonInfo = Field(default_factory=DaemonInfo)
    profile: ProfileInfo = Field(default_factory=ProfileInfo)
    last_sync: LastSync | None = None
    channels: dict[str, ChannelInfo] = Field(default_factory=dict)
    tools: dict[str, ToolInfo] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _every_top_level_key(cls, data: Any) -> Any:
        # the top-level keys are always written, even before anything is known
        if isinstance(data, dict):
            return {**_TOP_DEFAULTS, **data}
        return data

    def tool(self, name: str) -> ToolInfo:
        """The entry of tool ``name``, created (``ToolInfo.new()``) when missing."""
        return self.tools.setdefault(name, ToolInfo.new())

    def to_json(self) -> dict[str, Any]:
        """The document as written (JSON-able; keys only once set)."""
        return self.model_dump(mode="json", exclude_unset=True)


_TOP_DEFAULTS: dict[str, Any] = {"version": STATE_VERSION, "updated_at": None, "daemon": {}, "profile": {},
                                 "last_sync": None, "channels": {}, "tools": {}}


def state_path() -> Path:
    """``state_dir()/sync.json`` (HOME and ``XDG_STATE_HOME`` redirect it)."""
    return paths.state_dir() / "sync.json"


def utc_now() -> str:
    """Now as ISO 8601 UTC with milliseconds and ``Z`` (``2026-01-01T00:00:00.000Z``)."""
    now = datetime.now(UTC)
    return now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond // 1000:03d}Z"


def empty_state() -> SyncState:
    """A state document with every top-level key present and nothing known yet."""
    return SyncState()


def write_state(state: SyncState, path: Path | None = None, *, redact: Callable[[str], str] | None = None) -> Path:
    """Write ``state`` atomically (temp file in the same directory, fsync, rename, fsync of the directory), 0600.

    Args:
        state: the document; its ``updated_at`` is set here.
        path: default ``state_path()``.
        redact: applied to the JSON text before it is written (the daemon's ``Redactor``: a last safety net,
            so no key the process knows reaches the file).
    Returns:
        the path written.
    Raises:
        OSError: the state directory cannot be created or written (the caller logs it; the old file stays).
    """
    path = path or state_path()
    make_private_dirs(path.parent)
    state.updated_at = utc_now()
    text = json.dumps(state.to_json(), indent=2, ensure_ascii=False) + "\n"
    if redact is not None:
        text = redact(text)
    atomic_write(path, text.encode("utf-8"), 0o600)
    return path


def read_state(path: Path | None = None) -> SyncState:
    """The state document; the empty state (``SyncState()``) when there is none (no daemon has run) or it
    cannot be read or parsed."""
    path = path or state_path()
    try:
        return SyncState.model_validate_json(path.read_bytes())
    except (OSError, ValueError, ValidationError):
        return SyncState()


@dataclass(frozen=True)
class ToolFacts:
    """What the state file says about one tool, for doctor and the agent.

    Attributes:
        tool: registry name.
        status: the last sync's status for the tool, or None when never synced.
        last_sync_at: when (ISO 8601 UTC), or None.
        last_change_at: when a sync last changed the tool's files (ISO 8601 UTC), or None.
        restart_needed: a sync changed the tool's files; sessions started before ``last_change_at`` still
            use the old settings.
        restart_hint: what to do about it.
        drift: the drift record as JSON (see the module docstring), or None.
    """

    tool: str
    status: str | None
    last_sync_at: str | None
    last_change_at: str | None
    restart_needed: bool
    restart_hint: str | None
    drift: dict[str, Any] | None


def tool_facts(state: SyncState) -> dict[str, ToolFacts]:
    """Per-tool facts from a state document (``read_state()``); ``{}`` when it knows no tool."""
    return {name: ToolFacts(tool=name, status=t.status, last_sync_at=t.last_sync_at,
                            last_change_at=t.last_change_at, restart_needed=t.restart_needed,
                            restart_hint=t.restart_hint,
                            drift=t.drift.model_dump(mode="json", exclude_unset=True) if t.drift else None)
            for name, t in state.tools.items()}


def status_line(state: SyncState, loaded: bool, error: str | None) -> str:
    """The daemon's systemd ``STATUS=`` line: each tool's last status, or why no profile is in force.
    ``loaded``: a valid profile is in force; ``error``: the last profile error (redacted), or None."""
    if not loaded:
        return f"no valid profile: {error.splitlines()[0] if error else '?'}"
    summary = ", ".join(f"{k} {v.status}" for k, v in sorted(state.tools.items()))
    return f"synced {summary}" + (" (profile error: last good profile in force)" if error else "")


def profile_error(state: SyncState) -> str | None:
    """The profile error the daemon is holding (the last good profile stays in force), or None."""
    return state.profile.error if not state.profile.ok else None


def record_report(state: SyncState, report: SyncReport, trigger: str, *,
                  mask: Callable[[str], str] = lambda s: s, drift_check: bool = False,
                  rests: Mapping[str, str] | None = None) -> None:
    """Fold one ``SyncReport`` into ``state`` (in place): per tool its status, time, message (masked), files
    and restart-needed flag, where its key rests (``rests``: ``conduit.daemon.sync.keyrest.rest_after_sync``);
    and ``last_sync``. Shared by the daemon and by a plain `conduit sync` run while no daemon runs, so
    `conduit status` and `doctor` see either. ``drift_check``: the sync re-applied a drifted tool, whose drift
    record the caller keeps.
    """
    now = utc_now()
    for tr in report.tools:
        entry = state.tool(tr.tool)
        entry.status, entry.last_sync_at = tr.status, now
        entry.message = mask(tr.message or "") or None
        entry.files = [str(r.path) for r in tr.results]
        if tr.status == "changed":
            entry.last_change_at = now
            hint = ADAPTERS[tr.tool].restart_hint
            entry.restart_needed, entry.restart_hint = hint is not None, hint
        if tr.status in ("changed", "unchanged") and not drift_check:
            entry.drift = None
        if rests is not None and tr.tool in rests:
            entry.key_at_rest = rests[tr.tool]
    state.last_sync = LastSync(at=now, trigger=trigger, ok=report.ok)
