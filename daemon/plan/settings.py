"""The vLLM settings the planner reads (``PlanSettings``), from command-line flags or a profile ``[vllm]`` table.

Sizes go through ``conduit.units.parse_size`` (the grammar every conduit command uses: ``80GiB``, ``80G``,
``80GB``; a bare number is refused with a "did you mean 80GiB?" hint); a Python int is taken as bytes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from conduit.daemon.plan.dtypes import KV_CACHE_DTYPE_BYTES, KV_CACHE_DTYPE_HINT, normalize_dtype
from conduit.daemon.plan.errors import PlanArgumentError
from conduit.units import GiB, parse_size

DEFAULT_GPU_MEMORY_UTILIZATION = 0.92  # vLLM 0.32 CacheConfig.gpu_memory_utilization (older releases 0.9)
DEFAULT_GPU_BLOCK_SIZE = 16  # vLLM 0.32 CacheConfig.DEFAULT_BLOCK_SIZE
DEFAULT_CPU_BLOCK_SIZE = 128  # vLLM 0.32 CpuPlatform.check_and_update_config when block_size is not given


@dataclass(frozen=True)
class PlanSettings:
    """The vLLM settings the ledger needs; every field maps to a vLLM flag (None = vLLM's default).

    Attributes:
        device: ``"gpu"`` or ``"cpu"`` (vLLM's CPU build).
        gpu_memory_bytes: total device memory, bytes (``--gpu-memory`` or NVML ``memory.total``).
        gpu_free_bytes: free device memory, bytes (NVML ``memory.free``), for the start-up check; optional.
        gpu_name: device name (NVML), used only to pick vLLM's batch defaults (A100 vs H100-class).
        cpu_kvcache_space_bytes: ``VLLM_CPU_KVCACHE_SPACE`` (GiB in the env var) as bytes; the KV budget.
        kv_cache_memory_bytes: ``--kv-cache-memory-bytes``: an explicit KV budget (GPU or CPU).
        dtype: ``--dtype`` (``auto`` = config dtype; float32 checkpoints are downcast to bfloat16).
        kv_cache_dtype: ``--kv-cache-dtype`` (``auto`` = model dtype; fp8 variants = 1 byte).
        block_size: ``--block-size`` (default 16 on GPU, 128 on CPU).
        max_model_len: ``--max-model-len`` (default: the model's max_position_embeddings).
        gpu_memory_utilization: ``--gpu-memory-utilization`` (default 0.92).
        max_num_seqs / max_num_batched_tokens: scheduler limits (defaults: vLLM's per-device table).
        enforce_eager: ``--enforce-eager`` (no CUDA graphs, so no graph memory).
        tensor_parallel_size / pipeline_parallel_size / data_parallel_size: vLLM's parallel sizes (default 1);
            ``enable_expert_parallel``: ``--enable-expert-parallel`` (MoE experts whole per GPU).
        gpus_per_node: GPUs in one machine (planner only, default 8): TP beyond it goes to PP instead.
        gpus_available: GPUs there are in all (planner only; NVML's count when read), for the DP advice.
        gpu_capability: the GPU's CUDA compute capability as major x 10 + minor (70 for a V100; NVML
            ``nvmlDeviceGetCudaComputeCapability``), for the quantization and dtype checks; None = unknown.
    """

    device: str = "gpu"
    gpu_memory_bytes: int | None = None
    gpu_free_bytes: int | None = None
    gpu_name: str | None = None
    cpu_kvcache_space_bytes: int | None = None
    kv_cache_memory_bytes: int | None = None
    dtype: str = "auto"
    kv_cache_dtype: str = "auto"
    block_size: int | None = None
    max_model_len: int | None = None
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    enforce_eager: bool = False
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    data_parallel_size: int = 1
    enable_expert_parallel: bool = False
    gpus_per_node: int = 8
    gpus_available: int | None = None
    gpu_capability: int | None = None


_SETTING_ALIASES = {"gpu_memory": "gpu_memory_bytes", "cpu_kv_space": "cpu_kvcache_space_bytes",
                    "cpu_kvcache_space": "cpu_kvcache_space_bytes"}


def _size(key: str, v: Any) -> int:
    """Bytes: an int as it is (> 0), text through ``conduit.units.parse_size`` (BadArguments names ``key``)."""
    if isinstance(v, int) and not isinstance(v, bool):
        if v <= 0:
            raise PlanArgumentError(f"{key}: size must be positive, got {v}")
        return v
    return parse_size(str(v), option=key)


def _positive_int(key: str, v: Any) -> int:
    if isinstance(v, int) and not isinstance(v, bool) and v > 0:
        return v
    try:
        n = int(str(v))
    except ValueError:
        n = -1
    if n <= 0:
        raise PlanArgumentError(f"{key}: must be a positive integer, got {v!r}")
    return n


def _utilization(key: str, v: Any) -> float:
    try:
        u = float(v)
    except (TypeError, ValueError):
        u = -1.0
    if not 0 < u <= 1:
        raise PlanArgumentError(f"{key}: must be in (0, 1], got {v!r}")
    return u


def _kv_cache_dtype(key: str, v: Any) -> str:
    k = str(v).strip().lower()
    if k not in KV_CACHE_DTYPE_BYTES:
        raise PlanArgumentError(f"{key}: unsupported kv_cache_dtype {v!r}", hint=KV_CACHE_DTYPE_HINT)
    return k


def _device(key: str, v: Any) -> str:
    d = str(v).lower()
    if d not in ("gpu", "cpu"):
        raise PlanArgumentError(f"{key}: must be gpu or cpu, got {d!r}")
    return d


#: field -> ``(key as given, value) -> the field's value``; fields not listed take the value as it is.
_CONVERT: dict[str, Callable[[str, Any], Any]] = {
    **dict.fromkeys(("gpu_memory_bytes", "gpu_free_bytes", "cpu_kvcache_space_bytes", "kv_cache_memory_bytes"),
                    _size),
    **dict.fromkeys(("block_size", "max_model_len", "max_num_seqs", "max_num_batched_tokens",
                     "tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size", "gpus_per_node",
                     "gpus_available", "gpu_capability"), _positive_int),
    "gpu_memory_utilization": _utilization,
    "dtype": lambda key, v: normalize_dtype(str(v), where=key),
    "kv_cache_dtype": _kv_cache_dtype,
    "device": _device,
    "enforce_eager": lambda key, v: bool(v),
    "enable_expert_parallel": lambda key, v: bool(v),
}


def settings_from_dict(values: Mapping[str, Any] | PlanSettings | None) -> PlanSettings:
    """Build ``PlanSettings`` from a plain dict (profile ``[vllm]`` section or CLI flags).

    Keys are ``PlanSettings`` field names (dashes allowed: ``max-model-len``; a command-line flag such as
    ``--max-model-len`` too, and errors then name the flag); None values are skipped.
    Sizes are bytes (an int) or text for ``conduit.units.parse_size``. Setting ``cpu_kvcache_space_bytes``
    implies ``device = "cpu"``. Unknown keys are refused so that typos surface.

    Raises:
        PlanArgumentError: an unknown key or a bad value (message names the key).
        BadArguments: a size ``conduit.units.parse_size`` refuses (message names the key).
    """
    if isinstance(values, PlanSettings):
        return values
    known = set(PlanSettings.__dataclass_fields__)
    kw: dict[str, Any] = {}
    for raw_key, v in (values or {}).items():
        name = raw_key.lstrip("-").replace("-", "_")  # "--max-model-len" (a flag, named as such in errors)
        key = _SETTING_ALIASES.get(name, name)
        if key not in known:
            raise PlanArgumentError(f"unknown plan setting {raw_key!r}",
                                    hint="known: " + ", ".join(sorted(known)))
        if v is None:
            continue
        convert = _CONVERT.get(key)
        kw[key] = convert(raw_key, v) if convert else v
    if kw.get("cpu_kvcache_space_bytes") is not None:
        kw.setdefault("device", "cpu")
    return PlanSettings(**kw)


_SECTION_KEYS = ("dtype", "kv_cache_dtype", "block_size", "max_model_len", "gpu_memory_utilization",
                 "max_num_seqs", "max_num_batched_tokens", "enforce_eager", "kv_cache_memory_bytes",
                 "tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size", "enable_expert_parallel")


def settings_from_vllm_section(section: Mapping[str, Any]) -> dict[str, Any]:
    """Pick the planner's settings out of a profile ``[vllm]`` table (vLLM flag names, other keys ignored).

    ``extra_env.VLLM_CPU_KVCACHE_SPACE`` (whole GiB, as vLLM reads it) becomes ``cpu_kvcache_space_bytes``.
    The result feeds ``plan``/``run_plan``; flags given on the command line should be merged over it.

    Raises:
        PlanArgumentError: VLLM_CPU_KVCACHE_SPACE is not a whole number of GiB.
    """
    out = {k: section[k] for k in _SECTION_KEYS if section.get(k) is not None}
    env = section.get("extra_env") or section.get("env") or {}
    raw = env.get("VLLM_CPU_KVCACHE_SPACE") if isinstance(env, Mapping) else None
    if raw not in (None, ""):
        try:
            out["cpu_kvcache_space_bytes"] = int(str(raw)) * GiB
        except ValueError:
            raise PlanArgumentError(f"[vllm] extra_env.VLLM_CPU_KVCACHE_SPACE: {raw!r} is not a whole number of GiB",
                                    hint="vLLM reads it with int(): write 4 for 4 GiB") from None
    return out
