"""`conduit mcp add | list | rm` as a person runs them (real subprocesses, HOME a temporary directory): add edits
the profile keeping its comments and syncs; list (table and --json) says per tool whether the server is written,
overridden by a project file, changed by hand, or the tool lacks MCP; rm removes the server only where the entry
is still conduit's; a header token from a key source never shows in the output."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from helpers.toolfiles import write_profile

TOKEN = "tok-cli-5e1d2c3b4a"


def _conduit(home: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {"HOME": str(home), "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8",
           "WEB_TOKEN": TOKEN, "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "conduit.daemon.cli", *args], env=env, cwd=cwd or home,
                          capture_output=True, text=True, timeout=120)


def _setup(home: Path) -> Path:
    (home / ".claude").mkdir()
    (home / ".claude.json").write_text('{"projects": {}, "mcpServers": {"mine": {"command": "/opt/mine"}}}\n')
    extra = ("[tools.claude_code]\n[tools.codex]\ncreate = true\n[tools.aider]\ncreate = true\n\n"
             "# my servers\n[mcp]\n")
    return write_profile(home, tools=(), extra=extra)


def test_add_list_rm(temp_home: Path) -> None:
    profile = _setup(temp_home)
    r = _conduit(temp_home, "mcp", "add", "files", "--", "/usr/bin/mcp-files", "--root", "/srv")
    assert r.returncode == 0, r.stderr
    assert "# my servers" in profile.read_text() and "[mcp.servers.files]" in profile.read_text()
    assert json.loads((temp_home / ".claude.json").read_text())["mcpServers"]["files"]["args"] == ["--root", "/srv"]
    with profile.open("a") as f:
        f.write('\n[mcp.servers.web]\nurl = "http://127.0.0.1:1/mcp"\nbearer_token = { env = "WEB_TOKEN" }\n')
    assert _conduit(temp_home, "sync").returncode == 0
    project = temp_home / "proj"
    project.mkdir()
    (project / ".mcp.json").write_text('{"mcpServers": {"files": {"command": "/other"}}}\n')
    listed = _conduit(temp_home, "mcp", "list", "--json", cwd=project)
    assert listed.returncode == 0, listed.stderr
    view = json.loads(listed.stdout)
    assert view["servers"]["files"]["tools"]["claude_code"]["state"] == "overridden"
    assert view["servers"]["files"]["tools"]["codex"]["state"] == "written"
    assert view["servers"]["web"]["tools"]["claude_code"]["state"] == "written"
    assert view["no_mcp"] == ["aider"]
    table = _conduit(temp_home, "mcp", "list")
    assert "written" in table.stdout and "Aider" in table.stdout
    assert TOKEN not in listed.stdout + table.stdout + _conduit(temp_home, "sync", "--json").stdout
    # the person edits conduit's `files` in Codex's file: rm removes it from Claude Code only
    codex = temp_home / ".codex" / "config.toml"
    codex.write_text(codex.read_text().replace('"/srv"', '"/mine"'))
    r = _conduit(temp_home, "mcp", "rm", "files")
    assert r.returncode == 0, r.stderr
    assert "files" not in json.loads((temp_home / ".claude.json").read_text())["mcpServers"]
    assert '[mcp_servers.files]' in codex.read_text() and '"/mine"' in codex.read_text()
    assert "mine" in json.loads((temp_home / ".claude.json").read_text())["mcpServers"]


def test_add_refuses_a_relative_command(temp_home: Path) -> None:
    profile = _setup(temp_home)
    before = profile.read_text()
    r = _conduit(temp_home, "mcp", "add", "x", "--", "./server.sh")
    assert r.returncode == 3 and "relative path" in r.stderr and "Traceback" not in r.stderr  # bad arguments
    assert profile.read_text() == before
    r = _conduit(temp_home, "mcp", "add", "x")
    assert r.returncode == 3 and "one of them" in r.stderr and "not both" not in r.stderr
    assert profile.read_text() == before
