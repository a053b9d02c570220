"""Async streaming load generator behind ``conduit bench``: engine, statistics and writers.

One concurrency model (STYLE.md habit 13): asyncio and ``httpx.AsyncClient`` (one kept-alive connection per
worker). A *level* sends a fixed number of requests with ``concurrency`` closed-loop workers (each worker sends
its next request as soon as its previous one ends); a *sweep* runs the levels in order (default 1, 2, 4, ... 64).

Wire protocols (sources: OpenAI chat-completions streaming reference; Anthropic Messages streaming reference;
vLLM's OpenAI-compatible server for ``ignore_eos`` and ``stream_options``):

- ``openai``: ``POST <base>/chat/completions`` where ``<base>`` is ``<root>/v1`` as rendered by
  ``conduit.adapters.base.Root.openai_base()``; body ``stream: true`` and, unless turned off,
  ``stream_options: {"include_usage": true}``; SSE lines ``data: {json}`` ending with ``data: [DONE]``.
  ``ignore_eos: true`` (a vLLM extension; OpenAI's own API refuses it) only when asked.
- ``anthropic``: ``POST <root>/v1/messages`` (the root as ``Root.anthropic_base()`` gives it), headers
  ``anthropic-version: 2023-06-01`` and the key as ``x-api-key`` (or ``Authorization: Bearer``); events
  ``message_start``, ``content_block_delta``, ``message_delta`` (``usage.output_tokens``), ``message_stop``.

Measurements per request, all from ``time.perf_counter`` (seconds):

- TTFT = t_first - t_send, where t_send is taken just before the request is handed to httpx and t_first when
  the first *non-empty* content delta arrives (an OpenAI role-only chunk with ``content: ""`` is not a token).
- TPOT = (t_last - t_first) / (output_tokens - 1); undefined (None) for fewer than 2 output tokens.
- e2e = t_end - t_send (t_end: the terminator ``[DONE]`` / ``message_stop`` arrived, or the failure).
- output tokens: the server's final usage count when it sends one (OpenAI ``usage.completion_tokens`` in the
  ``include_usage`` chunk; Anthropic ``message_delta.usage.output_tokens``), else the number of non-empty
  content deltas.

Error kinds (``ErrorKind``), translated at this boundary from httpx's exception tree::

    connect         no connection: refused, DNS, unreachable, unsupported scheme, proxy failure
    timeout         connect, write, pool or read timeout (``timeout_s`` between two reads)
    http_3xx/4xx/5xx  the server answered with that status class (redirects are not followed)
    stream_broken   the stream stopped before its terminator, held malformed JSON or an error event,
                    or the server closed the connection mid-answer

Percentiles use linear interpolation between closest ranks: numpy's default ``method="linear"`` (Hyndman and
Fan type 7, also ``statistics.quantiles(method="inclusive")``), implemented here without numpy.

The API key is sent in headers only; it never appears in results, errors, reprs or outputs (``fingerprint``).
"""

from __future__ import annotations

import asyncio
import csv
import json
import math
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

import httpx

from conduit.adapters.base import AuthStyle, Protocol_
from conduit.errors import ConduitError
from conduit.redact import fingerprint

DEFAULT_LEVELS: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)
DEFAULT_MIN_GROWTH = 0.10
ANTHROPIC_VERSION = "2023-06-01"
PERCENTILE_METHOD = "linear interpolation between closest ranks (numpy method='linear', Hyndman-Fan type 7)"


class ErrorKind(StrEnum):
    """Why a request failed (see the module docstring for the mapping from httpx errors)."""

    CONNECT = "connect"  # no connection could be made
    TIMEOUT = "timeout"  # a connect/read/write/pool timeout expired
    HTTP_3XX = "http_3xx"  # answered with a redirect (not followed)
    HTTP_4XX = "http_4xx"  # answered with a client error (401 bad key, 404 wrong base URL, 400 bad body)
    HTTP_5XX = "http_5xx"  # answered with a server error
    STREAM_BROKEN = "stream_broken"  # the SSE stream ended early, was malformed, or carried an error event


