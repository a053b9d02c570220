"""An agent-shaped workload (``conduit bench --dataset agent[:k=v,...]``): what coding agents send.

``sessions`` conversations run side by side. Every one starts from the same long system prompt (instructions
and tool schemas, ``prefix`` tokens, the same bytes in every session), and each turn appends the previous
answer and a new user message of ``turn`` tokens to the context, so turn N's prompt holds turn N-1's whole
prompt. Between two turns a session waits ``gap`` seconds (think time: the tool running, the person reading;
jittered +-50 %, seeded), the idle time in which a GPU KV cache may evict what the next turn needs again.

What it reports next to TTFT/TPOT (p50, p95, and TTFT per turn: the first turn pays for the prefix) is the
server's prefix-cache hit rate over the run: the difference of vLLM's ``vllm:prefix_cache_hits`` and
``vllm:prefix_cache_queries`` counters (tokens; ``conduit.daemon.vllm.metrics``) between a scrape before and
one after. With prefix caching on, later turns should mostly hit and their TTFT fall; with it off, or with
gaps long enough for eviction, the hit rate drops and TTFT grows with the context. OpenAI protocol only.

Spec: ``agent`` or ``agent:sessions=4,turns=4,prefix=1024,turn=64,gap=2s,max_tokens=32`` (``parse_spec``).
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import aiohttp

from conduit.daemon.bench.prompts import synthetic_prompt
from conduit.daemon.bench.stats import ErrorKind, RequestResult
from conduit.daemon.bench.wire import Endpoint, SSEBuffer, StreamError, StreamRecorder
from conduit.daemon.vllm.metrics import parse as parse_metrics
from conduit.errors import BadArguments
from conduit.redact import redact
from conduit.units import parse_duration, percentile


@dataclass(frozen=True)
class AgentWorkload:
    """The workload's shape. ``prefix``/``turn``/``max_tokens`` in tokens (approximate: word count), ``gap_s``
    seconds; ``seed`` fixes the jitter of the gaps."""

    sessions: int = 4
    turns: int = 4
    prefix: int = 1024
    turn: int = 64
    gap_s: float = 2.0
    max_tokens: int = 32
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("sessions", "turns", "prefix", "turn", "max_tokens"):
            if getattr(self, name) < 1:
                raise BadArguments(f"--dataset agent: {name} must be at least 1", hint="e.g. agent:sessions=4,turns=4")
        if not 0 <= self.gap_s <= 3600:
            raise BadArguments("--dataset agent: gap must be 0..1h", hint="e.g. gap=2s")


_KEYS = {"sessions": "sessions", "turns": "turns", "prefix": "prefix", "turn": "turn", "max_tokens": "max_tokens",
         "gap": "gap_s", "seed": "seed"}


def parse_spec(spec: str) -> AgentWorkload:
    """``agent`` or ``agent:k=v,...`` (keys: sessions, turns, prefix, turn, gap, max_tokens, seed).

    Raises:
        BadArguments (exit 3): not an agent spec, an unknown key, or a value that is not a number (gap: a duration).
    """
    kind, _, rest = spec.partition(":")
    if kind != "agent":
        raise BadArguments(f"not an agent workload: {spec!r}", hint="use agent or agent:sessions=4,turns=4,gap=2s")
    values: dict[str, Any] = {}
    for part in filter(None, (p.strip() for p in rest.split(","))):
        key, _, value = part.partition("=")
        if key not in _KEYS or not value:
            raise BadArguments(f"--dataset agent: unknown setting {part!r}",
                               hint="settings: " + ", ".join(f"{k}=..." for k in _KEYS))
        try:
            values[_KEYS[key]] = parse_duration(value) if key == "gap" else int(value)
        except ValueError:
            raise BadArguments(f"--dataset agent: {key}={value!r} is not a number",
                               hint="gap takes a duration (2s, 500ms), the others whole numbers") from None
    return AgentWorkload(**values)


def system_prompt(tokens: int) -> str:
    """The shared prefix: instructions, the tool schemas as JSON that fit in half of ``tokens``, then words up
    to about ``tokens`` tokens. The same text for every session (that is what the prefix cache can share)."""
    tools = [{"type": "function", "function": {"name": n, "description": d, "parameters": {
        "type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}}
        for n, d in (("read_file", "Read a file"), ("edit_file", "Replace text in a file"),
                     ("run", "Run a shell command"), ("search", "Search the repository"))]
    schemas: list[dict[str, Any]] = []
    for tool in tools:  # as many schemas as fit in half the budget (JSON: about 3 characters a token)
        if len(json.dumps([*schemas, tool])) // 3 > tokens // 2:
            break
        schemas.append(tool)
    head = "You are a coding agent. Use the tools." + (f" Tools: {json.dumps(schemas)}" if schemas else "")
    fill = max(1, tokens - len(head.split()) - len(json.dumps(schemas)) // 3)
    return head + " Project notes: " + synthetic_prompt(fill, 0)


@dataclass
class Turn:
    """One request: its session and turn numbers, its record, and the answer text."""

    session: int
    turn: int
    result: RequestResult
    answer: str = ""


@dataclass
class AgentRun:
    """A finished run: the turns, the wall time (s), the server's prefix-cache figures (None: no /metrics)."""

    workload: AgentWorkload
    turns: list[Turn] = field(default_factory=list)
    wall_s: float = 0.0
    prefix_hits: float | None = None
    prefix_queries: float | None = None
    #: the run's deltas of the KV tier's counters (tokens; None when the server has none): external hits/queries
    #: (``vllm:external_prefix_cache_*``) and cached prompt tokens (``vllm:prompt_tokens_cached``)
    tier: dict[str, float | None] = field(default_factory=dict)

    @property
    def hit_rate(self) -> float | None:
        """Prefix-cache hits / queries over the run (tokens), or None without both counters."""
        if self.prefix_hits is None or not self.prefix_queries:
            return None
        return self.prefix_hits / self.prefix_queries

    def summary(self) -> dict[str, Any]:
        """JSON-able: the workload, requests ok/failed, TTFT and TPOT p50/p95 (ms), TTFT p50 per turn (ms),
        the prefix-cache hit rate, and the first failure's detail."""
        ok = [t.result for t in self.turns if t.result.ok]

        def ms(values: list[float], q: float) -> float | None:
            v = percentile(values, q)
            return None if v is None else round(v * 1000, 2)

        ttfts = [r.ttft_s for r in ok if r.ttft_s is not None]
        tpots = [r.tpot_s for r in ok if r.tpot_s is not None]
        per_turn = {n + 1: ms([t.result.ttft_s for t in self.turns if t.turn == n and t.result.ok
                               and t.result.ttft_s is not None], 50) for n in range(self.workload.turns)}
        failed = [t.result for t in self.turns if not t.result.ok]
        return {
            "workload": asdict(self.workload), "requests": len(self.turns), "failed": len(failed),
            "wall_s": round(self.wall_s, 3),
            "ttft_ms": {"p50": ms(ttfts, 50), "p95": ms(ttfts, 95)},
            "tpot_ms": {"p50": ms(tpots, 50), "p95": ms(tpots, 95)},
            "ttft_p50_ms_by_turn": per_turn,
            "prefix_cache_hit_rate": None if self.hit_rate is None else round(self.hit_rate, 4),
            "prefix_cache_hit_tokens": self.prefix_hits, "prefix_cache_query_tokens": self.prefix_queries,
            "external_prefix_cache_hit_rate": _share(self.tier.get("external_prefix_hits"),
                                                     self.tier.get("external_prefix_queries")),
            "external_prefix_cache_hit_tokens": self.tier.get("external_prefix_hits"),
            "prompt_tokens_cached": self.tier.get("prompt_tokens_cached"),
            "first_error": failed[0].detail if failed else None,
        }


