"""What vLLM's ``/metrics`` says about a KV tier: external prefix-cache hits, cached prompt tokens, and whether
blocks leave the device after short idle times (the case a host tier serves). docs/kv-tier.md.

Metric names are vLLM 0.32's (``PrometheusStatLogger`` in ``vllm/v1/metrics/loggers.py``), all in tokens:
``vllm:external_prefix_cache_queries`` / ``vllm:external_prefix_cache_hits`` (counted by a KV connector such as
the offloading tier: the tokens it was asked for and the tokens it had), ``vllm:prompt_tokens_cached`` (local +
external), ``vllm:prompt_tokens_cached_by_source{source=device|host|disk|p2p|external_unspecified}``; and, only
with ``--kv-cache-metrics`` (``[vllm].kv_cache_metrics``), the sampled histogram
``vllm:kv_block_idle_before_evict_seconds`` (idle time of a block before the device cache evicted it).

The verdict: when at least ``MIN_EVICTIONS`` sampled evictions were seen and at least half of them hit blocks
idle for under ``SHORT_IDLE_S`` seconds (an agent's think time between two turns), the device cache is too small
for the traffic's reuse distance and "a tier would help" (or, with a tier, "the tier is catching them").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol


class Histogram(Protocol):
    """What is read of ``conduit.daemon.vllm.metrics.Histogram`` (not imported: ``metrics`` imports this module)."""

    @property
    def buckets(self) -> list[tuple[float, float]]: ...
    @property
    def count(self) -> float: ...
    def quantile(self, q: float) -> float | None: ...


class Scrape(Protocol):
    """What is read of ``conduit.daemon.vllm.metrics.Scrape``."""

    @property
    def counters(self) -> Mapping[str, float | None]: ...
    @property
    def histograms(self) -> Mapping[str, Histogram]: ...
    @property
    def cached_by_source(self) -> Mapping[str, float]: ...

#: Blocks evicted after being idle less than this (seconds) would have been reused by a next turn.
SHORT_IDLE_S = 60.0
#: Sampled evictions needed before a verdict (``--kv-cache-metrics-sample`` defaults to 1 %).
MIN_EVICTIONS = 8


def _ratio(num: float | None, den: float | None) -> float | None:
    return None if num is None or den is None or den <= 0 else round(num / den, 4)


def idle_summary(h: Histogram) -> dict[str, Any] | None:
    """``{"evictions", "p50_s", "p90_s", "short_idle_fraction"}`` of the idle-before-evict histogram ``h``
    (seconds; ``short_idle_fraction``: evictions with idle <= ``SHORT_IDLE_S``, read at the largest bucket bound
    not above it, 0..1); None without observations."""
    if h.count <= 0:
        return None
    under = max((c for le, c in h.buckets if le <= SHORT_IDLE_S), default=0.0)
    p50, p90 = h.quantile(0.5), h.quantile(0.9)
    return {"evictions": h.count, "p50_s": None if p50 is None else round(p50, 4),
            "p90_s": None if p90 is None else round(p90, 4), "short_idle_fraction": round(under / h.count, 4)}


def verdict(idle: dict[str, Any] | None, tier_active: bool) -> tuple[str, str | None]:
    """``(verdict, sentence)``: ``would_help`` / ``tier_catching`` (short idle evictions, without / with a tier),
    ``not_needed`` (evicted blocks had long been idle), ``unknown`` (no histogram, or too few evictions)."""
    if idle is None or idle["evictions"] < MIN_EVICTIONS:
        return "unknown", None
    frac = idle["short_idle_fraction"]
    if frac < 0.5:
        return "not_needed", None
    said = (f"{frac:.0%} of {idle['evictions']:.0f} sampled KV block evictions came after under {SHORT_IDLE_S:.0f} s "
            f"idle (p50 {idle['p50_s']:.2f} s)")
    if tier_active:
        return "tier_catching", f"{said}: the KV tier keeps them for the next turn"
    return "would_help", (f"{said}: a tier would help (a next turn after a pause recomputes them); set "
                          "[vllm].kv_offloading_size (`conduit plan --kv-tier` sizes it)")


def kv_tier_view(base: Scrape, cur: Scrape) -> dict[str, Any] | None:
    """The ``kv_tier`` part of ``MetricsTracker.update``'s snapshot, from the window's first scrape ``base`` and
    the newest ``cur``; None when vLLM exports none of these metrics (releases before them).

    Keys: ``external_queries_total`` / ``external_hits_total`` (tokens), ``external_hit_rate`` (since start, 0..1),
    ``external_hit_rate_recent`` (over the window), ``prompt_tokens_cached_total`` (tokens),
    ``cached_fraction`` (cached / all prompt tokens since start), ``cached_by_source`` (``{source: tokens}``,
    non-zero ones), ``tier_active`` (the connector was queried), ``idle_before_evict`` (``idle_summary``),
    ``verdict`` and ``advice`` (``verdict``).
    """
    c = cur.counters
    hist = cur.histograms.get("idle_before_evict")
    if c.get("external_prefix_queries") is None and c.get("prompt_tokens_cached") is None and hist is None:
        return None
    recent = None
    if base is not cur:
        b = base.counters
        if None not in (b.get("external_prefix_queries"), b.get("external_prefix_hits"),
                        c.get("external_prefix_queries"), c.get("external_prefix_hits")):
            recent = _ratio(c["external_prefix_hits"] - b["external_prefix_hits"],  # type: ignore[operator]
                            c["external_prefix_queries"] - b["external_prefix_queries"])  # type: ignore[operator]
    active = bool(c.get("external_prefix_queries"))
    idle = idle_summary(hist) if hist is not None else None
    word, advice = verdict(idle, active)
    return {
        "external_queries_total": c.get("external_prefix_queries"),
        "external_hits_total": c.get("external_prefix_hits"),
        "external_hit_rate": _ratio(c.get("external_prefix_hits"), c.get("external_prefix_queries")),
        "external_hit_rate_recent": recent,
        "prompt_tokens_cached_total": c.get("prompt_tokens_cached"),
        "cached_fraction": _ratio(c.get("prompt_tokens_cached"), c.get("prompt_tokens")),
        "cached_by_source": {k: v for k, v in sorted(cur.cached_by_source.items()) if v} or None,
        "tier_active": active,
        "idle_before_evict": idle,
        "verdict": word,
        "advice": advice,
    }
