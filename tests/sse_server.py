"""A real streaming HTTP/1.1 server on 127.0.0.1 with scripted timing, for load-generator tests and bench/.

It speaks both wire protocols the load generator targets, by path:

- ``POST /v1/chat/completions`` (OpenAI): a role-only chunk (``content: ""``) at once, then ``tokens`` content
  chunks (the first after ``first_token_s``, the rest ``inter_token_s`` apart), a ``finish_reason`` chunk,
  a usage chunk when the body asks ``stream_options.include_usage`` and ``usage`` is on, then ``[DONE]``.
  ``stream: false`` answers one JSON completion at once (for a bare non-streaming baseline).
- ``POST /v1/messages`` (Anthropic): ``message_start``, ``content_block_start``, ``ping``, ``tokens``
  ``content_block_delta`` events (same timing), ``content_block_stop``, ``message_delta`` with
  ``usage.output_tokens`` (when ``usage`` is on), ``message_stop``.

Failure scripts: ``fail_status`` answers that status with a JSON error body; ``break_after`` closes the
connection after that many content events without the terminator (chunked body left incomplete).

Responses use ``Transfer-Encoding: chunked`` with keep-alive, one chunk per SSE event. Run it in a thread
(``ScriptedServer``) or as a process: ``python tests/sse_server.py [--tokens N]`` prints ``PORT <n>``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Script:
    """What the server does for every request (seconds for times)."""

    first_token_s: float = 0.0
    inter_token_s: float = 0.0
    tokens: int = 8
    usage: bool = True
    usage_tokens: int | None = None  # report this many output tokens in usage instead of ``tokens``
    fail_status: int | None = None
    break_after: int | None = None
    text: str = "tok"
    input_tokens: int = 11
    echo_auth: bool = False  # put the received auth headers into the failure body (key-leak tests)
    fail_message: str = "scripted failure"
    hold_until: int = 0  # hold each request until this many are in flight at once (or hold_timeout_s)
    hold_timeout_s: float = 10.0


@dataclass
class Seen:
    """One request as received: path, lower-cased headers, parsed JSON body, arrival perf_counter time."""

    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    t_recv: float


@dataclass
class ScriptedServer:
    """The server in a background thread with its own event loop. Use as a context manager.

    Attributes:
        script: the behaviour (may be changed between requests).
        seen: requests received, in order.
        port: the bound port (after ``start``).
    """

    script: Script = field(default_factory=Script)
    seen: list[Seen] = field(default_factory=list)
    port: int = 0
    record: bool = True

    def __post_init__(self) -> None:
        self.connections = 0  # TCP connections accepted
        self.in_flight = 0
        self.max_in_flight = 0
        self.hold_timed_out = 0
        self._cond: asyncio.Condition | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.base_events.Server | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()

    @property
    def root(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://127.0.0.1:{self.port}"

    async def serve(self, port: int = 0) -> asyncio.base_events.Server:
        """Bind on 127.0.0.1 and return the asyncio server (not yet serving forever)."""
        server = await asyncio.start_server(self._handle, "127.0.0.1", port, backlog=1024)
        self.port = server.sockets[0].getsockname()[1]
        return server

    def start(self) -> ScriptedServer:
        """Start serving in a daemon thread; returns once the port is bound."""

        def run() -> None:
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            self._loop = loop
            self._server = loop.run_until_complete(self.serve())
            self._ready.set()
            loop.run_forever()
            self._server.close()
            pending = asyncio.all_tasks(loop)  # open connections' handlers
            for task in pending:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.run_until_complete(self._server.wait_closed())
            loop.close()

        self._thread = threading.Thread(target=run, name="sse-server", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("scripted server did not start")
        return self

    def stop(self) -> None:
        """Stop the loop and join the thread."""
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)

    def __enter__(self) -> ScriptedServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- HTTP

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                _method, path, _ = lines[0].split(" ", 2)
                headers = {}
                for line in lines[1:]:
                    if ":" in line:
                        k, v = line.split(":", 1)
                        headers[k.strip().lower()] = v.strip()
                raw = await reader.readexactly(int(headers.get("content-length", "0")))
                body = json.loads(raw) if raw else {}
                if self.record:
                    self.seen.append(Seen(path, headers, body, time.perf_counter()))
                self.in_flight += 1
                self.max_in_flight = max(self.max_in_flight, self.in_flight)
                try:
                    await self._hold()
                    keep = await self._respond(writer, path, body, headers)
                finally:
                    self.in_flight -= 1
                if not keep:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def _hold(self) -> None:
        """Wait until ``script.hold_until`` requests are in flight together (counts a timeout)."""
        if self._cond is None:
            self._cond = asyncio.Condition()
        async with self._cond:
            self._cond.notify_all()
            if self.script.hold_until and self.max_in_flight < self.script.hold_until:
                try:
                    await asyncio.wait_for(
                        self._cond.wait_for(lambda: self.max_in_flight >= self.script.hold_until),
                        self.script.hold_timeout_s)
                except TimeoutError:
                    self.hold_timed_out += 1

    async def _respond(self, w: asyncio.StreamWriter, path: str, body: dict[str, Any],
                       headers: dict[str, str]) -> bool:
        s = self.script
        if s.fail_status is not None:
            message = s.fail_message
            if s.echo_auth:
                message += f" for {headers.get('authorization', '')}{headers.get('x-api-key', '')}"
            payload = json.dumps({"error": {"message": message, "type": "server_error"}}).encode()
            w.write(f"HTTP/1.1 {s.fail_status} Scripted\r\nContent-Type: application/json\r\n"
                    f"Content-Length: {len(payload)}\r\n\r\n".encode() + payload)
            await w.drain()
            return True
        if path not in ("/v1/chat/completions", "/v1/messages"):
            payload = b'{"error": "not found"}'
            w.write(f"HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\n"
                    f"Content-Length: {len(payload)}\r\n\r\n".encode() + payload)
            await w.drain()
            return True
        openai = path == "/v1/chat/completions"
        if not body.get("stream"):
            payload = json.dumps(self._whole(openai)).encode()
            w.write(f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    f"Content-Length: {len(payload)}\r\n\r\n".encode() + payload)
            await w.drain()
            return True
        w.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")

        def send(event: str) -> None:
            data = event.encode()
            w.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")

        def sse(obj: Any, name: str | None = None) -> None:
            send((f"event: {name}\n" if name else "") + f"data: {json.dumps(obj)}\n\n")

        usage_n = s.usage_tokens if s.usage_tokens is not None else s.tokens
        if openai:
            base = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": body.get("model", "")}
            sse({**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
        else:
            sse({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant",
                 "content": [], "model": body.get("model", ""),
                 "usage": {"input_tokens": s.input_tokens, "output_tokens": 1}}}, "message_start")
            sse({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
                "content_block_start")
            sse({"type": "ping"}, "ping")
        await w.drain()
        for i in range(s.tokens):
            if s.break_after is not None and i >= s.break_after:
                w.write(b"5\r\nda")  # half a chunk, then hang up: the body is incomplete
                await w.drain()
                return False
            delay = s.first_token_s if i == 0 else s.inter_token_s
            if delay:
                await asyncio.sleep(delay)
            if openai:
                sse({**base, "choices": [{"index": 0, "delta": {"content": f"{s.text}{i} "}}]})
            else:
                sse({"type": "content_block_delta", "index": 0,
                     "delta": {"type": "text_delta", "text": f"{s.text}{i} "}}, "content_block_delta")
            await w.drain()
        if openai:
            sse({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]})
            if s.usage and (body.get("stream_options") or {}).get("include_usage"):
                sse({**base, "choices": [], "usage": {"prompt_tokens": s.input_tokens,
                     "completion_tokens": usage_n, "total_tokens": s.input_tokens + usage_n}})
            send("data: [DONE]\n\n")
        else:
            sse({"type": "content_block_stop", "index": 0}, "content_block_stop")
            delta: dict[str, Any] = {"type": "message_delta", "delta": {"stop_reason": "max_tokens"}}
            if s.usage:
                delta["usage"] = {"output_tokens": usage_n}
            sse(delta, "message_delta")
            sse({"type": "message_stop"}, "message_stop")
        w.write(b"0\r\n\r\n")
        await w.drain()
        return True

    def _whole(self, openai: bool) -> dict[str, Any]:
        s = self.script
        text = "".join(f"{s.text}{i} " for i in range(s.tokens))
        if openai:
            return {"id": "chatcmpl-1", "object": "chat.completion",
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                 "finish_reason": "length"}],
                    "usage": {"prompt_tokens": s.input_tokens, "completion_tokens": s.tokens,
                              "total_tokens": s.input_tokens + s.tokens}}
        return {"id": "msg_1", "type": "message", "role": "assistant",
                "content": [{"type": "text", "text": text}], "stop_reason": "max_tokens",
                "usage": {"input_tokens": s.input_tokens, "output_tokens": s.tokens}}


def main(argv: list[str] | None = None) -> int:
    """Serve until killed; prints ``PORT <n>`` on stdout once bound (for a parent process to read)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--tokens", type=int, default=8)
    ap.add_argument("--first-token-s", type=float, default=0.0)
    ap.add_argument("--inter-token-s", type=float, default=0.0)
    args = ap.parse_args(argv)
    srv = ScriptedServer(Script(first_token_s=args.first_token_s, inter_token_s=args.inter_token_s,
                                tokens=args.tokens), record=False)

    async def run() -> None:
        server = await srv.serve(args.port)
        print(f"PORT {srv.port}", flush=True)
        async with server:
            await server.serve_forever()

    try:
        asyncio.run(run())
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
