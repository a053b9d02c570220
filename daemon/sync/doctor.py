"""``conduit doctor``: per tool, is its file found, which version, is it in sync, and who overrides conduit.

Read-only: it runs a dry-run sync to tell "in sync" from "drifted", asks each adapter's ``inspect`` for
facts, and its ``outranks`` for what will stop the tool from using conduit's settings although the files match
(``conduit.daemon.sync.outrank``: states ``overridden``, ``untrusted``, ``refused``). Keys appear only as fingerprints. It also says when the sync daemon is alive but stalled: its lock file's
busy marker (``conduit.daemon.sync.progress``) shows no progress of its loop for longer than ``STALL_AFTER_S``,
and when the agent's routing file (``conduit.daemon.config.routing``) is there but cannot be read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from conduit.adapters.base import Adapter, Env, ToolFacts
from conduit.adapters.registry import ADAPTERS
from conduit.daemon.config.profile import LoadedProfile, load_profile
from conduit.daemon.config.resolve import Resolver
from conduit.daemon.config.routing import reading_problem
from conduit.daemon.sync.engine import ToolReport, sync
from conduit.daemon.sync.lock import daemon_activity
from conduit.daemon.sync.outrank import apply_blockers, blockers_for
from conduit.daemon.sync.state import profile_error, read_state, tool_facts
from conduit.errors import ConduitError

_STATE = {"changed": "drifted", "unchanged": "in_sync"}

STALL_AFTER_S = 60.0
"""A daemon loop that has made no progress for this long (seconds) inside one batch is stalled: a key command
gets 15 s and a CC Switch write at most ~26 s of lock waits, so a healthy step stays under it (the unit's
``WatchdogSec=`` is the same 60 s)."""


def doctor(profile_path: str | Path | None = None, env: Env | None = None,
           stall_after_s: float | None = None) -> dict[str, Any]:
    """Build the doctor report.

    Args:
        profile_path: the profile (None: the default). env: where tools' files are found.
        stall_after_s: seconds without progress of the daemon's loop that make it "stalled" (None:
            ``STALL_AFTER_S``).

    Returns:
        ``{"ok": bool, "profile": {...}, "tools": {name: {...}}, "warnings": [str]}``; each tool has
        ``managed`` (a [tools.<name>] table exists), ``state`` (in_sync / drifted / not_synced / overridden /
        untrusted / refused / not_found / unsupported / error / disabled / not_managed, or unknown
        while the profile does not load), ``why`` and ``fix``
        (words; ``fix`` None when nothing is to do), ``blockers`` (each ``{"state", "source", "why", "fix"}``,
        most severe first; see ``conduit.daemon.sync.outrank``), ``diff`` (masked), ``message``, ``restart_hint``, ``facts`` (the
        adapter's ``ToolFacts.as_dict()``) and ``summary`` (its one line for the table); ``daemon`` has
        ``running``, ``pid``, ``last_sync``, ``profile_error`` and ``stalled_for_s`` (seconds, or None; set when
        the loop is stalled, which also makes ``ok`` False and adds a warning).
    """
    env = env or Env()
    report: dict[str, Any] = {"ok": True, "profile": {}, "tools": {}, "warnings": []}
    profile: LoadedProfile | None = None
    try:
        profile = load_profile(profile_path)
        report["profile"] = {"path": str(profile.path), "ok": True, "notices": profile.notices}
    except ConduitError as exc:
        report["ok"] = False
        report["profile"] = {"path": str(profile_path or ""), "ok": False, "error": str(exc)}
    sync_reports = {}
    resolver = Resolver(profile) if profile is not None else None
    if profile is not None:
        try:
            sync_reports = {t.tool: t for t in sync(profile, dry_run=True, env=env, resolver=resolver).tools}
        except ConduitError as exc:
            report["ok"] = False
            report["warnings"].append(str(exc))
        report["warnings"] += _key_source_warnings(profile)
        if profile.model.fallback is not None and resolver is not None and resolver.routing is None \
                and reading_problem():  # the routing file is there but not a decision (unparseable, too large)
            report["warnings"].append(f"routing: {reading_problem()}")
        _check_fallback_channel(report, profile, resolver)
    for name, adapter in ADAPTERS.items():
        entry: dict[str, Any] = {"display": adapter.display_name, "managed": name in sync_reports}
        _tool_state(entry, report, name, adapter, sync_reports.get(name), resolver, env)
        try:
            facts = adapter.inspect(env)
        except Exception as exc:  # inspect is best effort; doctor must never crash on a tool's odd file
            facts = ToolFacts(summary=f"facts unavailable: {type(exc).__name__}",
                              details={"error": f"{type(exc).__name__}: {exc}"})
        entry["facts"] = facts.as_dict()
        entry["summary"] = facts.summary
        report["tools"][name] = entry
        report["warnings"] += facts.override_warnings(name)
    _daemon_facts(report, STALL_AFTER_S if stall_after_s is None else stall_after_s)
    return report


def _check_fallback_channel(report: dict[str, Any], profile: LoadedProfile, resolver: Resolver | None) -> None:
    """The ``[fallback]`` channel must resolve now (its key source read and cleaned), not at the first outage:
    a key that cannot be used there makes every routed tool fail exactly when the primary is down."""
    fallback = profile.model.fallback
    if fallback is None or resolver is None:
        return
    try:
        resolver.channel(fallback.channel)
    except ConduitError as exc:
        report["ok"] = False
        report["warnings"].append(f"fallback: channel `{fallback.channel}` cannot be used, so tools would fail "
                                  f"when they are routed there: {exc}")


def _tool_state(entry: dict[str, Any], report: dict[str, Any], name: str, adapter: Adapter,
                tr: ToolReport | None, resolver: Resolver | None, env: Env) -> None:
    """Fill ``entry``'s state (and ``report``'s ok and warnings) from the dry-run sync and what outranks it;
    ``resolver`` None means the profile does not load, so which tools it manages is not known."""
    if resolver is None:  # say so, not "not_managed"
        entry.update(state="unknown", why="the profile does not load, so conduit cannot tell",
                     fix="fix the profile error above, then run `conduit doctor` again")
    elif tr is None:
        entry["state"] = "not_managed"
    else:
        _sync_state(entry, tr, adapter)
        report["warnings"] += apply_blockers(entry, blockers_for(adapter, name, resolver, env))
        if entry["state"] in NOT_OK:
            report["ok"] = False


NOT_OK = ("drifted", "not_synced", "error", "unsupported", "overridden", "untrusted", "refused")
"""Tool states that make doctor's ``ok`` False (exit 1)."""


