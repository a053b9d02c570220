"""``conduit plan --disaggregated``: the ledgers of a prefill instance and a decode instance (prefill/decode
disaggregation, two vLLM engines with a KV connector between them), and the connector's extra memory as far as
vLLM documents it. No launcher: this plans, it starts nothing.

Each instance is a whole vLLM engine with its own weights, activations and KV cache, so each gets its own
``ledger.plan`` under the same settings: the prefill instance (``kv_role`` ``kv_producer``) holds prompts until
their KV is sent, the decode instance (``kv_consumer``) holds the whole contexts it decodes. They need
``2 x tensor_parallel_size x pipeline_parallel_size x data_parallel_size`` GPUs. With fewer (or one GPU) both
share them: each gets half the memory (``gpu_memory_utilization / 2``, or half an explicit KV budget), and they
share the compute too, so the prefill still takes GPU time from the decodes: the interference disaggregation
is meant to remove stays.

The connector's memory, from vLLM 0.32.0's source (``vllm/distributed/kv_transfer/``):

- ``NixlConnector`` (``kv_connector/v1/nixl/base_worker.py``) registers the engine's own KV cache tensors with
  NIXL: no extra device memory. With ``kv_buffer_device: "cpu"`` in ``--kv-transfer-config`` (for devices NIXL
  cannot register) ``initialize_host_xfer_buffer`` allocates a host tensor of each layer's KV cache shape: host
  memory equal to the KV cache, per GPU worker.
- ``KVTransferConfig`` (``vllm/config/kv_transfer.py``) has no buffer-size field in 0.32.0; the memory of NIXL's
  own transport (UCX) and of its memory registration is not documented by vLLM.
- ``P2pNcclConnector`` is not among the connectors 0.32.0 registers (``kv_connector/factory.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from conduit.daemon.plan.errors import PlanArgumentError
from conduit.daemon.plan.ledger import Ledger, plan
from conduit.daemon.plan.model import ModelInfo
from conduit.daemon.plan.settings import DEFAULT_GPU_MEMORY_UTILIZATION

NIXL_SOURCE = "vllm/distributed/kv_transfer/kv_connector/v1/nixl/base_worker.py (vLLM 0.32.0)"
UNDOCUMENTED = ("NIXL's own transport (UCX) buffers and memory registration: not documented by vLLM 0.32.0 "
                "(KVTransferConfig has no buffer-size field); leave headroom beyond this ledger")
NOT_IN_PIN = "P2pNcclConnector: not registered in vLLM 0.32.0 (kv_connector/factory.py), so not planned"
_HALVED = ("kv_cache_memory_bytes", "cpu_kvcache_space_bytes")


def _gpus_per_instance(s: Mapping[str, Any]) -> int:
    return (int(s.get("tensor_parallel_size") or 1) * int(s.get("pipeline_parallel_size") or 1)
            * int(s.get("data_parallel_size") or 1))


def _shared(s: Mapping[str, Any]) -> dict[str, Any]:
    """``s`` for one of two instances sharing the same GPUs: half the utilization, or half an explicit budget."""
    out = dict(s)
    explicit = [k for k in _HALVED if out.get(k)]
    for k in explicit:
        out[k] = int(out[k]) // 2
    if not explicit:
        out["gpu_memory_utilization"] = float(out.get("gpu_memory_utilization") or DEFAULT_GPU_MEMORY_UTILIZATION) / 2
    return out


def connector_memory(decode: Ledger, kv_buffer_device: str = "cuda") -> dict[str, Any]:
    """NixlConnector's extra memory per GPU worker, in bytes: ``device_bytes`` 0 (it registers the KV cache in
    place), ``host_bytes`` the KV budget when ``kv_buffer_device`` is ``cpu`` (a host copy of the KV cache
    shape), else 0 (``host_bytes_with_cpu_buffer``: that copy either way); with the source and what vLLM
    leaves undocumented.

    Raises:
        PlanArgumentError: ``kv_buffer_device`` is not one of vLLM's ``cuda``, ``xpu``, ``cpu``.
    """
    if kv_buffer_device not in ("cuda", "xpu", "cpu"):
        raise PlanArgumentError(f"kv_buffer_device: must be cuda, xpu or cpu (vLLM's choices), got "
                                f"{kv_buffer_device!r}")
    copy = max(0, decode.kv_budget_bytes)
    return {"connector": "NixlConnector", "kv_buffer_device": kv_buffer_device, "device_bytes": 0,
            "host_bytes": copy if kv_buffer_device == "cpu" else 0, "host_bytes_with_cpu_buffer": copy,
            "source": NIXL_SOURCE, "undocumented": [UNDOCUMENTED], "not_planned": [NOT_IN_PIN]}


def plan_disaggregated(model: ModelInfo, settings: Mapping[str, Any], kv_buffer_device: str = "cuda"
                       ) -> dict[str, Any]:
    """The two ledgers and the connector's memory, JSON-ready.

    Args:
        model: the model (``plan.model.inspect_model``).
        settings: ``plan.settings.PlanSettings`` fields as for ``ledger.plan``; ``gpus_available`` (NVML's count
            or ``--gpus``) decides whether the instances get GPUs of their own.
        kv_buffer_device: NixlConnector's ``kv_buffer_device`` (``cuda``: the default on CUDA; ``cpu``: a host copy).

    Returns: ``{"mode": "separate"|"shared", "gpus_needed", "gpus_available", "gpus_per_instance",
    "instances": [{"role", "kv_role", "ledger"}...], "connector": connector_memory(...), "notes": [...]}``.

    Raises:
        PlanArgumentError: what ``ledger.plan`` raises, or a bad ``kv_buffer_device``.
    """
    per = _gpus_per_instance(settings)
    have = settings.get("gpus_available")
    shared = have is not None and int(have) < 2 * per
    s = _shared(settings) if shared else dict(settings)
    if have is not None:  # each instance's own GPUs (the data-parallel advice is per instance)
        s["gpus_available"] = per if shared else int(have) // 2
    prefill, decode = plan(model, s), plan(model, s)
    notes = []
    if shared:
        notes.append(f"{have} GPU(s) for two instances of {per} GPU(s) each: both share them, each with half the "
                     "memory (gpu_memory_utilization halved, or half the explicit KV budget) and the compute; the "
                     "prefill still takes GPU time from the decodes, so the ITL tails stay: not advised")
    elif have is None:
        notes.append(f"GPU count unknown: this needs {2 * per} GPUs, {per} per instance (give --gpus N)")
    notes.append("disaggregation does not raise throughput (vLLM's disaggregated-prefill docs); it tames ITL tails "
                 "when long prompts arrive and raises TTFT: measure first with conduit bench --dataset interference")
    return {"mode": "shared" if shared else "separate", "gpus_needed": 2 * per, "gpus_available": have,
            "gpus_per_instance": per,
            "instances": [{"role": "prefill", "kv_role": "kv_producer", "ledger": prefill.to_dict()},
                          {"role": "decode", "kv_role": "kv_consumer", "ledger": decode.to_dict()}],
            "connector": connector_memory(decode, kv_buffer_device), "notes": notes}


__all__ = ["connector_memory", "plan_disaggregated"]
