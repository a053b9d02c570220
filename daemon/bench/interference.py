"""Prefill interference (``conduit bench --dataset interference[:k=v,...]``): how much long prompts arriving
stretch the token gaps of the streams already decoding, measured in one run, and what to do about it.

Two phases against the same server, one after the other:

1. *alone*: ``streams`` closed-loop workers send ``decodes`` streaming requests with short prompts
   (``prompt`` tokens) and ``max_tokens`` answers; every gap between two chunks of an answer is an ITL sample
   (``stats``: ``vllm bench serve``'s inter-token latency).
2. *with long prompts*: the same decode requests again, while long prompts (``long`` tokens, distinct, so no
   prefix-cache hit; ``max_tokens`` 1: prefill only) arrive every ``1/rate`` seconds until the decodes are done.

The interference ratio is ITL p99 with long prompts / ITL p99 alone (1.0: no effect), from the gaps the client
read; when either phase's answers arrived in bursts (most gaps under ``BURST_GAP_S``: a proxy that buffers, or
an engine that outruns the network, as the CPU vLLM with a tiny model does) those gaps measure the transport, so
the ratio comes from the server's ``vllm:inter_token_latency_seconds`` histogram scraped around each phase
(``servercheck``; bucket-interpolated, coarse: vLLM 0.32's lowest bucket is 10 ms). ``advise`` turns it
into advice, in order: chunked prefill first (``[vllm] max_num_batched_tokens``, vLLM's per-step token budget:
vLLM's V1 engine always chunks prefills, and a smaller budget puts fewer prefill tokens into the steps decodes
wait for; vLLM's optimization guide: smaller values, e.g. 2048, give better ITL, larger better TTFT), then
prefill/decode disaggregation, only with two or more GPUs and a ratio of at least ``DISAGG_THRESHOLD``.
Disaggregation is never advised for throughput: vLLM's disaggregated-prefill documentation says it does not
improve throughput; it separates the phases so that long prefills stop stalling decodes (ITL tails), at the
price of a KV transfer per request and a higher TTFT.

Token counts of the synthetic prompts are word counts (``prompts.synthetic_prompt``); the server's own count of
a long prompt, from its usage chunk, is reported beside. OpenAI protocol only (``/chat/completions``).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import aiohttp

from conduit.daemon.bench import servercheck
from conduit.daemon.bench.arrivals import closed_loop
from conduit.daemon.bench.prompts import Sample, synthetic_prompt
from conduit.daemon.bench.runner import BenchConfig, open_session, run_request
from conduit.daemon.bench.stats import RequestResult
from conduit.daemon.bench.wire import Endpoint
from conduit.daemon.vllm.metrics import Histogram
from conduit.errors import BadArguments
from conduit.units import parse_duration, percentile

#: A gap shorter than this (s) means two chunks arrived in one read: a burst, not a measured ITL.
BURST_GAP_S = 1e-4
#: Below this ratio long prompts barely stretch the decode gaps: nothing to change.
NOTICEABLE_RATIO = 1.5
#: At or above this ratio (ITL p99 with long prompts / alone), after chunked-prefill tuning, disaggregation is
#: worth a trial on two or more GPUs. Why 3: a decode step that shares the batch with one prefill chunk costs
#: about a decode step plus that chunk, and a tuned ``max_num_batched_tokens`` keeps the chunk to a few decode
#: steps' worth, so tails up to ~3x are what chunked prefill leaves by design. A second engine costs half the
#: GPUs per instance, a KV transfer per request and a higher TTFT; it pays only when the stalls are well beyond
#: that (vLLM's published 8-GPU run: long-prompt ITL p99 down 25x at concurrency 16, no p99 gain on a mixed
#: stream). A rule of thumb, not a law: the docs page "Prefill/decode: when it pays" says the same.
DISAGG_THRESHOLD = 3.0
#: vLLM 0.32.0's ``max_num_batched_tokens`` defaults for the API server (vllm/engine/arg_utils.py,
#: ``get_batch_defaults``): GPUs with >= 160 GB 16384, >= 70 GB (not A100) 8192, others 2048, CPU 2048 per rank.
VLLM_SERVER_BATCHED_DEFAULTS = "16384 on GPUs with 160 GB or more, 8192 on 70 GB or more (not A100), 2048 otherwise"


@dataclass(frozen=True)
class InterferenceSpec:
    """The measurement's shape. ``prompt``/``long`` in tokens (approximate: words), ``rate`` long prompts per
    second, ``gpus`` the GPUs there are for the advice (None: unknown).

    Raises:
        BadArguments (exit 3): a count below 1, or a rate that is not positive and finite.
    """

    streams: int = 4
    decodes: int = 16
    prompt: int = 16
    max_tokens: int = 64
    long: int = 2048
    rate: float = 1.0
    gpus: int | None = None

    def __post_init__(self) -> None:
        for name in ("streams", "decodes", "prompt", "max_tokens", "long"):
            if getattr(self, name) < 1:
                raise BadArguments(f"--dataset interference: {name} must be at least 1",
                                   hint="e.g. interference:streams=4,long=2048,rate=1")
        if not 0 < self.rate < float("inf"):
            raise BadArguments("--dataset interference: rate must be a positive number of long prompts per second",
                               hint="e.g. rate=0.5")
        if self.gpus is not None and self.gpus < 0:
            raise BadArguments("--dataset interference: gpus must be 0 or more", hint="e.g. gpus=2")


_INT_KEYS = ("streams", "decodes", "prompt", "max_tokens", "long", "gpus")


def parse_spec(spec: str) -> InterferenceSpec:
    """``interference`` or ``interference:k=v,...`` (keys: streams, decodes, prompt, max_tokens, long, rate, gpus;
    ``rate`` also as an interval, ``every=2s``).

    Raises:
        BadArguments (exit 3): not an interference spec, an unknown key, or a value that is not a number.
    """
    kind, _, rest = spec.partition(":")
    if kind != "interference":
        raise BadArguments(f"not an interference spec: {spec!r}", hint="use interference or interference:long=2048")
    values: dict[str, Any] = {}
    for part in filter(None, (p.strip() for p in rest.split(","))):
        key, _, value = part.partition("=")
        try:
            if key in _INT_KEYS and value:
                values[key] = int(value)
            elif key == "rate" and value:
                values["rate"] = float(value)
            elif key == "every" and value:
                values["rate"] = 1.0 / parse_duration(value)
            else:
                raise BadArguments(f"--dataset interference: unknown setting {part!r}",
                                   hint="settings: " + ", ".join(f"{k}=..." for k in (*_INT_KEYS, "rate", "every")))
        except (ValueError, ZeroDivisionError):
            raise BadArguments(f"--dataset interference: {key}={value!r} is not a number",
                               hint="rate in long prompts per second (0.5), every a duration (2s), others whole "
                                    "numbers") from None
    return InterferenceSpec(**values)


@dataclass
class Phase:
    """One phase's records: the decode requests and (second phase) the long prompts; ``wall_s`` seconds."""

    decodes: list[RequestResult] = field(default_factory=list)
    longs: list[RequestResult] = field(default_factory=list)
    wall_s: float = 0.0
    server_itl: Histogram | None = None

    @property
    def bursty(self) -> bool:
        """More than half of the client's gaps were under ``BURST_GAP_S``: its ITL measures the transport."""
        gaps = [g for r in self.decodes if r.ok for g in r.itl]
        return bool(gaps) and sum(g < BURST_GAP_S for g in gaps) > len(gaps) / 2

    def server_ms(self, q: float) -> float | None:
        """The server's ITL ``q``-th percentile over the phase (ms; ``Histogram.quantile``), or None."""
        v = self.server_itl.quantile(q / 100) if self.server_itl is not None else None
        return None if v is None else round(v * 1000, 3)

    def itl_ms(self, q: float) -> float | None:
        """The ``q``-th percentile of the decode requests' pooled ITL samples (ms), or None without samples."""
        v = percentile(sorted(g for r in self.decodes if r.ok for g in r.itl), q)
        return None if v is None else round(v * 1000, 3)

    def summary(self) -> dict[str, Any]:
        """JSON-able: counts, ITL p50/p99 and decode TTFT p50 (ms), long-prompt TTFT p50 (ms) and the server's
        mean long-prompt length (tokens, from usage; None when it sent none)."""
        ok, long_ok = [r for r in self.decodes if r.ok], [r for r in self.longs if r.ok]

        def ms(values: list[float]) -> float | None:
            v = percentile(sorted(values), 50)
            return None if v is None else round(v * 1000, 3)

        sizes = [r.input_tokens for r in long_ok if r.input_tokens]
        failed = [r for r in (*self.decodes, *self.longs) if not r.ok]
        gaps = [g for r in ok for g in r.itl]
        return {"decodes": len(self.decodes), "decodes_failed": len(self.decodes) - len(ok),
                "itl_samples": len(gaps), "itl_ms": {"p50": self.itl_ms(50), "p99": self.itl_ms(99)},
                "itl_burst_share": round(sum(g < BURST_GAP_S for g in gaps) / len(gaps), 3) if gaps else None,
                "decode_ttft_p50_ms": ms([r.ttft_s for r in ok if r.ttft_s is not None]),
                "long_prompts": len(self.longs), "long_prompts_failed": len(self.longs) - len(long_ok),
                "long_ttft_p50_ms": ms([r.ttft_s for r in long_ok if r.ttft_s is not None]),
                "long_prompt_tokens_server": round(sum(sizes) / len(sizes)) if sizes else None,
                "server_itl_ms": None if self.server_itl is None or self.server_itl.count <= 0 else {
                    "p50": self.server_ms(50), "p99": self.server_ms(99), "count": self.server_itl.count,
                    "mean": round(self.server_itl.sum_s / self.server_itl.count * 1000, 3)},
                "wall_s": round(self.wall_s, 3), "first_error": failed[0].detail if failed else None}


