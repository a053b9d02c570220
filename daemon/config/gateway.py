"""Every request conduit sends to a model gateway or engine: its headers, and the one bounded reader.

Headers (``auth_headers``): the key goes as ``Authorization: Bearer <key>`` or, for a channel with
``auth = "x-api-key"``, as ``x-api-key: <key>``; an Anthropic-protocol request also names the API version
(``anthropic-version``), which Anthropic's API requires.

The bounded reader: a gateway is another program, maybe a wrong URL pointing at a file server, maybe hostile.
Every exchange with one goes through ``aread_bounded`` (async, httpx), ``read_bounded`` (the same from
synchronous code) or ``get_stdlib`` (the standard library's ``http.client``, for commands that keep httpx out of
their start-up), so that

- **one deadline covers the whole exchange** (``deadline_s`` seconds: resolve, connect, send, headers, body): a
  server that answers 200 and then drips one byte every 2 s is a timeout (``GatewayTimeout``), which the agent's
  fallback judge counts as an outage like a 503;
- **the body read is capped after decoding** (``max_bytes``): ``Content-Encoding: gzip``/``deflate`` is decoded
  here, incrementally, never more than the bytes still allowed at a time, so a 0.5 MB gzip bomb costs no more
  memory than the cap; a longer body stops the read (``GatewayAnswer.truncated``) and the connection is closed;
  any other encoding is not decoded (``GatewayAnswer.problem``). ``max_bytes = 0`` reads no body at all (the
  status is the answer).

Used by the agent's prober (and so ``doctor --live``), ``doctor --deep``, key rotation, the model catalog and
the vLLM monitor. httpx is imported only when a request is made (``conduit sync`` never loads it).
"""

from __future__ import annotations

import threading
import time
import zlib
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit

from conduit.adapters.base import AuthStyle, Protocol_

if TYPE_CHECKING:
    import httpx

__all__ = ["ANTHROPIC_VERSION", "GatewayAnswer", "GatewayTimeout", "aread_bounded", "auth_headers", "get_stdlib",
           "read_bounded"]

ANTHROPIC_VERSION = "2023-06-01"
_CHUNK = 64 << 10
"""Bytes asked of the network (and of the decoder) at a time."""
_T = TypeVar("_T")


def auth_headers(protocol: Protocol_, key: str | None, auth: AuthStyle) -> dict[str, str]:
    """The gateway headers for one request: ``anthropic-version`` for the Anthropic protocol, then the key in
    ``auth``'s header (none when ``key`` is None or empty: a channel that needs no key). Header names are lower
    case. The values hold the key: never log them."""
    headers: dict[str, str] = {}
    if protocol == "anthropic":
        headers["anthropic-version"] = ANTHROPIC_VERSION
    if key:
        if auth == "x-api-key":
            headers["x-api-key"] = key
        else:
            headers["authorization"] = f"Bearer {key}"
    return headers


class GatewayTimeout(TimeoutError):
    """The exchange did not end within its deadline.

    Attributes:
        phase: ``connect`` (no connection), ``read`` (connected, no whole header block) or ``body`` (the headers
            came, the body did not finish: a drip).
        deadline_s: the bound, seconds.
    """

    def __init__(self, phase: str, deadline_s: float) -> None:
        words = {"connect": "no connection", "read": "connected, but no answer",
                 "body": "the answer did not finish"}.get(phase, "no whole answer")
        super().__init__(f"{words} within {deadline_s:g} s")
        self.phase, self.deadline_s = phase, deadline_s


@dataclass
class GatewayAnswer:
    """What a bounded read got.

    Attributes:
        status: the HTTP status.
        headers: the answer's headers, names lower case (values as sent: outside text, never printed raw).
        body: the decoded body, at most ``max_bytes`` bytes (a ``bytearray``: ``json.loads`` takes it as is);
            empty when the read was asked not to keep it.
        truncated: the body was longer than ``max_bytes`` (the rest was not read), or undecodable.
        problem: why the body is incomplete, in words (``over 16777216 bytes``, ``Content-Encoding br is not
            decoded``), or None.
        elapsed_s: seconds from the start to the end of the read.
        size: decoded bytes read (at most ``max_bytes`` + 1).
    """

    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: bytearray = field(default_factory=bytearray)
    truncated: bool = False
    problem: str | None = None
    elapsed_s: float = 0.0
    size: int = 0


