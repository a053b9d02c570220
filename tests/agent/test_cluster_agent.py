"""Adding ``[vllm.cluster]`` to the profile of an agent that already runs vLLM: the single-node vLLM is stopped,
and the group's is left for the cluster keeper to launch once every node has joined (here never: the agent's
Python has no Ray, so the keeper reports ``ray_missing`` and the group is never whole).

A real ``conduit agent`` process, tests/helpers/fake_vllm.py as the server (real process groups), the profile edited by
rename as editors save.
"""

from __future__ import annotations

import time
from pathlib import Path

from helpers.agentproc import AgentProc
from helpers.procs import group
from test_agent_vllm import free_port, gone, vllm_table, write_profile

CLUSTER = '\n[vllm.cluster]\nrole = "head"\nhead_address = "127.0.0.1:6399"\nnodes = 2\n'


def test_a_new_cluster_table_stops_the_single_node_vllm_and_waits_for_the_group(temp_home: Path,
                                                                               leaders: set[int]) -> None:
    port = free_port()
    write_profile(temp_home, vllm_table(port))
    with AgentProc(temp_home) as agent:
        snap = agent.wait_for("/v1/vllm", lambda b: b.get("state") == "ready", timeout=30)
        leaders.add(snap["pid"])
        first = group(snap["pid"])
        write_profile(temp_home, vllm_table(port) + CLUSTER)
        status = agent.wait_for("/v1/status", lambda b: (b.get("cluster") or {}).get("kind") == "ray_missing",
                                timeout=60)
        assert status["cluster"]["role"] == "head", status["cluster"]
        assert gone(first, timeout=20), "the single-node vLLM was left running"
        deadline = time.monotonic() + 3  # the keeper reads its nodes meanwhile: nothing may launch
        while time.monotonic() < deadline:
            _, body = agent.get("/v1/vllm")
            assert body.get("pid") is None and body.get("state") != "ready", body
            time.sleep(0.2)
