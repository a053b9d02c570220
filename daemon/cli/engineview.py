"""An observed engine's own lines in ``conduit status`` and the live view (``[vllm] manage = false``): for an
Ollama, the served model's window and each loaded model; each ``[engines.NAME]`` beside ``[vllm]``. Standard library only: ``conduit status`` imports it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from conduit.units import format_bytes


def _count(v: float | None) -> str:
    return "-" if v is None else f"{int(v):,}"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.0%}"


def ollama_lines(info: Any) -> list[str]:
    """An observed Ollama's part of ``conduit status``: the served model's window and each loaded model (its
    size, the share in GPU memory, the context it was loaded with), from ``Observer.snapshot()["ollama"]``."""
    if not isinstance(info, dict):
        return []
    lines = []
    w = info.get("window") or {}
    if w.get("tokens"):
        lines.append(f"  context window {_count(w['tokens'])} tokens (from {w.get('source')})")
    loaded = info.get("loaded") or []
    if not loaded:
        lines.append("  loaded: none (Ollama loads a model at its first request)")
    for m in loaded[:5]:
        size = format_bytes(m["size_bytes"]) if m.get("size_bytes") else "-"
        lines.append(f"  loaded: {m.get('name')} {size}, {_pct(m.get('vram_fraction'))} in GPU memory, "
                     f"context {_count(m.get('context_length'))}")
    return lines


def engine_lines(name: str, body: Any, vllm_lines: Callable[[dict[str, Any]], list[str]]) -> list[str]:
    """One ``[engines.NAME]``'s part of ``conduit status``: ``vllm_lines`` of its body (``Observer.snapshot``:
    state, URL, model, last failure and fix, live metrics, an Ollama's windows) headed ``engine NAME:`` instead
    of ``vLLM:``; a bad table's message as its one line."""
    if not isinstance(body, dict):
        return []
    if body.get("state") == "error":
        return [f"engine {name}: error - {body.get('message')}"]
    lines = vllm_lines(body)
    if lines and lines[0].startswith("vLLM: "):
        lines[0] = f"engine {name}: " + lines[0][len("vLLM: "):]
    return lines
