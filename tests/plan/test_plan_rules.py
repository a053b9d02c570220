"""``conduit plan`` knows what vLLM 0.32 checks at start-up (docs/cases.md C31, C32): RoPE scaling, every
tensor-parallel divisibility rule (a refused size is never offered), quantization against the GPU's compute
capability, GGUF's plugin; and the launch preflight applies the same rules.

Expected values are worked out here from vLLM 0.32's sources (quoted per test), not read back from the code."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conduit.daemon.config.vllm import VllmSettings
from conduit.daemon.config.vllmrules import TpShape
from conduit.daemon.plan.errors import ModelError, PlanArgumentError
from conduit.daemon.plan.ledger import Verdict, plan
from conduit.daemon.plan.model import ModelInfo, inspect_model
from conduit.daemon.plan.parallel import Parallel, check, padded_vocab, valid_tp
from conduit.daemon.plan.scaling import candidates
from conduit.daemon.plan.settings import PlanSettings
from conduit.daemon.vllm.preflight import preflight_model

BASE = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 8192, "num_hidden_layers": 80,
        "num_attention_heads": 64, "num_key_value_heads": 8, "vocab_size": 152064, "torch_dtype": "float16",
        "max_position_embeddings": 32768}
# Qwen2-72B's shape with an AWQ quantization_config (docs/cases.md C32)
AWQ_72B = dict(BASE, intermediate_size=29568,
               quantization_config={"quant_method": "awq", "group_size": 128, "bits": 4, "zero_point": True})


def _model(tmp_path: Path, cfg: dict[str, Any], name: str = "m") -> ModelInfo:
    d = tmp_path / name
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps(cfg), encoding="utf-8")
    return inspect_model(d)


def test_c32_awq_group_size_refused_before_launch_with_valid_sizes(tmp_path: Path) -> None:
    """docs/cases.md C32: 29,568 / 4 = 7,392 is not a multiple of 128 (auto_awq.py create_weights: "The input
    size is not aligned with the quantized weight shape. This can be caused by too large tensor parallel
    size.")."""
    info = _model(tmp_path, AWQ_72B)
    assert info.quant_group_size == 128
    with pytest.raises(PlanArgumentError) as e:
        plan(info, {"gpu_memory": "80GiB", "tensor_parallel_size": 4})
    assert "29,568 / 4 = 7,392 is not a multiple of the quantization group size 128" in str(e.value)
    # 29568 = 128 x 231: only TP 1 keeps whole groups on every GPU among the sizes dividing 64 heads
    assert e.value.hint is not None and e.value.hint.endswith(": 1")
    # the same rule before a launch
    d = preflight_model(VllmSettings(model=info.path, tensor_parallel_size=4))
    assert d is not None and d.kind == "tensor_parallel" and "7,392" in d.reason and "one of 1 (" in d.fix
    assert preflight_model(VllmSettings(model=info.path)) is None


def test_padded_intermediate_size_allows_tp_8(tmp_path: Path) -> None:
    info = _model(tmp_path, dict(AWQ_72B, intermediate_size=29696))  # 29696 = 128 x 232
    check(info, Parallel(8))
    assert valid_tp(info, Parallel(1)) == [1, 2, 4, 8]


@st.composite
def _shapes(draw: st.DrawFn) -> tuple[int, int, int, int | None]:
    kv = draw(st.sampled_from([1, 2, 4, 8, 16, 32]))
    heads = kv * draw(st.integers(1, 8))
    inter = draw(st.integers(1, 64)) * draw(st.sampled_from([1, 32, 64, 96, 128, 384]))
    group = draw(st.sampled_from([None, 32, 64, 128]))
    return heads, kv, inter, group


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_shapes())
def test_a_refused_tp_size_never_appears_in_a_hint(tmp_path: Path, shape: tuple[int, int, int, int | None]) -> None:
    heads, kv, inter, group = shape
    cfg: dict[str, Any] = {"model_type": "llama", "num_hidden_layers": 4, "num_attention_heads": heads,
                           "num_key_value_heads": kv, "head_dim": 64, "hidden_size": 64 * heads,
                           "intermediate_size": inter, "vocab_size": 32000}
    if group:
        cfg["quantization_config"] = {"quant_method": "gptq", "group_size": group, "bits": 4}
    info = _model(tmp_path, cfg, f"m{heads}-{kv}-{inter}-{group}")

    def vllm_accepts(t: int) -> bool:  # the rules, written out from vLLM's sources
        return (heads % t == 0 and (kv % t == 0 if t < kv else t % kv == 0) and inter % t == 0
                and (not group or (inter // t) % group == 0) and padded_vocab(32000) % t == 0)

    sizes = valid_tp(info, Parallel(1))
    assert sizes == [t for t in range(1, max(heads, 8) + 1) if vllm_accepts(t)]
    for t in range(1, max(heads, 8) + 1):
        if vllm_accepts(t):
            check(info, Parallel(t))
            continue
        with pytest.raises(PlanArgumentError) as e:
            check(info, Parallel(t))
        hinted = e.value.hint.rsplit(": ", 1)[-1].split(", ") if e.value.hint and ": " in e.value.hint else []
        assert str(t) not in hinted and all(vllm_accepts(int(h)) for h in hinted)
    assert all(vllm_accepts(tp) for tp, _ in candidates(info, PlanSettings(gpu_memory_bytes=1)))
    assert TpShape(heads, kv, inter, group, 32000).valid_sizes(max(heads, 8)) == sizes


def test_compute_capability_7_0_refuses_awq_naming_the_minimum(tmp_path: Path) -> None:
    """vllm/config/vllm.py _get_quantization_config: "The quantization method awq is not supported for the
    current GPU. Minimum capability: 75. Current capability: 70." (AutoAWQConfig.get_min_capability = 75)."""
    info = _model(tmp_path, dict(AWQ_72B, intermediate_size=29696))
    with pytest.raises(PlanArgumentError) as e:
        plan(info, {"gpu_memory": "32GiB", "gpu_capability": 70, "tensor_parallel_size": 8})
    assert "needs compute capability 7.5 or newer; this GPU has 7.0" in str(e.value)
    assert e.value.hint is not None and "gptq" in e.value.hint
    led = plan(info, {"gpu_memory": "80GiB", "gpu_capability": 75, "tensor_parallel_size": 8})
    assert led.verdict is not Verdict.DOES_NOT_FIT or led.tensor_parallel_size == 8
    with pytest.raises(PlanArgumentError) as e:  # cuda.py check_if_supports_dtype: bfloat16 needs 8.0
        plan(_model(tmp_path, dict(BASE, intermediate_size=29696), "bf"),
             {"gpu_memory": "80GiB", "gpu_capability": 70, "dtype": "bfloat16", "tensor_parallel_size": 8})
    assert "7.0" in str(e.value) and e.value.hint is not None and 'dtype = "float16"' in e.value.hint


def test_gguf_needs_the_plugin(tmp_path: Path) -> None:
    f = tmp_path / "model-Q4_K_M.gguf"
    f.write_bytes(b"GGUF\x03\x00\x00\x00")
    with pytest.raises(ModelError) as e:
        inspect_model(f)
    assert e.value.hint is not None and "vllm-gguf-plugin" in e.value.hint
    d = preflight_model(VllmSettings(model=str(f)))
    assert d is not None and d.kind == "quantization_plugin" and "vllm-gguf-plugin" in d.fix
    info = _model(tmp_path, dict(BASE, intermediate_size=29696, quantization_config={"quant_method": "gguf"}))
    with pytest.raises(PlanArgumentError, match="vllm-gguf-plugin"):
        plan(info, {"gpu_memory": "80GiB", "tensor_parallel_size": 8})


# vLLM 0.32 vllm/config/model.py _get_and_verify_max_len: the smallest length key, then for each RoPE
# parameter set whose rope_type is not one of "su", "longrope", "llama3", "yarn", "deepseek_yarn",
# "deepseek_llama_scaling", derived_max_model_len *= factor (Gemma 3 never). YaRN is not scaled again.
@pytest.mark.parametrize(("rope", "limit"), [
    ({"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 40960}, 40960),
    ({"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}, 40960),
    ({"rope_type": "linear", "factor": 2.0}, 81920),
    ({"type": "dynamic", "factor": 4.0}, 163840),
    ({"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 8192}, 40960),
    ({"rope_type": "longrope", "factor": 4.0, "original_max_position_embeddings": 4096}, 40960),
    ({"rope_type": "default"}, 40960),
])
def test_c31_rope_scaling_limit_follows_vllm(tmp_path: Path, rope: dict[str, Any], limit: int) -> None:
    """docs/cases.md C31: a YaRN model is not refused at the length vLLM accepts, and one token above is
    refused naming vLLM's limit (tests/vllm/test_real_diagnoses.py checks YaRN against the real binary)."""
    cfg = dict(BASE, intermediate_size=29696, max_position_embeddings=40960, rope_scaling=rope)
    info = _model(tmp_path, cfg)
    assert info.max_len_limit == limit
    ok = plan(info, {"device": "cpu", "cpu_kvcache_space_bytes": 512 << 30, "max_model_len": limit})
    assert ok.verdict is not Verdict.DOES_NOT_FIT, ok.summary
    over = plan(info, {"device": "cpu", "cpu_kvcache_space_bytes": 512 << 30, "max_model_len": limit + 1})
    assert over.verdict is Verdict.DOES_NOT_FIT and f"{limit:,}" in over.summary.replace(str(limit), f"{limit:,}")


def test_nvml_capability_7_0_refuses_awq(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The GPU's compute capability comes from the NVML reader (faked by ``$CONDUIT_FAKE_GPUS``, the reader's
    own test hook: conduit.daemon.agent.gpu.FakeNvml)."""
    from conduit.daemon.cli.plan import run_plan

    v100 = {"devices": [{"name": "Tesla V100-SXM2-32GB", "uuid": "GPU-0", "total": 32 << 30, "used": 0,
                         "free": 32 << 30, "capability": [7, 0]}]}
    (tmp_path / "gpus.json").write_text(json.dumps(v100))
    monkeypatch.setenv("CONDUIT_FAKE_GPUS", str(tmp_path / "gpus.json"))
    info = _model(tmp_path, dict(AWQ_72B, intermediate_size=29696))
    with pytest.raises(PlanArgumentError, match=r"needs compute capability 7\.5 or newer; this GPU has 7\.0"):
        run_plan(info.path, {"tensor_parallel_size": 8})
    v100["devices"][0]["capability"] = [8, 0]
    (tmp_path / "gpus.json").write_text(json.dumps(v100))
    out = run_plan(info.path, {"tensor_parallel_size": 8})
    assert out["gpu"]["capability"] == 80 and out["ledger"]["tensor_parallel_size"] == 8
