"""A loopback model gateway that records every request and answers each wire protocol a tool speaks.

It answers on any path prefix (``/api``, ``/api/v1``, ``/x/v1beta``): routes match the path's suffix, so a
profile's base URL form only changes what is recorded. Routes (POST unless said):

==========================================  =====================================================
``*/messages``, ``*/messages/count_tokens``  Anthropic Messages (JSON or SSE when ``stream``)
``*/chat/completions``, ``*/completions``    OpenAI (JSON, or chunks and ``data: [DONE]``)
``*/responses``                              OpenAI Responses (JSON, or its SSE events)
``*/models/M:generateContent``               Gemini; ``:streamGenerateContent`` (``alt=sse``), ``:countTokens``
GET ``*/models``, GET ``*/models/M``         OpenAI list/model, Gemini shape under a ``v1beta``/``v1alpha`` path
HEAD anything                                200, empty (Claude Code's connectivity check)
anything else                                404 with a JSON error (recorded too)
==========================================  =====================================================

The reply text is ``reply``; the model echoed is the one asked (``body.model`` or the Gemini path's).
A ``respond`` function, when given, is asked first and may answer a request itself (an ``Answer``: any
status and body, e.g. a fixed 401 for one route or a model list of one's own); None leaves it to the table.
Threads, not asyncio: it runs inside the sandbox process, which has no event loop. Request bodies are
bounded (``MAX_BODY_BYTES``; larger answers 413), chunked uploads and gzip/deflate encodings are decoded.

Example::

    with RecordingGateway(reply="ok") as gw:
        httpx.post(gw.root + "/api/v1/chat/completions", json={"model": "m", "messages": []})
        [r] = gw.recorded()           # r.path == "/api/v1/chat/completions", r.model == "m"

    def refuse(r: Recorded) -> Answer | None:  # 401 for every route but the model list
        return None if r.route.endswith("/models") else Answer(401, {"error": {"message": "bad key"}})

    with RecordingGateway(respond=refuse) as gw: ...
"""

from __future__ import annotations

import json
import re
import threading
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from conduit.daemon.verify import replies
from conduit.redact import fingerprint

MAX_BODY_BYTES = 8 * 1024 * 1024
READ_TIMEOUT_S = 30.0
MAX_RECORDED = 10_000  # a tool in a retry loop must not grow the record without bound
"""The largest request body read (decoded size too); larger answers 413 and records body None."""

_GEMINI_CALL = re.compile(r"/models/([^/:]+):([A-Za-z]+)$")
_GEMINI_PATH = re.compile(r"/v1(alpha|beta)\d*(/|$)")
AUTH_HEADERS = ("authorization", "x-api-key", "x-goog-api-key")
"""Where a credential may be, in the order checked; the query's ``key=`` comes last."""


@dataclass(frozen=True)
class Recorded:
    """One request the gateway saw.

    ``path`` keeps the query string; ``headers`` have lower-case names; ``body`` is the parsed JSON or None;
    ``model`` is ``body["model"]`` or the Gemini path's ``models/MODEL:...``; ``auth_header`` names where the
    credential was (``authorization``, ``x-api-key``, ``x-goog-api-key`` or ``key`` for the query) and
    ``auth_value`` is its raw value (``Bearer `` stripped). ``auth_value`` is a secret: show only
    ``fingerprint(auth_value)``; ``to_json()`` does that unless ``redact=False``.
    """

    method: str
    path: str
    headers: dict[str, str]
    body: Any
    model: str | None
    auth_header: str | None
    auth_value: str | None

    @property
    def route(self) -> str:
        """The path without its query string."""
        return urlsplit(self.path).path

    def to_json(self, redact: bool = True) -> dict[str, Any]:
        """A JSON-ready dict; with ``redact`` the credential (value and header copy) is its fingerprint."""
        headers = dict(self.headers)
        value = self.auth_value
        if redact:
            value = fingerprint(self.auth_value) if self.auth_value is not None else None
            for name in AUTH_HEADERS:
                if name in headers:
                    headers[name] = fingerprint(headers[name])
        path = _redact_query_key(self.path) if redact else self.path
        return {"method": self.method, "path": path, "headers": headers, "body": self.body,
                "model": self.model, "auth_header": self.auth_header, "auth_value": value}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Recorded:
        """The inverse of ``to_json(redact=False)`` (how the runner reads the sandbox's RESULT.json)."""
        return cls(method=str(data["method"]), path=str(data["path"]), headers=dict(data.get("headers") or {}),
                   body=data.get("body"), model=data.get("model"), auth_header=data.get("auth_header"),
                   auth_value=data.get("auth_value"))


