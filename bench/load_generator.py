"""Is the load generator ever the bottleneck? Its sustained request rate against a server that streams instantly.

Starts the scripted SSE server (tests/helpers/sse_server.py) as a separate process on 127.0.0.1 with no delays, then
measures in the same run:

1. baseline: a bare httpx loop (sync ``httpx.Client``, one request at a time, ``stream: false``);
2. vLLM's client: the request loop of ``vllm bench serve`` as ``vllm/benchmarks/lib/endpoint_request_func.py``
   (``async_request_openai_chat_completions``) does it: one aiohttp session with a connector limit, ``iter_any``
   chunks split at blank lines, ``json.loads`` and a ``perf_counter`` stamp per message, the ITL list; the
   same concurrency, a semaphore as in ``serve.py``'s ``limited_request_func`` (re-implemented here: vLLM is
   not installed in this venv);
3. the generator: ``conduit.daemon.bench.runner.run_level`` at ``--concurrency`` (default 64), streaming, with all
   its per-chunk bookkeeping;

and prints the request rates and their ratios, plus each client's CPU time per request (insensitive to other
load on the machine; its inverse bounds the rate one core can drive). One goal: the generator's CPU per
request at most that of vLLM's client. The other goal is a generator rate at least 10x the request
rate of the real-vLLM runs; that rate is measured elsewhere: pass it as ``--vllm-rate R`` (requests/s) or
``--vllm-json FILE`` (a ``conduit bench --json`` file: its highest per-level requests_per_s, or a plain
``{"requests_per_s": R}``). Bounded in count (``--requests``) and time (``--time-limit`` seconds per phase);
loopback only.

    .venv/bin/python bench/load_generator.py [--requests 2000] [--concurrency 64] [--vllm-rate 3.2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import httpx

from conduit.daemon.bench import outputs, prompts, runner, stats, wire

ROOT = Path(__file__).resolve().parent.parent
GOAL_RATIO = 10.0


def start_server(tokens: int) -> tuple[subprocess.Popen[str], int]:
    """Start tests/helpers/sse_server.py on 127.0.0.1 (instant streaming); return (process, port)."""
    proc = subprocess.Popen([sys.executable, str(ROOT / "tests" / "helpers" / "sse_server.py"), "--tokens", str(tokens)],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline().split()
    if len(line) != 2 or line[0] != "PORT":
        proc.kill()
        raise SystemExit(f"scripted server did not start (said {line!r})")
    return proc, int(line[1])


def baseline_rate(root: str, requests: int, time_limit: float) -> tuple[float, int, float]:
    """Bare sequential non-streaming httpx loop: (requests/s, requests done, CPU seconds used)."""
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 16, "stream": False}
    done = 0
    with httpx.Client(timeout=10) as client:
        client.post(f"{root}/v1/chat/completions", json=body).raise_for_status()  # warm-up
        t0, cpu0 = time.perf_counter(), time.process_time()
        deadline = t0 + time_limit
        while done < requests and time.perf_counter() < deadline:
            client.post(f"{root}/v1/chat/completions", json=body).raise_for_status()
            done += 1
        return done / (time.perf_counter() - t0), done, time.process_time() - cpu0


def _vllm_like_messages(state: list[str], raw: bytes) -> list[str]:
    """vLLM's ``StreamedResponseHandler.add_chunk``: complete messages in the buffer ``state[0]``, plus a
    trailing one that is ``[DONE]`` or parses as JSON (chunks arrive stripped of their blank line)."""
    state[0] += raw.decode("utf-8")
    out = []
    while "\n\n" in state[0]:
        msg, state[0] = state[0].split("\n\n", 1)
        if msg := msg.strip():
            out.append(msg)
    if state[0].startswith("data: "):
        content = state[0].removeprefix("data: ").strip()
        try:
            if content == "[DONE]" or (content and json.loads(content) is not None):
                out.append(state[0].strip())
                state[0] = ""
        except json.JSONDecodeError:
            pass
    return out


async def _vllm_like_request(session: aiohttp.ClientSession, url: str, payload: dict[str, object]) -> int:
    """One streamed request the way vLLM's bench client reads it; returns the output tokens (usage)."""
    st = time.perf_counter()
    latest, itl, tokens, state, first = st, [], 0, [""], False
    async with session.post(url, json=payload, headers={"Content-Type": "application/json"}) as resp:
        async for raw in resp.content.iter_any():
            raw = raw.strip()
            if not raw:
                continue
            for msg in _vllm_like_messages(state, raw):
                if msg.startswith(":"):
                    continue
                chunk = msg.removeprefix("data: ")
                if chunk == "[DONE]":
                    continue
                now = time.perf_counter()
                data = json.loads(chunk)
                if data.get("choices"):
                    if first:
                        itl.append(now - latest)
                    first, latest = True, now
                elif usage := data.get("usage"):
                    tokens = usage.get("completion_tokens") or 0
    return tokens


