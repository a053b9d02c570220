"""Sizing a host-memory KV tier (vLLM's ``--kv-offloading-size``, ``[vllm].kv_offloading_size``) and saying when
it will not help. Pure: the host's memory and the ledger's figures come in as numbers (docs/kv-tier.md).

The rule:

- **at least** the device KV budget of one replica (``kv_budget_bytes x tensor x pipeline``): vLLM's native tier
  (``OffloadingConnector``, ``vllm/distributed/kv_transfer/kv_connector/v1/offloading_connector.py``) keeps blocks
  the device cache also holds, so a tier smaller than the device cache adds nothing that was not on the device;
- **at most** the host's available memory (psutil ``virtual_memory().available``) less a headroom of
  ``max(HEADROOM_MIN_BYTES, HEADROOM_FRACTION x total)`` for the OS, the vLLM process itself and everything else,
  shared by the ``data_parallel_size`` engines of the host: vLLM allocates the whole tier at start-up
  (``CPUOffloadingSpec``, ``vllm/v1/kv_offload/cpu/spec.py``: ``cpu_bytes_to_use`` = size x 2**30);
- **suggested**: ``TIER_MULTIPLE`` x the device budget, within those bounds, in GiB rounded down to 0.1.

It will not help when prefix caching is off (the tier stores and finds blocks by their prefix hash), when the
bench's prompts share no prefix (its prefix-cache hit rate under ``NO_SHARING_HIT_RATE``), or on vLLM's CPU build
(its KV cache is host memory already, and ``CPUOffloadingSpec.get_worker`` refuses any platform but CUDA and XPU).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from conduit.units import GiB, format_bytes

#: Host memory kept free for everything else: at least this many bytes ...
HEADROOM_MIN_BYTES = 8 * GiB
#: ... or this fraction of the host's total memory, whichever is larger.
HEADROOM_FRACTION = 0.10
#: The suggested tier: this many times the device KV budget (when the host has the room).
TIER_MULTIPLE = 4
#: A bench hit rate under this (with prefix caching on) means the prompts share no prefix.
NO_SHARING_HIT_RATE = 0.05


@dataclass(frozen=True)
class TierInputs:
    """What the sizing reads. Bytes unless named otherwise.

    Attributes:
        device_kv_bytes: the KV budget of one replica (the ledger's per-GPU budget x tensor x pipeline).
        kv_bytes_per_token: KV bytes one token takes over that replica.
        host_total_bytes / host_available_bytes: psutil's ``virtual_memory()`` (or ``--host-free``).
        data_parallel_size: engines on this host, each with its own tier.
        requested_bytes: ``[vllm].kv_offloading_size`` (or ``--kv-offloading-size``) in bytes, or None.
        headroom_bytes: None = the default rule above.
        prefix_caching: ``[vllm].enable_prefix_caching`` (None = vLLM's default, on).
        bench_hit_rate / bench_query_tokens: a bench run's prefix-cache hit rate (0..1) and its tokens, or None.
        device: ``gpu`` or ``cpu`` (vLLM's CPU build).
        backend: ``native`` or ``lmcache`` (None = native).
    """

    device_kv_bytes: int
    kv_bytes_per_token: int
    host_total_bytes: int
    host_available_bytes: int
    data_parallel_size: int = 1
    requested_bytes: int | None = None
    headroom_bytes: int | None = None
    prefix_caching: bool | None = None
    bench_hit_rate: float | None = None
    bench_query_tokens: float | None = None
    device: str = "gpu"
    backend: str | None = None


@dataclass(frozen=True)
class HostTier:
    """The sizing. ``verdict``: ``sized`` (min <= max), ``no_room`` (the host cannot spare the minimum) or
    ``will_not_help`` (``reasons`` say why). Sizes in bytes; ``suggested_gib`` is the value for
    ``[vllm].kv_offloading_size`` (None unless ``sized``); ``*_tokens`` are KV token slots."""

    verdict: str
    min_bytes: int
    max_bytes: int
    headroom_bytes: int
    suggested_bytes: int | None
    suggested_gib: float | None
    device_tokens: int
    suggested_tokens: int | None
    requested_bytes: int | None
    reasons: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return asdict(self)


def headroom(total_bytes: int, given: int | None = None) -> int:
    """The host memory kept free: ``given``, else ``max(HEADROOM_MIN_BYTES, HEADROOM_FRACTION x total)``."""
    return given if given is not None else max(HEADROOM_MIN_BYTES, int(total_bytes * HEADROOM_FRACTION))


def _will_not_help(i: TierInputs) -> list[str]:
    out = []
    if i.prefix_caching is False:
        out.append("prefix caching is off ([vllm].enable_prefix_caching = false): the tier stores and finds KV "
                   "blocks by their prefix hash, so no request would reuse one")
    elif i.bench_hit_rate is not None and i.bench_hit_rate < NO_SHARING_HIT_RATE:
        tokens = f" of {i.bench_query_tokens:,.0f} prompt tokens" if i.bench_query_tokens else ""
        out.append(f"the bench's prompts share no prefix (prefix-cache hit rate {i.bench_hit_rate:.0%}{tokens}): "
                   "a tier would hold blocks no later request asks for")
    if i.device == "cpu":
        out.append("vLLM's CPU build keeps its KV cache in host memory already, and its native tier runs on CUDA "
                   "and XPU GPUs only (CPUOffloadingSpec.get_worker refuses the CPU platform)")
    return out


def plan_host_tier(i: TierInputs) -> HostTier:
    """Size the host tier for ``i`` (see the module docstring for the rule)."""
    room = headroom(i.host_total_bytes, i.headroom_bytes)
    dp = max(1, i.data_parallel_size)
    lo, hi = max(0, i.device_kv_bytes), max(0, (i.host_available_bytes - room) // dp)
    per_token = max(1, i.kv_bytes_per_token)
    reasons, notes = _will_not_help(i), []
    if i.backend == "lmcache":
        notes.append("with kv_offloading_backend = \"lmcache\" vLLM does not pass the size on: the LMCache server's "
                     "own configuration holds the capacity (VllmConfig._post_init_kv_transfer_config)")
    suggested: int | None = None
    if reasons:
        verdict = "will_not_help"
    elif hi < lo:
        verdict = "no_room"
        reasons.append(f"the host has {format_bytes(i.host_available_bytes)} available; less {format_bytes(room)} "
                       f"headroom{f' and shared by {dp} engines' if dp > 1 else ''} that leaves "
                       f"{format_bytes(hi)}, under the device KV budget of {format_bytes(lo)}: a tier that small "
                       "holds nothing the device cache does not")
    else:
        verdict = "sized"
        target = min(hi, TIER_MULTIPLE * lo)
        gib = math.floor(target / GiB * 10) / 10
        suggested = int(gib * GiB) if gib * GiB >= lo else target
    if i.requested_bytes is not None:
        notes += _requested(i.requested_bytes, lo, hi)
    return HostTier(verdict, lo, hi, room, suggested,
                    None if suggested is None else round(suggested / GiB, 2), lo // per_token,
                    None if suggested is None else suggested // per_token, i.requested_bytes, reasons, notes)


def _requested(req: int, lo: int, hi: int) -> list[str]:
    """What a requested size means against the bounds; both warnings when it is under the device KV budget
    and over what the host can spare (a host with less room than the budget): the second is the dangerous one."""
    out = []
    if req > hi:
        out.append(f"kv_offloading_size {format_bytes(req)} is more than the host can spare ({format_bytes(hi)}): "
                   "vLLM allocates it all at start-up, so the host would swap or its OOM killer end vLLM")
    if req < lo:
        out.append(f"kv_offloading_size {format_bytes(req)} is under the device KV budget ({format_bytes(lo)}): "
                   "it would hold little the device cache does not")
    return out or [f"kv_offloading_size {format_bytes(req)} is within the bounds"]
