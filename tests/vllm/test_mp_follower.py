"""An ``mp`` follower (``[vllm.cluster] backend = "mp"``, ``node_rank`` > 0) supervised like the head: real
processes of a stand-in ``vllm`` on ``PATH`` (tests/helpers/fake_follower.py: records its argv, serves nothing),
and a real TCP listener on 127.0.0.1 standing for the head's master port. The real two-node group needs two
machines (vLLM's CPU build cannot run ``vllm serve``: docs/deployment.md)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from helpers.paths import HELPERS
from helpers.procs import alive

from conduit.daemon.agent.mpview import mp_cluster
from conduit.daemon.cli.clusterview import cluster_lines
from conduit.daemon.config.vllm import CLI_MODULE, VllmSettings
from conduit.daemon.vllm.supervisor import Supervisor, VllmState

S = VllmState
STORE_TIMEOUT = ("torch.distributed.DistNetworkError: The client socket has timed out after 600000ms while trying "
                 "to connect to (10.9.9.9, 29501).")


class Head:
    """A listening TCP socket on 127.0.0.1: the head's master port while open."""

    def __init__(self) -> None:
        self.sock: socket.socket | None = None
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        self.port = int(probe.getsockname()[1])
        probe.close()

    def open(self) -> None:
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", self.port))
        s.listen(16)
        self.sock = s

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None


def install_vllm(tmp: Path) -> Path:
    """``<tmp>/bin/vllm``: the stand-in, run by this interpreter."""
    bindir = tmp / "bin"
    bindir.mkdir()
    exe = bindir / "vllm"
    exe.write_text(f"#!{sys.executable}\n" + (HELPERS / "fake_follower.py").read_text())
    exe.chmod(0o755)
    return bindir


def follower(tmp: Path, head_port: int, env: dict[str, str] | None = None, **kw: Any) -> VllmSettings:
    bindir = install_vllm(tmp)
    base: dict[str, Any] = {
        "model": "/models/tiny", "port": 8000, "command": ["vllm", "serve"],
        "extra_env": {"PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}", "FAKE_FOLLOWER_ARGV": str(tmp / "argv"),
                      **(env or {})},
        "health_interval_s": 0.1, "unhealthy_restart_s": 1.0, "stop_grace_s": 3, "startup_timeout_s": 20,
        "restart": {"backoff_initial_s": 0.05, "backoff_max_s": 0.2, "max_restarts": 50},
        "cluster": {"backend": "mp", "role": "worker", "head_address": f"127.0.0.1:{head_port}", "nodes": 2,
                    "node_rank": 1},
    }
    base.update(kw)
    return VllmSettings.model_validate(base)


def run(body: Callable[[Supervisor], Awaitable[None]], s: VllmSettings, tmp: Path) -> None:
    async def main() -> None:
        sup = Supervisor(s, memory_probe=lambda: None, state_dir=tmp / "state")
        task = asyncio.create_task(sup.run())
        seen: set[int] = set()
        try:
            await body(sup)
            seen |= sup.pids()
        finally:
            if not task.done():
                await sup.stop()
            await sup.aclose(stop_vllm=False)
        assert alive(seen) == set()

    asyncio.run(main())


