"""Zed adapter: a provider ``conduit`` in the JSONC settings, comments and the person's provider kept, no key in
the file, context limits, and doctor's word on where the key must come from (docs/formats/zed.md)."""

from __future__ import annotations

import json
from pathlib import Path

from helpers import toolsamples
from helpers.toolfiles import lifecycle, run_sync, write_profile

from conduit.adapters.base import Env, Root, ToolSettings
from conduit.adapters.formats.textformats import parse_jsonc
from conduit.adapters.zed import DEFAULT_MAX_TOKENS, KEY_VAR, Zed, key_variable


def test_provider_written_key_never(temp_home: Path) -> None:
    path = toolsamples.zed(temp_home)
    write_profile(temp_home, tools=("zed",))
    lifecycle(temp_home)
    text = path.read_text()
    doc = parse_jsonc(text, path=path)
    providers = doc["language_models"]["openai_compatible"]
    assert providers["conduit"] == {
        "api_url": "https://gw.example.com/api/v1",
        "available_models": [{"name": "claude-sonnet-4-20250514", "max_tokens": DEFAULT_MAX_TOKENS}]}
    assert providers["my-provider"]["api_url"] == "https://example.com/v1"  # the person's provider kept
    assert doc["agent"] == {"default_profile": "write",
                            "default_model": {"provider": "conduit", "model": "claude-sonnet-4-20250514"}}
    assert doc["vim_mode"] is True
    for kept in ("// Zed settings", "// the person's own provider"):
        assert kept in text
    assert "sk-test-abc" not in text
    assert not (temp_home / ".config" / "conduit" / "tool-keys").exists()


def test_key_variable_is_the_provider_id_in_upper_snake_case() -> None:
    assert KEY_VAR == "CONDUIT_API_KEY"
    assert key_variable("my-gateway") == "MY_GATEWAY_API_KEY"
    assert key_variable("Some Provider") == "SOME_PROVIDER_API_KEY"


def test_person_fields_kept_and_limits_written(temp_home: Path) -> None:
    path = toolsamples.zed(temp_home)
    write_profile(temp_home, tools=("zed",))
    run_sync(temp_home)
    doc = parse_jsonc(path.read_text(), path=path)
    entry = doc["language_models"]["openai_compatible"]["conduit"]["available_models"][0]
    entry["display_name"] = "Gateway Sonnet"
    entry["capabilities"] = {"tools": True, "images": True}
    path.write_text(json.dumps(doc, indent=2) + "\n")
    settings = ToolSettings(tool="zed", channel="gw", root=Root("https://gw.example.com/api"), key="sk-test-abc",
                            model="claude-sonnet-4-20250514", context_window=200000, max_output_tokens=8192)
    (target,) = Zed().plan(settings, Env(cwd=temp_home))
    new = parse_jsonc(target.render(path.read_text()), path=path)
    (entry,) = new["language_models"]["openai_compatible"]["conduit"]["available_models"]
    assert entry == {"name": "claude-sonnet-4-20250514", "max_tokens": 200000, "display_name": "Gateway Sonnet",
                     "capabilities": {"tools": True, "images": True}, "max_output_tokens": 8192}


def test_doctor_says_where_the_key_comes_from(temp_home: Path, monkeypatch) -> None:
    toolsamples.zed(temp_home)
    write_profile(temp_home, tools=("zed",))
    run_sync(temp_home)
    facts = Zed().inspect(Env(cwd=temp_home))
    assert "CONDUIT_API_KEY" in facts.details["key_source"]
    assert any("CONDUIT_API_KEY" in w for w in facts.warnings)
    monkeypatch.setenv(KEY_VAR, "sk-test-abc")
    assert Zed().inspect(Env(cwd=temp_home)).warnings == ()
    view = Zed().client_view(Env(cwd=temp_home))
    assert view is not None and view.key == "sk-test-abc" and view.key_env == KEY_VAR


def test_another_default_provider_is_reported(temp_home: Path) -> None:
    toolsamples.zed(temp_home)  # the person's agent uses "my-provider"
    facts = Zed().inspect(Env(cwd=temp_home))
    assert facts.effective is not None and facts.effective["agent.default_model"].overrides_conduit
    assert Zed().client_view(Env(cwd=temp_home)) is None


def test_missing_zed_is_not_found(temp_home: Path) -> None:
    write_profile(temp_home, tools=("zed",))
    (report,) = run_sync(temp_home).tools
    assert report.status == "not_found" and "[tools.zed]" in (report.message or "")
