"""Cline adapter: generations B and C (A unsupported), cases C02, C17, C18."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

from helpers.toolfiles import cline_gen_b, cline_gen_c, lifecycle, run_sync, write_profile


def test_c02_root_gets_v1_generation_b(temp_home: Path) -> None:
    state, secrets = cline_gen_b(temp_home)
    write_profile(temp_home, "https://GW.example.com/api", tools=("cline",))
    lifecycle(temp_home)
    doc = json.loads(state.read_text())
    assert doc["openAiBaseUrl"] == "https://gw.example.com/api/v1"
    assert doc["planModeApiProvider"] == doc["actModeApiProvider"] == "openai"
    assert doc["actModeOpenAiModelId"] == doc["planModeOpenAiModelId"] == "claude-sonnet-4-20250514"
    assert doc["mcpMarketplaceEnabled"] is True and doc["autoApprovalSettings"] == {"version": 1}
    sdoc = json.loads(secrets.read_text())
    assert sdoc == {"apiKey": "sk-ant-other-provider-key-0000", "openAiApiKey": "sk-test-abc"}


def test_c17_secrets_mode_tightened(temp_home: Path) -> None:
    _, secrets = cline_gen_b(temp_home, secrets_mode=0o644)
    write_profile(temp_home, tools=("cline",))
    report = run_sync(temp_home)
    assert secrets.stat().st_mode & 0o777 == 0o600
    assert any("0o644" in n or "0644" in n for r in report.tools[0].results for n in r.notices)


def test_c18_generation_c_updated_at_z_and_valid(temp_home: Path) -> None:
    path = cline_gen_c(temp_home)
    write_profile(temp_home, "https://gw.example.com/api/v4/", tools=("cline",))
    lifecycle(temp_home)
    doc = json.loads(path.read_text())
    entry = doc["providers"]["openai-compatible"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", entry["updatedAt"])
    assert entry["settings"] == {"provider": "openai-compatible", "apiKey": "sk-test-abc",
                                 "model": "claude-sonnet-4-20250514", "baseUrl": "https://gw.example.com/api/v4"}
    assert entry["tokenSource"] == "manual"
    assert doc["lastUsedProvider"] == "openai-compatible" and doc["version"] == 1
    assert doc["providers"]["anthropic"]["settings"]["apiKey"] == "sk-ant-aaaaaaaaaaaaaaaa"  # untouched
    assert path.stat().st_mode & 0o777 == 0o600


def test_updated_at_moves_only_on_change(temp_home: Path) -> None:
    path = cline_gen_c(temp_home)
    write_profile(temp_home, tools=("cline",))
    run_sync(temp_home)
    first = json.loads(path.read_text())["providers"]["openai-compatible"]["updatedAt"]
    run_sync(temp_home)
    assert json.loads(path.read_text())["providers"]["openai-compatible"]["updatedAt"] == first
    write_profile(temp_home, tools=("cline",), model="other-model")
    run_sync(temp_home)
    entry = json.loads(path.read_text())["providers"]["openai-compatible"]
    assert entry["settings"]["model"] == "other-model"


def test_both_generations_written_when_both_present(temp_home: Path) -> None:
    state, _ = cline_gen_b(temp_home)
    providers = cline_gen_c(temp_home)
    write_profile(temp_home, tools=("cline",))
    run_sync(temp_home)
    assert json.loads(state.read_text())["openAiBaseUrl"] == "https://gw.example.com/api/v1"
    assert json.loads(providers.read_text())["providers"]["openai-compatible"]["settings"]["baseUrl"] == \
        "https://gw.example.com/api/v1"


def test_cline_data_dir_variables(temp_home: Path, monkeypatch) -> None:
    custom = temp_home / "custom-cline"
    (custom / "settings").mkdir(parents=True)
    (custom / "settings" / "providers.json").write_text('{"version": 1, "providers": {}}')
    monkeypatch.setenv("CLINE_DATA_DIR", f"  {custom}  ")  # Cline trims it
    write_profile(temp_home, tools=("cline",))
    run_sync(temp_home)
    doc = json.loads((custom / "settings" / "providers.json").read_text())
    assert doc["providers"]["openai-compatible"]["settings"]["baseUrl"] == "https://gw.example.com/api/v1"


def test_not_installed_is_reported_not_created(temp_home: Path) -> None:
    write_profile(temp_home, tools=("cline",))
    (report,) = run_sync(temp_home).tools
    assert report.status == "not_found" and "generation" in (report.detail or "")
    assert not (temp_home / ".cline").exists()


def test_generation_option_creates_files(temp_home: Path) -> None:
    write_profile(temp_home, tools=(), extra='[tools.cline]\ngeneration = "C"\n')
    run_sync(temp_home)
    path = temp_home / ".cline" / "data" / "settings" / "providers.json"
    assert json.loads(path.read_text())["lastUsedProvider"] == "openai-compatible"


def test_generation_a_unsupported(temp_home: Path) -> None:
    db = temp_home / ".config" / "Code" / "User" / "globalStorage" / "state.vscdb"
    db.parent.mkdir(parents=True)
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE ItemTable (key TEXT UNIQUE ON CONFLICT REPLACE, value BLOB)")
        conn.execute("INSERT INTO ItemTable VALUES ('saoudrizwan.claude-dev', '{}')")
    conn.close()
    write_profile(temp_home, tools=("cline",))
    (report,) = run_sync(temp_home).tools
    assert report.status == "unsupported" and ">= 3.66" in (report.message or "")


def test_c17_mode_tightened_even_when_content_is_already_right(temp_home: Path) -> None:
    _, secrets = cline_gen_b(temp_home)
    write_profile(temp_home, tools=("cline",))
    run_sync(temp_home)
    secrets.chmod(0o644)
    report = run_sync(temp_home)
    assert secrets.stat().st_mode & 0o777 == 0o600
    assert report.tools[0].status == "changed"
    assert lifecycle(temp_home).tools[0].status == "unchanged"