@dataclass
class InterferenceRun:
    """A finished measurement: the spec, both phases."""

    spec: InterferenceSpec
    alone: Phase
    loaded: Phase

    @property
    def client_ratio(self) -> float | None:
        """The client's ITL p99 with long prompts / alone; None when either is missing or under ``BURST_GAP_S``,
        or when either phase's answers came in bursts (then the gaps measure the transport, not the engine)."""
        a, b = self.alone.itl_ms(99), self.loaded.itl_ms(99)
        if a is None or b is None or min(a, b) < BURST_GAP_S * 1000 or self.alone.bursty or self.loaded.bursty:
            return None
        return round(b / a, 3)

    @property
    def server_ratio(self) -> float | None:
        """The same from the server's ``vllm:inter_token_latency_seconds`` histogram (bucket-interpolated p99,
        so coarse: vLLM 0.32's lowest bucket is 10 ms), or None without it."""
        a, b = self.alone.server_ms(99), self.loaded.server_ms(99)
        return None if a is None or b is None or a <= 0 else round(b / a, 3)

    @property
    def ratio(self) -> float | None:
        """The interference ratio the advice uses: the client's, else the server's (``ratio_source``)."""
        return self.client_ratio if self.client_ratio is not None else self.server_ratio

    @property
    def ratio_source(self) -> str | None:
        """``client`` (the gaps it read), ``server`` (vLLM's ITL histogram), or None (no ratio)."""
        return "client" if self.client_ratio is not None else "server" if self.server_ratio is not None else None

    def summary(self, current_batched: int | None = None) -> dict[str, Any]:
        """JSON-able: the spec, both phases, the ratio (p99 and p50), the threshold and the advice lines."""
        a50, b50 = self.alone.itl_ms(50), self.loaded.itl_ms(50)
        return {"spec": asdict(self.spec), "alone": self.alone.summary(), "with_long_prompts": self.loaded.summary(),
                "interference_ratio_p99": self.ratio, "ratio_source": self.ratio_source,
                "client_ratio_p99": self.client_ratio, "server_ratio_p99": self.server_ratio,
                "interference_ratio_p50": None if not a50 or b50 is None else round(b50 / a50, 3),
                "noticeable_ratio": NOTICEABLE_RATIO, "disaggregation_threshold": DISAGG_THRESHOLD,
                "advice": advise(self.ratio, self.spec.gpus, current_batched)}


