"""The profile's ``[mcp.servers.NAME]`` tables: clear errors (file, line, key, fix) for a server with neither or
both transports, a relative command path, a name a tool refuses, an unknown server or tool; key sources read
for env/header values (secrets never in an error); ``tools`` / ``[tools.X] mcp`` / ``enabled`` decide which tool
gets which server."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.toolfiles import write_profile

from conduit.daemon.config.profile import load_profile
from conduit.daemon.config.resolve import Resolver
from conduit.errors import KeyError_, ProfileError

TABLES = "[tools.claude_code]\n[tools.codex]\ncreate = true\n[tools.aider]\ncreate = true\n"


def _load(home: Path, extra: str):
    return load_profile(write_profile(home, tools=(), extra=TABLES + extra))


@pytest.mark.parametrize(("table", "words"), [
    ('[mcp.servers.x]\nargs = ["a"]\n', "set either `command`"),
    ('[mcp.servers.x]\ncommand = "/bin/x"\nurl = "http://127.0.0.1:1/mcp"\n', "not both"),
    ('[mcp.servers.x]\ncommand = "bin/server"\n', "relative path"),
    ('[mcp.servers.x]\nurl = "ftp://host/x"\n', "http:// or https://"),
    ('[mcp.servers.x]\ncommand = "/bin/x"\nheaders = { A = "b" }\n', "for an HTTP server"),
    ('[mcp.servers."bad name"]\ncommand = "/bin/x"\n', "characters tools refuse"),
    ('[mcp.servers.x]\ncommand = "/bin/x"\ntools = ["claude"]\n', "unknown tool `claude`"),
    ('[mcp.servers.x]\ncommand = "/bin/x"\nbogus = 1\n', "unknown key"),
])
def test_bad_server_is_a_clear_profile_error(temp_home: Path, table: str, words: str) -> None:
    with pytest.raises(ProfileError) as err:
        _load(temp_home, table)
    text = str(err.value)
    assert words in text and "profile.toml:" in text and "Traceback" not in text


def test_tool_list_naming_an_undefined_server(temp_home: Path) -> None:
    extra = '[mcp.servers.x]\ncommand = "/bin/x"\n'
    path = write_profile(temp_home, tools=(), extra="[tools.codex]\ncreate = true\nmcp = [\"y\"]\n" + extra)
    with pytest.raises(ProfileError, match="`y` is not defined"):
        load_profile(path)


def test_which_tool_gets_which_server(temp_home: Path) -> None:
    extra = ('[mcp.servers.a]\ncommand = "/bin/a"\n[mcp.servers.b]\nurl = "http://127.0.0.1:1/mcp"\n'
             'tools = ["codex"]\n[mcp.servers.c]\ncommand = "/bin/c"\nenabled = false\n')
    path = write_profile(temp_home, tools=(), extra=TABLES.replace("[tools.aider]", "mcp = [\"b\"]\n[tools.aider]")
                         + extra)
    r = Resolver(load_profile(path), routing=None)
    assert [s.name for s in r.tool_settings("claude_code").mcp or ()] == ["a"]
    assert [s.name for s in r.tool_settings("codex").mcp or ()] == ["b"]
    assert r.tool_settings("aider").mcp == ()  # Aider reads no MCP servers


def test_no_mcp_table_means_none(temp_home: Path) -> None:
    r = Resolver(_load(temp_home, ""), routing=None)
    assert r.tool_settings("claude_code").mcp is None


def test_key_sources_for_headers_and_bearer(temp_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WEB_TOKEN", "tok-abc-123456")
    extra = ('[mcp.servers.web]\nurl = "http://127.0.0.1:1/mcp"\nbearer_token = { env = "WEB_TOKEN" }\n'
             'headers = { "X-Key" = { env = "WEB_TOKEN" }, "X-Team" = "core" }\n')
    server = (Resolver(_load(temp_home, extra), routing=None).tool_settings("claude_code").mcp or ())[0]
    assert server.bearer == "tok-abc-123456" and server.bearer_env == "WEB_TOKEN"
    assert server.env_refs == {"X-Key": "WEB_TOKEN"} and server.secrets == {"X-Key"}
    assert "tok-abc" not in repr(server)
    monkeypatch.delenv("WEB_TOKEN")
    with pytest.raises(KeyError_) as err:
        Resolver(_load(temp_home, extra), routing=None).tool_settings("claude_code")
    assert "WEB_TOKEN" in str(err.value)


def test_home_in_command_and_folder_is_expanded(temp_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A tool starts the command in the folder as written: neither expands `~`, so conduit does."""
    monkeypatch.setenv("HOME", str(temp_home))
    r = Resolver(_load(temp_home, '[mcp.servers.a]\ncommand = "~/bin/srv"\ncwd = "~/work"\n'), routing=None)
    (server,) = r.tool_settings("claude_code").mcp or ()
    assert (server.command, server.cwd) == (f"{temp_home}/bin/srv", f"{temp_home}/work")
