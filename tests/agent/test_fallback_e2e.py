"""Fallback end to end (docs/design.md "Routing"): a real agent supervising a fast vLLM stand-in (tests/helpers/fake_vllm.py) as the primary,
a real sync daemon, a hosted stand-in on loopback as the [fallback], real tool files (tests/helpers/fallbackrig.py).

The supervised server is killed hard -> within after_s + 3 s every following tool names the fallback's port and
model (and not before after_s: the hysteresis), the `fallback = false` tool is untouched; nothing is written while
the primary stays down; a profile edit during the fallback changes both routes (the fallback model for the
following tools, the primary model for the staying one); vLLM comes back ready -> within after_s + 3 s every tool is
on the primary again. `/v1/status`, `conduit status --json` and the daemon's log show the switch.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

from helpers.agentproc import conduit_exe
from helpers.fallbackrig import Rig

AFTER_S = 2.0
SLACK_S = 3.0  # the bound: the switch lands within after_s + 3 s


def test_fallback_and_back(temp_home: Path, tmp_path: Path) -> None:
    with Rig(temp_home, tmp_path, after_s=AFTER_S) as rig:
        rig.wait_route("primary")
        assert rig.points_at("codex", "primary")
        assert rig.status()["routing"]["active"] == "primary"
        stay = rig.signatures()["codex"]

        killed = rig.kill_vllm()
        written = rig.wait_route("fallback", timeout=AFTER_S + 30)
        assert AFTER_S - 0.3 <= written - killed <= AFTER_S + SLACK_S, written - killed
        routing = rig.status()["routing"]
        assert routing["active"] == "fallback" and "vLLM" in routing["why"], routing
        assert rig.signatures()["codex"] == stay  # fallback = false: stays on the primary, not rewritten
        assert rig.points_at("codex", "primary")

        during = rig.signatures()
        time.sleep(AFTER_S + 1.0)  # the primary stays down: nothing is written
        assert rig.signatures() == during

        out = subprocess.run([conduit_exe(), "status", "--json"], env=rig.agent.env if rig.agent else None,
                             capture_output=True, text=True, timeout=60)
        assert json.loads(out.stdout)["routing"]["active"] == "fallback", out.stderr

        rig.write_profile(model="fake-edited", fb_model="hosted-model-2")  # an edit during the fallback
        rig.wait_route("fallback")  # the following tools: the edited fallback model
        assert "hosted-model-2" in rig.file("claude_code").read_text()
        deadline = time.monotonic() + 30
        while "fake-edited" not in rig.file("codex").read_text():  # the staying tool: the edited primary
            assert time.monotonic() < deadline, rig.file("codex").read_text()
            time.sleep(0.05)

        ready = rig.start_vllm()
        back = rig.wait_route("primary", timeout=AFTER_S + 60)
        assert AFTER_S - 0.3 <= back - ready <= AFTER_S + SLACK_S, back - ready
        assert "fake-edited" in rig.file("claude_code").read_text()
        assert rig.status()["routing"]["active"] == "primary"

        # The switch is logged after the sync that wrote the files: poll for it (a loaded machine may lag).
        deadline = time.monotonic() + 30
        while True:
            log = rig.daemon.log() if rig.daemon else ""
            switches = [line for line in log.splitlines() if "routing: tools on local" in line]
            if len(switches) >= 2 or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert len(switches) == 2, switches
        assert "fallback channel hosted" in switches[0] and "restart needed: claude_code" in switches[0]
        assert "primary channel local" in switches[1]
