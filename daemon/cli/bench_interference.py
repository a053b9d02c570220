"""``conduit bench --dataset interference[:k=v,...]``: prefill interference (``conduit.daemon.bench.interference``)
printed as one table (ITL p50/p99 alone and with long prompts), the ratio and the advice.

Exit codes: 0 when both phases produced ITL samples, 1 when either produced none, 3 for bad arguments.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Callable
from typing import Any

import typer
from rich.table import Table

from conduit.daemon.bench.interference import parse_spec, run_interference
from conduit.daemon.bench.wire import Endpoint
from conduit.daemon.cli.console import make_console
from conduit.fileio import atomic_write
from conduit.units import parse_duration


def _cell(v: Any) -> str:
    return "-" if v is None else f"{v:g}" if isinstance(v, float) else str(v)


def interference_table(summary: dict[str, Any], model: str) -> Table:
    """One row per phase: decode requests, ITL samples, ITL p50/p99 (ms), decode TTFT p50, long prompts."""
    t = Table(title=f"conduit bench --dataset interference: {model}")
    for col in ("phase", "decodes", "ITL samples", "ITL p50 ms", "ITL p99 ms", "server ITL p99 ms", "TTFT p50 ms",
                "long prompts"):
        t.add_column(col, justify="right")
    for name, key in (("alone", "alone"), ("with long prompts", "with_long_prompts")):
        p = summary[key]
        t.add_row(name, f"{p['decodes'] - p['decodes_failed']}/{p['decodes']}", str(p["itl_samples"]),
                  _cell(p["itl_ms"]["p50"]), _cell(p["itl_ms"]["p99"]),
                  _cell((p["server_itl_ms"] or {}).get("p99")), _cell(p["decode_ttft_p50_ms"]),
                  f"{p['long_prompts'] - p['long_prompts_failed']}/{p['long_prompts']}" if key != "alone" else "-")
    return t


def report_lines(summary: dict[str, Any]) -> list[str]:
    """The ratio, the long prompts as the server counted them, the first error, and the advice."""
    spec, loaded, ratio = summary["spec"], summary["with_long_prompts"], summary["interference_ratio_p99"]
    served = loaded["long_prompt_tokens_server"]
    lines = [f"{spec['streams']} streams x {spec['decodes']} decodes of {spec['max_tokens']} tokens; long prompts of "
             f"~{spec['long']} tokens" + (f" ({served} by the server's count)" if served else "")
             + f" every {1 / spec['rate']:g} s, their TTFT p50 {_cell(loaded['long_ttft_p50_ms'])} ms",
             "interference ratio (ITL p99 with long prompts / alone): "
             + ("unknown" if ratio is None else f"x{ratio:g}" + _SOURCES[summary["ratio_source"]])
             + f"; client p50 x{_cell(summary['interference_ratio_p50'])}"]
    for phase in ("alone", "with_long_prompts"):
        burst = summary[phase]["itl_burst_share"]
        if burst is not None and burst > 0.5:
            lines.append(f"warning ({phase.replace('_', ' ')}): {burst:.0%} of the gaps were under 0.1 ms (chunks read "
                         "together): the answers arrived in bursts, so ITL is barely measured (a client short of "
                         "CPU, or a proxy that buffers)")
        if summary[phase]["first_error"]:
            lines.append(f"first error ({phase.replace('_', ' ')}): {summary[phase]['first_error']}")
    return lines + [f"advice: {a}" for a in summary["advice"]]


_SOURCES = {"client": " (the gaps this client read)",
            "server": " (vLLM's vllm:inter_token_latency_seconds histogram: the client read the answers in bursts; "
                      "bucket-interpolated, so coarse)"}


def _gpu_count() -> int | None:
    """The GPUs NVML sees (``agent.gpu.default_probe``; ``$CONDUIT_FAKE_GPUS`` in tests), None when it sees none."""
    from conduit.daemon.agent.gpu import default_probe

    report = default_probe().sample()
    return len(report.gpus) or None


def _current_batched(profile_path: str | None, channel: str | None) -> int | None:
    """``[vllm] max_num_batched_tokens`` when ``channel`` is the supervised vLLM's and the profile sets it."""
    from conduit.daemon.config.profile import load_profile
    from conduit.errors import ConduitError

    if not channel:
        return None
    try:
        profile = load_profile(profile_path)
    except ConduitError:
        return None
    v = profile.vllm
    return v.max_num_batched_tokens if v is not None and channel in profile.implicit_channels else None


def run_interference_bench(o: Any, endpoint_of: Callable[[Any], tuple[Endpoint, str]],
                           profile_path: str | None = None) -> int:
    """Run the measurement for ``conduit bench`` options ``o`` (``cli.bench.BenchOptions``); ``endpoint_of``
    turns them into the endpoint and the model id; ``profile_path``: the profile (for ``[vllm]
    max_num_batched_tokens`` in the advice when ``--channel`` is the supervised vLLM's).

    Raises: typer.BadParameter for options the measurement does not take; ConduitError for a bad spec.
    """
    if o.compare_vllm or o.compare is not None or o.request_rate is not None or o.concurrency is not None:
        raise typer.BadParameter("the interference measurement sets its own load (streams=N, rate=R) and runs "
                                 "alone", param_hint="--dataset interference")
    if o.protocol != "openai":
        raise typer.BadParameter("the interference measurement sends OpenAI chat requests", param_hint="--protocol")
    spec = parse_spec(o.dataset)
    spec = dataclasses.replace(spec, max_tokens=o.max_tokens or spec.max_tokens,
                               gpus=spec.gpus if spec.gpus is not None else _gpu_count())
    endpoint, model = endpoint_of(o)
    out, err = make_console(highlight=True), make_console(stderr=True, highlight=True)
    err.print(f"bench {endpoint.url} model {model!r}: decode alone, then with long prompts arriving", markup=False)
    run = asyncio.run(run_interference(endpoint, model, spec, ignore_eos=o.ignore_eos,
                                       timeout_s=parse_duration(o.timeout, option="--timeout")))
    summary = run.summary(_current_batched(profile_path, o.channel))
    out.print(interference_table(summary, model))
    for line in report_lines(summary):
        out.print(line, markup=False, highlight=False, soft_wrap=True)
    if o.json_path is not None:
        atomic_write(o.json_path, (json.dumps(summary, indent=1) + "\n").encode(), 0o644)
        err.print(f"wrote {o.json_path}")
    return 0 if run.ratio is not None else 1
