"""Channel health: a periodic, jittered, token-free probe of every channel and protocol it speaks.

What is requested (no tokens are spent; source: the OpenAI and Anthropic "list models" endpoints):
- OpenAI protocol: ``GET <root>/<version>/models`` (the base an OpenAI SDK would use, plus ``/models``);
- Anthropic protocol: ``GET <root>/v1/models`` with ``anthropic-version: 2023-06-01``;
the key goes in the channel's auth header style (``Authorization: Bearer`` or ``x-api-key``).

Verdicts (``Verdict``), from the answer or the failure:
    ok            2xx
    auth          401 / 403: "the key was refused; check for whitespace or a revoked key"; tried once in the
                  other header style, and when that answers 2xx the hint names it (``auth = "x-api-key"``)
    path          404: the neighbouring base URLs (with and without ``/v1``, without ``/api``) are tried and
                  the first one that answers is named in ``working_base``
    rate_limited  429
    server_error  5xx
    http_error    any other status
    timeout       no whole answer within the channel's ``timeout`` (default 10 s), a drip included; ``phase``
                  says ``connect``, ``read`` (no headers) or ``body`` (the body did not finish)
    dns           the host name does not resolve
    tls           the TLS handshake or certificate failed
    refused       nothing listens on the port
    error         anything else (message says what)

Keys never appear in results, reprs or logs; ``ProbeTarget`` shows a fingerprint.
"""

from __future__ import annotations

import asyncio
import enum
import random
import socket
import ssl
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import httpx

from conduit.adapters.base import Root
from conduit.daemon.agent.neighbours import find_working
from conduit.daemon.agent.otherauth import other_style, retry_status, works_as
from conduit.daemon.catalog.models import remember as remember_models
from conduit.daemon.config.gateway import GatewayTimeout, aread_bounded, auth_headers
from conduit.daemon.config.profile import LoadedProfile, load_profile
from conduit.daemon.config.resolve import Resolver
from conduit.errors import ConduitError
from conduit.redact import fingerprint
from conduit.text import one_line
from conduit.units import percentile

AUTH_HINT = "the key was refused; check for whitespace or a revoked key"
DEFAULT_TIMEOUT_S = 10.0
"""A probe's bound (seconds) when the channel sets no ``timeout``: the whole request, a drip included."""
MODELS_MAX_BYTES = 8 << 20
"""At most this much of a ``/models`` answer is read, decoded: 8 MiB (a hosted list is a few MiB; a longer one
is cached by ``conduit models``, whose cap is the catalog's 16 MiB). Only an OpenAI answer is kept (the model
list); an Anthropic one is read to its end and dropped, so a probe of a 512 MiB answer or a gzip bomb costs the
agent at most this much memory."""


class Verdict(enum.StrEnum):
    """How one probe ended (see the module docstring)."""

    OK = "ok"
    AUTH = "auth"
    PATH = "path"
    RATE_LIMITED = "rate_limited"
    SERVER_ERROR = "server_error"
    HTTP_ERROR = "http_error"
    TIMEOUT = "timeout"
    DNS = "dns"
    TLS = "tls"
    REFUSED = "refused"
    ERROR = "error"
    CONFIG = "config"  # the channel could not be resolved from the profile (e.g. its key source failed)
    PENDING = "pending"  # not probed yet


