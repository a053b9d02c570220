"""The launch preflight applies ``conduit plan``'s model rules (daemon/config/vllmrules.py) before anything
starts: a tensor-parallel size that breaks a divisibility rule of the model's config.json (docs/cases.md C27,
C32), and a GGUF model, are refused by the supervisor without launching (the fake vLLM of tests/helpers)."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from helpers.paths import HELPERS

from conduit.daemon.config.vllm import VllmSettings
from conduit.daemon.vllm.supervisor import Supervisor, VllmState


def _refused(model: str, **kw: Any) -> tuple[dict[str, Any], bool]:
    s = VllmSettings.model_validate({"model": model, "served_model_name": "fake", "port": 1,
                                     "command": [sys.executable, str(HELPERS / "fake_vllm.py")],
                                     "startup_timeout_s": 20, "stop_grace_s": 3, **kw})

    async def main() -> tuple[dict[str, Any], bool]:
        sup = Supervisor(s, memory_probe=lambda: None)
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