# --------------------------------------------------------------------------------------------------------
# Pure statistics


def percentile(values: Iterable[float], q: float) -> float | None:
    """The q-th percentile (0 <= q <= 100) by linear interpolation (numpy ``method="linear"``).

    With the values sorted as v[0..n-1], rank h = (n - 1) * q / 100 and the result is
    v[floor h] + (h - floor h) * (v[floor h + 1] - v[floor h]). Returns None for no values.

    Raises:
        ValueError: q outside [0, 100].
    """
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile q must be within [0, 100], got {q}")
    data = sorted(values)
    if not data:
        return None
    h = (len(data) - 1) * q / 100.0
    lo = math.floor(h)
    hi = min(lo + 1, len(data) - 1)
    return data[lo] + (h - lo) * (data[hi] - data[lo])


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
        """Summarize ``values`` (seconds) with ``percentile``; an empty sequence gives all None."""
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
        return {k: (None if v is None else v * 1000.0) for k, v in
                (("p50", self.p50), ("p90", self.p90), ("p99", self.p99), ("mean", self.mean))}


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

        def ms(v: float | None) -> float | None:
            return None if v is None else v * 1000.0

        return {
            "index": self.index,
            "ok": self.ok,
            "error": None if self.error is None else str(self.error),
            "detail": self.detail,
            "http_status": self.http_status,
            "ttft_ms": ms(self.ttft_s),
            "tpot_ms": ms(self.tpot_s),
            "e2e_ms": ms(self.e2e_s),
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
    errors: dict[str, int] = {}
    examples: dict[str, str] = {}
    for r in results:
        if r.error is not None:
            errors[str(r.error)] = errors.get(str(r.error), 0) + 1
            examples.setdefault(str(r.error), r.detail)
    tokens = sum(r.output_tokens for r in good)
    inputs = [r.input_tokens for r in good if r.input_tokens is not None]
    return LevelStats(
        concurrency=concurrency,
        requests=len(results),
        ok=len(good),
        errors=dict(sorted(errors.items())),
        wall_s=wall_s,
        output_tokens=tokens,
        output_tokens_per_s=tokens / wall_s if wall_s > 0 else 0.0,
        requests_per_s=len(good) / wall_s if wall_s > 0 else 0.0,
        ttft=Summary.of([v for r in good if (v := r.ttft_s) is not None]),
        tpot=Summary.of([v for r in good if (v := r.tpot_s) is not None]),
        e2e=Summary.of([r.e2e_s for r in good]),
        mean_input_tokens=(sum(inputs) / len(inputs)) if inputs else None,
        error_examples=dict(sorted(examples.items())),
        results=list(results),
    )


@dataclass(frozen=True)
class Saturation:
    """Where throughput stopped growing, and the ``max_num_seqs`` that follows.

    Attributes:
        min_growth: the fraction used (0.10 = a level must add at least 10% output tokens/s over the
            previous one to count as still growing).
        concurrency: the first level whose growth was below ``min_growth``; None when every step grew enough.
        growth: that level's growth versus the previous level (0.04 = +4%, -0.2 = throughput fell 20%).
        recommended_max_num_seqs: the saturation level; the previous level when throughput *fell* there
            (the previous level was the peak); None when no saturation was seen.
        explanation: one or two sentences for people.
    """

    min_growth: float
    concurrency: int | None
    growth: float | None
    recommended_max_num_seqs: int | None
    explanation: str

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "min_growth": self.min_growth,
            "concurrency": self.concurrency,
            "growth": self.growth,
            "recommended_max_num_seqs": self.recommended_max_num_seqs,
            "explanation": self.explanation,
        }


