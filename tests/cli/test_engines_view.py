"""``[engines.NAME]`` beside ``[vllm]`` in the live view (``conduit watch``): each engine headed by its name, with
its own state and figures; a bad table shows its message."""

from __future__ import annotations

import io

from rich.console import Console

from conduit.daemon.cli.watch import View, render


def test_the_live_view_shows_each_engine_beside_vllm() -> None:
    box = {"state": "unhealthy", "since": 1_700_000_000.0, "served_model_name": "box-model", "managed": False,
           "engine": "vllm", "base_url": "http://10.0.0.5:8000",
           "last_failure": {"reason": "the engine at http://10.0.0.5:8000 does not answer", "fix": "check it"},
           "metrics": {"kv_cache_usage_fraction": 0.25, "requests_running": 2, "requests_waiting": 0}}
    status = {"agent": {"state": "running", "pid": 1, "uptime_s": 5.0}, "channels": {}, "note": None,
              "gpus": {"gpus": [], "reason": "no GPU", "sampled_at": 0.0}, "host": {"note": "x"},
              "vllm": {"state": "ready", "pid": 7, "served_model_name": "local"}, "tools": {"tools": {}},
              "engines": {"box": box, "typo": {"state": "error", "message": "[engines.typo].modle: unknown key"}}}
    console = Console(file=io.StringIO(), width=140, color_system=None)
    console.print(render(View(status=status), 140, 1_700_000_100.0))
    out = console.file.getvalue()  # type: ignore[attr-defined]
    assert "vLLM: ready" in out and "engine box: unhealthy" in out, out
    assert "does not answer" in out and "25%" in out and "running 2" in out
    assert "engine typo: error - [engines.typo].modle: unknown key" in out
