"""``conduit bench --compare``: the same sweep against two targets, and the scaling check of the deployment guides.

Both targets get the same prompts (sized once, by the first target's tokenizer), the same lengths, levels,
request count and seed. Levels alternate between the targets (A then B at even levels, B then A at odd ones)
so that drift on the client's machine hits both. While each level runs, the target's ``/metrics`` is sampled
every ``SAMPLE_INTERVAL_S`` for vLLM's gauges ``vllm:num_requests_running`` (the batch: sequences the engine
runs at once) and ``vllm:num_requests_waiting`` (queued for a slot), and, when given, the agent's GPU
utilisation (``utilization.gpu``, % of time a kernel ran).

The scaling efficiency is ``(throughput B / throughput A) / (GPUs B / GPUs A)`` with each target's best output
tokens/s over the sweep (and per level in the table): 1.0 means B's extra GPUs delivered in proportion. Below
``LOW_EFFICIENCY`` with more GPUs on B, the guides' diagnosis is printed: "throughput barely moved with more
GPUs: a batch too small to use them, or the interconnect"; "if one replica fits, data parallelism gives more",
with what the samples showed.

GPU counts: ``--gpus A,B``, else the supervised vLLM's ``tensor_parallel_size x pipeline_parallel_size x
data_parallel_size`` from ``[vllm]`` (resolved by the CLI), else the distinct ``engine`` labels of vLLM's
``/metrics`` (one per data-parallel engine; tensor parallelism is not visible there), else 1.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from conduit.daemon.bench.outputs import SweepResult, saturation_of
from conduit.daemon.bench.runner import BenchConfig, OnResult, checked_level, open_session, prepare_prompts
from conduit.daemon.bench.stats import LevelStats
from conduit.daemon.vllm.metrics import parse
from conduit.errors import ConduitError

SAMPLE_INTERVAL_S = 0.25
LOW_EFFICIENCY = 0.6
GpuUtil = Callable[[], float | None]  # mean utilization.gpu in % over the GPUs the agent sees; None: unknown


@dataclass(frozen=True)
class GpuCount:
    """How many GPUs a target uses and where that number came from (``--gpus``, ``[vllm]``, ``/metrics``,
    ``assumed``)."""

    count: int
    source: str


def parse_gpus(text: str) -> tuple[int, int]:
    """``"1,2"`` -> ``(1, 2)``. Raises ValueError unless two positive integers."""
    parts = [p.strip() for p in text.split(",")]
    if len(parts) != 2 or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise ValueError(f"--gpus takes two positive GPU counts, A,B; got {text!r}")
    return int(parts[0]), int(parts[1])


def efficiency(tput_a: float, tput_b: float, gpus_a: int, gpus_b: int) -> float | None:
    """``(tput_b / tput_a) / (gpus_b / gpus_a)``; None when A delivered nothing."""
    if tput_a <= 0:
        return None
    return (tput_b / tput_a) / (gpus_b / gpus_a)


def _mean(xs: Sequence[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


@dataclass
class LevelLoad:
    """What a target did while one level ran: gauge samples (requests) and GPU utilisation samples (%)."""

    running: list[float] = field(default_factory=list)
    waiting: list[float] = field(default_factory=list)
    gpu_util_pct: list[float] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """``{"samples", "running_mean", "running_max", "waiting_mean", "waiting_max", "gpu_util_mean_pct"}``
        (None where nothing was sampled)."""
        return {"samples": len(self.running), "running_mean": _mean(self.running),
                "running_max": max(self.running, default=None), "waiting_mean": _mean(self.waiting),
                "waiting_max": max(self.waiting, default=None), "gpu_util_mean_pct": _mean(self.gpu_util_pct)}

    def cell(self) -> str:
        """``"3.9/0.0"`` (mean running/waiting) or ``"-"``."""
        d = self.to_dict()
        return "-" if d["running_mean"] is None else f"{d['running_mean']:.1f}/{d['waiting_mean'] or 0:.1f}"


async def _gauges(session: aiohttp.ClientSession, root: str) -> tuple[float | None, float | None]:
    """(running, waiting) from ``<root>/metrics``; (None, None) when it fails or has no such gauges."""
    try:
        async with session.get(root.rstrip("/") + "/metrics", allow_redirects=False,
                               timeout=aiohttp.ClientTimeout(total=2.0)) as resp:
            if resp.status != 200:
                return None, None
            g = parse(await resp.text()).gauges
            return g.get("running"), g.get("waiting")
    except (aiohttp.ClientError, TimeoutError, ValueError, UnicodeDecodeError):
        return None, None


async def _sample(session: aiohttp.ClientSession, root: str | None, load: LevelLoad, gpu_util: GpuUtil | None,
                  stop: asyncio.Event) -> None:
    """Fill ``load`` every ``SAMPLE_INTERVAL_S`` until ``stop`` is set, the first sample a tenth of a second in
    (not before the level's first requests are sent). Never raises for the target's faults."""
    try:
        await asyncio.wait_for(stop.wait(), min(0.1, SAMPLE_INTERVAL_S))
    except TimeoutError:
        pass
    while not stop.is_set():
        if root is not None:
            running, waiting = await _gauges(session, root)
            if running is not None:
                load.running.append(running)
                load.waiting.append(waiting or 0.0)
        if gpu_util is not None:
            pct = await asyncio.to_thread(gpu_util)
            if pct is not None:
                load.gpu_util_pct.append(pct)
        try:
            await asyncio.wait_for(stop.wait(), SAMPLE_INTERVAL_S)
        except TimeoutError:
            pass


async def engines_of(session: aiohttp.ClientSession, root: str) -> int | None:
    """Distinct ``engine`` label values on ``vllm:`` samples of ``<root>/metrics`` (vLLM labels each
    data-parallel engine), or None when there is no such label or no answer."""
    try:
        async with session.get(root.rstrip("/") + "/metrics", allow_redirects=False,
                               timeout=aiohttp.ClientTimeout(total=5.0)) as resp:
            text = await resp.text() if resp.status == 200 else ""
        engines = {s.labels["engine"] for fam in text_string_to_metric_families(text) for s in fam.samples
                   if s.name.startswith("vllm:") and "engine" in s.labels}
    except (aiohttp.ClientError, TimeoutError, ValueError, UnicodeDecodeError):
        return None
    return len(engines) or None


@dataclass
class Side:
    """One target's half of a comparison: its label, sweep, per-level load samples and GPU count."""

    label: str
    sweep: SweepResult
    loads: list[LevelLoad]
    gpus: GpuCount

    @property
    def top(self) -> LevelStats | None:
        """The highest level that delivered tokens (the most load offered), or None."""
        return max((v for v in self.sweep.levels if v.output_tokens_per_s > 0), key=lambda v: v.x, default=None)

    @property
    def best(self) -> tuple[LevelStats | None, float]:
        """(the level with the most output tokens/s, that throughput); (None, 0.0) when none delivered."""
        lv = max(self.sweep.levels, key=lambda v: v.output_tokens_per_s, default=None)
        return (lv, lv.output_tokens_per_s) if lv is not None and lv.output_tokens_per_s > 0 else (None, 0.0)

    def to_dict(self) -> dict[str, Any]:
        """The sweep's JSON (``SweepResult.to_dict``) with ``label``, ``gpus`` and ``load`` per level."""
        return {"label": self.label, "gpus": {"count": self.gpus.count, "source": self.gpus.source},
                **self.sweep.to_dict(), "load": [ld.to_dict() for ld in self.loads]}


@dataclass
class CompareResult:
    """Both sides of a finished comparison."""

    a: Side
    b: Side
    gpu_util_note: str | None = None  # why GPU utilisation was not measured (None: it was, or not asked)

    @property
    def efficiency(self) -> float | None:
        """The scaling efficiency of the best levels (see the module docstring); None when either side delivered
        nothing (a target that failed every request says nothing about scaling)."""
        if self.b.best[1] <= 0:
            return None
        return efficiency(self.a.best[1], self.b.best[1], self.a.gpus.count, self.b.gpus.count)

    def level_efficiency(self, n: int) -> float | None:
        """The scaling efficiency at level ``n`` alone."""
        la, lb = self.a.sweep.levels[n], self.b.sweep.levels[n]
        return efficiency(la.output_tokens_per_s, lb.output_tokens_per_s, self.a.gpus.count, self.b.gpus.count)

    def to_dict(self) -> dict[str, Any]:
        """The ``--json`` document: both curves (with their load samples), the GPU counts, the efficiency."""
        return {
            "conduit_bench_compare": 1,
            "a": self.a.to_dict(), "b": self.b.to_dict(),
            "efficiency": {"best": self.efficiency,
                           "per_level": [self.level_efficiency(n) for n in range(len(self.a.sweep.levels))],
                           "threshold": LOW_EFFICIENCY,
                           "formula": "(throughput B / throughput A) / (GPUs B / GPUs A)"},
            "diagnosis": diagnosis(self),
        }


def columns(r: CompareResult) -> tuple[str, ...]:
    """The side-by-side table's headers."""
    lv = r.a.sweep.levels
    return ("rate" if lv and lv[0].request_rate is not None else "conc", f"{r.a.label} tok/s",
            f"{r.b.label} tok/s", "B/A", "efficiency", f"{r.a.label} run/wait", f"{r.b.label} run/wait")


def rows(r: CompareResult) -> list[tuple[str, ...]]:
    """One row per level: throughputs (the saturation level tagged ``*``), their ratio, the efficiency, mean
    running/waiting requests sampled during the level."""
    out: list[tuple[str, ...]] = []
    for n, (la, lb) in enumerate(zip(r.a.sweep.levels, r.b.sweep.levels, strict=True)):
        def tput(lv: LevelStats, side: Side) -> str:
            return f"{lv.output_tokens_per_s:.1f}" + (" *" if side.sweep.saturation.concurrency == lv.x else "")
        ratio = lb.output_tokens_per_s / la.output_tokens_per_s if la.output_tokens_per_s > 0 else None
        eff = r.level_efficiency(n)
        out.append((f"{la.x:g}", tput(la, r.a), tput(lb, r.b), "-" if ratio is None else f"{ratio:.2f}",
                    "-" if eff is None else f"{eff:.2f}", r.a.loads[n].cell(), r.b.loads[n].cell()))
    return out


def report_lines(r: CompareResult) -> list[str]:
    """The lines under the table: each side's saturation, the GPU counts, the efficiency, the diagnosis."""
    lines = ["* = saturation level; run/wait = mean vllm:num_requests_running / num_requests_waiting during the "
             "level (- : the target's /metrics has none)"]
    for side in (r.a, r.b):
        lines.append(f"{side.label} = {side.sweep.config.get('url')} (model {side.sweep.config.get('model')!r}): "
                     f"{side.sweep.saturation.explanation}")
    lines.append(f"GPUs: {r.a.label} {r.a.gpus.count} ({r.a.gpus.source}), {r.b.label} {r.b.gpus.count} "
                 f"({r.b.gpus.source})")
    eff = r.efficiency
    if eff is None:
        empty = r.a.label if r.a.best[1] <= 0 else r.b.label
        lines.append(f"scaling efficiency: not computed ({empty} delivered no tokens: see its errors in --json)")
    else:
        lines.append(f"scaling efficiency {eff:.2f} = ({r.b.label} {r.b.best[1]:.1f} / {r.a.label} "
                     f"{r.a.best[1]:.1f} tok/s, each at its best level) / ({r.b.gpus.count} / {r.a.gpus.count} "
                     "GPUs); 1.0 = throughput grew in proportion to the GPUs")
    return lines + diagnosis(r)


def _load_words(side: Side, lv: LevelStats, note: str | None) -> list[str]:
    """What was measured on ``side`` at its level ``lv``: the batch, the queue, GPU utilisation."""
    d = side.loads[side.sweep.levels.index(lv)].to_dict()
    if d["running_mean"] is None:
        words = [f"{side.label} at {lv.label}: vLLM's running/waiting gauges were not measured (its /metrics has "
                 "none, or --no-server-check)"]
    else:
        words = [f"{side.label} at {lv.label}: batch (vllm:num_requests_running) mean {d['running_mean']:.1f}, "
                 f"max {d['running_max']:.0f}; waiting mean {d['waiting_mean']:.1f}, max {d['waiting_max']:.0f}"]
        if d["waiting_max"] and d["waiting_max"] > 0:
            words.append(f"  requests waited while at most {d['running_max']:.0f} ran: the server caps the batch "
                         "(max_num_seqs, or the KV cache is full): raise max_num_seqs or give the KV cache more "
                         "memory so the batch can use the GPUs")
        elif lv.request_rate is None and d["running_max"] >= 0.9 * lv.concurrency:
            words.append(f"  the batch was as large as offered ({lv.concurrency}) and nothing waited: offer more "
                         "(--concurrency ...,128,256); if throughput stays flat, look at the interconnect (tensor "
                         "parallelism exchanges activations at every layer: NVLink, not PCIe)")
        else:
            words.append("  the server ran fewer requests than were offered: the batch is too small to use the "
                         "GPUs (a short sweep, or requests finishing too fast to overlap)")
    util = d["gpu_util_mean_pct"]
    words.append(f"  GPU utilisation: {util:.0f}% mean (the agent's NVML samples)" if util is not None
                 else f"  GPU utilisation: not measured ({note or 'no agent answered'})")
    return words


def diagnosis(r: CompareResult) -> list[str]:
    """The guides' diagnosis when B has more GPUs and the efficiency is below ``LOW_EFFICIENCY``; else []."""
    eff = r.efficiency
    if eff is None or eff >= LOW_EFFICIENCY or r.b.gpus.count <= r.a.gpus.count:
        return []
    lv = r.b.top
    lines = [f"diagnosis: throughput barely moved with more GPUs (efficiency {eff:.2f} < {LOW_EFFICIENCY}): a "
             "batch too small to use them, or the interconnect"]
    if lv is not None:
        lines += _load_words(r.b, lv, r.gpu_util_note)
    lines.append("  if one replica fits one GPU's memory (conduit plan), data parallelism gives more: "
                 f"data_parallel_size = {r.b.gpus.count} whole replicas instead of one split across the GPUs")
    return lines


async def _sampled_level(sessions: tuple[aiohttp.ClientSession, aiohttp.ClientSession], cfg: BenchConfig, n: int,
                         on_result: OnResult | None, gpu_util: GpuUtil | None) -> tuple[LevelStats, LevelLoad]:
    """Level ``n`` of ``cfg`` (``runner.checked_level`` on ``sessions[0]``), sampled on ``sessions[1]`` (its own
    connections: the sweep's may all be busy)."""
    load, stop = LevelLoad(), asyncio.Event()
    root = cfg.endpoint.root if cfg.check_server else None
    task = asyncio.create_task(_sample(sessions[1], root, load, gpu_util, stop))
    try:
        lv = await checked_level(sessions[0], cfg, n, on_result)
    finally:
        stop.set()
        await task
    return lv, load


async def _count(session: aiohttp.ClientSession, cfg: BenchConfig, given: GpuCount | None) -> GpuCount:
    """``given``, else the engines on ``/metrics``, else 1 (assumed)."""
    if given is not None:
        return given
    engines = await engines_of(session, cfg.endpoint.root) if cfg.check_server else None
    if engines:
        return GpuCount(engines, f"/metrics: {engines} engine(s); tensor parallelism is not visible there: "
                                 "give --gpus")
    return GpuCount(1, "assumed: give --gpus A,B")


async def run_compare(a: BenchConfig, b: BenchConfig, labels: tuple[str, str] = ("A", "B"),
                      gpus: tuple[GpuCount | None, GpuCount | None] = (None, None), *,
                      on_result: OnResult | None = None, on_level: Callable[[str, LevelStats], None] | None = None,
                      on_warning: Callable[[str], None] | None = None,
                      gpu_util: GpuUtil | None = None) -> CompareResult:
    """Run ``a``'s sweep against both targets, levels alternating, and compare.

    ``b`` keeps only its endpoint and model: levels, requests, lengths and seed are ``a``'s, and so are the
    prompts (sized once by ``a``'s tokenizer; ``on_warning`` gets the sizing warnings). ``gpus``: known
    counts (None: detect, see ``_count``). ``on_level(label, level)`` after each level.

    Raises:
        ConduitError: from ``BenchConfig`` (the merged settings).
    """
    b = replace(a, endpoint=b.endpoint, model=b.model)
    async with open_session(a) as sa, open_session(b) as sb, \
            aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=4)) as side_session:
        a, warnings = await prepare_prompts(sa, a)
        b = replace(b, prompts=a.prompts)
        for w in warnings:
            if on_warning is not None:
                on_warning(w)
        counts = (await _count(side_session, a, gpus[0]), await _count(side_session, b, gpus[1]))
        done: list[list[tuple[LevelStats, LevelLoad]]] = [[], []]
        for n in range(a.level_count):
            for i in ((0, 1) if n % 2 == 0 else (1, 0)):
                got = await _sampled_level(((sa, sb)[i], side_session), (a, b)[i], n, on_result, gpu_util)
                done[i].append(got)
                if on_level is not None:
                    on_level(labels[i], got[0])
    sides = []
    for i, cfg in enumerate((a, b)):
        levels = [lv for lv, _ in done[i]]
        sweep = SweepResult(cfg.describe(), levels, saturation_of(levels, cfg.min_growth), list(warnings))
        sides.append(Side(labels[i], sweep, [ld for _, ld in done[i]], counts[i]))
    return CompareResult(sides[0], sides[1])


