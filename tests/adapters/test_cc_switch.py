"""CC Switch adapter: the schema-17 SQLite store (case C19), both current-provider layers, legacy config.json."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from helpers.toolfiles import (
    DEEPSEEK_ID,
    add_endpoints,
    cc_switch_db,
    lifecycle,
    run_sync,
    write_json,
    write_profile,
)


def rows(db: Path) -> dict[str, dict]:
    with sqlite3.connect(db) as conn:
        conn.row_factory = sqlite3.Row
        out = {r["id"]: dict(r) for r in conn.execute("SELECT * FROM providers WHERE app_type = 'claude'")}
    conn.close()
    return out


def test_provider_row_written_and_current_in_both_layers(temp_home: Path) -> None:
    db = cc_switch_db(temp_home)
    write_profile(temp_home, "https://gw.example.com/api/v1", tools=("cc_switch",))
    lifecycle(temp_home)
    r = rows(db)
    mine = r["conduit-gw"]
    env = json.loads(mine["settings_config"])["env"]
    assert env["ANTHROPIC_BASE_URL"] == "https://gw.example.com/api"  # no /v1 for claude rows
    assert env["ANTHROPIC_AUTH_TOKEN"] == "sk-test-abc"
    assert env["ANTHROPIC_MODEL"] == "claude-sonnet-4-20250514"
    assert mine["is_current"] == 1 and r[DEEPSEEK_ID]["is_current"] == 0
    assert mine["created_at"] > 10**12  # epoch milliseconds
    assert json.loads(r[DEEPSEEK_ID]["settings_config"])["env"]["ANTHROPIC_MODEL"] == "deepseek-chat"
    layer2 = json.loads((temp_home / ".cc-switch" / "settings.json").read_text())
    assert layer2 == {"currentProviderClaude": "conduit-gw", "language": "en"}
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 17
        assert conn.execute("SELECT value FROM settings WHERE key = 'common_config_claude'").fetchone()[0] == "{}"
    conn.close()


def test_c19_endpoints_survive_a_sync(temp_home: Path) -> None:
    db = cc_switch_db(temp_home)
    write_profile(temp_home, tools=("cc_switch",))
    run_sync(temp_home)
    add_endpoints(db, "conduit-gw", ["https://gw.example.com/api", "https://backup.example.com/api"])
    add_endpoints(db, DEEPSEEK_ID, ["https://api.deepseek.com/anthropic"])
    write_profile(temp_home, tools=("cc_switch",), model="another-model")  # forces an update of the row
    report = run_sync(temp_home)
    assert report.tools[0].status == "changed"
    with sqlite3.connect(db) as conn:
        urls = conn.execute("SELECT provider_id, url FROM provider_endpoints ORDER BY id").fetchall()
    conn.close()
    assert urls == [("conduit-gw", "https://gw.example.com/api"), ("conduit-gw", "https://backup.example.com/api"),
                    (DEEPSEEK_ID, "https://api.deepseek.com/anthropic")]
    assert json.loads(rows(db)["conduit-gw"]["settings_config"])["env"]["ANTHROPIC_MODEL"] == "another-model"


def test_user_fields_in_conduit_row_are_kept(temp_home: Path) -> None:
    db = cc_switch_db(temp_home)
    write_profile(temp_home, tools=("cc_switch",))
    run_sync(temp_home)
    with sqlite3.connect(db) as conn:
        cfg = json.loads(conn.execute("SELECT settings_config FROM providers WHERE id = 'conduit-gw'").fetchone()[0])
        cfg["env"]["CLAUDE_CODE_MAX_OUTPUT_TOKENS"] = "32000"
        cfg["permissions"] = {"allow": ["Bash"]}
        conn.execute("UPDATE providers SET settings_config = ?, notes = 'mine', icon = 'star' WHERE id = 'conduit-gw'",
                     (json.dumps(cfg),))
    conn.close()
    run_sync(temp_home)
    row = rows(db)["conduit-gw"]
    cfg = json.loads(row["settings_config"])
    assert cfg["env"]["CLAUDE_CODE_MAX_OUTPUT_TOKENS"] == "32000" and cfg["permissions"] == {"allow": ["Bash"]}
    assert (row["notes"], row["icon"]) == ("mine", "star")


def test_x_api_key_sets_meta(temp_home: Path) -> None:
    db = cc_switch_db(temp_home)
    write_profile(temp_home, tools=("cc_switch",), auth="x-api-key")
    run_sync(temp_home)
    row = rows(db)["conduit-gw"]
    assert json.loads(row["meta"]) == {"apiKeyField": "ANTHROPIC_API_KEY"}
    env = json.loads(row["settings_config"])["env"]
    assert env["ANTHROPIC_API_KEY"] == "sk-test-abc" and "ANTHROPIC_AUTH_TOKEN" not in env


def test_missing_store_is_never_created(temp_home: Path) -> None:
    write_profile(temp_home, tools=("cc_switch",))
    (t,) = run_sync(temp_home).tools
    assert t.status == "not_found" and "never creates" in (t.detail or "")
    assert not (temp_home / ".cc-switch").exists()


def test_legacy_config_json(temp_home: Path) -> None:
    legacy = write_json(temp_home / ".cc-switch" / "config.json", {
        "version": 2,
        "claude": {"providers": {"p1": {"id": "p1", "name": "Old", "settingsConfig": {"env": {"X": "1"}}}},
                   "current": "p1"},
        "codex": {"providers": {}, "current": ""},
    })
    write_profile(temp_home, tools=("cc_switch",))
    lifecycle(temp_home)
    doc = json.loads(legacy.read_text())
    assert doc["claude"]["current"] == "conduit-gw"
    assert doc["claude"]["providers"]["p1"]["name"] == "Old"
    env = doc["claude"]["providers"]["conduit-gw"]["settingsConfig"]["env"]
    assert env["ANTHROPIC_BASE_URL"] == "https://gw.example.com/api"
    assert doc["codex"] == {"providers": {}, "current": ""}


def test_diff_masks_keys(temp_home: Path) -> None:
    cc_switch_db(temp_home)
    write_profile(temp_home, key_text="sk-test-0123456789abcdef", tools=("cc_switch",))
    report = run_sync(temp_home, dry_run=True)
    text = "".join(r.diff for r in report.tools[0].results)
    assert "conduit-gw" in text
    assert "sk-test-0123456789abcdef" not in text and "sk-...cdef" in text
    assert "conduit-gw" not in rows(temp_home / ".cc-switch" / "cc-switch.db")  # dry run wrote nothing


def _mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


def test_database_holding_the_key_and_its_wal_files_become_0600(temp_home: Path) -> None:
    db = cc_switch_db(temp_home)
    db.chmod(0o644)
    app = sqlite3.connect(db)  # CC Switch running in WAL mode: -wal and -shm exist while it is open
    try:
        app.execute("PRAGMA journal_mode=WAL")
        app.execute("UPDATE settings SET value = value WHERE key = 'common_config_claude'")
        app.commit()
        companions = [db.with_name(db.name + s) for s in ("-wal", "-shm")]
        for p in companions:
            p.chmod(0o644)
        write_profile(temp_home, key_text="sk-test-0123456789abcdef", tools=("cc_switch",))
        dry = run_sync(temp_home, dry_run=True).tools[0].results[0]
        assert any("would tighten mode 0644 -> 0600 (cc-switch.db)" in n for n in dry.notices)
        assert _mode(db) == 0o644
        result = run_sync(temp_home).tools[0].results[0]
        assert result.error is None
        assert {n for n in result.notices if "tightened" in n} == {
            "tightened mode 0644 -> 0600 (cc-switch.db)", "tightened mode 0644 -> 0600 (cc-switch.db-wal)",
            "tightened mode 0644 -> 0600 (cc-switch.db-shm)"}
        assert [_mode(p) for p in (db, *companions)] == [0o600, 0o600, 0o600]
    finally:
        app.close()
    # SQLite gives a journal it creates later the database's mode: a rollback journal is 0600 too.
    app = sqlite3.connect(db, isolation_level=None)
    try:
        assert app.execute("PRAGMA journal_mode=DELETE").fetchone()[0] == "delete"
        app.execute("BEGIN IMMEDIATE")
        app.execute("CREATE TABLE conduit_test_journal (x)")
        journal = db.with_name(db.name + "-journal")
        assert journal.exists() and _mode(journal) == 0o600
        app.execute("COMMIT")
    finally:
        app.close()
    again = run_sync(temp_home).tools[0]
    assert again.status == "unchanged" and not any("tighten" in n for r in again.results for n in r.notices)