async def vllm_like_rate(root: str, requests: int, concurrency: int, tokens: int,
                         time_limit: float) -> tuple[float, int, float]:
    """vLLM's client at one concurrency: (requests/s, requests done, CPU seconds of the event-loop thread)."""
    url = f"{root}/v1/chat/completions"
    payload = {"model": "m", "messages": [{"role": "user", "content": prompts.synthetic_prompt(32, 0)}],
               "max_completion_tokens": tokens, "stream": True, "stream_options": {"include_usage": True}}
    conn = aiohttp.TCPConnector(limit=concurrency, limit_per_host=concurrency, keepalive_timeout=60)
    async with aiohttp.ClientSession(connector=conn, trust_env=True) as session:
        sem = asyncio.Semaphore(concurrency)

        async def limited() -> int:
            async with sem:
                return await _vllm_like_request(session, url, payload)

        await asyncio.gather(*(limited() for _ in range(min(requests, 4 * concurrency))))  # warm-up
        t0, cpu0 = time.perf_counter(), time.thread_time()
        async with asyncio.timeout(time_limit):
            got = await asyncio.gather(*(limited() for _ in range(requests)))
        assert all(n == tokens for n in got), "vLLM-like client: usage counts differ"
        return requests / (time.perf_counter() - t0), requests, time.thread_time() - cpu0


async def generator_rate(root: str, requests: int, concurrency: int, tokens: int,
                         time_limit: float) -> tuple[stats.LevelStats, float]:
    """The generator at one level: (LevelStats, CPU seconds of the event-loop thread during the level)."""
    cfg = runner.BenchConfig(wire.Endpoint(f"{root}/v1", "openai"), "m", prompts=prompts.PromptSource(32),
                             requests=requests, concurrency=(concurrency,), max_tokens=tokens, timeout_s=10,
                             check_server=False, size_prompts=False)
    async with runner.open_session(cfg) as session:
        await runner.run_level(session, cfg, concurrency)  # warm-up: connections opened, code paths imported
        cpu0 = time.thread_time()
        async with asyncio.timeout(time_limit):
            level = await runner.run_level(session, cfg, concurrency)
        return level, time.thread_time() - cpu0


def vllm_rate_from(args: argparse.Namespace) -> float | None:
    """The real-vLLM request rate from --vllm-rate or --vllm-json, or None."""
    if args.vllm_rate is not None:
        return float(args.vllm_rate)
    if args.vllm_json is None:
        return None
    doc = json.loads(Path(args.vllm_json).read_text(encoding="utf-8"))
    if "levels" in doc:
        return max(float(lv["requests_per_s"]) for lv in doc["levels"])
    return float(doc["requests_per_s"])


