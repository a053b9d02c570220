"""conduit plan under tensor / pipeline / data parallelism: the ledger per GPU (daemon/plan/parallel.py,
scaling.py, ledger.py).

Every expected figure is worked out here by hand from vLLM 0.32's sharding rules (named in
``daemon/plan/parallel.py``), not read back from the code: per TP rank, ``heads / tp`` query heads and
``max(1, kv_heads // tp)`` KV heads (QKVParallelLinear), MLP widths over TP (Merged/RowParallelLinear), MoE
expert widths over TP x DP (FusedMoE), the vocab padded to 64 and split over TP (VocabParallelEmbedding /
ParallelLMHead), replicated norms; per PP stage, ``get_pp_indices``' layers, the embedding on the first stage and
the final norm + LM head on the last (Llama), or all three on every stage (Mixtral). Models are config.json files
(no safetensors), so the weights are the config's parameter count x 2 bytes and a GPU's share is exactly its own
parameter count x 2 bytes.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers.isolation import env_for_subprocess

from conduit.daemon.plan import ledger as L
from conduit.daemon.plan.errors import PlanArgumentError
from conduit.daemon.plan.ledger import Verdict
from conduit.daemon.plan.model import ModelInfo, inspect_model
from conduit.daemon.plan.parallel import padded_vocab, stage_layers
from conduit.daemon.plan.settings import settings_from_vllm_section
from conduit.units import GiB

# Published configurations (meta-llama/Llama-2-70b-hf, meta-llama/Meta-Llama-3-70B, mistralai/Mixtral-8x7B-v0.1).
# Llama-2-70B is GQA with 8 KV heads as published; MHA_70B is the same shape with 64 KV heads (full multi-head
# attention), the case where the KV cache is split over TP without replication up to TP 64.
LLAMA2_70B = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 8192, "intermediate_size": 28672,
    "num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8, "max_position_embeddings": 4096,
    "vocab_size": 32000, "torch_dtype": "float16",
}
MHA_70B = dict(LLAMA2_70B, num_key_value_heads=64)
LLAMA3_70B = dict(LLAMA2_70B, num_key_value_heads=8, vocab_size=128256, max_position_embeddings=8192,
                  torch_dtype="bfloat16")
MIXTRAL = {
    "architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336,
    "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "num_local_experts": 8,
    "num_experts_per_tok": 2, "max_position_embeddings": 32768, "vocab_size": 32000, "torch_dtype": "bfloat16",
}
GPU80 = {"gpu_memory": "80GiB"}
REQUESTED = math.ceil(80 * GiB * 0.92)  # ceil(total x gpu_memory_utilization), vLLM 0.32's default 0.92


def model(tmp_path: Path, cfg: dict[str, Any], name: str = "m") -> ModelInfo:
    d = tmp_path / name
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps(cfg), encoding="utf-8")
    return inspect_model(d)


# --- hand arithmetic of one GPU's parameters ------------------------------------------------------------------


def dense_layer(h: int, heads: int, kv: int, inter: int, t: int) -> int:
    """One Llama decoder layer on one of t TP ranks (hd = 128 for every model here)."""
    q_and_o = 2 * h * (heads // t * 128)  # q_proj (column) + o_proj (row): heads / t
    k_and_v = 2 * h * max(1, kv // t) * 128  # one KV head per rank, replicated, once t >= kv
    mlp = 3 * h * (inter // t)  # gate + up (column), down (row)
    return q_and_o + k_and_v + mlp + 2 * h  # + input and post-attention RMSNorm, replicated


def llama_stage(cfg: dict[str, Any], t: int, p: int, stage: int) -> int:
    """Parameters on one GPU of ``stage``: its layers, the embedding on stage 0, LM head + final norm on the last."""
    h, vocab = cfg["hidden_size"], cfg["vocab_size"]
    layers = cfg["num_hidden_layers"] // p  # 80 splits evenly over 1 or 2 stages
    per_layer = dense_layer(h, cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["intermediate_size"], t)
    vocab_part = vocab // t * h  # 32000 and 128256 are multiples of 64: no padding
    first, last = stage == 0, stage == p - 1
    return layers * per_layer + (first + last) * vocab_part + (h if last else 0)


def mixtral_stage(t: int, p: int, dp: int = 1) -> int:
    """Mixtral-8x7B on one GPU: 8 experts each with width 14336 / (t x dp), router replicated; embedding, norm and
    LM head on every stage (vLLM's mixtral.py builds them unconditionally)."""
    h = 4096
    attn = 2 * h * (32 // t * 128) + 2 * h * max(1, 8 // t) * 128
    experts = 8 * 3 * h * (14336 // (t * dp))
    layer = attn + experts + h * 8 + 2 * h  # + router gate (4096 x 8) + two norms
    return 32 // p * layer + 2 * (32000 // t * h) + h


def kv_per_token(layers: int, kv: int, t: int) -> int:
    """KV bytes per token on one GPU: 2 (K, V) x layers on the stage x max(1, kv // t) x head_dim 128 x 2 B."""
    return 2 * layers * max(1, kv // t) * 128 * 2


def overhead(t: int, h: int, heads: int, kv: int, inter: int, vocab: int) -> int:
    """conduit's overhead estimate on one GPU (memory.estimate_overhead): activations of 8192 batched tokens with
    the rank's qkv and MLP shards, sampler of 1024 sequences, 1 GiB non-torch, 1 GiB CUDA graphs."""
    act = 8192 * (2 * h + (heads // t + 2 * max(1, kv // t)) * 128 + 3 * (inter // t)) * 2
    return act + 1024 * vocab * 8 + 2 * GiB


def test_hand_arithmetic_matches_published_sizes() -> None:
    """The hand formulas give the models' known sizes at TP 1 (so they are the right formulas to test with)."""
    assert llama_stage(LLAMA2_70B, 1, 1, 0) == 68_976_648_192  # Llama-2-70B: ~69.0B parameters
    assert llama_stage(LLAMA3_70B, 1, 1, 0) == 70_553_706_496  # Llama-3-70B: ~70.6B
    assert mixtral_stage(1, 1) == 46_702_792_704  # Mixtral-8x7B: ~46.7B
    assert dense_layer(8192, 64, 8, 28672, 8) == 16_777_216 + 2_097_152 + 88_080_384 + 16_384


def test_pipeline_partition_follows_get_pp_indices() -> None:
    assert stage_layers(80, 2) == [40, 40]
    assert stage_layers(80, 3) == [27, 27, 26]  # remainder 2 goes to the stages before the last
    assert stage_layers(32, 5) == [6, 6, 7, 7, 6]
    assert stage_layers(81, 4) == [20, 20, 21, 20]
    assert padded_vocab(32000) == 32000 and padded_vocab(32001) == 32064 and padded_vocab(128256) == 128256


# --- the grid: TP 1/2/4/8 x PP 1/2 --------------------------------------------------------------------------------


@pytest.mark.parametrize("t", [1, 2, 4, 8])
@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("name", ["llama2_70b", "mha_70b", "llama3_70b"])
def test_dense_70b_per_gpu(tmp_path: Path, name: str, t: int, p: int) -> None:
    cfg = {"llama2_70b": LLAMA2_70B, "mha_70b": MHA_70B, "llama3_70b": LLAMA3_70B}[name]
    m = model(tmp_path, cfg)
    led = L.plan(m, dict(GPU80, tensor_parallel_size=t, pipeline_parallel_size=p))
    kv = cfg["num_key_value_heads"]
    assert (led.gpus_total, led.kv_heads_per_gpu) == (t * p, max(1, kv // t))
    assert [s.layers for s in led.stages] == [80 // p] * p
    want_w = [2 * llama_stage(cfg, t, p, i) for i in range(p)]
    want_kv = kv_per_token(80 // p, kv, t)
    assert [s.weights_bytes for s in led.stages] == want_w
    assert [s.kv_bytes_per_token for s in led.stages] == [want_kv] * p
    ov = overhead(t, 8192, 64, kv, 28672, cfg["vocab_size"])
    assert led.overhead is not None and led.overhead.total_bytes == ov
    budgets = [REQUESTED - w - ov for w in want_w]
    assert [s.kv_budget_bytes for s in led.stages] == budgets
    blocks = [max(0, b) // (want_kv * 16) for b in budgets]
    assert [s.num_blocks for s in led.stages] == blocks
    # vLLM lowers every worker to the fewest blocks; the ledger shows that (last, heavier) stage
    assert led.num_blocks == min(blocks) and led.weights_bytes == want_w[-1]
    max_len = cfg["max_position_embeddings"]  # the default max_model_len: 4096 (Llama 2), 8192 (Llama 3)
    assert led.kv_bytes_per_token == want_kv and led.kv_tokens == int(min(blocks) / (max_len // 16) * max_len)


@pytest.mark.parametrize("t", [1, 2, 4, 8])
@pytest.mark.parametrize("p", [1, 2])
def test_mixtral_per_gpu(tmp_path: Path, t: int, p: int) -> None:
    m = model(tmp_path, MIXTRAL)
    led = L.plan(m, dict(GPU80, tensor_parallel_size=t, pipeline_parallel_size=p, max_model_len=4096))
    want_w = 2 * mixtral_stage(t, p)
    assert [s.weights_bytes for s in led.stages] == [want_w] * p  # every stage holds the vocab layers
    assert [s.kv_bytes_per_token for s in led.stages] == [kv_per_token(32 // p, 8, t)] * p
    ov = overhead(t, 4096, 32, 8, 14336, 32000)
    assert led.kv_budget_bytes == REQUESTED - want_w - ov
    assert led.num_blocks == max(0, REQUESTED - want_w - ov) // (kv_per_token(32 // p, 8, t) * 16)
    assert led.max_concurrency == led.num_blocks / (4096 // 16)


def test_mixtral_experts_shard_over_tp_times_dp(tmp_path: Path) -> None:
    """FusedMoE flattens TP across DP: with DP 2 each GPU holds half the expert width of DP 1 (or, with expert
    parallelism, half the experts: the same bytes); attention and vocab stay per replica."""
    m = model(tmp_path, MIXTRAL)
    base = dict(GPU80, tensor_parallel_size=2, max_model_len=4096)
    dp2 = L.plan(m, dict(base, data_parallel_size=2))
    assert dp2.weights_bytes == 2 * mixtral_stage(2, 1, dp=2) and dp2.gpus_total == 4
    ep = L.plan(m, dict(base, data_parallel_size=2, enable_expert_parallel=True))
    assert ep.weights_bytes == dp2.weights_bytes  # 8 / 4 whole experts = 8 experts of width / 4
    dense = model(tmp_path, LLAMA3_70B, "dense")
    one, two = (L.plan(dense, dict(GPU80, tensor_parallel_size=2, data_parallel_size=d)) for d in (1, 2))
    assert one.weights_bytes == two.weights_bytes and (one.gpus_total, two.gpus_total) == (2, 4)


# --- verdicts ------------------------------------------------------------------------------------------------------


def test_70b_fp16_does_not_fit_one_80gib_gpu_and_the_verdict_names_tp2(tmp_path: Path) -> None:
    m = model(tmp_path, LLAMA2_70B)
    led = L.plan(m, GPU80)
    assert led.verdict is Verdict.DOES_NOT_FIT and led.weights_bytes == 2 * 68_976_648_192
    tp = led.fixes[0]
    assert (tp.setting, tp.value) == ("tensor_parallel_size", "2")
    # the per-GPU figures of TP 2, by hand: 2 x 17,244,495,872 parameters = 64.24 GiB, 2 x 80 x 4 x 128 x 2 B
    assert 2 * llama_stage(LLAMA2_70B, 2, 1, 0) == 68_977_967_104
    assert "64.24 GiB of weights and 163,840 KV bytes per token per GPU" in tp.reason
    blocks = (REQUESTED - 68_977_967_104 - overhead(2, 8192, 64, 8, 28672, 32000)) // (163_840 * 16)
    assert f"{blocks * 16:,} KV tokens" in tp.reason and f"{blocks / 256:.2f}x concurrency" in tp.reason
    at2 = L.plan(m, dict(GPU80, tensor_parallel_size=2))
    assert at2.verdict is not Verdict.DOES_NOT_FIT and at2.num_blocks == blocks


def test_mha_70b_needs_tp4(tmp_path: Path) -> None:
    """With 64 KV heads TP 2 leaves the KV cache no room (73 GiB of weights per GPU): the verdict names TP 4."""
    m = model(tmp_path, MHA_70B)
    assert 2 * llama_stage(MHA_70B, 2, 1, 0) == 78_373_208_064
    assert L.plan(m, dict(GPU80, tensor_parallel_size=2)).verdict is Verdict.DOES_NOT_FIT
    led = L.plan(m, GPU80)
    assert [(f.setting, f.value) for f in led.fixes][0] == ("tensor_parallel_size", "4")
    assert f"{kv_per_token(80, 64, 4):,} KV bytes per token per GPU" in led.fixes[0].reason


def test_beyond_one_node_the_verdict_adds_pipeline_stages(tmp_path: Path) -> None:
    m = model(tmp_path, LLAMA2_70B)
    led = L.plan(m, {"gpu_memory": "40GiB", "gpus_per_node": 2})
    assert [(f.setting, f.value) for f in led.fixes][:2] == [("tensor_parallel_size", "2"),
                                                             ("pipeline_parallel_size", "2")]
    assert "4 GPUs like this one (2 stages of 2, across nodes)" in led.fixes[0].reason


def test_data_parallel_advice_when_one_replica_fits(tmp_path: Path) -> None:
    m = model(tmp_path, LLAMA2_70B)
    led = L.plan(m, dict(GPU80, tensor_parallel_size=2, gpus_available=8))
    assert led.parallel_advice is not None
    assert led.parallel_advice.startswith("one replica fits on 2 GPUs (tensor_parallel_size=2:")
    assert "with 8 GPUs use data_parallel_size = 4 for throughput" in led.parallel_advice
    done = L.plan(m, dict(GPU80, tensor_parallel_size=2, data_parallel_size=4, gpus_available=8))
    assert done.parallel_advice is None and done.gpus_total == 8
    # TP 4 buys KV room for far more sequences than two TP-2 replicas: no advice to undo it
    assert L.plan(m, dict(GPU80, tensor_parallel_size=4)).parallel_advice is None
    assert L.plan(m, dict(GPU80, tensor_parallel_size=2)).parallel_advice is None  # 2 GPUs: one replica


def test_a_small_model_on_many_gpus_is_told_data_parallel(tmp_path: Path) -> None:
    m = model(tmp_path, dict(LLAMA3_70B, num_hidden_layers=8, max_position_embeddings=4096))
    led = L.plan(m, dict(GPU80, tensor_parallel_size=8))
    assert led.parallel_advice is not None and "one replica fits on 1 GPU (tensor_parallel_size=1" in led.parallel_advice
    assert "with 8 GPUs use data_parallel_size = 8" in led.parallel_advice


def test_sizes_vllm_refuses(tmp_path: Path) -> None:
    m = model(tmp_path, LLAMA2_70B)
    with pytest.raises(PlanArgumentError, match=r"must be divisible by tensor parallel size \(3\)"):
        L.plan(m, dict(GPU80, tensor_parallel_size=3))
    with pytest.raises(PlanArgumentError, match="more stages than the model's 80 layers"):
        L.plan(m, dict(GPU80, pipeline_parallel_size=81))
    with pytest.raises(PlanArgumentError, match="tensor_parallel_size"):
        L.plan(m, dict(GPU80, tensor_parallel_size=0))


def test_more_gpus_asked_than_there_are_is_noted(tmp_path: Path) -> None:
    led = L.plan(model(tmp_path, LLAMA2_70B), dict(GPU80, tensor_parallel_size=8, data_parallel_size=2,
                                                  gpus_available=8))
    assert any("8 x 1 x 2 = 16 GPUs; only 8 available" in n for n in led.notes)


# --- profile and command ---------------------------------------------------------------------------------------

_MAIN = "import sys; from conduit.daemon.cli.main import main; sys.exit(main(sys.argv[1:]))"


def _conduit(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(env_for_subprocess(home), COLUMNS="200")  # rich wraps the table at the terminal's width
    return subprocess.run([sys.executable, "-c", _MAIN, *args], capture_output=True, text=True, timeout=120,
                          env=env, cwd=home)


def test_vllm_section_parallel_sizes_feed_the_planner() -> None:
    got = settings_from_vllm_section({"model": "x", "tensor_parallel_size": 4, "pipeline_parallel_size": 2,
                                      "data_parallel_size": 1})
    assert got == {"tensor_parallel_size": 4, "pipeline_parallel_size": 2, "data_parallel_size": 1}


def test_cli_parallel_flags_json_and_table(tmp_path: Path, temp_home: Path) -> None:
    d = model(tmp_path, LLAMA2_70B).path
    r = _conduit(temp_home, "plan", d, "--gpu-memory", "80GiB", "--tensor-parallel-size", "2",
                 "--pipeline-parallel-size", "2", "--json")
    assert r.returncode == 0, r.stderr
    led = json.loads(r.stdout)["ledger"]
    assert (led["tensor_parallel_size"], led["pipeline_parallel_size"], led["gpus_total"]) == (2, 2, 4)
    assert [s["weights_bytes"] for s in led["stages"]] == [2 * llama_stage(LLAMA2_70B, 2, 2, i) for i in (0, 1)]
    assert led["kv_bytes_per_token"] == kv_per_token(40, 8, 2) and led["limiting_stage"] == 1
    r = _conduit(temp_home, "plan", d, "--gpu-memory", "80GiB", "--tensor-parallel-size", "2",
                 "--pipeline-parallel-size", "2", "--gpus", "8")
    assert r.returncode == 0, r.stderr
    for text in ("GPUs in all", "tensor 2 x pipeline 2 x data 1", "stage 1 (limits)", "weights per GPU",
                 "KV bytes per token per GPU", "max concurrency per replica"):
        assert text in r.stdout, text
    assert "data parallel:" not in r.stdout  # 4 TP-2 replicas (4 x 9.81x) serve less than TP 2 x PP 2 (122x)
    r = _conduit(temp_home, "plan", d, "--gpu-memory", "80GiB", "--tensor-parallel-size", "2", "--gpus", "8")
    assert r.returncode == 0 and "with 8 GPUs use data_parallel_size = 4 for throughput" in " ".join(r.stdout.split())
    r = _conduit(temp_home, "plan", d, "--gpu-memory", "80GiB")
    assert r.returncode == 1 and "tensor_parallel_size = 2" in r.stdout
    r = _conduit(temp_home, "plan", d, "--gpu-memory", "80GiB", "--tensor-parallel-size", "3")
    assert r.returncode == 3 and "divisible by tensor parallel size (3)" in r.stdout + r.stderr


def test_nvml_gpu_count_feeds_the_data_parallel_advice(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With no ``--gpus``, the GPUs NVML sees (here 4 fake H100s, read through agent.gpu) are the K of the advice."""
    from conduit.daemon.cli.plan import run_plan

    dev = {"name": "NVIDIA H100 80GB HBM3", "total": 80 * GiB, "used": 0, "free": 80 * GiB}
    spec = {"devices": [dict(dev, uuid=f"GPU-{i}") for i in range(4)]}
    (tmp_path / "gpus.json").write_text(json.dumps(spec))
    monkeypatch.setenv("CONDUIT_FAKE_GPUS", str(tmp_path / "gpus.json"))
    d = model(tmp_path, LLAMA2_70B).path
    led = run_plan(d, {"tensor_parallel_size": 2})["ledger"]
    assert "with 4 GPUs use data_parallel_size = 2 for throughput" in led["parallel_advice"]


def test_cli_reads_the_parallel_sizes_from_the_profile(tmp_path: Path, temp_home: Path) -> None:
    d = model(tmp_path, LLAMA2_70B).path
    cfg = temp_home / ".config" / "conduit"
    cfg.mkdir(parents=True)
    (cfg / "profile.toml").write_text(
        f'version = 1\nchannel = "local"\nmodel = "m"\n[vllm]\nmodel = "{d}"\nserved_model_name = "m"\n'
        "tensor_parallel_size = 2\n")
    r = _conduit(temp_home, "plan", "--gpu-memory", "80GiB", "--json")
    assert r.returncode == 0, r.stderr
    led = json.loads(r.stdout)["ledger"]
    assert (led["tensor_parallel_size"], led["weights_bytes"]) == (2, 68_977_967_104)
    r = _conduit(temp_home, "plan", "--gpu-memory", "80GiB", "--tensor-parallel-size", "4", "--json")
    assert json.loads(r.stdout)["ledger"]["tensor_parallel_size"] == 4  # a flag wins over the profile
