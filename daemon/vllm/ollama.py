"""Ollama's own answers, read: the loaded models (``/api/ps``) and a model's context window (``/api/show``).

Field names from Ollama's API reference (ollama/ollama ``docs/api.md``, "List Running Models" and "Show Model
Information"; docs.ollama.com/api/ps for ``context_length``, which newer releases add to each loaded model):

- ``GET /api/ps`` -> ``{"models": [{"name", "model", "size", "size_vram", "expires_at", "details": {...},
  "context_length"}]}``: ``size`` the bytes the loaded model takes in all, ``size_vram`` the part of it in GPU
  memory, ``context_length`` the context it was loaded with (tokens; what requests get, whatever the model
  could take).
- ``POST /api/show`` with ``{"model": NAME}`` -> ``{"parameters": "num_ctx 8192\\n...", "model_info":
  {"<architecture>.context_length": 131072, "general.architecture": "<architecture>", ...}, ...}``:
  ``parameters`` holds the Modelfile's ``PARAMETER`` lines (``num_ctx`` is the context it loads with),
  ``model_info`` the model's own maximum.
- ``GET /api/version`` -> ``{"version": "0.6.2"}``: how an Ollama is told from a vLLM (which answers 404).

Every function here takes parsed JSON and never raises: an answer of another shape gives nothing.
"""

from __future__ import annotations

import re
from typing import Any

from conduit.text import one_line

MAX_TOKENS = 1 << 30
"""The largest context figure believed, tokens."""


def _count(v: Any) -> int | None:
    """A positive integer no larger than ``MAX_TOKENS`` (bytes figures use ``_bytes``), else None."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v:
        return None
    n = int(v)
    return n if 0 < n <= MAX_TOKENS and n == v else None


def _bytes(v: Any) -> int | None:
    """A byte count: a non-negative integer below 2**63, else None."""
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < 1 << 63:
        return None
    return v


def loaded_models(body: Any) -> list[dict[str, Any]]:
    """The ``/api/ps`` answer as ``[{"name", "size_bytes", "vram_bytes", "vram_fraction", "context_length",
    "expires_at"}]`` (None where Ollama did not say; ``vram_fraction`` = ``size_vram / size``, 0..1)."""
    items = body.get("models") if isinstance(body, dict) else None
    out: list[dict[str, Any]] = []
    for m in items if isinstance(items, list) else []:
        if not isinstance(m, dict):
            continue
        name = m.get("name") if isinstance(m.get("name"), str) else m.get("model")
        if not isinstance(name, str) or not name.strip():
            continue
        size, vram = _bytes(m.get("size")), _bytes(m.get("size_vram"))
        out.append({
            "name": one_line(name, 200), "size_bytes": size, "vram_bytes": vram,
            "vram_fraction": (min(1.0, vram / size) if size and vram is not None else None),
            "context_length": _count(m.get("context_length")),
            "expires_at": one_line(m["expires_at"], 64) if isinstance(m.get("expires_at"), str) else None,
        })
    return out


_NUM_CTX = re.compile(r"^\s*num_ctx\s+(\d+)\s*$", re.M)


def show_window(body: Any) -> tuple[int | None, str]:
    """A model's context window from its ``/api/show`` answer: ``(tokens, source)``, the Modelfile's
    ``num_ctx`` first (what Ollama loads it with), else ``model_info``'s ``<architecture>.context_length`` (the
    model's maximum; Ollama itself may load it with less); ``(None, "")`` when neither is there."""
    if not isinstance(body, dict):
        return None, ""
    params = body.get("parameters")
    if isinstance(params, str):
        found = _NUM_CTX.search(params)
        if found and _count(int(found.group(1))):
            return int(found.group(1)), "num_ctx"
    info = body.get("model_info")
    if isinstance(info, dict):
        arch = info.get("general.architecture")
        keys = [f"{arch}.context_length"] if isinstance(arch, str) else []
        keys += [k for k in info if isinstance(k, str) and k.endswith(".context_length")]
        for k in keys:
            n = _count(info.get(k))
            if n:
                return n, "model_info"
    return None, ""


def same_model(a: str, b: str) -> bool:
    """Ollama names with an optional tag: ``qwen2.5`` is ``qwen2.5:latest``."""
    def full(x: str) -> str:
        return x if ":" in x.rsplit("/", 1)[-1] else x + ":latest"
    return full(a) == full(b)


def version_of(body: Any) -> str | None:
    """``/api/version``'s ``version``, or None (then the server is not an Ollama)."""
    v = body.get("version") if isinstance(body, dict) else None
    return one_line(v, 40) if isinstance(v, str) and v.strip() else None


__all__ = ["loaded_models", "same_model", "show_window", "version_of"]
