"""Is the load generator ever the bottleneck? Its sustained request rate against a server that streams instantly.

Starts the scripted SSE server (tests/sse_server.py) as a separate process on 127.0.0.1 with no delays, then
measures in the same run:

1. baseline: a bare httpx loop (sync ``httpx.Client``, one request at a time, ``stream: false``);
2. the generator: ``conduit.daemon.bench.runner.run_level`` at ``--concurrency`` (default 64), streaming, with all
   its per-token bookkeeping;

and prints both request rates and their ratio, plus each client's CPU time per request (insensitive to other
load on the machine; its inverse bounds the rate one core can drive). The goal (issue 6) is a generator rate at least 10x the request
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

import httpx

from conduit.daemon.bench import outputs, prompts, runner, stats, wire

ROOT = Path(__file__).resolve().parent.parent
GOAL_RATIO = 10.0


def start_server(tokens: int) -> tuple[subprocess.Popen[str], int]:
    """Start tests/sse_server.py on 127.0.0.1 (instant streaming); return (process, port)."""
    proc = subprocess.Popen([sys.executable, str(ROOT / "tests" / "sse_server.py"), "--tokens", str(tokens)],
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


async def generator_rate(root: str, requests: int, concurrency: int, tokens: int,
                         time_limit: float) -> tuple[stats.LevelStats, float]:
    """The generator at one level: (LevelStats, CPU seconds this process used during the level)."""
    cfg = runner.BenchConfig(wire.Endpoint(f"{root}/v1", "openai"), "m", prompts=prompts.PromptSource(32),
                             requests=requests, concurrency=(concurrency,), max_tokens=tokens, timeout_s=10)
    async with runner.open_clients(cfg) as clients:
        await runner.run_level(clients, cfg, concurrency)  # warm-up: connections opened, code paths imported
        cpu0 = time.process_time()
        async with asyncio.timeout(time_limit):
            level = await runner.run_level(clients, cfg, concurrency)
        return level, time.process_time() - cpu0


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
    args = ap.parse_args(argv)

    proc, port = start_server(args.tokens)
    root = f"http://127.0.0.1:{port}"
    try:
        base, base_n, base_cpu = baseline_rate(root, args.requests, args.time_limit)
        level, cpu_s = asyncio.run(generator_rate(root, args.requests, args.concurrency, args.tokens,
                                                  args.time_limit))
    finally:
        proc.terminate()
        proc.wait(10)

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
    print(f"ratio     generator / baseline request rate = {gen / base:.2f}x")
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
