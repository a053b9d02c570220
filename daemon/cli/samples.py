"""Real-format files of each tool (docs/formats/*.md), for ``conduit demo`` and the test suite.

Every builder writes under a given HOME exactly where the tool itself keeps the file. The CC Switch schema is
written here from its format notes (schema 17), never copied from the app.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

CLAUDE_SETTINGS = {
    "$schema": "https://json.schemastore.org/claude-code-settings.json",
    "permissions": {"allow": ["Bash(npm run test:*)", "Read(~/.zshrc)"], "deny": ["Read(./.env)"]},
    "hooks": {"PostToolUse": [{"matcher": "Edit|Write",
                               "hooks": [{"type": "command", "command": "prettier --write \"$FILE\""}]}]},
    "statusLine": {"type": "command", "command": "~/.claude/statusline.sh", "padding": 0},
    "env": {"DISABLE_TELEMETRY": "1", "ANTHROPIC_BASE_URL": "https://old.example.com/api/v1",
            "ANTHROPIC_AUTH_TOKEN": "sk-old-0000000000000000"},
    "enabledPlugins": {"formatter@anthropic-tools": True},
    "model": "opus",
}

# CC Switch v3.20 schema (user_version 17), reduced to the tables and columns its format notes name.
CC_SWITCH_SCHEMA = """
CREATE TABLE providers (
    id TEXT NOT NULL, app_type TEXT NOT NULL, name TEXT NOT NULL, settings_config TEXT NOT NULL,
    website_url TEXT, category TEXT, created_at INTEGER, sort_index INTEGER, notes TEXT, icon TEXT,
    icon_color TEXT, meta TEXT NOT NULL DEFAULT '{}', is_current BOOLEAN NOT NULL DEFAULT 0,
    in_failover_queue BOOLEAN NOT NULL DEFAULT 0, PRIMARY KEY (id, app_type));
CREATE TABLE provider_endpoints (
    id INTEGER PRIMARY KEY AUTOINCREMENT, provider_id TEXT NOT NULL, app_type TEXT NOT NULL, url TEXT NOT NULL,
    added_at INTEGER, FOREIGN KEY (provider_id, app_type) REFERENCES providers(id, app_type) ON DELETE CASCADE);
CREATE TABLE settings (key TEXT PRIMARY KEY, value TEXT);
PRAGMA user_version = 17;
"""
DEEPSEEK_ID = "6f1d2c1e-8a7b-4c1e-9d2a-0b1c2d3e4f50"


def write_json(path: Path, doc: object, mode: int = 0o600) -> Path:
    """Write ``doc`` as 2-space JSON at ``path`` (creating directories) with ``mode``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2) + "\n")
    path.chmod(mode)
    return path


def claude_settings(home: Path, doc: dict[str, Any] | None = None) -> Path:
    """``~/.claude/settings.json`` with permissions, hooks, statusLine, enabledPlugins and an env."""
    return write_json(home / ".claude" / "settings.json", CLAUDE_SETTINGS if doc is None else doc)


def cline_gen_b(home: Path, secrets_mode: int = 0o600) -> tuple[Path, Path]:
    """Cline generation B: globalState.json (with unrelated keys) and secrets.json."""
    data = home / ".cline" / "data"
    state = write_json(data / "globalState.json", {
        "planModeApiProvider": "anthropic", "actModeApiProvider": "anthropic", "openAiBaseUrl": "",
        "mcpMarketplaceEnabled": True, "telemetrySetting": "disabled", "autoApprovalSettings": {"version": 1},
    })
    secrets = write_json(data / "secrets.json", {"apiKey": "sk-ant-other-provider-key-0000"}, mode=secrets_mode)
    return state, secrets


def cline_gen_c(home: Path) -> Path:
    """Cline CLI generation C providers.json with another provider already configured."""
    return write_json(home / ".cline" / "data" / "settings" / "providers.json", {
        "version": 1, "lastUsedProvider": "anthropic",
        "providers": {"anthropic": {"settings": {"provider": "anthropic", "apiKey": "sk-ant-aaaaaaaaaaaaaaaa",
                                                 "model": "claude-sonnet-4"},
                                    "updatedAt": "2026-01-01T00:00:00.000Z", "tokenSource": "manual"}},
    })


def cc_switch_db(home: Path) -> Path:
    """A CC Switch schema-17 database with one existing provider (current) and its endpoints."""
    d = home / ".cc-switch"
    d.mkdir(parents=True, exist_ok=True)
    db = d / "cc-switch.db"
    with sqlite3.connect(db) as conn:
        conn.executescript(CC_SWITCH_SCHEMA)
        conn.execute(
            "INSERT INTO providers (id, app_type, name, settings_config, category, created_at, sort_index, meta, "
            "is_current) VALUES (?, 'claude', 'DeepSeek', ?, 'cn_official', 1763000000000, 1, '{}', 1)",
            (DEEPSEEK_ID, json.dumps({"env": {"ANTHROPIC_AUTH_TOKEN": "sk-deepseek-000000000000",
                                              "ANTHROPIC_BASE_URL": "https://api.deepseek.com/anthropic",
                                              "ANTHROPIC_MODEL": "deepseek-chat"}})))
        conn.execute("INSERT INTO settings (key, value) VALUES ('common_config_claude', '{}')")
    conn.close()
    write_json(d / "settings.json", {"currentProviderClaude": DEEPSEEK_ID, "language": "en"})
    return db


def add_endpoints(db: Path, provider_id: str, urls: list[str]) -> None:
    """Rows in provider_endpoints for ``provider_id`` (claude)."""
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA foreign_keys = ON")
        conn.executemany("INSERT INTO provider_endpoints (provider_id, app_type, url, added_at) "
                         "VALUES (?, 'claude', ?, 1763000000000)", [(provider_id, u) for u in urls])
    conn.close()
