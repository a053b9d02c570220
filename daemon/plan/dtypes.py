"""Element sizes: safetensors dtypes, model dtypes (``--dtype``) and KV cache dtypes (``--kv-cache-dtype``).

Sources: the safetensors format spec for its dtype names; vLLM 0.32 for ``--dtype`` spellings and the
``CacheDType`` values (``vllm/config/cache.py``).
"""

from __future__ import annotations

from conduit.daemon.plan.errors import PlanArgumentError

#: Bytes per element of each safetensors dtype (safetensors format spec). F4/F6 types are packed; their
#: tensors are measured from ``data_offsets`` instead.
SAFETENSORS_DTYPE_BYTES: dict[str, float] = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1,
    "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
    "I32": 4, "U32": 4, "F32": 4,
    "I64": 8, "U64": 8, "F64": 8,
    "F4": 0.5, "F6_E2M3": 0.75, "F6_E3M2": 0.75,
}
#: The floating safetensors dtypes, which vLLM casts to the model dtype when it loads the weights.
SAFETENSORS_FLOAT = {"F16": "float16", "BF16": "bfloat16", "F32": "float32", "F64": "float64"}

#: Model dtype names (vLLM ``--dtype`` and config ``torch_dtype``) -> bytes per element.
DTYPE_BYTES: dict[str, int] = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}
_DTYPE_ALIASES = {"half": "float16", "fp16": "float16", "bf16": "bfloat16", "float": "float32",
                  "fp32": "float32", "torch.float16": "float16", "torch.bfloat16": "bfloat16",
                  "torch.float32": "float32"}

#: vLLM 0.32 ``--kv-cache-dtype`` values conduit can size (``CacheDType`` in ``vllm/config/cache.py``);
#: ``auto`` means the model dtype. The other CacheDType values (turboquant, int4 ...) are refused.
KV_CACHE_DTYPE_BYTES: dict[str, int | None] = {
    "auto": None, "float16": 2, "bfloat16": 2, "float32": 4,
    "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "fp8_inc": 1,
}
KV_CACHE_DTYPE_HINT = "use auto, float16, bfloat16, fp8, fp8_e4m3 or fp8_e5m2"


def normalize_dtype(name: str, *, where: str = "dtype") -> str:
    """Map a dtype spelling (``torch.bfloat16``, ``bf16``, ``half``) to vLLM's name; ``auto`` is kept.

    Raises:
        PlanArgumentError: unknown dtype.
    """
    n = str(name).strip().lower()
    n = _DTYPE_ALIASES.get(n, n)
    if n == "auto" or n in DTYPE_BYTES:
        return n
    raise PlanArgumentError(f"{where}: unknown dtype {name!r}",
                            hint="use auto, float16, bfloat16 or float32")


def kv_dtype_bytes(kv_cache_dtype: str, model_dtype: str) -> int:
    """Bytes per KV element: ``auto`` -> the model dtype; fp8/fp8_e4m3/fp8_e5m2 -> 1.

    Raises:
        PlanArgumentError: an unsupported kv_cache_dtype.
    """
    k = kv_cache_dtype.strip().lower()
    if k not in KV_CACHE_DTYPE_BYTES:
        raise PlanArgumentError(f"kv_cache_dtype: unsupported value {kv_cache_dtype!r}", hint=KV_CACHE_DTYPE_HINT)
    b = KV_CACHE_DTYPE_BYTES[k]
    return DTYPE_BYTES[normalize_dtype(model_dtype)] if b is None else b