class _Decoder:
    """Incremental ``Content-Encoding`` decoding that never produces more than it is allowed at a time."""

    def __init__(self, encoding: str) -> None:
        self.encoding = encoding.strip().lower()
        self.unsupported = self.encoding not in ("", "identity", "gzip", "x-gzip", "deflate")
        wbits = 16 + zlib.MAX_WBITS if self.encoding in ("gzip", "x-gzip") else zlib.MAX_WBITS
        self._z = zlib.decompressobj(wbits) if self.encoding not in ("", "identity") else None
        self._first = True

    def feed(self, data: bytes, room: int) -> tuple[list[bytes], bool]:
        """``(pieces, over)``: the decoded bytes of ``data`` in pieces of at most ``_CHUNK`` bytes, no more than
        ``room + 1`` in all; ``over`` when ``data`` decodes to more than ``room``. A piece at a time is made, so
        a bomb never inflates more than ``_CHUNK`` at once. Raises zlib.error for a damaged stream."""
        if self._z is None:
            return [data[:room + 1]], len(data) > room
        if self._first and self.encoding == "deflate" and data and (data[0] & 0x0F) != 8:
            self._z = zlib.decompressobj(-zlib.MAX_WBITS)  # raw deflate, as some servers send it
        self._first = False
        pieces: list[bytes] = []
        made = 0
        while True:
            limit = min(_CHUNK, room + 1 - made)
            out = self._z.decompress(data, limit)
            pieces.append(out)
            made += len(out)
            data = self._z.unconsumed_tail
            if made > room:
                return pieces, True
            if not data and len(out) < limit:  # all input used, no output held back
                return pieces, False


def _fill(answer: GatewayAnswer, decoder: _Decoder, chunk: bytes, max_bytes: int, keep: bool = True) -> bool:
    """Add one raw ``chunk`` to ``answer.body`` (only counted in ``answer.size`` unless ``keep``); False once the
    cap is passed or the body cannot be decoded."""
    try:
        pieces, over = decoder.feed(chunk, max_bytes - answer.size)
    except zlib.error:
        answer.truncated, answer.problem = True, f"the body is not valid {decoder.encoding}"
        return False
    for piece in pieces:
        if keep:
            answer.body += piece[:max_bytes - len(answer.body)]
        answer.size += len(piece)
    if over:
        answer.truncated, answer.problem = True, f"over {max_bytes} bytes"
        return False
    return True


def _start(status: int, headers: dict[str, str], max_bytes: int) -> tuple[GatewayAnswer, _Decoder | None]:
    """The answer before its body, and the decoder to read it with (None: do not read the body)."""
    answer = GatewayAnswer(status, headers)
    decoder = _Decoder(headers.get("content-encoding", ""))
    if max_bytes <= 0:
        return answer, None
    if decoder.unsupported:
        answer.truncated, answer.problem = True, f"Content-Encoding {decoder.encoding[:40]!r} is not decoded"
        return answer, None
    return answer, decoder


async def aread_bounded(client: httpx.AsyncClient, method: str, url: str, *, headers: dict[str, str],
                        max_bytes: int, deadline_s: float, json_body: Any = None, keep: bool = True) -> GatewayAnswer:
    """One request through ``client`` (redirects as the client says), bounded as a whole by ``deadline_s``
    seconds, its decoded body capped at ``max_bytes`` bytes (see the module docstring). With ``keep`` False the
    body is read to its end (or the cap) and counted, but not kept: the answer's end is what matters.

    Raises:
        GatewayTimeout: the exchange did not end within ``deadline_s`` (``phase`` says where it stopped).
        httpx.HTTPError, OSError: the transport failed (DNS, refused, TLS, a broken connection).
    """
    import httpx

    t0 = time.monotonic()
    phase = "read"
    send = {**headers, "accept-encoding": "gzip, deflate, identity"}
    try:
        import asyncio  # loaded by the caller's event loop already

        async with asyncio.timeout(deadline_s):
            async with client.stream(method, url, headers=send, json=json_body, timeout=deadline_s) as resp:
                answer, decoder = _start(resp.status_code, {k.lower(): v for k, v in resp.headers.items()},
                                         max_bytes)
                phase = "body"
                if decoder is not None:
                    async for chunk in resp.aiter_raw(_CHUNK):
                        if not _fill(answer, decoder, chunk, max_bytes, keep):
                            break
    except TimeoutError:
        raise GatewayTimeout(phase, deadline_s) from None
    except httpx.ConnectTimeout:
        raise GatewayTimeout("connect", deadline_s) from None
    except httpx.TimeoutException:
        raise GatewayTimeout(phase, deadline_s) from None
    answer.elapsed_s = time.monotonic() - t0
    return answer