def find_saturation(points: Sequence[tuple[int, float]], min_growth: float = DEFAULT_MIN_GROWTH) -> Saturation:
    """Find the saturation point of a concurrency sweep.

    The saturation level is the first level (in increasing concurrency) whose output tokens/s grew by less
    than ``min_growth`` (a fraction) versus the previous level: growth = (tps[i] - tps[i-1]) / tps[i-1].
    A step whose previous level had no throughput (every request failed) is not judged.

    Why recommend that level as vLLM's ``max_num_seqs``: it is the smallest batch at which the server already
    delivers its plateau throughput (within ``min_growth`` of the best seen), so a larger batch buys almost no
    tokens/s while every running sequence decodes more slowly (higher TPOT) and new requests wait longer for
    their first token; a smaller one leaves measured throughput unused. When throughput *fell* at that level
    (overload, preemption, errors), the previous level was the peak and is recommended instead.

    Args:
        points: (concurrency, output tokens/s) per level; sorted by concurrency here.
        min_growth: the growth fraction below which a level counts as saturated (>= 0).

    Raises:
        ValueError: ``min_growth`` negative.
    """
    if min_growth < 0:
        raise ValueError(f"min_growth must be >= 0, got {min_growth}")
    pts = sorted(points)
    if len(pts) < 2:
        return Saturation(min_growth, None, None, None,
                          "a saturation point needs at least two concurrency levels; run a sweep "
                          "(e.g. --concurrency 1,2,4,8,16,32,64).")
    if sum(1 for _, t in pts if t > 0) < 2:
        return Saturation(min_growth, None, None, None,
                          "fewer than two levels delivered any tokens: no saturation point can be judged; fix "
                          "the errors above first (e.g. a prompt longer than the model's max_model_len: lower "
                          "--prompt-tokens).")
    for (c_prev, t_prev), (c, t) in zip(pts, pts[1:], strict=False):
        if t_prev <= 0:
            continue
        growth = (t - t_prev) / t_prev
        if growth < min_growth:
            if t < t_prev:
                rec = c_prev
                why = (f"throughput fell {-growth:.0%} from concurrency {c_prev} to {c}: the server was already "
                       f"saturated at {c_prev}; max_num_seqs = {c_prev} keeps its peak without the overload.")
            else:
                rec = c
                why = (f"throughput grew only {growth:.1%} from concurrency {c_prev} to {c} (less than "
                       f"{min_growth:.0%}): {c} concurrent sequences already reach the plateau; more would add "
                       f"latency (TPOT, queueing before the first token), not tokens/s.")
            return Saturation(min_growth, c, growth, rec, why)
    why = (f"throughput kept growing by at least {min_growth:.0%} per level up to concurrency {pts[-1][0]}: "
           "no saturation seen; extend the sweep (e.g. --concurrency ...,128,256) before choosing max_num_seqs.")
    return Saturation(min_growth, None, None, None, why)


def saturation_of(levels: Sequence[LevelStats], min_growth: float = DEFAULT_MIN_GROWTH) -> Saturation:
    """``find_saturation`` over measured levels (output tokens/s of successful requests)."""
    return find_saturation([(lv.concurrency, lv.output_tokens_per_s) for lv in levels], min_growth)


# --------------------------------------------------------------------------------------------------------
# Prompts

# Common English words that BPE tokenizers (Llama, GPT, Qwen families) encode as one token each with their
# leading space, so "N words" is roughly "N tokens". The server's own count is reported as input tokens.
_WORDS: tuple[str, ...] = tuple(
    "the of and to in is was for on that with as by at from his her they this have are not but had "
    "which one you were all she there would their we him been has when who will more no if out so "
    "said what up its about into than them can only other new some could time these two may then do "
    "first any my now such like our over man me even most made after also did many before must through "
    "back years where much your way well down should because each just those people how too little state "
    "good very make world still own see men work long get here between both life being under never day".split()
)
_SYNTH_HEADER_TOKENS = 6  # "Request 123: continue this list." is about six tokens


