"""Live numbers from vLLM's ``/metrics`` (Prometheus text, parsed with ``prometheus_client.parser``).

Metric names are vLLM 0.32's (docs/formats/vllm-and-nvml.md): gauges ``vllm:num_requests_running``,
``vllm:num_requests_waiting``, ``vllm:kv_cache_usage_perc`` (a fraction 0..1 despite the name); counters
``vllm:num_preemptions``, ``vllm:prefix_cache_queries``, ``vllm:prefix_cache_hits`` (tokens),
``vllm:prompt_tokens``, ``vllm:generation_tokens`` (exposed with ``_total``); histograms
``vllm:time_to_first_token_seconds`` and ``vllm:inter_token_latency_seconds``; the KV tier's counters and
histogram (``KV_HISTOGRAMS``, ``BY_SOURCE``; read by ``kvview``). Samples with different labels
(``model_name``, ``engine``) are summed.

``MetricsTracker`` keeps a short history of scrapes so that it can report rates (tokens per second from counter
deltas), latency over a recent window (histogram bucket deltas) and a prefix-cache hit rate that *stays* low
while traffic flows. A counter that goes down means vLLM restarted: the history is dropped.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from conduit.daemon.vllm.kvview import kv_tier_view

GAUGES = {
    "running": "vllm:num_requests_running",
    "waiting": "vllm:num_requests_waiting",
    "kv_cache_usage": "vllm:kv_cache_usage_perc",
}
COUNTERS = {
    "preemptions": "vllm:num_preemptions",
    "prefix_queries": "vllm:prefix_cache_queries",
    "prefix_hits": "vllm:prefix_cache_hits",
    "prompt_tokens": "vllm:prompt_tokens",
    "generation_tokens": "vllm:generation_tokens",
    # the KV tier (conduit.daemon.vllm.kvview; vllm/v1/metrics/loggers.py): tokens, like the local two
    "external_prefix_queries": "vllm:external_prefix_cache_queries",
    "external_prefix_hits": "vllm:external_prefix_cache_hits",
    "prompt_tokens_cached": "vllm:prompt_tokens_cached",
}
HISTOGRAMS = {
    "ttft": "vllm:time_to_first_token_seconds",
    "itl": "vllm:inter_token_latency_seconds",
}
#: Read like ``HISTOGRAMS`` but summarised by ``kvview`` (only with vLLM's ``--kv-cache-metrics``).
KV_HISTOGRAMS = {"idle_before_evict": "vllm:kv_block_idle_before_evict_seconds"}
#: ``vllm:prompt_tokens_cached_by_source{source=...}``: cached prompt tokens by the tier that supplied them.
BY_SOURCE = "vllm:prompt_tokens_cached_by_source"

#: Below this prefix-cache hit rate (over the window, with traffic) a warning is raised.
LOW_HIT_RATE = 0.30


@dataclass
class Histogram:
    """Cumulative bucket counts: ``buckets`` is ``[(upper_bound_s, cumulative_count), ...]`` sorted, ending
    with ``(inf, count)``; ``sum_s`` is the sum of observations in seconds."""

    buckets: list[tuple[float, float]] = field(default_factory=list)
    sum_s: float = 0.0
    count: float = 0.0

    def minus(self, older: Histogram) -> Histogram:
        """The observations made since ``older`` (bucket-wise difference)."""
        prev = dict(older.buckets)
        return Histogram(
            [(le, c - prev.get(le, 0.0)) for le, c in self.buckets], self.sum_s - older.sum_s, self.count - older.count
        )

    def quantile(self, q: float) -> float | None:
        """Prometheus ``histogram_quantile``: linear interpolation inside the bucket holding rank ``q*count``.

        Returns seconds, or None without observations. A rank in the ``+Inf`` bucket returns the largest finite
        bound (what Prometheus does too).
        """
        if self.count <= 0 or not self.buckets:
            return None
        rank = q * self.count
        lower_le, lower_c = 0.0, 0.0
        for le, c in self.buckets:
            if c >= rank:
                if math.isinf(le):
                    return lower_le
                if c == lower_c:
                    return le
                return lower_le + (le - lower_le) * (rank - lower_c) / (c - lower_c)
            lower_le, lower_c = le, c
        return lower_le

    def summary_ms(self) -> dict[str, float | None]:
        """``{"count", "mean_ms", "p50_ms", "p95_ms"}``; the latencies None without observations."""

        def ms(x: float | None) -> float | None:
            return None if x is None else round(x * 1000.0, 3)

        mean = self.sum_s / self.count if self.count > 0 else None
        return {
            "count": self.count,
            "mean_ms": ms(mean),
            "p50_ms": ms(self.quantile(0.50)),
            "p95_ms": ms(self.quantile(0.95)),
        }


@dataclass
class Scrape:
    """One parsed ``/metrics`` answer at time ``t`` (monotonic seconds).

    ``gauges``/``counters`` map the short names of ``GAUGES``/``COUNTERS`` to values summed over label sets
    (None when vLLM does not expose the metric); ``histograms`` maps ``ttft``/``itl`` to a ``Histogram``.
    """

    t: float
    gauges: dict[str, float | None]
    counters: dict[str, float | None]
    histograms: dict[str, Histogram]
    cached_by_source: dict[str, float] = field(default_factory=dict)  # BY_SOURCE's ``source`` label -> tokens


def parse(text: str, t: float = 0.0) -> Scrape:
    """Parse Prometheus exposition text from vLLM into a ``Scrape``.

    Raises ValueError when the text is not Prometheus exposition format (prometheus_client's own error).
    """
    gauges: dict[str, float | None] = dict.fromkeys(GAUGES)
    counters: dict[str, float | None] = dict.fromkeys(COUNTERS)
    hist_acc: dict[str, dict[str, Any]] = {}
    by_gauge = {v: k for k, v in GAUGES.items()}
    by_counter = {v: k for k, v in COUNTERS.items()}
    by_hist = {v: k for k, v in (HISTOGRAMS | KV_HISTOGRAMS).items()}
    by_source: dict[str, float] = {}
    # Match by *sample* name: vLLM writes ``# TYPE vllm:prompt_tokens_total counter`` while other exporters
    # write ``# TYPE vllm:prompt_tokens counter``; the parser groups the two layouts into different families.
    for fam in text_string_to_metric_families(text):
        for smp in fam.samples:
            n = smp.name
            if n in by_gauge:
                k = by_gauge[n]
                gauges[k] = (gauges[k] or 0.0) + smp.value
            elif n == BY_SOURCE + "_total" and "source" in smp.labels:
                by_source[smp.labels["source"]] = by_source.get(smp.labels["source"], 0.0) + smp.value
            elif n.endswith("_total") and n[:-6] in by_counter:
                k = by_counter[n[:-6]]
                counters[k] = (counters[k] or 0.0) + smp.value
            else:
                base, _, part = n.rpartition("_")
                if base in by_hist and part in ("bucket", "sum", "count"):
                    acc = hist_acc.setdefault(by_hist[base], {"buckets": {}, "sum": 0.0, "count": 0.0})
                    if part == "bucket":
                        le = float(smp.labels["le"])
                        acc["buckets"][le] = acc["buckets"].get(le, 0.0) + smp.value
                    else:
                        acc[part] += smp.value
    hists = {
        k: Histogram(sorted(a["buckets"].items()), a["sum"], a["count"]) for k, a in hist_acc.items()
    }
    return Scrape(t, gauges, counters, hists, by_source)


class MetricsTracker:
    """Turns successive scrapes into the live-numbers snapshot.

    Args:
        window_s: how far back the recent latency and the prefix-cache hit rate look (seconds).
        min_prefix_query_tokens: prompt tokens the window must hold before a low hit rate is worth a warning.

    Usage::

        tracker = MetricsTracker()
        snap = tracker.update(await client.get(base + "/metrics").text, time.monotonic())
    """

    def __init__(self, window_s: float = 60.0, min_prefix_query_tokens: float = 256.0) -> None:
        self.window_s = window_s
        self.min_prefix_query_tokens = min_prefix_query_tokens
        self._hist: deque[Scrape] = deque()
        self.last: dict[str, Any] | None = None

    def reset(self) -> None:
        """Forget the history (a new vLLM process)."""
        self._hist.clear()
        self.last = None

    def update(self, text: str, t: float) -> dict[str, Any]:
        """Add the scrape of ``text`` taken at monotonic time ``t`` (seconds); return the snapshot.

        Snapshot keys (all JSON-able; None where vLLM does not expose the number or there is no traffic yet):
        ``kv_cache_usage_fraction`` (0..1), ``requests_running``, ``requests_waiting``, ``preemptions_total``,
        ``prompt_tokens_total``, ``generation_tokens_total``, ``prompt_tokens_per_s``,
        ``generation_tokens_per_s`` (since the previous scrape), ``prefix_cache_hit_rate`` (since start),
        ``prefix_cache_hit_rate_recent`` (over the window), ``ttft``/``itl`` (since start) and
        ``ttft_recent``/``itl_recent`` (over the window) each ``{count, mean_ms, p50_ms, p95_ms}``,
        ``warnings`` (list of sentences), and ``kv_tier`` (``kvview.kv_tier_view``: external prefix-cache hits,
        cached prompt tokens, the idle-before-evict summary and whether a tier would help; None on a vLLM without
        those metrics).

        Raises ValueError on text that is not Prometheus exposition format.
        """
        cur = parse(text, t)
        if self._hist and _went_down(self._hist[-1], cur):
            self._hist.clear()
        prev = self._hist[-1] if self._hist else None
        self._hist.append(cur)
        while len(self._hist) > 2 and t - self._hist[1].t >= self.window_s:
            self._hist.popleft()
        base = self._hist[0]

        c, g = cur.counters, cur.gauges
        snap: dict[str, Any] = {
            "kv_cache_usage_fraction": g["kv_cache_usage"],
            "requests_running": g["running"],
            "requests_waiting": g["waiting"],
            "preemptions_total": c["preemptions"],
            "prompt_tokens_total": c["prompt_tokens"],
            "generation_tokens_total": c["generation_tokens"],
            "prompt_tokens_per_s": _rate(prev, cur, "prompt_tokens"),
            "generation_tokens_per_s": _rate(prev, cur, "generation_tokens"),
            "prefix_cache_hit_rate": _ratio(c["prefix_hits"], c["prefix_queries"]),
            "prefix_cache_hit_rate_recent": None,
            "window_s": self.window_s,
            "warnings": [],
            "kv_tier": kv_tier_view(base, cur),
        }
        for key in HISTOGRAMS:
            h = cur.histograms.get(key)
            snap[key] = h.summary_ms() if h else None
            hb = base.histograms.get(key)
            snap[f"{key}_recent"] = h.minus(hb).summary_ms() if (h and hb and base is not cur) else None

        if base is not cur:
            dq = _delta(base, cur, "prefix_queries")
            dh = _delta(base, cur, "prefix_hits")
            if dq is not None and dh is not None and dq > 0:
                rate = dh / dq
                snap["prefix_cache_hit_rate_recent"] = round(rate, 4)
                if rate < LOW_HIT_RATE and dq >= self.min_prefix_query_tokens:
                    snap["warnings"].append(
                        f"prefix-cache hit rate {rate:.0%} over the last {t - base.t:.0f} s "
                        f"({dh:.0f} of {dq:.0f} prompt tokens) is under {LOW_HIT_RATE:.0%}: requests probably "
                        "do not share a byte-identical system prompt (check timestamps or ids in it)"
                    )
        self.last = snap
        return snap


def _went_down(a: Scrape, b: Scrape) -> bool:
    for k in COUNTERS:
        x, y = a.counters[k], b.counters[k]
        if x is not None and y is not None and y < x:
            return True
    return False


def _delta(a: Scrape, b: Scrape, key: str) -> float | None:
    x, y = a.counters[key], b.counters[key]
    return None if x is None or y is None else y - x


def _rate(a: Scrape | None, b: Scrape, key: str) -> float | None:
    if a is None or b.t <= a.t:
        return None
    d = _delta(a, b, key)
    return None if d is None else round(d / (b.t - a.t), 3)


def _ratio(num: float | None, den: float | None) -> float | None:
    if num is None or den is None or den <= 0:
        return None
    return round(num / den, 4)

