"""Does the server agree with what the client saw? Its ``/metrics`` before and after each level, and the
client's own CPU, decide whether a level's numbers can carry advice.

vLLM exposes Prometheus histograms ``vllm:time_to_first_token_seconds`` and ``vllm:inter_token_latency_seconds``
(``vllm:time_per_output_token_seconds`` in older releases) and the counter ``vllm:generation_tokens``
(``docs/formats/vllm-and-nvml.md``; parsed by ``conduit.daemon.vllm.metrics``). The difference of two
scrapes around a level covers that level's requests (and any other traffic). A level is *marked* when:

- bursts: the client's mean TPOT is under half the server's mean ITL (and that ITL is at least 0.5 ms): the
  server produced tokens at a steady pace, but they reached the client in clumps (a proxy buffering the
  stream, or a server that sends whole answers at once), so client TPOT/ITL measure the transport;
- other traffic: the server saw over 10 % (and at least 2) more requests than the client sent, so its
  numbers, and the level's share of the server, are not the client's;
- client-bound: the client's event-loop thread was busy for at least 90 % of the level's wall time: the
  client, not the server, may have set the pace. A level shorter than 0.5 s is not judged: its few
  milliseconds of start-up work (or requests refused at once) make the ratio noise, not a finding.

A server without ``/metrics`` (not a vLLM) is checked on the client's CPU alone.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from conduit.daemon.bench.stats import LevelStats
from conduit.daemon.vllm.metrics import Histogram, parse

LEGACY_TPOT = "vllm:time_per_output_token_seconds"
BURST_RATIO = 0.5
BURST_MIN_ITL_S = 0.0005
OTHER_TRAFFIC = 0.10
CLIENT_BUSY = 0.90
CLIENT_MIN_WALL_S = 0.5


@dataclass(frozen=True)
class ServerSample:
    """One scrape: TTFT and ITL histograms (None when absent) and generated tokens so far (None: absent)."""

    ttft: Histogram | None
    itl: Histogram | None
    generation_tokens: float | None


def _legacy_tpot(text: str) -> Histogram | None:
    """``vllm:time_per_output_token_seconds`` summed over label sets, or None when the text has none."""
    buckets: dict[float, float] = {}
    total = {"sum": 0.0, "count": 0.0}
    for fam in text_string_to_metric_families(text):
        for smp in fam.samples:
            base, _, part = smp.name.rpartition("_")
            if base != LEGACY_TPOT:
                continue
            if part == "bucket":
                le = float(smp.labels["le"])
                buckets[le] = buckets.get(le, 0.0) + smp.value
            elif part in total:
                total[part] += smp.value
    return Histogram(sorted(buckets.items()), total["sum"], total["count"]) if buckets else None


def parse_sample(text: str) -> ServerSample | None:
    """The sample in Prometheus text, or None when it holds no vLLM latency histogram.

    Raises:
        ValueError: not Prometheus exposition format (prometheus_client's error).
    """
    scrape = parse(text, time.monotonic())
    ttft, itl = scrape.histograms.get("ttft"), scrape.histograms.get("itl")
    if itl is None:
        itl = _legacy_tpot(text)
    if ttft is None and itl is None:
        return None
    return ServerSample(ttft, itl, scrape.counters.get("generation_tokens"))


async def scrape(session: aiohttp.ClientSession, root: str, timeout_s: float = 5.0) -> ServerSample | None:
    """GET ``<root>/metrics`` and parse it; None when the server has none, fails, or is not a vLLM. Never raises."""
    try:
        async with session.get(root.rstrip("/") + "/metrics", allow_redirects=False,
                               timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
            if resp.status != 200:
                return None
            return parse_sample(await resp.text())
    except (aiohttp.ClientError, TimeoutError, ValueError, UnicodeDecodeError):
        return None


def _mean_ms(after: Histogram | None, before: Histogram | None) -> tuple[float | None, float]:
    """(mean of the observations between two scrapes in ms, their count)."""
    if after is None:
        return None, 0.0
    d = after.minus(before) if before is not None else after
    return (d.sum_s / d.count * 1000.0 if d.count > 0 else None), d.count


def compare(before: ServerSample | None, after: ServerSample | None, lv: LevelStats) -> dict[str, Any] | None:
    """The server's view of a level: ``{"ttft_mean_ms", "itl_mean_ms", "requests", "generation_tokens"}``, and
    the marks it gives (appended to ``lv.marks``). None when either scrape is missing."""
    if before is None or after is None:
        return None
    ttft_ms, n_req = _mean_ms(after.ttft, before.ttft)
    itl_ms, _ = _mean_ms(after.itl, before.itl)
    gen = (after.generation_tokens - before.generation_tokens
           if after.generation_tokens is not None and before.generation_tokens is not None else None)
    view = {"ttft_mean_ms": ttft_ms, "itl_mean_ms": itl_ms, "requests": n_req, "generation_tokens": gen}
    client_tpot = lv.tpot.mean
    if itl_ms is not None and client_tpot is not None and itl_ms / 1000.0 >= BURST_MIN_ITL_S \
            and client_tpot * 1000.0 < BURST_RATIO * itl_ms:
        lv.marks.append(f"bursts: client TPOT {client_tpot * 1000:.2f} ms but the server's own ITL is "
                        f"{itl_ms:.2f} ms: tokens reached the client in clumps (a buffering proxy, or a server "
                        "that sends whole answers), so the client's latencies measure the transport")
    if n_req > lv.requests * (1 + OTHER_TRAFFIC) and n_req - lv.requests >= 2:
        lv.marks.append(f"other traffic: the server counted {n_req:.0f} requests during this level, the client "
                        f"sent {lv.requests}")
    return view


SCHEDULE_KEPT = 0.90
"""An open-loop level whose requests arrived at less than this share of the scheduled rate is marked."""


def check_schedule(lv: LevelStats, scheduled: Sequence[float], arrived: Sequence[float]) -> None:
    """Mark an open-loop level ``lv`` whose requests arrived (``arrived``: seconds from the level's start, when
    each was ready to send, before any ``--max-concurrency`` wait) at under ``SCHEDULE_KEPT`` of the rate of
    its own schedule (``scheduled``, the same requests' planned times): a client starved of CPU sends late,
    never early, and is not busy while it waits, so ``check_client`` cannot see it, yet the level then says
    nothing about the server at the asked rate. Levels shorter than ``CLIENT_MIN_WALL_S`` or of fewer than
    10 requests, and ``--request-rate inf`` (every request at 0), are not judged."""
    if len(scheduled) < 10 or len(arrived) != len(scheduled) or lv.wall_s < CLIENT_MIN_WALL_S:
        return
    planned = max(scheduled) - min(scheduled)
    got = max(arrived) - min(arrived)
    if planned <= 0 or got <= 0:
        return
    asked, achieved = (len(scheduled) - 1) / planned, (len(arrived) - 1) / got
    if achieved < SCHEDULE_KEPT * asked:
        lv.marks.append(f"behind schedule: requests left the client at {achieved:.1f}/s against the "
                        f"{asked:.1f}/s scheduled (the client did not get the CPU to keep up), so the level does "
                        "not show the server at that rate")


def check_client(lv: LevelStats, cpu_s: float) -> None:
    """Mark ``lv`` when the client's event-loop thread used ``cpu_s`` (seconds) >= 90 % of the level's wall
    time; a level under ``CLIENT_MIN_WALL_S`` is recorded but not judged."""
    lv.client_cpu_s = cpu_s
    if lv.wall_s >= CLIENT_MIN_WALL_S and cpu_s >= CLIENT_BUSY * lv.wall_s:
        lv.marks.append(f"client-bound: the client was busy {cpu_s / lv.wall_s:.0%} of the level's "
                        f"{lv.wall_s:.1f} s, so it may have set the pace rather than the server")