def _share(num: float | None, den: float | None) -> float | None:
    return None if num is None or not den else round(num / den, 4)


#: The counters read before and after a run (``conduit.daemon.vllm.metrics.COUNTERS`` names).
_RUN_COUNTERS = ("prefix_hits", "prefix_queries", "external_prefix_hits", "external_prefix_queries",
                 "prompt_tokens_cached")


async def _prefix_counters(session: aiohttp.ClientSession, root: str) -> dict[str, float | None]:
    """``_RUN_COUNTERS`` from ``<root>/metrics`` (tokens), each None when the server does not have it."""
    try:
        async with session.get(root + "/metrics", allow_redirects=False,
                               timeout=aiohttp.ClientTimeout(total=5)) as resp:
            if resp.status != 200:
                return {}
            c = parse_metrics(await resp.text(), time.monotonic()).counters
    except (aiohttp.ClientError, TimeoutError, ValueError):
        return {}
    return {k: c.get(k) for k in _RUN_COUNTERS}


async def _ask(session: aiohttp.ClientSession, ep: Endpoint, body: dict[str, Any], turn: Turn) -> None:
    """One streaming chat request into ``turn`` (its record and the answer text). Never raises for the
    network's or the server's sake: failures become the record's error and detail."""
    rec, parts = StreamRecorder(turn.result, "openai"), []
    try:
        async with session.post(ep.url, json=body, headers=ep.headers(), allow_redirects=False) as resp:
            turn.result.http_status = resp.status
            if resp.status != 200:
                raw = await resp.read()
                turn.result.error = ErrorKind.HTTP_5XX if resp.status >= 500 else ErrorKind.HTTP_4XX
                turn.result.detail = f"HTTP {resp.status}: {raw[:200].decode('utf-8', 'replace')}"
                return
            buf = SSEBuffer()
            async for chunk in resp.content.iter_any():
                now = time.perf_counter()
                for data in buf.feed(chunk):
                    rec.event(data, now)
                    if data.startswith("{"):
                        for choice in json.loads(data).get("choices") or []:
                            parts.append(str((choice.get("delta") or {}).get("content") or ""))
        if not rec.done:
            turn.result.error, turn.result.detail = ErrorKind.STREAM_BROKEN, "stream ended before [DONE]"
    except (aiohttp.ClientError, TimeoutError, ValueError, StreamError) as exc:
        turn.result.error = turn.result.error or ErrorKind.STREAM_BROKEN
        turn.result.detail = redact(f"{type(exc).__name__}: {exc}", [ep.key])[:300]
    finally:
        turn.result.t_end = time.perf_counter()
        turn.answer = "".join(parts)


