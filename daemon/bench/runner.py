"""Running a load test against one endpoint: a sweep's settings, one request, a level, a sweep.

asyncio and ``httpx.AsyncClient`` with one kept-alive connection per worker (``open_clients``); the
schedule is ``arrivals.closed_loop``; the bytes on the wire are ``wire``'s; the numbers are ``stats``'.

Error kinds (``stats.ErrorKind``), translated at this boundary from httpx's exception tree::

    connect         no connection: refused, DNS, unreachable, unsupported scheme, proxy failure
    timeout         connect, write, pool or read timeout (``timeout_s`` between two reads)
    http_3xx/4xx/5xx  the server answered with that status class (redirects are not followed)
    stream_broken   the stream stopped before its terminator, held malformed JSON or an error event,
                    or the server closed the connection mid-answer

The API key is sent in headers only; every failure detail passes through ``conduit.redact.redact``.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx

from conduit.daemon.bench.arrivals import DEFAULT_LEVELS, closed_loop
from conduit.daemon.bench.outputs import DEFAULT_MIN_GROWTH, SweepResult, saturation_of
from conduit.daemon.bench.prompts import PromptSource
from conduit.daemon.bench.stats import ErrorKind, LevelStats, RequestResult, summarize_level
from conduit.daemon.bench.wire import Endpoint, StreamError, StreamRecorder, consume_sse, request_body
from conduit.errors import ConduitError
from conduit.redact import fingerprint, redact

DETAIL_CHARS = 300  # a failure's detail is cut here: an HTML error page is not a message


@dataclass(frozen=True)
class BenchConfig:
    """One sweep's settings.

    Attributes:
        endpoint: where to send.
        model: the model id as the server names it.
        prompts: where prompts come from.
        requests: requests per level (>= 1).
        concurrency: the levels, run in the order given (positive integers).
        max_tokens: ``max_tokens`` of every request (>= 1).
        ignore_eos: send ``ignore_eos: true`` (vLLM extension, openai protocol only) so every request
            produces exactly ``max_tokens`` tokens.
        stream_usage: ask for a final usage chunk (openai ``stream_options.include_usage``).
        timeout_s: the longest wait for any single read (first byte, each chunk) or write, in seconds.
        connect_timeout_s: the longest wait to connect, in seconds.
        min_growth: the saturation fraction (see ``outputs.find_saturation``).

    Raises:
        ConduitError: a setting out of range, or ``ignore_eos`` with the anthropic protocol.
    """

    endpoint: Endpoint
    model: str
    prompts: PromptSource = field(default_factory=PromptSource)
    requests: int = 100
    concurrency: tuple[int, ...] = DEFAULT_LEVELS
    max_tokens: int = 128
    ignore_eos: bool = False
    stream_usage: bool = True
    timeout_s: float = 120.0
    connect_timeout_s: float = 10.0
    min_growth: float = DEFAULT_MIN_GROWTH

    def __post_init__(self) -> None:
        if self.requests < 1:
            raise ConduitError(f"--requests must be at least 1, got {self.requests}")
        if not self.concurrency or any(c < 1 for c in self.concurrency):
            raise ConduitError(f"concurrency levels must be positive integers, got {list(self.concurrency)}",
                               hint="e.g. --concurrency 1,2,4,8")
        if self.max_tokens < 1:
            raise ConduitError(f"--max-tokens must be at least 1, got {self.max_tokens}")
        if self.ignore_eos and self.endpoint.protocol != "openai":
            raise ConduitError("ignore_eos is a vLLM extension of the OpenAI protocol",
                               hint="drop --ignore-eos, or bench the openai protocol (<root>/v1)")
        if self.min_growth < 0:
            raise ConduitError(f"--min-growth must be >= 0, got {self.min_growth}")

    def body(self, prompt: str) -> dict[str, Any]:
        """The JSON request body for one prompt (``wire.request_body``)."""
        return request_body(self.endpoint.protocol, self.model, prompt, self.max_tokens,
                            stream_usage=self.stream_usage, ignore_eos=self.ignore_eos)

    def describe(self) -> dict[str, Any]:
        """Key-free settings for outputs."""
        return {
            "url": self.endpoint.url,
            "protocol": self.endpoint.protocol,
            "auth": self.endpoint.auth_style if self.endpoint.key else None,
            "key": fingerprint(self.endpoint.key) if self.endpoint.key else None,
            "model": self.model,
            "prompts": self.prompts.describe(),
            "requests_per_level": self.requests,
            "concurrency": list(self.concurrency),
            "max_tokens": self.max_tokens,
            "ignore_eos": self.ignore_eos,
            "stream_usage": self.stream_usage,
            "timeout_s": self.timeout_s,
        }


def _status_kind(status: int) -> ErrorKind:
    if status >= 500:
        return ErrorKind.HTTP_5XX
    if status >= 400:
        return ErrorKind.HTTP_4XX
    return ErrorKind.HTTP_3XX


def _failure_kind(exc: Exception) -> ErrorKind:
    """The kind of a failure raised while sending or reading (the table in the module docstring)."""
    if isinstance(exc, httpx.TimeoutException):
        return ErrorKind.TIMEOUT
    if isinstance(exc, httpx.ConnectError):
        return ErrorKind.CONNECT
    if isinstance(exc, (httpx.ReadError, httpx.WriteError, httpx.CloseError, httpx.ProtocolError,
                        httpx.DecodingError)):
        return ErrorKind.STREAM_BROKEN
    return ErrorKind.CONNECT  # other transport errors (proxy, unsupported protocol): no usable connection


async def _exchange(client: httpx.AsyncClient, ep: Endpoint, body: dict[str, Any], rec: StreamRecorder) -> None:
    """POST ``body`` and read the answer into ``rec``; an HTTP error status or an unterminated stream is
    recorded on ``rec.r``. Raises httpx's transport errors and ``StreamError``."""
    result = rec.r
    async with client.stream("POST", ep.url, json=body, headers=ep.headers()) as resp:
        result.http_status = resp.status_code
        if resp.status_code >= 300 or resp.status_code < 200:
            raw = await resp.aread()
            result.error = _status_kind(resp.status_code)
            result.detail = f"HTTP {resp.status_code}: {raw[:200].decode('utf-8', 'replace')}"
            return
        await consume_sse(resp.aiter_lines(), rec)
        if not rec.done:
            ctype = resp.headers.get("content-type", "")
            result.error = ErrorKind.STREAM_BROKEN
            result.detail = (f"stream ended before its terminator ({ep.terminator})"
                             + ("" if "event-stream" in ctype else f"; content-type was {ctype!r}, "
                                "the server did not stream"))


