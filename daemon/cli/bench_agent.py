"""``conduit bench --dataset agent[:k=v,...]``: the agent-shaped workload (``conduit.daemon.bench.agentload``),
printed as one table (TTFT and TPOT p50/p95, TTFT per turn) with the server's prefix-cache hit rate beside it.

With ``--compare-vllm KEY=VALUE``: before and after a ``[vllm]`` change, side by side (``cli.bench_agent_vllm``).

Exit codes: 0 when the run finished with at least one answer, 1 when no request succeeded, 3 for bad arguments.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Callable
from typing import Any

import typer
from rich.table import Table

from conduit.daemon.bench.agentload import parse_spec, run_agent
from conduit.daemon.bench.wire import Endpoint
from conduit.daemon.cli.console import make_console
from conduit.fileio import atomic_write
from conduit.units import parse_duration


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


def agent_table(summary: dict[str, Any], model: str) -> Table:
    """The run as a table: one row per turn (TTFT p50) and the totals (TTFT/TPOT p50/p95, hit rate)."""
    t = Table(title=f"conduit bench --dataset agent: {model}")
    for col in ("turn", "TTFT p50 ms"):
        t.add_column(col, justify="right")
    for turn, v in summary["ttft_p50_ms_by_turn"].items():
        t.add_row(str(turn), _ms(v))
    return t


def report_lines(summary: dict[str, Any]) -> list[str]:
    """The run's totals in words."""
    wl, hit = summary["workload"], summary["prefix_cache_hit_rate"]
    lines = [f"{wl['sessions']} sessions x {wl['turns']} turns, shared prefix ~{wl['prefix']} tokens, "
             f"+{wl['turn']} tokens a turn, gaps ~{wl['gap_s']:g} s; {summary['requests']} requests, "
             f"{summary['failed']} failed, {summary['wall_s']:.1f} s",
             f"TTFT p50 {_ms(summary['ttft_ms']['p50'])} / p95 {_ms(summary['ttft_ms']['p95'])} ms; "
             f"TPOT p50 {_ms(summary['tpot_ms']['p50'])} / p95 {_ms(summary['tpot_ms']['p95'])} ms",
             "prefix-cache hits: " + ("unknown (the server has no vllm:prefix_cache_* counters)" if hit is None else
                                      f"{hit:.0%} of {int(summary['prefix_cache_query_tokens'] or 0):,} prompt tokens")]
    ext = summary.get("external_prefix_cache_hit_rate")
    if ext is not None or summary.get("prompt_tokens_cached") is not None:
        lines.append(f"KV tier (external) hits: {'none queried' if ext is None else f'{ext:.0%}'}; cached prompt "
                     f"tokens {int(summary.get('prompt_tokens_cached') or 0):,}")
    if summary["first_error"]:
        lines.append(f"first error: {summary['first_error']}")
    return lines


def run_agent_bench(o: Any, endpoint_of: Callable[[Any], tuple[Endpoint, str]]) -> int:
    """Run the agent workload for ``conduit bench`` options ``o`` (``cli.bench.BenchOptions``); ``endpoint_of``
    turns them into the endpoint and the model id (``cli.bench``'s, which reads the profile and the key).

    Raises: typer.BadParameter for options the workload does not take; ConduitError for a bad spec.
    """
    if o.compare_vllm:  # the supervised vLLM before and after a [vllm] change
        from conduit.daemon.cli.bench_agent_vllm import run_agent_compare_vllm

        return run_agent_compare_vllm(o, endpoint_of)
    if o.compare is not None or o.request_rate is not None or o.concurrency is not None:
        raise typer.BadParameter("the agent workload sets its own concurrency (sessions=N) and runs alone",
                                 param_hint="--dataset agent")
    if o.protocol != "openai":
        raise typer.BadParameter("the agent workload sends OpenAI chat requests", param_hint="--protocol")
    wl = parse_spec(o.dataset)
    wl = dataclasses.replace(wl, seed=o.seed, max_tokens=o.max_tokens or wl.max_tokens)
    endpoint, model = endpoint_of(o)
    out, err = make_console(highlight=True), make_console(stderr=True, highlight=True)
    err.print(f"bench {endpoint.url} model {model!r}: agent workload", markup=False)
    run = asyncio.run(run_agent(endpoint, model, wl, parse_duration(o.timeout, option="--timeout")))
    summary = run.summary()
    out.print(agent_table(summary, model))
    for line in report_lines(summary):
        out.print(line, markup=False, highlight=False)
    if o.json_path is not None:
        atomic_write(o.json_path, (json.dumps(summary, indent=1) + "\n").encode(), 0o644)
        err.print(f"wrote {o.json_path}")
    return 0 if summary["requests"] > summary["failed"] else 1
