"""``conduit bench``: a streaming load test with a concurrency sweep (the work is in ``conduit.daemon.bench``).

Examples::

    conduit bench --base-url http://127.0.0.1:8000/v1 --model qwen --ignore-eos --concurrency 1,2,4,8
    conduit bench --base-url https://gw.example/api --protocol anthropic --model m --key-env GW_KEY --json out.json

Exit codes: 0 when the sweep ran (per-level errors are reported, not fatal), 1 when no request succeeded,
3 for bad arguments.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from conduit.adapters.base import AuthStyle, Protocol_
from conduit.daemon.bench import outputs, target
from conduit.daemon.bench.arrivals import parse_levels
from conduit.daemon.bench.outputs import SweepResult
from conduit.daemon.bench.prompts import PromptSource
from conduit.daemon.bench.runner import BenchConfig, run_sweep
from conduit.daemon.bench.stats import LevelStats, RequestResult
from conduit.daemon.bench.wire import Endpoint
from conduit.daemon.cli.app import app, state
from conduit.units import parse_duration


@dataclass(frozen=True)
class BenchOptions:
    """``conduit bench``'s options as typed (see the command's ``--help`` for each)."""

    base_url: str | None
    protocol: str
    model: str | None
    channel: str | None
    key_env: str | None
    key_file: Path | None
    auth: str | None
    requests: int
    concurrency: str
    prompt_tokens: int | None
    prompts: Path | None
    max_tokens: int
    ignore_eos: bool
    stream_usage: bool
    min_growth: float
    timeout: str
    json_path: Path | None
    csv_path: Path | None
    plot_path: Path | None


def _check(o: BenchOptions) -> None:
    """Refuse option values typer cannot check alone (choices, pairs that exclude each other)."""
    if o.protocol not in ("openai", "anthropic"):
        raise typer.BadParameter("use openai or anthropic", param_hint="--protocol")
    if o.auth is not None and o.auth not in ("bearer", "x-api-key"):
        raise typer.BadParameter("use bearer or x-api-key", param_hint="--auth")
    if o.key_env and o.key_file:
        raise typer.BadParameter("give one of --key-env and --key-file", param_hint="--key-env/--key-file")
    if o.prompt_tokens is not None and o.prompts is not None:
        raise typer.BadParameter("give one of --prompt-tokens and --prompts", param_hint="--prompts")
    if o.channel and o.base_url:
        raise typer.BadParameter("give one of --channel and --base-url", param_hint="--channel")
    if not o.channel and not o.base_url:
        raise typer.BadParameter("give --base-url (or --channel)", param_hint="--base-url")


def _levels(text: str) -> tuple[int, ...]:
    try:
        return parse_levels(text)
    except ValueError as exc:
        raise typer.BadParameter(f"{exc}; expected e.g. 1,2,4,8", param_hint="--concurrency") from None


def _endpoint(o: BenchOptions) -> tuple[Endpoint, str]:
    """The endpoint and the model id from the channel or the base URL; ``--model`` wins over the profile's."""
    proto: Protocol_ = "anthropic" if o.protocol == "anthropic" else "openai"
    if o.channel:
        endpoint, profile_model = target.channel_endpoint(state.profile, o.channel, proto)
        model = o.model or profile_model
    else:
        auth: AuthStyle | None = None if o.auth is None else ("x-api-key" if o.auth == "x-api-key" else "bearer")
        endpoint, model = target.url_endpoint(o.base_url or "", proto, auth, o.key_env, o.key_file), o.model or ""
    if not model:
        raise typer.BadParameter("give the model id the server serves", param_hint="--model")
    return endpoint, model


def build_config(o: BenchOptions) -> BenchConfig:
    """Check the options and turn them into a sweep's settings (reads the profile, the key and the prompts).

    Raises:
        typer.BadParameter: a usage mistake (exit 3); ConduitError: the profile, the key, the prompts file or
            a setting is refused, or ``--plot`` lacks matplotlib (checked before minutes of sweeping).
    """
    _check(o)
    levels = _levels(o.concurrency)
    timeout_s = parse_duration(o.timeout, option="--timeout")
    if o.plot_path is not None:
        outputs.require_plotting()
    endpoint, model = _endpoint(o)
    return BenchConfig(endpoint=endpoint, model=model, prompts=PromptSource.choose(o.prompt_tokens, o.prompts),
                       requests=o.requests, concurrency=levels, max_tokens=o.max_tokens, ignore_eos=o.ignore_eos,
                       stream_usage=o.stream_usage, timeout_s=timeout_s, min_growth=o.min_growth)


def render_table(sweep: SweepResult) -> Table:
    """One row per level: requests, TTFT/TPOT/e2e p50/p90/p99 (ms), output tokens/s, requests/s, errors."""
    t = Table(title=f"conduit bench: {sweep.config.get('model', '')}")
    for col in outputs.TABLE_COLUMNS:
        if col == "errors":
            t.add_column(col, overflow="fold")
        else:
            t.add_column(col, justify="right", no_wrap=True)
    for row in outputs.table_rows(sweep):
        t.add_row(*row)
    return t


