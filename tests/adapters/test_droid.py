"""Factory Droid adapter: conduit's customModels entry (found again by its id) and sessionDefaultSettings.model in
~/.factory/settings.json, comments and the person's entries kept, the key 0600, limits, and what outranks it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers import toolsamples
from helpers.toolfiles import lifecycle, run_sync, write_profile

from conduit.adapters.base import Env, Root, ToolSettings
from conduit.adapters.droid import MODEL_ID, Droid, DroidOptions, entry_ids, factory_dir, render_settings
from conduit.adapters.formats.textformats import parse_jsonc
from conduit.errors import ToolFileError

MODEL = "claude-sonnet-4-20250514"


def _env(home: Path, cwd: Path | None = None, **extra: str) -> Env:
    return Env(dict(os.environ, HOME=str(home), **extra), cwd=cwd or home)


def _settings(model: str = MODEL, **kw: object) -> ToolSettings:
    return ToolSettings("droid", "gw", Root("https://gw.example.com/api"), "sk-test-abc", model=model,
                        options=DroidOptions(), **kw)  # type: ignore[arg-type]


def test_sample_keeps_everything_but_owned_keys(temp_home: Path) -> None:
    path = toolsamples.droid(temp_home)
    write_profile(temp_home, tools=("droid",))
    lifecycle(temp_home)
    text = path.read_text()
    assert "// Factory Droid user settings" in text and "// local Ollama" in text
    before, after = parse_jsonc(toolsamples.DROID_SETTINGS, path=path), parse_jsonc(text, path=path)
    ours = after["customModels"].pop()
    assert ours == {"id": MODEL_ID, "model": MODEL, "displayName": f"conduit (gw): {MODEL}",
                    "baseUrl": "https://gw.example.com/api/v1", "apiKey": "sk-test-abc",
                    "provider": "generic-chat-completion-api"}
    assert after["sessionDefaultSettings"] == {"model": MODEL_ID, "autonomyMode": "auto-low"}
    before["sessionDefaultSettings"]["model"] = MODEL_ID
    assert after == before
    assert path.stat().st_mode & 0o777 == 0o600


def test_entry_replaced_in_place_with_the_persons_keys(temp_home: Path) -> None:
    path = toolsamples.droid(temp_home)
    first = render_settings(path.read_text(), _settings(context_window=128000, max_output_tokens=8000),
                            "sk-test-abc", path)
    ours = parse_jsonc(first, path=path)["customModels"][1]
    assert (ours["maxContextLimit"], ours["maxOutputTokens"]) == (128000, 8000)
    edited = first.replace('"id": "custom:conduit",', '"id": "custom:conduit",\n      "noImageSupport": true,')
    again = render_settings(edited, _settings(model="glm-4.6"), "sk-test-abc", path)
    models = parse_jsonc(again, path=path)["customModels"]
    assert len(models) == 2 and models[1]["model"] == "glm-4.6" and models[1]["noImageSupport"] is True
    assert "maxContextLimit" not in models[1] and "maxOutputTokens" not in models[1]  # unknown now: removed
    assert again.split('"customModels"')[0] == first.split('"customModels"')[0]  # nothing before it moved


def test_fresh_file_and_refusals(temp_home: Path) -> None:
    path = temp_home / ".factory" / "settings.json"
    doc = parse_jsonc(render_settings(None, _settings(), "${CONDUIT_API_KEY}", path), path=path)
    assert doc["customModels"][0]["apiKey"] == "${CONDUIT_API_KEY}"
    assert doc["sessionDefaultSettings"] == {"model": MODEL_ID}
    with pytest.raises(ToolFileError):
        render_settings('{"customModels": {"a": 1}}', _settings(), "k", path)
    with pytest.raises(ToolFileError):
        render_settings('{"customModels": [1, }', _settings(), "k", path)


def test_entry_ids_as_droid_gives_them() -> None:
    models = [{"model": "a", "displayName": "My  Model"}, {"model": "b", "displayName": "My Model"},
              {"model": "c"}, {"id": MODEL_ID, "model": "d"}, "junk"]
    assert entry_ids(models) == ["custom:My-Model-0", "custom:My-Model-1", "custom:c-0", MODEL_ID, None]


def test_client_view_and_env_key(temp_home: Path) -> None:
    toolsamples.droid(temp_home)
    write_profile(temp_home, tools=(), extra='[tools.droid]\nkey_source = "env"\n')
    lifecycle(temp_home)
    view = Droid().client_view(_env(temp_home, CONDUIT_API_KEY="sk-shell"))
    assert view is not None and (view.base_url, view.key, view.model) == ("https://gw.example.com/api/v1",
                                                                          "sk-shell", MODEL)
    assert view.key_files == ()
    assert Droid().inspect(_env(temp_home)).details["owned"]["apiKey"] == "${CONDUIT_API_KEY}"


def test_factory_home_override(temp_home: Path) -> None:
    assert factory_dir(_env(temp_home, FACTORY_HOME_OVERRIDE=str(temp_home / "o"))) == temp_home / "o" / ".factory"
    assert factory_dir(_env(temp_home)) == temp_home / ".factory"


def test_outranks(temp_home: Path, tmp_path: Path) -> None:
    toolsamples.droid(temp_home)
    write_profile(temp_home, tools=("droid",))
    run_sync(temp_home)
    project = tmp_path / "project"
    (project / ".git").mkdir(parents=True)
    (project / "sub").mkdir()
    settings = _settings()
    assert Droid().outranks(settings, _env(temp_home, project / "sub")) == []
    (project / ".factory").mkdir()
    (project / ".factory" / "settings.json").write_text('{"sessionDefaultSettings": {"model": "gpt-5"}}')
    (temp_home / ".factory" / "settings.local.json").write_text('{"customModels": []}')
    found = Droid().outranks(settings, _env(temp_home, project / "sub"))
    assert [b.source for b in found] == [str(temp_home / ".factory" / "settings.local.json"),
                                         str(project / ".factory" / "settings.json")]
    assert "sk-test-abc" not in repr(found) and "sk-test-abc" not in repr(Droid().inspect(_env(temp_home)))
