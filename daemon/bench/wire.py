"""The two streaming wire protocols: where a request goes, what it carries, and how its SSE events fill a
``RequestResult``. No network here: ``consume_sse`` reads lines from whatever yields them.

Sources: OpenAI chat-completions streaming reference; Anthropic Messages streaming reference; vLLM's
OpenAI-compatible server for ``ignore_eos`` and ``stream_options``.

- ``openai``: ``POST <base>/chat/completions`` where ``<base>`` is ``<root>/v1`` as rendered by
  ``conduit.adapters.base.Root.openai_base()``; body ``stream: true`` and, unless turned off,
  ``stream_options: {"include_usage": true}``; SSE lines ``data: {json}`` ending with ``data: [DONE]``.
  ``ignore_eos: true`` (a vLLM extension; OpenAI's own API refuses it) only when asked.
- ``anthropic``: ``POST <root>/v1/messages`` (the root as ``Root.anthropic_base()`` gives it), headers
  ``anthropic-version: 2023-06-01`` and the key as ``x-api-key`` (or ``Authorization: Bearer``); events
  ``message_start``, ``content_block_delta``, ``message_delta`` (``usage.output_tokens``), ``message_stop``.

The API key is sent in headers only; ``Endpoint``'s repr shows its ``fingerprint``.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterable
from dataclasses import dataclass, field
from typing import Any

from conduit.adapters.base import AuthStyle, Protocol_
from conduit.daemon.bench.stats import RequestResult
from conduit.errors import ConduitError
from conduit.redact import fingerprint

ANTHROPIC_VERSION = "2023-06-01"


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

    Raises:
        ConduitError: an unknown protocol, or a base URL that is not http(s).
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

    @property
    def terminator(self) -> str:
        """The event that ends a complete stream, as people read it in errors."""
        return "[DONE]" if self.protocol == "openai" else "message_stop"

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


def request_body(protocol: Protocol_, model: str, prompt: str, max_tokens: int, *,
                 stream_usage: bool = True, ignore_eos: bool = False) -> dict[str, Any]:
    """The JSON body of one streaming request: one user message, ``max_tokens``, ``stream: true``.

    ``stream_usage`` (``stream_options.include_usage``) and ``ignore_eos`` apply to ``openai`` only; the
    Anthropic protocol has neither (it always sends usage in ``message_delta``).
    """
    body: dict[str, Any] = {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "stream": True,
    }
    if protocol == "openai":
        if stream_usage:
            body["stream_options"] = {"include_usage": True}
        if ignore_eos:
            body["ignore_eos"] = True
    return body


class StreamError(Exception):
    """The stream is malformed or carried an error event (becomes ``ErrorKind.STREAM_BROKEN``)."""


def _error_message(err: Any) -> str:
    return f"error event: {err.get('message', err) if isinstance(err, dict) else err}"


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
            raise StreamError(_error_message(obj["error"]))
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
            raise StreamError(_error_message(obj.get("error") or {}))


async def consume_sse(lines: AsyncIterable[str], rec: StreamRecorder) -> None:
    """Read SSE ``lines`` (without line endings) to their end, feeding ``rec`` one event at a time, each
    stamped with ``time.perf_counter()`` as it completes.

    The caller passes the whole body (``httpx.Response.aiter_lines()``): reading past the terminator to the
    end (servers end the body right after) lets httpx keep the connection alive for the next request;
    leaving early would close it and make every request reconnect.

    Raises:
        StreamError: from ``rec.event``.
    """
    data: list[str] = []
    async for line in lines:
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
