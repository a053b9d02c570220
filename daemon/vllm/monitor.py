"""Per-launch watchers: the leader's exit, readiness, health, and ``/metrics`` scrapes.

Each launch gets two tasks, both posting typed messages (``conduit.daemon.vllm.messages``) to the
supervisor's loop and changing no state themselves:

- ``watch_exit``: ``await proc.wait()`` (delivered by the kernel's SIGCHLD) for our own child; for an adopted
  process (not our child) a pidfd, or polling where there is none. Any exit counts, whatever its status: vLLM
  can exit 0 after its engine died.
- ``track``: every ``TRACK_INTERVAL_S`` the launch's ``tree.Tree`` is sampled (in a worker thread), so a
  descendant that leaves the group (``setsid()``) is known before its parent can exit and orphan it.
- ``Monitor.run``: for an ``mp`` follower (``--headless``, no HTTP server) ready at once, the exit watcher being
  its only check; else until ready, ``/health`` 200 **and** ``/v1/models`` listing the served name (every 0.25 s, up
  to ``startup_timeout_s``); then ``/health`` every ``health_interval_s`` and ``/metrics`` every
  ``metrics_interval_s`` while healthy, and the log's size check.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import httpx

from conduit.daemon.config.vllm import VllmSettings
from conduit.daemon.vllm.cluster import headless
from conduit.daemon.vllm.messages import Exited, Health, Launch, Message, Ready, StartTimeout
from conduit.daemon.vllm.metrics import MetricsTracker
from conduit.daemon.vllm.process import wait_pid_exit

#: Seconds between readiness checks while starting.
READY_POLL_S = 0.25
#: Seconds between two samples of a launch's process tree.
TRACK_INTERVAL_S = 1.0


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
            r = await client.get(s.base_url + "/health")
            if r.status_code != 200:
                return False, f"/health answered {r.status_code}"
            r = await client.get(s.base_url + "/v1/models", headers=self._headers())
            if r.status_code != 200:
                return False, f"/v1/models answered {r.status_code}"
            names = [m.get("id") for m in r.json().get("data", [])]
        except (httpx.HTTPError, ValueError, AttributeError) as exc:
            return False, f"{type(exc).__name__}: {exc}"[:200]
        if s.name not in names:
            return False, f"/v1/models lists {names}, not {s.name!r}"
        return True, "ready"

    async def run(self, cur: Launch, ready: bool) -> None:
        """Wait for readiness (unless ``ready``), then poll health and metrics until cancelled."""
        s = self._settings()  # intervals as at launch, as before the split
        if headless(s):  # an mp follower serves no HTTP: alive is ready (``watch_exit`` sees its exit)
            if not ready:
                self._post(Ready(cur.gen))
            while True:
                await asyncio.sleep(s.health_interval_s)
                self._on_tick()
        async with _client() as client:
            if not ready and not await self._wait_ready(client, cur, s.startup_timeout_s):
                return
            next_metrics = 0.0
            while True:
                await asyncio.sleep(min(s.health_interval_s, s.metrics_interval_s))
                try:
                    r = await client.get(s.base_url + "/health")
                    ok, detail = r.status_code == 200, f"/health answered {r.status_code}"
                except httpx.HTTPError as exc:
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
            r = await client.get(self._settings().base_url + "/metrics")
            if r.status_code == 200:
                self._metrics.update(r.text, time.monotonic())
        except (httpx.HTTPError, ValueError):
            pass
        return self._metrics.last
