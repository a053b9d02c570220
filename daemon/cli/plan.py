"""``conduit plan``: the vLLM memory ledger (thin CLI over ``conduit.daemon.plan``).

Exit codes: 0 the settings fit (fully or with fewer full-length sequences than max_num_seqs); 1 they do not
fit, or the model cannot be read; 3 bad arguments (including: no GPU found and no ``--gpu-memory``, and a
size without a unit: ``--gpu-memory 80`` -> "did you mean 80GiB?").

The GPU's memory comes from ``conduit.daemon.agent.gpu`` (the one NVML reader; ``$CONDUIT_FAKE_GPUS`` names a
fake device set for tests) and is passed into the ledger, which reads no hardware itself.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from conduit.daemon.agent.gpu import GpuProbe, default_probe
from conduit.daemon.cli.app import state
from conduit.daemon.cli.plan_disagg import render_disaggregated
from conduit.daemon.cli.plantier import TierOptions, add_kv_tier, render_kv_tier
from conduit.daemon.plan.disagg import plan_disaggregated
from conduit.daemon.plan.errors import PlanArgumentError
from conduit.daemon.plan.fragmentation import fragmentation, parse_lengths
from conduit.daemon.plan.ledger import Verdict, plan
from conduit.daemon.plan.model import inspect_model
from conduit.daemon.plan.settings import settings_from_dict, settings_from_vllm_section
from conduit.errors import ConduitError
from conduit.units import format_bytes, parse_size

commands = typer.Typer()  # this module's commands; the root app loads them lazily (cli.commands.COMMANDS)

_EXPLICIT_BUDGET = ("cpu_kvcache_space_bytes", "cpu_kv_space", "kv_cache_memory_bytes", "gpu_memory_bytes",
                    "gpu_memory")


def gpu_memory(probe: GpuProbe | None = None, index: int = 0) -> dict[str, Any]:
    """GPU ``index``'s memory as the planner needs it: ``{"total_bytes", "free_bytes", "name", "error"}``.

    Read through ``probe`` (default ``agent.gpu.default_probe()``: real NVML, or ``$CONDUIT_FAKE_GPUS``);
    ``total_bytes``/``free_bytes`` (``nvidia-smi --query-gpu=memory.total,memory.free``) are None with an
    ``error`` ("no NVIDIA GPU: ...") when there is no such GPU or NVML refused its memory; ``count``: the GPUs
    NVML sees (for the data-parallel advice); ``capability``: its compute capability (major x 10 + minor), only
    when NVML reports it. Never raises.
    """
    report = (probe or default_probe()).sample()
    g = next((g for g in report.gpus if g.index == index), None)
    if g is None:
        why = report.reason or (f"GPU {index}: not found" if report.gpus else "no NVIDIA GPU found")
        return {"total_bytes": None, "free_bytes": None, "name": None, "error": why, "count": len(report.gpus)}
    error = None if g.total_bytes is not None else f"GPU {index}: {g.errors.get('memory', 'memory unknown')}"
    out = {"total_bytes": g.total_bytes, "free_bytes": g.free_bytes, "name": g.name, "error": error,
           "count": len(report.gpus)}
    return out if g.compute_capability is None else {**out, "capability": g.compute_capability}


def run_plan(model: str | None, settings: Mapping[str, Any], requests: list[int] | None = None,
             *, use_nvml: bool = True, probe: GpuProbe | None = None, disaggregated: bool = False) -> dict[str, Any]:
    """Do the work of ``conduit plan`` and return a JSON-ready dict.

    Args:
        model: model directory or HF cache name; None for the fragmentation table alone.
        settings: ``plan.settings.PlanSettings`` fields (None values ignored), e.g. the profile's ``[vllm]``
            section merged with the flags.
        requests: request lengths (tokens) for the fragmentation comparison, or None.
        use_nvml: when no memory size is given on GPU, read device 0's total/free memory (``gpu_memory``).
        probe: the GPU probe for that (default ``agent.gpu.default_probe()``).

    Returns: ``{"ledger": Ledger.to_dict() | None, "model": {...} | None, "gpu": {...} | None,
    "fragmentation": Fragmentation.to_dict() | None}``, and with ``disaggregated`` also ``"disaggregated":
    plan.disagg.plan_disaggregated(...)`` (a prefill and a decode instance).

    Raises:
        PlanArgumentError: bad settings, nothing to do, or no GPU memory size available.
        BadArguments: a size ``conduit.units.parse_size`` refuses.
        ModelError: the model cannot be read.
    """
    s = {k.replace("-", "_"): v for k, v in settings.items() if v is not None}
    out: dict[str, Any] = {"ledger": None, "model": None, "gpu": None, "fragmentation": None}
    if model is None and requests is None:
        raise PlanArgumentError("nothing to plan: give a MODEL (directory or HF cache name), or --requests",
                                hint="conduit plan ./my-model --gpu-memory 80GiB")
    frag_len, frag_block = int(s.get("max_model_len") or 4096), int(s.get("block_size") or 16)
    if model is not None:
        info = inspect_model(model)
        out["model"] = asdict(info)
        if not any(s.get(k) for k in _EXPLICIT_BUDGET) and s.get("device", "gpu") == "gpu":
            out["gpu"] = _read_gpu(s, use_nvml, probe)
        led = plan(info, s)
        if disaggregated:  # a prefill and a decode instance (plan.disagg), beside the one-engine ledger
            out["disaggregated"] = plan_disaggregated(info, s)
        out["ledger"] = led.to_dict()
        frag_len, frag_block = led.max_model_len, led.block_size
    if requests is not None:
        out["fragmentation"] = fragmentation(requests, frag_len, frag_block).to_dict()
    return out


def _read_gpu(s: dict[str, Any], use_nvml: bool, probe: GpuProbe | None) -> dict[str, Any]:
    """Put GPU 0's total and free memory and name into ``s``; returns what was read.

    Raises:
        PlanArgumentError: NVML not to be used, or it knows no GPU memory size.
    """
    if not use_nvml:
        raise PlanArgumentError("GPU memory size unknown", hint="pass --gpu-memory SIZE (e.g. 80GiB)")
    gpu = gpu_memory(probe)
    if gpu["total_bytes"] is None:
        raise PlanArgumentError(
            f"GPU memory size unknown ({gpu['error']})",
            hint="pass --gpu-memory SIZE (e.g. 80GiB), or --cpu-kv-space SIZE for vLLM's CPU build")
    s.update(gpu_memory_bytes=gpu["total_bytes"], gpu_free_bytes=gpu["free_bytes"], gpu_name=gpu["name"])
    if gpu.get("capability"):  # NVML's compute capability: the quantization and dtype checks (plan.quantcheck)
        s.setdefault("gpu_capability", gpu["capability"])
    s.setdefault("gpus_available", gpu.pop("count"))
    return gpu


def _b(n: int | None) -> str:
    """A table cell for a byte count: ``20.00 GiB  (21,474,836,480 B)``, ``-`` for None."""
    return "-" if n is None else f"{format_bytes(n)}  ({n:,} B)"


def render(result: Mapping[str, Any], console: Console) -> None:
    """Print ``run_plan``'s result as rich tables (ledger, verdict and fixes, fragmentation)."""
    if result.get("disaggregated"):
        return render_disaggregated(result["disaggregated"], console, render)
    led = result.get("ledger")
    if led:
        t = Table(title=f"vLLM memory ledger per GPU: {led['model']} ({led['device']})", show_lines=False)
        t.add_column("item")
        t.add_column("value", justify="right")
        t.add_column("how")
        if led["total_memory_bytes"] is not None:
            t.add_row("device memory", _b(led["total_memory_bytes"]), "--gpu-memory or NVML memory.total")
        if led["requested_bytes"] is not None:
            t.add_row("x gpu_memory_utilization", _b(led["requested_bytes"]),
                      f"ceil(total x {led['gpu_memory_utilization']})")
        _parallel_rows(t, led)
        t.add_row("weights per GPU", _b(led["weights_bytes"]),
                  f"{led['weights_source']}, as {led['model_dtype']}")
        ov = led.get("overhead")
        if ov:
            t.add_row("overhead (estimate)", _b(ov["total_bytes"]),
                      f"activations {format_bytes(ov['activation_bytes'])}, sampler "
                      f"{format_bytes(ov['sampler_bytes'])}, non-torch {format_bytes(ov['non_torch_bytes'])}, "
                      f"CUDA graphs {format_bytes(ov['cuda_graph_bytes'])}")
        t.add_row("KV budget", _b(led["kv_budget_bytes"]), led["budget_source"])
        t.add_row("KV bytes per token per GPU", f"{led['kv_bytes_per_token']:,} B",
                  f"2 x layers x {led['kv_heads_per_gpu']} kv_heads x head_dim x {led['kv_dtype_bytes']} B "
                  f"({led['kv_cache_dtype']})")
        t.add_row("block", f"{led['block_size']} tokens = {format_bytes(led['bytes_per_block'])}",
                  "block_size x bytes per token")
        t.add_row("KV capacity", f"{led['num_blocks']:,} blocks = {led['kv_block_tokens']:,} tokens",
                  "budget // bytes per block")
        t.add_row("max concurrency per replica", f"{led['max_concurrency']:.2f}x",
                  f"blocks / {led['blocks_per_request']} blocks per {led['max_model_len']}-token request")
        t.add_row("max_num_seqs / batched tokens", f"{led['max_num_seqs']} / {led['max_num_batched_tokens']}", "")
        console.print(t)
        console.print(f"vLLM would log: [bold]{led['vllm_log_line']}[/bold]")
        colour = {"fits": "green", "fits_with_n": "yellow", "does_not_fit": "red"}[led["verdict"]]
        console.print(f"[{colour}]verdict: {led['summary']}[/{colour}]")
        if led.get("parallel_advice"):
            console.print(f"[cyan]data parallel: {led['parallel_advice']}[/cyan]")
        for fx in led["fixes"]:
            console.print(f"  fix: set {fx['setting']} = {fx['value']}  ({fx['reason']})")
        for note in led["notes"]:
            console.print(f"  note: {note}")
    frag = result.get("fragmentation")
    if frag:
        t = Table(title=f"KV fragmentation at max_model_len {frag['max_model_len']}, block {frag['block_size']}")
        t.add_column("scheme")
        t.add_column("slots reserved", justify="right")
        t.add_column("used by tokens", justify="right")
        t.add_column("detail")
        used = sum(frag["lengths"])
        t.add_row("preallocate max_model_len", f"{frag['prealloc_slots']:,}", f"{frag['prealloc_utilization']:.1%}",
                  f"{len(frag['lengths'])} x {frag['max_model_len']}")
        t.add_row("paged blocks", f"{frag['paged_slots']:,}", f"{frag['paged_utilization']:.1%}",
                  " + ".join(map(str, frag["blocks"])) + " blocks")
        console.print(t)
        console.print(f"  {used:,} tokens in requests of {', '.join(map(str, frag['lengths']))}")