def advise(ratio: float | None, gpus: int | None, current_batched: int | None = None) -> list[str]:
    """The advice for an interference ratio, in order: chunked prefill first, then disaggregation (only with
    ``gpus`` >= 2 and ``ratio`` >= ``DISAGG_THRESHOLD``), and never a throughput promise.

    Args:
        ratio: ITL p99 with long prompts / alone; None when not measured.
        gpus: GPUs there are (None: unknown).
        current_batched: the engine's ``max_num_batched_tokens`` when known (``[vllm]``), else None.
    """
    if ratio is None:
        return ["no advice: the ITL was not measured in both phases (see the errors; an ITL p99 of 0 ms means the "
                "answers arrived in bursts: a client short of CPU, or a proxy that buffers the stream)"]
    if ratio < NOTICEABLE_RATIO:
        return [f"long prompts barely stretch the decode gaps (ITL p99 x{ratio:g}, under {NOTICEABLE_RATIO:g}): "
                "neither a smaller max_num_batched_tokens nor a second engine would buy much"]
    now = (f"now {current_batched}" if current_batched else f"vLLM 0.32's server default: {VLLM_SERVER_BATCHED_DEFAULTS}")
    lines = [f"1. chunked prefill first: lower [vllm] max_num_batched_tokens ({now}), e.g. halve it, and measure "
             "again. It is the token budget of one engine step: fewer prefill tokens share each step with the "
             "decodes, so the gaps shrink; long prompts' TTFT grows (vLLM: smaller values such as 2048 give "
             "better ITL, larger ones better TTFT)."]
    if ratio < DISAGG_THRESHOLD:
        lines.append(f"2. prefill/decode disaggregation: not advised at x{ratio:g} (threshold x{DISAGG_THRESHOLD:g}): "
                     "chunked prefill can hold tails of this size; a second engine would cost half the GPUs per "
                     "instance, a KV transfer per request and a higher TTFT")
    elif gpus is None or gpus < 2:
        have = "an unknown number of GPUs (give gpus=N)" if gpus is None else f"{gpus} GPU{'s' * (gpus != 1)}"
        lines.append(f"2. prefill/decode disaggregation: the ratio x{ratio:g} is above x{DISAGG_THRESHOLD:g}, but it "
                     f"needs two or more GPUs (one instance each), and this run found {have}; on one GPU both "
                     "instances would share its memory and compute, so it is not advised")
    else:
        lines.append(f"2. if the ratio stays at or above x{DISAGG_THRESHOLD:g} after that, prefill/decode "
                     f"disaggregation is worth a trial on your {gpus} GPUs (a prefill and a decode instance, the KV "
                     "moved by a connector; `conduit plan --disaggregated` shows both ledgers): it tames ITL tails, "
                     "and raises TTFT")
    lines.append("disaggregation does not raise throughput (vLLM's disaggregated-prefill docs); judge it by ITL p99 "
                 "only")
    return lines


