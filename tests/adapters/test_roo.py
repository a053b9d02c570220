"""Roo Code adapter: conduit's import file (the ``conduit`` profile made current, 0600) and VS Code's
``roo-cline.autoImportSettingsPath`` pointing at it, comments and the person's settings kept
(docs/formats/roo.md)."""

from __future__ import annotations

import json
from pathlib import Path

from helpers import toolsamples
from helpers.toolfiles import lifecycle, run_sync, write_profile

from conduit.adapters.base import Env
from conduit.adapters.formats.textformats import parse_jsonc
from conduit.adapters.roo import SETTING, Roo, import_file


def test_import_file_and_setting(temp_home: Path) -> None:
    export = toolsamples.roo(temp_home)
    write_profile(temp_home, tools=("roo",))
    lifecycle(temp_home)
    vs = temp_home / ".config" / "Code" / "User" / "settings.json"
    text = vs.read_text()
    settings = parse_jsonc(text, path=vs)
    assert settings[SETTING] == str(export) == str(import_file(Env(cwd=temp_home)))
    assert settings["roo-cline.allowedCommands"] == ["npm test", "git log"] and "// VS Code user settings" in text
    assert "sk-test-abc" not in text
    doc = json.loads(export.read_text())
    profiles = doc["providerProfiles"]
    assert profiles["currentApiConfigName"] == "conduit"
    assert profiles["apiConfigs"]["conduit"] == {
        "apiProvider": "openai", "openAiBaseUrl": "https://gw.example.com/api/v1", "openAiApiKey": "sk-test-abc",
        "openAiModelId": "claude-sonnet-4-20250514", "id": "conduit"}
    assert profiles["apiConfigs"]["default"]["apiProvider"] == "anthropic"  # the person's profile kept
    assert doc["globalSettings"] == {"autoApprovalEnabled": True}
    assert export.stat().st_mode & 0o777 == 0o600


def test_fresh_vscode_gets_both_files(temp_home: Path) -> None:
    (temp_home / ".config" / "Code" / "User").mkdir(parents=True)
    write_profile(temp_home, tools=("roo",))
    run_sync(temp_home)
    view = Roo().client_view(Env(cwd=temp_home))
    assert view is not None and (view.base_url, view.key, view.model) == (
        "https://gw.example.com/api/v1", "sk-test-abc", "claude-sonnet-4-20250514")


def test_setting_naming_another_file_is_reported(temp_home: Path) -> None:
    toolsamples.roo(temp_home)
    write_profile(temp_home, tools=("roo",))
    run_sync(temp_home)
    vs = temp_home / ".config" / "Code" / "User" / "settings.json"
    vs.write_text(json.dumps({SETTING: "~/my-roo.json"}))
    facts = Roo().inspect(Env(cwd=temp_home))
    assert facts.effective is not None and facts.effective[SETTING].overrides_conduit
    assert Roo().client_view(Env(cwd=temp_home)) is None  # ~/my-roo.json does not exist


def test_missing_vscode_is_not_found(temp_home: Path) -> None:
    write_profile(temp_home, tools=("roo",))
    (report,) = run_sync(temp_home).tools
    assert report.status == "not_found" and "[tools.roo]" in (report.message or "")
