"""The profile's ``[engines.NAME]`` tables: more engines someone else runs, observed beside ``[vllm]``.

``[vllm]`` is the one engine conduit may launch (or observe with ``manage = false``); each ``[engines.NAME]`` is
one more engine it only reads, side by side in ``conduit status``::

    [engines.box2]
    url = "http://10.0.0.5:8000"          # its root (a trailing /v1 is taken off)
    model = "qwen-coder"                  # the name it serves, as clients send it
    engine = "vllm"                       # or "ollama"; default: detected (Ollama answers /api/version)
    log_command = "ssh box2 docker logs --tail 500 vllm"   # optional, bounded: its failures are diagnosed

Each table becomes the ``VllmSettings`` of an observer (``manage = false``): the same looks (``/health``,
``/v1/models``, ``/metrics``; an Ollama's ``/api/ps`` and ``/api/show``) as ``[vllm] manage = false``
(``conduit.daemon.vllm.observer``). An engine is a channel's base URL: the channel whose base URL (without
``/v1``) is an engine's ``url`` takes that engine's state as its fallback evidence (``engine_for``).

A bad table does not stop the rest of the profile: it is reported by name (``engine_settings``'s problems) and
left out.
"""

from __future__ import annotations

import difflib
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from conduit.daemon.config.fields import MAX_SECONDS, Float

#: ``[vllm]`` fields an ``[engines.NAME]`` table may set (the rest only make sense for a launch).
_PASSED = ("model", "url", "engine", "log_command", "health_interval_s", "metrics_interval_s",
           "unhealthy_restart_s")


class EngineTable(BaseModel):
    """One ``[engines.NAME]`` table. Unknown keys are refused.

    Attributes:
        url: the engine's root, ``http://`` or ``https://`` (required).
        model: the model name it serves, as clients send it (required: the readiness look checks ``/v1/models``).
        engine: ``vllm`` or ``ollama``; None: detected.
        log_command: a command printing its recent log (argv list, or a string split like a shell would).
        health_interval_s, metrics_interval_s, unhealthy_restart_s: as in ``[vllm]`` (seconds).
    """

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    url: str = Field(min_length=1)
    model: str = Field(min_length=1)
    engine: Literal["vllm", "ollama"] | None = None
    log_command: list[str] | str | None = None
    health_interval_s: Float = Field(default=2.0, gt=0, le=MAX_SECONDS)
    metrics_interval_s: Float = Field(default=5.0, gt=0, le=MAX_SECONDS)
    unhealthy_restart_s: Float = Field(default=30.0, gt=0, le=MAX_SECONDS)


def engine_settings(tables: Any, where: str = "profile") -> tuple[dict[str, Any], dict[str, str]]:
    """``[engines]`` -> ``({name: VllmSettings with manage = false}, {name: problem})``.

    Args:
        tables: the profile's ``engines`` value (a mapping of tables, or None).
        where: the profile's path, for the problems' wording.

    Returns the settings of every good table, and one sentence per bad one naming ``[engines.NAME].key`` and
    the fix. Never raises.
    """
    from conduit.daemon.config.vllm import VllmSettings

    if not isinstance(tables, dict):
        return {}, ({} if tables is None else {"engines": f"{where}: [engines] must hold [engines.NAME] tables"})
    good: dict[str, Any] = {}
    problems: dict[str, str] = {}
    for name, table in tables.items():
        try:
            t = EngineTable.model_validate(table)
            good[name] = VllmSettings.model_validate(
                {"manage": False, **{k: v for k, v in t.model_dump().items() if k in _PASSED and v is not None}})
        except ValidationError as exc:
            problems[name] = _problem(exc, name, where)
    return good, problems


def _problem(exc: ValidationError, name: str, where: str) -> str:
    """pydantic's errors of ``[engines.NAME]`` as one sentence: an unknown key first (with a "did you mean")."""
    errors = exc.errors()
    first = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    key = ".".join(str(p) for p in first["loc"]) or "table"
    what = first["msg"]
    if first["type"] == "extra_forbidden":
        close = difflib.get_close_matches(key, list(EngineTable.model_fields), n=1)
        what = "unknown key" + (f" (did you mean `{close[0]}`?)" if close else "")
    keys = ", ".join(EngineTable.model_fields)
    return f"{where}: [engines.{name}].{key}: {what} (keys: {keys})"


def engine_for(base_url: str, engines: dict[str, Any]) -> str | None:
    """The name of the engine in ``engines`` (``{name: VllmSettings}``) a channel with ``base_url`` points at:
    the same root once a trailing ``/`` and ``/v1`` are taken off. None when no engine matches."""
    root = base_url.rstrip("/")
    root = root[: -len("/v1")] if root.endswith("/v1") else root
    for name, s in engines.items():
        if s.base_url.rstrip("/") == root:
            return name
    return None


__all__ = ["EngineTable", "engine_for", "engine_settings"]
