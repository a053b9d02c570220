"""Reading a model: its directory (local or the Hugging Face cache), ``config.json`` and weight bytes -> ModelInfo.

A local model directory or a name in the local Hugging Face cache (never a download) becomes a ``ModelInfo``:
the attention shape from ``config.json`` and the exact weight bytes from the safetensors headers
(``conduit.daemon.plan.safetensors``; no weights are loaded). Without safetensors the weight bytes are
estimated from the parameter count, and a note says so.

Errors: ``ModelError`` (exit 1), naming the file and the key.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conduit.daemon.config.vllmrules import PLUGINS, shape_of
from conduit.daemon.plan.dtypes import DTYPE_BYTES, normalize_dtype
from conduit.daemon.plan.errors import ModelError, PlanArgumentError
from conduit.daemon.plan.safetensors import scan_safetensors


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
        ModelError: neither a directory nor a cached model of that name (the message lists where it looked);
            a ``.gguf`` file (vLLM needs vllm-gguf-plugin for it).
    """
    p = Path(model).expanduser()
    if p.is_dir():
        return p
    if p.suffix.lower() == ".gguf":
        raise ModelError(f"{p}: a GGUF file; vLLM 0.32 has no GGUF loader of its own",
                         hint=f"install {PLUGINS['gguf']} into [vllm].python (`pip install {PLUGINS['gguf']}`), "
                              "or plan the model's safetensors release (conduit plan reads config.json)")
    if p.exists():
        raise ModelError(f"{p}: is a file, not a model directory",
                         hint="pass the directory that holds config.json")
    text = str(model).strip()
    if text.startswith(("/", "~", ".")) or text.count("/") > 1:  # a path, never a Hub name (org/name)
        raise ModelError(f"model {text!r} not found: the path {p} does not exist",
                         hint="pass the directory that holds config.json, or a Hugging Face name (org/name) "
                              "already in the local cache")
    name = text.strip("/")
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

_LAYER_KEYS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers")
_HEAD_KEYS = ("num_attention_heads", "n_head", "n_heads")
_KV_KEYS = ("num_key_value_heads", "num_kv_heads", "n_head_kv", "multi_query_group_num")
_HIDDEN_KEYS = ("hidden_size", "n_embd", "d_model")
# vLLM takes the smallest of these as the derived max length (0.32: ``derive_max_model_len_and_key``);
# ``model_max_length`` (Command-R) then replaces it when present.
_MAX_LEN_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length",
                 "max_target_positions", "max_sequence_length", "max_seq_length", "seq_len")
# RoPE types whose max_position_embeddings is already the scaled length (vLLM 0.32 ``_get_and_verify_max_len``):
# their ``factor`` is not applied again. Every other type (linear, dynamic, ...) multiplies by ``factor``.
_ROPE_PRESCALED = ("su", "longrope", "llama3", "yarn", "deepseek_yarn", "deepseek_llama_scaling")
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
        max_position_embeddings: the smallest length key of the config (before RoPE scaling), or None.
        max_len_limit: the longest max_model_len vLLM accepts, derived as vLLM 0.32 does (length keys,
            ``model_max_length``, tokenizer_config.json, RoPE ``factor``), or None when the config names none.
        max_len_key: where ``max_len_limit`` comes from (``max_position_embeddings``, ``... x rope factor 4``).
        default_max_len: vLLM's max_model_len when none is given (``original_max_position_embeddings`` for
            LongRoPE, else ``max_len_limit``).
        quantization: ``quantization_config.quant_method`` (``awq``, ``gptq``, ``fp8``...), or None.
        weights_bytes: checkpoint weight bytes; exact from safetensors headers when ``weights_source`` is
            ``"safetensors"``, an estimate from the parameter count when ``"estimate"``.
        numel_by_dtype: element counts per safetensors dtype (empty for an estimate).
        intermediate_size / vocab_size: for the activation estimate (None when absent).
        sliding_window: config ``sliding_window`` (None when absent).
        num_experts / moe_intermediate_size / num_shared_experts: MoE shape (``num_local_experts``,
            ``n_routed_experts`` or ``num_experts``; 0 experts for a dense model), for the per-GPU ledger.
        tie_word_embeddings: the LM head shares the embedding matrix (config ``tie_word_embeddings``).
        quant_group_size: ``quantization_config.group_size`` of an AWQ/GPTQ checkpoint (None otherwise, or
            ``-1``: one group per row), for the tensor-parallel rule (``daemon.config.vllmrules``).
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
    max_len_limit: int | None = None
    max_len_key: str | None = None
    default_max_len: int | None = None
    num_experts: int = 0
    moe_intermediate_size: int | None = None
    num_shared_experts: int = 0
    tie_word_embeddings: bool = False
    quant_group_size: int | None = None


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
    cfg = _read_config(d / "config.json")
    notes: list[str] = []
    shape = _attention_shape(cfg)
    mla_kv_dim = None
    if cfg.text.get("kv_lora_rank"):
        mla_kv_dim = int(cfg.text["kv_lora_rank"]) + int(cfg.text.get("qk_rope_head_dim") or 0)
        notes.append(f"MLA model: KV cache holds one latent of {mla_kv_dim} values per token and layer "
                     "(kv_lora_rank + qk_rope_head_dim), not K and V per head")
    config_dtype = _config_dtype(cfg, notes)
    max_pos, quant, sliding = _limits(cfg, notes)
    lim = _max_len_limit(cfg, d, notes)
    weights, source, numel = _weights(d, cfg.text, shape, config_dtype, quant, notes)
    text = cfg.text
    return ModelInfo(
        path=str(d), name=cfg.top.get("_name_or_path") or d.name, model_type=cfg.top.get("model_type"),
        num_layers=shape.layers, num_attention_heads=shape.heads, num_kv_heads=shape.kv_heads,
        head_dim=shape.head_dim, hidden_size=shape.hidden,
        config_dtype=config_dtype, max_position_embeddings=max_pos, quantization=quant,
        weights_bytes=int(weights), weights_source=source, numel_by_dtype=numel,
        intermediate_size=int(text["intermediate_size"]) if text.get("intermediate_size") else None,
        vocab_size=int(text["vocab_size"]) if text.get("vocab_size") else None,
        sliding_window=sliding, mla_kv_dim=mla_kv_dim, notes=tuple(notes),
        max_len_limit=lim.limit, max_len_key=lim.key, default_max_len=lim.default,
        num_experts=int(text.get("num_local_experts") or text.get("n_routed_experts") or text.get("num_experts") or 0),
        moe_intermediate_size=int(text["moe_intermediate_size"]) if text.get("moe_intermediate_size") else None,
        num_shared_experts=int(text.get("n_shared_experts") or 0),
        tie_word_embeddings=bool(text.get("tie_word_embeddings")),
        quant_group_size=_group_size(cfg.top),
    )


