"""Running a load test against one endpoint: a sweep's settings, one request, a level, a sweep.

asyncio and one ``aiohttp.ClientSession`` whose connector keeps the connections alive (as ``vllm bench serve``
does; httpx cost about four times the CPU per streamed request here, see bench/load_generator.py). The
schedule is ``arrivals``' (closed-loop levels, or open-loop rates); the bytes on the wire are ``wire``'s; the
numbers are ``stats``'; prompt lengths come from ``sizing`` and the server check from ``servercheck``.

Error kinds (``stats.ErrorKind``), translated at this boundary from aiohttp's exception tree::

    connect         no connection: refused, DNS, unreachable, bad URL
    timeout         connect timeout, or ``timeout_s`` passed between two reads
    http_3xx/4xx/5xx  the server answered with that status class (redirects are not followed)
    stream_broken   the stream stopped before its terminator, held malformed JSON or an error event,
                    or the server closed the connection mid-answer

The API key is sent in headers only; every failure detail passes through ``conduit.redact.redact``.
"""

from __future__ import annotations

import json
import math
import os
import random
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

import aiohttp

from conduit.daemon.bench import servercheck
from conduit.daemon.bench.arrivals import DEFAULT_LEVELS, closed_loop, open_loop, send_times
from conduit.daemon.bench.outputs import DEFAULT_MIN_GROWTH, SweepResult, saturation_of
from conduit.daemon.bench.prompts import PromptSource, Sample
from conduit.daemon.bench.sizing import Tokenizer, size_prompts
from conduit.daemon.bench.stats import (
    DEFAULT_PERCENTILES,
    ErrorKind,
    LevelStats,
    RequestResult,
    summarize_level,
)
from conduit.daemon.bench.wire import Endpoint, SSEBuffer, StreamError, StreamRecorder, request_body
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
        concurrency: the closed-loop levels, run in the order given (positive integers).
        max_tokens: ``max_tokens`` of every request whose sample has no output length of its own (>= 1).
        ignore_eos: send ``ignore_eos: true`` (vLLM extension, openai protocol only) so every request
            produces exactly ``max_tokens`` tokens.
        stream_usage: ask for a final usage chunk (openai ``stream_options.include_usage``).
        timeout_s: the longest wait for any single read (first byte, each chunk), in seconds.
        connect_timeout_s: the longest wait to connect, in seconds.
        min_growth: the saturation fraction (see ``outputs.find_saturation``).
        request_rates: open-loop levels in requests/s (``inf``: all at once); when given, they replace the
            closed-loop ``concurrency`` levels.
        burstiness: the gamma shape of open-loop gaps (1: Poisson), ``vllm bench serve --burstiness``.
        max_concurrency: at most this many requests in flight in open loop (None: no cap).
        slos: goodput SLOs in ms (``ttft``/``tpot``/``e2el``), or None.
        percentiles: the percentiles reported (``--percentiles``).
        seed: the seed of the open-loop gaps (level k uses ``seed + k``).
        check_server: read the server's ``/metrics`` around each level and mark disagreeing levels.
        size_prompts: size prompts with the server's tokenizer when it has one (``sizing``).

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
    request_rates: tuple[float, ...] = ()
    burstiness: float = 1.0
    max_concurrency: int | None = None
    slos: Mapping[str, float] | None = None
    percentiles: tuple[float, ...] = DEFAULT_PERCENTILES
    seed: int = 0
    check_server: bool = True
    size_prompts: bool = True
    fixed_output_len: bool = field(default=True, repr=False)

    def __post_init__(self) -> None:
        if self.requests < 1:
            raise ConduitError(f"--requests must be at least 1, got {self.requests}")
        if not self.concurrency or any(c < 1 for c in self.concurrency):
            raise ConduitError(f"concurrency levels must be positive integers, got {list(self.concurrency)}",
                               hint="e.g. --concurrency 1,2,4,8")
        if any(not r > 0 for r in self.request_rates):
            raise ConduitError(f"request rates must be positive, got {list(self.request_rates)}")
        if not self.burstiness > 0:
            raise ConduitError(f"--burstiness must be positive, got {self.burstiness}")
        if self.max_concurrency is not None and self.max_concurrency < 1:
            raise ConduitError(f"--max-concurrency must be at least 1, got {self.max_concurrency}")
        if self.max_tokens < 1:
            raise ConduitError(f"--max-tokens must be at least 1, got {self.max_tokens}")
        if self.ignore_eos and self.endpoint.protocol != "openai":
            raise ConduitError("ignore_eos is a vLLM extension of the OpenAI protocol",
                               hint="drop --ignore-eos, or bench the openai protocol (<root>/v1)")
        if self.min_growth < 0:
            raise ConduitError(f"--min-growth must be >= 0, got {self.min_growth}")

    @property
    def open_loop(self) -> bool:
        """True when levels are request rates."""
        return bool(self.request_rates)

    @property
    def level_count(self) -> int:
        """How many levels the sweep runs."""
        return len(self.request_rates) if self.open_loop else len(self.concurrency)

    @cached_property
    def headers(self) -> dict[str, str]:
        """The request headers (key included: never log them), built once."""
        return self.endpoint.headers()

    def payload(self, sample: Sample) -> bytes:
        """The JSON request body for one sample (``wire.request_body``), encoded."""
        body = request_body(self.endpoint.protocol, self.model, sample.prompt, sample.output_len or self.max_tokens,
                            stream_usage=self.stream_usage, ignore_eos=self.ignore_eos)
        return json.dumps(body).encode()

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
            "concurrency": None if self.open_loop else list(self.concurrency),
            "request_rates": ["inf" if math.isinf(r) else r for r in self.request_rates] or None,
            "burstiness": self.burstiness,
            "max_concurrency": self.max_concurrency,
            "goodput_slos_ms": dict(self.slos) if self.slos else None,
            "percentiles": list(self.percentiles),
            "max_tokens": self.max_tokens,
            "ignore_eos": self.ignore_eos,
            "stream_usage": self.stream_usage,
            "timeout_s": self.timeout_s,
            "seed": self.seed,
        }