@dataclass(frozen=True)
class ProbeTarget:
    """One channel x protocol to probe.

    Attributes:
        channel: the channel's name in the profile.
        protocol: ``openai`` or ``anthropic``.
        root: the channel's normalized root for that protocol.
        key: the cleaned key, or None (sent nowhere else; never shown).
        auth: ``bearer`` or ``x-api-key``.
        timeout_s: probe timeout, seconds, over the whole request (None: ``DEFAULT_TIMEOUT_S``).
    """

    channel: str
    protocol: Literal["openai", "anthropic"]
    root: Root
    key: str | None = field(default=None, repr=False)
    auth: Literal["bearer", "x-api-key"] = "bearer"
    timeout_s: float | None = None

    def __repr__(self) -> str:
        return (f"ProbeTarget(channel={self.channel!r}, protocol={self.protocol!r}, root={self.root.url!r}, "
                f"key={fingerprint(self.key)!r}, auth={self.auth!r})")

    @property
    def base(self) -> str:
        """The base URL this protocol's clients use (OpenAI: root/v1; Anthropic: root)."""
        return self.root.openai_base() if self.protocol == "openai" else self.root.anthropic_base()

    @property
    def suffix(self) -> str:
        """What the probe appends to a base: ``/models`` (OpenAI) or ``/v1/models`` (Anthropic)."""
        return "/models" if self.protocol == "openai" else "/v1/models"

    def headers(self) -> dict[str, str]:
        """Request headers: the auth header in the channel's style, plus anthropic-version for Anthropic."""
        return {"accept": "application/json", "user-agent": "conduit-agent",
                **auth_headers(self.protocol, self.key, self.auth)}


@dataclass(frozen=True)
class ProbeResult:
    """The outcome of one probe.

    Attributes:
        verdict: see ``Verdict``.
        status: HTTP status, or None when no answer came.
        latency_ms: time to the answer (or failure), milliseconds.
        url: the URL requested.
        message: one line for people.
        hint: what to do, or None.
        phase: for timeouts, ``connect``, ``read`` or ``body``.
        working_base: for ``path``, the neighbouring base URL that answered, or None.
        at: Unix time the probe finished, seconds.
    """

    verdict: Verdict
    status: int | None
    latency_ms: float
    url: str
    message: str
    hint: str | None = None
    phase: str | None = None
    working_base: str | None = None
    at: float = 0.0

    def to_json(self) -> dict[str, Any]:
        """JSON-able dict (verdict as its string)."""
        return {"verdict": str(self.verdict), "status": self.status, "latency_ms": round(self.latency_ms, 2),
                "url": self.url, "message": self.message, "hint": self.hint, "phase": self.phase,
                "working_base": self.working_base, "at": self.at}


def _chain(exc: BaseException) -> Iterable[BaseException]:
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        yield cur
        cur = cur.__cause__ or cur.__context__


def classify_exception(exc: BaseException) -> tuple[Verdict, str, str | None]:
    """Map an httpx failure to (verdict, message, phase). Looks through the exception chain for the OS error."""
    if isinstance(exc, GatewayTimeout):
        return Verdict.TIMEOUT, str(exc), exc.phase
    if isinstance(exc, httpx.ConnectTimeout):
        return Verdict.TIMEOUT, "no connection within the timeout", "connect"
    if isinstance(exc, httpx.ReadTimeout):
        return Verdict.TIMEOUT, "connected, but no answer within the timeout", "read"
    if isinstance(exc, httpx.TimeoutException):
        return Verdict.TIMEOUT, f"timed out ({type(exc).__name__})", "write" if isinstance(exc, httpx.WriteTimeout) else "pool"
    for e in _chain(exc):
        if isinstance(e, socket.gaierror):
            return Verdict.DNS, f"the host name does not resolve ({e.strerror or e})", None
        if isinstance(e, ssl.SSLError):
            return Verdict.TLS, f"TLS failed: {getattr(e, 'reason', None) or e}", None
        if isinstance(e, ConnectionRefusedError):
            return Verdict.REFUSED, "connection refused: nothing listens there", None
    text = str(exc)
    low = text.lower()
    if "name or service not known" in low or "nodename nor servname" in low or "temporary failure in name resolution" in low:
        return Verdict.DNS, f"the host name does not resolve ({text})", None
    if "certificate" in low or "ssl" in low or "tls" in low:
        return Verdict.TLS, f"TLS failed: {text}", None
    if "connection refused" in low or "errno 111" in low:
        return Verdict.REFUSED, "connection refused: nothing listens there", None
    return Verdict.ERROR, f"{type(exc).__name__}: {text}" if text else type(exc).__name__, None


