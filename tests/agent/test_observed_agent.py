"""The agent observing an engine it did not start (``[vllm] manage = false``), end to end: a real ``conduit agent``,
a real sync daemon and real tool files (tests/helpers/fallbackrig.py), the engine started by the test itself:
tests/helpers/fake_vllm.py in its own session, or the Ollama stand-in (tests/helpers/fake_ollama.py).

Covered: ``conduit status`` shows the observed engine with its live figures; ``conduit vllm stop`` and the
socket's ``POST /v1/vllm/stop`` are refused naming ``manage = false`` and the engine keeps running; a kill of the
engine moves the tools to the fallback and its return moves them back; ``conduit wait --vllm-ready``; an observed
Ollama's loaded model and window in ``conduit status``, and the window in the ``local`` channel's catalog.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from helpers.agentproc import AgentProc, conduit_exe, request
from helpers.fake_ollama import FakeOllama
from helpers.fallbackrig import FAKE, Rig, free_port

from conduit.daemon.catalog.models import read_cache

AFTER_S = 1.0


def start_fake(port: int, log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen([sys.executable, FAKE, "--model", "fake", "--port", str(port)], stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)


def conduit(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([conduit_exe(), *args], env=env | {"COLUMNS": "200", "NO_COLOR": "1"},
                          capture_output=True, text=True, timeout=90)


def test_an_observed_vllm_gives_status_refuses_stop_and_drives_the_fallback(temp_home: Path, tmp_path: Path) -> None:
    port, log = free_port(), tmp_path / "engine.log"
    table = (f'[vllm]\nmodel = "fake"\nmanage = false\nurl = "http://127.0.0.1:{port}/v1"\n'
             f'health_interval_s = 0.2\nmetrics_interval_s = 0.3\nlog_command = "tail -n 100 {log}"\n')
    engines = [start_fake(port, log)]
    try:
        with Rig(temp_home, tmp_path, after_s=AFTER_S, vllm=table, port=port) as rig:
            assert rig.agent is not None
            env = rig.agent.env
            rig.wait_route("primary")
            rig.agent.wait_for("/v1/vllm", lambda b: b.get("metrics") is not None, timeout=20)
            r = conduit(env, "status")
            assert r.returncode == 0, r.stderr
            assert "observed vllm, manage = false" in r.stdout and "live: KV cache 0%" in r.stdout, r.stdout
            assert f"at http://127.0.0.1:{port}/v1, model fake" in r.stdout

            r = conduit(env, "vllm", "stop")
            assert r.returncode == 1 and "manage = false" in r.stderr, (r.stdout, r.stderr)
            status, body = request(rig.agent.sock, "POST", "/v1/vllm/stop")
            assert status == 409 and body["error"] == "vllm_refused" and "manage = false" in body["message"]
            assert engines[0].poll() is None and rig.vllm()["state"] == "ready"
            assert conduit(env, "wait", "--vllm-ready", "--timeout", "10s").returncode == 0

            os.killpg(engines[0].pid, signal.SIGKILL)  # the engine dies under its owner
            engines[0].wait()
            rig.wait_route("fallback", timeout=AFTER_S + 30)
            snap = rig.vllm()
            assert snap["state"] in ("unhealthy", "failed") and snap["last_failure"]["kind"] == "unreachable"
            routing = rig.status()["routing"]
            assert routing["active"] == "fallback" and "vLLM" in routing["why"], routing

            engines.append(start_fake(port, log))  # its owner starts it again
            rig.wait_route("primary", timeout=AFTER_S + 30)
            assert rig.vllm_wait("ready")["managed"] is False
    finally:
        for p in engines:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def test_an_observed_ollama_shows_its_models_and_gives_the_tools_its_window(temp_home: Path) -> None:
    with FakeOllama(models={"qwen2.5:0.5b": 32768}) as fake:
        fake.load("qwen2.5:0.5b", context_length=8192)
        p = temp_home / ".config" / "conduit" / "profile.toml"
        p.parent.mkdir(parents=True)
        p.write_text(f'version = 1\nchannel = "local"\nmodel = "qwen2.5:0.5b"\n\n[vllm]\nmodel = "qwen2.5:0.5b"\n'
                     f'manage = false\nurl = "{fake.url}"\nhealth_interval_s = 0.2\n')
        with AgentProc(temp_home) as agent:
            snap = agent.wait_for("/v1/vllm", lambda b: b.get("state") == "ready" and b.get("ollama"), timeout=30)
            assert snap["engine"] == "ollama" and snap["ollama"]["window"]["tokens"] == 8192
            r = conduit(agent.env, "status")
            assert r.returncode == 0, r.stderr
            assert "observed ollama, manage = false" in r.stdout
            assert "loaded: qwen2.5:0.5b 2.00 GiB, 100% in GPU memory, context 8,192" in r.stdout, r.stdout
            # the tools' window: the local channel's /v1/models says none; the engine's /api/ps does
            agent.wait_for("/v1/channels", lambda b: b["channels"].get("local", {}).get("healthy"), timeout=30)
            cached = read_cache("local")
            assert cached is not None and cached.find("qwen2.5:0.5b") is not None
            assert cached.find("qwen2.5:0.5b").context_window == 8192  # type: ignore[union-attr]
            assert ("GET", "/api/ps") in fake.requests