def _status_kind(status: int) -> ErrorKind:
    if status >= 500:
        return ErrorKind.HTTP_5XX
    if status >= 400:
        return ErrorKind.HTTP_4XX
    return ErrorKind.HTTP_3XX


def _failure_kind(exc: BaseException) -> ErrorKind:
    """The kind of a failure raised while sending or reading (the table in the module docstring)."""
    if isinstance(exc, TimeoutError):  # aiohttp's ServerTimeoutError and friends subclass it
        return ErrorKind.TIMEOUT
    if isinstance(exc, (aiohttp.ClientConnectorError, aiohttp.InvalidURL)):
        return ErrorKind.CONNECT
    if isinstance(exc, (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError, aiohttp.ClientOSError,
                        aiohttp.ClientResponseError)):
        return ErrorKind.STREAM_BROKEN
    return ErrorKind.CONNECT  # other client errors: no usable connection


async def _exchange(session: aiohttp.ClientSession, cfg: BenchConfig, payload: bytes, rec: StreamRecorder) -> None:
    """POST ``payload`` and read the answer into ``rec``; an HTTP error status or an unterminated stream is
    recorded on ``rec.r``. Raises aiohttp's errors, TimeoutError and ``StreamError``."""
    result, ep = rec.r, cfg.endpoint
    async with session.post(ep.url, data=payload, headers=cfg.headers, allow_redirects=False) as resp:
        result.http_status = resp.status
        if not 200 <= resp.status < 300:
            raw = await resp.read()
            result.error = _status_kind(resp.status)
            result.detail = f"HTTP {resp.status}: {raw[:200].decode('utf-8', 'replace')}"
            return
        buf, event, clock = SSEBuffer(), rec.event, time.perf_counter
        async for chunk in resp.content.iter_any():
            now = clock()
            for data in buf.feed(chunk):
                event(data, now)
        for data in buf.close():
            event(data, clock())
        if not rec.done:
            ctype = resp.headers.get("content-type", "")
            result.error = ErrorKind.STREAM_BROKEN
            result.detail = (f"stream ended before its terminator ({ep.terminator})"
                             + ("" if "event-stream" in ctype else f"; content-type was {ctype!r}, "
                                "the server did not stream"))


