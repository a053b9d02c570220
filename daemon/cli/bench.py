"""``conduit bench``: a streaming load test with a concurrency sweep (the work is in ``conduit.daemon.bench.loadgen``).

Examples::

    conduit bench --base-url http://127.0.0.1:8000/v1 --model qwen --ignore-eos --concurrency 1,2,4,8
    conduit bench --base-url https://gw.example/api --protocol anthropic --model m --key-env GW_KEY --json out.json

Exit codes: 0 when the sweep ran (per-level errors are reported, not fatal), 1 when no request succeeded,
3 for bad arguments.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from conduit.adapters.base import AuthStyle, Protocol_
from conduit.daemon.bench import loadgen as lg
from conduit.daemon.cli.app import app
from conduit.errors import ConduitError


def _resolve_channel(name: str, protocol: Protocol_ | None = None) -> tuple[lg.Endpoint, str]:
    """Look up channel ``name`` in the profile: (endpoint, the profile's model).

    The base URL is rendered for the protocol as the tools get it (``Root.openai_base()`` for OpenAI,
    ``Root.anthropic_base()`` for Anthropic); the key comes from the channel's key source, cleaned.

    Raises:
        ProfileError: no profile, or no such channel; KeyError_: the key source fails.
    """
    from conduit.daemon.cli.app import state
    from conduit.daemon.config.profile import load_profile
    from conduit.daemon.config.resolve import resolve_channel
    from conduit.errors import ProfileError

    profile = load_profile(state.profile)
    if name not in profile.channels:
        raise ProfileError(f"{profile.path}: no channel `{name}`",
                           hint=f"channels in the profile: {', '.join(profile.channels)}")
    ch = resolve_channel(profile, name)
    proto: Protocol_ = protocol or ("openai" if "openai" in ch.roots else "anthropic")
    if proto not in ch.roots:
        raise ProfileError(f"{profile.path}: channel `{name}` does not speak the {proto} protocol",
                           hint=f"it speaks {', '.join(ch.roots)}; pass --protocol accordingly")
    root = ch.roots[proto]
    base = root.openai_base() if proto == "openai" else root.anthropic_base()
    return lg.Endpoint(base, proto, ch.key, ch.auth), profile.model.model


def read_key(key_env: str | None, key_file: Path | None) -> str | None:
    """The key from ``$key_env`` or ``key_file`` through the shared key sources (cleaned), or None.

    Raises:
        KeyError_: the variable is unset/blank, the file cannot be read, or the key is refused.
    """
    from conduit.daemon.config.keys import KeySource
    from conduit.daemon.config.keys import read_key as read_source

    if key_env:
        return read_source(KeySource(env=key_env)).key
    if key_file:
        return read_source(KeySource(file=str(key_file.expanduser().absolute()))).key
    return None


def render_table(sweep: lg.SweepResult) -> Table:
    """One row per level: requests, TTFT/TPOT/e2e p50/p90/p99 (ms), output tokens/s, requests/s, errors."""
    t = Table(title=f"conduit bench: {sweep.config.get('model', '')}")
    for col in ("conc", "ok/req", "TTFT ms\np50/90/99", "TPOT ms\np50/90/99", "e2e ms\np50/90/99",
                "out tok/s", "req/s", "errors"):
        if col == "errors":
            t.add_column(col, overflow="fold")
        else:
            t.add_column(col, justify="right", no_wrap=True)

    def three(s: lg.Summary) -> str:
        vals = s.as_ms()
        return "/".join("-" if vals[k] is None else f"{vals[k]:.0f}" for k in ("p50", "p90", "p99"))

    sat = sweep.saturation.concurrency
    for lv in sweep.levels:
        t.add_row(
            f"{lv.concurrency}{' *' if lv.concurrency == sat else ''}",
            f"{lv.ok}/{lv.requests}", three(lv.ttft), three(lv.tpot), three(lv.e2e),
            f"{lv.output_tokens_per_s:.1f}", f"{lv.requests_per_s:.2f}", lg.describe_errors(lv.errors),
        )
    return t


def _parse_levels(text: str) -> tuple[int, ...]:
    try:
        return lg.parse_levels(text)
    except ValueError as exc:
        raise typer.BadParameter(f"{exc}; expected e.g. 1,2,4,8", param_hint="--concurrency") from None


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
    timeout: Annotated[float, typer.Option(help="Seconds to wait for any read before a timeout error.")] = 120.0,
    json_path: Annotated[Path | None, typer.Option("--json", help="Write results as JSON here.")] = None,
    csv_path: Annotated[Path | None, typer.Option("--csv", help="Write one row per level as CSV here.")] = None,
    plot_path: Annotated[Path | None, typer.Option("--plot", help="Draw a PNG (needs the plot extra).")] = None,
) -> None:
    """Load-test a channel with streaming requests over a concurrency sweep; find the saturation point."""
    if protocol not in ("openai", "anthropic"):
        raise typer.BadParameter("use openai or anthropic", param_hint="--protocol")
    if auth is not None and auth not in ("bearer", "x-api-key"):
        raise typer.BadParameter("use bearer or x-api-key", param_hint="--auth")
    if key_env and key_file:
        raise typer.BadParameter("give one of --key-env and --key-file", param_hint="--key-env/--key-file")
    if prompt_tokens is not None and prompts is not None:
        raise typer.BadParameter("give one of --prompt-tokens and --prompts", param_hint="--prompts")
    if channel and base_url:
        raise typer.BadParameter("give one of --channel and --base-url", param_hint="--channel")
    if not channel and not base_url:
        raise typer.BadParameter("give --base-url (or --channel)", param_hint="--base-url")
    levels = _parse_levels(concurrency)
    if plot_path is not None and not lg.plotting_available():  # fail before spending minutes on a sweep
        raise ConduitError("--plot needs matplotlib, which is not installed", hint=lg.PLOT_HINT)

    proto: Protocol_ = "anthropic" if protocol == "anthropic" else "openai"
    if channel:
        endpoint, profile_model = _resolve_channel(channel, proto)
        model = model or profile_model
    else:
        assert base_url is not None
        auth_style: AuthStyle | None = None if auth is None else ("x-api-key" if auth == "x-api-key" else "bearer")
        endpoint = lg.Endpoint(base_url, proto, read_key(key_env, key_file), auth_style)
    if not model:
        raise typer.BadParameter("give the model id the server serves", param_hint="--model")
    source = (lg.PromptSource(None, tuple(lg.load_prompts(prompts))) if prompts is not None
              else lg.PromptSource(prompt_tokens if prompt_tokens is not None else 128))
    cfg = lg.BenchConfig(endpoint=endpoint, model=model, prompts=source, requests=requests,
                         concurrency=levels, max_tokens=max_tokens, ignore_eos=ignore_eos,
                         stream_usage=stream_usage, timeout_s=timeout, min_growth=min_growth)

    out, err = Console(), Console(stderr=True)
    _warn_url(err, endpoint)
    for c in levels:
        if requests < c:
            err.print(f"[yellow]warning:[/] level {c} gets only {requests} requests: it never runs {c} at once")
    err.print(f"bench {endpoint.url} model {model!r}, {requests} requests x {len(levels)} levels, "
              f"prompts {source.describe()}, max_tokens {max_tokens}")

    sweep = _run_with_progress(cfg, err)
    out.print(render_table(sweep))
    out.print(f"percentiles: {lg.PERCENTILE_METHOD}; * = saturation level", markup=False, highlight=False)
    too_long = False
    for lv in sweep.levels:
        for kind, detail in lv.error_examples.items():
            out.print(f"  concurrency {lv.concurrency}: {kind} e.g. {detail}", markup=False, highlight=False)
            too_long = too_long or "maximum context length" in detail
    if too_long:
        # Synthetic prompts count words; a small or byte-level tokenizer makes several tokens of each.
        out.print("hint: the prompt plus max_tokens is longer than the model's max_model_len: lower "
                  "--prompt-tokens (the server's own count is the table's input tokens)", markup=False)
    sat = sweep.saturation
    if sat.recommended_max_num_seqs is not None:
        out.print(f"saturation at concurrency {sat.concurrency}: recommend max_num_seqs = "
                  f"{sat.recommended_max_num_seqs}")
    out.print(sat.explanation, markup=False, highlight=False)

    if json_path is not None:
        lg.write_json(json_path, sweep)
        err.print(f"wrote {json_path}")
    if csv_path is not None:
        lg.write_csv(csv_path, sweep)
        err.print(f"wrote {csv_path}")
    if plot_path is not None:
        lg.write_plot(plot_path, sweep)
        err.print(f"wrote {plot_path}")
    if sweep.total_ok == 0:
        err.print("error: no request succeeded (see the errors above)")
        raise typer.Exit(1)


def _warn_url(err: Console, ep: lg.Endpoint) -> None:
    """Warn about the two base-URL mistakes that make every request a 404 (cases C01/C02)."""
    tail = ep.base_url.rsplit("/", 1)[-1]
    if ep.protocol == "anthropic" and tail == "v1":
        err.print(f"[yellow]warning:[/] anthropic requests go to {ep.url}: give the root without /v1")
    if ep.protocol == "openai" and not (tail.startswith("v") and tail[1:2].isdigit()):
        err.print(f"[yellow]warning:[/] openai requests go to {ep.url}: the base usually ends in /v1")


def _run_with_progress(cfg: lg.BenchConfig, err: Console) -> lg.SweepResult:
    """Run the sweep under a rich progress bar on stderr."""
    total = cfg.requests * len(cfg.concurrency)
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TextColumn("{task.fields[errs]}"), console=err) as progress:
        task = progress.add_task(f"concurrency {cfg.concurrency[0]}", total=total, errs="")
        errors = 0

        def on_result(r: lg.RequestResult) -> None:
            nonlocal errors
            errors += 0 if r.ok else 1
            progress.update(task, advance=1, errs=f"errors {errors}" if errors else "")

        def on_level(lv: lg.LevelStats) -> None:
            i = cfg.concurrency.index(lv.concurrency)
            if i + 1 < len(cfg.concurrency):
                progress.update(task, description=f"concurrency {cfg.concurrency[i + 1]}")

        return asyncio.run(lg.run_sweep(cfg, on_result=on_result, on_level=on_level))
