"""OpenClaw adapter: JSON5-as-JSONC edits, the key by SecretRef to conduit's key file, limits, file location,
and what outranks openclaw.json (an agent's own model, a stale generated models.json)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import toolsamples
from helpers.toolfiles import lifecycle, write_profile

from conduit.adapters.base import Env, Root, TextTarget, ToolSettings
from conduit.adapters.formats.textformats import parse_jsonc
from conduit.adapters.limits import LimitLedger
from conduit.adapters.openclaw import OpenClaw, config_file
from conduit.errors import ToolFileError

ADAPTER = OpenClaw()


def settings(**kw: object) -> ToolSettings:
    base: dict[str, object] = {"tool": "openclaw", "channel": "gw", "root": Root("https://gw.example.com/api"),
                               "key": "sk-test-abc", "model": "m1", "options": OpenClaw.Options(create=True)}
    return ToolSettings(**{**base, **kw})  # type: ignore[arg-type]


def render(home: Path, text: str | None, **kw: object) -> str:
    """The new openclaw.json for ``text`` (the config target of ``plan``)."""
    [_, target] = ADAPTER.plan(settings(**kw), Env({"HOME": str(home)}, cwd=home))
    assert isinstance(target, TextTarget)
    return target.render(text)


def test_sample_survives_only_owned_keys_change(temp_home: Path) -> None:
    path = toolsamples.openclaw(temp_home)
    write_profile(temp_home, tools=("openclaw",))
    lifecycle(temp_home)
    text = path.read_text()
    before, after = parse_jsonc(toolsamples.OPENCLAW_JSON, path=path), parse_jsonc(text, path=path)
    key_file = temp_home / ".config" / "conduit" / "tool-keys" / "gw.key"
    assert after["models"]["providers"].pop("conduit") == {
        "baseUrl": "https://gw.example.com/api/v1", "apiKey": {"source": "file", "provider": "conduit", "id": "value"},
        "api": "openai-completions",
        "models": [{"id": "claude-sonnet-4-20250514", "name": "claude-sonnet-4-20250514"}]}
    assert after.pop("secrets") == {"providers": {"conduit": {"source": "file", "path": str(key_file),
                                                              "mode": "singleValue"}}}
    assert after["agents"]["defaults"]["model"] == {"primary": "conduit/claude-sonnet-4-20250514",
                                                    "fallbacks": ["litellm/llama-3.1-8b"]}
    after["agents"]["defaults"]["model"] = before["agents"]["defaults"]["model"]
    assert after == before
    assert "// OpenClaw config" in text and "sk-test-abc" not in text
    assert key_file.read_text() == "sk-test-abc" and key_file.stat().st_mode & 0o777 == 0o600
    assert path.stat().st_mode & 0o777 == 0o600


def test_client_view_reads_the_key_through_the_secret_ref(temp_home: Path) -> None:
    toolsamples.openclaw(temp_home)
    write_profile(temp_home, tools=("openclaw",))
    lifecycle(temp_home)
    view = ADAPTER.client_view(Env(cwd=temp_home))
    assert view is not None
    assert (view.base_url, view.key, view.model) == ("https://gw.example.com/api/v1", "sk-test-abc",
                                                     "claude-sonnet-4-20250514")
    assert view.key_files == (temp_home / ".config" / "conduit" / "tool-keys" / "gw.key",)


def test_string_model_stays_a_string(tmp_path: Path) -> None:
    doc = json.loads(render(tmp_path, '{"agents": {"defaults": {"model": "litellm/x"}}}\n'))
    assert doc["agents"]["defaults"]["model"] == "conduit/m1"


def test_fresh_file(tmp_path: Path) -> None:
    doc = json.loads(render(tmp_path, None))
    assert doc["agents"] == {"defaults": {"model": {"primary": "conduit/m1"}}}
    assert doc["models"]["providers"]["conduit"]["baseUrl"] == "https://gw.example.com/api/v1"


def test_limits_written_when_known_and_removed_when_unknown(tmp_path: Path) -> None:
    ledger = LimitLedger()
    text = render(tmp_path, None, context_window=131072, max_output_tokens=8192, limits=ledger)
    [entry] = json.loads(text)["models"]["providers"]["conduit"]["models"]
    assert entry == {"id": "m1", "name": "m1", "contextWindow": 131072, "maxTokens": 8192}
    [entry] = json.loads(render(tmp_path, text))["models"]["providers"]["conduit"]["models"]
    assert entry["contextWindow"] == 131072  # no record of conduit's write: the value is kept as the person's
    after = LimitLedger(before=ledger.after)
    [entry] = json.loads(render(tmp_path, text, limits=after))["models"]["providers"]["conduit"]["models"]
    assert entry == {"id": "m1", "name": "m1"}  # conduit's own values go when the limits become unknown


def test_person_keys_in_conduit_model_entry_kept(tmp_path: Path) -> None:
    current = {"models": {"providers": {"conduit": {"models": [
        {"id": "old", "name": "old"}, {"id": "m1", "name": "Mine", "input": ["text", "image"]}]}}}}
    models = json.loads(render(tmp_path, json.dumps(current)))["models"]["providers"]["conduit"]["models"]
    assert models == [{"id": "old", "name": "old"}, {"id": "m1", "name": "Mine", "input": ["text", "image"]}]


def test_json5_only_syntax_refused(tmp_path: Path) -> None:
    with pytest.raises(ToolFileError):
        render(tmp_path, "{ agents: { defaults: {} } }\n")


def test_config_file_location(tmp_path: Path) -> None:
    assert config_file(Env({"HOME": str(tmp_path)})) == tmp_path / ".openclaw" / "openclaw.json"
    legacy = tmp_path / ".clawdbot" / "clawdbot.json"
    legacy.parent.mkdir()
    legacy.write_text("{}")
    assert config_file(Env({"HOME": str(tmp_path)})) == legacy
    env = Env({"HOME": str(tmp_path), "OPENCLAW_STATE_DIR": "~/state"})
    assert config_file(env) == legacy  # an existing default candidate comes before the state dir's new file
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "openclaw.json").write_text("{}")
    assert config_file(env) == tmp_path / "state" / "openclaw.json"
    assert config_file(Env({"HOME": str(tmp_path), "OPENCLAW_CONFIG_PATH": "~/x.json"})) == tmp_path / "x.json"
    assert config_file(Env({"HOME": "/nowhere", "OPENCLAW_HOME": str(tmp_path)})) == legacy


def test_outranks_agent_model_and_stale_models_json(temp_home: Path) -> None:
    path = toolsamples.openclaw(temp_home)
    doc = parse_jsonc(path.read_text(), path=path)
    doc["agents"]["entries"] = {"main": {"model": "litellm/llama-3.1-8b"}, "ok": {"model": "conduit/m1"}}
    path.write_text(json.dumps(doc))
    models_json = temp_home / ".openclaw" / "agents" / "main" / "agent" / "models.json"
    models_json.parent.mkdir(parents=True)
    models_json.write_text(json.dumps({"providers": {"conduit": {"baseUrl": "https://old.example.com/v1",
                                                                  "api": "openai-completions"}}}))
    blockers = ADAPTER.outranks(settings(), Env(cwd=temp_home))
    assert [b.source for b in blockers] == [f"{path} agents.entries.main.model", str(models_json)]
    assert all(b.state == "overridden" for b in blockers)
    models_json.write_text(json.dumps({"providers": {"conduit": {"baseUrl": "https://gw.example.com/api/v1"}}}))
    assert len(ADAPTER.outranks(settings(), Env(cwd=temp_home))) == 1


def test_inspect_shows_the_reference_not_a_key(temp_home: Path) -> None:
    toolsamples.openclaw(temp_home)
    write_profile(temp_home, tools=("openclaw",))
    lifecycle(temp_home)
    facts = ADAPTER.inspect(Env(cwd=temp_home))
    assert facts.details["owned"]["apiKey"] == {"source": "file", "provider": "conduit", "id": "value"}
    assert facts.details["owned"]["model"] == "conduit/claude-sonnet-4-20250514"
    assert "sk-test-abc" not in json.dumps(facts.details)
