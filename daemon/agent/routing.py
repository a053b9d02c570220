"""The agent's judge of the primary channel, and the decision it writes for the sync daemon.

Evidence (``assess``), from what the agent already keeps:
    unhealthy   the primary is the supervised vLLM's ``local`` channel and vLLM is not ``ready`` (``failed``,
                ``restarting`` after a crash, ``unhealthy``, ``stopped``, ``starting`` again), or every protocol's
                last probe of the primary failed
    healthy     vLLM ``ready`` (when supervised) and every protocol's last probe ok
    unknown     anything else (no probe yet, protocols disagree): the judge's clocks neither start nor stop;
                also the supervised vLLM's first start since the agent began (``starting``, never yet ``ready``:
                a slowly loading model refuses probes until it serves, and must not flip tools at every boot;
                bounded by the supervisor's ``startup_timeout_s``, after which it is ``failed``), and a probe
                answered ``rate_limited`` (HTTP 429 says nothing about the channel being down) or ``config`` (the
                agent cannot resolve the channel, e.g. its key source fails: a profile problem, not an outage).
    The supervisor records no "stopped because the person asked" flag, so ``stopped`` (``conduit vllm stop``)
    stays unhealthy: tools go to the fallback after ``after_s``.

The judge (``Judge``) is a pure state machine fed with monotonic timestamps: on the primary, unhealthy evidence
seen continuously for ``after_s`` switches to ``fallback``; on the fallback, healthy evidence continuously for
``after_s`` switches back. Evidence of the other kind resets the clock (hysteresis: no flapping).

``Router`` runs it on the agent's loop: every ``TICK_S`` it feeds the judge and, when the primary is the supervised
``local`` channel, asks for a fresh probe of it when the last one is older than ``PROBE_EVERY_S`` (so a switch lands
within ``after_s`` + about 1 s); a hosted primary keeps the prober's own interval (no 86,400 ``GET /models`` a day
to a gateway), so its switch lands within ``after_s`` + one interval. It writes the routing file
(``conduit.daemon.config.routing``) only when the decision changes; a write that fails is retried every tick until
it lands, and only then does the decision in force (``/v1/status``) change. It starts from the decision already in
the file (an agent restart does not flip tools), and writes nothing for a profile without ``[fallback]``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from conduit.daemon.agent.prober import Verdict
from conduit.daemon.config.fallback import FallbackSettings
from conduit.daemon.config.profile import LoadedProfile
from conduit.daemon.config.routing import Active, RoutingDecision, decision, read_routing, write_routing
from conduit.errors import ConduitError

log = logging.getLogger("conduit.agent")

TICK_S = 0.25
"""Seconds between two looks of the router at the evidence."""

PROBE_EVERY_S = 1.0
"""The supervised ``local`` primary is probed at least this often (seconds) while a ``[fallback]`` is configured."""

NO_EVIDENCE = (Verdict.PENDING, Verdict.RATE_LIMITED, Verdict.CONFIG)
"""Probe verdicts that say nothing about whether the primary is up: not probed yet, rate limited (HTTP 429), and
``config`` (the agent could not resolve the channel, e.g. its key source failed in the agent's environment: the
gateway may be fine, and a person must fix the profile; moving every tool to a paid fallback would hide it)."""


@dataclass(frozen=True)
class RoutePlan:
    """What the router needs from one read of the profile.

    Attributes:
        profile: the absolute profile path (the decision names it).
        primary: the profile's ``channel``.
        fallback: its ``[fallback]`` table.
        supervised: the primary is the implicit ``local`` channel of the ``[vllm]`` the agent supervises, or a
            channel pointing at an observed ``[engines.NAME]`` (``engine``): that engine's state is evidence.
        engine: that ``[engines]`` name, or None (``conduit.daemon.agent.engines.engine_route``).
    """

    profile: str
    primary: str
    fallback: FallbackSettings
    supervised: bool
    engine: str | None = None


def plan_for(loaded: LoadedProfile, profile_path: str) -> RoutePlan | None:
    """The ``RoutePlan`` of a loaded profile, or None without ``[fallback]``."""
    fb = loaded.model.fallback
    if fb is None:
        return None
    primary = loaded.model.channel
    return RoutePlan(profile=profile_path, primary=primary, fallback=fb,
                     supervised=loaded.vllm is not None and primary in loaded.implicit_channels)


@dataclass(frozen=True)
class Evidence:
    """One look at the primary: ``healthy`` True/False, or None when it cannot be told; ``why`` in words."""

    healthy: bool | None
    why: str


def assess(plan: RoutePlan, vllm_state: str | None, verdicts: dict[str, str], first_start: bool = False) -> Evidence:
    """The evidence about the primary (see the module docstring).

    Args:
        plan: the profile's routing plan.
        vllm_state: the supervised vLLM's state (``ready``, ``failed``...), or None without a supervisor.
        verdicts: protocol -> the last probe verdict of the primary (``ok``, ``refused``, ``pending``...).
        first_start: the supervised vLLM has not been ``ready`` since the agent began.
    """
    if plan.supervised and first_start and vllm_state == "starting":
        return Evidence(None, "the supervised vLLM is starting for the first time since the agent began")
    if plan.supervised and vllm_state != "ready":
        return Evidence(False, f"the supervised vLLM is {vllm_state or 'not running'}")
    done = {p: v for p, v in verdicts.items() if v not in NO_EVIDENCE}
    if done and all(v != "ok" for v in done.values()):
        worst = ", ".join(f"{p} {v}" for p, v in sorted(done.items()))
        return Evidence(False, f"every probe of channel {plan.primary} failed ({worst})")
    if done and len(done) == len(verdicts) and all(v == "ok" for v in done.values()):
        return Evidence(True, f"channel {plan.primary} answers" + (" and vLLM is ready" if plan.supervised else ""))
    return Evidence(None, "no verdict yet")


class Judge:
    """The hysteresis state machine (see the module docstring).

    Args:
        after_s: seconds the opposite evidence must last before the decision changes.
        active: where tools are now (``primary`` or ``fallback``).

    Attributes:
        active: the current decision.
        pending_since: monotonic time the evidence against ``active`` started, or None.
    """

    def __init__(self, after_s: float, active: Active = "primary") -> None:
        self.after_s = after_s
        self.active: Active = active
        self.pending_since: float | None = None

    def observe(self, now: float, ev: Evidence) -> Active | None:
        """Fold in one look at ``now`` (monotonic seconds); returns the new decision when it changed, else None."""
        against = ev.healthy is False if self.active == "primary" else ev.healthy is True
        if ev.healthy is None:
            return None
        if not against:
            self.pending_since = None
            return None
        if self.pending_since is None:
            self.pending_since = now
        if now - self.pending_since < self.after_s:
            return None
        self.active = "fallback" if self.active == "primary" else "primary"
        self.pending_since = None
        return self.active

    def why(self, ev: Evidence) -> str:
        """Words for a switch just made: the evidence and how long it lasted."""
        return f"{ev.why} (for {self.after_s:g} s)"


def _verdicts(health: dict[str, Any]) -> dict[str, str]:
    return {p: str(h.verdict) for p, h in health.items()}


class Router:
    """Runs the judge for the agent (see the module docstring); the Keeper calls ``tick`` every ``TICK_S``.

    Attributes:
        decision: the decision in force (read from the file at the first plan, then the last written), or None.
        unwritten: the judge's decision the file does not hold yet (its write failed; retried every tick), or None.
        generation: counts changes of ``decision`` (the kept ``/v1/status`` body is keyed on it).
        ready_seen: the supervised vLLM has been ``ready`` since the agent began.
    """

    def __init__(self) -> None:
        self.plan: RoutePlan | None = None
        self.judge: Judge | None = None
        self.decision: RoutingDecision | None = None
        self.unwritten: RoutingDecision | None = None
        self.generation = 0
        self.last_probe_at = -1e9
        self.ready_seen = False
        self._vllm_state: str | None = None
        self._judged_state: str | None = None  # the vLLM state the last tick saw
        self._write_failed = False

    def set_plan(self, plan: RoutePlan | None) -> None:
        """A new read of the profile: keep the judge when the primary and after_s are the same."""
        if plan == self.plan:
            return
        old, self.plan = self.plan, plan
        self.generation += 1
        if plan is None:
            self.judge = self.unwritten = None
            return
        if self.decision is None:
            self.decision = read_routing()
            self.generation += 1
        kept = self.decision if self.decision is not None and self.decision.primary == plan.primary \
            and self.decision.profile == plan.profile else None
        if old is not None and self.judge is not None and (old.primary, old.profile) == (plan.primary, plan.profile):
            self.judge.after_s = plan.fallback.after_s
            return
        self.judge = Judge(plan.fallback.after_s, kept.active if kept is not None else "primary")
        self.unwritten = None  # a pending write for another primary or profile

    def wants_probe(self, now: float, vllm_state: str | None = None) -> bool:
        """True when the supervised ``local`` primary should be probed now: ``PROBE_EVERY_S`` passed since the last
        request, or vLLM's state changed (it just turned ready: its last probe is stale). Always False for a
        hosted primary: the prober's own interval applies."""
        moved, self._vllm_state = vllm_state != self._vllm_state, vllm_state
        if self.plan is None or not self.plan.supervised or (now - self.last_probe_at < PROBE_EVERY_S and not moved):
            return False
        self.last_probe_at = now
        return True

    def tick(self, now: float, vllm_state: str | None, health: dict[str, Any]) -> RoutingDecision | None:
        """One look: ``health`` is the prober's protocol -> ``ChannelHealth`` of the primary. Returns the decision
        written by this look (the judge switched, or an earlier failed write landed now), else None."""
        plan, judge = self.plan, self.judge
        if plan is None or judge is None:
            return None
        if plan.supervised and vllm_state == "ready" and self._judged_state != "ready" and judge.active == "primary":
            # vLLM (re)turned ready: "not running" seen before (the agent's own start-up, before its first launch)
            # is over, though the probes of the new server may not be back yet; a clock left running would cut
            # the next outage's hysteresis short
            judge.pending_since = None
        self._judged_state = vllm_state
        self.ready_seen = self.ready_seen or (plan.supervised and vllm_state == "ready")
        ev = assess(plan, vllm_state, _verdicts(health), first_start=not self.ready_seen)
        switched = judge.observe(now, ev)
        if switched is not None:
            brief = self.brief()
            in_force = brief is not None and brief["active"] == switched  # back before the file ever moved
            self.unwritten = None if in_force else decision(switched, judge.why(ev), plan.profile, plan.primary,
                                                            plan.fallback)
        return self._write()

    def _write(self) -> RoutingDecision | None:
        """Write ``unwritten``; on success it becomes the decision in force (``generation`` moves). A failure is
        logged once (the message names the file and what to check; no secrets) and retried at the next tick."""
        d, plan = self.unwritten, self.plan
        if d is None or plan is None:
            return None
        try:
            path = write_routing(d)
        except ConduitError as exc:
            if not self._write_failed:
                log.error("routing: %s; %s; retrying every %g s", exc.message, exc.hint or "check the state directory",
                          TICK_S)
            self._write_failed = True
            return None
        self.decision, self.unwritten, self._write_failed = d, None, False
        self.generation += 1
        log.warning("routing: tools go to the %s %s (%s); wrote %s", d.active,
                    plan.fallback.channel if d.active == "fallback" else plan.primary, d.why, path)
        return d

    def brief(self) -> dict[str, Any] | None:
        """``{"active", "since", "why"}`` of the decision in force for the current plan, or None."""
        d, plan = self.decision, self.plan
        if d is None or plan is None or (d.primary, d.profile) != (plan.primary, plan.profile):
            return {"active": "primary", "since": None, "why": "no switch yet"} if plan is not None else None
        return d.brief()


__all__ = ["NO_EVIDENCE", "PROBE_EVERY_S", "TICK_S", "Evidence", "Judge", "RoutePlan", "Router", "assess", "plan_for"]
