"""Per-launch watchers: the leader's exit, readiness, health, and ``/metrics`` scrapes.

Each launch gets two tasks, both posting typed messages (``conduit.daemon.vllm.messages``) to the
supervisor's loop and changing no state themselves:

- ``watch_exit``: ``await proc.wait()`` (delivered by the kernel's SIGCHLD) for our own child; for an adopted
  process (not our child) a pidfd, or polling where there is none. Any exit counts, whatever its status: vLLM
  can exit 0 after its engine died.
- ``track``: every ``TRACK_INTERVAL_S`` the launch's ``tree.Tree`` is sampled (in a worker thread), so a
  descendant that leaves the group (``setsid()``) is known before its parent can exit and orphan it.
- ``Monitor.run``: for an ``mp`` follower (``--headless``, no HTTP server) ready once its log says vLLM launched
  its headless executor (``follower.wait_launched``), then its health is whether the head's master port accepts
  connections (``follower.head_reachable``); else until ready, ``/health`` 200 **and** ``/v1/models`` listing
  the served name (every 0.25 s, up to ``startup_timeout_s``); then ``/health`` every ``health_interval_s``
  and ``/metrics`` every ``metrics_interval_s`` while healthy, and the log's size check.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

import httpx

from conduit.daemon.config.gateway import GatewayAnswer, aread_bounded
from conduit.daemon.config.vllm import VllmSettings
from conduit.daemon.vllm.follower import follower_of, head_reachable, wait_launched
from conduit.daemon.vllm.messages import Exited, Health, Launch, Message, Ready, StartTimeout
from conduit.daemon.vllm.metrics import MetricsTracker
from conduit.daemon.vllm.process import wait_pid_exit
from conduit.text import one_line

#: Seconds between readiness checks while starting.
READY_POLL_S = 0.25
#: Seconds between two samples of a launch's process tree.
TRACK_INTERVAL_S = 1.0


ENGINE_DEADLINE_S = 5.0
"""Each request to the engine (``/health``, ``/v1/models``, ``/metrics``) ends within this (seconds), whole."""
MODELS_MAX_BYTES = 1 << 20
"""At most this much of the engine's ``/v1/models`` answer is read (decoded): 1 MiB (it lists one model)."""
METRICS_MAX_BYTES = 8 << 20
"""At most this much of ``/metrics`` is read (decoded): 8 MiB (vLLM's is a few hundred KiB)."""


async def _get(client: httpx.AsyncClient, url: str, max_bytes: int, headers: dict[str, str] | None = None) -> GatewayAnswer:
    """One bounded GET of the engine (``conduit.daemon.config.gateway.aread_bounded``). Raises httpx.HTTPError,
    OSError (``GatewayTimeout`` included)."""
    return await aread_bounded(client, "GET", url, headers=headers or {}, max_bytes=max_bytes,
                               deadline_s=ENGINE_DEADLINE_S)


def _client() -> httpx.AsyncClient:
    """A loopback client: 5 s timeout, no proxy from the environment (a proxy must not see the local server)."""
    return httpx.AsyncClient(timeout=httpx.Timeout(5.0), trust_env=False)


async def watch_exit(cur: Launch, post: Callable[[Message], None]) -> None:
    """Post ``Exited`` when ``cur``'s leader exits (status None for an adopted process)."""
    if cur.proc is not None:
        code: int | None = await cur.proc.wait()
    else:
        await wait_pid_exit(cur.pid)
        code = None
    post(Exited(cur.gen, code, time.monotonic()))


async def track(cur: Launch, interval_s: float = TRACK_INTERVAL_S) -> None:
    """Sample ``cur.tree`` now and every ``interval_s`` seconds until cancelled (nothing without a tree)."""
    tree = cur.tree
    if tree is None:
        return
    while True:
        await asyncio.to_thread(tree.sample)
        await asyncio.sleep(interval_s)


