"""``conduit bench``: a streaming load test, a closed-loop concurrency sweep or open-loop request rates (the
work is in ``conduit.daemon.bench``; the open-loop options are ``vllm bench serve``'s).

Examples::

    conduit bench --base-url http://127.0.0.1:8000/v1 --model qwen --ignore-eos --concurrency 1,2,4,8
    conduit bench --base-url http://127.0.0.1:8000/v1 --model qwen --request-rate 2,4,8 --max-concurrency 16 \\
        --goodput ttft:500,tpot:50 --dataset jsonl:sharegpt.json --save-result out.jsonl
    conduit bench --base-url https://gw.example/api --protocol anthropic --model m --key-env GW_KEY --json out.json
    conduit bench --channel local --compare http://10.0.0.2:8000/v1 --gpus 1,2 --concurrency 1,4,16,64
    conduit bench --compare-vllm max_num_seqs=4 --concurrency 1,2,4,8   # the supervised vLLM, before/after

Exit codes: 0 when the sweep ran (per-level errors are reported, not fatal), 1 when no request succeeded,
3 for bad arguments.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, TypeVar

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from conduit.adapters.base import AuthStyle, Protocol_
from conduit.daemon.agent.client import AgentClient
from conduit.daemon.bench import compare, outputs, resultfile, target
from conduit.daemon.bench.arrivals import DEFAULT_LEVELS, parse_levels, parse_rates
from conduit.daemon.bench.compare import GpuCount, parse_gpus
from conduit.daemon.bench.outputs import SweepResult
from conduit.daemon.bench.prompts import PromptSource
from conduit.daemon.bench.runner import BenchConfig, run_sweep
from conduit.daemon.bench.stats import LevelStats, RequestResult, parse_percentiles, parse_slos
from conduit.daemon.bench.wire import Endpoint
from conduit.daemon.cli.app import state
from conduit.daemon.cli.console import make_console
from conduit.errors import ConduitError
from conduit.units import parse_duration

commands = typer.Typer()  # this module's commands; the root app loads them lazily (cli.commands.COMMANDS)

T = TypeVar("T")


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
    concurrency: str | None
    prompt_tokens: int | None
    prompts: Path | None
    max_tokens: int | None
    ignore_eos: bool
    stream_usage: bool
    min_growth: float
    timeout: str
    json_path: Path | None
    csv_path: Path | None
    plot_path: Path | None
    request_rate: str | None = None
    burstiness: float = 1.0
    max_concurrency: int | None = None
    goodput: str | None = None
    dataset: str | None = None
    percentiles: str = "50,90,99"
    save_result: Path | None = None
    seed: int = 0
    server_check: bool = True
    compare: str | None = None
    gpus: str | None = None
    compare_vllm: tuple[str, ...] = ()
    keep: bool = False
    ready_timeout: str = "10m"


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
    if o.request_rate is not None and o.concurrency is not None:
        raise typer.BadParameter("--concurrency is the closed loop; with --request-rate cap the requests in "
                                 "flight with --max-concurrency", param_hint="--concurrency")
    if o.request_rate is None and (o.max_concurrency is not None or o.burstiness != 1.0):
        raise typer.BadParameter("--max-concurrency and --burstiness shape open-loop arrivals: give --request-rate "
                                 "too (for a closed loop use --concurrency N)", param_hint="--request-rate")
    if o.dataset is not None and (o.prompts is not None or (o.prompt_tokens is not None and o.dataset != "random")):
        raise typer.BadParameter("give one of --dataset, --prompts and --prompt-tokens (--dataset random takes "
                                 "--prompt-tokens as its input length)", param_hint="--dataset")


def _parsed(parse: Callable[[str], T], text: str, hint: str, example: str) -> T:
    """``parse(text)``, a ValueError becoming a usage error naming the option."""
    try:
        return parse(text)
    except ValueError as exc:
        raise typer.BadParameter(f"{exc}; expected e.g. {example}", param_hint=hint) from None


def _levels(text: str) -> tuple[int, ...]:
    return _parsed(parse_levels, text, "--concurrency", "1,2,4,8")


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
    levels = _levels(o.concurrency) if o.concurrency is not None else DEFAULT_LEVELS
    rates = _parsed(parse_rates, o.request_rate, "--request-rate", "4 or 1,2,4,inf") if o.request_rate else ()
    slos = _parsed(parse_slos, o.goodput, "--goodput", "ttft:500,tpot:50") if o.goodput else None
    pcts = _parsed(parse_percentiles, o.percentiles, "--percentiles", "50,90,99")
    timeout_s = parse_duration(o.timeout, option="--timeout")
    if o.plot_path is not None:
        outputs.require_plotting()
    endpoint, model = _endpoint(o)
    prompts = PromptSource.choose(o.prompt_tokens, o.prompts, o.dataset, o.seed)
    return BenchConfig(endpoint=endpoint, model=model, prompts=prompts, requests=o.requests, concurrency=levels,
                       max_tokens=o.max_tokens or 128, ignore_eos=o.ignore_eos, stream_usage=o.stream_usage,
                       timeout_s=timeout_s, min_growth=o.min_growth, request_rates=rates, burstiness=o.burstiness,
                       max_concurrency=o.max_concurrency, slos=slos, percentiles=pcts, seed=o.seed,
                       check_server=o.server_check, fixed_output_len=o.max_tokens is not None or not o.dataset)


def render_table(sweep: SweepResult) -> Table:
    """One row per level: requests, TTFT/TPOT/e2e p50/p90/p99 (ms), output tokens/s, requests/s, errors."""
    t = Table(title=f"conduit bench: {sweep.config.get('model', '')}")
    for col in outputs.table_columns(sweep):
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
    if o.dataset is not None and o.dataset.partition(":")[0] == "agent":  # sessions of turns, not a sweep
        from conduit.daemon.cli.bench_agent import run_agent_bench

        return run_agent_bench(o, _endpoint)
    if o.dataset is not None and o.dataset.partition(":")[0] == "interference":  # two phases, not a sweep
        from conduit.daemon.cli.bench_interference import run_interference_bench

        return run_interference_bench(o, _endpoint, state.profile)
    if o.compare_vllm:
        return _run_compare_vllm(o)
    if o.keep:
        raise typer.BadParameter("--keep goes with --compare-vllm", param_hint="--keep")
    if o.compare is not None or o.gpus is not None:
        return run_compare(o)
    cfg = build_config(o)
    out, err = make_console(highlight=True), make_console(stderr=True, highlight=True)
    warnings = target.url_warnings(cfg.endpoint)
    if not cfg.open_loop:
        warnings += target.level_warnings(cfg.requests, cfg.concurrency)
    for warning in warnings:
        err.print(f"[yellow]warning:[/] {warning}", markup=True, highlight=False)
    err.print(f"bench {cfg.endpoint.url} model {cfg.model!r}, {cfg.requests} requests x {cfg.level_count} "
              f"levels, prompts {cfg.prompts.describe()}, max_tokens {cfg.max_tokens}", markup=False)
    sweep = _run_with_progress(cfg, err)
    out.print(render_table(sweep))
    for line in outputs.report_lines(sweep):
        out.print(line, markup=False, highlight=False)
    outputs.write_outputs(sweep, json_path=o.json_path, csv_path=o.csv_path, plot_path=o.plot_path,
                          on_written=lambda path: err.print(f"wrote {path}"))
    if o.save_result is not None:
        resultfile.write_result(o.save_result, sweep.levels, sweep.config, cfg.percentiles)
        err.print(f"wrote {o.save_result}")
    if sweep.total_ok == 0:
        err.print("error: no request succeeded (see the errors above)")
        return 1
    return 0


_Opt = typer.Option
_DATASET_HELP = ("random, jsonl:PATH (ShareGPT conversations), or agent[:sessions=4,turns=4,prefix=1024,turn=64,"
                 "gap=2s] (multi-turn sessions sharing a long system prompt), or "
                 "interference[:streams=4,long=2048,rate=1,gpus=N] (decode ITL alone and while long prompts arrive).")
_VLLM_HELP = ("KEY=VALUE (repeatable): bench the supervised vLLM, set this in [vllm], wait for the agent to "
              "relaunch it, bench again, compare, restore.")


@commands.command()
def bench(
    base_url: Annotated[str | None, _Opt(help="OpenAI: <root>/v1; Anthropic: the root.")] = None,
    protocol: Annotated[str, _Opt(help="openai or anthropic.")] = "openai",
    model: Annotated[str | None, _Opt(help="Model id as the server names it.")] = None,
    channel: Annotated[str | None, _Opt(help="Use a channel from the profile.")] = None,
    key_env: Annotated[str | None, _Opt(help="Read the API key from this environment variable.")] = None,
    key_file: Annotated[Path | None, _Opt(help="Read the API key from this file.")] = None,
    auth: Annotated[str | None, _Opt(help="bearer or x-api-key (default: bearer for openai, x-api-key for "
                                          "anthropic).")] = None,
    requests: Annotated[int, _Opt("--requests", "--num-prompts", help="Requests per level.")] = 100,
    concurrency: Annotated[str | None, _Opt(help="Closed-loop levels, comma-separated "
                                                 "(default 1,2,4,8,16,32,64).")] = None,
    request_rate: Annotated[str | None, _Opt(help="Open loop: requests/s, or several comma-separated; "
                                                  "inf = all at once (vllm bench serve).")] = None,
    burstiness: Annotated[float, _Opt(help="Open loop: gamma shape of the gaps; 1 = Poisson.")] = 1.0,
    max_concurrency: Annotated[int | None, _Opt(help="Open loop: at most this many requests in flight.")] = None,
    goodput: Annotated[str | None, _Opt(help="SLOs in ms, e.g. ttft:500,tpot:50 (also e2el): requests meeting "
                                             "all, per second.")] = None,
    dataset: Annotated[str | None, _Opt(help=_DATASET_HELP)] = None,
    prompt_tokens: Annotated[int | None, _Opt("--prompt-tokens", "--input-len",
                                              help="Synthetic prompt length in the server's tokens.")] = None,
    prompts: Annotated[Path | None, _Opt(help="Prompts file: one per line, or JSON Lines.")] = None,
    max_tokens: Annotated[int | None, _Opt("--max-tokens", "--output-len",
                                           help="max_tokens of every request (default 128; a dataset: its "
                                                "reference answer's length).")] = None,
    ignore_eos: Annotated[bool, _Opt(help="Send ignore_eos (vLLM, openai protocol).")] = False,
    stream_usage: Annotated[bool, _Opt(help="Ask for the final usage chunk (openai).")] = True,
    min_growth: Annotated[float, _Opt(help="Saturation: the growth fraction a later level must beat.")] = 0.10,
    percentiles: Annotated[str, _Opt(help="Percentiles to report, e.g. 50,90,99.")] = "50,90,99",
    seed: Annotated[int, _Opt(help="Seed of the arrival gaps and the dataset's order.")] = 0,
    server_check: Annotated[bool, _Opt(help="Read the server's /metrics around each level.")] = True,
    timeout: Annotated[str, _Opt(help="How long to wait for any read before a timeout error "
                                      "(seconds, or 90s, 2m).")] = "120",
    json_path: Annotated[Path | None, _Opt("--json", help="Write results as JSON here.")] = None,
    csv_path: Annotated[Path | None, _Opt("--csv", help="Write one row per level as CSV here.")] = None,
    plot_path: Annotated[Path | None, _Opt("--plot", help="Draw a PNG (needs the plot extra).")] = None,
    save_result: Annotated[Path | None, _Opt(help="Write vllm bench serve's result fields, one JSON line "
                                                  "per level.")] = None,
    compare: Annotated[str | None, _Opt(help="Run the same sweep against this second target too (a channel, "
                                             "or a base URL with the same key options) and compare.")] = None,
    gpus: Annotated[str | None, _Opt(help="With --compare: GPU counts A,B for the scaling efficiency "
                                          "(default: [vllm] of the local channel, /metrics, or 1).")] = None,
    compare_vllm: Annotated[list[str] | None, _Opt(help=_VLLM_HELP)] = None,
    keep: Annotated[bool, _Opt(help="With --compare-vllm: keep the change instead of restoring.")] = False,
    ready_timeout: Annotated[str, _Opt(help="With --compare-vllm: wait this long for ready (90s, 10m).")] = "10m",
) -> None:
    """Load-test a channel with streaming requests over levels (concurrency or request rate); find the
    saturation point."""
    code = run_bench(BenchOptions(
        base_url=base_url, protocol=protocol, model=model, channel=channel, key_env=key_env, key_file=key_file,
        auth=auth, requests=requests, concurrency=concurrency, prompt_tokens=prompt_tokens, prompts=prompts,
        max_tokens=max_tokens, ignore_eos=ignore_eos, stream_usage=stream_usage, min_growth=min_growth,
        timeout=timeout, json_path=json_path, csv_path=csv_path, plot_path=plot_path, request_rate=request_rate,
        burstiness=burstiness, max_concurrency=max_concurrency, goodput=goodput, dataset=dataset,
        percentiles=percentiles, save_result=save_result, seed=seed, server_check=server_check,
        compare=compare, gpus=gpus, compare_vllm=tuple(compare_vllm or ()), keep=keep,
        ready_timeout=ready_timeout))
    if code:
        raise typer.Exit(code)


def _level_name(cfg: BenchConfig, n: int) -> str:
    if cfg.open_loop:
        r = cfg.request_rates[n]
        return "rate inf" if r == float("inf") else f"rate {r:g}/s"
    return f"concurrency {cfg.concurrency[n]}"


def _run_with_progress(cfg: BenchConfig, err: Console) -> SweepResult:
    """Run the sweep under a rich progress bar on stderr; prompt-sizing warnings are printed above it."""
    total = cfg.requests * cfg.level_count
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TextColumn("{task.fields[errs]}"), console=err) as progress:
        task = progress.add_task(_level_name(cfg, 0), total=total, errs="")
        errors, done = 0, 0

        def on_result(r: RequestResult) -> None:
            nonlocal errors
            errors += 0 if r.ok else 1
            progress.update(task, advance=1, errs=f"errors {errors}" if errors else "")

        def on_level(lv: LevelStats) -> None:
            nonlocal done
            done += 1
            if done < cfg.level_count:
                progress.update(task, description=_level_name(cfg, done))

        def on_warning(text: str) -> None:
            progress.console.print(f"[yellow]warning:[/] {text}", highlight=False)

        return asyncio.run(run_sweep(cfg, on_result=on_result, on_level=on_level, on_warning=on_warning))


# --------------------------------------------------------------------------------------------------------
# --compare: the work is conduit.daemon.bench.compare's


def _second(o: BenchOptions, a: BenchConfig) -> BenchConfig:
    """``--compare``'s target: a base URL (``http(s)://``, with A's key options) or a channel of the profile."""
    text = o.compare or ""
    if "://" in text:
        auth: AuthStyle | None = None if o.auth is None else ("x-api-key" if o.auth == "x-api-key" else "bearer")
        return replace(a, endpoint=target.url_endpoint(text, a.endpoint.protocol, auth, o.key_env, o.key_file))
    endpoint, profile_model = target.channel_endpoint(state.profile, text, a.endpoint.protocol)
    return replace(a, endpoint=endpoint, model=o.model or profile_model or a.model)


def _gpu_counts(o: BenchOptions) -> tuple[GpuCount | None, GpuCount | None]:
    """``--gpus A,B``, else the supervised vLLM's parallel sizes for a target that is its channel."""
    if o.gpus:
        a, b = _parsed(parse_gpus, o.gpus, "--gpus", "1,2")
        return GpuCount(a, "--gpus"), GpuCount(b, "--gpus")

    def known(channel: str | None) -> GpuCount | None:
        got = target.vllm_gpus(state.profile, channel) if channel else None
        return GpuCount(*got) if got else None

    return known(o.channel), known(None if "://" in (o.compare or "") else o.compare)


