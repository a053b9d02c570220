"""The KV tier in words, for ``conduit status``, ``conduit watch`` and ``conduit doctor --live``: the ``kv_tier``
part of the vLLM metrics snapshot (``conduit.daemon.vllm.kvview.kv_tier_view``; docs/kv-tier.md)."""

from __future__ import annotations

from typing import Any

from conduit.daemon.vllm.kvview import SHORT_IDLE_S


def _n(v: float | None) -> str:
    return "-" if v is None else f"{v:,.0f}"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.0%}"


def kv_tier_lines(kv: dict[str, Any] | None) -> list[str]:
    """Up to three lines (no indent): the tier's hits and the cached prompt tokens; the idle-before-evict summary;
    the advice. Empty for None (a vLLM without these metrics)."""
    if not kv:
        return []
    if kv.get("tier_active"):
        head = (f"KV tier: external prefix-cache hits {_pct(kv.get('external_hit_rate'))} "
                f"({_n(kv.get('external_hits_total'))} of {_n(kv.get('external_queries_total'))} tokens)")
    else:
        head = "KV tier: none queried (no external prefix-cache queries)"
    if kv.get("prompt_tokens_cached_total") is not None:
        head += (f", cached prompt tokens {_n(kv['prompt_tokens_cached_total'])}"
                 f" ({_pct(kv.get('cached_fraction'))} of prompt tokens)")
    src = kv.get("cached_by_source")
    if src:
        head += ", by source " + ", ".join(f"{k} {_n(v)}" for k, v in src.items())
    lines = [head]
    idle = kv.get("idle_before_evict")
    if idle:
        lines.append(f"KV block evictions: {_n(idle['evictions'])} sampled, idle before eviction p50 "
                     f"{idle['p50_s']:.2f} s / p90 {idle['p90_s']:.2f} s, {_pct(idle['short_idle_fraction'])} "
                     f"under {SHORT_IDLE_S:g} s")
    if kv.get("advice"):
        lines.append(str(kv["advice"]))
    return lines
