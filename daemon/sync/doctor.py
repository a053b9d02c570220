"""``conduit doctor``: per tool, is its file found, which version, is it in sync, and who overrides conduit.

Read-only: it runs a dry-run sync to tell "in sync" from "drifted", asks each adapter's ``inspect`` for
facts, and its ``outranks`` for what will stop the tool from using conduit's settings although the files match
(``conduit.daemon.sync.outrank``: states ``overridden``, ``untrusted``, ``refused``). Keys appear only as fingerprints. It also says when the sync daemon is alive but stalled: its lock file's
busy marker (``conduit.daemon.sync.progress``) shows no progress of its loop for longer than ``STALL_AFTER_S``,
and when the agent's routing file (``conduit.daemon.config.routing``) is there but cannot be read.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from conduit.adapters.base import Adapter, Env, ToolFacts
from conduit.adapters.declarations import NO_CUSTOM_GATEWAY
from conduit.adapters.registry import ADAPTERS
from conduit.daemon.config.profile import LoadedProfile, load_profile
from conduit.daemon.config.resolve import Resolver
from conduit.daemon.config.routing import reading_problem
from conduit.daemon.sync.drift import changed_keys, drift_remedy
from conduit.daemon.sync.engine import ToolReport, sync
from conduit.daemon.sync.keyrest import key_at_rest, unstable_reference
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
        Per tool too: ``installed``, ``changed_files``, ``changed_keys``, ``key_at_rest`` (``_key_at_rest``).
        ``cannot_use_gateway``: installed tools of ``NO_CUSTOM_GATEWAY`` (see ``_no_gateway_tools``).
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
        _routing_standing(report, profile, resolver)
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
        entry["summary"], entry["installed"] = facts.summary, _installed(adapter, entry["facts"], env)
        report["tools"][name] = entry
        report["warnings"] += facts.override_warnings(name)
    _no_gateway_tools(report, env)
    _daemon_facts(report, STALL_AFTER_S if stall_after_s is None else stall_after_s)
    return report


def _routing_standing(report: dict[str, Any], profile: LoadedProfile, resolver: Resolver | None) -> None:
    """A ``fallback`` decision for this profile, in words (its date, age, whether an agent stands behind it, and
    whether it is stale and so not applied: ``RoutingDecision.standing``), as a warning and as ``routing``."""
    d = resolver.routing if resolver is not None else None
    if d is None or d.active != "fallback" or not d.applies_to(profile):
        return
    report["routing"] = {"active": d.active, "since": d.since, "age_s": round(d.age_s(), 1), "stale": d.stale(),
                         "why": d.why, "standing": d.standing()}
    report["warnings"].append(f"routing: {d.standing()} ({d.why})" if not d.stale() else f"routing: {d.standing()}")


def _no_gateway_tools(report: dict[str, Any], env: Env) -> None:
    """Each tool of ``NO_CUSTOM_GATEWAY`` found on ``env``'s ``PATH``: ``report["cannot_use_gateway"]`` (name ->
    ``{"display", "binary", "why"}``) and one warning line saying it cannot use the profile's gateway."""
    found: dict[str, dict[str, str]] = {}
    for tool in NO_CUSTOM_GATEWAY:
        binary = next((b for b in (shutil.which(n, path=env.environ.get("PATH")) for n in tool.binaries) if b), None)
        if binary is not None:
            found[tool.name] = {"display": tool.display_name, "binary": binary, "why": tool.why}
            report["warnings"].append(f"{tool.display_name} ({binary}) cannot use a custom gateway: {tool.why}")
    report["cannot_use_gateway"] = found


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
        _key_at_rest(entry, report, name, tr, resolver, env)
        report["warnings"] += apply_blockers(entry, blockers_for(adapter, name, resolver, env))
        if entry["state"] in NOT_OK:
            report["ok"] = False


def _key_at_rest(entry: dict[str, Any], report: dict[str, Any], name: str, tr: ToolReport, resolver: Resolver,
                 env: Env) -> None:
    """``entry["key_at_rest"]`` (``conduit.daemon.sync.keyrest.key_at_rest``) and its warnings; nothing when the
    tool's key cannot be read (its state already says why), or when its files are not in sync and hold no key
    (a reference is not told from a file not written yet)."""
    try:
        settings = resolver.tool_settings(name)
    except ConduitError:
        return
    key = settings.key
    report["warnings"] += unstable_reference(name, entry["display"], settings)
    rest = key_at_rest(entry["display"], [r.path for r in tr.results], key, config_home=env.config_home(),
                       home=env.home, reference=ADAPTERS[name].key_reference(env))
    if tr.status != "unchanged" and not rest["files"]:
        return
    entry["key_at_rest"] = {"where": rest["where"], "files": rest["files"]}
    report["warnings"] += rest["warnings"]


NOT_OK = ("drifted", "not_synced", "error", "unsupported", "overridden", "untrusted", "refused")
"""Tool states that make doctor's ``ok`` False (exit 1)."""


def _sync_state(entry: dict[str, Any], tr: ToolReport, adapter: Adapter) -> None:
    """A managed tool's ``state``, ``diff``, ``message``, ``restart_hint``, and the files and key names a sync
    would change (``changed_files``, ``changed_keys``: ``conduit.daemon.sync.drift.changed_keys``), from its
    dry-run sync report."""
    entry["state"] = _STATE.get(tr.status, tr.status)
    if tr.status == "changed" and all(r.diff.startswith("--- /dev/null") for r in tr.results if r.changed):
        entry["state"] = "not_synced"  # files conduit would create: never synced yet, not drifted
    entry["diff"] = "\n".join(r.diff for r in tr.results if r.diff)
    entry["changed_files"] = [str(r.path) for r in tr.results if r.changed]
    entry["changed_keys"] = changed_keys(entry["diff"])
    entry["message"] = tr.message
    entry["restart_hint"] = adapter.restart_hint


def _installed(adapter: Adapter, facts: dict[str, Any], env: Env) -> bool | None:
    """False when the tool's command is absent: its facts report no version and none of its package's commands
    is on ``env``'s ``PATH``; None when that cannot be told (no package declared, or no version fact), else True.
    Doctor then says "not installed" rather than "version unknown", and gives no restart advice."""
    package = getattr(adapter, "package", None)
    if package is None or "version" not in facts:
        return None
    if facts["version"] is not None:
        return True
    return any(shutil.which(c, path=env.environ.get("PATH")) for c in package.commands)


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
            keys = changed_keys(str(facts.drift.get("diff") or ""))
            report["warnings"].append(f"{name}: {', '.join(keys) or 'an owned key'} changed behind conduit's back "
                                      f"at {facts.drift.get('detected_at')}; "
                                      f"{drift_remedy(str(facts.drift.get('policy')))}")
        if facts.restart_needed and facts.last_change_at and entry.get("installed") is not False:
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
