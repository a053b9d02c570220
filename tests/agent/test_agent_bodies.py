"""The agent keeps each route's body and makes it again only when its state changes.

A real agent in-process on a real Unix socket, a fake device set for the GPU (``FakeNvml``), a real prober
against a real local gateway.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import httpx
from helpers.agentproc import Gateway, fake_gpu, short_dir
from test_agent_inproc import run_agent_inproc

from conduit.adapters.base import Root
from conduit.daemon.agent.gpu import FakeNvml, GpuProbe
from conduit.daemon.agent.models import render
from conduit.daemon.agent.prober import Prober, ProbeTarget
from conduit.daemon.agent.server import Agent, AgentConfig
from conduit.redact import Redactor

LATE_KEY = "sk-late-0123456789abcdef"


def test_status_body_is_kept_until_its_state_changes(temp_home: Path) -> None:
    gw = Gateway({"/v1/models": 200})
    d = short_dir()
    try:
        prober = Prober([ProbeTarget("gw", "openai", Root(gw.url), key=None)], interval_s=3600)
        agent = Agent(AgentConfig(socket_path=d / "a.sock", gpu_interval_s=3600),
                      gpu_probe=GpuProbe(FakeNvml({"devices": [fake_gpu(0)]})), prober=prober,
                      redactor=Redactor())
        builds = agent.bodies.builds

        async def body(client: httpx.AsyncClient) -> None:
            def probes() -> int:
                return int(agent.keeper.prober.snapshot()["gw"]["protocols"]["openai"]["probes"])

            for _ in range(200):  # the first (and, with 1 h intervals, only) GPU sample and start-up probe
                if agent.keeper.gpu_generation and probes():
                    break
                await asyncio.sleep(0.05)
            first = await client.get("/v1/status")
            n = builds["status"]
            second = await client.get("/v1/status")
            assert builds["status"] == n  # nothing changed: the kept body is answered
            a, b = first.json(), second.json()
            assert a["agent"]["uptime_s"] <= b["agent"]["uptime_s"]  # agent is still made per request
            a.pop("agent"), b.pop("agent")
            assert a == b
            # the spliced bytes are exactly what rendering the whole model writes (bar uptime)
            whole = json.loads(render(agent.status()))
            whole.pop("agent")
            assert whole == b
            # a new GPU sample: a new body
            agent.keeper.gpu_probe = GpuProbe(FakeNvml({"devices": [fake_gpu(0), fake_gpu(1)]}))
            await asyncio.to_thread(agent.keeper._sample)
            r = (await client.get("/v1/status")).json()
            assert builds["status"] == n + 1 and len(r["gpus"]["gpus"]) == 2
            g = builds["gpus"]
            await client.get("/v1/gpus")
            await client.get("/v1/gpus")
            assert builds["gpus"] == g + 1
            # a probe: a new body
            before = r["channels"]["gw"]["protocols"]["openai"]["probes"]
            await client.post("/v1/channels/gw/probe", params={"wait": 10})
            r = (await client.get("/v1/status")).json()
            assert builds["status"] == n + 2 and r["channels"]["gw"]["protocols"]["openai"]["probes"] == before + 1
            # a key learned after the body was made is masked in the next answer
            agent.keeper.tools_generation += 1
            agent.keeper.tools = agent.keeper.tools.model_copy(update={"note": f"saw {LATE_KEY}"})
            r1 = await client.get("/v1/status")
            assert LATE_KEY in r1.text  # not a secret yet
            t = await client.get("/v1/tools")
            assert LATE_KEY in t.text
            agent.redactor.add([LATE_KEY])
            for path in ("/v1/status", "/v1/tools"):
                r2 = await client.get(path)
                assert LATE_KEY not in r2.text and "sk-...cdef" in r2.text, r2.text
                assert int(r2.headers["content-length"]) == len(r2.content)
            assert builds["status"] == n + 4  # the tools change, then the new key

        run_agent_inproc(agent, body)
    finally:
        gw.close()
        shutil.rmtree(d, ignore_errors=True)