async def run_request(client: httpx.AsyncClient, cfg: BenchConfig, prompt: str, index: int,
                      concurrency: int) -> RequestResult:
    """Send one streaming request and record it. Never raises for network or server failures: they become
    ``RequestResult.error`` (``ErrorKind``) with a key-free ``detail`` of at most ``DETAIL_CHARS``."""
    ep = cfg.endpoint
    body = cfg.body(prompt)
    result = RequestResult(index=index, concurrency=concurrency, t_send=time.perf_counter())
    rec = StreamRecorder(result, ep.protocol)
    try:
        await _exchange(client, ep, body, rec)
    except StreamError as exc:
        result.error, result.detail = ErrorKind.STREAM_BROKEN, str(exc)
    except (httpx.TransportError, httpx.DecodingError) as exc:  # DecodingError is no TransportError
        result.error, result.detail = _failure_kind(exc), f"{type(exc).__name__}: {exc}"
    result.t_end = rec.t_done if rec.done and rec.t_done is not None and result.ok else time.perf_counter()
    result.detail = redact(result.detail, [ep.key])[:DETAIL_CHARS]
    return result


async def run_level(clients: Sequence[httpx.AsyncClient], cfg: BenchConfig, concurrency: int,
                    serial_offset: int = 0,
                    on_result: Callable[[RequestResult], None] | None = None) -> LevelStats:
    """Run ``cfg.requests`` requests with ``concurrency`` closed-loop workers and summarize them.

    Args:
        clients: at least ``concurrency`` clients from ``open_clients``; worker k uses ``clients[k]``.
        serial_offset: added to the request index to pick the prompt (distinct prompts across levels).
        on_result: called after each request (progress bars).

    Raises:
        ValueError: fewer clients than ``concurrency``.
    """
    if len(clients) < concurrency:
        raise ValueError(f"run_level needs {concurrency} clients, got {len(clients)}")

    async def one(client: httpx.AsyncClient, i: int) -> RequestResult:
        r = await run_request(client, cfg, cfg.prompts.get(serial_offset + i), i, concurrency)
        if on_result is not None:
            on_result(r)
        return r

    t0 = time.perf_counter()
    results = await closed_loop(clients[:concurrency], cfg.requests, one)
    return summarize_level(concurrency, results, time.perf_counter() - t0)


@asynccontextmanager
async def open_clients(cfg: BenchConfig, count: int | None = None) -> AsyncIterator[list[httpx.AsyncClient]]:
    """``count`` (default: the largest level) AsyncClients of one kept-alive connection each, one per worker.

    One client per worker rather than one shared pool: httpcore's pool scans every connection on each
    request and response event, which at 64 connections cost more than twice the CPU per request here
    (bench/load_generator.py measures the generator's CPU per request). A shared SSL context keeps creation
    cheap. All are closed on exit.
    """
    n = count if count is not None else max(cfg.concurrency)
    ssl_ctx = httpx.create_ssl_context()
    timeout = httpx.Timeout(cfg.timeout_s, connect=cfg.connect_timeout_s, pool=None)
    clients = [httpx.AsyncClient(timeout=timeout, verify=ssl_ctx, follow_redirects=False,
                                 limits=httpx.Limits(max_connections=1, max_keepalive_connections=1))
               for _ in range(n)]
    try:
        yield clients
    finally:
        for c in clients:
            await c.aclose()


async def run_sweep(cfg: BenchConfig, on_result: Callable[[RequestResult], None] | None = None,
                    on_level: Callable[[LevelStats], None] | None = None) -> SweepResult:
    """Run every level of ``cfg.concurrency`` in order (clients kept across levels); find the saturation."""
    levels: list[LevelStats] = []
    async with open_clients(cfg) as clients:
        for n, c in enumerate(cfg.concurrency):
            lv = await run_level(clients, cfg, c, serial_offset=n * cfg.requests, on_result=on_result)
            levels.append(lv)
            if on_level is not None:
                on_level(lv)
    return SweepResult(cfg.describe(), levels, saturation_of(levels, cfg.min_growth))
