"""`conduit doctor --live`: channels probed now, GPUs, vLLM state; exit 0 only when everything is healthy.

Real local gateways on loopback; with and without a running agent.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from helpers.agentproc import AgentProc, Gateway, fake_gpu
from helpers.toolfiles import write_profile


def doctor_live(home: Path, env: dict[str, str] | None = None) -> tuple[int, dict]:
    env = dict(env or os.environ, HOME=str(home))
    r = subprocess.run([sys.executable, "-m", "conduit.daemon.cli", "doctor", "--live", "--json"], env=env,
                       capture_output=True, text=True, timeout=120)
    assert "Traceback" not in r.stderr, r.stderr
    return r.returncode, json.loads(r.stdout)


def test_healthy_gateway_direct_probes(temp_home: Path) -> None:
    gw = Gateway({"/api/v1/models": 200})
    try:
        write_profile(temp_home, gw.url + "/api", tools=())
        env = dict(os.environ, CONDUIT_AGENT_SOCKET=str(temp_home / "no-agent.sock"))
        rc, rep = doctor_live(temp_home, env)
        live = rep["live"]
        assert live["source"] == "direct"
        assert {p: v["verdict"] for p, v in live["channels"]["gw"]["protocols"].items()} == {
            "openai": "ok", "anthropic": "ok"}
        assert live["problems"] == [] and rc == 0
        assert "sk-test-abc" not in json.dumps(rep)
        assert {h["authorization"] for _, h in gw.seen} == {"Bearer sk-test-abc"}
    finally:
        gw.close()


def test_refused_key_and_wrong_prefix_make_it_unhealthy(temp_home: Path) -> None:
    gw = Gateway({"/api/v1/models": 401})
    try:
        write_profile(temp_home, gw.url + "/api", tools=())
        env = dict(os.environ, CONDUIT_AGENT_SOCKET=str(temp_home / "no-agent.sock"))
        rc, rep = doctor_live(temp_home, env)
        assert rc == 1
        assert any("auth" in p and "key was refused" in p for p in rep["live"]["problems"]), rep["live"]["problems"]
        gw.routes = {"/v1/models": 200}  # the gateway really serves at the root, not under /api
        rc, rep = doctor_live(temp_home, env)
        proto = rep["live"]["channels"]["gw"]["protocols"]["openai"]
        assert rc == 1 and proto["verdict"] == "path" and proto["working_base"] == gw.url + "/v1"
    finally:
        gw.close()


def test_through_a_running_agent(temp_home: Path) -> None:
    gw = Gateway({"/api/v1/models": 200})
    try:
        write_profile(temp_home, gw.url + "/api", tools=())
        with AgentProc(temp_home, gpus={"devices": [fake_gpu(0)]}) as agent:
            agent.wait_for("/v1/gpus", lambda b: b["gpus"])
            rc, rep = doctor_live(temp_home, agent.env)
        live = rep["live"]
        assert live["source"] == "agent" and rc == 0, live["problems"]
        assert live["gpus"]["gpus"][0]["uuid"] == "GPU-fake-0"
        assert live["channels"]["gw"]["healthy"] is True
        assert live["vllm"]["state"] == "not_configured"
    finally:
        gw.close()
