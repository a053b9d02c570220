"""Channel health through a real agent reading a real profile, probing real local gateways."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from helpers.agentproc import AgentProc, Gateway, conduit_exe, request

pytest.importorskip("conduit.daemon.config.resolve", reason="profile loading (profile, keys, normalize, adapters) "
                    "does not import on this branch yet")

KEY = "sk-agent-test-0123456789-c3f9"


def write_profile(home: Path, good: Gateway, bad_key: Gateway, wrong_prefix: Gateway) -> None:
    keys = home / ".config" / "conduit" / "keys"
    keys.mkdir(parents=True)
    (keys / "k").write_text(f"  {KEY}\n")  # whitespace is cleaned by the key source
    os.chmod(keys / "k", 0o600)
    (home / ".config" / "conduit" / "profile.toml").write_text(f"""
version = 1
channel = "good"
model = "m"

[channels.good]
base_url = "{good.url}"
protocols = ["openai", "anthropic"]
key = {{ file = "{keys / 'k'}" }}

[channels.refused_key]
base_url = "{bad_key.url}"
protocols = ["openai"]
key = {{ file = "{keys / 'k'}" }}

[channels.wrong_prefix]
base_url = "{wrong_prefix.url}/api"
protocols = ["openai"]
key = {{ file = "{keys / 'k'}" }}

[channels.missing_key]
base_url = "{good.url}"
protocols = ["openai"]
key = {{ file = "{keys / 'nope'}" }}
""")


def test_channels_through_the_agent(temp_home: Path) -> None:
    good = Gateway({"/v1/models": 200})
    bad_key = Gateway({"/v1/models": 401})
    wrong_prefix = Gateway({"/v1/models": 200})
    try:
        write_profile(temp_home, good, bad_key, wrong_prefix)
        with AgentProc(temp_home, args=["--probe-interval", "600"]) as agent:
            for name in ("good", "refused_key", "wrong_prefix"):
                status, body = request(agent.sock, "POST", f"/v1/channels/{name}/probe?wait=20", timeout=30)
                assert status == 200 and body["pending"] is False, body
            status, ch = agent.get("/v1/channels")
            assert status == 200, ch
            chans = ch["channels"]
            assert chans["good"]["healthy"] is True
            assert set(chans["good"]["protocols"]) == {"openai", "anthropic"}
            assert chans["good"]["protocols"]["openai"]["latency_ms"]["last"] is not None
            assert chans["refused_key"]["verdict"] == "auth"
            assert "check for whitespace or a revoked key" in chans["refused_key"]["protocols"]["openai"]["message"]
            wp = chans["wrong_prefix"]["protocols"]["openai"]
            assert wp["verdict"] == "path" and wp["working_base"] == wrong_prefix.url + "/v1"
            assert chans["missing_key"]["verdict"] == "config" and not chans["missing_key"]["healthy"]

            # the key went out in the header, cleaned ...
            assert good.seen and good.seen[0][1]["authorization"] == f"Bearer {KEY}"
            # ... and appears in no answer
            for path in ("/v1/status", "/v1/channels", "/v1/channels/good", "/v1/openapi.json"):
                assert KEY not in json.dumps(agent.get(path)[1])
            assert KEY not in agent.log.read_text()

            out = subprocess.run([conduit_exe(), "wait", "--channel", "good", "--timeout", "10s"], env=agent.env,
                                 capture_output=True, text=True, timeout=60)
            assert out.returncode == 0, out.stderr
            out = subprocess.run([conduit_exe(), "wait", "--channel", "refused_key", "--timeout", "1s"],
                                 env=agent.env, capture_output=True, text=True, timeout=60)
            assert out.returncode == 1 and "auth" in out.stderr
    finally:
        for g in (good, bad_key, wrong_prefix):
            g.close()
