"""``conduit wait``: met immediately, met after a change, timeout, agent down, bad arguments."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from helpers.agentproc import AgentProc, GiB, conduit_exe, fake_gpu, short_dir

from conduit.daemon.agent.wait import Conditions, unmet, wait_until
from conduit.errors import AgentUnreachable, BadArguments
from conduit.units import parse_duration, parse_size


def run_wait(env: dict[str, str], *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([conduit_exe(), "wait", *args], env=env, capture_output=True, text=True, timeout=timeout)


def test_met_immediately(temp_home: Path) -> None:
    with AgentProc(temp_home, gpus={"devices": [fake_gpu(0, free=30 * GiB)]}) as agent:
        agent.wait_for("/v1/gpus", lambda b: b["gpus"])
        out = run_wait(agent.env, "--vram-free", "20GiB", "--timeout", "30s")
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == "ready"


def test_met_after_a_change(temp_home: Path) -> None:
    with AgentProc(temp_home, gpus={"devices": [fake_gpu(0, free=5 * GiB), fake_gpu(1, free=2 * GiB)]}) as agent:
        agent.wait_for("/v1/gpus", lambda b: b["gpus"])
        proc = subprocess.Popen([conduit_exe(), "wait", "--vram-free", "20GiB", "--gpu", "1", "--timeout", "60s"],
                                env=agent.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(1.5)
        assert proc.poll() is None  # still waiting: GPU 1 has 2 GiB free
        agent.set_gpus({"devices": [fake_gpu(0, free=5 * GiB), fake_gpu(1, free=40 * GiB)]})
        stdout, stderr = proc.communicate(timeout=60)
        assert proc.returncode == 0, stderr
        assert stdout.strip() == "ready"


def test_timeout_names_what_is_missing(temp_home: Path) -> None:
    with AgentProc(temp_home, gpus={"devices": [fake_gpu(0, free=5 * GiB)]}) as agent:
        agent.wait_for("/v1/gpus", lambda b: b["gpus"])
        out = run_wait(agent.env, "--vram-free", "20GiB", "--vllm-ready", "--timeout", "1s")
        assert out.returncode == 1
        assert "timed out after 1 s" in out.stderr
        assert "want 20.00 GiB free; GPU 0: 5.00 GiB free" in out.stderr
        assert "vLLM is not ready (state: not_configured)" in out.stderr


def test_agent_down_exits_2(temp_home: Path) -> None:
    d = short_dir()
    try:
        env = dict(os.environ, HOME=str(temp_home), CONDUIT_AGENT_SOCKET=str(d / "none.sock"))
        out = run_wait(env, "--vram-free", "1GiB", "--timeout", "1s")
        assert out.returncode == 2 and "does not answer" in out.stderr and "Traceback" not in out.stderr
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.mark.parametrize("args", [
    [],  # nothing to wait for
    ["--vram-free", "twenty"],
    ["--vram-free", "1500000000"],  # a bare number: bytes or GiB? it must say
    ["--vram-free", "1GiB", "--timeout", "soon"],
    ["--gpu", "0", "--vllm-ready"],
    ["--no-such-flag"],
])
def test_bad_arguments_exit_3(temp_home: Path, args: list[str]) -> None:
    env = dict(os.environ, HOME=str(temp_home), CONDUIT_AGENT_SOCKET="/nonexistent/agent.sock")
    out = run_wait(env, *args)
    assert out.returncode == 3, (out.stdout, out.stderr)
    assert "Traceback" not in out.stderr


def test_a_bare_number_says_what_to_write(temp_home: Path) -> None:
    env = dict(os.environ, HOME=str(temp_home), CONDUIT_AGENT_SOCKET="/nonexistent/agent.sock")
    out = run_wait(env, "--vram-free", "1500000000")
    assert out.returncode == 3
    assert "--vram-free: '1500000000' has no unit; did you mean 1500000000GiB?" in out.stderr
    assert "1500000000B" in out.stderr  # the hint names how to write bytes


def test_bytes_with_a_unit_are_accepted(temp_home: Path) -> None:
    with AgentProc(temp_home, gpus={"devices": [fake_gpu(0, free=30 * GiB)]}) as agent:
        agent.wait_for("/v1/gpus", lambda b: b["gpus"])
        out = run_wait(agent.env, "--vram-free", "1500000000B", "--timeout", "10s")
        assert out.returncode == 0, out.stderr


def test_unknown_gpu_or_channel_exit_3(temp_home: Path) -> None:
    with AgentProc(temp_home, gpus={"devices": [fake_gpu(0)]}) as agent:
        agent.wait_for("/v1/gpus", lambda b: b["gpus"])
        out = run_wait(agent.env, "--vram-free", "1GiB", "--gpu", "7")
        assert out.returncode == 3 and "no GPU '7'" in out.stderr
        out = run_wait(agent.env, "--channel", "nope")
        assert out.returncode == 3 and "no channel named 'nope'" in out.stderr


def test_parse_size_and_duration() -> None:
    assert parse_size("20GiB") == 20 * GiB == parse_size("20g") == parse_size("20 G")
    assert parse_size("1.5GB") == 1_500_000_000 and parse_size("512MiB") == 512 * 1024**2 and parse_size("7B") == 7
    assert parse_duration("10m") == 600 and parse_duration("1h30m") == 5400 and parse_duration("500ms") == 0.5
    assert parse_duration("90") == 90
    for bad in ("", "GiB", "20 parsecs", "7"):
        with pytest.raises(BadArguments):
            parse_size(bad)
    for bad in ("soon", "10m5", "-3s"):
        with pytest.raises(BadArguments):
            parse_duration(bad)


def status_body(gpus: list[dict[str, Any]], channels: dict[str, Any] | None = None, vllm: str = "ready") -> dict[str, Any]:
    return {"gpus": {"gpus": gpus, "reason": None}, "channels": channels or {}, "vllm": {"state": vllm}}


def test_unmet_conditions() -> None:
    g = [{"index": 0, "uuid": "GPU-a", "free_bytes": 10 * GiB},
         {"index": 1, "uuid": "GPU-b", "free_bytes": 30 * GiB}]
    assert unmet(status_body(g), Conditions(vram_free_bytes=20 * GiB)) == []
    assert unmet(status_body(g), Conditions(vram_free_bytes=20 * GiB, gpu="GPU-b")) == []
    assert unmet(status_body(g), Conditions(vram_free_bytes=20 * GiB, gpu="0"))
    mig = [{"index": 0, "uuid": "GPU-m", "free_bytes": 40 * GiB, "mig_enabled": True,
            "mig": [{"index": 0, "free_bytes": 10 * GiB}, {"index": 1, "free_bytes": 10 * GiB}]}]
    assert unmet(status_body(mig), Conditions(vram_free_bytes=20 * GiB))  # no single instance has 20 GiB
    nogpu = {"gpus": {"gpus": [], "reason": "no NVIDIA GPU: Driver Not Loaded"}}
    assert "Driver Not Loaded" in unmet(nogpu, Conditions(vram_free_bytes=1))[0]
    ch = {"gw": {"healthy": False, "protocols": {"openai": {"verdict": "auth", "message": "HTTP 401"}}}}
    assert "channel gw is not healthy: openai: auth (HTTP 401)" in unmet(status_body([], ch), Conditions(channels=("gw",)))
    assert unmet(status_body([], vllm="starting"), Conditions(vllm_ready=True)) == ["vLLM is not ready (state: starting)"]


def test_wait_until_with_a_fetch_function() -> None:
    bodies = iter([status_body([{"index": 0, "free_bytes": 1}]), status_body([{"index": 0, "free_bytes": 5}])])
    code, line = wait_until(Conditions(vram_free_bytes=5), 10, lambda: next(bodies), poll_s=0, sleep=lambda s: None)
    assert (code, line) == (0, "ready")

    def down() -> dict[str, Any]:
        raise AgentUnreachable("the conduit agent does not answer")

    assert wait_until(Conditions(vllm_ready=True), 0, down, sleep=lambda s: None)[0] == 2


def test_wait_waits_for_an_agent_that_is_still_starting() -> None:
    """`conduit agent & conduit wait --vllm-ready --timeout 20s`: the agent's socket is not there yet on the first
    tries; wait keeps polling within its timeout instead of exiting 2 at once."""
    answers: list[Any] = [AgentUnreachable("no socket yet"), AgentUnreachable("no socket yet"),
                          status_body([], vllm="starting"), status_body([], vllm="ready")]
    slept: list[float] = []

    def fetch() -> dict[str, Any]:
        got = answers.pop(0)
        if isinstance(got, Exception):
            raise got
        return got

    assert wait_until(Conditions(vllm_ready=True), 20, fetch, poll_s=0.5, sleep=slept.append) == (0, "ready")
    assert len(slept) == 3
    clock = iter(range(0, 1000, 10))  # an agent that never comes: 2 only once the deadline passed
    import time as _time

    real = _time.monotonic
    _time.monotonic = lambda: float(next(clock))  # type: ignore[assignment]
    try:
        code, line = wait_until(Conditions(vllm_ready=True), 25, down_forever, sleep=lambda s: None)
    finally:
        _time.monotonic = real  # type: ignore[assignment]
    assert code == 2 and "does not answer" in line


def down_forever() -> dict[str, Any]:
    raise AgentUnreachable("the conduit agent does not answer")
    code, line = wait_until(Conditions(vllm_ready=True), 0, lambda: status_body([], vllm="starting"))
    assert code == 1 and "vLLM is not ready" in line