async def run_request(session: aiohttp.ClientSession, cfg: BenchConfig, sample: Sample | str, index: int,
                      concurrency: int, queued_s: float = 0.0) -> RequestResult:
    """Send one streaming request and record it. Never raises for network or server failures: they become
    ``RequestResult.error`` (``ErrorKind``) with a key-free ``detail`` of at most ``DETAIL_CHARS``."""
    if isinstance(sample, str):
        sample = Sample(sample)
    payload = cfg.payload(sample)
    result = RequestResult(index=index, concurrency=concurrency, t_send=time.perf_counter(),
                           prompt_len=sample.prompt_len, queued_s=queued_s)
    rec = StreamRecorder(result, cfg.endpoint.protocol)
    try:
        await _exchange(session, cfg, payload, rec)
    except StreamError as exc:
        result.error, result.detail = ErrorKind.STREAM_BROKEN, str(exc)
    except (aiohttp.ClientError, TimeoutError) as exc:
        result.error, result.detail = _failure_kind(exc), f"{type(exc).__name__}: {exc}"
    result.t_end = rec.t_done if rec.done and rec.t_done is not None and result.ok else time.perf_counter()
    if result.detail:
        result.detail = redact(result.detail, [cfg.endpoint.key])[:DETAIL_CHARS]
    return result


OnResult = Callable[[RequestResult], None]


async def run_level(session: aiohttp.ClientSession, cfg: BenchConfig, concurrency: int, serial_offset: int = 0,
                    on_result: OnResult | None = None) -> LevelStats:
    """Run ``cfg.requests`` requests with ``concurrency`` closed-loop workers and summarize them.

    Args:
        session: from ``open_session`` (its connector must allow ``concurrency`` connections).
        serial_offset: added to the request index to pick the prompt (distinct prompts across levels).
        on_result: called after each request (progress bars).
    """
    async def one(_worker: int, i: int) -> RequestResult:
        r = await run_request(session, cfg, cfg.prompts.sample(serial_offset + i), i, concurrency)
        if on_result is not None:
            on_result(r)
        return r

    t0 = time.perf_counter()
    results = await closed_loop(list(range(concurrency)), cfg.requests, one)
    return summarize_level(concurrency, results, time.perf_counter() - t0, slos=cfg.slos)


async def run_rate_level(session: aiohttp.ClientSession, cfg: BenchConfig, rate: float, serial_offset: int = 0,
                         on_result: OnResult | None = None, seed: int | None = None) -> LevelStats:
    """Send ``cfg.requests`` requests at open-loop ``rate`` (requests/s; ``arrivals.send_times`` with
    ``cfg.burstiness``), at most ``cfg.max_concurrency`` in flight, and summarize them."""
    times = send_times(cfg.requests, rate, cfg.burstiness, random.Random(cfg.seed if seed is None else seed))
    cap = cfg.max_concurrency or 0

    async def one(i: int, queued_s: float) -> RequestResult:
        r = await run_request(session, cfg, cfg.prompts.sample(serial_offset + i), i, cap, queued_s)
        if on_result is not None:
            on_result(r)
        return r

    t0 = time.perf_counter()
    results = await open_loop(times, one, cfg.max_concurrency)
    lv = summarize_level(cap, results, time.perf_counter() - t0, request_rate=rate, slos=cfg.slos)
    servercheck.check_schedule(lv, times, [r.t_send - r.queued_s - t0 for r in results])
    return lv