def read_bounded(method: str, url: str, *, headers: dict[str, str], max_bytes: int, deadline_s: float,
                 json_body: Any = None, trust_env: bool = True,
                 transport: httpx.AsyncBaseTransport | None = None) -> GatewayAnswer:
    """``aread_bounded`` from synchronous code, on a fresh httpx client (no redirects followed; proxies from the
    environment when ``trust_env``), on an event loop of its own (a worker thread when this thread runs one).

    Raises:
        GatewayTimeout, httpx.HTTPError, OSError: as ``aread_bounded``.
    """
    import httpx

    async def go() -> GatewayAnswer:
        async with httpx.AsyncClient(follow_redirects=False, trust_env=trust_env, transport=transport) as client:
            return await aread_bounded(client, method, url, headers=headers, max_bytes=max_bytes,
                                       deadline_s=deadline_s, json_body=json_body)

    return _run(go())


def _run(coro: Coroutine[Any, Any, _T]) -> _T:
    """Run ``coro`` to its end: here, or in a worker thread when this thread already runs an event loop."""
    import asyncio  # only when a request is made: the sync daemon never loads it (about 6 MB with ssl)

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    box: list[Any] = []

    def work() -> None:
        try:
            box.append((True, asyncio.run(coro)))
        except BaseException as exc:  # handed back to the caller below
            box.append((False, exc))

    worker = threading.Thread(target=work, name="conduit-gateway", daemon=True)
    worker.start()
    worker.join()
    ok, value = box[0]
    if not ok:
        raise value
    return value  # type: ignore[no-any-return]


def get_stdlib(url: str, headers: dict[str, str], *, max_bytes: int, deadline_s: float) -> GatewayAnswer:
    """A GET with the standard library's ``http.client`` (no httpx), bounded as ``aread_bounded``: one deadline
    of ``deadline_s`` seconds over name resolution (``getaddrinfo`` takes no timeout: the request runs in a
    daemon thread joined for the deadline, and a thread stuck in the resolver is left behind), connect, headers
    and body; no ``Accept-Encoding`` is sent and a body in another encoding is not decoded (``problem``);
    at most ``max_bytes`` bytes are read; redirects are not followed (a 3xx is its status).

    Raises:
        GatewayTimeout: no whole answer within ``deadline_s``.
        OSError: the connection failed (``strerror`` says how); ValueError: the answer is not HTTP.
    """
    deadline = time.monotonic() + deadline_s
    box: list[GatewayAnswer | BaseException] = []
    phase = ["connect"]  # where the worker is: connect, read, body

    def work() -> None:
        try:
            box.append(_stdlib_once(url, headers, max_bytes, deadline_s, deadline, phase))
        except BaseException as exc:  # handed back to the caller below
            box.append(exc)

    worker = threading.Thread(target=work, name="conduit-gateway-get", daemon=True)
    worker.start()
    worker.join(deadline_s + 0.5)  # the thread's own deadline fires first; this catches a hung resolver
    if not box:
        raise GatewayTimeout(phase[0], deadline_s)
    if isinstance(box[0], BaseException):
        raise box[0]
    return box[0]


def _stdlib_once(url: str, headers: dict[str, str], max_bytes: int, deadline_s: float, deadline: float,
                 phase: list[str]) -> GatewayAnswer:
    """The GET of ``get_stdlib``, each socket operation bounded by ``deadline_s`` and the body checked against
    ``deadline`` (``time.monotonic()`` seconds) after every chunk; ``phase[0]`` follows where it is."""
    import http.client  # lazy, with ssl: only a fetch needs them
    import ssl

    parts = urlsplit(url)
    conn: http.client.HTTPConnection = (
        http.client.HTTPSConnection(parts.hostname or "", parts.port, timeout=deadline_s,
                                    context=ssl.create_default_context())
        if parts.scheme == "https" else http.client.HTTPConnection(parts.hostname or "", parts.port,
                                                                  timeout=deadline_s))
    try:
        conn.request("GET", (parts.path or "/") + (f"?{parts.query}" if parts.query else ""),
                     headers={"user-agent": "conduit", **headers, "accept-encoding": "identity"})
        phase[0] = "read"
        resp = conn.getresponse()
        answer, decoder = _start(resp.status, {k.lower(): v for k, v in resp.getheaders()}, max_bytes)
        phase[0] = "body"
        while decoder is not None and (chunk := resp.read1(_CHUNK)):
            if time.monotonic() > deadline:
                raise TimeoutError
            if not _fill(answer, decoder, chunk, max_bytes):
                break
    except TimeoutError:
        raise GatewayTimeout(phase[0], deadline_s) from None
    except http.client.HTTPException as exc:
        raise ValueError(f"not an HTTP answer ({type(exc).__name__})") from None
    finally:
        conn.close()
    return answer
