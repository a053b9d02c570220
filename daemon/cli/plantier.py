"""``conduit plan --kv-tier``: the host KV tier beside the memory ledger (``conduit.daemon.plan.hosttier``).

The host's memory comes from psutil through ``conduit.daemon.agent.gpu.host_snapshot`` (``--host-free`` replaces
the available figure, as ``--gpu-memory`` replaces NVML's); prefix caching, ``kv_offloading_size`` and the
backend from the profile's ``[vllm]`` when the plan is of the profile's model (no MODEL argument); a bench run's
prefix-cache hit rate from ``--bench-json`` (``conduit bench --dataset agent --json``'s file, or any bench JSON
with a top-level ``prefix_cache_hit_rate``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from conduit.daemon.plan.errors import PlanArgumentError
from conduit.daemon.plan.hosttier import TierInputs, plan_host_tier
from conduit.errors import ConduitError
from conduit.units import GiB, format_bytes, parse_size


@dataclass(frozen=True)
class TierOptions:
    """``conduit plan``'s KV tier options, as typed (sizes unparsed)."""

    kv_tier: bool = False
    kv_offloading_size: str | None = None
    host_free: str | None = None
    host_headroom: str | None = None
    bench_json: Path | None = None

    @property
    def wanted(self) -> bool:
        """Any of them given."""
        return self.kv_tier or any(v is not None for v in (self.kv_offloading_size, self.host_free,
                                                           self.host_headroom, self.bench_json))


def offloading_bytes(text: str) -> int:
    """``--kv-offloading-size``: a bare number is GiB (vLLM's unit for the flag), else a size (``64GiB``).

    Raises:
        BadArguments: not a positive number of GiB nor a size.
    """
    try:
        gib = float(text)
    except ValueError:
        return parse_size(text, option="--kv-offloading-size")
    if not gib > 0:
        raise PlanArgumentError(f"--kv-offloading-size: must be a positive number of GiB, got {text!r}")
    return int(gib * GiB)


def bench_hit_rate(path: Path) -> tuple[float | None, float | None]:
    """``(prefix_cache_hit_rate, prefix_cache_query_tokens)`` of a bench JSON file.

    Raises:
        PlanArgumentError: unreadable, not JSON, or without a ``prefix_cache_hit_rate``.
    """
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise PlanArgumentError(f"--bench-json {path}: cannot read it: {exc}",
                                hint="give the file of `conduit bench --dataset agent --json FILE`") from None
    if not isinstance(doc, dict) or "prefix_cache_hit_rate" not in doc:
        raise PlanArgumentError(f"--bench-json {path}: no prefix_cache_hit_rate in it",
                                hint="give the file of `conduit bench --dataset agent --json FILE`")
    rate, tokens = doc.get("prefix_cache_hit_rate"), doc.get("prefix_cache_query_tokens")
    return (float(rate) if isinstance(rate, (int, float)) else None,
            float(tokens) if isinstance(tokens, (int, float)) else None)


def _profile_keys(profile: str | Path | None) -> dict[str, Any]:
    from conduit.daemon.config.profile import load_profile  # lazy: start-up speed of every other command

    try:
        v = load_profile(profile).vllm
    except ConduitError:
        return {}
    if v is None:
        return {}
    return {"prefix_caching": v.enable_prefix_caching, "backend": v.kv_offloading_backend,
            "requested": None if v.kv_offloading_size is None else int(v.kv_offloading_size * GiB)}


def add_kv_tier(result: dict[str, Any], o: TierOptions, *, profile: str | Path | None, from_profile: bool,
                device: str) -> None:
    """Put ``result["kv_tier"]`` (``HostTier.to_dict()``) into ``run_plan``'s result when asked for (or when the
    profile's ``[vllm]`` has ``kv_offloading_size``) and a ledger was made.

    Raises:
        PlanArgumentError / BadArguments: a bad size or bench file.
    """
    keys = _profile_keys(profile) if from_profile else {}
    led = result.get("ledger")
    if not led or not (o.wanted or keys.get("requested")):
        return
    from conduit.daemon.agent.gpu import host_snapshot

    host = host_snapshot()
    available = parse_size(o.host_free, option="--host-free") if o.host_free else host.available_bytes
    rate, tokens = bench_hit_rate(o.bench_json) if o.bench_json else (None, None)
    per_replica = led["tensor_parallel_size"] * led["pipeline_parallel_size"]
    tier = plan_host_tier(TierInputs(
        device_kv_bytes=max(0, led["kv_budget_bytes"]) * per_replica,
        kv_bytes_per_token=led["kv_bytes_per_token"] * per_replica,
        host_total_bytes=max(host.total_bytes, available), host_available_bytes=available,
        data_parallel_size=led["data_parallel_size"],
        requested_bytes=offloading_bytes(o.kv_offloading_size) if o.kv_offloading_size else keys.get("requested"),
        headroom_bytes=parse_size(o.host_headroom, option="--host-headroom") if o.host_headroom else None,
        prefix_caching=keys.get("prefix_caching"), bench_hit_rate=rate, bench_query_tokens=tokens,
        device=led.get("device") or device, backend=keys.get("backend")))
    result["kv_tier"] = {**tier.to_dict(), "host_available_bytes": available, "host_total_bytes": host.total_bytes}


def render_kv_tier(result: dict[str, Any], console: Console) -> None:
    """Print the ``kv_tier`` part of the result, if any, as lines."""
    t = result.get("kv_tier")
    if not t:
        return
    console.print(f"[bold]KV tier in host memory[/bold] (--kv-offloading-size): at least the device KV budget "
                  f"{format_bytes(t['min_bytes'])} ({t['device_tokens']:,} tokens), at most "
                  f"{format_bytes(t['max_bytes'])} (available {format_bytes(t['host_available_bytes'])} less "
                  f"{format_bytes(t['headroom_bytes'])} headroom)", highlight=False)
    if t["verdict"] == "sized":
        console.print(f"[green]suggested: kv_offloading_size = {t['suggested_gib']:g}  "
                      f"({t['suggested_tokens']:,} tokens)[/green]", highlight=False)
    else:
        word = "will not help" if t["verdict"] == "will_not_help" else "no room"
        for reason in t["reasons"]:
            console.print(f"[yellow]KV tier: {word}: {reason}[/yellow]", highlight=False)
    for note in t["notes"]:
        console.print(f"  note: {note}", highlight=False, markup=False)
