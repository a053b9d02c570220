"""Per-token and per-device arithmetic of vLLM's memory: KV bytes per token, weight bytes once loaded, the
non-KV overhead estimate and vLLM's batch defaults (all read from vLLM 0.32's sources, named per function).
"""

from __future__ import annotations

from dataclasses import dataclass

from conduit.daemon.plan.dtypes import (
    DTYPE_BYTES,
    SAFETENSORS_DTYPE_BYTES,
    SAFETENSORS_FLOAT,
    kv_dtype_bytes,
    normalize_dtype,
)
from conduit.daemon.plan.model import ModelInfo
from conduit.units import GiB, format_bytes


def resolve_model_dtype(model: ModelInfo, dtype: str = "auto") -> str:
    """The dtype vLLM runs the model in: ``--dtype`` when given, else the config dtype with float32 downcast
    to bfloat16 (``_resolve_auto_dtype`` in ``vllm/config/model.py``: float32 checkpoints take the platform's
    preferred dtype, bfloat16 on Ampere+ GPUs and x86/ARM CPUs). A config without a dtype counts as float32.
    """
    d = normalize_dtype(dtype)
    if d != "auto":
        return d
    cfg = model.config_dtype or "float32"
    return "bfloat16" if cfg in ("float32", "float64") else cfg


def kv_bytes_per_token(model: ModelInfo, kv_cache_dtype: str = "auto", dtype: str = "auto") -> int:
    """KV cache bytes one token takes across all layers.

    ``2 [K and V] x num_layers x num_kv_heads x head_dim x kv_dtype_bytes`` (GQA/MQA aware through
    num_kv_heads); for MLA models ``num_layers x (kv_lora_rank + qk_rope_head_dim) x kv_dtype_bytes``.
    Example: Llama-2-7B fp16 = 2 x 32 x 32 x 128 x 2 = 524,288 bytes.
    """
    b = kv_dtype_bytes(kv_cache_dtype, resolve_model_dtype(model, dtype))
    if model.mla_kv_dim:
        return model.num_layers * model.mla_kv_dim * b
    return 2 * model.num_layers * model.num_kv_heads * model.head_dim * b


def weights_in_memory_bytes(model: ModelInfo, model_dtype: str) -> int:
    """Bytes the weights take once loaded: floating tensors cast to ``model_dtype`` (unquantized models);
    quantized checkpoints and estimates are taken as they are on disk."""
    if model.quantization or not model.numel_by_dtype:
        return model.weights_bytes
    target = DTYPE_BYTES[model_dtype]
    total = 0
    float_bytes = 0
    for dt, n in model.numel_by_dtype.items():
        if dt in SAFETENSORS_FLOAT:
            total += n * target
            float_bytes += int(n * SAFETENSORS_DTYPE_BYTES[dt])
    return total + (model.weights_bytes - float_bytes)


#: Memory vLLM's process holds outside torch's allocator after start-up (NCCL, cuBLAS/cuDNN workspaces,
#: attention-backend buffers). vLLM's own ``memory_profiling`` docstring uses 0.5-1 GiB as the example;
#: we take the top of that range (conservative).
NON_TORCH_BYTES = 1 * GiB
#: CUDA graph pools captured at start-up (counted by vLLM 0.32 since
#: ``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1`` is the default); typical logs show 0.2-1 GiB; we take 1 GiB.
CUDA_GRAPH_BYTES = 1 * GiB


@dataclass(frozen=True)
class Overhead:
    """The non-KV, non-weight memory estimate, bytes, and how it was estimated (one line per part)."""

    activation_bytes: int
    sampler_bytes: int
    non_torch_bytes: int
    cuda_graph_bytes: int
    method: str

    @property
    def total_bytes(self) -> int:
        """Sum of the parts, bytes."""
        return self.activation_bytes + self.sampler_bytes + self.non_torch_bytes + self.cuda_graph_bytes


def estimate_overhead(model: ModelInfo, model_dtype: str, max_num_batched_tokens: int, max_num_seqs: int,
                      enforce_eager: bool, tp: int = 1) -> Overhead:
    """Estimate what vLLM's start-up profiling measures besides the weights. It is an estimate.

    - activation peak of the dummy forward pass over ``max_num_batched_tokens`` tokens (T):
      ``T x (2 x hidden + (heads + 2 x kv_heads) x head_dim + 3 x intermediate) x dtype bytes``
      (residual + normed hidden state, the qkv projection, gate/up output and the activated MLP input alive
      at once);
    - sampler peak over ``max_num_seqs`` rows (S): ``S x vocab x 4 bytes x 2`` (float32 logits + probs);
    - ``NON_TORCH_BYTES`` (1 GiB) and, unless ``enforce_eager``, ``CUDA_GRAPH_BYTES`` (1 GiB).

    With ``tp`` > 1 (one GPU of a tensor-parallel group) the qkv and MLP activations are the rank's shard
    (``heads / tp``, ``max(1, kv_heads // tp)``, ``intermediate / tp``); the residual stream and the gathered
    logits stay whole.
    """
    b = DTYPE_BYTES[model_dtype]
    hidden = model.hidden_size or model.num_attention_heads * model.head_dim
    inter = model.intermediate_size or 4 * hidden
    kv = model.num_kv_heads if tp == 1 else max(1, model.num_kv_heads // tp)
    per_tok = 2 * hidden + (model.num_attention_heads // tp + 2 * kv) * model.head_dim + 3 * (inter // tp)
    act = max_num_batched_tokens * per_tok * b
    vocab = model.vocab_size or 32000
    samp = max_num_seqs * vocab * 4 * 2
    graphs = 0 if enforce_eager else CUDA_GRAPH_BYTES
    method = (f"estimate: activations {max_num_batched_tokens} batched tokens x {per_tok} values x {b} B; "
              f"sampler {max_num_seqs} seqs x {vocab} vocab x 8 B; non-torch {format_bytes(NON_TORCH_BYTES)}; "
              f"CUDA graphs {format_bytes(graphs)}{' (enforce_eager)' if enforce_eager else ''}")
    return Overhead(act, samp, NON_TORCH_BYTES, graphs, method)


def vllm_batch_defaults(device: str, total_bytes: int | None, gpu_name: str | None) -> tuple[int, int]:
    """vLLM 0.32's default ``(max_num_seqs, max_num_batched_tokens)`` for the OpenAI API server.

    Source: ``EngineArgs.get_batch_defaults`` (``vllm/engine/arg_utils.py``): CPU 128 / 2048; GPU with
    >= 160 GiB 1024 / 16384; >= 70 GiB and not an A100 1024 / 8192; otherwise 256 / 2048.
    """
    if device == "cpu":
        return 128, 2048
    t = total_bytes or 0
    if t >= 160 * GiB:
        return 1024, 16384
    if t >= 70 * GiB and "a100" not in (gpu_name or "").lower():
        return 1024, 8192
    return 256, 2048
