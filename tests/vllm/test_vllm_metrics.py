"""Live numbers from /metrics: a real vLLM 0.32 scrape (tests/data) and constructed sequences of scrapes."""

from __future__ import annotations

import pytest
from helpers.paths import TESTS

from conduit.daemon.vllm.metrics import Histogram, MetricsTracker, parse

REAL = (TESTS / "data" / "vllm-0.32-metrics.txt").read_text()


def test_real_scrape_after_one_request() -> None:
    snap = MetricsTracker().update(REAL, 0.0)
    assert snap["prompt_tokens_total"] == 19 and snap["generation_tokens_total"] == 8
    assert snap["kv_cache_usage_fraction"] == 0.0
    assert snap["requests_running"] == 0 and snap["requests_waiting"] == 0
    assert snap["preemptions_total"] == 0
    assert snap["prefix_cache_hit_rate"] == 0.0
    assert snap["ttft"]["count"] == 1 and 40 < snap["ttft"]["mean_ms"] < 60
    assert snap["ttft"]["p50_ms"] is not None and snap["ttft"]["p50_ms"] <= snap["ttft"]["p95_ms"]
    assert snap["itl"]["count"] == 7
    assert snap["prompt_tokens_per_s"] is None  # one scrape: no rate yet


def _text(prompt: float, gen: float, queries: float, hits: float, ttft: list[tuple[str, float]],
          engines: int = 1) -> str:
    """Prometheus text as vLLM lays it out: each family's TYPE line, then its samples for every engine."""
    labs = [f'engine="{e}",model_name="m"' for e in range(engines)]
    out = []
    for name, kind, value in [("prompt_tokens", "counter", prompt), ("generation_tokens", "counter", gen),
                              ("prefix_cache_queries", "counter", queries), ("prefix_cache_hits", "counter", hits),
                              ("num_requests_running", "gauge", 2)]:
        out.append(f"# TYPE vllm:{name} {kind}")
        suffix = "_total" if kind == "counter" else ""
        out += [f"vllm:{name}{suffix}{{{lab}}} {value}" for lab in labs]
    out.append("# TYPE vllm:time_to_first_token_seconds histogram")
    for lab in labs:
        total = 0.0
        for le, c in ttft:
            out.append(f'vllm:time_to_first_token_seconds_bucket{{{lab},le="{le}"}} {c}')
            total = c
        out += [f"vllm:time_to_first_token_seconds_count{{{lab}}} {total}",
                f"vllm:time_to_first_token_seconds_sum{{{lab}}} {0.1 * total}"]
    return "\n".join(out) + "\n"


def test_rates_from_counter_deltas() -> None:
    t = MetricsTracker()
    t.update(_text(100, 50, 0, 0, []), 10.0)
    snap = t.update(_text(600, 250, 0, 0, []), 15.0)
    assert snap["prompt_tokens_per_s"] == 100.0 and snap["generation_tokens_per_s"] == 40.0


def test_labels_summed_across_engines() -> None:
    snap = MetricsTracker().update(_text(10, 5, 0, 0, [("0.1", 1), ("+Inf", 1)], engines=2), 0.0)
    assert snap["prompt_tokens_total"] == 20 and snap["requests_running"] == 4 and snap["ttft"]["count"] == 2


def test_counter_reset_means_a_new_server() -> None:
    t = MetricsTracker()
    t.update(_text(1000, 500, 0, 0, []), 0.0)
    snap = t.update(_text(10, 5, 0, 0, []), 5.0)
    assert snap["prompt_tokens_per_s"] is None  # no negative rate across a restart


def test_low_prefix_hit_rate_warns_only_while_traffic_flows() -> None:
    t = MetricsTracker(window_s=60, min_prefix_query_tokens=256)
    t.update(_text(0, 0, 0, 0, []), 0.0)
    snap = t.update(_text(1000, 0, 1000, 100, []), 10.0)
    assert snap["prefix_cache_hit_rate_recent"] == 0.1
    assert len(snap["warnings"]) == 1 and "10%" in snap["warnings"][0] and "system prompt" in snap["warnings"][0]
    # traffic stops for longer than the window: the old traffic leaves the window, and the warning goes
    t.update(_text(1000, 0, 1000, 100, []), 80.0)
    snap = t.update(_text(1000, 0, 1000, 100, []), 150.0)
    assert snap["warnings"] == []


def test_good_hit_rate_or_little_traffic_gives_no_warning() -> None:
    t = MetricsTracker(min_prefix_query_tokens=256)
    t.update(_text(0, 0, 0, 0, []), 0.0)
    assert t.update(_text(0, 0, 1000, 800, []), 5.0)["warnings"] == []
    t2 = MetricsTracker(min_prefix_query_tokens=256)
    t2.update(_text(0, 0, 0, 0, []), 0.0)
    assert t2.update(_text(0, 0, 100, 0, []), 5.0)["warnings"] == []


def test_recent_latency_from_bucket_deltas() -> None:
    t = MetricsTracker(window_s=60)
    t.update(_text(0, 0, 0, 0, [("0.1", 100), ("1.0", 100), ("+Inf", 100)]), 0.0)
    snap = t.update(_text(0, 0, 0, 0, [("0.1", 100), ("1.0", 110), ("+Inf", 110)]), 5.0)
    assert snap["ttft"]["count"] == 110
    recent = snap["ttft_recent"]
    assert recent["count"] == 10
    assert 100 < recent["p50_ms"] <= 1000  # the 10 new observations all fell in (0.1, 1.0]


@pytest.mark.parametrize(
    "q, expect",
    [(0.5, 0.5), (0.95, 0.95), (0.25, 0.25)],
)
def test_quantile_interpolates_inside_the_bucket(q: float, expect: float) -> None:
    h = Histogram([(1.0, 100.0), (float("inf"), 100.0)], 50.0, 100.0)
    assert h.quantile(q) == pytest.approx(expect)


def test_quantile_in_inf_bucket_returns_largest_bound_and_empty_is_none() -> None:
    assert Histogram([(1.0, 0.0), (float("inf"), 10.0)], 50.0, 10.0).quantile(0.5) == 1.0
    assert Histogram([], 0.0, 0.0).quantile(0.5) is None
    assert Histogram([], 0.0, 0.0).summary_ms()["mean_ms"] is None


def test_missing_metrics_are_none_and_bad_text_raises() -> None:
    s = parse("# nothing\n")
    assert s.gauges["kv_cache_usage"] is None and s.counters["prompt_tokens"] is None
    with pytest.raises(ValueError):
        parse("this is { not prometheus\n")