def _group_size(top: dict[str, Any]) -> int | None:
    """The AWQ/GPTQ ``group_size`` of the checkpoint (``vllmrules.shape_of``), or None."""
    shape = shape_of(top)
    return shape.group_size if shape else None


@dataclass(frozen=True)
class _Config:
    """``config.json``: the top level, the text model's view of it (nested text config merged over the top),
    and the key prefix (``text_config.``) error messages name."""

    path: Path
    top: dict[str, Any]
    text: dict[str, Any]
    prefix: str


def _read_config(cfg_path: Path) -> _Config:
    if not cfg_path.is_file():
        raise ModelError(f"{cfg_path}: no config.json in the model directory",
                         hint="pass the directory that holds the model's config.json and *.safetensors")
    try:
        top = json.loads(cfg_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelError(f"{cfg_path}: not valid JSON: {exc}") from exc
    if not isinstance(top, dict):
        raise ModelError(f"{cfg_path}: top level is not a JSON object")
    for nk in _NESTED_TEXT_KEYS:
        if isinstance(top.get(nk), dict):
            return _Config(cfg_path, top, {**top, **{k: v for k, v in top[nk].items() if v is not None}}, f"{nk}.")
    return _Config(cfg_path, top, dict(top), "")


@dataclass(frozen=True)
class _Shape:
    layers: int
    heads: int
    kv_heads: int
    hidden: int | None
    head_dim: int


def _attention_shape(cfg: _Config) -> _Shape:
    """Layers, heads, KV heads (GQA/MQA), hidden size and head size, under the names models use for them."""
    text, prefix, path = cfg.text, cfg.prefix, cfg.path
    found = _first(text, _LAYER_KEYS)
    if found is None:
        raise ModelError(f"{path}: key {prefix}num_hidden_layers is missing",
                         hint="the planner needs the layer count; is this a decoder language model?")
    layers = _pos_int(path, prefix + found[0], found[1])
    found = _first(text, _HEAD_KEYS)
    if found is None:
        raise ModelError(f"{path}: key {prefix}num_attention_heads is missing")
    heads = _pos_int(path, prefix + found[0], found[1])
    found = _first(text, _KV_KEYS)
    if found is not None:
        kv = _pos_int(path, prefix + found[0], found[1])
    elif text.get("multi_query") and not text.get("new_decoder_architecture"):
        kv = 1  # Falcon-style MQA flag
    else:
        kv = heads
    hidden_f = _first(text, _HIDDEN_KEYS)
    hidden = _pos_int(path, prefix + hidden_f[0], hidden_f[1]) if hidden_f else None
    if text.get("head_dim") is not None:
        hd = _pos_int(path, prefix + "head_dim", text["head_dim"])
    elif hidden is not None:
        hd = hidden // heads
    else:
        raise ModelError(f"{path}: neither {prefix}head_dim nor {prefix}hidden_size is present",
                         hint="one of them is needed to size the KV cache")
    return _Shape(layers, heads, kv, hidden, hd)


def _config_dtype(cfg: _Config, notes: list[str]) -> str | None:
    """``torch_dtype`` (or ``dtype``) normalized; an unknown spelling is noted and treated as absent."""
    raw = cfg.text.get("torch_dtype") or cfg.text.get("dtype")
    if raw is None:
        return None
    try:
        return normalize_dtype(str(raw), where=f"{cfg.path}: {cfg.prefix}torch_dtype")
    except PlanArgumentError:
        notes.append(f"config dtype {raw!r} not understood; treated as absent")
        return None


def _limits(cfg: _Config, notes: list[str]) -> tuple[int | None, str | None, int | None]:
    """``(derived max length, quantization method, sliding window)``, noting what may make them inexact."""
    text = cfg.text
    lens = [(k, text[k]) for k in _MAX_LEN_KEYS if isinstance(text.get(k), int) and text[k] > 0]
    max_pos = min(v for _, v in lens) if lens else None
    qc = cfg.top.get("quantization_config") or text.get("quantization_config")
    quant = str(qc.get("quant_method") or qc.get("format") or "unknown") if isinstance(qc, dict) else None
    sliding = text.get("sliding_window") if isinstance(text.get("sliding_window"), int) else None
    if sliding and text.get("use_sliding_window", True):
        notes.append(f"sliding_window={sliding}: counted as full attention for every layer (conservative; "
                     "vLLM may need less KV for sliding-window layers)")
    return max_pos, quant, sliding


@dataclass(frozen=True)
class _Limit:
    limit: int | None
    key: str | None
    default: int | None


def _rope_params(text: Mapping[str, Any]) -> list[dict[str, Any]]:
    """``rope_scaling`` (transformers 4) or ``rope_parameters`` (5; may hold one dict per layer type)."""
    raw = text.get("rope_scaling") or text.get("rope_parameters")
    if not isinstance(raw, dict):
        return []
    if "rope_type" in raw or "type" in raw or "factor" in raw:
        return [raw]
    return [v for v in raw.values() if isinstance(v, dict)]


def _max_len_limit(cfg: _Config, d: Path, notes: list[str]) -> _Limit:
    """The max_model_len vLLM 0.32 derives (``_get_and_verify_max_len``): the smallest length key,
    ``model_max_length`` over it, the tokenizer's ``model_max_length`` when smaller, times the RoPE
    ``factor`` for types that do not pre-scale (Gemma 3 never scales)."""
    text = cfg.text
    lens = [(v, k) for k in _MAX_LEN_KEYS if isinstance(v := text.get(k), (int, float)) and v > 0]
    derived, key = min(lens) if lens else (None, None)
    if isinstance(text.get("model_max_length"), (int, float)) and text["model_max_length"] > 0:
        derived, key = text["model_max_length"], "model_max_length"
    tok = _json_or_none(d / "tokenizer_config.json")
    tmax = tok.get("model_max_length") if tok else None
    if derived is not None and isinstance(tmax, (int, float)) and 0 < tmax < derived:
        derived, key = tmax, "tokenizer_config.json model_max_length"
    if derived is None:
        return _Limit(None, None, None)
    params = _rope_params(text)
    factor = 1.0
    if params and "gemma3" not in str(cfg.top.get("model_type") or ""):
        for rp in params:
            rtype = str(rp.get("rope_type") or rp.get("type") or "default")
            if rtype not in _ROPE_PRESCALED and rp.get("factor") is not None:
                factor = float(rp["factor"])
    limit = int(derived * factor)
    if factor != 1.0:
        key = f"{key} {int(derived)} x rope factor {factor:g}"
        notes.append(f"rope scaling: vLLM derives max_model_len {limit} ({key})")
    longrope = any(str(rp.get("rope_type") or rp.get("type")) == "longrope" for rp in params)
    orig = text.get("original_max_position_embeddings")
    default = int(orig) if longrope and isinstance(orig, int) else limit
    return _Limit(limit, key, default)


def _json_or_none(path: Path) -> dict[str, Any] | None:
    """A JSON object file, or None when absent or unreadable (optional files only)."""
    try:
        v = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return v if isinstance(v, dict) else None


def _weights(d: Path, text: Mapping[str, Any], shape: _Shape, config_dtype: str | None, quant: str | None,
             notes: list[str]) -> tuple[int, str, dict[str, int]]:
    """``(weight bytes, source, numel by dtype)``: exact from safetensors, the index's total when shards are
    missing, else an estimate from the parameter count."""
    scan = scan_safetensors(d)
    if scan is not None and scan.files and not scan.missing_shards:
        return scan.total_bytes, "safetensors", dict(scan.numel_by_dtype)
    if scan is not None and scan.index_total_bytes is not None:
        notes.append(f"{len(scan.missing_shards)} shard(s) named in the index are missing; weight bytes "
                     "taken from the index's metadata.total_size")
        return scan.index_total_bytes, "safetensors-index", {}
    params = _estimate_params(text, shape.layers, shape.heads, shape.kv_heads, shape.head_dim,
                              shape.hidden or shape.heads * shape.head_dim)
    per = DTYPE_BYTES.get(config_dtype or "bfloat16", 2)
    if quant:
        notes.append(f"quantized ({quant}) without safetensors: the estimate assumes unquantized weights")
    count = f"{params / 1e9:.2f}B" if params >= 1e9 else f"{params / 1e6:.1f}M"
    notes.append(f"no safetensors files: weights estimated from config as ~{count} "
                 f"parameters x {per} bytes")
    return params * per, "estimate", {}
