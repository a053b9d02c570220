"""Pure statistics of a load test: one request's record, TTFT and TPOT, and one level's summary.

No I/O and no clock here: every function works on ``time.perf_counter()`` readings (seconds) that the
runner recorded, so tests feed synthetic timestamps and check exact results.

Measurements per request:

- TTFT = t_first - t_send, where t_send is taken just before the request is handed to httpx and t_first when
  the first *non-empty* content delta arrives (an OpenAI role-only chunk with ``content: ""`` is not a token).
- TPOT = (t_last - t_first) / (output_tokens - 1); undefined (None) for fewer than 2 output tokens.
- e2e = t_end - t_send (t_end: the terminator ``[DONE]`` / ``message_stop`` arrived, or the failure).
- output tokens: the server's final usage count when it sends one (OpenAI ``usage.completion_tokens`` in the
  ``include_usage`` chunk; Anthropic ``message_delta.usage.output_tokens``), else the number of non-empty
  content deltas.

Percentiles are ``conduit.units.percentile``: linear interpolation between closest ranks, numpy's default
``method="linear"`` (Hyndman and Fan type 7, also ``statistics.quantiles(method="inclusive")``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from conduit.units import percentile

PERCENTILE_METHOD = "linear interpolation between closest ranks (numpy method='linear', Hyndman-Fan type 7)"


class ErrorKind(StrEnum):
    """Why a request failed (``conduit.daemon.bench.runner`` maps httpx's errors onto these)."""

    CONNECT = "connect"  # no connection could be made
    TIMEOUT = "timeout"  # a connect/read/write/pool timeout expired
    HTTP_3XX = "http_3xx"  # answered with a redirect (not followed)
    HTTP_4XX = "http_4xx"  # answered with a client error (401 bad key, 404 wrong base URL, 400 bad body)
    HTTP_5XX = "http_5xx"  # answered with a server error
    STREAM_BROKEN = "stream_broken"  # the SSE stream ended early, was malformed, or carried an error event


def ttft(t_send: float, t_first: float | None) -> float | None:
    """Time to first token in seconds: ``t_first - t_send``; None when no token arrived."""
    return None if t_first is None else t_first - t_send


def tpot(t_first: float | None, t_last: float | None, output_tokens: int) -> float | None:
    """Time per output token after the first, in seconds: ``(t_last - t_first) / (output_tokens - 1)``.

    Undefined (None) for fewer than 2 output tokens or when no token arrived.
    """
    if t_first is None or t_last is None or output_tokens < 2:
        return None
    return (t_last - t_first) / (output_tokens - 1)


def _ms(v: float | None) -> float | None:
    return None if v is None else v * 1000.0


@dataclass(frozen=True)
class Summary:
    """p50/p90/p99 and mean of one measurement over a level, in seconds; all None when ``n == 0``."""

    n: int
    p50: float | None
    p90: float | None
    p99: float | None
    mean: float | None

    @classmethod
    def of(cls, values: Sequence[float]) -> Summary:
        """Summarize ``values`` (seconds) with ``conduit.units.percentile``; an empty sequence gives all None."""
        if not values:
            return cls(0, None, None, None, None)
        return cls(
            len(values),
            percentile(values, 50),
            percentile(values, 90),
            percentile(values, 99),
            math.fsum(values) / len(values),
        )

    def as_ms(self) -> dict[str, float | None]:
        """``{"p50": ms, "p90": ms, "p99": ms, "mean": ms}`` (None kept)."""
        return {"p50": _ms(self.p50), "p90": _ms(self.p90), "p99": _ms(self.p99), "mean": _ms(self.mean)}


@dataclass
class RequestResult:
    """One request's record. Times are ``time.perf_counter()`` readings in seconds.

    Attributes:
        index: request number within its level (0-based).
        concurrency: the level's concurrency.
        t_send: just before the request was handed to httpx.
        t_first / t_last: arrival of the first / last non-empty content delta; None when none arrived.
        t_end: the terminator was read, or the request failed.
        content_chunks: non-empty content deltas received.
        usage_output_tokens: the server's final output-token count, or None when it sent none.
        input_tokens: the server's prompt-token count, or None.
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
    content_chunks: int = 0
    usage_output_tokens: int | None = None
    input_tokens: int | None = None
    error: ErrorKind | None = None
    detail: str = ""
    http_status: int | None = None

    @property
    def ok(self) -> bool:
        """True when the request completed with its terminator and no error."""
        return self.error is None

    @property
    def output_tokens(self) -> int:
        """The usage count when the server sent one, else the number of non-empty content deltas."""
        return self.usage_output_tokens if self.usage_output_tokens is not None else self.content_chunks

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
        """End-to-end latency in seconds: ``t_end - t_send``."""
        return self.t_end - self.t_send

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
            "output_tokens": self.output_tokens,
            "content_chunks": self.content_chunks,
            "usage_output_tokens": self.usage_output_tokens,
            "input_tokens": self.input_tokens,
        }


@dataclass
class LevelStats:
    """One concurrency level's statistics.

    Latency summaries cover successful requests only (TPOT: those with >= 2 output tokens). Throughputs use
    the level's wall time (first send to last end): ``output_tokens_per_s`` = output tokens of successful
    requests / wall_s, ``requests_per_s`` = successful requests / wall_s.
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

    @property
    def error_count(self) -> int:
        """Failed requests in this level."""
        return sum(self.errors.values())

    def to_dict(self, with_requests: bool = True) -> dict[str, Any]:
        """A JSON-ready dict (latencies in ms, throughputs per second)."""
        out: dict[str, Any] = {
            "concurrency": self.concurrency,
            "requests": self.requests,
            "ok": self.ok,
            "errors": dict(self.errors),
            "error_examples": dict(self.error_examples),
            "wall_s": self.wall_s,
            "output_tokens": self.output_tokens,
            "output_tokens_per_s": self.output_tokens_per_s,
            "requests_per_s": self.requests_per_s,
            "ttft_ms": self.ttft.as_ms(),
            "tpot_ms": self.tpot.as_ms(),
            "e2e_ms": self.e2e.as_ms(),
            "mean_input_tokens": self.mean_input_tokens,
        }
        if with_requests:
            out["per_request"] = [r.to_dict() for r in self.results]
        return out


def _count_errors(results: Sequence[RequestResult]) -> tuple[dict[str, int], dict[str, str]]:
    """Failures per kind and the first failure's detail per kind, both sorted by kind."""
    errors: dict[str, int] = {}
    examples: dict[str, str] = {}
    for r in results:
        if r.error is not None:
            errors[str(r.error)] = errors.get(str(r.error), 0) + 1
            examples.setdefault(str(r.error), r.detail)
    return dict(sorted(errors.items())), dict(sorted(examples.items()))


def summarize_level(concurrency: int, results: Sequence[RequestResult], wall_s: float | None = None) -> LevelStats:
    """Reduce one level's records to ``LevelStats``.

    Args:
        concurrency: the level's concurrency.
        results: every request of the level, failed ones included.
        wall_s: the level's wall time in seconds; None derives it as max(t_end) - min(t_send).
    """
    if wall_s is None:
        wall_s = (max(r.t_end for r in results) - min(r.t_send for r in results)) if results else 0.0
    good = [r for r in results if r.ok]
    errors, examples = _count_errors(results)
    tokens = sum(r.output_tokens for r in good)
    inputs = [r.input_tokens for r in good if r.input_tokens is not None]
    return LevelStats(
        concurrency=concurrency,
        requests=len(results),
        ok=len(good),
        errors=errors,
        wall_s=wall_s,
        output_tokens=tokens,
        output_tokens_per_s=tokens / wall_s if wall_s > 0 else 0.0,
        requests_per_s=len(good) / wall_s if wall_s > 0 else 0.0,
        ttft=Summary.of([v for r in good if (v := r.ttft_s) is not None]),
        tpot=Summary.of([v for r in good if (v := r.tpot_s) is not None]),
        e2e=Summary.of([r.e2e_s for r in good]),
        mean_input_tokens=(sum(inputs) / len(inputs)) if inputs else None,
        error_examples=examples,
        results=list(results),
    )