def classify_status(status: int) -> tuple[Verdict, str, str | None]:
    """Map an HTTP status to (verdict, message, hint)."""
    if 200 <= status < 300:
        return Verdict.OK, f"HTTP {status}", None
    if status in (401, 403):
        return Verdict.AUTH, f"HTTP {status}: {AUTH_HINT}", "rotate or re-paste the key (`conduit key set`)"
    if status == 404:
        return Verdict.PATH, "HTTP 404: no models endpoint under this base URL", None
    if status == 429:
        return Verdict.RATE_LIMITED, "HTTP 429: rate limited", "wait, or check the account's quota"
    if status >= 500:
        return Verdict.SERVER_ERROR, f"HTTP {status}: the gateway failed", "the gateway is having trouble; retry later"
    return Verdict.HTTP_ERROR, f"HTTP {status}", None


async def probe_once(client: httpx.AsyncClient, target: ProbeTarget) -> ProbeResult:
    """Probe one target once (plus neighbours on 404, the other auth style on 401/403). Never raises for
    network trouble. Bounded (``conduit.daemon.config.gateway.aread_bounded``): the request as a whole within
    the target's timeout (``DEFAULT_TIMEOUT_S``), a drip included (verdict ``timeout``, phase ``body``); the
    follow-up requests share one more such timeout, so a probe ends within twice it; the answer is read to its
    end (a body that never ends is a timeout), at most ``MODELS_MAX_BYTES`` of it after decoding (an OpenAI
    answer is cached as the channel's model list); the follow-ups read only their status.

    Args:
        client: an ``httpx.AsyncClient`` (no base_url; redirects not followed).
        target: what to probe.
    """
    timeout = target.timeout_s or DEFAULT_TIMEOUT_S
    url = target.base + target.suffix
    t0 = time.perf_counter()
    try:
        got = await aread_bounded(client, "GET", url, headers=target.headers(), deadline_s=timeout,
                                  max_bytes=MODELS_MAX_BYTES, keep=target.protocol == "openai")
    except (httpx.HTTPError, OSError) as exc:
        verdict, msg, phase = classify_exception(exc)
        return ProbeResult(verdict, None, (time.perf_counter() - t0) * 1000, url, msg, phase=phase, at=time.time())
    latency = (time.perf_counter() - t0) * 1000
    verdict, msg, hint = classify_status(got.status)
    if verdict is Verdict.OK and got.truncated:
        msg += f"; the answer is not a model list ({got.problem})"
    elif verdict is Verdict.OK and target.protocol == "openai":
        # `conduit models`, tools' context settings; parse + write off the loop (a primary is probed every 1 s)
        await asyncio.to_thread(remember_models, target.channel, target.base, got.body)
    got.body = bytearray()  # the model list is cached; the bytes need not live as long as the result
    follow_until = time.monotonic() + timeout
    working = None
    if verdict is Verdict.PATH:
        working, msg, hint = await find_working(client, target.base, target.suffix, target.headers(),
                                                target.protocol, follow_until)
    if verdict is Verdict.AUTH and target.key:
        alt = replace(target, auth=other_style(target.auth))
        again = await retry_status(client, url, alt.headers(), max(0.05, follow_until - time.monotonic()))
        if again is not None and again < 300:
            msg, hint = works_as(got.status, target.auth, alt.auth, again, target.channel)
    return ProbeResult(verdict, got.status, latency, url, msg, hint=hint, working_base=working, at=time.time())


