"""Pure statistics of a load test: one request's record, TTFT, TPOT, ITL, goodput and one level's summary.

No I/O and no clock here: every function works on ``time.perf_counter()`` readings (seconds) that the
runner recorded, so tests feed synthetic timestamps and check exact results.

The definitions are ``vllm bench serve``'s (``vllm/benchmarks/lib/endpoint_request_func.py`` and
``calculate_metrics`` in ``vllm/benchmarks/serve.py``):

- a *chunk* is a streamed event that carries a choice (OpenAI: a ``data:`` JSON with non-empty ``choices``,
  whatever its delta holds: the role-only chunk with ``content: ""`` and the ``finish_reason`` chunk count,
  as vLLM counts them; Anthropic: a ``content_block_delta``). The usage chunk and ``[DONE]`` are not chunks.
- TTFT = t_first - t_send: t_send is taken just before the request is sent, t_first when the first chunk
  arrives.
- latency (vLLM's e2el) = t_last - t_send, t_last the arrival of the last chunk.
- TPOT = (latency - TTFT) / (output_tokens - 1) = (t_last - t_first) / (output_tokens - 1); undefined for
  fewer than 2 output tokens (vLLM then leaves it out of the TPOT statistics and counts it as 0 for goodput).
- ITL: the gaps between successive chunks of a request, pooled over the level's requests.
- output tokens: the server's final usage count when it sends one (OpenAI ``usage.completion_tokens`` in the
  ``include_usage`` chunk; Anthropic ``message_delta.usage.output_tokens``), else the number of chunks with
  non-empty content (vLLM re-tokenizes the text instead; a chunk can hold several tokens, so this may count
  fewer: ``LevelStats.usage_missing`` says how many requests were counted so).
- goodput: successful requests meeting every SLO (TTFT, TPOT, e2el in ms, ``<=``) per second of the level.

Percentiles are ``conduit.units.percentile``: linear interpolation between closest ranks, numpy's default
``method="linear"`` (Hyndman and Fan type 7), as vLLM's ``np.percentile``; std is the population standard
deviation (``np.std``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from conduit.units import percentile

PERCENTILE_METHOD = "linear interpolation between closest ranks (numpy method='linear', Hyndman-Fan type 7)"
DEFAULT_PERCENTILES: tuple[float, ...] = (50.0, 90.0, 99.0)
SLO_NAMES: tuple[str, ...] = ("ttft", "tpot", "e2el")  # vLLM's --goodput keys, values in ms


class ErrorKind(StrEnum):
    """Why a request failed (``conduit.daemon.bench.runner`` maps the HTTP client's errors onto these)."""

    CONNECT = "connect"  # no connection could be made
    TIMEOUT = "timeout"  # a connect/read/write/pool timeout expired
    HTTP_3XX = "http_3xx"  # answered with a redirect (not followed)
    HTTP_4XX = "http_4xx"  # answered with a client error (401 bad key, 404 wrong base URL, 400 bad body)
    HTTP_5XX = "http_5xx"  # answered with a server error
    STREAM_BROKEN = "stream_broken"  # the SSE stream ended early, was malformed, or carried an error event


def ttft(t_send: float, t_first: float | None) -> float | None:
    """Time to first token in seconds: ``t_first - t_send``; None when no chunk arrived."""
    return None if t_first is None else t_first - t_send


def tpot(t_first: float | None, t_last: float | None, output_tokens: int) -> float | None:
    """Time per output token after the first, in seconds: ``(t_last - t_first) / (output_tokens - 1)``.

    Undefined (None) for fewer than 2 output tokens or when no chunk arrived.
    """
    if t_first is None or t_last is None or output_tokens < 2:
        return None
    return (t_last - t_first) / (output_tokens - 1)


def _ms(v: float | None) -> float | None:
    return None if v is None else v * 1000.0


def pct_name(q: float) -> str:
    """``99.0 -> "p99"``, ``99.9 -> "p99.9"`` (vLLM's result-file spelling)."""
    return f"p{int(q)}" if int(q) == q else f"p{q}"


@dataclass(frozen=True)
class Summary:
    """One measurement over a level, in seconds: count, mean, std, and percentiles on demand.

    ``values`` are sorted; every statistic is None when there are none.
    """

    values: tuple[float, ...] = ()

    @classmethod
    def of(cls, values: Sequence[float]) -> Summary:
        """Summarize ``values`` (seconds)."""
        return cls(tuple(sorted(values)))

    @property
    def n(self) -> int:
        """How many values."""
        return len(self.values)

    @property
    def mean(self) -> float | None:
        """Arithmetic mean (``math.fsum``), or None."""
        return math.fsum(self.values) / len(self.values) if self.values else None

    @property
    def std(self) -> float | None:
        """Population standard deviation (``np.std``), or None."""
        if not self.values:
            return None
        m = math.fsum(self.values) / len(self.values)
        return math.sqrt(math.fsum((v - m) ** 2 for v in self.values) / len(self.values))

    def pct(self, q: float) -> float | None:
        """The ``q``-th percentile (0..100, ``conduit.units.percentile``), or None."""
        return percentile(self.values, q)

    @property
    def p50(self) -> float | None:
        """Median."""
        return self.pct(50)

    @property
    def p90(self) -> float | None:
        """90th percentile."""
        return self.pct(90)

    @property
    def p99(self) -> float | None:
        """99th percentile."""
        return self.pct(99)

    def as_ms(self, percentiles: Sequence[float] = DEFAULT_PERCENTILES) -> dict[str, float | None]:
        """``{"p50": ms, ..., "mean": ms, "std": ms}`` for the given percentiles (None kept)."""
        out = {pct_name(q): _ms(self.pct(q)) for q in percentiles}
        out.update(mean=_ms(self.mean), std=_ms(self.std))
        return out


@dataclass
class RequestResult:
    """One request's record. Times are ``time.perf_counter()`` readings in seconds.

    Attributes:
        index: request number within its level (0-based).
        concurrency: the level's concurrency (closed loop) or max concurrency (open loop; 0 for none).
        t_send: just before the request was sent.
        t_first / t_last: arrival of the first / last chunk (module docstring); None when none arrived.
        t_end: the terminator was read, or the request failed.
        chunks: chunks received; ``itl`` the gaps between successive ones (seconds, ``chunks - 1`` of them).
        content_chunks: chunks with non-empty content (the token count when the server sends no usage).
        usage_output_tokens: the server's final output-token count, or None when it sent none.
        input_tokens: the server's prompt-token count, or None.
        prompt_len: the prompt's length in tokens as sized before sending, or None when unknown.
        queued_s: time spent waiting for a ``--max-concurrency`` slot before t_send (open loop).
        error: None for success, else the kind of failure.
        detail: a short, key-free description of the failure.
        http_status: the response status, or None when no response arrived.
    """

    index: int
    concurrency: int
    t_send: float
    t_first: float | None = None
    t_last: float | None = None
    t_end: float = 0.0
    chunks: int = 0
    itl: list[float] = field(default_factory=list, repr=False)
    content_chunks: int = 0
    usage_output_tokens: int | None = None
    input_tokens: int | None = None
    prompt_len: int | None = None
    queued_s: float = 0.0
    error: ErrorKind | None = None
    detail: str = ""
    http_status: int | None = None

    @property
    def ok(self) -> bool:
        """True when the request completed with its terminator and no error."""
        return self.error is None

    @property
    def output_tokens(self) -> int:
        """The usage count when the server sent one, else the number of chunks with non-empty content."""
        return self.usage_output_tokens if self.usage_output_tokens is not None else self.content_chunks

    @property
    def prompt_tokens(self) -> int | None:
        """The server's prompt-token count, else the length the prompt was sized to (vLLM's ``prompt_len``)."""
        return self.input_tokens if self.input_tokens is not None else self.prompt_len

    @property
    def ttft_s(self) -> float | None:
        """See ``ttft``."""
        return ttft(self.t_send, self.t_first)

    @property
    def tpot_s(self) -> float | None:
        """See ``tpot``."""
        return tpot(self.t_first, self.t_last, self.output_tokens)

    @property
    def e2e_s(self) -> float:
        """vLLM's e2el in seconds: ``t_last - t_send`` (``t_end - t_send`` when no chunk arrived)."""
        return (self.t_last if self.t_last is not None else self.t_end) - self.t_send

    def meets(self, slos: Mapping[str, float]) -> bool:
        """True when this successful request meets every SLO (``ttft``/``tpot``/``e2el`` in ms, ``<=``).

        TPOT counts as 0 for fewer than 2 output tokens, as in vLLM's goodput.
        """
        if not self.ok:
            return False
        got = {"ttft": self.ttft_s or 0.0, "tpot": self.tpot_s or 0.0, "e2el": self.e2e_s}
        return all(got[k] * 1000.0 <= v for k, v in slos.items())

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready record (latencies in ms, relative to t_send; no absolute clock readings)."""
        return {
            "index": self.index,
            "ok": self.ok,
            "error": None if self.error is None else str(self.error),
            "detail": self.detail,
            "http_status": self.http_status,
            "ttft_ms": _ms(self.ttft_s),
            "tpot_ms": _ms(self.tpot_s),
            "e2e_ms": _ms(self.e2e_s),
            "queued_ms": _ms(self.queued_s),
            "output_tokens": self.output_tokens,
            "chunks": self.chunks,
            "content_chunks": self.content_chunks,
            "usage_output_tokens": self.usage_output_tokens,
            "input_tokens": self.input_tokens,
            "prompt_len": self.prompt_len,
        }


@dataclass
class LevelStats:
    """One level's statistics (a closed-loop concurrency, or an open-loop request rate).

    Latency summaries cover successful requests only (TPOT: those with >= 2 output tokens). Throughputs use
    the level's wall time (first send to last end, vLLM's ``duration``): ``output_tokens_per_s`` = output tokens
    of successful requests / wall_s, ``requests_per_s`` = successful requests / wall_s, ``goodput_per_s`` =
    successful requests meeting every SLO / wall_s (None without SLOs).

    ``marks`` holds the reasons this level's numbers are not to be trusted (set by the runner from the
    server's ``/metrics`` and the client's CPU); no advice is drawn from a marked level.
    """

    concurrency: int
    requests: int
    ok: int
    errors: dict[str, int]
    wall_s: float
    output_tokens: int
    output_tokens_per_s: float
    requests_per_s: float
    ttft: Summary
    tpot: Summary
    e2e: Summary
    mean_input_tokens: float | None
    error_examples: dict[str, str] = field(default_factory=dict)
    results: list[RequestResult] = field(default_factory=list, repr=False)
    itl: Summary = field(default_factory=Summary)
    request_rate: float | None = None
    input_tokens: int = 0
    usage_missing: int = 0
    good: int | None = None
    goodput_per_s: float | None = None
    marks: list[str] = field(default_factory=list)
    server: dict[str, Any] | None = None
    client_cpu_s: float | None = None

    @property
    def error_count(self) -> int:
        """Failed requests in this level."""
        return sum(self.errors.values())

    @property
    def x(self) -> float:
        """The level's position on the curve: its request rate (open loop) or concurrency."""
        return self.request_rate if self.request_rate is not None else float(self.concurrency)

    @property
    def label(self) -> str:
        """``"rate 4 req/s"``, ``"rate inf"`` or ``"concurrency 8"``."""
        if self.request_rate is None:
            return f"concurrency {self.concurrency}"
        return "rate inf" if math.isinf(self.request_rate) else f"rate {self.request_rate:g} req/s"

    def to_dict(self, with_requests: bool = True,
                percentiles: Sequence[float] = DEFAULT_PERCENTILES) -> dict[str, Any]:
        """A JSON-ready dict (latencies in ms, throughputs per second)."""
        out: dict[str, Any] = {
            "concurrency": self.concurrency,
            "request_rate": _rate_json(self.request_rate),
            "requests": self.requests,
            "ok": self.ok,
            "errors": dict(self.errors),
            "error_examples": dict(self.error_examples),
            "wall_s": self.wall_s,
            "output_tokens": self.output_tokens,
            "input_tokens": self.input_tokens,
            "output_tokens_per_s": self.output_tokens_per_s,
            "requests_per_s": self.requests_per_s,
            "good": self.good,
            "goodput_per_s": self.goodput_per_s,
            "ttft_ms": self.ttft.as_ms(percentiles),
            "tpot_ms": self.tpot.as_ms(percentiles),
            "itl_ms": self.itl.as_ms(percentiles),
            "e2e_ms": self.e2e.as_ms(percentiles),
            "mean_input_tokens": self.mean_input_tokens,
            "usage_missing": self.usage_missing,
            "marks": list(self.marks),
            "server": self.server,
            "client_cpu_s": self.client_cpu_s,
        }
        if with_requests:
            out["per_request"] = [r.to_dict() for r in self.results]
        return out


