"""The agent as a real process on a real Unix socket: routes, socket files, one agent at a time."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import stat
import subprocess
from pathlib import Path

import pytest
from helpers.agentproc import AgentProc, GiB, conduit_exe, fake_gpu, request, short_dir

from conduit.daemon.agent.client import AgentClient, AgentError


def test_routes_and_shapes(temp_home: Path) -> None:
    gpus = {"devices": [fake_gpu(0, free=50 * GiB, processes=[{"pid": 4242, "used": None}]), fake_gpu(1)]}
    with AgentProc(temp_home, gpus=gpus) as agent:
        status, h = agent.get("/v1/healthz")
        assert status == 200 and h["ok"] is True and h["state"] in ("starting", "running") and h["pid"] > 0

        body = agent.wait_for("/v1/gpus", lambda b: len(b["gpus"]) == 2)
        g0 = body["gpus"][0]
        assert body["reason"] is None
        assert {"index", "name", "uuid", "total_bytes", "used_bytes", "free_bytes", "reserved_bytes",
                "utilization_gpu_pct", "utilization_memory_pct", "mig_enabled", "mig", "processes",
                "errors", "window"} <= set(g0)
        assert g0["free_bytes"] == 50 * GiB and g0["processes"] == [{"pid": 4242, "used_bytes": None, "vllm": False}]
        assert g0["window"]["min_free_bytes"] == 50 * GiB

        status, host = agent.get("/v1/host")
        assert status == 200 and host["total_bytes"] > 0 and host["available_bytes"] > 0

        assert agent.get("/v1/vllm") == (200, {"state": "not_configured"})
        assert agent.get("/v1/tools") == (200, {"tools": {}, "note": "no sync state yet"})

        status, ch = agent.get("/v1/channels")
        assert status == 200 and set(ch) == {"channels", "note"}

        status, everything = agent.get("/v1/status")
        assert status == 200
        assert set(everything) == {"agent", "channels", "note", "gpus", "host", "vllm", "tools", "routing",
                                   "cluster", "engines"}
        assert everything["routing"] is None  # no [fallback] in the profile
        assert everything["cluster"] is None  # no [vllm.cluster] in the profile
        assert everything["engines"] is None  # no [engines.NAME] in the profile
        assert everything["agent"]["socket"] == str(agent.sock)

        status, spec = agent.get("/v1/openapi.json")
        assert status == 200 and spec["openapi"].startswith("3.")
        assert {"/v1/status", "/v1/channels/{name}/probe", "/v1/gpus", "/v1/vllm/{action}"} <= set(spec["paths"])

        status, err = agent.get("/v1/nope")
        assert status == 404 and err["error"] == "not_found"
        status, err = request(agent.sock, "DELETE", "/v1/status")
        assert status == 405 and err["error"] == "method_not_allowed"
        status, err = agent.get("/v1/channels/nope")
        assert status == 404 and err["error"] == "unknown_channel"
        status, err = request(agent.sock, "POST", "/v1/channels/nope/probe")
        assert status == 404 and err["error"] == "unknown_channel"
        status, err = request(agent.sock, "POST", "/v1/vllm/start")
        assert status == 409 and err["error"] == "not_configured"


def test_no_gpu_is_an_empty_list_with_a_reason(temp_home: Path) -> None:
    with AgentProc(temp_home, gpus={"error": "driver_not_loaded"}) as agent:
        body = agent.wait_for("/v1/gpus", lambda b: b["sampled_at"] is not None)
        assert body["gpus"] == [] and body["reason"] == "no NVIDIA GPU: Driver Not Loaded"


def test_tools_come_from_the_sync_state_file(temp_home: Path) -> None:
    state = temp_home / ".local" / "state" / "conduit"
    state.mkdir(parents=True)
    (state / "sync.json").write_text(json.dumps({"tools": {"claude_code": {"state": "in_sync"}}, "at": 1}))
    with AgentProc(temp_home) as agent:
        body = agent.wait_for("/v1/tools", lambda b: b.get("tools"))
        assert body["tools"] == {"claude_code": {"state": "in_sync", "display": "Claude Code"}}
        (state / "sync.json").write_text("{not json")
        body = agent.wait_for("/v1/tools", lambda b: "cannot read" in (b.get("note") or ""))
        assert body["tools"] == {}


def test_curl_unix_socket(temp_home: Path) -> None:
    curl = shutil.which("curl")
    if not curl:
        pytest.skip("curl is not installed")
    with AgentProc(temp_home) as agent:
        out = subprocess.run([curl, "-sS", "--unix-socket", str(agent.sock), "http://localhost/v1/status"],
                             capture_output=True, timeout=20, check=True)
        body = json.loads(out.stdout)
        assert body["agent"]["pid"] == agent.proc.pid  # type: ignore[union-attr]


def test_client_library(temp_home: Path) -> None:
    with AgentProc(temp_home) as agent, AgentClient(agent.sock) as client:
        assert client.get("/v1/healthz")["ok"] is True
        with pytest.raises(AgentError) as err:
            client.get("/v1/channels/nope")
        assert err.value.status == 404 and "known channels" in (err.value.hint or "")


def test_socket_and_directory_modes(temp_home: Path) -> None:
    with AgentProc(temp_home) as agent:
        assert stat.S_ISSOCK(os.lstat(agent.sock).st_mode)
        assert stat.S_IMODE(os.lstat(agent.sock).st_mode) == 0o600
        assert stat.S_IMODE(os.stat(agent.sock.parent).st_mode) == 0o700


def test_default_socket_path_under_xdg_runtime_dir(temp_home: Path) -> None:
    run = short_dir()
    try:
        env = dict(os.environ, XDG_RUNTIME_DIR=str(run))
        env.pop("CONDUIT_AGENT_SOCKET", None)
        agent = AgentProc(temp_home, sock=run / "conduit" / "agent.sock")
        agent.env = {k: v for k, v in agent.env.items() if k != "CONDUIT_AGENT_SOCKET"} | {"XDG_RUNTIME_DIR": str(run)}
        with agent:
            assert (run / "conduit" / "agent.sock").exists()
            out = subprocess.run([conduit_exe(), "status", "--json"], env=agent.env, capture_output=True, timeout=30)
            assert out.returncode == 0, out.stderr
            assert json.loads(out.stdout)["agent"]["socket"] == str(run / "conduit" / "agent.sock")
    finally:
        shutil.rmtree(run, ignore_errors=True)


def test_second_agent_refuses_while_the_first_is_alive(temp_home: Path) -> None:
    with AgentProc(temp_home) as first:
        out = subprocess.run([conduit_exe(), "agent"], env=first.env, capture_output=True, text=True, timeout=30)
        assert out.returncode == 1
        assert f"another conduit agent (pid {first.proc.pid}) is already serving" in out.stderr  # type: ignore[union-attr]
        assert "Traceback" not in out.stderr
        assert first.get("/v1/healthz")[0] == 200  # the first one is untouched


def test_stale_socket_from_a_crashed_agent_is_replaced(temp_home: Path) -> None:
    first = AgentProc(temp_home).start()
    try:
        os.killpg(first.proc.pid, signal.SIGKILL)  # type: ignore[union-attr]
        first.proc.wait(10)  # type: ignore[union-attr]
        assert first.sock.exists()  # a crash leaves the socket behind
        with pytest.raises(OSError):
            request(first.sock, "GET", "/v1/healthz")
        second = AgentProc(temp_home, sock=first.sock)
        second.gpu_file = first.gpu_file
        with second:
            assert second.get("/v1/healthz")[1]["pid"] == second.proc.pid  # type: ignore[union-attr]
            assert "replacing a stale socket" in second.log.read_text()
    finally:
        shutil.rmtree(first.dir, ignore_errors=True)


def test_a_file_that_is_not_a_socket_is_left_alone(temp_home: Path) -> None:
    d = short_dir()
    try:
        path = d / "agent.sock"
        path.write_text("precious")
        agent = AgentProc(temp_home, sock=path)
        agent.start(wait=False)
        assert agent.proc is not None and agent.proc.wait(30) == 1
        assert "is not a socket" in agent.log.read_text() and path.read_text() == "precious"
        shutil.rmtree(agent.dir, ignore_errors=True)
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_sigterm_removes_the_socket(temp_home: Path) -> None:
    agent = AgentProc(temp_home).start()
    try:
        assert agent.stop() == 0
        assert not agent.sock.exists()
    finally:
        shutil.rmtree(agent.dir, ignore_errors=True)


def test_status_command_and_json(temp_home: Path) -> None:
    with AgentProc(temp_home, gpus={"devices": [fake_gpu(0)]}) as agent:
        agent.wait_for("/v1/gpus", lambda b: b["gpus"])
        out = subprocess.run([conduit_exe(), "status", "--json"], env=agent.env, capture_output=True, timeout=30)
        assert out.returncode == 0 and json.loads(out.stdout)["gpus"]["gpus"][0]["uuid"] == "GPU-fake-0"
        out = subprocess.run([conduit_exe(), "status"], env=agent.env | {"COLUMNS": "160"}, capture_output=True,
                             text=True, timeout=30)
        assert out.returncode == 0, out.stderr
        assert "Fake H100 #0" in out.stdout and "60.00 GiB / 80.00 GiB" in out.stdout
        assert "not_configured" in out.stdout


def test_status_json_fast_path_matches_the_full_command(temp_home: Path) -> None:
    """`conduit status --json` answers through the standard library alone, with the full command's output."""
    import sys

    with AgentProc(temp_home, gpus={"devices": [fake_gpu(0)]}) as agent:
        agent.wait_for("/v1/gpus", lambda b: b["gpus"])
        probe = ("import sys; sys.argv = ['conduit', 'status', '--json']; from conduit.daemon.cli.entry import main; "
                 "rc = main(); print('HEAVY', sorted(m for m in ('typer', 'rich', 'httpx', 'pydantic') "
                 "if m in sys.modules)); sys.exit(rc)")
        fast = subprocess.run([sys.executable, "-c", probe], env=agent.env, capture_output=True, text=True, timeout=30)
        assert fast.returncode == 0, fast.stderr
        body, heavy = fast.stdout.rsplit("HEAVY", 1)
        assert heavy.strip() == "[]"
        full = subprocess.run([sys.executable, "-m", "conduit.daemon.cli", "status", "--json"], env=agent.env,
                              capture_output=True, text=True, timeout=30)
        assert full.returncode == 0, full.stderr
        a, b = json.loads(body), json.loads(full.stdout)
        for doc in (a, b):  # sampled twice: drop what moves between the two requests
            doc["agent"].pop("uptime_s", None)
            doc.pop("host", None)
            doc["gpus"].pop("window", None)
        assert a.keys() == b.keys() and a["gpus"]["gpus"][0]["uuid"] == b["gpus"]["gpus"][0]["uuid"]


def test_status_when_the_agent_is_down_exits_2(temp_home: Path) -> None:
    d = short_dir()
    try:
        env = dict(os.environ, HOME=str(temp_home), CONDUIT_AGENT_SOCKET=str(d / "none.sock"))
        out = subprocess.run([conduit_exe(), "status"], env=env, capture_output=True, text=True, timeout=30)
        assert out.returncode == 2 and "does not answer" in out.stderr and "Traceback" not in out.stderr
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_connection_without_a_request_is_closed_after_the_idle_timeout(temp_home: Path) -> None:
    with AgentProc(temp_home, args=["--idle-timeout", "1"]) as agent:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(15)
        s.connect(str(agent.sock))
        assert s.recv(1) == b""  # the agent closed it
        s.close()
