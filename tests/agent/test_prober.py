"""Channel classification against real local HTTP servers on 127.0.0.1 (no network beyond loopback)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from helpers.agentproc import Gateway

from conduit.adapters.base import Root
from conduit.daemon.agent.neighbours import neighbour_bases
from conduit.daemon.agent.prober import (
    AUTH_HINT,
    ChannelHealth,
    Prober,
    ProbeResult,
    ProbeTarget,
    Verdict,
    classify_exception,
    probe_once,
)

KEY = "sk-test-abcdefghijklmnop-c3f9"


@pytest.fixture
def gateway() -> Iterator[Any]:
    made: list[Gateway] = []

    def make(routes: dict[str, int], hang: bool = False) -> Gateway:
        g = Gateway(routes, hang)
        made.append(g)
        return g

    yield make
    for g in made:
        g.close()


def probe(target: ProbeTarget) -> ProbeResult:
    async def go() -> ProbeResult:
        async with httpx.AsyncClient(trust_env=False) as client:
            return await probe_once(client, target)

    return asyncio.run(go())


def target(url: str, protocol: str = "openai", auth: str = "bearer", timeout: float | None = 5.0) -> ProbeTarget:
    return ProbeTarget(channel="gw", protocol=protocol, root=Root(url), key=KEY, auth=auth,  # type: ignore[arg-type]
                       timeout_s=timeout)


def test_ok_openai_sends_bearer(gateway: Any) -> None:
    g = gateway({"/api/v1/models": 200})
    r = probe(target(g.url + "/api"))
    assert r.verdict is Verdict.OK and r.status == 200
    assert r.url == g.url + "/api/v1/models"
    assert g.seen[0][1]["authorization"] == f"Bearer {KEY}"
    assert "x-api-key" not in g.seen[0][1]


def test_ok_anthropic_sends_x_api_key_and_version(gateway: Any) -> None:
    g = gateway({"/anthropic/v1/models": 200})
    r = probe(target(g.url + "/anthropic", protocol="anthropic", auth="x-api-key"))
    assert r.verdict is Verdict.OK
    headers = g.seen[0][1]
    assert headers["x-api-key"] == KEY and headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in headers


@pytest.mark.parametrize("status", [401, 403])
def test_auth(gateway: Any, status: int) -> None:
    g = gateway({"/v1/models": status})
    r = probe(target(g.url))
    assert r.verdict is Verdict.AUTH and r.status == status
    assert AUTH_HINT in r.message
    assert KEY not in repr(r) and KEY not in str(r.to_json())


def test_404_names_the_working_base(gateway: Any) -> None:
    # The gateway serves /v1/models, but the profile says /api: the probe asks /api/v1/models (404).
    g = gateway({"/v1/models": 200})
    r = probe(target(g.url + "/api"))
    assert r.verdict is Verdict.PATH and r.status == 404
    assert r.working_base == g.url + "/v1"
    assert r.hint == f"set the channel's base_url to {g.url}"
    assert [p for p, _ in g.seen] == ["/api/v1/models", "/api/models", "/api/v1/v1/models", "/v1/models"]


def test_404_anthropic_without_v1_prefix(gateway: Any) -> None:
    # Root typed with a doubled /v1 for an Anthropic client: /v1/v1/models 404s, the root itself works.
    g = gateway({"/v1/models": 200})
    r = probe(target(g.url + "/v1", protocol="anthropic", auth="x-api-key"))
    assert r.verdict is Verdict.PATH and r.working_base == g.url


def test_404_nothing_nearby(gateway: Any) -> None:
    g = gateway({})
    r = probe(target(g.url + "/api"))
    assert r.verdict is Verdict.PATH and r.working_base is None
    assert "no neighbouring base URL" in (r.hint or "")


def test_rate_limited_and_server_error(gateway: Any) -> None:
    g = gateway({"/a/v1/models": 429, "/b/v1/models": 500, "/c/v1/models": 503, "/d/v1/models": 418})
    assert probe(target(g.url + "/a")).verdict is Verdict.RATE_LIMITED
    assert probe(target(g.url + "/b")).verdict is Verdict.SERVER_ERROR
    assert probe(target(g.url + "/c")).verdict is Verdict.SERVER_ERROR
    assert probe(target(g.url + "/d")).verdict is Verdict.HTTP_ERROR


def test_hanging_gateway_is_a_read_timeout(gateway: Any) -> None:
    g = gateway({}, hang=True)
    r = probe(target(g.url, timeout=0.5))
    assert r.verdict is Verdict.TIMEOUT and r.phase == "read" and r.status is None


def test_refused() -> None:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens on port now
    r = probe(target(f"http://127.0.0.1:{port}"))
    assert r.verdict is Verdict.REFUSED and r.status is None


def test_tls_against_a_plain_http_port(gateway: Any) -> None:
    g = gateway({"/v1/models": 200})
    r = probe(target(f"https://127.0.0.1:{g.port}"))
    assert r.verdict is Verdict.TLS, r


def test_exception_classification_dns_and_connect_timeout() -> None:
    dns = httpx.ConnectError("boom")
    dns.__cause__ = socket.gaierror(-2, "Name or service not known")
    assert classify_exception(dns)[0] is Verdict.DNS
    v, _, phase = classify_exception(httpx.ConnectTimeout("slow"))
    assert v is Verdict.TIMEOUT and phase == "connect"


def test_neighbour_bases() -> None:
    assert neighbour_bases("https://h/api/v1") == ["https://h/api", "https://h/api/v1/v1", "https://h/v1", "https://h"]
    assert neighbour_bases("https://h") == ["https://h/v1"]


def test_health_window_and_failures() -> None:
    h = ChannelHealth("gw", "openai", target("http://x"))
    for ms in (10, 20, 30, 40, 1000):
        h.record(ProbeResult(Verdict.OK, 200, ms, "u", "ok", at=1.0))
    h.record(ProbeResult(Verdict.SERVER_ERROR, 500, 50, "u", "bad", at=2.0))
    h.record(ProbeResult(Verdict.REFUSED, None, 1, "u", "refused", at=3.0))
    j = h.to_json()
    assert j["verdict"] == "refused" and not j["healthy"]
    assert j["consecutive_failures"] == 2 and j["last_success_at"] == 1.0
    # conduit.units.percentile (linear): p95 of 10, 20, 30, 40, 50, 1000 is 50 + 0.75 * 950
    assert j["latency_ms"]["p50"] == 35.0 and j["latency_ms"]["p95"] == 762.5 and j["latency_ms"]["samples"] == 6
    assert j["latency_ms"]["last"] is None  # no answer came, so no latency
    assert KEY not in str(j) and j["key"] == "sk-...c3f9"
    h.record(ProbeResult(Verdict.OK, 200, 5, "u", "ok", at=4.0))
    assert h.to_json()["consecutive_failures"] == 0


def test_target_repr_hides_the_key() -> None:
    t = target("http://x")
    assert KEY not in repr(t) and "sk-...c3f9" in repr(t)


def test_prober_loop_probes_periodically(gateway: Any) -> None:
    g = gateway({"/v1/models": 200})

    async def go() -> dict[str, Any]:
        p = Prober([target(g.url)], interval_s=0.1, jitter=0.5)
        p.start()
        try:
            for _ in range(200):
                await asyncio.sleep(0.05)
                if p.health["gw"]["openai"].probes >= 3:
                    break
            return p.snapshot()
        finally:
            await p.aclose()

    snap = asyncio.run(go())
    assert snap["gw"]["healthy"] and snap["gw"]["protocols"]["openai"]["probes"] >= 3
