"""The fallback judge (conduit.daemon.agent.routing): evidence from vLLM's state and the primary's probes, and the
hysteresis state machine fed with synthetic monotonic times; the Router writing the routing file only on a change."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from types import SimpleNamespace

import pytest

from conduit.daemon.agent.routing import Evidence, Judge, RoutePlan, Router, assess, plan_for
from conduit.daemon.config.fallback import FallbackSettings
from conduit.daemon.config.profile import load_profile
from conduit.daemon.config.routing import routing_path

FB = FallbackSettings(channel="hosted", model="m", after_s=3)
LOCAL = RoutePlan(profile="/p/profile.toml", primary="local", fallback=FB, supervised=True)
REMOTE = RoutePlan(profile="/p/profile.toml", primary="gw", fallback=FB, supervised=False)
BAD, GOOD, UNKNOWN = Evidence(False, "down"), Evidence(True, "up"), Evidence(None, "?")


@pytest.mark.parametrize(("plan", "state", "verdicts", "healthy"), [
    (LOCAL, "ready", {"openai": "ok", "anthropic": "ok"}, True),
    (LOCAL, "failed", {"openai": "ok"}, False),
    (LOCAL, "restarting", {"openai": "refused"}, False),
    (LOCAL, "unhealthy", {"openai": "ok"}, False),
    (LOCAL, "stopped", {}, False),
    (LOCAL, None, {}, False),
    (LOCAL, "ready", {"openai": "refused", "anthropic": "timeout"}, False),
    (LOCAL, "ready", {"openai": "ok", "anthropic": "refused"}, None),
    (LOCAL, "ready", {"openai": "pending"}, None),
    (REMOTE, None, {"openai": "ok"}, True),
    (REMOTE, None, {"openai": "server_error"}, False),
    (REMOTE, None, {"openai": "ok", "anthropic": "pending"}, None),
    (REMOTE, None, {"openai": "rate_limited"}, None),  # a 429 says nothing about the channel being down
    (REMOTE, None, {"openai": "config"}, None),  # a key source failing in the agent: the profile's problem
    (REMOTE, None, {"openai": "config", "anthropic": "refused"}, False),
    (REMOTE, None, {"openai": "rate_limited", "anthropic": "ok"}, None),
    (REMOTE, None, {"openai": "rate_limited", "anthropic": "refused"}, False),
    (LOCAL, "starting", {"openai": "refused"}, False),  # starting again after it was ready
])
def test_assess(plan: RoutePlan, state: str | None, verdicts: dict[str, str], healthy: bool | None) -> None:
    ev = assess(plan, state, verdicts)
    assert ev.healthy is healthy, ev
    assert ev.why


@pytest.mark.parametrize(("state", "healthy"), [("starting", None), ("failed", False), ("stopped", False)])
def test_first_start_is_no_evidence(state: str, healthy: bool | None) -> None:
    """Before vLLM was first ready only ``starting`` is spared (a loading model refuses probes)."""
    assert assess(LOCAL, state, {"openai": "refused"}, first_start=True).healthy is healthy


def test_switches_only_after_after_s_continuously() -> None:
    j = Judge(3.0)
    assert j.observe(0.0, BAD) is None
    assert j.observe(2.9, BAD) is None
    assert j.observe(2.95, GOOD) is None  # a good look resets the clock
    assert j.observe(3.0, BAD) is None
    assert j.observe(5.9, UNKNOWN) is None  # unknown neither resets nor counts as good
    assert j.observe(5.99, BAD) is None
    assert j.observe(6.0, BAD) == "fallback"
    assert j.active == "fallback"
    assert j.observe(6.1, GOOD) is None
    assert j.observe(8.0, BAD) is None  # back on the primary needs healthy for 3 s without a break
    assert j.observe(8.5, GOOD) is None
    assert j.observe(11.4, GOOD) is None
    assert j.observe(11.5, GOOD) == "primary"
    assert j.observe(20.0, GOOD) is None


def test_flapping_never_switches() -> None:
    j = Judge(2.0)
    for i in range(100):
        assert j.observe(i * 1.0, BAD if i % 2 else GOOD) is None
    assert j.active == "primary"


def _health(verdict: str) -> dict[str, object]:
    return {"openai": SimpleNamespace(verdict=verdict)}


def test_router_writes_only_on_change(temp_home: Path) -> None:
    r = Router()
    r.set_plan(LOCAL)
    assert r.brief() == {"active": "primary", "since": None, "why": "no switch yet"}
    path = routing_path()
    switched = [t for t in range(0, 31) if r.tick(t * 0.1, "failed", _health("refused")) is not None]
    assert switched == [30]
    assert path.exists()
    first = path.stat().st_mtime_ns, path.stat().st_ino
    doc = json.loads(path.read_text())
    assert doc["active"] == "fallback" and doc["primary"] == "local" and "failed" in doc["why"]
    for t in range(31, 60):  # still down: nothing written
        assert r.tick(t * 0.1, "failed", _health("refused")) is None
    assert (path.stat().st_mtime_ns, path.stat().st_ino) == first
    assert r.brief() is not None and r.brief()["active"] == "fallback"  # type: ignore[index]
    assert r.tick(6.0, "ready", _health("ok")) is None
    assert r.tick(9.0, "ready", _health("ok")) is not None
    assert json.loads(path.read_text())["active"] == "primary"


def test_router_resumes_the_decision_in_the_file(temp_home: Path) -> None:
    r = Router()
    r.set_plan(LOCAL)
    for t in range(0, 40):
        r.tick(t * 0.1, "failed", _health("refused"))
    again = Router()  # an agent restarted while on the fallback
    again.set_plan(LOCAL)
    assert again.judge is not None and again.judge.active == "fallback"
    other = Router()  # a plan for another primary ignores it
    other.set_plan(REMOTE)
    assert other.judge is not None and other.judge.active == "primary"


def test_router_boot_slow_load_never_switches(temp_home: Path) -> None:
    """A slowly loading model at the agent's first start: no switch, no file; a later restart does count."""
    r = Router()
    r.set_plan(LOCAL)
    assert all(r.tick(t * 0.5, "starting", _health("refused")) is None for t in range(100))
    assert not routing_path().exists() and r.judge is not None and r.judge.active == "primary"
    assert r.tick(50.0, "ready", _health("ok")) is None
    switched = [t for t in range(0, 40) if r.tick(51.0 + t * 0.1, "starting", _health("refused")) is not None]
    assert switched == [30]


