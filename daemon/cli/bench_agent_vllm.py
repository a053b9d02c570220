"""``conduit bench --dataset agent --compare-vllm KEY=VALUE``: the agent workload against the supervised vLLM
before and after a change to ``[vllm]`` (a KV tier, ``max_num_batched_tokens``, prefix caching), side by side:
prefix-cache and tier hit rates, cached prompt tokens, TTFT and TPOT.

Examples::

    conduit bench --dataset agent:sessions=8,turns=6,gap=20s --compare-vllm kv_offloading_size=64
    conduit bench --dataset agent --compare-vllm max_num_batched_tokens=2048 --json ab.json

The steps are those of the sweep's ``--compare-vllm`` (``conduit.daemon.cli.bench_vllm``): the agent must report
the supervised vLLM ``ready`` at the ``[vllm]`` base URL; the workload runs ("before"); the change is written
into ``[vllm]`` (tomlkit, comments kept) and the wait ends when the agent has relaunched vLLM; the same workload
(same seed, so the same prompts and gaps) runs again ("after"); without ``--keep`` the previous values are
written back and the relaunch is waited for (also after a failure). A change that does not alter the launch is
refused before any request.

Errors: usage mistakes exit 3 (``typer.BadParameter``); no agent exits 2; vLLM not ready in time or ``failed``
exits 1 (``ConduitError``), e.g. a KV tier the installed vLLM refuses, with the agent's diagnosis.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from conduit.daemon.bench.agentload import AgentWorkload, parse_spec, run_agent
from conduit.daemon.bench.wire import Endpoint
from conduit.daemon.cli.bench_vllm import AgentVllm, _words, before_and_after, parse_change, ready_before
from conduit.daemon.cli.console import make_console
from conduit.daemon.config.edit import set_vllm_keys
from conduit.daemon.config.profile import LOCAL_CHANNEL
from conduit.errors import ConduitError
from conduit.fileio import atomic_write
from conduit.units import parse_duration

EndpointOf = Callable[[Any], tuple[Endpoint, str]]


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.0%}"


def _n(v: float | None) -> str:
    return "-" if v is None else f"{v:,.0f}"


def rows(a: dict[str, Any], b: dict[str, Any]) -> list[tuple[str, str, str]]:
    """``(measure, before, after)`` rows of two ``AgentRun.summary()`` dicts."""
    def both(f: Callable[[dict[str, Any]], str]) -> tuple[str, str]:
        return f(a), f(b)

    last = str(a["workload"]["turns"])
    return [
        ("requests (failed)", *both(lambda s: f"{s['requests']} ({s['failed']})")),
        ("prefix-cache hit rate", *both(lambda s: _pct(s["prefix_cache_hit_rate"]))),
        ("KV tier hit rate (external)", *both(lambda s: _pct(s.get("external_prefix_cache_hit_rate")))),
        ("cached prompt tokens", *both(lambda s: _n(s.get("prompt_tokens_cached")))),
        ("TTFT p50 / p95 ms", *both(lambda s: f"{_ms(s['ttft_ms']['p50'])} / {_ms(s['ttft_ms']['p95'])}")),
        ("TPOT p50 / p95 ms", *both(lambda s: f"{_ms(s['tpot_ms']['p50'])} / {_ms(s['tpot_ms']['p95'])}")),
        ("TTFT p50 ms, turn 1 / last", *both(lambda s: f"{_ms(s['ttft_p50_ms_by_turn'].get(1))} / "
                                                      f"{_ms(s['ttft_p50_ms_by_turn'].get(int(last)))}")),
    ]


def table(a: dict[str, Any], b: dict[str, Any], title: str) -> Table:
    """The side-by-side table."""
    t = Table(title=title)
    t.add_column("measure")
    t.add_column("before", justify="right")
    t.add_column("after", justify="right")
    for row in rows(a, b):
        t.add_row(*row)
    return t


def _workload(o: Any) -> AgentWorkload:
    if o.compare is not None or o.base_url is not None or o.channel not in (None, LOCAL_CHANNEL):
        raise typer.BadParameter(f"--compare-vllm benches the supervised vLLM (the `{LOCAL_CHANNEL}` channel): give "
                                 "neither --compare, --base-url nor another --channel", param_hint="--compare-vllm")
    if o.request_rate is not None or o.concurrency is not None or o.gpus is not None:
        raise typer.BadParameter("the agent workload sets its own concurrency (sessions=N)", param_hint="--dataset")
    wl = parse_spec(o.dataset)
    return dataclasses.replace(wl, seed=o.seed, max_tokens=o.max_tokens or wl.max_tokens)


def _run(endpoint_of: EndpointOf, o: Any, model: str, wl: AgentWorkload, err: Console, label: str) -> dict[str, Any]:
    endpoint, model = endpoint_of(dataclasses.replace(o, channel=LOCAL_CHANNEL, model=model))
    err.print(f"{label}: agent workload against {endpoint.url} ({model!r})", markup=False)
    return asyncio.run(run_agent(endpoint, model, wl, parse_duration(o.timeout, option="--timeout"))).summary()


def run_agent_compare_vllm(o: Any, endpoint_of: EndpointOf) -> int:
    """The whole command for ``cli.bench.BenchOptions`` ``o``; ``endpoint_of`` is ``cli.bench``'s endpoint reader.

    Returns: 0, or 1 when neither run had an answer. Raises: typer.BadParameter (exit 3), AgentUnreachable
    (exit 2), ConduitError (exit 1) as in the module docstring.
    """
    wl = _workload(o)
    try:
        changes = dict(parse_change(text) for text in o.compare_vllm)
    except ValueError as exc:
        raise typer.BadParameter(f"{exc} (e.g. kv_offloading_size=64)", param_hint="--compare-vllm") from None
    loaded, before, after = before_and_after(changes)
    timeout_s = parse_duration(o.ready_timeout, option="--ready-timeout")
    agent, out, err = AgentVllm(), make_console(highlight=True), make_console(stderr=True, highlight=True)
    snap = ready_before(agent, timeout_s, loaded.path, before)
    a = _run(endpoint_of, o, o.model or before.name, wl, err, "before")
    previous: dict[str, Any] | None = None
    try:
        _, previous = set_vllm_keys(loaded.path, changes)
        err.print(f"set {_words(changes)} in [vllm] of {loaded.path}; waiting for the relaunch", markup=False)
        agent.wait_ready(timeout_s, f"after setting {_words(changes)}", avoid={snap.get("pid")})
        b = _run(endpoint_of, o, o.model or after.name, wl, err, "after")
    finally:
        _restore(o.keep, loaded.path, previous, agent, timeout_s, err, changes)
    title = f"conduit bench --dataset agent --compare-vllm {_words(changes)}"
    out.print(table(a, b, title))
    if o.json_path is not None:
        doc = {"changes": dict(changes), "before": a, "after": b}
        atomic_write(o.json_path, (json.dumps(doc, indent=1, default=str) + "\n").encode(), 0o644)
        err.print(f"wrote {o.json_path}")
    return 0 if a["requests"] > a["failed"] or b["requests"] > b["failed"] else 1


def _restore(keep: bool, path: Path, previous: dict[str, Any] | None, agent: AgentVllm, timeout_s: float,
             err: Console, changes: dict[str, Any]) -> None:
    """Write ``previous`` back (unless ``keep``) and wait for vLLM to be ready again (a failed state is waited
    out: the agent starts vLLM again once it reads the restored table). A failure is printed, not raised."""
    if previous is None:
        return
    if keep:
        err.print(f"kept {_words(changes)} in [vllm] of {path} (--keep)", markup=False)
        return
    try:
        set_vllm_keys(path, previous)
        err.print(f"restored [vllm] of {path}; waiting for vLLM to be ready again", markup=False)
        agent.wait_ready(timeout_s, "after restoring [vllm]", avoid=set(agent.seen_pids), failed_ok=True)
    except ConduitError as exc:
        err.print(f"error while restoring [vllm] of {path}: {exc.message}", markup=False)
