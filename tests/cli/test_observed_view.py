"""An observed engine (``[vllm] manage = false``) in ``conduit status`` and the live view: the marker that conduit
does not run it, an Ollama's loaded models and window, and no claim of a pid."""

from __future__ import annotations

import io
from typing import Any

from rich.console import Console

from conduit.daemon.cli.agent import vllm_lines
from conduit.daemon.cli.watch import View, render

GiB = 1024**3
OLLAMA = {"version": "0.12.3", "window": {"tokens": 8192, "source": "api/ps context_length"},
          "loaded": [{"name": "qwen2.5:7b", "size_bytes": 5 * GiB, "vram_bytes": 4 * GiB, "vram_fraction": 0.8,
                      "context_length": 8192, "expires_at": None}]}


def _snap(**more: Any) -> dict[str, Any]:
    return {"state": "ready", "since": 1_700_000_000.0, "pid": None, "served_model_name": "qwen2.5:7b",
            "base_url": "http://127.0.0.1:11434", "managed": False, "engine": "ollama", "ollama": OLLAMA, **more}


def test_status_lines_mark_an_observed_ollama_and_show_its_models() -> None:
    text = "\n".join(vllm_lines(_snap()))
    assert "(observed ollama, manage = false)" in text and "pid" not in text
    assert "context window 8,192 tokens (from api/ps context_length)" in text
    assert "loaded: qwen2.5:7b 5.00 GiB, 80% in GPU memory, context 8,192" in text
    idle = "\n".join(vllm_lines(_snap(ollama={**OLLAMA, "loaded": [], "window": None})))
    assert "loaded: none (Ollama loads a model at its first request)" in idle
    supervised = "\n".join(vllm_lines({"state": "ready", "pid": 5, "base_url": "http://x:1"}))
    assert "observed" not in supervised


def test_the_live_view_marks_an_observed_engine() -> None:
    status = {"agent": {"state": "running", "pid": 1, "uptime_s": 5.0}, "channels": {}, "note": None,
              "gpus": {"gpus": [], "reason": "no GPU", "sampled_at": 0.0}, "host": {"note": "x"},
              "vllm": _snap(), "tools": {"tools": {}}}
    console = Console(file=io.StringIO(), width=120, color_system=None)
    console.print(render(View(status=status), 120, 1_700_000_100.0))
    out = console.file.getvalue()  # type: ignore[attr-defined]
    assert "observed ollama (manage = false)" in out and "loaded: qwen2.5:7b" in out, out
