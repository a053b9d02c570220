"""The daemon and MCP servers (a real daemon process, HOME a temporary directory): Claude Code's own rewrites of
``~/.claude.json`` (other keys, a server of its own) are never drift; a hand edit of conduit's server is drift,
reported and not overwritten with ``on_drift = "report"``; with ``"reapply"`` a server the tool dropped comes
back."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.daemonproc import Daemon, read_state, wait_for
from helpers.toolfiles import claude_settings, write_profile

SERVERS = '\n[mcp.servers.files]\ncommand = "/usr/bin/mcp-files"\nargs = ["--root", "/srv"]\n'


@pytest.fixture
def profile(temp_home: Path) -> Path:
    claude_settings(temp_home)
    (temp_home / ".claude.json").write_text('{"numStartups": 1, "projects": {}}\n')
    return write_profile(temp_home, tools=("claude_code",), key_text="sk-test-daemon-mcp-0123456\n", extra=SERVERS)


@pytest.fixture
def daemon(temp_home: Path, tmp_path: Path, profile: Path) -> Iterator[Daemon]:
    d = Daemon(temp_home, tmp_path)
    try:
        yield d
    finally:
        d.stop()


def _servers(home: Path) -> dict[str, dict[str, object]]:
    return json.loads((home / ".claude.json").read_text()).get("mcpServers", {})


def test_tool_rewrites_are_not_drift_a_hand_edit_is(daemon: Daemon, temp_home: Path) -> None:
    daemon.start()
    state = temp_home / ".claude.json"
    assert _servers(temp_home)["files"]["args"] == ["--root", "/srv"]
    doc = json.loads(state.read_text())
    doc["numStartups"] = 2
    doc["mcpServers"]["theirs"] = {"type": "stdio", "command": "/opt/theirs"}  # Claude Code's own write
    state.write_text(json.dumps(doc, indent=2))
    time.sleep(1.5)
    assert "drift claude_code" not in daemon.log()
    doc["mcpServers"]["files"]["args"] = ["--root", "/mine"]
    state.write_text(json.dumps(doc, indent=2))
    record = wait_for(lambda: read_state(temp_home)["tools"]["claude_code"]["drift"], what="drift recorded")
    assert record["policy"] == "report" and "/mine" in record["diff"]
    time.sleep(1.0)
    assert _servers(temp_home)["files"]["args"] == ["--root", "/mine"]  # reported, not overwritten
    assert "theirs" in _servers(temp_home)


def test_reapply_puts_a_dropped_server_back(daemon: Daemon, temp_home: Path, profile: Path) -> None:
    profile.write_text(profile.read_text().replace('model = "', 'on_drift = "reapply"\nmodel = "', 1))
    daemon.start()
    state = temp_home / ".claude.json"
    doc = json.loads(state.read_text())
    del doc["mcpServers"]["files"]  # a tool rewriting its file without conduit's server
    state.write_text(json.dumps(doc, indent=2))
    wait_for(lambda: "files" in _servers(temp_home), what="the server written back")
