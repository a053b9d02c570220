"""The agent supervising the profile's [vllm] (tests/helpers/fake_vllm.py as the server): a real `conduit agent` process
on a real socket under the temporary HOME, real process groups, the real `conduit vllm|wait|status` commands.

Covered: the agent starts vLLM from the profile and serves its snapshot; the implicit `local` channel is probed;
profile edits restart vLLM only when its launch settings change; removing [vllm] stops it, adding it back starts
one; `conduit vllm start|stop|restart` and their exit codes; SIGTERM to the agent leaves vLLM serving and the
next agent adopts it; an api_key source that fails is reported on /v1/vllm.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import psutil
from helpers.agentproc import AgentProc, conduit_exe, request
from helpers.paths import HELPERS
from helpers.procs import group

FAKE = str(HELPERS / "fake_vllm.py")
KEY = "sk-local-0123456789abcdefghij"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def vllm_table(port: int, extra: str = "") -> str:
    return (f'[vllm]\nmodel = "fake-model"\nserved_model_name = "fake"\nport = {port}\n'
            f'command = ["{sys.executable}", "{FAKE}"]\nhealth_interval_s = 0.2\nmetrics_interval_s = 0.3\n'
            f'stop_grace_s = 3\nextra_env = {{ FAKE_VLLM_CHILDREN = "1" }}\n{extra}')


def write_profile(home: Path, vllm: str = "", *, channel: str = "local", model: str = "fake", more: str = "") -> Path:
    p = home / ".config" / "conduit" / "profile.toml"
    p.parent.mkdir(parents=True, exist_ok=True)
    text = (f'version = 1\nchannel = "{channel}"\nmodel = "{model}"\n\n[channels.gw]\n'
            f'base_url = "http://127.0.0.1:9"\nprotocols = ["openai"]\n{more}\n{vllm}')
    tmp = p.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, p)
    return p




def gone(pids: set[int], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(_alive(p) for p in pids):
            return True
        time.sleep(0.05)
    return False


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def conduit(agent: AgentProc, *args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run([conduit_exe(), *args], env=agent.env | {"COLUMNS": "200", "NO_COLOR": "1"},
                          capture_output=True, text=True, timeout=timeout)


def ready(agent: AgentProc, leaders: set[int], timeout: float = 30, **match: Any) -> dict[str, Any]:
    def ok(b: dict[str, Any]) -> bool:
        if b.get("pid"):
            leaders.add(b["pid"])
        return b.get("state") == "ready" and all(b.get(k) == v for k, v in match.items())

    return agent.wait_for("/v1/vllm", ok, timeout=timeout)


def test_agent_follows_the_profiles_vllm_table(temp_home: Path, leaders: set[int]) -> None:
    port = free_port()
    write_profile(temp_home, vllm_table(port))
    with AgentProc(temp_home) as agent:
        snap = ready(agent, leaders)
        pid1, group1 = snap["pid"], group(snap["pid"])
        assert snap["served_model_name"] == "fake" and snap["base_url"] == f"http://127.0.0.1:{port}"
        assert len(group1) == 3 and snap["restarts"] == 0  # API server, EngineCore, Worker
        r = conduit(agent, "wait", "--vllm-ready", "--timeout", "20s")
        assert r.returncode == 0, r.stderr

        # the implicit `local` channel is probed like any other, and answers
        body = agent.wait_for("/v1/channels", lambda b: b["channels"].get("local", {}).get("healthy"), timeout=20)
        assert set(body["channels"]["local"]["protocols"]) == {"openai", "anthropic"}

        # conduit status: state, URL, live numbers
        agent.wait_for("/v1/vllm", lambda b: b.get("metrics") is not None)
        r = conduit(agent, "status")
        assert r.returncode == 0, r.stderr
        assert "vLLM: ready since" in r.stdout and f"at http://127.0.0.1:{port}/v1, model fake" in r.stdout
        assert "live: KV cache" in r.stdout

        # other edits (the model line, a new channel, a supervision-only vLLM key) do not restart vLLM
        write_profile(temp_home, vllm_table(port, "unhealthy_restart_s = 40\n"), model="other",
                      more='\n[channels.extra]\nbase_url = "http://127.0.0.1:9"\nprotocols = ["openai"]\n')
        agent.wait_for("/v1/channels", lambda b: "extra" in b["channels"])
        time.sleep(0.5)
        snap = ready(agent, leaders)
        assert snap["pid"] == pid1 and snap["restarts"] == 0 and group(pid1) == group1

        # a change to how vLLM is launched restarts it; nothing of the first launch is left
        write_profile(temp_home, vllm_table(port, "max_num_seqs = 8\n"))
        snap = agent.wait_for("/v1/vllm", lambda b: b.get("pid") not in (None, pid1) and b["state"] == "ready")
        leaders.add(snap["pid"])
        assert snap["argv"][snap["argv"].index("--max-num-seqs") + 1] == "8" and snap["restarts"] == 1
        assert gone(group1)

        # removing [vllm] stops it (and the local channel goes); adding it back starts a new one
        pid2, group2 = snap["pid"], group(snap["pid"])
        write_profile(temp_home, "", channel="gw")
        agent.wait_for("/v1/vllm", lambda b: b["state"] == "not_configured")
        assert gone(group2)
        agent.wait_for("/v1/channels", lambda b: "local" not in b["channels"])
        write_profile(temp_home, vllm_table(port))
        snap = ready(agent, leaders)
        assert snap["pid"] != pid2

        # the person's commands
        r = conduit(agent, "vllm", "stop")
        assert r.returncode == 0, r.stderr
        assert "vLLM: stopped" in r.stdout
        assert gone(group(snap["pid"]) | {snap["pid"]})
        write_profile(temp_home, vllm_table(port, "max_num_seqs = 4\n"))  # a stopped vLLM stays stopped
        time.sleep(2.5)
        assert agent.get("/v1/vllm")[1]["state"] == "stopped"
        r = conduit(agent, "vllm", "start", "--wait", "--timeout", "30s")
        assert r.returncode == 0, r.stderr
        assert "vLLM: ready" in r.stdout
        pid3 = agent.get("/v1/vllm")[1]["pid"]
        leaders.add(pid3)
        r = conduit(agent, "vllm", "restart")
        assert r.returncode == 0, r.stderr
        snap = ready(agent, leaders)
        assert snap["pid"] != pid3 and gone({pid3})
        r = conduit(agent, "vllm", "stop")
        assert r.returncode == 0 and gone(group(snap["pid"]) | {snap["pid"]})
        assert not (temp_home / ".local" / "state" / "conduit" / "vllm" / "vllm.pid").exists()


def test_sigterm_leaves_vllm_serving_for_the_next_agent(temp_home: Path, leaders: set[int]) -> None:
    port = free_port()
    write_profile(temp_home, vllm_table(port))
    with AgentProc(temp_home) as agent:
        snap = ready(agent, leaders)
    pid, members = snap["pid"], group(snap["pid"])
    assert agent.proc is not None and agent.proc.returncode == 0
    time.sleep(0.5)
    assert group(pid) == members and len(members) == 3  # still serving, nothing killed
    assert httpx.get(f"http://127.0.0.1:{port}/health", timeout=5, trust_env=False).status_code == 200
    with AgentProc(temp_home) as second:
        snap = ready(second, leaders)
        assert snap["pid"] == pid and snap["adopted"] and snap["restarts"] == 0, snap.get("warnings")
        r = conduit(second, "vllm", "stop")
        assert r.returncode == 0, r.stderr
        assert gone(members)


def test_a_server_too_busy_to_answer_at_once_is_adopted_not_killed(temp_home: Path, leaders: set[int]) -> None:
    """A saturated vLLM can take longer than one readiness check (5 s) to answer /health: the next agent keeps
    asking for up to [vllm].unhealthy_restart_s (what a running server gets) instead of killing it, and the
    fallback judge takes that wait for a first start (no evidence): tools stay on the primary."""
    port = free_port()
    write_profile(temp_home, vllm_table(port), more='\n[fallback]\nchannel = "gw"\nmodel = "m"\nafter_s = 1\n')
    with AgentProc(temp_home) as agent:
        snap = ready(agent, leaders)
    pid = snap["pid"]
    os.kill(pid, signal.SIGSTOP)  # the API server answers nothing for 8 s
    resume = threading.Timer(8.0, lambda: os.kill(pid, signal.SIGCONT))
    resume.start()
    try:
        with AgentProc(temp_home) as second:
            snap = ready(second, leaders, timeout=60)
            assert snap["pid"] == pid and snap["adopted"] and snap["restarts"] == 0, snap.get("warnings")
        routing = temp_home / ".local" / "state" / "conduit" / "routing.json"
        assert not routing.exists() or '"active": "primary"' in routing.read_text(), routing.read_text()
    finally:
        resume.cancel()
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)


def test_vllm_commands_exit_codes(temp_home: Path, leaders: set[int]) -> None:
    env = dict(os.environ, HOME=str(temp_home), CONDUIT_AGENT_SOCKET=str(temp_home / "nope.sock"))
    r = subprocess.run([conduit_exe(), "vllm", "stop"], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "does not answer" in r.stderr

    write_profile(temp_home, "", channel="gw")
    with AgentProc(temp_home) as agent:
        r = conduit(agent, "vllm", "start")
        assert r.returncode == 1 and "no local vLLM is configured" in r.stderr and "[vllm]" in r.stderr
        r = conduit(agent, "vllm", "start", "--wait", "--timeout", "soon")
        assert r.returncode == 3 and "not a duration" in r.stderr

        port = free_port()
        failing = vllm_table(port, "").replace('FAKE_VLLM_CHILDREN = "1"', 'FAKE_VLLM_MODE = "exit_at_start", '
                                               'FAKE_VLLM_MESSAGE = "api_server.py: error: unrecognized arguments: '
                                               '--bogus-flag"')
        write_profile(temp_home, failing)
        agent.wait_for("/v1/vllm", lambda b: b["state"] == "failed")
        r = conduit(agent, "vllm", "restart", "--wait", "--timeout", "30s")
        assert r.returncode == 1, r.stdout + r.stderr
        assert "vLLM: failed" in r.stderr and "--bogus-flag" in r.stderr and "fix:" in r.stderr
        r = conduit(agent, "status")
        assert "last failure:" in r.stdout and "fix:" in r.stdout
        r = conduit(agent, "wait", "--vllm-ready", "--timeout", "1s")
        assert r.returncode == 1 and "vLLM is not ready (state: failed)" in r.stderr


def test_api_key_source_reaches_vllm_and_the_local_channel(temp_home: Path, leaders: set[int]) -> None:
    port = free_port()
    keyfile = temp_home / "vllm.key"
    profile = write_profile(temp_home, vllm_table(port, 'api_key = { file = "~/vllm.key" }\n'))
    with AgentProc(temp_home) as agent:
        snap = agent.wait_for("/v1/vllm", lambda b: b["state"] == "failed")
        assert "vllm.key" in snap["last_failure"]["reason"] and KEY not in str(snap)
        keyfile.write_text(KEY + "\n")
        os.utime(profile)  # the agent re-reads the profile (and its key sources) when the file changes
        snap = ready(agent, leaders)  # readiness needs /v1/models, which the fake answers only with the key
        assert KEY not in str(agent.get("/v1/status")[1])
        # the periodic probe may have run before the server was up: ask for one now
        request(agent.sock, "POST", "/v1/channels/local/probe?wait=20", timeout=30)
        agent.wait_for("/v1/channels", lambda b: b["channels"].get("local", {}).get("healthy"), timeout=60)
        r = httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=5, trust_env=False)
        assert r.status_code == 401
        assert conduit(agent, "vllm", "stop").returncode == 0
        assert gone({snap["pid"]})
