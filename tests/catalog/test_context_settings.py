"""Each tool's context-window / output-limit keys: written when known (profile or the channel's cached
``/models``; an output limit derived from the context when only that is known), removed when unknown, the
person's other keys kept, the profile's value winning, and a second sync writes nothing."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
from helpers.modelserver import VLLM_BODY, ModelServer
from helpers.toolfiles import cline_gen_b, cline_gen_c, run_sync, write_profile
from ruamel.yaml import YAML

from conduit.daemon.catalog.models import cache_path, refresh
from conduit.daemon.config.profile import load_profile
from conduit.daemon.config.resolve import resolve_channel

MODEL = "qwen-coder-7b"
TABLES = ('[tools.codex]\ncreate = true\n{x}[tools.opencode]\ncreate = true\n{x}[tools.continue]\ncreate = true\n{x}'
          '[tools.aider]\ncreate = true\n{x}[tools.cline]\n{x}')


def _user_files(home: Path) -> None:
    """Each tool's file with the person's own keys next to where conduit writes."""
    (home / ".codex").mkdir()
    (home / ".codex" / "config.toml").write_text('model_reasoning_effort = "high"\n\n[mcp_servers.docs]\n'
                                                 'command = "docs-mcp"\n')
    oc = home / ".config" / "opencode"
    oc.mkdir(parents=True)
    (oc / "opencode.json").write_text(json.dumps({"theme": "dark", "provider": {"conduit": {"models": {
        MODEL: {"name": "Mine", "tool_call": True, "limit": {"context": 1, "output": 77, "input": 5}}}}}}))
    (home / ".continue").mkdir()
    (home / ".continue" / "config.yaml").write_text(
        "name: Local\nversion: 1.0.0\nschema: v1\nmodels:\n  - name: conduit\n    provider: openai\n"
        "    model: x\n    roles: [chat]\n    defaultCompletionOptions:\n      temperature: 0.2  # mine\n")
    (home / ".aider.model.metadata.json").write_text(json.dumps({"openai/other": {"max_input_tokens": 9},
                                                                  f"openai/{MODEL}": {"input_cost_per_token": 0}}))
    cline_gen_b(home)
    cline_gen_c(home)


def _profile(home: Path, url: str, per_tool: str = "") -> None:
    write_profile(home, url, tools=(), model=MODEL, small_model=None, extra=TABLES.format(x=per_tool))


def _read(home: Path) -> dict[str, object]:
    codex = tomllib.loads((home / ".codex" / "config.toml").read_text())
    oc = json.loads((home / ".config" / "opencode" / "opencode.json").read_text())
    cont = YAML().load((home / ".continue" / "config.yaml").read_text())
    entry = next(m for m in cont["models"] if m["name"] == "conduit")
    meta = json.loads((home / ".aider.model.metadata.json").read_text())
    state = json.loads((home / ".cline" / "data" / "globalState.json").read_text())
    prov = json.loads((home / ".cline" / "data" / "settings" / "providers.json").read_text())
    return {"codex": codex, "opencode": oc["provider"]["conduit"]["models"][MODEL], "oc": oc,
            "continue": dict(entry.get("defaultCompletionOptions") or {}), "aider": meta,
            "cline_b": state, "cline_c": prov["providers"]["openai-compatible"]["settings"]}


@pytest.fixture
def server() -> ModelServer:
    srv = ModelServer(VLLM_BODY)
    yield srv
    srv.close()


def test_nothing_written_when_nothing_is_known(temp_home: Path, server: ModelServer) -> None:
    _user_files(temp_home)
    _profile(temp_home, server.url)
    assert run_sync(temp_home).ok
    got = _read(temp_home)
    assert "model_context_window" not in got["codex"]
    assert got["opencode"] == {"name": "Mine", "tool_call": True}  # conduit's entry: an unknown limit goes
    assert got["continue"] == {"temperature": 0.2}
    assert got["aider"][f"openai/{MODEL}"] == {"input_cost_per_token": 0}
    assert "actModeOpenAiModelInfo" not in got["cline_b"]
    assert "contextWindow" not in got["cline_c"] and "maxTokens" not in got["cline_c"]


def test_cached_server_figure_reaches_every_tool_and_keeps_the_rest(temp_home: Path, server: ModelServer) -> None:
    _user_files(temp_home)
    _profile(temp_home, server.url)
    refresh(resolve_channel(load_profile(temp_home / ".config" / "conduit" / "profile.toml"), "gw"))
    report = run_sync(temp_home)
    assert report.ok, [(t.tool, t.message) for t in report.tools]
    got = _read(temp_home)
    assert got["codex"]["model_context_window"] == 4096
    assert got["codex"]["model_reasoning_effort"] == "high" and "docs" in got["codex"]["mcp_servers"]
    # vLLM lists max_model_len only: the output limit is derived (4096 // 4) and Aider's input is the rest
    assert got["opencode"] == {"name": "Mine", "tool_call": True, "limit": {"context": 4096, "output": 1024, "input": 5}}
    assert got["oc"]["theme"] == "dark"
    assert got["continue"] == {"temperature": 0.2, "contextLength": 4096, "maxTokens": 1024}
    assert "# mine" in (temp_home / ".continue" / "config.yaml").read_text()
    assert got["aider"] == {"openai/other": {"max_input_tokens": 9}, f"openai/{MODEL}": {
        "input_cost_per_token": 0, "litellm_provider": "openai", "mode": "chat", "max_input_tokens": 3072,
        "max_output_tokens": 1024, "max_tokens": 1024}}
    for mode in ("plan", "act"):
        assert got["cline_b"][f"{mode}ModeOpenAiModelInfo"] == {"contextWindow": 4096, "maxTokens": 1024}
    assert got["cline_b"]["mcpMarketplaceEnabled"] is True
    assert (got["cline_c"]["contextWindow"], got["cline_c"]["maxTokens"]) == (4096, 1024)
    assert not run_sync(temp_home).changed  # a second sync writes nothing


def test_profile_values_win_over_the_server(temp_home: Path, server: ModelServer) -> None:
    _user_files(temp_home)
    _profile(temp_home, server.url, per_tool="context_window = 3000\nmax_output_tokens = 512\n")
    refresh(resolve_channel(load_profile(temp_home / ".config" / "conduit" / "profile.toml"), "gw"))
    assert run_sync(temp_home).ok
    got = _read(temp_home)
    assert got["codex"]["model_context_window"] == 3000 and "model_max_output_tokens" not in got["codex"]
    assert got["opencode"]["limit"] == {"context": 3000, "output": 512, "input": 5}
    assert got["continue"] == {"temperature": 0.2, "contextLength": 3000, "maxTokens": 512}
    assert got["aider"][f"openai/{MODEL}"] == {"input_cost_per_token": 0, "litellm_provider": "openai",
                                               "mode": "chat", "max_input_tokens": 3000 - 512,
                                               "max_output_tokens": 512, "max_tokens": 512}
    assert got["cline_b"]["actModeOpenAiModelInfo"] == {"contextWindow": 3000, "maxTokens": 512}
    assert (got["cline_c"]["contextWindow"], got["cline_c"]["maxTokens"]) == (3000, 512)
    assert not run_sync(temp_home).changed


def test_limits_removed_when_no_longer_known(temp_home: Path, server: ModelServer) -> None:
    """A limit from before (another channel or model, a fallback switch) does not stay once the new one's
    ``/models`` says nothing: each tool's conduit-owned limit keys go, the person's keys stay."""
    _user_files(temp_home)
    _profile(temp_home, server.url)
    refresh(resolve_channel(load_profile(temp_home / ".config" / "conduit" / "profile.toml"), "gw"))
    assert run_sync(temp_home).ok
    cache_path("gw").unlink()  # the channel now lists no context for the model
    report = run_sync(temp_home)
    assert report.ok and report.changed
    got = _read(temp_home)
    assert "model_context_window" not in got["codex"] and got["codex"]["model_reasoning_effort"] == "high"
    assert got["opencode"] == {"name": "Mine", "tool_call": True}
    assert got["continue"] == {"temperature": 0.2}
    assert got["aider"][f"openai/{MODEL}"] == {"input_cost_per_token": 0}  # the person's entry, as it was
    assert got["aider"]["openai/other"] == {"max_input_tokens": 9}
    for mode in ("plan", "act"):
        assert f"{mode}ModeOpenAiModelInfo" not in got["cline_b"]
    assert "contextWindow" not in got["cline_c"] and "maxTokens" not in got["cline_c"]
    assert got["cline_c"]["model"] == MODEL
    assert not run_sync(temp_home).changed


def test_sync_never_waits_on_the_network(temp_home: Path) -> None:
    """The engine reads only the cache: with nothing cached and the server gone, it still syncs, unlimited."""
    _user_files(temp_home)
    _profile(temp_home, "http://127.0.0.1:9")
    report = run_sync(temp_home)
    assert report.ok
    assert "model_context_window" not in _read(temp_home)["codex"]
