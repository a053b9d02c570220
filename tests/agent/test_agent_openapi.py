"""Every route's live answer fits the schema ``GET /v1/openapi.json`` gives for it, and its pydantic model.

jsonschema is not a dependency, so the schemas are checked by a small validator of the JSON Schema subset
pydantic writes ($ref, type, properties, required, additionalProperties, items, anyOf, enum, const); each
answer is also parsed back with its route's model and checked for the schema's top-level required keys.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from helpers.agentproc import AgentProc, Gateway, fake_gpu, request
from helpers.toolfiles import write_profile

from conduit.daemon.agent.openapi import ROUTES, openapi_document

TYPES: dict[str, Any] = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None)}


def _type_ok(name: str, value: Any) -> bool:
    if name == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if name == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    return isinstance(value, TYPES[name])


def check(value: Any, schema: dict[str, Any], spec: dict[str, Any], at: str = "$") -> None:
    """Raise AssertionError naming the JSON path where ``value`` breaks ``schema``."""
    if "$ref" in schema:
        name = schema["$ref"].removeprefix("#/components/schemas/")
        assert name in spec["components"]["schemas"], f"{at}: dangling $ref {schema['$ref']}"
        check(value, spec["components"]["schemas"][name], spec, at)
        return
    if "anyOf" in schema:
        errors = []
        for sub in schema["anyOf"]:
            try:
                check(value, sub, spec, at)
                return
            except AssertionError as exc:
                errors.append(str(exc))
        raise AssertionError(f"{at}: fits none of anyOf: {errors}")
    if "enum" in schema:
        assert value in schema["enum"], f"{at}: {value!r} not in {schema['enum']}"
    if "const" in schema:
        assert value == schema["const"], f"{at}: {value!r} != {schema['const']!r}"
    types = schema.get("type")
    if types is not None:
        names = types if isinstance(types, list) else [types]
        assert any(_type_ok(t, value) for t in names), f"{at}: {value!r} is not {types}"
    if isinstance(value, dict):
        _check_object(value, schema, spec, at)
    if isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            check(item, schema["items"], spec, f"{at}[{i}]")


def _check_object(value: dict[str, Any], schema: dict[str, Any], spec: dict[str, Any], at: str) -> None:
    props = schema.get("properties", {})
    missing = [k for k in schema.get("required", []) if k not in value]
    assert not missing, f"{at}: required keys missing: {missing}"
    extra = schema.get("additionalProperties", True)
    for key, item in value.items():
        if key in props:
            check(item, props[key], spec, f"{at}.{key}")
        elif extra is False:
            raise AssertionError(f"{at}: key {key!r} is not in the schema")
        elif isinstance(extra, dict):
            check(item, extra, spec, f"{at}.{key}")


def response_schema(spec: dict[str, Any], method: str, path: str, status: int) -> dict[str, Any]:
    op = spec["paths"][path][method.lower()]
    assert str(status) in op["responses"], f"{method} {path} answered {status}, which the document does not list"
    return dict(op["responses"][str(status)]["content"]["application/json"]["schema"])


def top_required(schema: dict[str, Any], spec: dict[str, Any]) -> list[str]:
    if "$ref" in schema:
        schema = spec["components"]["schemas"][schema["$ref"].removeprefix("#/components/schemas/")]
    return list(schema.get("required", []))


# (method, the route's pattern, the path requested) -> the status expected
CALLS = [
    ("GET", "/v1/healthz", "/v1/healthz", 200),
    ("GET", "/v1/status", "/v1/status", 200),
    ("GET", "/v1/channels", "/v1/channels", 200),
    ("GET", "/v1/channels/{name}", "/v1/channels/gw", 200),
    ("GET", "/v1/channels/{name}", "/v1/channels/nope", 404),
    ("POST", "/v1/channels/{name}/probe", "/v1/channels/gw/probe?wait=10", 200),
    ("POST", "/v1/channels/{name}/probe", "/v1/channels/gw/probe?wait=soon", 400),
    ("POST", "/v1/channels/{name}/probe", "/v1/channels/nope/probe", 404),
    ("GET", "/v1/gpus", "/v1/gpus", 200),
    ("GET", "/v1/host", "/v1/host", 200),
    ("GET", "/v1/tools", "/v1/tools", 200),
    ("GET", "/v1/vllm", "/v1/vllm", 200),
    ("POST", "/v1/vllm/{action}", "/v1/vllm/start", 409),
    ("POST", "/v1/vllm/{action}", "/v1/vllm/explode", 404),
    ("GET", "/v1/openapi.json", "/v1/openapi.json", 200),
]


def test_every_route_is_documented_and_called() -> None:
    spec = openapi_document("test")
    assert spec["openapi"] == "3.1.0"
    assert {(r.method, r.path) for r in ROUTES} == {(m, p) for m, p, _, _ in CALLS}
    for route in ROUTES:
        for status, (_, model) in route.responses.items():
            schema = response_schema(spec, route.method, route.path, status)
            assert schema == {"$ref": f"#/components/schemas/{model.__name__}"}
            assert model.__name__ in spec["components"]["schemas"]


def test_live_answers_fit_their_schemas(temp_home: Path) -> None:
    gw = Gateway({"/api/v1/models": 200})
    state = temp_home / ".local" / "state" / "conduit"
    state.mkdir(parents=True)
    (state / "sync.json").write_text(json.dumps({"tools": {"claude_code": {"state": "in_sync"}}, "at": 1}))
    try:
        write_profile(temp_home, gw.url + "/api", tools=())
        gpus = {"devices": [fake_gpu(0, processes=[{"pid": 7, "used": None}]),
                            fake_gpu(1, mig=[{"uuid": "MIG-1", "total": 10, "used": 1, "free": 9, "processes": []}])]}
        with AgentProc(temp_home, gpus=gpus) as agent:
            agent.wait_for("/v1/gpus", lambda b: len(b["gpus"]) == 2)
            agent.wait_for("/v1/tools", lambda b: b.get("tools"))
            _, spec = agent.get("/v1/openapi.json")
            models = {(r.method, r.path): r.responses for r in ROUTES}
            for method, pattern, path, expected in CALLS:
                status, body = request(agent.sock, method, path, timeout=30)
                assert status == expected, (method, path, status, body)
                schema = response_schema(spec, method, pattern, status)
                check(body, schema, spec)
                missing = [k for k in top_required(schema, spec) if k not in body]
                assert not missing, (path, missing)
                models[(method, pattern)][status][1].model_validate(body)  # the model reads its own answer
    finally:
        gw.close()


@pytest.mark.parametrize("bad", [
    {"ok": True},  # required keys missing
    {"ok": "yes", "state": "running", "pid": 1, "version": "x", "api": "v1", "socket": "s", "started_at": 1.0,
     "uptime_s": 1.0},  # a wrong type
    {"ok": True, "state": "dancing", "pid": 1, "version": "x", "api": "v1", "socket": "s", "started_at": 1.0,
     "uptime_s": 1.0},  # not one of the enum's values
    {"ok": True, "state": "running", "pid": 1, "version": "x", "api": "v1", "socket": "s", "started_at": 1.0,
     "uptime_s": 1.0, "surprise": 1},  # a key the schema does not have
])
def test_the_validator_refuses_what_does_not_fit(bad: dict[str, Any]) -> None:
    spec = openapi_document("test")
    with pytest.raises(AssertionError):
        check(bad, response_schema(spec, "GET", "/v1/healthz", 200), spec)
