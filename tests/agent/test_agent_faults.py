"""The agent under an adversarial user: real `conduit agent` processes on real sockets, the
fake vLLM (tests/helpers/fake_vllm.py) as the launched server, the real `conduit` commands.

- A storm of 2,000 malformed requests adds a few lines to the agent's log (one line, then one summary), no
  traceback, and the agent keeps answering.
- A launcher that prints its key and fails: no key (the vLLM key, a channel key, a key-like flag's value) is in
  ``/v1/vllm``, ``/v1/status``, ``conduit status``, ``conduit vllm logs`` or the agent's log.
- A vLLM descendant that calls ``setsid()`` (still a child of the launcher, or orphaned and re-parented to the
  agent, its subreaper) is stopped with the rest by ``conduit vllm stop``, and reaped.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from helpers.agentproc import AgentProc, conduit_exe, request
from test_agent_vllm import free_port, vllm_table, write_profile

KEY = "sk-vllm-canary-0123456789abcdef"
CHANNEL_KEY = "sk-chan-canary-fedcba9876543210"
FLAG_ONLY = "hf-flag-canary-13579bdf02468ace"
CANARIES = (KEY, CHANNEL_KEY, FLAG_ONLY)

MALFORMED = (
    b"GET /v1/healthz HTTP/1.1\r\nHost: x\r\nBad Header Line\r\n\r\n",
    b"GET /v1/healthz HTTP/9.9\r\nHost: x\r\n\r\n",
    b"GET /v1/healthz HTTP/1.1\r\nX: " + b"a" * 9000 + b"\r\n\r\n",
    # aiohttp quotes the start of an over-long line in its message: the key is masked in the summary
    b"GET /v1/healthz HTTP/1.1\r\nAuthorization: Bearer " + FLAG_ONLY.encode() + b" " + b"a" * 9000 + b"\r\n\r\n",
)


def send_raw(sock: Path, data: bytes) -> None:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    try:
        s.connect(str(sock))
        s.sendall(data)
        with contextlib.suppress(OSError):
            while s.recv(65536):
                pass
    finally:
        s.close()


def test_a_storm_of_malformed_requests_is_one_summary_line(temp_home: Path) -> None:
    """2000 malformed requests: the first logged, the rest counted in one summary line per 10 s window (on a
    loaded machine the sending can span more than one window: every summary is read, none may be missing)."""
    with AgentProc(temp_home) as agent:
        time.sleep(0.5)  # start-up lines written
        before = agent.log.read_bytes()
        t0 = time.monotonic()
        for i in range(2000):
            send_raw(agent.sock, MALFORMED[i % len(MALFORMED)])
        windows = 2 + int((time.monotonic() - t0) // 10)  # 10 s windows the sending touched, plus the last one
        assert request(agent.sock, "GET", "/v1/healthz")[0] == 200  # still answering
        time.sleep(0.5)
        during = agent.log.read_bytes()[len(before):].decode(errors="replace")
        assert agent.stop() == 0
        after = agent.log.read_bytes()[len(before):].decode(errors="replace")
    assert "Traceback" not in after and FLAG_ONLY not in after
    counts = [int(n) for n in re.findall(r"ignored (\d+) malformed requests in the last 10 s; last: 400 ", after)]
    assert counts and len(counts) <= windows, after
    assert len(during.splitlines()) <= 2 + len(counts), during
    assert len(after.splitlines()) <= 5 + len(counts) and len(after) < 1800 + 200 * len(counts), after
    assert "ignored a malformed request: 400" in during
    assert 1 + sum(counts) == 2000  # every one counted: the first alone, the rest in the summaries


@pytest.fixture
def reaped() -> Iterator[list[int]]:
    """Pids a test started; whatever is left of them is killed afterwards."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def test_a_launcher_that_echoes_its_key_leaks_it_nowhere(temp_home: Path, reaped: list[int]) -> None:
    (temp_home / "vllm.key").write_text(KEY + "\n")
    (temp_home / "chan.key").write_text(CHANNEL_KEY + "\n")
    table = vllm_table(free_port(), 'api_key = { file = "~/vllm.key" }\n').replace(
        'FAKE_VLLM_CHILDREN = "1"',
        'FAKE_VLLM_MODE = "exit_at_start", FAKE_VLLM_ECHO_KEY = "1", '
        f'FAKE_VLLM_ECHO_BARE = "{CHANNEL_KEY}", FAKE_VLLM_ECHO_FLAG = "{FLAG_ONLY}", '
        'FAKE_VLLM_MESSAGE = "api_server.py: error: unrecognized arguments: --api-key {key}"')
    write_profile(temp_home, table, more='key = { file = "~/chan.key" }\n')
    with AgentProc(temp_home) as agent:
        snap = agent.wait_for("/v1/vllm", lambda b: b["state"] == "failed", timeout=30)
        tail = snap["last_failure"]["log_tail"]
        assert "launching with key sk-...cdef" in tail and "--api-key sk-...cdef" in tail  # it did echo
        assert "Bearer sk-...cdef" in tail and "hf_token=hf-...8ace" in tail and "--api-key=hf-...8ace" in tail
        answers = [str(snap), str(agent.get("/v1/status")[1]), str(request(agent.sock, "POST", "/v1/vllm/start")[1])]
        env = agent.env | {"COLUMNS": "200", "NO_COLOR": "1"}
        for argv in (["status"], ["status", "--json"]):
            r = subprocess.run([conduit_exe(), *argv], env=env, capture_output=True, text=True, timeout=60)
            answers.append(r.stdout + r.stderr)
        # `conduit vllm logs` reads the file itself; it knows the [vllm] key (not the channels': vLLM has none)
        logs = subprocess.run([conduit_exe(), "vllm", "logs"], env=env, capture_output=True, text=True, timeout=60)
        assert logs.returncode == 0 and "--api-key sk-...cdef" in logs.stdout, logs.stdout + logs.stderr
        assert KEY not in logs.stdout and FLAG_ONLY not in logs.stdout
        agent.stop()
        answers.append(agent.log.read_text())
    assert "vLLM unknown_argument" in answers[-1]  # the failure is logged, masked
    for text in answers:
        for canary in CANARIES:
            assert canary not in text, (canary, text[:2000])


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _wait(pred: object, timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():  # type: ignore[operator]
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("how", ["child", "orphan"])
def test_a_descendant_that_calls_setsid_is_stopped_too(temp_home: Path, reaped: list[int], how: str) -> None:
    pidfile = temp_home / "escapee.pid"
    table = vllm_table(free_port()).replace(
        'FAKE_VLLM_CHILDREN = "1"', f'FAKE_VLLM_CHILDREN = "1", FAKE_VLLM_SETSID = "{how}", '
                                    f'FAKE_VLLM_PIDFILE = "{pidfile}"')
    write_profile(temp_home, table)
    with AgentProc(temp_home) as agent:
        snap = agent.wait_for("/v1/vllm", lambda b: b["state"] == "ready", timeout=30)
        leader = snap["pid"]
        reaped.append(leader)
        escapee = int(pidfile.read_text().split()[0])
        reaped.append(escapee)
        assert os.getsid(escapee) == escapee != os.getsid(leader) and os.getpgid(escapee) != leader
        if how == "orphan":  # re-parented to the agent (a child subreaper), not to init
            assert agent.proc is not None and psutil.Process(escapee).ppid() == agent.proc.pid
        r = subprocess.run([conduit_exe(), "vllm", "stop"], env=agent.env, capture_output=True, text=True, timeout=90)
        assert r.returncode == 0, r.stdout + r.stderr
        assert _wait(lambda: not _alive(escapee) and not _alive(leader)), psutil.Process(escapee).cmdline()
        assert _wait(lambda: not psutil.pid_exists(escapee))  # reaped, not left a zombie of the agent
