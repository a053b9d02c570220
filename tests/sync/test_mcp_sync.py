"""MCP servers from the profile, through the real sync engine into real tool files under a temporary HOME:
merge-only (a person's servers and every other key survive add, change, rename and removal byte for byte),
ownership (a hand-edited conduit entry is drift, not the person's server taken over; ``rm`` removes only
conduit's own entries), and secrets (a header token from a key source in no report, diff or state file; the
file that must hold it is 0600; Codex gets the variable's name instead)."""

from __future__ import annotations

import json
import os
import stat
import tomllib
from pathlib import Path

import pytest
from helpers.toolfiles import run_sync, write_profile

from conduit.daemon.sync.mcpstate import mcp_state_path

TOKEN = "tok-9f3c1e7a55b2d0c4"
TABLES = "[tools.claude_code]\n[tools.codex]\ncreate = true\n[tools.gemini]\ncreate = true\n"
SERVERS = """
[mcp.servers.files]
command = "/usr/bin/mcp-files"
args = ["--root", "/srv"]
env = { LOG = "info" }

[mcp.servers.search]
url = "http://127.0.0.1:8765/mcp"
bearer_token = { env = "SEARCH_TOKEN" }
"""
CLAUDE = ('{\n  "numStartups": 4,\n  "oauthAccount": {"emailAddress": "p@example.com"},\n  "projects": {\n'
          '    "/home/p/src": {"allowedTools": [], "history": [{"display": "hi"}]}\n  },\n'
          '  "mcpServers": {\n    "mine": {"type": "stdio", "command": "/opt/mine", "args": []}\n  },\n'
          '  "userID": "abc"\n}\n')
CODEX = ('approval_policy = "on-request"  # mine\n\n[projects."/home/p/src"]\ntrust_level = "trusted"\n\n'
         '[mcp_servers.docs]\ncommand = "docs-mcp"   # my own\n')
GEMINI = '{\n  // my settings\n  "theme": "Dracula",\n  "mcpServers": {\n    "mine": {"command": "/opt/mine"}\n  }\n}\n'


def _files(home: Path) -> dict[str, Path]:
    return {"claude": home / ".claude.json", "codex": home / ".codex" / "config.toml",
            "gemini": home / ".gemini" / "settings.json"}


