"""MCP servers in each tool's own file and shape, for the tools beyond Claude Code, Codex and Gemini CLI, driven by
the registry (every adapter declaring ``mcp``; tests/adapters/test_mcp_registry.py holds the shared merge rules):

- the servers sit at the tool's key path only (wrong nesting, a CC Switch field case, cannot happen), in the shape
  its reader takes (the stdio program and arguments, the URL with the tool's transport marker);
- a value from ``{ env = "VAR" }`` is written as the tool's own reference where it has one, else as the value in
  a 0600 file, and the diff mask hides it;
- a person's server and the rest of the file keep their lines; after the tool rewrites its file (other indent,
  keys reordered: the "servers gone after a restart" case) a re-sync changes nothing and keeps every server;
  dropping a server removes only conduit's entry;
- a profile without ``[mcp]`` leaves the tool's servers alone.

Each file is rendered by the adapter's real targets into a temporary HOME and written to disk.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest
import tomlkit

from conduit.adapters.base import Env, Root, TextTarget, ToolSettings
from conduit.adapters.formats.mcpmap import read_servers
from conduit.adapters.formats.mcpshapes import opencode_entry
from conduit.adapters.formats.textformats import dump_yaml, parse_jsonc, parse_yaml
from conduit.adapters.mcp import McpLedger, McpServer
from conduit.adapters.registry import ADAPTERS

OWN = ("claude_code", "codex", "gemini")  # mcpcore's tools: tests/sync/test_mcp_sync.py
TOOLS = [t for t, a in ADAPTERS.items() if a.mcp is not None and t not in OWN]
TOKEN = "tok-5e1d93c0aa7b"
SECRET_ENV = "sek-env-44b2f8"
FILES = McpServer("files", "stdio", command="/usr/bin/mcp-files", args=("--root", "/srv"),
                  env={"LOG": "info", "FILES_TOKEN": SECRET_ENV}, env_refs={"FILES_TOKEN": "FILES_TOKEN"},
                  secrets=frozenset({"FILES_TOKEN"}))
SEARCH = McpServer("search", "http", url="http://127.0.0.1:8765/mcp", bearer=TOKEN, bearer_env="SEARCH_TOKEN")
MINE = McpServer("mine", "stdio", command="/opt/mine/bin/server", args=("--quiet",))

HTTP_MARK: dict[str, dict[str, Any]] = {
    "qwen": {"httpUrl": SEARCH.url}, "opencode": {"type": "remote"}, "kilo": {"type": "remote"},
    "copilot": {"type": "http"}, "droid": {"type": "http"}, "kimi": {"transport": "http"},
    "cline": {"type": "streamableHttp"}, "openclaw": {"transport": "streamable-http"},
    "vibe": {"transport": "streamable-http"}, "continue": {"type": "streamable-http"}, "crush": {"type": "http"},
    "zed": {}, "goose": {"type": "streamable_http"}, "roo": {"type": "streamable-http"}, "hermes": {},
}
"""What tells each tool's reader that the URL entry is streamable HTTP (docs/formats/<tool>.md, MCP servers)."""
REFERENCE: dict[str, str] = {
    "qwen": "${SEARCH_TOKEN}", "opencode": "{env:SEARCH_TOKEN}", "kilo": "{env:SEARCH_TOKEN}",
    "hermes": "${SEARCH_TOKEN}", "openclaw": "${SEARCH_TOKEN}", "crush": "${SEARCH_TOKEN}",
    "roo": "${env:SEARCH_TOKEN}",
}
"""The bearer token's reference each tool expands (the others get the value, or Vibe's ``api_key_env``)."""


@pytest.fixture
def env(temp_home: Path) -> Env:
    return Env(dict(os.environ, HOME=str(temp_home)), cwd=temp_home)


def _settings(tool: str, servers: tuple[McpServer, ...] | None, ledger: McpLedger) -> ToolSettings:
    adapter = ADAPTERS[tool]
    return ToolSettings(tool, "gw", Root("http://127.0.0.1:9/api"), "sk-model-key-1234", model="m1",
                        options=adapter.Options(**adapter.fresh_options), mcp=servers, mcp_ledger=ledger)