class _AgentGpus:
    """Mean ``utilization_gpu_pct`` over the agent's GPUs (``GET /v1/gpus``); after a failure it asks no more
    and ``note`` says why."""

    def __init__(self) -> None:
        self.note: str | None = None

    def __call__(self) -> float | None:
        if self.note is not None:
            return None
        try:
            with AgentClient(timeout_s=1.0) as agent:
                body = agent.get("/v1/gpus")
        except ConduitError:
            self.note = "no agent answered"
            return None
        pcts = [g["utilization_gpu_pct"] for g in body.get("gpus") or []
                if isinstance(g, dict) and isinstance(g.get("utilization_gpu_pct"), (int, float))]
        if not pcts:
            self.note = f"the agent reads no GPU utilisation: {body.get('reason') or 'no GPU'}"
            return None
        return float(sum(pcts)) / len(pcts)


def run_compare(o: BenchOptions) -> int:
    """``conduit bench ... --compare B``: both sweeps, the side-by-side table, efficiency and diagnosis, --json.

    Returns: 0, or 1 when neither target answered one request. Raises what ``build_config`` raises.
    """
    if o.compare is None:
        raise typer.BadParameter("--gpus goes with --compare", param_hint="--gpus")
    for given, name in ((o.csv_path, "--csv"), (o.plot_path, "--plot"), (o.save_result, "--save-result")):
        if given is not None:
            raise typer.BadParameter("--compare writes --json only", param_hint=name)
    a = build_config(o)
    b, gpus, util = _second(o, a), _gpu_counts(o), _AgentGpus()
    out, err = make_console(highlight=True), make_console(stderr=True, highlight=True)
    for cfg in (a, b):
        for warning in target.url_warnings(cfg.endpoint):
            err.print(f"[yellow]warning:[/] {warning}", markup=True, highlight=False)
    err.print(f"compare A {a.endpoint.url} ({a.model!r}) with B {b.endpoint.url} ({b.model!r}): {a.requests} "
              f"requests x {a.level_count} levels each, alternating", markup=False)
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=err) as progress:
        task = progress.add_task("A and B", total=2 * a.requests * a.level_count)
        result = asyncio.run(compare.run_compare(
            a, b, gpus=gpus, gpu_util=util, on_result=lambda _r: progress.update(task, advance=1),
            on_warning=lambda w: progress.console.print(f"[yellow]warning:[/] {w}", highlight=False)))
    result.gpu_util_note = util.note
    print_compare(result, f"conduit bench --compare: {a.model}", o.json_path, out, err)
    return 0 if result.a.sweep.total_ok + result.b.sweep.total_ok else 1


