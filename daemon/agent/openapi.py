"""The socket's routes as data, and the OpenAPI 3.1 document generated from them and the response models.

``ROUTES`` is the one list of what the agent answers: the server registers a handler for each entry (and
refuses to start when one lacks a handler), and ``openapi_document`` describes each entry with the JSON
Schema of its response models (``Model.model_json_schema(ref_template="#/components/schemas/{model}")``;
the nested models' ``$defs`` are hoisted into ``components/schemas``). OpenAPI 3.1 schemas are JSON Schema
2020-12, the dialect pydantic writes, so no translation is needed (spec: https://spec.openapis.org/oas/v3.1.0).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from conduit.daemon.agent import models as m

REF = "#/components/schemas/{model}"

_NAME = {"name": "name", "in": "path", "required": True, "schema": {"type": "string"},
         "description": "a channel of the profile"}
_WAIT = {"name": "wait", "in": "query", "required": False,
         "schema": {"type": "number", "minimum": 0, "maximum": 30, "default": 5},
         "description": "seconds to wait for the probe; 0 only schedules it"}
_ACTION = {"name": "action", "in": "path", "required": True, "schema": {"enum": ["start", "stop", "restart"]}}


@dataclass(frozen=True)
class Route:
    """One route of the socket.

    Attributes:
        method: ``GET`` or ``POST``.
        path: aiohttp's pattern, which is also OpenAPI's (``/v1/channels/{name}``).
        summary: one line for the document.
        responses: HTTP status -> (description, the model of that answer's body).
        parameters: OpenAPI parameter objects (path and query).
    """

    method: str
    path: str
    summary: str
    responses: dict[int, tuple[str, type[BaseModel]]]
    parameters: tuple[dict[str, Any], ...] = field(default=())


_OK = "ok"
_UNKNOWN = ("no channel of that name", m.UnknownChannel)

ROUTES: tuple[Route, ...] = (
    Route("GET", "/v1/healthz", "Liveness of the agent", {200: (_OK, m.Healthz)}),
    Route("GET", "/v1/status", "Everything: agent, channels, gpus, host, vllm, tools", {200: (_OK, m.Status)}),
    Route("GET", "/v1/channels", "Health of every channel and protocol", {200: (_OK, m.Channels)}),
    Route("GET", "/v1/channels/{name}", "One channel", {200: (_OK, m.ChannelAnswer), 404: _UNKNOWN}, (_NAME,)),
    Route("POST", "/v1/channels/{name}/probe", "Probe a channel now",
          {200: ("the fresh state", m.ProbeAnswer),
           202: ("the probe still runs: the state before it, with pending true", m.ProbeAnswer),
           400: ("wait is not a number", m.ErrorBody), 404: _UNKNOWN}, (_NAME, _WAIT)),
    Route("GET", "/v1/gpus", "GPUs with VRAM figures and a min-free / peak-used window", {200: (_OK, m.Gpus)}),
    Route("GET", "/v1/host", "Host memory", {200: (_OK, m.Host)}),
    Route("GET", "/v1/tools", "The sync daemon's state", {200: (_OK, m.ToolsBody)}),
    Route("GET", "/v1/vllm", "The supervised vLLM", {200: (_OK, m.VllmBody)}),
    Route("POST", "/v1/vllm/{action}", "Start, stop or restart vLLM (waits up to 30 s)",
          {200: ("the snapshot after the action", m.VllmBody), 202: ("still running after 30 s", m.VllmPending),
           404: ("no such action", m.ErrorBody), 409: ("no vLLM configured, or it refused", m.VllmError)},
          (_ACTION,)),
    Route("GET", "/v1/openapi.json", "This document", {200: (_OK, m.OpenApiDocument)}),
)

#: answers any route may give: another uid (the middleware's SO_PEERCRED check)
COMMON_RESPONSES: dict[int, tuple[str, type[BaseModel]]] = {403: ("the peer is not the agent's uid", m.ErrorBody)}


def _add_schema(model: type[BaseModel], schemas: dict[str, Any]) -> dict[str, str]:
    """Put ``model`` (and the models it nests) into ``schemas``; returns the ``$ref`` to it."""
    if model.__name__ not in schemas:
        schema = model.model_json_schema(ref_template=REF, mode="serialization")
        for name, sub in schema.pop("$defs", {}).items():
            schemas.setdefault(name, sub)
        schemas[model.__name__] = schema
    return {"$ref": REF.format(model=model.__name__)}


def _operation(route: Route, schemas: dict[str, Any]) -> dict[str, Any]:
    responses = {
        str(status): {"description": desc, "content": {"application/json": {"schema": _add_schema(model, schemas)}}}
        for status, (desc, model) in sorted({**route.responses, **COMMON_RESPONSES}.items())
    }
    op: dict[str, Any] = {"summary": route.summary, "responses": responses}
    if route.parameters:
        op["parameters"] = list(route.parameters)
    return op


def openapi_document(version: str) -> dict[str, Any]:
    """The OpenAPI 3.1 description served at ``/v1/openapi.json``: ``{"openapi": "3.1.0", "info",
    "servers", "paths": {path: {method: operation}}, "components": {"schemas": {model: JSON Schema}}}``.
    ``version`` is conduit's (``info.version``)."""
    schemas: dict[str, Any] = {}
    paths: dict[str, Any] = {}
    for route in ROUTES:
        paths.setdefault(route.path, {})[route.method.lower()] = _operation(route, schemas)
    return {
        "openapi": "3.1.0",
        "info": {"title": "conduit agent", "version": version,
                 "description": "HTTP/1.1 + JSON on a Unix socket; only the owning uid may connect."},
        "servers": [{"url": "http://localhost"}],
        "paths": paths,
        "components": {"schemas": dict(sorted(schemas.items()))},
    }


__all__ = ["COMMON_RESPONSES", "REF", "ROUTES", "Route", "openapi_document"]
