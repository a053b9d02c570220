"""The agent in-process on a real socket: probe-now semantics against real local gateways, and the vLLM slot.

The vLLM slot here is a minimal stand-in for the supervisor (another issue's work) that records calls; it
exercises only the agent's side of the interface documented in ``conduit.daemon.agent.server``.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
from helpers.agentproc import Gateway, fake_gpu, short_dir

from conduit.adapters.base import Root
from conduit.daemon.agent.gpu import FakeNvml, GpuProbe
from conduit.daemon.agent.prober import Prober, ProbeTarget
from conduit.daemon.agent.server import Agent, AgentConfig, AgentState, claim_socket
from conduit.redact import Redactor


class RecordingSlot:
    """Implements the agent's VllmSlot interface and records what the agent asked of it."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.state = "stopped"

    async def start(self) -> None:
        self.calls.append("start")
        self.state = "ready"

    async def stop(self) -> None:
        self.calls.append("stop")
        self.state = "stopped"

    async def restart(self) -> None:
        self.calls.append("restart")

    def snapshot(self) -> dict[str, Any]:
        return {"state": self.state, "pids": [4242]}

    async def run(self) -> None:
        self.calls.append("run")
        await asyncio.Event().wait()


def run_agent_inproc(agent: Agent, body: Callable[[httpx.AsyncClient], Awaitable[None]]) -> None:
    async def main() -> None:
        claimed = claim_socket(agent.socket_path)
        stop = asyncio.Event()
        server = asyncio.create_task(agent.serve(claimed, stop))
        transport = httpx.AsyncHTTPTransport(uds=str(agent.socket_path))
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost", timeout=30) as client:
            for _ in range(200):
                try:
                    if (await client.get("/v1/healthz")).status_code == 200:
                        break
                except httpx.TransportError:
                    await asyncio.sleep(0.05)
            try:
                await body(client)
            finally:
                stop.set()
                await asyncio.wait_for(server, 20)

    asyncio.run(main())


def test_probe_now_waits_then_answers_pending(temp_home: Path) -> None:
    ok = Gateway({"/v1/models": 200})
    hang = Gateway({}, hang=True)
    d = short_dir()
    try:
        prober = Prober([ProbeTarget("gw", "openai", Root(ok.url), key="sk-0123456789abcdef"),
                         ProbeTarget("slow", "openai", Root(hang.url), key=None, timeout_s=3)], interval_s=3600)
        agent = Agent(AgentConfig(socket_path=d / "a.sock"), gpu_probe=GpuProbe(FakeNvml({"devices": []})),
                      prober=prober)

        async def body(client: httpx.AsyncClient) -> None:
            r = await client.post("/v1/channels/gw/probe", params={"wait": 10})
            assert r.status_code == 200 and r.json()["pending"] is False and r.json()["healthy"] is True
            r = await client.post("/v1/channels/slow/probe", params={"wait": 0.2})
            assert r.status_code == 202 and r.json()["pending"] is True
            n = len(hang.seen)
            r = await client.post("/v1/channels/slow/probe", params={"wait": 0})
            assert r.status_code == 202
            await asyncio.sleep(0.3)
            assert len(hang.seen) == n  # a probe already running is not started twice
            r = await client.get("/v1/channels/slow")  # answered at once while the gateway hangs
            assert r.status_code == 200 and r.json()["verdict"] in ("pending", "timeout")
            r = await client.post("/v1/channels/gw/probe", params={"wait": "soon"})
            assert r.status_code == 400

        run_agent_inproc(agent, body)
        assert agent.state is AgentState.STOPPED and not (d / "a.sock").exists()
    finally:
        ok.close()
        hang.close()
        shutil.rmtree(d, ignore_errors=True)


def test_vllm_slot_is_called_and_marks_gpu_processes(temp_home: Path) -> None:
    d = short_dir()
    try:
        slot = RecordingSlot()
        gpus = FakeNvml({"devices": [fake_gpu(0, processes=[{"pid": 4242, "used": 1 << 30}, {"pid": 7, "used": None}])]})
        agent = Agent(AgentConfig(socket_path=d / "a.sock"), gpu_probe=GpuProbe(gpus), vllm=slot,
                      prober=Prober([], interval_s=3600))

        async def body(client: httpx.AsyncClient) -> None:
            assert (await client.get("/v1/vllm")).json()["state"] == "stopped"
            r = await client.post("/v1/vllm/start")
            assert r.status_code == 200 and r.json()["state"] == "ready"
            assert (await client.post("/v1/vllm/restart")).status_code == 200
            assert (await client.post("/v1/vllm/explode")).status_code == 404
            for _ in range(100):
                procs = (await client.get("/v1/gpus")).json()["gpus"]
                if procs:
                    break
                await asyncio.sleep(0.05)
            flags = {p["pid"]: p["vllm"] for p in procs[0]["processes"]}
            assert flags == {4242: True, 7: False}
            assert (await client.get("/v1/status")).json()["vllm"]["state"] == "ready"

        run_agent_inproc(agent, body)
        assert slot.calls[:1] == ["run"] and "start" in slot.calls and "restart" in slot.calls
    finally:
        shutil.rmtree(d, ignore_errors=True)


class LeakySlot(RecordingSlot):
    """A slot whose snapshot quotes a key (a buggy slot, or a log line) in its message and warnings."""

    def snapshot(self) -> dict[str, Any]:
        return {"state": "failed", "message": f"launch said {LEAKED} twice: {LEAKED}",
                "warnings": [f'quoted "{LEAKED}"']}


LEAKED = "sk-leaked-0123456789abcdef"


def test_every_answer_is_masked_by_the_agents_redactor(temp_home: Path) -> None:
    """The middleware masks what any route answers with every key the agent's Redactor knows."""
    d = short_dir()
    try:
        agent = Agent(AgentConfig(socket_path=d / "a.sock"), gpu_probe=GpuProbe(FakeNvml({"devices": []})),
                      vllm=LeakySlot(), prober=Prober([], interval_s=3600), redactor=Redactor([LEAKED]))

        async def body(client: httpx.AsyncClient) -> None:
            for path in ("/v1/vllm", "/v1/status"):
                r = await client.get(path)
                assert r.status_code == 200 and LEAKED not in r.text and "sk-...cdef" in r.text, r.text
                assert int(r.headers["content-length"]) == len(r.content)
            r = await client.post("/v1/vllm/start")
            assert LEAKED not in r.text

        run_agent_inproc(agent, body)
    finally:
        shutil.rmtree(d, ignore_errors=True)