class Monitor:
    """Polls one supervised server over HTTP.

    Args:
        settings: returns the supervisor's current settings (they may change without a relaunch).
        post: puts a message on the supervisor's queue.
        metrics: where ``/metrics`` scrapes go.
        on_tick: called after every health poll (the supervisor checks the log's size there).
    """

    def __init__(self, settings: Callable[[], VllmSettings], post: Callable[[Message], None],
                 metrics: MetricsTracker, on_tick: Callable[[], None]) -> None:
        self._settings = settings
        self._post = post
        self._metrics = metrics
        self._on_tick = on_tick

    def _headers(self) -> dict[str, str]:
        s = self._settings()
        return {"Authorization": f"Bearer {s.api_key.get_secret_value()}"} if s.api_key else {}

    async def check_ready(self, client: httpx.AsyncClient | None = None) -> tuple[bool, str]:
        """``(True, "ready")`` when ``/health`` is 200 and ``/v1/models`` lists the served name, else
        ``(False, why)``. Never raises for HTTP trouble."""
        if client is None:
            async with _client() as own:
                return await self.check_ready(own)
        s = self._settings()
        try:
            r = await _get(client, s.base_url + "/health", 0)
            if r.status != 200:
                return False, f"/health answered {r.status}"
            r = await _get(client, s.base_url + "/v1/models", MODELS_MAX_BYTES, self._headers())
            if r.status != 200:
                return False, f"/v1/models answered {r.status}"
            names = [m.get("id") for m in json.loads(r.body).get("data", [])]
        except (httpx.HTTPError, OSError, ValueError, AttributeError, RecursionError) as exc:
            return False, one_line(f"{type(exc).__name__}: {exc}", 200)
        if s.name not in names:
            return False, one_line(f"/v1/models lists {names}, not {s.name!r}", 300)
        return True, "ready"

    async def run(self, cur: Launch, ready: bool) -> None:
        """Wait for readiness (unless ``ready``), then poll health and metrics until cancelled."""
        s = self._settings()  # intervals as at launch, as before the split
        head = follower_of(s)
        if head is not None:  # an mp follower serves no HTTP: ready once its log says it launched
            if not ready:
                if not await wait_launched(cur.log_path, s.startup_timeout_s):
                    self._post(StartTimeout(cur.gen))
                    return
                self._post(Ready(cur.gen))
            while True:  # its health: the head's master port answers (``conduit.daemon.vllm.follower``)
                await asyncio.sleep(s.health_interval_s)
                self._post(Health(cur.gen, *await head_reachable(*head)))
                self._on_tick()
        async with _client() as client:
            if not ready and not await self._wait_ready(client, cur, s.startup_timeout_s):
                return
            next_metrics = 0.0
            while True:
                await asyncio.sleep(min(s.health_interval_s, s.metrics_interval_s))
                try:
                    r = await _get(client, s.base_url + "/health", 0)
                    ok, detail = r.status == 200, f"/health answered {r.status}"
                except (httpx.HTTPError, OSError) as exc:
                    ok, detail = False, f"/health: {type(exc).__name__}"
                self._post(Health(cur.gen, ok, detail))
                now = time.monotonic()
                if ok and now >= next_metrics:
                    next_metrics = now + s.metrics_interval_s
                    await self.scrape(client)
                self._on_tick()

    async def _wait_ready(self, client: httpx.AsyncClient, cur: Launch, timeout_s: float) -> bool:
        """Post ``Ready`` and return True once ready; post ``StartTimeout`` and return False at the deadline."""
        deadline = time.monotonic() + timeout_s
        while True:
            ok, _ = await self.check_ready(client)
            if ok:
                self._post(Ready(cur.gen))
                return True
            if time.monotonic() >= deadline:
                self._post(StartTimeout(cur.gen))
                return False
            await asyncio.sleep(READY_POLL_S)

    async def scrape(self, client: httpx.AsyncClient | None = None) -> dict[str, Any] | None:
        """Scrape ``/metrics`` once into the tracker (HTTP errors ignored); returns the metrics snapshot."""
        if client is None:
            async with _client() as own:
                return await self.scrape(own)
        try:
            r = await _get(client, self._settings().base_url + "/metrics", METRICS_MAX_BYTES)
            if r.status == 200 and not r.truncated:
                self._metrics.update(r.body.decode("utf-8", "replace"), time.monotonic())
        except (httpx.HTTPError, OSError, ValueError):
            pass
        return self._metrics.last