def _parallel_rows(t: Table, led: Mapping[str, Any]) -> None:
    """Rows for TP x PP x DP and, with pipeline stages, each stage's layers, weights, KV and blocks."""
    tp, pp, dp = led["tensor_parallel_size"], led["pipeline_parallel_size"], led["data_parallel_size"]
    if tp * pp * dp == 1:
        return
    t.add_row("GPUs in all", f"{led['gpus_total']}", f"tensor {tp} x pipeline {pp} x data {dp}")
    if pp > 1:
        for st in led["stages"]:
            mark = " (limits)" if st["stage"] == led["limiting_stage"] else ""
            t.add_row(f"stage {st['stage']}{mark}", f"{st['layers']} layers, {format_bytes(st['weights_bytes'])}",
                      f"{st['kv_bytes_per_token']:,} KV B/token, {st['num_blocks']:,} blocks per GPU")


@commands.command("plan")
def plan_command(
    model: str | None = typer.Argument(None, help="Model directory, or org/name in the local Hugging Face cache."),
    device: str | None = typer.Option(
        None, "--device", help="gpu (default) or cpu: vLLM's CUDA or CPU build (cpu needs --cpu-kv-space)."),
    gpu_memory: str | None = typer.Option(None, "--gpu-memory", help="GPU memory total, e.g. 80GiB (default: NVML)."),
    cpu_kv_space: str | None = typer.Option(
        None, "--cpu-kv-space", help="vLLM CPU build: VLLM_CPU_KVCACHE_SPACE as a size, e.g. 1GiB (the KV budget)."),
    kv_cache_memory_bytes: str | None = typer.Option(
        None, "--kv-cache-memory-bytes", help="vLLM --kv-cache-memory-bytes: an explicit KV budget."),
    dtype: str | None = typer.Option(None, "--dtype", help="vLLM --dtype (auto, float16, bfloat16, float32)."),
    kv_cache_dtype: str | None = typer.Option(None, "--kv-cache-dtype", help="auto, float16, bfloat16, fp8, fp8_e4m3, fp8_e5m2."),
    max_model_len: int | None = typer.Option(None, "--max-model-len", help="Default: the model's max_position_embeddings."),
    gpu_memory_utilization: float | None = typer.Option(None, "--gpu-memory-utilization", help="Default 0.92."),
    max_num_seqs: int | None = typer.Option(None, "--max-num-seqs", help="Default: vLLM's per-device default."),
    max_num_batched_tokens: int | None = typer.Option(None, "--max-num-batched-tokens"),
    block_size: int | None = typer.Option(None, "--block-size", help="Default 16 (GPU), 128 (CPU)."),
    enforce_eager: bool = typer.Option(False, "--enforce-eager", help="No CUDA graphs (no graph memory)."),
    tensor_parallel_size: int | None = typer.Option(None, "--tensor-parallel-size", help="vLLM TP size (default 1)."),
    pipeline_parallel_size: int | None = typer.Option(None, "--pipeline-parallel-size", help="vLLM PP size (default 1)."),
    data_parallel_size: int | None = typer.Option(None, "--data-parallel-size", help="vLLM DP replicas (default 1)."),
    enable_expert_parallel: bool = typer.Option(False, "--enable-expert-parallel", help="MoE: whole experts per GPU."),
    gpus_per_node: int | None = typer.Option(None, "--gpus-per-node", help="GPUs in one machine (default 8)."),
    gpus: int | None = typer.Option(None, "--gpus", help="GPUs there are in all (default: NVML's count)."),
    requests: str | None = typer.Option(None, "--requests", help="Request lengths for the fragmentation table: 500,100,2000."),
    json_out: bool = typer.Option(False, "--json", help="Machine-readable output."),
    disaggregated: bool = typer.Option(False, "--disaggregated", help="A prefill and a decode instance's ledgers."),
    kv_tier: bool = typer.Option(False, "--kv-tier", help="Size a host-memory KV tier (docs/kv-tier.md)."),
    kv_offloading_size: str | None = typer.Option(None, "--kv-offloading-size", help="A tier to check: GiB or SIZE."),
    host_free: str | None = typer.Option(None, "--host-free", help="Host memory available (default: psutil)."),
    host_headroom: str | None = typer.Option(None, "--host-headroom", help="Host memory kept free (default 8GiB+)."),
    bench_json: Path | None = typer.Option(None, "--bench-json", help="A bench --json file: its prefix-cache hits."),
) -> None:
    """Work out vLLM's memory ledger: weights, KV cache per token, capacity, concurrency, and a verdict."""
    settings: dict[str, Any] = {
        "device": _device(device, gpu_memory, cpu_kv_space),
        "gpu_memory_bytes": _size(gpu_memory, "--gpu-memory"),
        "cpu_kvcache_space_bytes": _size(cpu_kv_space, "--cpu-kv-space"),
        "kv_cache_memory_bytes": _size(kv_cache_memory_bytes, "--kv-cache-memory-bytes"),
        "dtype": dtype, "kv_cache_dtype": kv_cache_dtype,
        "max_model_len": max_model_len, "gpu_memory_utilization": gpu_memory_utilization,
        "max_num_seqs": max_num_seqs, "max_num_batched_tokens": max_num_batched_tokens,
        "block_size": block_size, "enforce_eager": enforce_eager or None,
        "tensor_parallel_size": tensor_parallel_size, "pipeline_parallel_size": pipeline_parallel_size,
        "data_parallel_size": data_parallel_size, "enable_expert_parallel": enable_expert_parallel or None,
        "gpus_per_node": gpus_per_node, "gpus_available": gpus,
    }
    _check_flags(settings)
    lengths = parse_lengths(requests) if requests is not None else None
    tier, from_profile = TierOptions(kv_tier, kv_offloading_size, host_free, host_headroom, bench_json), model is None
    if model is None and lengths is None:
        model, settings = _from_profile(settings)
    result = run_plan(model, settings, lengths, disaggregated=disaggregated)
    add_kv_tier(result, tier, profile=state.profile, from_profile=from_profile, device=settings.get("device") or "gpu")
    if json_out:
        typer.echo(json.dumps(result, indent=2, default=str))
    else:
        render(result, Console())
        render_kv_tier(result, Console())
    if result["ledger"] and result["ledger"]["verdict"] == Verdict.DOES_NOT_FIT.value:
        raise typer.Exit(1)