@dataclass(frozen=True)
class Answer:
    """A request's answer chosen by a ``respond`` function instead of the route table: ``status``, ``body``
    (bytes are sent as they are, anything else as JSON) and ``content_type``. A HEAD gets no body."""

    status: int = 200
    body: Any = b""
    content_type: str = replies.JSON

    def reply(self) -> replies.Reply:
        """(body bytes, content type) as sent."""
        data = self.body if isinstance(self.body, bytes) else json.dumps(self.body).encode()
        return data, self.content_type


Responder = Callable[[Recorded], Answer | None]
"""Chooses the answer to one recorded request, or None to leave it to the route table."""


def _redact_query_key(path: str) -> str:
    return re.sub(r"([?&]key=)([^&]*)", lambda m: m.group(1) + fingerprint(m.group(2)), path)


def find_auth(headers: dict[str, str], query: dict[str, list[str]]) -> tuple[str | None, str | None]:
    """(where, raw value) of the request's credential: the first of ``AUTH_HEADERS`` present, else the
    query's ``key``; ``Bearer `` (any case) is stripped from ``authorization``. (None, None) when none."""
    for name in AUTH_HEADERS:
        if name in headers:
            value = headers[name]
            if name == "authorization" and value[:7].lower() == "bearer ":
                value = value[7:]
            return name, value
    if query.get("key"):
        return "key", query["key"][0]
    return None, None


def _model_of(route: str, body: Any) -> str | None:
    if isinstance(body, dict) and isinstance(body.get("model"), str):
        return str(body["model"])
    m = _GEMINI_CALL.search(route)
    return m.group(1) if m else None