def _sync(tool: str, env: Env, servers: tuple[McpServer, ...] | None, ledger: McpLedger) -> TextTarget | None:
    """Render and write every text target of the tool's plan; the target of its MCP file (None when none)."""
    found = None
    for target in ADAPTERS[tool].plan(_settings(tool, servers, ledger), env):
        if not isinstance(target, TextTarget):
            continue
        old = target.path.read_text() if target.path.exists() else None
        new = target.render(old)
        if new != old:
            target.path.parent.mkdir(parents=True, exist_ok=True)
            target.path.write_text(new)
            if old is None:
                target.path.chmod(target.mode)
        if target.path == ADAPTERS[tool].mcp_path(env):
            found = target
    return found


def _path(tool: str, env: Env) -> Path:
    path = ADAPTERS[tool].mcp_path(env)
    assert path is not None
    return path


def _doc(tool: str, path: Path) -> Any:
    text = path.read_text()
    fmt = ADAPTERS[tool].mcp.format  # type: ignore[union-attr]
    if fmt == "toml":
        return tomlkit.parse(text).unwrap()
    if fmt == "yaml":
        return json.loads(json.dumps(parse_yaml(text, path=path)))
    return parse_jsonc(text, path=path)


def _argv(entry: dict[str, Any]) -> list[str]:
    command = entry.get("cmd") or entry.get("command")
    return list(command) if isinstance(command, list) else [command, *entry.get("args", [])]


def _headers(entry: dict[str, Any]) -> dict[str, Any]:
    return dict(entry.get("headers") or entry.get("requestOptions", {}).get("headers") or
                entry.get("auth", {}).get("headers") or {})


@pytest.mark.parametrize("tool", TOOLS)
def test_servers_sit_at_the_tools_key_in_its_shape(tool: str, env: Env) -> None:
    ledger = McpLedger()
    _sync(tool, env, (FILES, SEARCH), ledger)
    support, path = ADAPTERS[tool].mcp, _path(tool, env)
    assert support is not None
    servers, error = read_servers(path, support)
    assert error is None
    want = {"files", "search"} if "http" in support.transports else {"files"}
    assert set(servers) == want
    assert _argv(servers["files"]) == ["/usr/bin/mcp-files", "--root", "/srv"]
    if "search" in want:
        entry = servers["search"]
        assert (entry.get("httpUrl") or entry.get("url") or entry.get("uri")) == SEARCH.url
        assert {k: entry.get(k) for k in HTTP_MARK[tool]} == HTTP_MARK[tool]
    doc = _doc(tool, path)
    assert not {"files", "search"} & set(doc), "a server written at the top level of the file"
    maps = {"mcpServers", "mcp_servers", "mcp", "context_servers", "extensions", "servers"}
    assert maps & set(doc) == {support.key[0]}, f"servers under another key than {support.key}: {sorted(doc)}"


@pytest.mark.parametrize("tool", TOOLS)
def test_secrets_are_references_or_kept_private(tool: str, env: Env) -> None:
    target = _sync(tool, env, (FILES, SEARCH), McpLedger())
    assert target is not None
    path = _path(tool, env)
    text = path.read_text()
    if tool in REFERENCE and "http" in ADAPTERS[tool].mcp.transports:  # type: ignore[union-attr]
        assert TOKEN not in text
        assert _headers(read_servers(path, ADAPTERS[tool].mcp)[0]["search"]) == {  # type: ignore[arg-type]
            "Authorization": f"Bearer {REFERENCE[tool]}"}
    if tool == "vibe":
        assert read_servers(path, ADAPTERS[tool].mcp)[0]["search"]["auth"] == {  # type: ignore[arg-type]
            "type": "static", "api_key_env": "SEARCH_TOKEN"}
    if TOKEN in text or SECRET_ENV in text:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    masked = target.mask(text)
    assert TOKEN not in masked and SECRET_ENV not in masked


def _seed(tool: str, env: Env) -> str:
    """The person's file before conduit: their own server in the tool's shape, and a setting of their own."""
    adapter = ADAPTERS[tool]
    support, path = adapter.mcp, _path(tool, env)
    assert support is not None
    entry_fn = _entry_fn(tool)
    mine = entry_fn(MINE)
    value: Any = [mine] if tool in ("vibe", "continue") else {"mine": mine}
    for key in reversed(support.key):
        value = {key: value}
    value = {"personalSetting": "kept", **value}
    if support.format == "toml":
        doc = tomlkit.document()
        doc["personalSetting"] = "kept"
        aot = tomlkit.aot()
        aot.append(tomlkit.item(mine))
        doc["mcp_servers"] = aot
        text = tomlkit.dumps(doc)
    elif support.format == "yaml":
        text = dump_yaml(json.loads(json.dumps(value)), like=None)
    else:
        text = json.dumps(value, indent=2) + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return text


