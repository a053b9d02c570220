"""doctor's "will this tool really use conduit's settings": turn each adapter's blockers into the tool's state.

The files matching the profile is not enough: a source that outranks or bypasses conduit
(``overridden``), a folder Gemini CLI does not trust (``untrusted``) or a setting the installed version refuses
(``refused``) means the tool will not do what the profile says. ``apply_blockers`` asks the adapter's
``outranks(settings, env)`` (``conduit.adapters.declarations``) and, for a tool whose files are in sync, drifted or
not synced yet, replaces the state by the most severe blocker's, with its ``why`` and ``fix``.
"""

from __future__ import annotations

from typing import Any

from conduit.adapters.base import Adapter, Blocker, Env
from conduit.daemon.config.resolve import Resolver
from conduit.errors import ConduitError

SEVERITY = ("refused", "untrusted", "overridden")
"""Blocker states, most severe first: a refused config stops the tool; untrusted hides every file conduit
wrote; overridden replaces some values."""

REPLACEABLE = ("in_sync", "drifted", "not_synced")
"""States a blocker replaces: the tool is there and its files were read (not_found, error... are kept)."""

_PLAIN = {
    "in_sync": ("the files match the profile and nothing found outranks them", None),
    "drifted": ("the tool's files differ from the profile", "run `conduit sync`"),
    "not_synced": ("conduit has not written the tool's files yet", "run `conduit sync`"),
}


def blockers_for(adapter: Adapter, name: str, resolver: Resolver, env: Env) -> list[Blocker]:
    """The adapter's blockers for the profile's settings of ``name``, most severe first; ``[]`` when the
    settings cannot be resolved (a key source that fails is reported elsewhere) or the adapter has no check."""
    outranks = getattr(adapter, "outranks", None)
    if outranks is None:
        return []
    try:
        settings = resolver.tool_settings(name)
    except (ConduitError, KeyError):
        return []
    try:
        found = list(outranks(settings, env))
    except Exception as exc:  # best effort, like inspect: doctor must never crash on a tool's odd file
        return [Blocker("overridden", "conduit", f"could not check what outranks conduit: {type(exc).__name__}",
                        "report this as a conduit bug")]
    return sorted(found, key=lambda b: SEVERITY.index(b.state) if b.state in SEVERITY else len(SEVERITY))


def apply_blockers(entry: dict[str, Any], blockers: list[Blocker]) -> list[str]:
    """Set ``entry``'s ``state``, ``why``, ``fix`` and ``blockers`` from ``blockers``.

    Args:
        entry: doctor's per-tool entry (``state`` already set from the dry-run sync).
        blockers: most severe first.

    Returns:
        warnings for blockers after the first (the first is the tool's own line in doctor's table).
    """
    entry["blockers"] = [b.as_dict() for b in blockers]
    state = entry.get("state", "")
    why, fix = _PLAIN.get(state, (entry.get("message"), None))
    entry["why"], entry["fix"] = why, fix
    if not blockers or state not in REPLACEABLE:
        return []
    first = blockers[0]
    entry["state"], entry["why"], entry["fix"] = first.state, first.why, first.fix
    entry["message"] = f"{first.why}; fix: {first.fix}"
    if state != "in_sync" and fix and fix not in first.fix:
        entry["message"] += f" (also {state.replace('_', ' ')}: {fix})"
    return [f"{entry.get('display', '')} is {b.state}: {b.why}; fix: {b.fix}" for b in blockers[1:]]


__all__ = ["REPLACEABLE", "SEVERITY", "apply_blockers", "blockers_for"]
