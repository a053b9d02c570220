"""Start-up failure diagnosis: real vLLM 0.32 log tails (tests/data, captured from runs of the CPU build) and
the GPU-only texts as vLLM 0.32's sources format them."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest
from helpers.paths import TESTS

from conduit.daemon.vllm.causes import round_len
from conduit.daemon.vllm.diagnose import (
    diagnose,
    find_kv_cache_line,
    gpu_memory_diagnosis,
    timeout_diagnosis,
)

DATA = TESTS / "data"


def _log(name: str) -> str:
    return (DATA / f"vllm-0.32-fail-{name}.log").read_text()


def test_real_unknown_flag() -> None:
    d = diagnose(_log("unknown"), exit_code=2)
    assert d.kind == "unknown_argument"
    assert "--swap-space" in d.reason
    assert "0.18" in d.fix


def test_real_missing_model_path() -> None:
    d = diagnose(_log("missing"), exit_code=1, model="/tmp/vx/nope")
    assert d.kind == "model_not_found"
    assert "/tmp/vx/nope" in d.reason
    assert "[vllm].model" in d.fix


def test_real_max_model_len_above_model_limit() -> None:
    d = diagnose(_log("mml"), exit_code=1)
    assert d.kind == "max_model_len_too_long"
    assert "4096" in d.reason and "512" in d.reason
    assert "max_model_len = 512" in d.fix


def test_real_port_in_use() -> None:
    d = diagnose(_log("port"), exit_code=1, port=18003)
    assert d.kind == "port_in_use"
    assert "18003" in d.reason and "[vllm].port" in d.fix


# Texts below are vLLM 0.32's f-strings (vllm/v1/worker/utils.py, vllm/v1/core/kv_cache_utils.py) filled in,
# behind the "Engine core initialization failed" wrapper that follows the root cause.
WRAP = (
    "(EngineCore pid=77) ERROR 11-30 10:00:00 [core.py:1000] EngineCore failed to start.\n"
    "{cause}\n"
    "(APIServer pid=70) RuntimeError: Engine core initialization failed. See root cause above. "
    "Failed core proc(s): {{}}\n"
)


def test_gpu_free_memory_below_utilization_with_numbers() -> None:
    cause = ("ValueError: Free memory on device cuda:0 (10.5/79.19 GiB) on startup is less than desired GPU memory "
             "utilization (0.9, 71.27 GiB). Decrease GPU memory utilization or reduce GPU memory used by other "
             "processes.")
    d = diagnose(WRAP.format(cause=cause), exit_code=1)
    assert d.kind == "gpu_memory"
    assert "10.50 GiB free of 79.19 GiB" in d.reason and "0.9" in d.reason
    assert "gpu_memory_utilization to 0.11" in d.fix


def test_kv_cache_estimated_max_len_is_the_fix() -> None:
    cause = ("ValueError: To serve at least one request with the model's max seq len (32768), (4.00 GiB KV cache is "
             "needed, which is larger than the available KV cache memory (1.25 GiB). Based on the available memory, "
             "the estimated maximum model length is 10240. Try increasing `gpu_memory_utilization` ...")
    d = diagnose(WRAP.format(cause=cause), exit_code=1)
    assert d.kind == "kv_cache_max_len"
    assert "10240" in d.reason and "max_model_len = 8192" in d.fix  # the round value under vLLM's estimate


def test_no_memory_for_kv_cache_blocks() -> None:
    cause = "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` ..."
    d = diagnose(WRAP.format(cause=cause), exit_code=1)
    assert d.kind == "kv_cache_none" and "gpu_memory_utilization" in d.fix


def test_cuda_oom_lowers_max_num_seqs_first() -> None:
    cause = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity "
             "of 23.65 GiB of which 1.12 GiB is free.")
    d = diagnose(WRAP.format(cause=cause), exit_code=1)
    assert d.kind == "cuda_oom" and "2.00 GiB" in d.reason
    assert d.fix.index("max_num_seqs") < d.fix.index("max_model_len")


def test_unmatched_failure_names_the_last_error_line() -> None:
    d = diagnose("INFO starting\nTraceback (most recent call last):\n  File \"x.py\"\nRuntimeError: weird thing\n",
                 exit_code=1)
    assert d.kind == "exited" and "weird thing" in d.reason and "status 1" in d.reason


def test_timeout_names_the_last_line() -> None:
    d = timeout_diagnosis(30, "(Worker pid=9) INFO 11-30 09:02:51 [weight_utils.py:1] Loading weights\n\n")
    assert d.kind == "startup_timeout" and "30 s" in d.reason and "Loading weights" in d.reason
    assert "startup_timeout_s" in d.fix


def test_preflight_wording_matches_vllms_own() -> None:
    g = 1024**3
    d = gpu_memory_diagnosis(int(10.5 * g), int(79.19 * g), 0.9, "0")
    assert d.kind == "gpu_memory" and "10.50 GiB free of 79.19 GiB" in d.reason


@pytest.mark.parametrize("prefix", ["CPU", "GPU"])
def test_kv_cache_line(prefix: str) -> None:
    text = ("a\n(EngineCore pid=6996) INFO 11-30 09:02:52 [kv_cache_utils.py:2327] "
            f"{prefix} KV cache size: 1,048,576 tokens, Maximum concurrency for 256 tokens per request: 4096.00x\nb\n")
    lineno, line, tokens = find_kv_cache_line(text) or (0, "", 0)
    assert (lineno, tokens) == (2, 1048576) and line.startswith("(EngineCore")
    assert find_kv_cache_line("nothing here") is None


CORPUS: list[dict[str, Any]] = json.loads((DATA / "vllm_messages" / "corpus.json").read_text())["messages"]


@pytest.mark.parametrize("case", CORPUS, ids=[f"{c['kind']}:{c['version']}" for c in CORPUS])
def test_corpus_message_is_recognised_with_its_numbers(case: dict[str, Any]) -> None:
    """Every wording of every release line: the right kind, the log's numbers in the reason, the fix."""
    d = diagnose(WRAP.format(cause=case["text"]), exit_code=case["exit_code"], port=case.get("port"),
                 model=case.get("model"))
    assert d.kind == case["kind"], d
    for want in case["expect"]["reason"]:
        assert want in d.reason, (want, d.reason)
    for want in case["expect"]["fix"]:
        assert want in d.fix, (want, d.fix)