def _run_compare_vllm(o: BenchOptions) -> int:
    """``--compare-vllm``: check the options here, run in ``conduit.daemon.cli.bench_vllm``."""
    from conduit.daemon.cli import bench_vllm
    from conduit.daemon.config.profile import LOCAL_CHANNEL

    if o.compare is not None or o.base_url is not None:
        raise typer.BadParameter("--compare-vllm benches the supervised vLLM (the `local` channel): give neither "
                                 "--compare nor --base-url", param_hint="--compare-vllm")
    if o.channel not in (None, LOCAL_CHANNEL):
        raise typer.BadParameter(f"--compare-vllm benches the `{LOCAL_CHANNEL}` channel", param_hint="--channel")
    for given, name in ((o.csv_path, "--csv"), (o.plot_path, "--plot"), (o.save_result, "--save-result")):
        if given is not None:
            raise typer.BadParameter("--compare-vllm writes --json only", param_hint=name)
    changes = dict(_parsed(bench_vllm.parse_change, text, "--compare-vllm", "max_num_seqs=4")
                   for text in o.compare_vllm)
    gpus = _parsed(parse_gpus, o.gpus, "--gpus", "1,2") if o.gpus else None
    return bench_vllm.run_compare_vllm(bench_vllm.VllmCompare(
        changes, build=lambda model: build_config(replace(o, channel=LOCAL_CHANNEL, model=model)),
        show=print_compare, util=_AgentGpus(), model=o.model, gpus=gpus, keep=o.keep, json_path=o.json_path,
        ready_timeout_s=parse_duration(o.ready_timeout, option="--ready-timeout")))


def print_compare(result: compare.CompareResult, title: str, json_path: Path | None, out: Console,
                  err: Console) -> None:
    """The side-by-side table, the lines under it, and ``--json`` (``compare.write_json``)."""
    t = Table(title=title)
    for col in compare.columns(result):
        t.add_column(col, justify="right", no_wrap=True)
    for row in compare.rows(result):
        t.add_row(*row)
    out.print(t)
    for line in compare.report_lines(result):
        out.print(line, markup=False, highlight=False)
    if json_path is not None:
        compare.write_json(json_path, result)
        err.print(f"wrote {json_path}")