async def _session(http: aiohttp.ClientSession, ep: Endpoint, model: str, wl: AgentWorkload, n: int,
                   system: str, rng: random.Random, out: list[Turn]) -> None:
    """One conversation: ``wl.turns`` requests, each appending to the last, ``gap_s`` (jittered) apart."""
    messages: list[dict[str, str]] = [{"role": "system", "content": system}]
    for t in range(wl.turns):
        if t:
            await asyncio.sleep(wl.gap_s * rng.uniform(0.5, 1.5))
        messages.append({"role": "user", "content": synthetic_prompt(wl.turn, 1000 * (n + 1) + t)})
        body = {"model": model, "messages": list(messages), "max_tokens": wl.max_tokens, "stream": True,
                "stream_options": {"include_usage": True}}
        turn = Turn(n, t, RequestResult(index=len(out), concurrency=wl.sessions, t_send=time.perf_counter()))
        await _ask(http, ep, body, turn)
        out.append(turn)
        messages.append({"role": "assistant", "content": turn.answer or "ok"})


async def run_agent(ep: Endpoint, model: str, wl: AgentWorkload, timeout_s: float = 300.0) -> AgentRun:
    """Run the workload against ``ep`` (OpenAI protocol) and read the server's prefix-cache counters around it.

    Raises:
        BadArguments (exit 3): the endpoint is not an OpenAI one.
    """
    if ep.protocol != "openai":
        raise BadArguments("--dataset agent sends OpenAI chat requests", hint="use --protocol openai")
    run, system = AgentRun(wl), system_prompt(wl.prefix)
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=timeout_s)
    async with aiohttp.ClientSession(timeout=timeout) as http:
        before = await _prefix_counters(http, ep.root)
        t0 = time.perf_counter()
        await asyncio.gather(*(_session(http, ep, model, wl, n, system, random.Random(wl.seed * 7919 + n),
                                        run.turns) for n in range(wl.sessions)))
        run.wall_s = time.perf_counter() - t0
        after = await _prefix_counters(http, ep.root)
    delta = {k: None if before.get(k) is None or after.get(k) is None else after[k] - before[k]  # type: ignore[operator]
             for k in _RUN_COUNTERS}
    if delta["prefix_hits"] is not None and delta["prefix_queries"] is not None:
        run.prefix_hits, run.prefix_queries = delta["prefix_hits"], delta["prefix_queries"]
    run.tier = {k: delta[k] for k in _RUN_COUNTERS[2:]}
    return run


__all__ = ["AgentRun", "AgentWorkload", "Turn", "parse_spec", "run_agent", "system_prompt"]