async def _phase(session: aiohttp.ClientSession, cfg: BenchConfig, spec: InterferenceSpec, serial: int,
                 with_long: bool) -> Phase:
    """Run ``spec.decodes`` decode requests over ``spec.streams`` workers; with ``with_long``, long prompts every
    ``1/spec.rate`` s (the first at once) until the decodes end, then wait for those in flight."""
    phase, long_cfg = Phase(), replace(cfg, max_tokens=1)
    done = asyncio.Event()

    async def decode(_worker: int, i: int) -> RequestResult:
        return await run_request(session, cfg, Sample(synthetic_prompt(spec.prompt, serial + i)), i, spec.streams)

    async def longs() -> None:
        pending: list[asyncio.Task[RequestResult]] = []
        n = 0
        try:
            while not done.is_set():
                sample = Sample(synthetic_prompt(spec.long, serial + 100_000 + n))
                pending.append(asyncio.create_task(run_request(session, long_cfg, sample, n, 1)))
                n += 1
                try:
                    await asyncio.wait_for(done.wait(), 1.0 / spec.rate)
                except TimeoutError:
                    pass
            phase.longs = list(await asyncio.gather(*pending))
        except asyncio.CancelledError:  # Ctrl-C or an error: the long prompts in flight are not waited for
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            raise

    before = await servercheck.scrape(session, cfg.endpoint.root)
    t0 = time.perf_counter()
    sender = asyncio.create_task(longs()) if with_long else None
    try:
        phase.decodes = await closed_loop(list(range(spec.streams)), spec.decodes, decode)
    except BaseException:
        # cancelled, not told to finish: ``done`` stays unset, since Python 3.11's wait_for can swallow a
        # cancellation that arrives as the event it waits for is set
        if sender is not None:
            sender.cancel()
            await asyncio.gather(sender, return_exceptions=True)
        raise
    done.set()
    if sender is not None:
        await sender
    phase.wall_s = time.perf_counter() - t0
    after = await servercheck.scrape(session, cfg.endpoint.root)
    if before is not None and after is not None and before.itl is not None and after.itl is not None:
        phase.server_itl = after.itl.minus(before.itl)
    return phase


async def run_interference(endpoint: Endpoint, model: str, spec: InterferenceSpec, *, ignore_eos: bool = False,
                           timeout_s: float = 300.0) -> InterferenceRun:
    """Measure both phases against ``endpoint`` (OpenAI protocol), the quiet one first.

    Never raises for the network's or the server's sake (failures are counted in each phase's summary).

    Raises:
        BadArguments (exit 3): the endpoint is not an OpenAI one.
    """
    if endpoint.protocol != "openai":
        raise BadArguments("--dataset interference sends OpenAI chat requests", hint="use --protocol openai")
    cfg = BenchConfig(endpoint=endpoint, model=model, max_tokens=spec.max_tokens, ignore_eos=ignore_eos,
                      timeout_s=timeout_s, check_server=False, size_prompts=False)
    async with open_session(cfg, limit=0) as session:
        alone = await _phase(session, cfg, spec, 0, with_long=False)
        loaded = await _phase(session, cfg, spec, spec.decodes, with_long=True)
    return InterferenceRun(spec, alone, loaded)


__all__ = ["DISAGG_THRESHOLD", "NOTICEABLE_RATIO", "InterferenceRun", "InterferenceSpec", "Phase", "advise",
           "parse_spec", "run_interference"]
