"""The group as one: is the Ray cluster whole, and what the head's vLLM must do about it.

``judge`` reads one listing of the nodes (``conduit.daemon.vllm.cluster.read_nodes``) against
``[vllm.cluster]``: enough alive nodes, every one with ``gpus_per_node`` GPUs, and the same vLLM and Ray version
on every node (the ``conduit-vllm`` / ``conduit-ray`` labels each agent sets). ``Gate.step`` turns the verdicts
into at most one action per reading:

- ``forming`` -> whole: ``launch``; state ``whole``.
- ``whole`` -> not whole (a node lost, a version changed): ``stop``; state ``degraded``.
- ``degraded`` -> whole again: ``launch`` (a relaunch; ``launches`` counts them).
- ``forming`` for longer than ``join_timeout_s``: state ``incomplete`` (reported, still waiting; no action).

Pure: no clock, no I/O (``now`` is passed in, seconds on any monotonic clock).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from conduit.daemon.config.cluster import ClusterSettings
from conduit.daemon.vllm.cluster import RAY_LABEL, VLLM_LABEL, Node

GateState = Literal["forming", "incomplete", "whole", "degraded"]
Action = Literal["launch", "stop"]


@dataclass(frozen=True)
class Verdict:
    """One reading judged: ``whole`` or not, why (a sentence), the fix (a sentence, "" when whole), a kind
    (``whole``, ``unreachable``, ``nodes_missing``, ``gpus_missing``, ``version_mismatch``)."""

    whole: bool
    kind: str
    reason: str
    fix: str = ""


def _versions(nodes: list[Node], label: str) -> dict[str, list[str]]:
    """``{version: [node addresses/ids]}`` over ``nodes`` for ``label`` (``"?"`` for a node without it)."""
    out: dict[str, list[str]] = {}
    for n in nodes:
        out.setdefault(n.labels.get(label, "?"), []).append(f"{n.address} ({n.node_id[:8]})")
    return out


def _mismatch(alive: list[Node]) -> Verdict | None:
    for label, what, pkg in ((VLLM_LABEL, "vLLM", "vllm"), (RAY_LABEL, "Ray", "ray")):
        seen = _versions(alive, label)
        known = {v: ns for v, ns in seen.items() if v != "?"}
        if len(known) > 1:
            head = next((n.labels.get(label) for n in alive if n.head), None) or sorted(known)[0]
            parts = "; ".join(f"{v} on {', '.join(ns)}" for v, ns in sorted(known.items()))
            return Verdict(False, "version_mismatch", f"the nodes run different {what} versions: {parts}",
                           f"install {pkg}=={head} (the head's) in [vllm].python on every node, then restart their "
                           "agents")
    return None


def judge(c: ClusterSettings, nodes: list[Node] | None, error: str | None = None) -> Verdict:
    """Judge one reading: ``nodes`` (None with ``error`` when the GCS could not be read)."""
    if nodes is None:
        return Verdict(False, "unreachable", error or "the Ray head does not answer",
                       f"see the head's Ray log; is `ray start --head` running on {c.head_address}?")
    alive = [n for n in nodes if n.alive]
    if len(alive) < c.nodes:
        dead = [n for n in nodes if not n.alive]
        gone = ", ".join(f"{n.address} ({n.death or 'no reason given'})" for n in dead[-3:])
        lost = f"; lost: {gone}" if dead else ""
        return Verdict(False, "nodes_missing", f"{len(alive)} of {c.nodes} nodes have joined{lost}",
                       f"start the agents of the missing workers ([vllm.cluster] role = \"worker\", "
                       f"head_address = \"{c.head_address}\"), or lower [vllm.cluster].nodes")
    if c.gpus_per_node:
        short = [n for n in alive if n.gpus < c.gpus_per_node]
        if short:
            which = ", ".join(f"{n.address} {n.gpus:g}" for n in short)
            return Verdict(False, "gpus_missing", f"nodes with fewer than {c.gpus_per_node} GPUs: {which}",
                           "check `nvidia-smi` on those nodes, set [vllm.cluster].num_gpus there, or lower "
                           "[vllm.cluster].gpus_per_node")
    mismatch = _mismatch(alive)
    if mismatch is not None:
        return mismatch
    return Verdict(True, "whole", f"{len(alive)} of {c.nodes} nodes alive, "
                                  f"{sum(n.gpus for n in alive):g} GPUs, {sum(n.cpus for n in alive):g} CPUs")


class Gate:
    """The cluster's state for the head's vLLM (see the module). ``launches`` counts the launches it asked for."""

    def __init__(self, join_timeout_s: float, now: float) -> None:
        self.join_timeout_s = join_timeout_s
        self.state: GateState = "forming"
        self.since = now
        self.launches = 0
        self.verdict: Verdict | None = None

    def step(self, verdict: Verdict, now: float) -> Action | None:
        """Take one reading's verdict at ``now``; return the action for vLLM, or None."""
        self.verdict = verdict
        if verdict.whole:
            if self.state == "whole":
                return None
            self._to("whole", now)
            self.launches += 1
            return "launch"
        if self.state == "whole":
            self._to("degraded", now)
            return "stop"
        if self.state == "forming" and now - self.since >= self.join_timeout_s:
            self._to("incomplete", now)
        return None

    def _to(self, state: GateState, now: float) -> None:
        self.state, self.since = state, now


__all__ = ["Action", "Gate", "GateState", "Verdict", "judge"]