async def run_side(cfg: BenchConfig, label: str, gpus: GpuCount | None = None, *,
                   on_result: OnResult | None = None, on_warning: Callable[[str], None] | None = None,
                   gpu_util: GpuUtil | None = None) -> tuple[Side, BenchConfig]:
    """One target's whole sweep, each level sampled as in ``run_compare``: for a comparison whose two sides
    cannot run in turns (the same server before and after a change; ``CompareResult(side_a, side_b)``).

    Returns:
        (the side, ``cfg`` with its prompts sized): give that config (with the other endpoint) to the second
        side's call so that both send the same prompts.
    Raises:
        ConduitError: from ``BenchConfig``.
    """
    async with open_session(cfg) as session, \
            aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=4)) as side_session:
        cfg, warnings = await prepare_prompts(session, cfg)
        for w in warnings:
            if on_warning is not None:
                on_warning(w)
        count = await _count(side_session, cfg, gpus)
        done = [await _sampled_level((session, side_session), cfg, n, on_result, gpu_util)
                for n in range(cfg.level_count)]
    levels = [lv for lv, _ in done]
    sweep = SweepResult(cfg.describe(), levels, saturation_of(levels, cfg.min_growth), list(warnings))
    return Side(label, sweep, [ld for _, ld in done], count), cfg


def write_json(path: Path, r: CompareResult) -> None:
    """Write ``r.to_dict()`` as indented JSON. Raises ConduitError naming the file when it cannot be written."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(r.to_dict(), indent=2) + "\n", encoding="utf-8")
    except OSError as exc:
        raise ConduitError(f"cannot write {path}: {exc.strerror or exc}", hint="choose a writable path") from None