def _rate_json(rate: float | None) -> float | str | None:
    return "inf" if rate is not None and math.isinf(rate) else rate


def _count_errors(results: Sequence[RequestResult]) -> tuple[dict[str, int], dict[str, str]]:
    """Failures per kind and the first failure's detail per kind, both sorted by kind."""
    errors: dict[str, int] = {}
    examples: dict[str, str] = {}
    for r in results:
        if r.error is not None:
            errors[str(r.error)] = errors.get(str(r.error), 0) + 1
            examples.setdefault(str(r.error), r.detail)
    return dict(sorted(errors.items())), dict(sorted(examples.items()))


def summarize_level(concurrency: int, results: Sequence[RequestResult], wall_s: float | None = None, *,
                    request_rate: float | None = None, slos: Mapping[str, float] | None = None) -> LevelStats:
    """Reduce one level's records to ``LevelStats``.

    Args:
        concurrency: the level's concurrency (open loop: its max concurrency, 0 for none).
        results: every request of the level, failed ones included.
        wall_s: the level's wall time in seconds; None derives it as max(t_end) - min(t_send).
        request_rate: the open-loop rate (requests/s, inf allowed), None for a closed-loop level.
        slos: goodput SLOs in ms by ``SLO_NAMES`` key; None or empty: no goodput.
    """
    if wall_s is None:
        wall_s = (max(r.t_end for r in results) - min(r.t_send for r in results)) if results else 0.0
    good = [r for r in results if r.ok]
    errors, examples = _count_errors(results)
    tokens = sum(r.output_tokens for r in good)
    inputs = [n for r in good if (n := r.prompt_tokens) is not None]
    n_good = sum(1 for r in good if r.meets(slos)) if slos else None

    def per_s(n: float) -> float:
        return n / wall_s if wall_s > 0 else 0.0

    return LevelStats(
        concurrency=concurrency,
        requests=len(results),
        ok=len(good),
        errors=errors,
        wall_s=wall_s,
        output_tokens=tokens,
        output_tokens_per_s=per_s(tokens),
        requests_per_s=per_s(len(good)),
        ttft=Summary.of([v for r in good if (v := r.ttft_s) is not None]),
        tpot=Summary.of([v for r in good if (v := r.tpot_s) is not None]),
        e2e=Summary.of([r.e2e_s for r in good]),
        mean_input_tokens=(sum(inputs) / len(inputs)) if inputs else None,
        error_examples=examples,
        results=list(results),
        itl=Summary.of([g for r in good for g in r.itl]),
        request_rate=request_rate,
        input_tokens=sum(inputs),
        usage_missing=sum(1 for r in good if r.usage_output_tokens is None),
        good=n_good,
        goodput_per_s=None if n_good is None else per_s(n_good),
    )