def main(argv: list[str] | None = None) -> int:
    """Run both phases and print the rates and ratios."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=2000, help="requests per phase (default 2000)")
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=16, help="streamed tokens per response (default 16)")
    ap.add_argument("--time-limit", type=float, default=60.0, help="seconds per phase at most (default 60)")
    ap.add_argument("--vllm-rate", type=float, help="requests/s of the real-vLLM runs")
    ap.add_argument("--vllm-json", help="a conduit bench --json file from the real-vLLM runs")
    ap.add_argument("--repeats", type=int, default=3,
                    help="alternating runs of vLLM's client and the generator; medians are compared (default 3)")
    args = ap.parse_args(argv)

    proc, port = start_server(args.tokens)
    root = f"http://127.0.0.1:{port}"
    try:
        base, base_n, base_cpu = baseline_rate(root, args.requests, args.time_limit)
        vl_runs, gen_runs = [], []
        for _ in range(max(1, args.repeats)):  # alternating, so drifting load on the machine hits both alike
            vl_runs.append(asyncio.run(vllm_like_rate(root, args.requests, args.concurrency, args.tokens,
                                                      args.time_limit)))
            gen_runs.append(asyncio.run(generator_rate(root, args.requests, args.concurrency, args.tokens,
                                                       args.time_limit)))
    finally:
        proc.terminate()
        proc.wait(10)

    vl, vl_n, vl_cpu = sorted(vl_runs, key=lambda r: r[2] / max(r[1], 1))[len(vl_runs) // 2]
    level, cpu_s = sorted(gen_runs, key=lambda r: r[1] / max(r[0].requests, 1))[len(gen_runs) // 2]
    if level.ok != level.requests:
        print(f"warning: {level.requests - level.ok} generator requests failed: {outputs.describe_errors(level.errors)}")
    gen = level.requests_per_s
    base_cpu_ms = 1000 * base_cpu / max(base_n, 1)
    gen_cpu_ms = 1000 * cpu_s / max(level.requests, 1)
    print(f"baseline  bare httpx loop, non-streaming, sequential: {base:8.1f} req/s ({base_n} requests; "
          f"client CPU {base_cpu_ms:.2f} ms/request)")
    print(f"generator loadgen, streaming {args.tokens} tokens, concurrency {args.concurrency}: {gen:8.1f} req/s "
          f"({level.ok} requests, {level.output_tokens_per_s:.0f} tokens/s; client CPU {gen_cpu_ms:.2f} ms/request, "
          f"{100 * cpu_s / level.wall_s:.0f}% of one core)")
    vl_cpu_ms = 1000 * vl_cpu / max(vl_n, 1)
    print(f"vLLM      vllm bench serve's client loop, streaming, concurrency {args.concurrency}: {vl:8.1f} req/s "
          f"(client CPU {vl_cpu_ms:.2f} ms/request)")
    print(f"ratio     generator / baseline request rate = {gen / base:.2f}x")
    print(f"ratio     generator / vLLM client CPU per request = {gen_cpu_ms / vl_cpu_ms:.2f}x "
          f"(medians of {len(gen_runs)} alternating runs; goal: at most 1.0x)")
    # CPU per request does not depend on what else the machine runs: 1 / it bounds the rate on one core.
    print(f"ratio     generator / baseline CPU-bound capacity (1 / CPU per request) = {base_cpu_ms / gen_cpu_ms:.2f}x "
          f"(generator at most ~{1000 / gen_cpu_ms:.0f} req/s per core)")
    print(f"goal: at least {GOAL_RATIO:.0f}x the request rate of the real-vLLM runs")
    vllm = vllm_rate_from(args)
    if vllm is None:
        print("real-vLLM rate not given (--vllm-rate R or --vllm-json FILE): goal ratio not computed")
        return 0
    ratio = gen / vllm
    verdict = "met" if ratio >= GOAL_RATIO else "NOT met"
    print(f"ratio     generator / real vLLM ({vllm:.2f} req/s) = {ratio:.1f}x: goal {verdict}")
    return 0 if ratio >= GOAL_RATIO else 1


if __name__ == "__main__":
    sys.exit(main())