class ChannelHealth:
    """The running record of one channel x protocol.

    Attributes:
        target: what is probed (None for a channel that could not be resolved).
        window: latencies kept for p50/p95, most recent ``window`` probes.
    """

    def __init__(self, channel: str, protocol: str, target: ProbeTarget | None, window: int = 50) -> None:
        self.channel = channel
        self.protocol = protocol
        self.target = target
        self.last: ProbeResult | None = None
        self.latencies: deque[float] = deque(maxlen=window)
        self.consecutive_failures = 0
        self.last_success_at: float | None = None
        self.probes = 0
        self.config_error: str | None = None

    def record(self, result: ProbeResult) -> None:
        """Fold one result in: latency only for answers that came back, failures counted until an ok."""
        self.last = result
        self.probes += 1
        if result.status is not None:
            self.latencies.append(result.latency_ms)
        if result.verdict is Verdict.OK:
            self.consecutive_failures = 0
            self.last_success_at = result.at
        else:
            self.consecutive_failures += 1

    @property
    def verdict(self) -> Verdict:
        """The latest verdict (``config`` or ``pending`` before any probe)."""
        if self.config_error:
            return Verdict.CONFIG
        return self.last.verdict if self.last else Verdict.PENDING

    def to_json(self) -> dict[str, Any]:
        """``{"protocol", "url", "verdict", "healthy", "latency_ms": {"last","p50","p95","samples"}, ...}``."""
        lat = list(self.latencies)

        def pct(q: float) -> float | None:  # conduit.units.percentile, as conduit bench's
            value = percentile(lat, q)
            return round(value, 2) if value is not None else None

        last = self.last
        return {
            "protocol": self.protocol,
            "url": (self.target.base + self.target.suffix) if self.target else None,
            "auth": self.target.auth if self.target else None,
            "key": fingerprint(self.target.key) if self.target else None,
            "verdict": str(self.verdict),
            "healthy": self.verdict is Verdict.OK,
            "status": last.status if last else None,
            "message": one_line(self.config_error or (last.message if last else "not probed yet")),
            "hint": one_line(last.hint) if last and last.hint else None,
            "phase": last.phase if last else None,
            "working_base": last.working_base if last else None,
            "latency_ms": {"last": round(last.latency_ms, 2) if last and last.status is not None else None,
                           "p50": pct(50), "p95": pct(95),
                           "samples": len(lat)},
            "consecutive_failures": self.consecutive_failures,
            "last_success_at": self.last_success_at,
            "last_probe_at": last.at if last else None,
            "probes": self.probes,
        }


