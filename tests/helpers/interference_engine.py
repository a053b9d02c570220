"""A loopback stand-in engine with a KNOWN prefill interference, for ``conduit bench --dataset interference``.

It speaks OpenAI streaming chat completions (``POST /v1/chat/completions``, chunked SSE, ``[DONE]``) from a
thread per request. A request whose last message has at least ``long_words`` words is a *long prompt*: it
"prefills" for ``prefill_s`` (while it does, the engine counts it as prefilling), then answers one token. Any
other request decodes ``max_tokens`` tokens: a role chunk and the first token at once, then each next token
``gap_s`` later, or ``gap_s x factor`` later when a long prompt is prefilling as the gap starts. So the ITL of
decodes is ``gap_s`` alone and ``gap_s x factor`` under long prompts: the interference ratio is ``factor``.
``GET /counts`` answers ``{"decodes": N, "longs": M}``; ``GET /metrics`` the gaps it slept as vLLM's
``vllm:inter_token_latency_seconds`` histogram (vLLM 0.32's buckets). ``burst``: each answer is written at
once after its gaps were slept (a proxy that buffers the stream): the client reads no gap, the server's
histogram still has them.

It runs in a process of its own (``spawn_engine``), so the client's event loop and the engine's threads do not
take turns on one interpreter lock: ``python tests/helpers/interference_engine.py --gap 0.03 --factor 5``
prints ``PORT <n>``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx


class InterferenceEngine:
    """The stand-in (see the module docstring), serving on ``port``."""

    def __init__(self, gap_s: float = 0.03, factor: float = 4.0, prefill_s: float = 0.5,
                 long_words: int = 200, burst: bool = False) -> None:
        self.gap_s, self.factor, self.prefill_s, self.long_words = gap_s, factor, prefill_s, long_words
        self.burst, self.gaps = burst, list[float]()
        self.prefilling = self.longs = self.decodes = 0
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def gap(self) -> float:
        with self.lock:
            g = self.gap_s * (self.factor if self.prefilling else 1.0)
            self.gaps.append(g)
            return g

    def metrics(self) -> str:
        with self.lock:
            gaps = list(self.gaps)
        name = "vllm:inter_token_latency_seconds"
        lines = [f"# TYPE {name} histogram"]
        for le in (*ITL_BUCKETS, float("inf")):
            label = "+Inf" if le == float("inf") else repr(le)
            lines.append(f'{name}_bucket{{le="{label}",model_name="m"}} {float(sum(g <= le for g in gaps))}')
        lines += [f'{name}_sum{{model_name="m"}} {sum(gaps)}', f'{name}_count{{model_name="m"}} {float(len(gaps))}']
        return "\n".join(lines) + "\n"

    def prefill(self) -> None:
        with self.lock:
            self.prefilling += 1
            self.longs += 1
        try:
            time.sleep(self.prefill_s)
        finally:
            with self.lock:
                self.prefilling -= 1

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        eng = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            held: list[bytes] | None = None

            def send(self, obj: Any) -> None:
                data = ("data: " + (obj if isinstance(obj, str) else json.dumps(obj)) + "\n\n").encode()
                if self.held is not None:
                    self.held.append(data)
                    return
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()

            def do_GET(self) -> None:  # noqa: N802
                if self.path not in ("/counts", "/metrics"):
                    self.send_error(404)
                    return
                raw = (eng.metrics() if self.path == "/metrics"
                       else json.dumps({"decodes": eng.decodes, "longs": eng.longs})).encode()
                self.send_response(200)
                self.send_header("content-length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                words = len(str(body["messages"][-1]["content"]).split())
                long = words >= eng.long_words
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("transfer-encoding", "chunked")
                self.end_headers()
                if long:
                    eng.prefill()
                else:
                    with eng.lock:
                        eng.decodes += 1
                tokens = 1 if long else int(body.get("max_tokens") or 16)
                self.held = [] if eng.burst and not long else None
                self.send({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
                self.send({"choices": [{"index": 0, "delta": {"content": "t0 "}}]})
                for i in range(1, tokens):
                    time.sleep(eng.gap())
                    self.send({"choices": [{"index": 0, "delta": {"content": f"t{i} "}}]})
                self.send({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]})
                self.send({"choices": [], "usage": {"prompt_tokens": words, "completion_tokens": tokens}})
                self.send("[DONE]")
                if self.held is not None:
                    data = b"".join(self.held)
                    self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()

            def log_message(self, *a: Any) -> None:
                pass

        return H


#: vLLM 0.32's ``vllm:inter_token_latency_seconds`` buckets up to 1 s (vllm/v1/metrics/buckets.py)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0)


class Spawned:
    """A running engine process: ``base`` (its ``<root>/v1``) and ``counts()`` (``GET /counts``)."""

    def __init__(self, port: int) -> None:
        self.base = f"http://127.0.0.1:{port}/v1"
        self.root = f"http://127.0.0.1:{port}"

    def counts(self) -> dict[str, int]:
        return dict(httpx.get(self.root + "/counts", timeout=10).json())


@contextmanager
def spawn_engine(gap_s: float = 0.03, factor: float = 4.0, prefill_s: float = 0.5,
                 long_words: int = 200, burst: bool = False) -> Iterator[Spawned]:
    """Run the engine in a child process for the ``with`` block; killed at its end."""
    proc = subprocess.Popen([sys.executable, __file__, "--gap", str(gap_s), "--factor", str(factor), "--prefill",
                             str(prefill_s), "--long-words", str(long_words), *(["--burst"] if burst else [])],
                            stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        if not line.startswith("PORT "):
            raise RuntimeError(f"the stand-in engine did not start: {line!r}")
        yield Spawned(int(line.split()[1]))
    finally:
        proc.kill()
        proc.wait()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gap", type=float, default=0.03)
    ap.add_argument("--factor", type=float, default=4.0)
    ap.add_argument("--prefill", type=float, default=0.5)
    ap.add_argument("--long-words", type=int, default=200)
    ap.add_argument("--burst", action="store_true")
    a = ap.parse_args()
    eng = InterferenceEngine(a.gap, a.factor, a.prefill, a.long_words, a.burst)
    print(f"PORT {eng.port}", flush=True)
    eng.server.serve_forever()


if __name__ == "__main__":
    main()