def _check_flags(settings: dict[str, Any]) -> None:
    """Check each value given on the command line under its flag's name, so an error says
    ``--gpu-memory-utilization: must be in (0, 1]``, not the setting's internal name.

    Raises:
        PlanArgumentError: a bad value (exit code 3).
    """
    settings_from_dict({"--" + k.replace("_", "-"): v for k, v in settings.items()
                        if v is not None and k in _FLAG_CHECKED})


#: Settings whose command-line flag is the setting's name with dashes (sizes are checked by ``_size``).
_FLAG_CHECKED = frozenset({"max_model_len", "gpu_memory_utilization", "max_num_seqs", "max_num_batched_tokens",
                           "block_size", "tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size",
                           "gpus_per_node", "dtype", "kv_cache_dtype"})


def _device(device: str | None, gpu_memory: str | None, cpu_kv_space: str | None) -> str | None:
    """``--device`` checked against the build-specific sizes: ``gpu``, ``cpu`` or None (implied: ``cpu`` when
    ``--cpu-kv-space`` is given, else ``gpu``).

    Raises:
        PlanArgumentError: not gpu/cpu, ``--device gpu`` with ``--cpu-kv-space``, or ``--device cpu`` with
            ``--gpu-memory`` (exit code 3).
    """
    if device is None:
        return None
    d = device.strip().lower()
    if d not in ("gpu", "cpu"):
        raise PlanArgumentError(f"--device: must be gpu or cpu, got {device!r}")
    if d == "gpu" and cpu_kv_space is not None:
        raise PlanArgumentError("--cpu-kv-space is the CPU build's KV budget", hint="drop it, or use --device cpu")
    if d == "cpu" and gpu_memory is not None:
        raise PlanArgumentError("--gpu-memory is the GPU's size; the CPU build's KV budget is --cpu-kv-space",
                                hint="use --device cpu --cpu-kv-space SIZE (VLLM_CPU_KVCACHE_SPACE)")
    return d


def _size(text: str | None, option: str) -> int | None:
    """A size flag in bytes (``conduit.units.parse_size``: the grammar of ``conduit wait --vram-free``), or None.

    Raises:
        BadArguments: not a size; a bare number gets the "did you mean 80GiB?" hint (exit code 3), except for
            an option named ``--...-bytes`` (vLLM's ``--kv-cache-memory-bytes`` takes bytes).
    """
    return None if text is None else parse_size(text, option=option, bare_bytes=option.endswith("-bytes"))


def _from_profile(flags: dict[str, Any]) -> tuple[str | None, dict[str, Any]]:
    """With no MODEL, plan the profile's ``[vllm]`` model with its settings, the command-line flags winning.
    Without a profile or a ``[vllm]`` table, returns (None, flags) and run_plan says what to give."""
    from conduit.daemon.config.profile import load_profile  # lazy: start-up speed of every other command

    try:
        loaded = load_profile(state.profile)
    except ConduitError:
        return None, flags
    if loaded.model.vllm is None:
        return None, flags
    merged = settings_from_vllm_section(loaded.model.vllm)
    merged.update({k: v for k, v in flags.items() if v is not None})
    return str(loaded.model.vllm["model"]), merged

