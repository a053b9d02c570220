"""What vLLM refuses about a quantized (or bfloat16) checkpoint on a given GPU, checked before anything
launches: the method's minimum compute capability, bfloat16 below compute capability 8.0, and a format that
needs a plugin (GGUF). The rules and their sources in vLLM 0.32 are in ``daemon.config.vllmrules``
(``VllmConfig._get_quantization_config`` in ``vllm/config/vllm.py``, each method's ``get_min_capability``,
``CudaPlatform.check_if_supports_dtype`` in ``vllm/platforms/cuda.py``).

Errors: ``PlanArgumentError`` (exit 3) naming the setting and the minimum.
"""

from __future__ import annotations

from conduit.daemon.config.vllmrules import (
    BF16_MIN_CAPABILITY,
    MIN_CAPABILITY,
    capability_refusal,
    capability_text,
    plugin_needed,
)
from conduit.daemon.plan.errors import PlanArgumentError
from conduit.daemon.plan.model import ModelInfo
from conduit.daemon.plan.settings import PlanSettings


def check_quantization(model: ModelInfo, s: PlanSettings) -> PlanSettings:
    """Refuse a checkpoint vLLM would refuse on this GPU (``s.gpu_capability``, when known) or cannot load;
    return ``s`` unchanged when vLLM accepts it.

    Raises:
        PlanArgumentError: a GGUF checkpoint (needs ``vllm-gguf-plugin``); a quantization method whose minimum
            compute capability is above the GPU's (the message names the minimum); ``dtype`` bfloat16 (given,
            or the config's with ``auto``) below compute capability 8.0 (the hint: ``dtype = "float16"``).
    """
    plugin = plugin_needed(model.quantization)
    if plugin:
        raise PlanArgumentError(f"{model.path}: a {model.quantization} checkpoint; vLLM 0.32 loads it only with "
                                f"the separate {plugin} package", hint=f"pip install {plugin} into [vllm].python")
    cap = s.gpu_capability if s.device == "gpu" else None
    why = capability_refusal(model.quantization, cap)
    if why and cap is not None:
        fits = sorted(m for m, need in MIN_CAPABILITY.items() if need <= cap and not m.startswith("auto_"))
        raise PlanArgumentError(f"{model.name}: {why} (vLLM refuses it at start-up)",
                                hint=f"use a checkpoint in a method this GPU runs ({', '.join(fits)}), or a GPU "
                                     "of compute capability "
                                     f"{capability_text(MIN_CAPABILITY[str(model.quantization).lower()])} or newer")
    # with dtype "auto" vLLM picks float16 itself there (``_resolve_auto_dtype``, ``supported_dtypes``)
    if cap is not None and cap < BF16_MIN_CAPABILITY and s.dtype == "bfloat16":
        raise PlanArgumentError(f"dtype bfloat16 needs compute capability {capability_text(BF16_MIN_CAPABILITY)}; "
                                f"this GPU has {capability_text(cap)} (vLLM refuses it at start-up)",
                                hint='set dtype = "float16" in [vllm] (--dtype float16)')
    return s