async def until(cond: Callable[[], bool], timeout: float = 30.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not cond():
        assert loop.time() < end, "condition not reached"
        await asyncio.sleep(0.05)


def argvs(tmp: Path) -> list[list[str]]:
    p = tmp / "argv"
    return [json.loads(line) for line in p.read_text().splitlines()] if p.exists() else []


def test_a_follower_without_command_runs_vllm_serve_headless() -> None:
    cluster = {"backend": "mp", "head_address": "10.0.0.1:29501", "nodes": 2}
    f = VllmSettings.model_validate({"model": "m", "python": "/v/bin/python",
                                     "cluster": {**cluster, "role": "worker", "node_rank": 1}})
    h = VllmSettings.model_validate({"model": "m", "python": "/v/bin/python", "cluster": {**cluster, "role": "head"}})
    assert f.launch_prefix() == ["/v/bin/python", "-m", CLI_MODULE, "serve"]
    assert h.launch_prefix()[-1] == "vllm.entrypoints.openai.api_server"


def test_follower_is_a_member_while_the_head_answers_and_restarted_when_it_went_away(tmp_path: Path) -> None:
    head = Head()
    head.open()

    async def body(sup: Supervisor) -> None:
        await sup.wait_for(S.READY, timeout_s=30)
        await until(lambda: bool(argvs(tmp_path)))
        argv = argvs(tmp_path)[0]
        assert argv[0] == "serve" and argv[argv.index("--model") + 1] == "/models/tiny"
        tail = " ".join(argv[argv.index("--nnodes"):])
        assert tail.startswith(f"--nnodes 2 --node-rank 1 --master-addr 127.0.0.1 --master-port {head.port}")
        assert argv[-1] == "--headless"
        await asyncio.sleep(0.5)  # a few health looks: the head answers, it stays ready
        assert sup.state is S.READY
        view = mp_cluster(sup.settings, sup.snapshot())
        assert view is not None and view["state"] == "member" and view["process"]["headless"]
        first = sup.snapshot()["pid"]

        head.close()
        await sup.wait_for(S.UNHEALTHY, timeout_s=30)
        view = mp_cluster(sup.settings, sup.snapshot())
        assert view is not None and view["state"] == "head unreachable" and view["kind"] == "head_unreachable"
        assert f"127.0.0.1:{head.port}" in view["reason"] and "ConnectionRefused" in view["reason"]
        headline, _ = cluster_lines(view)
        assert "rank 1 of 2" in headline and "head unreachable" in headline and "(headless)" in headline

        await until(lambda: sup.restarts >= 1 and sup.snapshot()["pid"] not in (None, first))
        assert sup.snapshot()["last_failure"]["kind"] == "unhealthy"
        assert first not in sup.pids() and alive({first}) == set()
        head.open()
        await until(lambda: sup.state is S.READY and mp_cluster(sup.settings, sup.snapshot())["state"] == "member")
        await until(lambda: len(argvs(tmp_path)) >= 2)  # launched again, same flags
        assert argvs(tmp_path)[1] == argv

    try:
        run(body, follower(tmp_path, head.port), tmp_path)
    finally:
        head.close()


def test_follower_exiting_with_a_rendezvous_error_is_diagnosed_and_restarted_with_backoff(tmp_path: Path) -> None:
    head = Head()
    head.open()

    async def body(sup: Supervisor) -> None:
        await until(lambda: sup.restarts >= 2, timeout=60)
        f = sup.snapshot()["last_failure"]
        assert f["kind"] == "rendezvous_timeout" and "10.9.9.9:29501" in f["reason"]
        assert "head_address" in f["fix"] and STORE_TIMEOUT in f["log_tail"]
        assert "restarting" in [h[0] for h in sup.history]
        assert (sup.dir / "vllm.log.1").exists()  # each launch's output kept (the log ring)
        view = mp_cluster(sup.settings, sup.snapshot())
        assert view is not None and view["process"]["restarts"] >= 2

    try:
        run(body, follower(tmp_path, head.port, {"FAKE_FOLLOWER_MODE": "exit", "FAKE_FOLLOWER_MESSAGE": STORE_TIMEOUT}),
            tmp_path)
    finally:
        head.close()


def test_a_follower_refused_by_vllm_fails_at_once_and_stop_leaves_nothing(tmp_path: Path) -> None:
    head = Head()
    head.open()
    bad = "vllm serve: error: unrecognized arguments: --nnodes-typo"

    async def body(sup: Supervisor) -> None:
        await sup.wait_for(S.FAILED, timeout_s=30)
        assert sup.snapshot()["last_failure"]["kind"] == "unknown_argument"
        assert len(argvs(tmp_path)) == 1  # the same flags would fail the same way: not relaunched

    try:
        run(body, follower(tmp_path, head.port, {"FAKE_FOLLOWER_MODE": "refuse", "FAKE_FOLLOWER_MESSAGE": bad}),
            tmp_path)
    finally:
        head.close()
    assert shutil.which("vllm", path=str(tmp_path / "bin"))
