"""``conduit plan --disaggregated``: a prefill and a decode instance's ledgers (daemon/plan/disagg.py) and the KV
connector's extra memory as vLLM 0.32.0's NixlConnector source gives it. With GPUs for both, each instance's
ledger is the one-engine ledger; with fewer, both share them with half the memory each (utilization halved, or
half an explicit KV budget), and the output says so and advises against it.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from test_ledger import TINY, write_model  # noqa: E402

from conduit.daemon.plan.disagg import connector_memory, plan_disaggregated
from conduit.daemon.plan.errors import PlanArgumentError
from conduit.daemon.plan.ledger import plan
from conduit.daemon.plan.model import inspect_model
from conduit.units import GiB

LLAMA8B = {  # meta-llama/Meta-Llama-3-8B's published config.json
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
    "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "max_position_embeddings": 8192,
    "vocab_size": 128256, "torch_dtype": "bfloat16",
}
S80 = {"gpu_memory_bytes": 80 * GiB, "max_model_len": 8192}


def test_two_gpus_give_each_instance_the_one_engine_ledger(tmp_path: Path) -> None:
    info = inspect_model(write_model(tmp_path / "m", LLAMA8B))
    d = plan_disaggregated(info, {**S80, "gpus_available": 2})
    one = plan(info, {**S80, "gpus_available": 1}).to_dict()  # one GPU each
    assert d["mode"] == "separate" and d["gpus_needed"] == 2 and d["gpus_per_instance"] == 1
    assert [i["role"] for i in d["instances"]] == ["prefill", "decode"]
    assert [i["kv_role"] for i in d["instances"]] == ["kv_producer", "kv_consumer"]
    assert d["instances"][0]["ledger"] == one and d["instances"][1]["ledger"] == one
    c = d["connector"]
    assert c["connector"] == "NixlConnector" and c["device_bytes"] == 0 and c["host_bytes"] == 0
    assert c["host_bytes_with_cpu_buffer"] == one["kv_budget_bytes"] > 0
    assert "nixl/base_worker.py" in c["source"] and "not documented" in c["undocumented"][0]
    assert "P2pNcclConnector" in c["not_planned"][0]
    assert any("does not raise throughput" in n for n in d["notes"])


def test_one_gpu_halves_each_instance_and_advises_against(tmp_path: Path) -> None:
    info = inspect_model(write_model(tmp_path / "m", LLAMA8B))
    d = plan_disaggregated(info, {**S80, "gpus_available": 1})
    one = plan(info, S80).to_dict()
    assert d["mode"] == "shared"
    for inst in d["instances"]:
        led = inst["ledger"]
        assert led["gpu_memory_utilization"] == pytest.approx(0.46)
        assert led["requested_bytes"] == math.ceil(80 * GiB * 0.46)
        # the same weights and overhead in half the memory: the KV budget shrinks by the whole difference
        assert led["kv_budget_bytes"] == one["kv_budget_bytes"] - (one["requested_bytes"] - led["requested_bytes"])
    assert any("share them" in n and "not advised" in n for n in d["notes"])


def test_tensor_parallel_instances_need_twice_the_gpus(tmp_path: Path) -> None:
    info = inspect_model(write_model(tmp_path / "m", LLAMA8B))
    d = plan_disaggregated(info, {**S80, "tensor_parallel_size": 2, "gpus_available": 2})
    assert d["gpus_needed"] == 4 and d["gpus_per_instance"] == 2 and d["mode"] == "shared"
    unknown = plan_disaggregated(info, S80)
    assert unknown["mode"] == "separate" and any("GPU count unknown" in n for n in unknown["notes"])


def test_an_explicit_kv_budget_is_halved_when_shared(tmp_path: Path) -> None:
    info = inspect_model(write_model(tmp_path / "m", LLAMA8B))
    d = plan_disaggregated(info, {**S80, "kv_cache_memory_bytes": 8 * GiB, "gpus_available": 1})
    assert d["instances"][1]["ledger"]["kv_budget_bytes"] == 4 * GiB


def test_a_cpu_kv_buffer_costs_a_host_copy_of_the_kv_cache(tmp_path: Path) -> None:
    led = plan(inspect_model(write_model(tmp_path / "m", LLAMA8B)), S80)
    assert connector_memory(led, "cpu")["host_bytes"] == led.kv_budget_bytes
    with pytest.raises(PlanArgumentError, match="kv_buffer_device"):
        connector_memory(led, "nvme")


def test_the_command_prints_both_instances_and_the_connector(capsys: pytest.CaptureFixture[str],
                                                             monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from conduit.daemon.cli.main import main

    monkeypatch.setenv("CONDUIT_FAKE_GPUS", str(tmp_path / "no-such-gpu-set.json"))
    monkeypatch.setenv("COLUMNS", "200")
    model = write_model(tmp_path / "tiny", TINY)
    base = ["plan", str(model), "--dtype", "float32", "--max-model-len", "256", "--gpu-memory", "16GiB"]
    assert main([*base, "--gpus", "2", "--disaggregated"]) == 0
    out = capsys.readouterr().out
    assert "prefill instance" in out and "decode instance" in out and "kv_producer" in out
    assert out.count("vLLM memory ledger per GPU") == 2 and "NixlConnector" in out
    assert "not documented by vLLM" in out and "does not raise throughput" in out
    assert main([*base, "--gpus", "1", "--disaggregated", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["disaggregated"]["mode"] == "shared" and doc["ledger"]["gpu_memory_utilization"] == 0.92
    assert doc["disaggregated"]["instances"][0]["ledger"]["gpu_memory_utilization"] == pytest.approx(0.46)
