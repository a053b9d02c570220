"""Pi adapter: the conduit provider in models.json (// comments kept), the default model in settings.json, the
``!cat`` key reference or the inline key, limits, and what outranks conduit."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from helpers import toolsamples
from helpers.toolfiles import lifecycle, run_sync, write_profile

from conduit.adapters.base import Env, Root, ToolSettings
from conduit.adapters.pi import Pi, PiOptions, agent_dir, parse_models
from conduit.errors import ToolFileError


def _env(home: Path, cwd: Path | None = None, **extra: str) -> Env:
    return Env(dict(os.environ, HOME=str(home), **extra), cwd=cwd or home)


def test_sample_keeps_everything_but_owned_keys(temp_home: Path) -> None:
    path = toolsamples.pi(temp_home)
    write_profile(temp_home, tools=("pi",))
    lifecycle(temp_home)
    text = path.read_text()
    assert "// Pi custom models" in text and "// Ollama ignores it" in text
    doc = parse_models(text, path=path)
    key_file = temp_home / ".config" / "conduit" / "tool-keys" / "gw.key"
    assert doc["providers"]["conduit"] == {
        "baseUrl": "https://gw.example.com/api/v1", "api": "openai-completions", "apiKey": f"!cat {key_file}",
        "models": [{"id": "claude-sonnet-4-20250514"}, {"id": "claude-3-5-haiku-20241022"}]}
    assert doc["providers"]["ollama"] == parse_models(toolsamples.PI_MODELS, path=path)["providers"]["ollama"]
    assert "sk-test-abc" not in text and key_file.read_text() == "sk-test-abc"
    settings = json.loads((temp_home / ".pi" / "agent" / "settings.json").read_text())
    assert settings == {"theme": "dark", "defaultProvider": "conduit", "defaultModel": "claude-sonnet-4-20250514",
                        "quietStartup": True}


def test_inline_key_kept_0600(temp_home: Path) -> None:
    path = toolsamples.pi(temp_home)
    write_profile(temp_home, tools=(), extra='[tools.pi]\nkey_source = "inline"\n')
    lifecycle(temp_home)
    assert parse_models(path.read_text(), path=path)["providers"]["conduit"]["apiKey"] == "sk-test-abc"
    assert path.stat().st_mode & 0o777 == 0o600
    view = Pi().client_view(_env(temp_home))
    assert view is not None and view.key == "sk-test-abc" and view.key_files == (path,)


def test_person_keys_in_conduit_model_kept_and_limits_written(temp_home: Path) -> None:
    path = toolsamples.pi(temp_home)
    write_profile(temp_home, tools=("pi",), small_model=None)
    run_sync(temp_home)
    doc = parse_models(path.read_text(), path=path)
    doc["providers"]["conduit"]["models"][0]["reasoning"] = True
    path.write_text(json.dumps(doc, indent=2))
    settings = ToolSettings("pi", "gw", Root("https://gw.example.com/api"), "sk-x", model="claude-sonnet-4-20250514",
                            options=PiOptions(), context_window=200000, max_output_tokens=8192)
    (_, target, _) = Pi().plan(settings, _env(temp_home))
    new = parse_models(target.render(path.read_text()), path=path)  # type: ignore[union-attr]
    assert new["providers"]["conduit"]["models"] == [
        {"id": "claude-sonnet-4-20250514", "reasoning": True, "contextWindow": 200000, "maxTokens": 8192}]


def test_block_comment_refused_unchanged(temp_home: Path) -> None:
    bad = '{\n  /* Pi reads no block comments */\n  "providers": {}\n}\n'
    path = toolsamples.write(temp_home / ".pi" / "agent" / "models.json", bad)
    write_profile(temp_home, tools=("pi",))
    (report,) = run_sync(temp_home).tools
    assert report.status == "error" and "models.json" in (report.message or "")
    assert path.read_text() == bad
    with pytest.raises(ToolFileError):
        parse_models(bad, path=path)


def test_agent_dir_variable(temp_home: Path) -> None:
    assert agent_dir(_env(temp_home, PI_CODING_AGENT_DIR="~/elsewhere")) == temp_home / "elsewhere"
    assert agent_dir(_env(temp_home)) == temp_home / ".pi" / "agent"


def test_outranks(temp_home: Path, tmp_path: Path) -> None:
    toolsamples.pi(temp_home)
    write_profile(temp_home, tools=("pi",))
    run_sync(temp_home)
    settings = ToolSettings("pi", "gw", Root("https://gw.example.com/api"), "sk-test-abc",
                            model="claude-sonnet-4-20250514")
    project = tmp_path / "project"
    (project / ".pi").mkdir(parents=True)
    assert Pi().outranks(settings, _env(temp_home, project)) == []
    (project / ".pi" / "settings.json").write_text('{"defaultModel": "gpt-4o", "enabledModels": ["openai/*"]}')
    (temp_home / ".pi" / "agent" / "auth.json").write_text('{"conduit": {"type": "api_key", "key": "sk-other"}}')
    found = Pi().outranks(settings, _env(temp_home, project))
    assert [b.source for b in found] == [str(temp_home / ".pi" / "agent" / "auth.json"),
                                         str(project / ".pi" / "settings.json"),
                                         str(project / ".pi" / "settings.json")]
    assert "enabledModels" in found[2].why and "sk-other" not in repr(found)
    (project / ".pi" / "settings.json").write_text('{"enabledModels": ["conduit/*"]}')
    (temp_home / ".pi" / "agent" / "auth.json").write_text("{}")
    assert Pi().outranks(settings, _env(temp_home, project)) == []


def test_inspect_masks_inline_key(temp_home: Path) -> None:
    toolsamples.pi(temp_home)
    write_profile(temp_home, tools=(), extra='[tools.pi]\nkey_source = "inline"\n')
    run_sync(temp_home)
    facts = Pi().inspect(_env(temp_home))
    assert facts.details["owned"]["apiKey"] == "(literal key)" and "sk-test-abc" not in repr(facts)