def test_router_not_running_before_the_first_launch_does_not_shorten_the_next_outage(temp_home: Path) -> None:
    """The agent starts before its vLLM does (``stopped``: down evidence), vLLM turns ready while the probes of it
    are not back yet (no evidence), then dies: the switch still waits ``after_s`` from the death, not from the
    agent's start."""
    r = Router()
    r.set_plan(LOCAL)
    assert r.tick(0.0, "stopped", {}) is None
    assert r.tick(0.5, "starting", _health("pending")) is None
    assert r.tick(1.0, "ready", _health("pending")) is None
    switched = [t for t in range(0, 40) if r.tick(2.0 + t * 0.1, "failed", _health("refused")) is not None]
    assert switched == [30]  # 3 s (after_s) after the death


def test_router_write_failure_is_retried_and_status_waits(temp_home: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A write that fails leaves /v1/status on the decision the file holds, is logged once, lands later."""
    caplog.set_level(logging.ERROR, logger="conduit.agent")
    r = Router()
    r.set_plan(LOCAL)
    path = routing_path()
    path.mkdir(parents=True)  # the rename onto routing.json fails, even for root
    gen = r.generation
    assert all(r.tick(t * 0.1, "failed", _health("refused")) is None for t in range(0, 60))
    assert r.judge is not None and r.judge.active == "fallback" and r.unwritten is not None
    assert r.brief() == {"active": "primary", "since": None, "why": "no switch yet"} and r.generation == gen
    assert len([rec for rec in caplog.records if "cannot write the routing decision" in rec.getMessage()]) == 1
    path.rmdir()
    d = r.tick(6.1, "failed", _health("refused"))
    assert d is not None and d.active == "fallback" and r.unwritten is None
    assert json.loads(path.read_text())["active"] == "fallback"
    assert r.brief() is not None and r.brief()["active"] == "fallback" and r.generation == gen + 1  # type: ignore[index]
    assert r.tick(6.2, "failed", _health("refused")) is None  # written once


def test_router_probe_cadence() -> None:
    r = Router()
    assert not r.wants_probe(0.0)  # no plan: nothing to probe
    r.set_plan(REMOTE)
    assert not any(r.wants_probe(10.0 + t) for t in range(5))  # hosted: the prober's own interval
    r.set_plan(LOCAL)
    assert r.wants_probe(10.0)
    assert not r.wants_probe(10.5)
    assert r.wants_probe(11.0)
    assert r.wants_probe(11.2, "ready")  # vLLM's state moved: probe at once


def test_plan_for(temp_home: Path) -> None:
    p = temp_home / "profile.toml"
    p.write_text('version = 1\nchannel = "gw"\nmodel = "m"\n[channels.gw]\nbase_url = "http://127.0.0.1:9"\n'
                 '[channels.h]\nbase_url = "http://127.0.0.1:8"\n')
    assert plan_for(load_profile(p), str(p)) is None
    p.write_text(p.read_text() + '[fallback]\nchannel = "h"\nmodel = "x"\n')
    plan = plan_for(load_profile(p), str(p))
    assert plan is not None and plan.primary == "gw" and not plan.supervised and plan.fallback.after_s == 20