def _decode(raw: bytes, encoding: str) -> bytes | None:
    """The body decoded per ``Content-Encoding`` (gzip, deflate, identity); None when undecodable/too big."""
    enc = encoding.strip().lower()
    if enc in ("", "identity"):
        return raw
    if enc not in ("gzip", "x-gzip", "deflate"):
        return None
    wbits = 47 if enc != "deflate" else 15  # 47: gzip or zlib header, auto-detected
    try:
        d = zlib.decompressobj(wbits)
        out = d.decompress(raw, MAX_BODY_BYTES + 1)
        if enc == "deflate" and not out and raw:
            out = zlib.decompressobj(-15).decompress(raw, MAX_BODY_BYTES + 1)
    except zlib.error:
        try:
            out = zlib.decompressobj(-15).decompress(raw, MAX_BODY_BYTES + 1)
        except zlib.error:
            return None
    return out if len(out) <= MAX_BODY_BYTES else None


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server
    timeout = READ_TIMEOUT_S  # http.server sets it on the socket: a client that stops sending frees its thread

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's name
        """Silent: request lines may carry ``?key=``."""

    def do_HEAD(self) -> None:  # noqa: N802 - http.server's name
        answer = self._ask(self._record(None))
        self.send_response(answer.status if answer else 200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_GET(self) -> None:  # noqa: N802
        self._serve(None)

    def do_POST(self) -> None:  # noqa: N802
        raw = self._read_body()
        if raw is None:
            self._record(None)
            self._send(413, *replies._json({"error": {"message": "body too large or undecodable"}}))
            return
        body: Any = None
        if raw:
            try:
                body = json.loads(raw)
            except (ValueError, UnicodeDecodeError):
                body = None
        self._serve(body)

    do_PUT = do_POST  # noqa: N815
    do_DELETE = do_GET  # noqa: N815

    def _read_body(self) -> bytes | None:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            raw = self._read_chunked()
        else:
            try:
                length = int(self.headers.get("Content-Length") or 0)
            except ValueError:
                return None
            if length > MAX_BODY_BYTES or length < 0:
                return None
            raw = self.rfile.read(length)
        if raw is None:
            return None
        return _decode(raw, self.headers.get("Content-Encoding", ""))

    def _read_chunked(self) -> bytes | None:
        out = bytearray()
        while True:
            line = self.rfile.readline(1024)
            try:
                size = int(line.split(b";")[0].strip() or b"0", 16)
            except ValueError:
                return None
            if size < 0:
                return None  # int("-1", 16) parses; rfile.read(-1) would read until the client closes
            if size == 0:
                while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                    pass
                return bytes(out)
            if len(out) + size > MAX_BODY_BYTES:
                return None
            out += self.rfile.read(size)
            self.rfile.readline(8)

    def _record(self, body: Any) -> Recorded:
        split = urlsplit(self.path)
        headers = {k.lower(): v for k, v in self.headers.items()}
        where, value = find_auth(headers, parse_qs(split.query))
        rec = Recorded(method=self.command, path=self.path, headers=headers, body=body,
                       model=_model_of(split.path, body), auth_header=where, auth_value=value)
        self.server.gateway._add(rec)
        return rec

    def _ask(self, rec: Recorded) -> Answer | None:
        respond = self.server.gateway.respond
        return respond(rec) if respond is not None else None

    def _serve(self, body: Any) -> None:
        rec = self._record(body)
        answer = self._ask(rec)
        if answer is not None:
            self._send(answer.status, *answer.reply())
            return
        gw = self.server.gateway
        status, reply = route(rec, gw.reply, gw.model_names())
        self._send(status, *reply)

    def _send(self, status: int, data: bytes, ctype: str) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            if ctype == replies.SSE:
                self.send_header("Cache-Control", "no-cache")
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client gave up first (its timeout): no one to answer


def route(rec: Recorded, reply: str, models: list[str]) -> tuple[int, replies.Reply]:
    """(status, (body, content type)) for one recorded request, by the suffix of its path."""
    path = rec.route.rstrip("/")
    query = parse_qs(urlsplit(rec.path).query)
    model = rec.model or (models[0] if models else "conduit-verify")
    gemini = bool(_GEMINI_PATH.search(path))
    if rec.method in ("POST", "PUT"):
        call = _GEMINI_CALL.search(path)
        if call:
            verb = call.group(2)
            if verb == "generateContent":
                return 200, replies.gemini_generate(model, reply, rec.body)
            if verb == "streamGenerateContent":
                return 200, replies.gemini_stream(model, reply, rec.body, query.get("alt") == ["sse"])
            if verb == "countTokens":
                return 200, replies.gemini_count_tokens(model, reply, rec.body)
        for suffix, build in _POST_ROUTES:
            if path.endswith(suffix):
                return 200, build(model, reply, rec.body)
    elif rec.method == "GET":
        if path.endswith("/models"):
            return 200, replies.model_list(models, gemini)
        m = re.search(r"/models/([^/]+)$", path)
        if m:
            name = m.group(1)
            entry = replies.gemini_model(name) if gemini else replies.openai_model(name)
            return 200, replies._json(entry)
    return 404, replies.not_found(rec.method, rec.route)


_POST_ROUTES = (
    ("/messages/count_tokens", replies.anthropic_count_tokens),
    ("/messages", replies.anthropic_messages),
    ("/chat/completions", replies.chat_completions),
    ("/completions", replies.completions),
    ("/responses", replies.responses),
)
"""Checked in order: the longer suffix first where one ends another."""


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    gateway: RecordingGateway


class RecordingGateway:
    """The recording gateway on ``host:port`` (0: any free port), answering ``reply``; a context manager.

    ``models`` are listed by ``GET */models`` before the models requests asked for (default one
    ``conduit-verify``). ``respond``, when given, is asked first with each recorded request (HEAD too, not one
    refused 413) and its ``Answer`` is sent instead of the route table's; None leaves the request to the table.
    It runs on the request's own thread, so it may block (a slow gateway); it may be replaced while serving.
    ``start()`` binds (``OSError`` when the port is taken) and serves in a daemon thread; ``stop()`` closes.
    ``requests``/``recorded()`` give the requests in arrival order.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0, reply: str = "ok",
                 models: tuple[str, ...] = (), respond: Responder | None = None) -> None:
        self.host, self._port, self.reply = host, port, reply
        self._models = list(models)
        self.respond = respond
        self._lock = threading.Lock()
        self._requests: list[Recorded] = []
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        """The bound port (the asked one until ``start()``)."""
        return self._server.server_address[1] if self._server else self._port

    @property
    def root(self) -> str:
        """``http://HOST:PORT`` (no trailing slash); callers append the profile's path."""
        return f"http://{self.host}:{self.port}"

    @property
    def requests(self) -> list[Recorded]:
        """A snapshot of the requests so far (same as ``recorded()``)."""
        return self.recorded()

    def recorded(self) -> list[Recorded]:
        """A thread-safe copy of the requests so far, in arrival order."""
        with self._lock:
            return list(self._requests)

    def model_names(self) -> list[str]:
        """What ``GET */models`` lists: ``models``, then each model asked for, de-duplicated."""
        with self._lock:
            asked = [r.model for r in self._requests if r.model]
        names = list(dict.fromkeys([*self._models, *asked]))
        return names or ["conduit-verify"]

    def _add(self, rec: Recorded) -> None:
        with self._lock:
            if len(self._requests) < MAX_RECORDED:
                self._requests.append(rec)

    def start(self) -> RecordingGateway:
        """Bind and serve in a daemon thread; returns self. Raises ``OSError`` if the address is taken."""
        if self._server is None:
            self._server = _Server((self.host, self._port), _Handler)
            self._server.gateway = self
            self._port = self._server.server_address[1]
            self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.1},
                                            name="verify-gateway", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket; idempotent."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> RecordingGateway:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
