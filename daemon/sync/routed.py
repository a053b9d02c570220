"""The sync daemon's side of the routing file: when a new decision means a sync, and the switch's log.

The agent writes ``routing.json`` (``conduit.daemon.config.routing``); the daemon watches it with the profile. A
change whose *effect* on the profile in force differs from the one last applied (``route_key``) costs one full
sync, in which ``Resolver`` renders the tools on the primary with the ``[fallback]`` channel and model (or back).
An event that changes nothing (the same decision written again, a decision for another profile) costs nothing.
After that sync ``log_switch`` logs one line: where tools went, why, and which rewritten tools need a restart
(the adapters' ``restart_hint``; a tool without one reloads by itself).

A ``fallback`` decision goes stale without any event (``RoutingDecision.stale``: older than ``STALE_AFTER_S`` with
no agent alive), and an agent may come back to stand behind it: ``recheck_in`` tells the idle loop when to look
again (only while such a decision is in the file).
"""

from __future__ import annotations

import logging

from conduit.adapters.registry import ADAPTERS
from conduit.daemon.config.profile import LoadedProfile
from conduit.daemon.config.resolve import Resolver
from conduit.daemon.config.routing import RECHECK_S, STALE_AFTER_S, RoutingDecision
from conduit.daemon.sync.engine import SyncReport

log = logging.getLogger("conduit.daemon")

RouteKey = tuple[str, float | None]
PRIMARY: RouteKey = ("primary", None)


def route_key(profile: LoadedProfile, decision: RoutingDecision | None) -> RouteKey:
    """``("fallback", since)`` while ``decision`` routes ``profile``'s tools to the fallback, else ``PRIMARY``."""
    if decision is not None and decision.route_for(profile) is not None:
        return ("fallback", decision.since)
    return PRIMARY


def restart_list(report: SyncReport) -> list[str]:
    """``["claude_code (restart running Claude Code sessions: ...)", ...]``: the tools the sync changed that
    do not reload by themselves."""
    out = []
    for tr in report.tools:
        hint = ADAPTERS[tr.tool].restart_hint if tr.tool in ADAPTERS else None
        if tr.status == "changed" and hint:
            out.append(f"{tr.tool} ({hint})")
    return out


def log_switch(before: RouteKey | None, profile: LoadedProfile, resolver: Resolver | None,
               report: SyncReport) -> RouteKey:
    """Log the switch when the route applied by this sync differs from ``before`` (None: the first sync logs
    only a fallback, or a stale decision it does not apply); returns the route now applied."""
    d = resolver.routing if resolver is not None else None
    now = route_key(profile, d)
    stale = d is not None and d.applies_to(profile) and d.stale()
    if now == before or (before is None and now == PRIMARY and not stale):  # a stale decision is said at start
        return now
    fb = profile.model.fallback
    rewritten = [t.tool for t in report.tools if t.status == "changed"]
    if now[0] == "fallback" and fb is not None and d is not None:
        where = f"fallback channel {fb.channel} model {fb.model}"
        why = d.why
    else:
        where = f"primary channel {profile.model.channel}"
        why = d.why if d is not None and d.applies_to(profile) else "no fallback decision for this profile"
        if stale and d is not None:
            why = f"the agent's decision is stale: {d.standing()}"
    restart = restart_list(report)
    log.warning("routing: tools on %s now use the %s (%s); rewritten: %s; restart needed: %s",
                profile.model.channel, where, why, ", ".join(rewritten) or "none",
                "; ".join(restart) or "none")
    return now


def recheck_in(profile: LoadedProfile, decision: RoutingDecision | None, now: float | None = None) -> float | None:
    """Seconds until the route of ``profile`` may change with no event (a ``fallback`` decision turning stale, or
    an agent stopping or coming back behind an old one): ``STALE_AFTER_S`` minus its age, then every
    ``RECHECK_S``; None without a ``fallback`` decision for ``profile`` (nothing to look at: no wake-up)."""
    if decision is None or decision.active != "fallback" or not decision.applies_to(profile):
        return None
    age = decision.age_s(now)
    return STALE_AFTER_S - age + 0.5 if age < STALE_AFTER_S else RECHECK_S


__all__ = ["PRIMARY", "RouteKey", "log_switch", "recheck_in", "restart_list", "route_key"]