def _sync_state(entry: dict[str, Any], tr: ToolReport, adapter: Adapter) -> None:
    """A managed tool's ``state``, ``diff``, ``message`` and ``restart_hint`` from its dry-run sync report."""
    entry["state"] = _STATE.get(tr.status, tr.status)
    if tr.status == "changed" and all(r.diff.startswith("--- /dev/null") for r in tr.results if r.changed):
        entry["state"] = "not_synced"  # files conduit would create: never synced yet, not drifted
    entry["diff"] = "\n".join(r.diff for r in tr.results if r.diff)
    entry["message"] = tr.message
    entry["restart_hint"] = adapter.restart_hint


def _daemon_facts(report: dict[str, Any], stall_after_s: float) -> None:
    """Add what the sync daemon's state file says (``report["daemon"]``, per tool ``restart_needed`` and
    ``drift``) and warnings for a stalled loop, a profile error the daemon holds, drift, and tools to restart."""
    doc = read_state()
    act = daemon_activity()
    pid = act.pid if act is not None else None
    stalled = act.stalled_for_s if act is not None and (act.stalled_for_s or 0) > stall_after_s else None
    report["daemon"] = {"running": pid is not None, "pid": pid, "last_sync": doc.to_json()["last_sync"],
                        "profile_error": profile_error(doc),
                        "stalled_for_s": round(stalled, 1) if stalled is not None else None}
    if stalled is not None:
        report["ok"] = False
        who = f"pid {pid}" if pid is not None and pid > 0 else "(pid unknown)"
        report["warnings"].insert(0, f"sync daemon {who} is alive but its loop has not progressed for "
                                     f"{stalled:.0f} s: restart it with systemctl --user restart conduit-sync")
    if pid is not None and profile_error(doc):
        report["warnings"].append(f"the daemon (pid {pid}) keeps the last good profile in force: "
                                  f"{profile_error(doc)}")
    for name, facts in tool_facts(doc).items():
        entry = report["tools"].get(name)
        if entry is None:
            continue
        entry["restart_needed"] = facts.restart_needed
        entry["drift"] = facts.drift
        if facts.drift:
            report["warnings"].append(f"{name}: an owned key was changed behind conduit's back at "
                                      f"{facts.drift.get('detected_at')} (on_drift = {facts.drift.get('policy')})")
        if facts.restart_needed and facts.last_change_at:
            shown = ADAPTERS[name].display_name if name in ADAPTERS else name
            report["warnings"].append(f"{shown}: conduit last changed its settings at {facts.last_change_at}; a "
                                      f"session started before then still has the old ones: {facts.restart_hint}")


def _key_source_warnings(profile: LoadedProfile) -> list[str]:
    out = []
    for name, ch in profile.model.channels.items():
        if ch.key is not None and ch.key.env:
            out.append(f"channels.{name}.key reads the environment variable {ch.key.env}: a systemd service "
                       "does not see shell exports; use a key file or `conduit key set` for the daemon")
    return out