class Prober:
    """Probes every target on its own jittered schedule, on the agent's event loop.

    Args:
        targets: what to probe.
        problems: channel name -> why it could not be resolved (shown with verdict ``config``).
        interval_s: mean seconds between probes of one target; each wait is jittered by +-``jitter`` (share).
        client: an ``httpx.AsyncClient`` to share; one is made (and closed by ``aclose``) when None.

    Attributes:
        health: channel -> protocol -> ``ChannelHealth``.
        generation: counts every change to what ``snapshot`` returns (new targets, a recorded probe), so a
            reader may keep the snapshot it made until the count moves.
    """

    def __init__(self, targets: Iterable[ProbeTarget], problems: dict[str, str] | None = None,
                 interval_s: float = 60.0, jitter: float = 0.2, client: httpx.AsyncClient | None = None) -> None:
        self.interval_s = interval_s
        self.jitter = jitter
        self._client = client
        self._own_client = client is None
        self.health: dict[str, dict[str, ChannelHealth]] = {}
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self.generation = 0
        self.set_targets(targets, problems or {})

    def set_targets(self, targets: Iterable[ProbeTarget], problems: dict[str, str]) -> None:
        """Replace what is probed, keeping the history of targets that did not change."""
        old = self.health
        new: dict[str, dict[str, ChannelHealth]] = {}
        for t in targets:
            prev = old.get(t.channel, {}).get(t.protocol)
            h = prev if prev is not None and prev.target == t else ChannelHealth(t.channel, t.protocol, t)
            new.setdefault(t.channel, {})[t.protocol] = h
        for name, why in problems.items():
            h = ChannelHealth(name, "-", None)
            h.config_error = why
            new.setdefault(name, {})["-"] = h
        self.health = new
        self.generation += 1

    def targets(self) -> list[ProbeTarget]:
        """What is probed now."""
        return [h.target for protos in self.health.values() for h in protos.values() if h.target is not None]

    @property
    def client(self) -> httpx.AsyncClient:
        """The shared HTTP client (created on first use, on the running loop)."""
        if self._client is None:
            self._client = httpx.AsyncClient(follow_redirects=False, trust_env=False,
                                             limits=httpx.Limits(max_connections=50, max_keepalive_connections=10))
        return self._client

    async def probe(self, channel: str, protocol: str) -> ProbeResult | None:
        """Probe one channel x protocol now (one at a time per target) and record the result."""
        h = self.health.get(channel, {}).get(protocol)
        if h is None or h.target is None:
            return None
        lock = self._locks.setdefault((channel, protocol), asyncio.Lock())
        async with lock:
            result = await probe_once(self.client, h.target)
        h.record(result)
        self.generation += 1
        return result

    async def probe_channel(self, channel: str) -> list[ProbeResult]:
        """Probe every protocol of one channel now, concurrently. Raises ConduitError for an unknown name."""
        if channel not in self.health:
            raise ConduitError(f"no channel named {channel!r}",
                               hint=f"known channels: {', '.join(sorted(self.health)) or '(none)'}")
        results = await asyncio.gather(*(self.probe(channel, p) for p in self.health[channel]))
        return [r for r in results if r is not None]

    async def _loop_one(self, channel: str, protocol: str) -> None:
        await asyncio.sleep(random.uniform(0, min(2.0, self.interval_s)))  # spread the first round
        while True:
            h = self.health.get(channel, {}).get(protocol)
            if h is None or h.target is None:
                return
            await self.probe(channel, protocol)
            factor = 1 + random.uniform(-self.jitter, self.jitter)
            await asyncio.sleep(max(0.05, self.interval_s * factor))

    def start(self) -> None:
        """(Re)start one background task per target on the running loop."""
        self.stop()
        for channel, protos in self.health.items():
            for protocol, h in protos.items():
                if h.target is not None:
                    self._tasks.append(asyncio.create_task(self._loop_one(channel, protocol),
                                                           name=f"probe:{channel}:{protocol}"))

    def stop(self) -> None:
        """Cancel the background tasks."""
        for t in self._tasks:
            t.cancel()
        self._tasks = []

    async def aclose(self) -> None:
        """Stop probing and close the client this prober made."""
        self.stop()
        if self._own_client and self._client is not None:
            await self._client.aclose()
            self._client = None

    def snapshot(self) -> dict[str, Any]:
        """``{channel: {"healthy": bool, "verdict": str, "protocols": {protocol: ChannelHealth.to_json()}}}``;
        a channel is healthy when every protocol's last probe was ok."""
        out: dict[str, Any] = {}
        for name in sorted(self.health):
            protos = {p: h.to_json() for p, h in self.health[name].items()}
            verdicts = [v["verdict"] for v in protos.values()]
            worst = next((v for v in verdicts if v != "ok"), "ok")
            out[name] = {"healthy": all(v == "ok" for v in verdicts) and bool(verdicts),
                         "verdict": worst, "protocols": protos}
        return out


def targets_from_profile(path: str | None = None) -> tuple[list[ProbeTarget], dict[str, str], str | None]:
    """Build probe targets from the profile through ``conduit.daemon.config.resolve.resolve_channel``.

    Returns:
        (targets, problems, note): ``problems`` maps a channel that could not be resolved (key source failed,
        ...) to the reason; ``note`` says why there are no channels at all (no profile, unreadable profile), else
        None. Never raises.
    """
    try:
        profile = load_profile(path)
    except ConduitError as exc:
        return [], {}, str(exc)
    except OSError as exc:
        return [], {}, f"cannot read the profile: {exc}"
    targets, problems = targets_for(profile)
    return targets, problems, None


def targets_for(profile: LoadedProfile) -> tuple[list[ProbeTarget], dict[str, str]]:
    """Probe targets of an already loaded profile, one per channel x protocol, including the implicit
    ``local`` channel of a ``[vllm]`` table. Returns ``(targets, problems)`` as ``targets_from_profile``
    does. Never raises."""
    resolver = Resolver(profile)
    targets: list[ProbeTarget] = []
    problems: dict[str, str] = {}
    for name in profile.channels:
        try:
            rc = resolver.channel(name)
        except ConduitError as exc:
            problems[name] = str(exc)
            continue
        for protocol, root in rc.roots.items():
            targets.append(ProbeTarget(channel=name, protocol=protocol, root=root, key=rc.key,  # type: ignore[arg-type]
                                       auth=rc.auth, timeout_s=rc.timeout_s))
    return targets, problems
