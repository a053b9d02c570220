"""A real ``conduit agent`` on an ``mp`` follower node (``[vllm.cluster] backend = "mp"``, ``node_rank = 1``): it
launches the follower itself (a stand-in ``vllm`` on ``PATH``: tests/helpers/fake_follower.py) and ``conduit
status`` (text and ``--json``) shows this node's part of the group: ``member`` while the head's master port (a real
listening socket here) answers, ``head unreachable`` with the reason once it is gone."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

from helpers.agentproc import AgentProc, conduit_exe, request
from helpers.paths import HELPERS


def conduit(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([conduit_exe(), *args], env=env | {"COLUMNS": "220", "NO_COLOR": "1"},
                          capture_output=True, text=True, timeout=90)


def test_an_agent_supervises_its_mp_follower_and_says_whether_it_is_a_member(temp_home: Path, tmp_path: Path) -> None:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    exe = bindir / "vllm"
    exe.write_text(f"#!{sys.executable}\n" + (HELPERS / "fake_follower.py").read_text())
    exe.chmod(0o755)
    head = socket.socket()
    head.bind(("127.0.0.1", 0))
    head.listen(8)
    port = head.getsockname()[1]
    p = temp_home / ".config" / "conduit" / "profile.toml"
    p.parent.mkdir(parents=True)
    p.write_text(f'version = 1\nchannel = "local"\nmodel = "tiny"\n\n[vllm]\nmodel = "/models/tiny"\n'
                 f'served_model_name = "tiny"\ncommand = ["vllm", "serve"]\nhealth_interval_s = 0.2\n'
                 f'unhealthy_restart_s = 600\nstop_grace_s = 3\n'
                 f'extra_env = {{ PATH = "{bindir}{os.pathsep}{os.environ["PATH"]}" }}\n\n'
                 f'[vllm.cluster]\nbackend = "mp"\nrole = "worker"\nhead_address = "127.0.0.1:{port}"\nnodes = 2\n'
                 f'node_rank = 1\n')
    try:
        with AgentProc(temp_home) as agent:
            try:
                body = agent.wait_for("/v1/status", lambda b: (b.get("cluster") or {}).get("state") == "member",
                                      timeout=60)
                c = body["cluster"]
                assert c["backend"] == "mp" and c["node_rank"] == 1 and c["process"]["headless"] is True
                assert c["process"]["argv"][:2] == ["vllm", "serve"] and c["process"]["argv"][-1] == "--headless"
                out = conduit(agent.env, "status")
                assert out.returncode == 0, out.stderr
                assert f"cluster (mp, worker rank 1 of 2 nodes, head 127.0.0.1:{port}): member" in out.stdout, out.stdout
                assert "this node's vLLM (headless): ready" in out.stdout

                head.close()
                body = agent.wait_for("/v1/status", lambda b: (b.get("cluster") or {}).get("state")
                                      == "head unreachable", timeout=60)
                assert f"127.0.0.1:{port}" in body["cluster"]["reason"] and body["vllm"]["state"] == "unhealthy"
                out = conduit(agent.env, "status", "--json")
                assert json.loads(out.stdout)["cluster"]["kind"] == "head_unreachable"
            finally:  # the agent leaves its vLLM running for adoption: stop it
                request(agent.sock, "POST", "/v1/vllm/stop", timeout=30)
    finally:
        head.close()