def test_corpus_has_two_wordings_of_every_kind() -> None:
    counts = Counter(c["kind"] for c in CORPUS)
    assert min(counts.values()) >= 2, counts
    assert {"kv_cache_max_len", "gpu_memory", "cuda_oom", "port_in_use", "internal_port_in_use",
            "model_not_found", "unknown_argument", "max_model_len_too_long", "kv_cache_none"} <= set(counts)


def test_internal_port_is_not_blamed_on_the_api_port() -> None:
    text = ("torch.distributed.DistNetworkError: The server socket has failed to listen on any local network "
            "address. port: 41733, useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use")
    d = diagnose(text, exit_code=1, port=8000)
    assert d.kind == "internal_port_in_use"
    assert "port 41733" in d.reason and "not [vllm].port (8000)" in d.reason
    assert "set [vllm].port" not in d.fix and "sport = :41733" in d.fix


def test_internal_pattern_on_the_configured_port_is_the_api_port() -> None:
    d = diagnose("zmq.error.ZMQError: Address already in use (addr='tcp://127.0.0.1:8000')", exit_code=1, port=8000)
    assert d.kind == "port_in_use" and "port 8000" in d.reason and "[vllm].port" in d.fix


def test_real_config_only_directory_names_the_tokenizer() -> None:
    """vLLM 0.32 on a directory with only config.json (captured here): the tokenizer is what it misses first."""
    log = (DATA / "vllm_messages" / "vllm-0.32-fail-config-only-dir.log").read_text()
    d = diagnose(log, exit_code=1, model="/models/config-only")
    assert d.kind == "tokenizer_not_found" and "/models/config-only" in d.reason
    assert "tokenizer.json" in d.fix


def test_real_directory_without_weights() -> None:
    """vLLM 0.32 on config.json + tokenizer, no *.safetensors (captured here): the worker's error, wrapped."""
    log = (DATA / "vllm_messages" / "vllm-0.32-fail-no-weights.log").read_text()
    d = diagnose(log, exit_code=1, model="/models/no-weights")
    assert d.kind == "weights_not_found" and "/models/no-weights has no weight files" in d.reason
    assert "safetensors" in d.fix and "[vllm].model" in d.fix


@pytest.mark.parametrize(("tokens", "want"), [(10240, 8192), (27296, 24576), (32768, 32768), (114432, 98304),
                                              (1808, 1536), (112, 96), (3, 16)])
def test_round_len_is_a_value_a_person_would_set(tokens: int, want: int) -> None:
    assert round_len(tokens) == want


def test_a_zero_or_odd_number_in_the_log_never_crashes_the_diagnosis() -> None:
    """A tiny model's need prints as "0.0 GiB" (vLLM 0.32 rounds to two decimals); a review found a
    ZeroDivisionError there, raised inside the supervisor's exit handler."""
    text = ("ValueError: To serve at least one request with the models's max seq len (4096), (0.0 GiB KV cache is "
            "needed, which is larger than the available KV cache memory (0.0 GiB).")
    d = diagnose(text, exit_code=1)
    assert d.kind == "kv_cache_max_len" and "4096" in d.reason
    odd = "Free memory on device (cuda:0) (.  /79.1 GiB) on startup is less than desired GPU memory utilization"
    assert diagnose(odd, exit_code=1).kind  # some diagnosis, no exception