def synthetic_prompt(n_tokens: int, serial: int) -> str:
    """A prompt of roughly ``n_tokens`` tokens, distinct for each ``serial``.

    The text starts with the serial number and the word list is rotated by it, so no two requests of a sweep
    share a prefix block (vLLM's prefix cache would otherwise make TTFT of later requests unrealistically low).

    Raises:
        ValueError: ``n_tokens`` < 1.
    """
    if n_tokens < 1:
        raise ValueError(f"prompt length must be at least 1 token, got {n_tokens}")
    header = f"Request {serial}: continue this list."
    count = max(0, n_tokens - _SYNTH_HEADER_TOKENS)
    start = (serial * 7) % len(_WORDS)
    words = [_WORDS[(start + i) % len(_WORDS)] for i in range(count)]
    return header + (" " + " ".join(words) if words else "")


def load_prompts(path: Path) -> list[str]:
    """Read prompts from a file: one per line, or JSON Lines.

    A line starting with ``{`` or ``"`` is JSON: a string, or an object with a ``prompt``, ``text`` or
    ``content`` string. Any other non-blank line is a prompt as written. Blank lines are skipped.

    Raises:
        ConduitError: the file cannot be read, a JSON line is malformed (naming file and line), or no
            prompt was found.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConduitError(f"cannot read prompts file {path}: {exc}",
                           hint="give a UTF-8 text file with one prompt per line, or JSON Lines") from None
    prompts: list[str] = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        if line[0] in "{\"":
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ConduitError(f"{path}:{lineno}: not valid JSON ({exc.msg} at column {exc.colno})",
                                   hint="fix the line, or write plain prompts one per line") from None
            if isinstance(obj, dict):
                obj = next((obj[k] for k in ("prompt", "text", "content") if isinstance(obj.get(k), str)), None)
            if not isinstance(obj, str) or not obj:
                raise ConduitError(f"{path}:{lineno}: JSON line holds no prompt string",
                                   hint='use "text" or {"prompt": "text"}')
            prompts.append(obj)
        else:
            prompts.append(line)
    if not prompts:
        raise ConduitError(f"prompts file {path} holds no prompt", hint="write one prompt per line")
    return prompts


@dataclass(frozen=True)
class PromptSource:
    """Where request prompts come from: synthetic text of ``synthetic_tokens`` tokens, or ``prompts`` cycled.

    ``get(serial)`` takes a sweep-wide request serial number (level offset + index).
    """

    synthetic_tokens: int | None = 128
    prompts: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.synthetic_tokens is None and not self.prompts:
            raise ConduitError("no prompts given", hint="use --prompt-tokens N or --prompts FILE")
        if self.synthetic_tokens is not None and self.synthetic_tokens < 1:
            raise ConduitError(f"--prompt-tokens must be at least 1, got {self.synthetic_tokens}")

    def get(self, serial: int) -> str:
        """The prompt for request ``serial``."""
        if self.prompts:
            return self.prompts[serial % len(self.prompts)]
        assert self.synthetic_tokens is not None  # guarded in __post_init__
        return synthetic_prompt(self.synthetic_tokens, serial)

    def describe(self) -> str:
        """A short description for outputs."""
        if self.prompts:
            return f"{len(self.prompts)} prompts from a file"
        return f"synthetic, about {self.synthetic_tokens} tokens"


# --------------------------------------------------------------------------------------------------------
# Endpoint and configuration


@dataclass(frozen=True)
class Endpoint:
    """Where and how to send requests.

    Attributes:
        base_url: for ``openai`` the versioned base (``<root>/v1``, as ``Root.openai_base()``); for
            ``anthropic`` the root (``Root.anthropic_base()``). A trailing slash is removed.
        protocol: ``openai`` or ``anthropic``.
        key: the API key, or None. Never shown: ``repr`` uses its fingerprint.
        auth: ``bearer`` or ``x-api-key``; None picks the protocol's usual style (openai: bearer,
            anthropic: x-api-key).
    """

    base_url: str
    protocol: Protocol_ = "openai"
    key: str | None = field(default=None, repr=False)
    auth: AuthStyle | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "base_url", self.base_url.strip().rstrip("/"))
        if self.protocol not in ("openai", "anthropic"):
            raise ConduitError(f"unknown protocol {self.protocol!r}", hint="use openai or anthropic")
        if not self.base_url.startswith(("http://", "https://")):
            raise ConduitError(f"base URL {self.base_url!r} is not an http(s) URL",
                               hint="give e.g. http://127.0.0.1:8000/v1 (openai) or http://127.0.0.1:8000 (anthropic)")

    def __repr__(self) -> str:
        return (f"Endpoint(base_url={self.base_url!r}, protocol={self.protocol!r}, "
                f"key={fingerprint(self.key)!r}, auth={self.auth_style!r})")

    @property
    def auth_style(self) -> AuthStyle:
        """The effective auth style."""
        if self.auth is not None:
            return self.auth
        return "x-api-key" if self.protocol == "anthropic" else "bearer"

    @property
    def url(self) -> str:
        """The request URL: ``<base>/chat/completions`` or ``<root>/v1/messages``."""
        if self.protocol == "openai":
            return f"{self.base_url}/chat/completions"
        return f"{self.base_url}/v1/messages"

    def headers(self) -> dict[str, str]:
        """Request headers, key included (never log them)."""
        h = {"content-type": "application/json", "accept": "text/event-stream"}
        if self.protocol == "anthropic":
            h["anthropic-version"] = ANTHROPIC_VERSION
        if self.key:
            if self.auth_style == "x-api-key":
                h["x-api-key"] = self.key
            else:
                h["authorization"] = f"Bearer {self.key}"
        return h


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
        min_growth: the saturation fraction (see ``find_saturation``).
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
        """The JSON request body for one prompt."""
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": self.max_tokens,
            "stream": True,
        }
        if self.endpoint.protocol == "openai":
            if self.stream_usage:
                body["stream_options"] = {"include_usage": True}
            if self.ignore_eos:
                body["ignore_eos"] = True
        return body

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


# --------------------------------------------------------------------------------------------------------
# Engine


class StreamError(Exception):
    """The stream is malformed or carried an error event (becomes ``ErrorKind.STREAM_BROKEN``)."""


def _redact(text: str, key: str | None) -> str:
    """``text`` with every occurrence of the key replaced by its fingerprint, cut to 300 characters."""
    if key:
        text = text.replace(key, fingerprint(key))
    return text[:300]


class StreamRecorder:
    """Accumulates one response's SSE events into a ``RequestResult``; no I/O, so it is tested on synthetic
    event lists with chosen timestamps.

    Attributes:
        r: the record being filled (t_first, t_last, content_chunks, usage_output_tokens, input_tokens).
        done: the terminator (``[DONE]`` / ``message_stop``) was seen; ``t_done`` when (perf_counter s).
    """

    def __init__(self, result: RequestResult, protocol: Protocol_) -> None:
        self.r = result
        self.protocol = protocol
        self.done = False
        self.t_done: float | None = None

    def token(self, text: Any, now: float) -> None:
        """Count a content delta received at ``now`` (perf_counter seconds) when ``text`` is a non-empty str."""
        if isinstance(text, str) and text:
            if self.r.t_first is None:
                self.r.t_first = now
            self.r.t_last = now
            self.r.content_chunks += 1

    def event(self, data: str, now: float) -> None:
        """Apply one SSE event's data (the ``data:`` lines joined) received at ``now``.

        Raises:
            StreamError: malformed JSON, or an error event from the server.
        """
        if self.protocol == "openai":
            self._openai(data, now)
        else:
            self._anthropic(data, now)

    def _load(self, data: str) -> dict[str, Any]:
        try:
            obj = json.loads(data)
        except json.JSONDecodeError:
            raise StreamError(f"malformed JSON in stream: {data[:80]!r}") from None
        if not isinstance(obj, dict):
            raise StreamError(f"unexpected stream event: {data[:80]!r}")
        return obj

    def _openai(self, data: str, now: float) -> None:
        if data.strip() == "[DONE]":
            self.done, self.t_done = True, now
            return
        obj = self._load(data)
        if obj.get("error"):
            err = obj["error"]
            raise StreamError(f"error event: {err.get('message', err) if isinstance(err, dict) else err}")
        for choice in obj.get("choices") or ():
            delta = choice.get("delta") or {}
            # vLLM streams reasoning models' thinking as reasoning_content / reasoning: tokens all the same.
            self.token(delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning"), now)
        usage = obj.get("usage")
        if isinstance(usage, dict):
            if isinstance(usage.get("completion_tokens"), int):
                self.r.usage_output_tokens = usage["completion_tokens"]
            if isinstance(usage.get("prompt_tokens"), int):
                self.r.input_tokens = usage["prompt_tokens"]

    def _anthropic(self, data: str, now: float) -> None:
        obj = self._load(data)
        kind = obj.get("type")
        if kind == "content_block_delta":
            delta = obj.get("delta") or {}
            self.token(delta.get("text") or delta.get("thinking") or delta.get("partial_json"), now)
        elif kind == "message_delta":
            usage = obj.get("usage") or {}
            if isinstance(usage.get("output_tokens"), int):
                self.r.usage_output_tokens = usage["output_tokens"]
        elif kind == "message_start":
            usage = (obj.get("message") or {}).get("usage") or {}
            if isinstance(usage.get("input_tokens"), int):
                self.r.input_tokens = usage["input_tokens"]
        elif kind == "message_stop":
            self.done, self.t_done = True, now
        elif kind == "error":
            err = obj.get("error") or {}
            raise StreamError(f"error event: {err.get('message', err) if isinstance(err, dict) else err}")


async def _consume(resp: httpx.Response, rec: StreamRecorder) -> None:
    """Read an SSE response to the end of its body, feeding ``rec`` one event at a time.

    Reading past the terminator to the end of the body (servers end it right after) lets httpx keep the
    connection alive for the next request; leaving early would close it and make every request reconnect.
    """
    data: list[str] = []
    async for line in resp.aiter_lines():
        if line == "":
            if data:
                rec.event("\n".join(data), time.perf_counter())
                data.clear()
            continue
        if line.startswith("data:"):
            value = line[5:]
            data.append(value[1:] if value.startswith(" ") else value)
        # event:, id:, retry: and comments (":...") carry nothing we need: the JSON "type" names the event.
    if data:
        rec.event("\n".join(data), time.perf_counter())


def _status_kind(status: int) -> ErrorKind:
    if status >= 500:
        return ErrorKind.HTTP_5XX
    if status >= 400:
        return ErrorKind.HTTP_4XX
    return ErrorKind.HTTP_3XX


async def run_request(client: httpx.AsyncClient, cfg: BenchConfig, prompt: str, index: int,
                      concurrency: int) -> RequestResult:
    """Send one streaming request and record it. Never raises for network or server failures: they become
    ``RequestResult.error`` (``ErrorKind``) with a key-free ``detail``."""
    ep = cfg.endpoint
    body = cfg.body(prompt)
    headers = ep.headers()
    result = RequestResult(index=index, concurrency=concurrency, t_send=time.perf_counter())
    rec = StreamRecorder(result, ep.protocol)
    try:
        async with client.stream("POST", ep.url, json=body, headers=headers) as resp:
            result.http_status = resp.status_code
            if resp.status_code >= 300 or resp.status_code < 200:
                raw = await resp.aread()
                result.error = _status_kind(resp.status_code)
                result.detail = f"HTTP {resp.status_code}: {raw[:200].decode('utf-8', 'replace')}"
            else:
                await _consume(resp, rec)
                if not rec.done:
                    ctype = resp.headers.get("content-type", "")
                    result.error = ErrorKind.STREAM_BROKEN
                    result.detail = ("stream ended before its terminator "
                                     + ("([DONE])" if ep.protocol == "openai" else "(message_stop)")
                                     + ("" if "event-stream" in ctype else f"; content-type was {ctype!r}, "
                                        "the server did not stream"))
    except StreamError as exc:
        result.error, result.detail = ErrorKind.STREAM_BROKEN, str(exc)
    except httpx.TimeoutException as exc:
        result.error, result.detail = ErrorKind.TIMEOUT, f"{type(exc).__name__}: {exc}"
    except httpx.ConnectError as exc:
        result.error, result.detail = ErrorKind.CONNECT, f"{type(exc).__name__}: {exc}"
    except (httpx.ReadError, httpx.WriteError, httpx.CloseError, httpx.ProtocolError, httpx.DecodingError) as exc:
        result.error, result.detail = ErrorKind.STREAM_BROKEN, f"{type(exc).__name__}: {exc}"
    except httpx.TransportError as exc:  # proxy errors, unsupported protocol: no usable connection
        result.error, result.detail = ErrorKind.CONNECT, f"{type(exc).__name__}: {exc}"
    result.t_end = rec.t_done if rec.done and rec.t_done is not None and result.ok else time.perf_counter()
    result.detail = _redact(result.detail, ep.key)
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
    results: list[RequestResult] = []
    next_index = 0

    async def worker(client: httpx.AsyncClient) -> None:
        nonlocal next_index
        while next_index < cfg.requests:
            i = next_index
            next_index += 1
            r = await run_request(client, cfg, cfg.prompts.get(serial_offset + i), i, concurrency)
            results.append(r)
            if on_result is not None:
                on_result(r)

    t0 = time.perf_counter()
    async with asyncio.TaskGroup() as tg:
        for k in range(min(concurrency, cfg.requests)):
            tg.create_task(worker(clients[k]))
    wall = time.perf_counter() - t0
    results.sort(key=lambda r: r.index)
    return summarize_level(concurrency, results, wall)


@dataclass
class SweepResult:
    """A finished sweep: settings (key-free), one ``LevelStats`` per level in run order, the saturation."""

    config: dict[str, Any]
    levels: list[LevelStats]
    saturation: Saturation

    @property
    def total_ok(self) -> int:
        """Successful requests over all levels."""
        return sum(lv.ok for lv in self.levels)

    def to_dict(self, with_requests: bool = True) -> dict[str, Any]:
        """The JSON document ``write_json`` writes."""
        return {
            "conduit_bench": 1,
            "config": self.config,
            "percentile_method": PERCENTILE_METHOD,
            "units": {"latency": "ms", "throughput": "per second"},
            "levels": [lv.to_dict(with_requests) for lv in self.levels],
            "saturation": self.saturation.to_dict(),
        }


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


# --------------------------------------------------------------------------------------------------------
# Writers

CSV_FIELDS: tuple[str, ...] = (
    "concurrency", "requests", "ok", "errors", "errors_by_kind", "wall_s", "output_tokens",
    "output_tokens_per_s", "requests_per_s",
    "ttft_p50_ms", "ttft_p90_ms", "ttft_p99_ms", "ttft_mean_ms",
    "tpot_p50_ms", "tpot_p90_ms", "tpot_p99_ms", "tpot_mean_ms",
    "e2e_p50_ms", "e2e_p90_ms", "e2e_p99_ms", "e2e_mean_ms", "mean_input_tokens",
)


def csv_rows(sweep: SweepResult) -> list[dict[str, Any]]:
    """One flat dict per level with the ``CSV_FIELDS`` keys (latencies in ms; empty string for None)."""
    rows = []
    for lv in sweep.levels:
        row: dict[str, Any] = {
            "concurrency": lv.concurrency, "requests": lv.requests, "ok": lv.ok, "errors": lv.error_count,
            "errors_by_kind": ";".join(f"{k}={v}" for k, v in lv.errors.items()),
            "wall_s": lv.wall_s, "output_tokens": lv.output_tokens,
            "output_tokens_per_s": lv.output_tokens_per_s, "requests_per_s": lv.requests_per_s,
            "mean_input_tokens": lv.mean_input_tokens,
        }
        for name, summ in (("ttft", lv.ttft), ("tpot", lv.tpot), ("e2e", lv.e2e)):
            for stat, v in summ.as_ms().items():
                row[f"{name}_{stat}_ms"] = v
        rows.append({k: ("" if row[k] is None else row[k]) for k in CSV_FIELDS})
    return rows


def _write(path: Path, writer: Callable[[Any], object]) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w", encoding="utf-8", newline="") as fh:
            writer(fh)
    except OSError as exc:
        raise ConduitError(f"cannot write {path}: {exc.strerror or exc}",
                           hint="choose a writable path") from None


def write_json(path: Path, sweep: SweepResult) -> None:
    """Write ``sweep.to_dict()`` (with per-request records) as indented JSON. Raises ConduitError."""
    _write(path, lambda fh: fh.write(json.dumps(sweep.to_dict(), indent=2) + "\n"))


def write_csv(path: Path, sweep: SweepResult) -> None:
    """Write one row per level with ``CSV_FIELDS`` columns. Raises ConduitError."""

    def w(fh: Any) -> None:
        out = csv.DictWriter(fh, fieldnames=list(CSV_FIELDS))
        out.writeheader()
        out.writerows(csv_rows(sweep))

    _write(path, w)


PLOT_HINT = "install the plotting extra: pip install 'conduit[plot]' (matplotlib)"


def plotting_available() -> bool:
    """True when matplotlib can be imported (the optional ``plot`` extra)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def write_plot(path: Path, sweep: SweepResult) -> None:
    """Draw output tokens/s and TTFT p50/p99 against concurrency into a PNG, marking the saturation level.

    Raises:
        ConduitError: matplotlib is not installed (hint: the ``plot`` extra), or the file cannot be written.
    """
    if not plotting_available():
        raise ConduitError("--plot needs matplotlib, which is not installed", hint=PLOT_HINT)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    levels = sorted(sweep.levels, key=lambda lv: lv.concurrency)
    xs = [lv.concurrency for lv in levels]
    fig, (ax1, ax2) = plt.subplots(2, 1, sharex=True, figsize=(7, 6))
    try:
        ax1.plot(xs, [lv.output_tokens_per_s for lv in levels], marker="o")
        ax1.set_ylabel("output tokens/s")
        ax1.set_title(f"conduit bench: {sweep.config.get('model', '')}")
        for stat in ("p50", "p99"):
            ax2.plot(xs, [lv.ttft.as_ms()[stat] for lv in levels], marker="o", label=f"TTFT {stat}")
        ax2.set_ylabel("TTFT (ms)")
        ax2.set_xlabel("concurrency")
        ax2.set_xscale("log", base=2)
        ax2.legend()
        sat = sweep.saturation.concurrency
        if sat is not None:
            for ax in (ax1, ax2):
                ax.axvline(sat, linestyle="--", color="grey")
        fig.tight_layout()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fig.savefig(path, format="png")
        except OSError as exc:
            raise ConduitError(f"cannot write {path}: {exc.strerror or exc}", hint="choose a writable path") from None
    finally:
        plt.close(fig)


def parse_levels(text: str) -> tuple[int, ...]:
    """Parse ``"1,2,4"`` into ``(1, 2, 4)``.

    Raises:
        ValueError: an item is not a positive integer (the message names it).
    """
    out = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        if not item.isdigit() or int(item) < 1:
            raise ValueError(f"{item!r} is not a positive integer")
        out.append(int(item))
    if not out:
        raise ValueError("no concurrency level given")
    return tuple(out)


def describe_errors(errors: Mapping[str, int]) -> str:
    """``"http_5xx=3, connect=1"`` or ``"-"``."""
    return ", ".join(f"{k}={v}" for k, v in errors.items()) or "-"