def parse_slos(text: str) -> dict[str, float]:
    """Parse ``"ttft:500,tpot:50"`` (vLLM's ``--goodput`` pairs, ms; spaces also separate) into a dict.

    Raises:
        ValueError: a pair is not ``NAME:MS``, the name is not one of ``SLO_NAMES``, or the value is negative.
    """
    out: dict[str, float] = {}
    for pair in text.replace(",", " ").split():
        name, sep, value = pair.partition(":")
        name = name.strip().lower()
        try:
            ms = float(value)
        except ValueError:
            ms = math.nan
        if not sep or math.isnan(ms):
            raise ValueError(f"{pair!r} is not NAME:MS (e.g. ttft:500)")
        if name not in SLO_NAMES:
            raise ValueError(f"{name!r} is not an SLO; use {', '.join(SLO_NAMES)}")
        if ms < 0:
            raise ValueError(f"{pair!r}: the SLO must be >= 0 ms")
        out[name] = ms
    if not out:
        raise ValueError("no SLO given (e.g. ttft:500,tpot:50)")
    return out


def parse_percentiles(text: str) -> tuple[float, ...]:
    """Parse ``"50,90,99"`` into percentiles, each within [0, 100] (vLLM's ``--metric-percentiles``).

    Raises:
        ValueError: an item is not a number within [0, 100], or none is given.
    """
    out = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        try:
            q = float(item)
        except ValueError:
            raise ValueError(f"{item!r} is not a percentile") from None
        if not 0 <= q <= 100:
            raise ValueError(f"{item!r} is not within 0..100")
        out.append(q)
    if not out:
        raise ValueError("no percentile given")
    return tuple(out)