def _entry_fn(tool: str) -> Any:
    """The adapter module's own entry function (``<tool>_entry``; OpenCode's is shared with Kilo CLI)."""
    if tool in ("opencode", "kilo"):
        return opencode_entry
    module = __import__(type(ADAPTERS[tool]).__module__, fromlist=["_"])
    names = [n for n in dir(module) if n.endswith("_entry") and callable(getattr(module, n))
             and n not in ("standard_entry",)]
    assert names, f"{tool}: no *_entry function"
    own = [n for n in names if n.startswith(tool.split("_")[0])]
    return getattr(module, (own or names)[0])


def _lines_kept(seed: str, text: str) -> None:
    """Every line of ``seed`` (a trailing comma aside) is in ``text``, in order."""
    lines = iter(text.splitlines())
    for line in seed.splitlines():
        want = line.rstrip(",").rstrip()
        if not want.strip() or want.strip() in "{}[]":
            continue
        assert any(got.rstrip(",").rstrip() == want for got in lines), f"line lost or moved: {line!r}\n{text}"


def _rewrite(tool: str, path: Path) -> str:
    """The tool saving its file its own way: other indentation, each server's keys in reverse order."""
    doc = _doc(tool, path)
    support = ADAPTERS[tool].mcp
    assert support is not None
    node = doc
    for key in support.key[:-1]:
        node = node[key]
    servers = node[support.key[-1]]
    items = servers if isinstance(servers, list) else list(servers.values())
    for i, entry in enumerate(items):
        flipped = dict(reversed(list(entry.items())))
        if isinstance(servers, list):
            servers[i] = flipped
        else:
            servers[list(servers)[i]] = flipped
    if support.format == "toml":
        text = tomlkit.dumps(doc)
    elif support.format == "yaml":
        text = dump_yaml(doc, like=None)
    else:
        text = json.dumps(doc, indent=4) + "\n"
    path.write_text(text)
    return text


@pytest.mark.parametrize("tool", TOOLS)
def test_person_server_survives_and_tool_rewrite_is_not_drift(tool: str, env: Env) -> None:
    seed = _seed(tool, env)
    path, support = _path(tool, env), ADAPTERS[tool].mcp
    assert support is not None
    first = McpLedger()
    _sync(tool, env, (FILES, SEARCH), first)
    _lines_kept(seed, path.read_text())
    servers, _ = read_servers(path, support)
    assert list(servers)[0] == "mine" and servers["mine"] == _entry_fn(tool)(MINE)
    rewritten = _rewrite(tool, path)
    second = McpLedger(before=first.records({str(path)}))
    _sync(tool, env, (FILES, SEARCH), second)
    assert path.read_text() == rewritten, "the tool's own rewrite was taken for drift"
    assert set(read_servers(path, support)[0]) >= {"mine", "files"}
    third = McpLedger(before=second.records({str(path)}))
    _sync(tool, env, (FILES,), third)
    after, _ = read_servers(path, support)
    assert set(after) == {"mine", "files"} and after["mine"] == _entry_fn(tool)(MINE)
    assert _doc(tool, path)["personalSetting"] == "kept"


@pytest.mark.parametrize("tool", TOOLS)
def test_no_mcp_table_leaves_the_servers_alone(tool: str, env: Env) -> None:
    _seed(tool, env)
    path, support = _path(tool, env), ADAPTERS[tool].mcp
    assert support is not None
    before = read_servers(path, support)[0]
    _sync(tool, env, None, McpLedger())
    assert read_servers(path, support)[0] == before


def test_every_tool_beyond_the_first_three_is_covered() -> None:
    """The tools conduit writes MCP servers for; Pi (no MCP by design) and Aider (no MCP client) declare none."""
    assert set(TOOLS) == {"cline", "continue", "copilot", "crush", "droid", "goose", "hermes", "kilo", "kimi",
                          "openclaw", "opencode", "qwen", "roo", "vibe", "zed"}
    assert ADAPTERS["pi"].mcp is None and ADAPTERS["aider"].mcp is None
