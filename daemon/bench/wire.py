"""The two streaming wire protocols: where a request goes, what it carries, and how its SSE events fill a
``RequestResult``. No network here: ``SSEBuffer`` splits whatever bytes arrive into events.

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
import re
from dataclasses import dataclass, field
from typing import Any

from conduit.adapters.base import AuthStyle, Protocol_
from conduit.daemon.bench.stats import RequestResult
from conduit.daemon.config.gateway import auth_headers
from conduit.errors import ConduitError
from conduit.redact import fingerprint

_VERSION_TAIL = re.compile(r"/v[0-9]+$")


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
    def root(self) -> str:
        """The server's root: the base URL without a trailing ``/v<N>`` (where vLLM serves ``/tokenize`` and
        ``/metrics``)."""
        return _VERSION_TAIL.sub("", self.base_url)

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
        return {"content-type": "application/json", "accept": "text/event-stream",
                **auth_headers(self.protocol, self.key, self.auth_style)}


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
    event lists with chosen timestamps. Chunks, TTFT and ITL as ``conduit.daemon.bench.stats`` defines them
    (``vllm bench serve``'s definitions).

    Attributes:
        r: the record being filled (t_first, t_last, chunks, itl, content_chunks, usage and input tokens).
        done: the terminator (``[DONE]`` / ``message_stop``) was seen; ``t_done`` when (perf_counter s).
    """

    __slots__ = ("r", "protocol", "done", "t_done")

    def __init__(self, result: RequestResult, protocol: Protocol_) -> None:
        self.r = result
        self.protocol = protocol
        self.done = False
        self.t_done: float | None = None

    def chunk(self, text: Any, now: float) -> None:
        """Record a chunk received at ``now`` (perf_counter s); ``text`` is its content (a token when a
        non-empty str)."""
        r = self.r
        if r.t_last is None:
            r.t_first = now
        else:
            r.itl.append(now - r.t_last)
        r.t_last = now
        r.chunks += 1
        if text and isinstance(text, str):
            r.content_chunks += 1

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
        if data == "[DONE]" or data.strip() == "[DONE]":
            self.done, self.t_done = True, now
            return
        obj = self._load(data)
        choices = obj.get("choices")
        if choices:
            delta = choices[0].get("delta") or {}
            # vLLM streams reasoning models' thinking as reasoning_content / reasoning: tokens all the same.
            self.chunk(delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning"), now)
        elif obj.get("error"):
            raise StreamError(_error_message(obj["error"]))
        usage = obj.get("usage")
        if usage and isinstance(usage, dict):
            if isinstance(usage.get("completion_tokens"), int):
                self.r.usage_output_tokens = usage["completion_tokens"]
            if isinstance(usage.get("prompt_tokens"), int):
                self.r.input_tokens = usage["prompt_tokens"]

    def _anthropic(self, data: str, now: float) -> None:
        obj = self._load(data)
        kind = obj.get("type")
        if kind == "content_block_delta":
            delta = obj.get("delta") or {}
            self.chunk(delta.get("text") or delta.get("thinking") or delta.get("partial_json"), now)
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


class SSEBuffer:
    """Splits a response body, fed as it arrives in byte chunks of any size, into SSE events' data.

    An event ends at a blank line (``\\n\\n``; ``\\r\\n`` line ends are normalised); its data is its ``data:``
    lines joined with ``\\n`` (one leading space after the colon removed). Events without data (comments,
    ``event:``-only) yield nothing: the JSON ``type`` names Anthropic's events. UTF-8 split across chunks is
    decoded incrementally.
    """

    __slots__ = ("_buf", "_tail", "_cr")

    def __init__(self) -> None:
        self._buf = ""
        self._tail = b""
        self._cr = False

    def feed(self, chunk: bytes) -> list[str]:
        """The data of every event completed by ``chunk``."""
        if self._tail:
            chunk, self._tail = self._tail + chunk, b""
        try:
            text = chunk.decode()
        except UnicodeDecodeError:  # a multi-byte character split across chunks: keep its start for later
            cut = _utf8_cut(chunk)
            text, self._tail = chunk[:cut].decode("utf-8", "replace"), chunk[cut:]
        if self._cr:  # a "\r" held back from the previous chunk
            text, self._cr = "\r" + text, False
        if text.endswith("\r"):  # maybe half of a "\r\n": wait for the next chunk
            text, self._cr = text[:-1], True
        if "\r" in text:
            text = text.replace("\r\n", "\n")
        buf = self._buf + text
        if "\n\n" not in buf:
            self._buf = buf
            return []
        *events, self._buf = buf.split("\n\n")
        return [d for e in events if (d := _data_of(e)) is not None]

    def close(self) -> list[str]:
        """The data of an event left unterminated at the end of the body (servers may omit the last blank line)."""
        rest, self._buf = self._buf, ""
        d = _data_of(rest) if rest.strip() else None
        return [] if d is None else [d]


def _utf8_cut(b: bytes) -> int:
    """Where the trailing incomplete UTF-8 sequence of ``b`` starts (len(b) when there is none)."""
    for back in range(1, min(4, len(b)) + 1):
        byte = b[-back]
        if byte & 0xC0 != 0x80:  # a lead byte (or ASCII)
            need = 1 if byte < 0x80 else 2 if byte >> 5 == 6 else 3 if byte >> 4 == 14 else 4
            return len(b) - back if need > back else len(b)
    return len(b)


def _data_of(event: str) -> str | None:
    """The data of one SSE event (its ``data:`` lines joined), or None when it has none."""
    if event.startswith("data: ") and "\n" not in event:  # the usual one-line event: fast path
        return event[6:]
    data = []
    for line in event.split("\n"):
        if line.startswith("data:"):
            value = line[5:]
            data.append(value[1:] if value.startswith(" ") else value)
        # event:, id:, retry: and comments (":...") carry nothing we need
    return "\n".join(data) if data else None
