"""The ``cluster`` object of ``/v1/status`` for ``[vllm.cluster] backend = "mp"`` (vLLM's own multi-node launcher).

No Ray and no node listing: each node's agent supervises its own vLLM (the head's serves the API, a follower runs
``--headless``, ``conduit.daemon.vllm.follower``), so this node's part is read from its supervisor's snapshot. On a
follower the state says whether it is in the group: ``member`` while its process lives and the head's master
port answers, ``head unreachable`` while it does not (the supervisor restarts it after ``unhealthy_restart_s``),
else the vLLM state (``starting``, ``restarting``, ``failed``, ``stopped``).
"""

from __future__ import annotations

from typing import Any

#: The supervisor's warning prefix for a failed health look (``Supervisor._on_health``).
UNHEALTHY_PREFIX = "vLLM unhealthy: "


def mp_cluster(settings: Any, snap: Any) -> dict[str, Any] | None:
    """``/v1/status``'s ``cluster`` for an ``mp`` node, or None (no ``[vllm.cluster]``, another backend, no
    snapshot).

    Args:
        settings: the supervisor's ``VllmSettings`` (``conduit.daemon.config.vllm``).
        snap: its ``snapshot()`` dict (``Supervisor.snapshot``).

    Returns ``{backend, role, head_address, nodes_expected, node_rank, state, reason, fix, kind, launches,
    nodes: [], process: {state, pid, restarts, headless, log_path, argv}}`` (``Cluster`` of the agent's models).
    """
    c = getattr(settings, "cluster", None)
    if c is None or c.backend != "mp" or not isinstance(snap, dict):
        return None
    follower, vstate = c.rank > 0, str(snap.get("state"))
    failure = snap.get("last_failure") if isinstance(snap.get("last_failure"), dict) else None
    reason = fix = kind = None
    if vstate == "unhealthy":
        said = [w for w in snap.get("warnings") or [] if isinstance(w, str) and w.startswith(UNHEALTHY_PREFIX)]
        reason = said[-1][len(UNHEALTHY_PREFIX):] if said else "no answer"
        fix, kind = ("start the head's agent (or its vLLM), or fix [vllm.cluster].head_address", "head_unreachable") \
            if follower else ("read `conduit vllm logs`", "unhealthy")
    elif vstate != "ready" and failure is not None:
        reason, fix, kind = failure.get("reason"), failure.get("fix"), failure.get("kind")
    state = vstate
    if follower:
        state = {"ready": "member", "unhealthy": "head unreachable"}.get(vstate, vstate)
    return {
        "backend": "mp", "role": c.role, "head_address": c.head_address, "nodes_expected": c.nodes,
        "node_rank": c.rank, "state": state, "reason": reason, "fix": fix, "kind": kind, "launches": 0, "nodes": [],
        "process": {"state": vstate, "pid": snap.get("pid"), "restarts": snap.get("restarts"), "headless": follower,
                    "log_path": snap.get("log_path"), "argv": snap.get("argv")},
    }


__all__ = ["UNHEALTHY_PREFIX", "mp_cluster"]
