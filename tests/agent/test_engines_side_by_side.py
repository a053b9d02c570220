"""Several engines side by side: a supervised ``[vllm]`` (tests/helpers/fake_vllm.py launched by the agent) and two
``[engines.NAME]`` observed beside it, started by the test itself: a vLLM stand-in in its own session and the
Ollama stand-in (tests/helpers/fake_ollama.py). A real ``conduit agent`` on a real socket, real loopback HTTP.

Covered: ``conduit status`` (text and ``--json``) shows each engine with its own state, URL, metrics or loaded
models; a bad ``[engines.NAME]`` table is named in its own entry and the others go on; an Ollama engine's window
lands in the catalog of the channel pointing at it; the primary channel pointing at an observed engine takes that
engine's state as fallback evidence: killed -> tools to the fallback, back -> primary.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from helpers.agentproc import AgentProc, conduit_exe, request
from helpers.fake_ollama import FakeOllama
from helpers.fallbackrig import FAKE, free_port

from conduit.daemon.catalog.models import read_windows
from conduit.daemon.verify.gateway import RecordingGateway

AFTER_S = 1.0


def start_fake(port: int, log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen([sys.executable, FAKE, "--model", "box-model", "--port", str(port)], stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)


def conduit(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([conduit_exe(), *args], env=env | {"COLUMNS": "220", "NO_COLOR": "1"},
                          capture_output=True, text=True, timeout=90)


def profile(box: int, ollama: str, hosted: str, local: int) -> str:
    return (f'version = 1\nchannel = "box"\nmodel = "box-model"\n\n'
            f'[channels.box]\nbase_url = "http://127.0.0.1:{box}/v1"\nprotocols = ["openai"]\n\n'
            f'[channels.olla]\nbase_url = "{ollama}/v1"\nprotocols = ["openai"]\n\n'
            f'[channels.hosted]\nbase_url = "{hosted}/api"\nprotocols = ["openai", "anthropic"]\n\n'
            f'[fallback]\nchannel = "hosted"\nmodel = "hosted-model"\nafter_s = {AFTER_S}\n\n'
            f'[vllm]\nmodel = "fake-model"\nserved_model_name = "fake"\nport = {local}\n'
            f'command = ["{sys.executable}", "{FAKE}"]\nhealth_interval_s = 0.2\nstop_grace_s = 3\n\n'
            f'[engines.box]\nurl = "http://127.0.0.1:{box}"\nmodel = "box-model"\nhealth_interval_s = 0.2\n'
            f'metrics_interval_s = 0.3\n\n'
            f'[engines.olla]\nurl = "{ollama}"\nmodel = "qwen2.5:0.5b"\nengine = "ollama"\nhealth_interval_s = 0.2\n\n'
            f'[engines.typo]\nurl = "http://127.0.0.1:1"\nmodle = "x"\n')


def test_engines_side_by_side_in_status_with_their_own_evidence(temp_home: Path, tmp_path: Path) -> None:
    box, log = free_port(), tmp_path / "box.log"
    procs = [start_fake(box, log)]
    hosted = RecordingGateway(models=("hosted-model",))
    hosted.start()
    try:
        with FakeOllama(models={"qwen2.5:0.5b": 32768}) as fake:
            fake.load("qwen2.5:0.5b", context_length=8192)
            p = temp_home / ".config" / "conduit" / "profile.toml"
            p.parent.mkdir(parents=True)
            p.write_text(profile(box, fake.url, hosted.root, free_port()))
            with AgentProc(temp_home, args=["--probe-interval", "30"]) as agent:
                try:
                    story(agent, box, procs, log)
                finally:  # the agent leaves its own vLLM serving for adoption: stop it
                    request(agent.sock, "POST", "/v1/vllm/stop", timeout=30)
    finally:
        hosted.stop()
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def story(agent: AgentProc, box: int, procs: list[subprocess.Popen[bytes]], log: Path) -> None:
    body = agent.wait_for("/v1/status", lambda b: all(
        (b.get("engines") or {}).get(n, {}).get("state") == "ready" for n in ("box", "olla"))
        and (b["engines"]["box"].get("metrics") is not None) and b["vllm"]["state"] == "ready",
        timeout=60)
    eng = body["engines"]
    assert eng["box"]["engine"] == "vllm" and eng["box"]["base_url"] == f"http://127.0.0.1:{box}"
    assert eng["olla"]["ollama"]["window"]["tokens"] == 8192
    assert eng["typo"]["state"] == "error" and "[engines.typo].modle" in eng["typo"]["message"]
    assert read_windows("olla") == {"qwen2.5:0.5b": 8192}  # the channel pointing at it

    r = conduit(agent.env, "status")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "vLLM: ready" in out and "engine box: ready" in out and "engine olla: ready" in out, out
    assert f"at http://127.0.0.1:{box}/v1, model box-model" in out and "live: KV cache 0%" in out
    assert "loaded: qwen2.5:0.5b 2.00 GiB" in out and "engine typo: error" in out, out
    r = conduit(agent.env, "status", "--json")
    assert r.returncode == 0, r.stderr
    assert set(json.loads(r.stdout)["engines"]) == {"box", "olla", "typo"}

    agent.wait_for("/v1/status", lambda b: (b.get("routing") or {}).get("active") == "primary",
                   timeout=30)
    os.killpg(procs[0].pid, signal.SIGKILL)  # the box's engine dies under its owner
    procs[0].wait()
    b = agent.wait_for("/v1/status", lambda b: (b.get("routing") or {}).get("active") == "fallback",
                       timeout=AFTER_S + 30)
    assert b["engines"]["box"]["state"] in ("unhealthy", "failed") and b["vllm"]["state"] == "ready"
    assert b["engines"]["olla"]["state"] == "ready"
    assert "[engines.box].log_command" in b["engines"]["box"]["last_failure"]["fix"]
    procs.append(start_fake(box, log))  # its owner starts it again
    agent.wait_for("/v1/status", lambda b: (b.get("routing") or {}).get("active") == "primary",
                   timeout=AFTER_S + 30)
