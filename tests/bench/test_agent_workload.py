"""``conduit bench --dataset agent``: multi-turn sessions sharing a long system prompt, with think-time gaps,
against a real streaming server on loopback that keeps a toy prefix cache (64-character blocks of the prompt,
16 tokens each) and exposes it as vLLM's ``vllm:prefix_cache_queries`` / ``vllm:prefix_cache_hits`` counters.

Covered: each turn's messages extend the previous turn's (the answer, then a new user message); every session
sends the same system prompt; a session waits the gap between turns; the hit rate comes from the server's
counters (high with the cache, zero without); the command's table, report and JSON; bad specs are refused.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from helpers.agentproc import conduit_exe

from conduit.daemon.bench.agentload import AgentWorkload, parse_spec, run_agent
from conduit.daemon.bench.wire import Endpoint
from conduit.errors import ConduitError

BLOCK = 64


class CacheServer:
    """Streams a 4-token answer to each chat request; records (time, body); counts prefix-cache blocks."""

    def __init__(self, cache: bool = True) -> None:
        self.cache, self.blocks = cache, set[str]()
        self.queries = self.hits = 0
        self.seen: list[tuple[float, dict[str, Any]]] = []
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def account(self, body: dict[str, Any]) -> None:
        text = "".join(m["role"] + ":" + m["content"] for m in body["messages"])
        with self.lock:
            self.seen.append((time.monotonic(), body))
            for end in range(BLOCK, len(text) + 1, BLOCK):
                block = text[:end]
                self.queries += 16
                if self.cache and block in self.blocks:
                    self.hits += 16
                if self.cache:
                    self.blocks.add(block)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        srv = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:  # noqa: N802
                text = (f"# TYPE vllm:prefix_cache_queries counter\nvllm:prefix_cache_queries_total "
                        f"{float(srv.queries)}\n# TYPE vllm:prefix_cache_hits counter\n"
                        f"vllm:prefix_cache_hits_total {float(srv.hits)}\n").encode()
                self.send_response(200)
                self.send_header("content-length", str(len(text)))
                self.end_headers()
                self.wfile.write(text)

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                srv.account(body)
                events = [{"choices": [{"delta": {"content": f"w{i} "}}]} for i in range(4)]
                events.append({"choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 4}})
                data = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
                raw = data.encode()
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("content-length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, *a: Any) -> None:
                pass

        return H

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_turns_extend_a_shared_prefix_with_gaps_and_the_hit_rate_is_the_servers() -> None:
    srv = CacheServer()
    try:
        wl = AgentWorkload(sessions=3, turns=3, prefix=300, turn=20, gap_s=0.3, max_tokens=4)
        run = asyncio.run(run_agent(Endpoint(srv.base), "m", wl))
    finally:
        srv.close()
    summary = run.summary()
    assert summary["requests"] == 9 and summary["failed"] == 0
    systems = {b["messages"][0]["content"] for _, b in srv.seen}
    system = next(iter(systems))
    assert len(systems) == 1 and "Tools: " in system and len(system) // 4 >= 240  # one shared, ~300 tokens
    by_session: dict[str, list[tuple[float, list[dict[str, str]]]]] = {}
    for t, b in srv.seen:
        by_session.setdefault(b["messages"][1]["content"], []).append((t, b["messages"]))
    assert len(by_session) == 3
    for turns in by_session.values():
        assert [len(m) for _, m in turns] == [2, 4, 6]
        for (t0, before), (t1, after) in zip(turns, turns[1:], strict=False):
            assert after[:len(before)] == before  # the whole earlier context, unchanged
            assert after[len(before)] == {"role": "assistant", "content": "w0 w1 w2 w3 "}
            assert t1 - t0 >= 0.3 * 0.5  # the think-time gap (jitter +-50 %)
    assert summary["prefix_cache_hit_rate"] == pytest.approx(srv.hits / srv.queries, abs=1e-4)
    assert summary["prefix_cache_hit_rate"] > 0.5 and summary["ttft_ms"]["p50"] is not None
    assert set(summary["ttft_p50_ms_by_turn"]) == {1, 2, 3}


def test_without_a_cache_the_hit_rate_is_zero() -> None:
    srv = CacheServer(cache=False)
    try:
        run = asyncio.run(run_agent(Endpoint(srv.base), "m", AgentWorkload(sessions=2, turns=2, prefix=100,
                                                                           gap_s=0.0, max_tokens=4)))
    finally:
        srv.close()
    assert run.summary()["prefix_cache_hit_rate"] == 0.0 and run.prefix_queries


def test_the_command_prints_and_writes_the_run(tmp_path: Path) -> None:
    srv = CacheServer()
    out = tmp_path / "agent.json"
    try:
        r = subprocess.run([conduit_exe(), "bench", "--base-url", srv.base, "--model", "m", "--dataset",
                            "agent:sessions=2,turns=2,prefix=120,turn=10,gap=50ms", "--json", str(out)],
                           capture_output=True, text=True, timeout=120, env={"PATH": "/usr/bin:/bin",
                                                                              "HOME": str(tmp_path), "COLUMNS": "150"})
    finally:
        srv.close()
    assert r.returncode == 0, r.stderr
    assert "2 sessions x 2 turns" in r.stdout and "prefix-cache hits:" in r.stdout and "TTFT p50" in r.stdout
    doc = json.loads(out.read_text())
    assert doc["requests"] == 4 and doc["workload"]["gap_s"] == 0.05 and doc["prefix_cache_hit_rate"] > 0


@pytest.mark.parametrize(("spec", "words"), [
    ("agent:sessions=0", "at least 1"), ("agent:bogus=1", "unknown setting"), ("agent:turns=x", "not a number"),
    ("random", "not an agent workload"), ("agent:gap=2h", "0..1h"),
])
def test_bad_specs_are_refused(spec: str, words: str) -> None:
    with pytest.raises(ConduitError, match=words):
        parse_spec(spec)


def test_a_spec_sets_the_workload() -> None:
    wl = parse_spec("agent:sessions=8,turns=6,prefix=2000,turn=100,gap=1.5s,max_tokens=64")
    assert wl == AgentWorkload(sessions=8, turns=6, prefix=2000, turn=100, gap_s=1.5, max_tokens=64)
    assert parse_spec("agent") == AgentWorkload()