@pytest.fixture
def home(temp_home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SEARCH_TOKEN", TOKEN)
    (temp_home / ".claude").mkdir()
    (temp_home / ".codex").mkdir()
    (temp_home / ".gemini").mkdir()
    files = _files(temp_home)
    files["claude"].write_text(CLAUDE)
    files["codex"].write_text(CODEX)
    files["gemini"].write_text(GEMINI)
    return temp_home


def _profile(home: Path, servers: str) -> None:
    path = write_profile(home, tools=(), extra=TABLES + servers)
    path.write_text(path.read_text().replace('protocols = ["openai", "anthropic"]',
                                             'protocols = ["openai", "anthropic", "gemini"]'))


def _sync_ok(home: Path, **kw: object):
    report = run_sync(home, **kw)
    bad = [(t.tool, t.status, t.message) for t in report.tools if t.status not in ("changed", "unchanged")]
    assert not bad, bad
    return report


def _claude_servers(home: Path) -> dict[str, object]:
    return json.loads(_files(home)["claude"].read_text())["mcpServers"]


def test_servers_written_in_each_tools_own_shape(home: Path) -> None:
    _profile(home, SERVERS)
    _sync_ok(home)
    claude = _claude_servers(home)
    assert list(claude) == ["mine", "files", "search"]  # the person's first, never reordered
    assert claude["files"] == {"type": "stdio", "command": "/usr/bin/mcp-files", "args": ["--root", "/srv"],
                               "env": {"LOG": "info"}}
    assert claude["search"] == {"type": "http", "url": "http://127.0.0.1:8765/mcp",
                                "headers": {"Authorization": f"Bearer {TOKEN}"}}
    codex = tomllib.loads(_files(home)["codex"].read_text())["mcp_servers"]
    assert list(codex) == ["docs", "files", "search"]
    assert codex["search"] == {"url": "http://127.0.0.1:8765/mcp", "bearer_token_env_var": "SEARCH_TOKEN"}
    assert codex["files"]["env"] == {"LOG": "info"}
    gemini = _files(home)["gemini"].read_text()
    assert gemini.startswith(GEMINI[:60])  # the comment and the person's server where they were
    assert '"files"' in gemini and '"search"' in gemini


@pytest.mark.parametrize("second", [
    "",  # removal of every conduit server ([mcp] gone but declared empty below)
    SERVERS.replace("/srv", "/data"),  # change
    SERVERS.replace("servers.files", "servers.files2"),  # rename
])
def test_every_other_byte_survives_add_change_rename_remove(home: Path, second: str) -> None:
    _profile(home, "[mcp]\n")
    _sync_ok(home)  # the model settings only: the bytes every later sync must come back to
    baseline = {k: p.read_text() for k, p in _files(home).items()}
    assert baseline["claude"] == CLAUDE and "[mcp_servers.docs]" in baseline["codex"]
    _profile(home, SERVERS)
    _sync_ok(home)
    _profile(home, second or "[mcp]\n")
    _sync_ok(home)
    _profile(home, "[mcp]\n")
    _sync_ok(home)
    assert {k: p.read_text() for k, p in _files(home).items()} == baseline


def test_no_mcp_table_leaves_servers_alone(home: Path) -> None:
    _profile(home, SERVERS)
    _sync_ok(home)
    _profile(home, "")  # no [mcp] at all: conduit does not manage MCP servers now
    _sync_ok(home)
    assert "files" in _claude_servers(home)


def test_hand_edited_entry_is_drift_and_rm_keeps_it(home: Path) -> None:
    _profile(home, SERVERS)
    _sync_ok(home)
    path = _files(home)["claude"]
    doc = json.loads(path.read_text())
    doc["mcpServers"]["files"]["args"] = ["--root", "/mine"]
    path.write_text(json.dumps(doc, indent=2))
    dry = run_sync(home, dry_run=True)
    claude = next(t for t in dry.tools if t.tool == "claude_code")
    assert claude.status == "changed" and "/mine" in claude.results[-1].diff  # drift: the daemon reports it
    assert json.loads(path.read_text())["mcpServers"]["files"]["args"] == ["--root", "/mine"]  # untouched
    _profile(home, SERVERS.split("[mcp.servers.search]")[0].replace("[mcp.servers.files]", "[mcp.servers.other]"))
    _sync_ok(home)  # `files` removed from the profile: the hand-edited entry is the person's now
    servers = _claude_servers(home)
    assert servers["files"]["args"] == ["--root", "/mine"]
    assert "search" not in servers and "other" in servers


def test_a_persons_server_of_the_same_name_is_kept(home: Path) -> None:
    _profile(home, SERVERS.replace("servers.files", "servers.mine"))
    _sync_ok(home)
    assert _claude_servers(home)["mine"] == {"type": "stdio", "command": "/opt/mine", "args": []}
    _profile(home, "[mcp]\n")
    _sync_ok(home)
    assert _claude_servers(home)["mine"] == {"type": "stdio", "command": "/opt/mine", "args": []}


def test_lost_server_is_written_back(home: Path) -> None:
    """A tool rewriting its file without conduit's server (CC Switch's field cases): the next sync puts it back."""
    _profile(home, SERVERS)
    _sync_ok(home)
    _files(home)["claude"].write_text(CLAUDE)
    _sync_ok(home)
    assert {"files", "search"} <= set(_claude_servers(home))


def test_token_in_no_report_or_state_file_and_file_is_private(home: Path) -> None:
    _files(home)["claude"].chmod(0o644)
    _profile(home, SERVERS)
    report = _sync_ok(home)
    text = json.dumps([[t.tool, t.status, t.message, [r.diff for r in t.results]] for t in report.tools])
    assert "files" in text and TOKEN not in text
    assert TOKEN not in mcp_state_path().read_text()
    assert stat.S_IMODE(os.stat(mcp_state_path()).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(_files(home)["claude"]).st_mode) == 0o600
    assert TOKEN not in _files(home)["codex"].read_text()  # bearer_token_env_var instead
    dry = run_sync(home, dry_run=True)
    assert TOKEN not in json.dumps([[r.diff for r in t.results] for t in dry.tools])


def test_an_mcp_only_change_gives_the_mcp_restart_hint(home: Path) -> None:
    """Claude Code's usual hint speaks of its ``env`` (settings.json); a change to its MCP file only names MCP."""
    _profile(home, "[mcp]\n")
    first = _sync_ok(home)
    claude = next(t for t in first.tools if t.tool == "claude_code")
    assert claude.status == "changed" and "env" in (claude.restart_hint or "")
    _profile(home, SERVERS)
    claude = next(t for t in _sync_ok(home).tools if t.tool == "claude_code")
    assert claude.status == "changed" and [r.path.name for r in claude.results if r.changed] == [".claude.json"]
    assert claude.restart_hint == "restart running Claude Code sessions to load the changed MCP servers"


def test_a_tool_keeping_its_servers_in_its_main_config_keeps_its_own_hint(home: Path) -> None:
    """Codex's MCP servers sit in config.toml, beside everything else conduit writes there."""
    _profile(home, "[mcp]\n")
    _sync_ok(home)
    _profile(home, SERVERS)
    codex = next(t for t in _sync_ok(home).tools if t.tool == "codex")
    assert codex.status == "changed" and "MCP" not in (codex.restart_hint or "")
