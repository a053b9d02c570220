"""A real streaming HTTP/1.1 server on 127.0.0.1 with scripted timing, for load-generator tests and bench/.

It speaks both wire protocols the load generator targets, by path:

- ``POST /v1/chat/completions`` (OpenAI): after ``first_token_s`` a role-only chunk (``content: ""``) and the
  first content chunk together (as vLLM sends them), then ``tokens - 1`` more content chunks ``inter_token_s``
  apart, a ``finish_reason`` chunk, a usage chunk when the body asks ``stream_options.include_usage`` and
  ``usage`` is on, then ``[DONE]``. ``role_first`` sends the role chunk at once instead (before the first
  token). ``slow_every``/``slow_extra_s``: every n-th request (1-based) waits that much longer for its first
  token (goodput tests). ``burst``: the same timing is spent first, then the whole stream is written at once
  (a buffering proxy).
  ``stream: false`` answers one JSON completion at once (for a bare non-streaming baseline).
- ``POST /v1/messages`` (Anthropic): ``message_start``, ``content_block_start``, ``ping``, ``tokens``
  ``content_block_delta`` events (same timing), ``content_block_stop``, ``message_delta`` with
  ``usage.output_tokens`` (when ``usage`` is on), ``message_stop``.

Also, with ``metrics`` on: ``GET /metrics`` in vLLM's Prometheus names with the *scripted* latencies (each
answered request observes TTFT ``first_token_s`` and ``tokens - 1`` ITLs of ``inter_token_s``, whatever the
stream did); with ``tokenizer`` on: ``POST /tokenize`` and ``/detokenize`` as vLLM answers them, with a toy
tokenizer of two characters per token, which also counts the usage's ``prompt_tokens``.

Failure scripts: ``fail_status`` answers that status with a JSON error body; ``break_after`` closes the
connection after that many content events without the terminator (chunked body left incomplete).

Responses use ``Transfer-Encoding: chunked`` with keep-alive, one chunk per SSE event. Run it in a thread
(``ScriptedServer``) or as a process: ``python tests/helpers/sse_server.py [--tokens N]`` prints ``PORT <n>``.
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
    role_first: bool = False  # send the role-only chunk before waiting for the first token
    burst: bool = False  # wait the whole answer's time, then write every event at once
    slow_every: int = 0  # every n-th request (1-based count) waits slow_extra_s more before its first token
    slow_extra_s: float = 0.0
    metrics: bool = False  # serve GET /metrics (vLLM names, scripted latencies)
    tokenizer: bool = False  # serve /tokenize and /detokenize; count prompt tokens with the toy tokenizer


def toy_tokens(text: str) -> list[int]:
    """The toy tokenizer: one token per two characters (the id is the pair's UTF-8 bytes as an integer)."""
    return [int.from_bytes(("\x01" + text[i:i + 2]).encode(), "big") for i in range(0, len(text), 2)]


def toy_text(ids: list[int]) -> str:
    """The inverse of ``toy_tokens``."""
    return "".join(i.to_bytes((i.bit_length() + 7) // 8, "big").decode()[1:] for i in ids)


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
        self.answered = 0  # streamed answers begun (numbering for slow_every)
        self.observed = 0  # answers recorded in /metrics
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
                method, path, _ = lines[0].split(" ", 2)
                headers = {}
                for line in lines[1:]:
                    if ":" in line:
                        k, v = line.split(":", 1)
                        headers[k.strip().lower()] = v.strip()
                raw = await reader.readexactly(int(headers.get("content-length", "0")))
                if method == "GET" or path in ("/tokenize", "/detokenize"):
                    await self._side(writer, method, path, json.loads(raw) if raw else {})
                    continue
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

    async def _side(self, w: asyncio.StreamWriter, method: str, path: str, body: dict[str, Any]) -> None:
        """``GET /metrics``, ``POST /tokenize`` and ``/detokenize`` (404 unless scripted on)."""
        s = self.script
        if method == "GET" and path == "/metrics" and s.metrics:
            self._send(w, 200, self.metrics_text().encode(), "text/plain; version=0.0.4")
        elif path == "/tokenize" and s.tokenizer:
            ids = toy_tokens(str(body.get("prompt", "")))
            self._send(w, 200, json.dumps({"count": len(ids), "max_model_len": 4096, "tokens": ids}).encode())
        elif path == "/detokenize" and s.tokenizer:
            self._send(w, 200, json.dumps({"prompt": toy_text(list(body.get("tokens", [])))}).encode())
        else:
            self._send(w, 404, b'{"detail": "Not Found"}')
        await w.drain()

    @staticmethod
    def _send(w: asyncio.StreamWriter, status: int, payload: bytes, ctype: str = "application/json") -> None:
        w.write(f"HTTP/1.1 {status} X\r\nContent-Type: {ctype}\r\nContent-Length: {len(payload)}\r\n\r\n".encode()
                + payload)

    def metrics_text(self) -> str:
        """Prometheus text in vLLM's names: TTFT and ITL histograms of the scripted latencies, generated tokens."""
        s, n = self.script, self.observed
        gaps = n * max(s.tokens - 1, 0)
        out = ["# TYPE vllm:generation_tokens_total counter",
               f'vllm:generation_tokens_total{{model_name="m"}} {n * s.tokens}']
        for name, value, count in (("vllm:time_to_first_token_seconds", s.first_token_s, n),
                                   ("vllm:inter_token_latency_seconds", s.inter_token_s, gaps)):
            out.append(f"# TYPE {name} histogram")
            for le in (0.001, 0.005, 0.02, 0.1, 1.0):
                out.append(f'{name}_bucket{{le="{le}",model_name="m"}} {count if value <= le else 0}')
            out += [f'{name}_bucket{{le="+Inf",model_name="m"}} {count}',
                    f'{name}_count{{model_name="m"}} {count}', f'{name}_sum{{model_name="m"}} {value * count}']
        return "\n".join(out) + "\n"

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
        await w.drain()
        out = bytearray()

        def send(event: str) -> None:
            data = event.encode()
            out.extend(f"{len(data):x}\r\n".encode() + data + b"\r\n")

        def sse(obj: Any, name: str | None = None) -> None:
            send((f"event: {name}\n" if name else "") + f"data: {json.dumps(obj)}\n\n")

        async def flush(final: bool = False) -> None:
            if s.burst and not final:
                return
            w.write(bytes(out))
            out.clear()
            await w.drain()

        self.answered += 1
        slow = s.slow_extra_s if s.slow_every and self.answered % s.slow_every == 0 else 0.0
        usage_n = s.usage_tokens if s.usage_tokens is not None else s.tokens
        prompt_n = s.input_tokens
        if s.tokenizer:
            prompt_n = sum(len(toy_tokens(str(m.get("content", "")))) for m in body.get("messages") or [])
        base = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": body.get("model", "")}
        role = {**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}
        if openai and s.role_first:
            sse(role)
        elif not openai:
            sse({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant",
                 "content": [], "model": body.get("model", ""),
                 "usage": {"input_tokens": prompt_n, "output_tokens": 1}}}, "message_start")
            sse({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
                "content_block_start")
            sse({"type": "ping"}, "ping")
        await flush()
        for i in range(s.tokens):
            if s.break_after is not None and i >= s.break_after:
                out.extend(b"5\r\nda")  # half a chunk, then hang up: the body is incomplete
                await flush(final=True)
                return False
            delay = s.first_token_s + slow if i == 0 else s.inter_token_s
            if delay:
                await asyncio.sleep(delay)
            if openai:
                if i == 0 and not s.role_first:
                    sse(role)
                sse({**base, "choices": [{"index": 0, "delta": {"content": f"{s.text}{i} "}}]})
            else:
                sse({"type": "content_block_delta", "index": 0,
                     "delta": {"type": "text_delta", "text": f"{s.text}{i} "}}, "content_block_delta")
            await flush()
        if openai:
            sse({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]})
            if s.usage and (body.get("stream_options") or {}).get("include_usage"):
                sse({**base, "choices": [], "usage": {"prompt_tokens": prompt_n,
                     "completion_tokens": usage_n, "total_tokens": prompt_n + usage_n}})
            send("data: [DONE]\n\n")
        else:
            sse({"type": "content_block_stop", "index": 0}, "content_block_stop")
            delta: dict[str, Any] = {"type": "message_delta", "delta": {"stop_reason": "max_tokens"}}
            if s.usage:
                delta["usage"] = {"output_tokens": usage_n}
            sse(delta, "message_delta")
            sse({"type": "message_stop"}, "message_stop")
        out.extend(b"0\r\n\r\n")
        self.observed += 1
        await flush(final=True)
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
    ap.add_argument("--metrics", action="store_true", help="serve GET /metrics (vLLM names)")
    ap.add_argument("--tokenizer", action="store_true", help="serve /tokenize and /detokenize")
    ap.add_argument("--burst", action="store_true", help="send each answer whole, at its end")
    args = ap.parse_args(argv)
    srv = ScriptedServer(Script(first_token_s=args.first_token_s, inter_token_s=args.inter_token_s,
                                tokens=args.tokens, metrics=args.metrics, tokenizer=args.tokenizer,
                                burst=args.burst), record=False)

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