def run_bench(o: BenchOptions) -> int:
    """The whole command: settings, warnings, the sweep under a progress bar, the report, the files.

    Returns: 0, or 1 when no request succeeded. Raises what ``build_config`` and the writers raise.
    """
    cfg = build_config(o)
    out, err = Console(), Console(stderr=True)
    for warning in target.url_warnings(cfg.endpoint) + target.level_warnings(cfg.requests, cfg.concurrency):
        err.print(f"[yellow]warning:[/] {warning}")
    err.print(f"bench {cfg.endpoint.url} model {cfg.model!r}, {cfg.requests} requests x {len(cfg.concurrency)} "
              f"levels, prompts {cfg.prompts.describe()}, max_tokens {cfg.max_tokens}")
    sweep = _run_with_progress(cfg, err)
    out.print(render_table(sweep))
    for line in outputs.report_lines(sweep):
        out.print(line, markup=False, highlight=False)
    outputs.write_outputs(sweep, json_path=o.json_path, csv_path=o.csv_path, plot_path=o.plot_path,
                          on_written=lambda path: err.print(f"wrote {path}"))
    if sweep.total_ok == 0:
        err.print("error: no request succeeded (see the errors above)")
        return 1
    return 0


@app.command()
def bench(
    base_url: Annotated[str | None, typer.Option(help="OpenAI: <root>/v1; Anthropic: the root.")] = None,
    protocol: Annotated[str, typer.Option(help="openai or anthropic.")] = "openai",
    model: Annotated[str | None, typer.Option(help="Model id as the server names it.")] = None,
    channel: Annotated[str | None, typer.Option(help="Use a channel from the profile.")] = None,
    key_env: Annotated[str | None, typer.Option(help="Read the API key from this environment variable.")] = None,
    key_file: Annotated[Path | None, typer.Option(help="Read the API key from this file.")] = None,
    auth: Annotated[str | None, typer.Option(help="bearer or x-api-key (default: bearer for openai, "
                                                  "x-api-key for anthropic).")] = None,
    requests: Annotated[int, typer.Option(help="Requests per concurrency level.")] = 100,
    concurrency: Annotated[str, typer.Option(help="Comma-separated levels.")] = "1,2,4,8,16,32,64",
    prompt_tokens: Annotated[int | None, typer.Option(help="Synthetic prompt length in tokens (about).")] = None,
    prompts: Annotated[Path | None, typer.Option(help="Prompts file: one per line, or JSON Lines.")] = None,
    max_tokens: Annotated[int, typer.Option(help="max_tokens of every request.")] = 128,
    ignore_eos: Annotated[bool, typer.Option(help="Send ignore_eos (vLLM, openai protocol).")] = False,
    stream_usage: Annotated[bool, typer.Option(help="Ask for the final usage chunk (openai).")] = True,
    min_growth: Annotated[float, typer.Option(help="Saturation: throughput growth fraction per level.")] = 0.10,
    timeout: Annotated[str, typer.Option(help="How long to wait for any read before a timeout error "
                                              "(seconds, or 90s, 2m).")] = "120",
    json_path: Annotated[Path | None, typer.Option("--json", help="Write results as JSON here.")] = None,
    csv_path: Annotated[Path | None, typer.Option("--csv", help="Write one row per level as CSV here.")] = None,
    plot_path: Annotated[Path | None, typer.Option("--plot", help="Draw a PNG (needs the plot extra).")] = None,
) -> None:
    """Load-test a channel with streaming requests over a concurrency sweep; find the saturation point."""
    code = run_bench(BenchOptions(
        base_url=base_url, protocol=protocol, model=model, channel=channel, key_env=key_env, key_file=key_file,
        auth=auth, requests=requests, concurrency=concurrency, prompt_tokens=prompt_tokens, prompts=prompts,
        max_tokens=max_tokens, ignore_eos=ignore_eos, stream_usage=stream_usage, min_growth=min_growth,
        timeout=timeout, json_path=json_path, csv_path=csv_path, plot_path=plot_path))
    if code:
        raise typer.Exit(code)


def _run_with_progress(cfg: BenchConfig, err: Console) -> SweepResult:
    """Run the sweep under a rich progress bar on stderr."""
    total = cfg.requests * len(cfg.concurrency)
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TextColumn("{task.fields[errs]}"), console=err) as progress:
        task = progress.add_task(f"concurrency {cfg.concurrency[0]}", total=total, errs="")
        errors = 0

        def on_result(r: RequestResult) -> None:
            nonlocal errors
            errors += 0 if r.ok else 1
            progress.update(task, advance=1, errs=f"errors {errors}" if errors else "")

        def on_level(lv: LevelStats) -> None:
            i = cfg.concurrency.index(lv.concurrency)
            if i + 1 < len(cfg.concurrency):
                progress.update(task, description=f"concurrency {cfg.concurrency[i + 1]}")

        return asyncio.run(run_sweep(cfg, on_result=on_result, on_level=on_level))