@asynccontextmanager
async def open_session(cfg: BenchConfig, limit: int | None = None) -> AsyncIterator[aiohttp.ClientSession]:
    """One ``aiohttp.ClientSession`` for the sweep: kept-alive connections, at most ``limit`` of them (default:
    the largest closed-loop level, or ``max_concurrency``, or unlimited for open loop without a cap), no
    redirects, ``timeout_s`` between reads, ``connect_timeout_s`` to connect. Closed on exit."""
    if limit is None:
        limit = (cfg.max_concurrency or 0) if cfg.open_loop else max(cfg.concurrency)
    connector = aiohttp.TCPConnector(limit=limit, limit_per_host=limit, keepalive_timeout=60)
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=cfg.connect_timeout_s, sock_read=cfg.timeout_s)
    # trust_env makes aiohttp look up ~/.netrc in a thread for every request (a third of the client's CPU
    # here); it is needed only to honour proxy variables, so it is on only when one is set.
    proxied = any(k.lower() in ("http_proxy", "https_proxy", "all_proxy") and v for k, v in os.environ.items())
    async with aiohttp.ClientSession(connector=connector, timeout=timeout, trust_env=proxied) as session:
        yield session


async def prepare_prompts(session: aiohttp.ClientSession, cfg: BenchConfig) -> tuple[BenchConfig, list[str]]:
    """``cfg`` with its prompts sized by the server's tokenizer (``sizing.size_prompts``) and the warnings.

    Nothing is asked when ``cfg.size_prompts`` is off or the prompts come from a file."""
    if not cfg.size_prompts or cfg.prompts.prompts or cfg.prompts.samples:
        return cfg, []
    tok = Tokenizer(session, cfg.endpoint.root, cfg.model, cfg.headers)
    output_len = cfg.max_tokens if cfg.fixed_output_len else None
    src, warnings = await size_prompts(tok, cfg.prompts, cfg.requests * cfg.level_count, output_len)
    return replace(cfg, prompts=src), warnings


async def checked_level(session: aiohttp.ClientSession, cfg: BenchConfig, n: int,
                         on_result: OnResult | None) -> LevelStats:
    """Level ``n`` of the sweep between two ``/metrics`` scrapes, with the client's CPU measured."""
    root = cfg.endpoint.root
    before = await servercheck.scrape(session, root) if cfg.check_server else None
    cpu0 = time.thread_time()  # the event loop's thread: the client's own work, not a server thread's
    if cfg.open_loop:
        lv = await run_rate_level(session, cfg, cfg.request_rates[n], n * cfg.requests, on_result, cfg.seed + n)
    else:
        lv = await run_level(session, cfg, cfg.concurrency[n], n * cfg.requests, on_result)
    servercheck.check_client(lv, time.thread_time() - cpu0)
    if before is not None:
        lv.server = servercheck.compare(before, await servercheck.scrape(session, root), lv)
    return lv


async def run_sweep(cfg: BenchConfig, on_result: OnResult | None = None,
                    on_level: Callable[[LevelStats], None] | None = None,
                    on_warning: Callable[[str], None] | None = None) -> SweepResult:
    """Size the prompts, run every level in order (one session kept across levels), find the saturation.

    ``on_warning`` receives the prompt-sizing warnings before the first request."""
    levels: list[LevelStats] = []
    async with open_session(cfg) as session:
        cfg, warnings = await prepare_prompts(session, cfg)
        for w in warnings:
            if on_warning is not None:
                on_warning(w)
        for n in range(cfg.level_count):
            lv = await checked_level(session, cfg, n, on_result)
            levels.append(lv)
            if on_level is not None:
                on_level(lv)
    sweep = SweepResult(cfg.describe(), levels, saturation_of(levels, cfg.min_growth))
    sweep.warnings = warnings
    return sweep
