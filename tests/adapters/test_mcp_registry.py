"""The MCP field cases, driven by the registry: for every adapter that declares ``mcp`` (its ``McpSupport``), a
render into a fresh HOME whose MCP file already holds a person's server and another key: conduit's servers land
in the declared file under the declared key (right nesting), the person's server and key survive, a second
render changes nothing, and removing conduit's servers gives back the file as it was without them, byte for byte
(CC Switch's field cases: other keys overwritten, servers lost, wrong nesting). Adapters without MCP support
declare ``mcp = None`` and write no MCP server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conduit.adapters.base import Env, Root, TextTarget, ToolSettings
from conduit.adapters.formats.mcpmap import read_servers
from conduit.adapters.mcp import McpLedger, McpServer, McpSupport
from conduit.adapters.registry import ADAPTERS

MCP_TOOLS = [name for name, a in ADAPTERS.items() if a.mcp is not None]
STDIO = McpServer(name="probe", transport="stdio", command="/usr/bin/mcp-probe", args=("--stdio",),
                  env={"LOG": "info"})
HTTP = McpServer(name="web", transport="http", url="http://127.0.0.1:8765/mcp", headers={"X-Team": "core"})


def _seed(path: Path, support: McpSupport) -> None:
    """The person's file: a key of their own and their own server ``mine`` under the declared key path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    mine = {"command": "/opt/mine", "args": ["x"]}
    listed = support.shape == "list"
    if support.format in ("json", "jsonc"):
        node: object = [{"name": "mine", **mine}] if listed else {"mine": mine}
        for k in reversed(support.key):
            node = {k: node}
        path.write_text(json.dumps({"personal": {"keep": True}, **node}, indent=2) + "\n")
    elif support.format == "toml":
        header = f'[[{".".join(support.key)}]]\nname = "mine"' if listed else f'[{".".join(support.key)}.mine]'
        path.write_text(f'personal = "keep"  # mine\n\n{header}\ncommand = "/opt/mine"\nargs = ["x"]\n')
    else:
        lines, indent = ["personal: keep"], ""
        for k in support.key:
            lines.append(f"{indent}{k}:")
            indent += "  "
        lines += ([f"{indent}- name: mine", f"{indent}  command: /opt/mine", f"{indent}  args: [x]"] if listed else
                  [f"{indent}mine:", f"{indent}  command: /opt/mine", f"{indent}  args: [x]"])
        path.write_text("\n".join(lines) + "\n")


def _render(tool: str, env: Env, servers: tuple[McpServer, ...], ledger: McpLedger) -> McpLedger:
    """Plan ``tool`` with ``servers`` and write every text target (as the writer would, minus backups); returns
    the ledger the next sync starts from."""
    adapter = ADAPTERS[tool]
    settings = ToolSettings(tool=tool, channel="gw", root=Root("http://127.0.0.1:9/api"), key="sk-test",
                            model="m1", options=adapter.Options.model_validate(dict(adapter.fresh_options)),
                            mcp=servers, mcp_ledger=ledger)
    written: set[str] = set()
    for target in adapter.plan(settings, env):
        if isinstance(target, TextTarget):
            text = target.path.read_text() if target.path.exists() else None
            new = target.render(text)
            if new != text:
                target.path.parent.mkdir(parents=True, exist_ok=True)
                target.path.write_text(new)
            written.add(str(target.path))
    return McpLedger(before=ledger.records(written))


@pytest.mark.parametrize("tool", MCP_TOOLS)
def test_servers_merge_into_the_declared_file(tool: str, temp_home: Path) -> None:
    adapter = ADAPTERS[tool]
    support, env = adapter.mcp, Env()
    assert support is not None
    path = adapter.mcp_path(env)
    assert path is not None, f"{tool} declares mcp but mcp_path gives no file"
    assert support.list_argv is None or support.list_argv[0] in (adapter.package.commands if adapter.package else ())
    _seed(path, support)
    ledger = _render(tool, env, (), McpLedger())
    baseline = path.read_text()
    assert "personal" in baseline and "mine" in read_servers(path, support)[0]
    wanted = tuple(s for s in (STDIO, HTTP) if s.transport in support.transports)
    ledger = _render(tool, env, wanted, ledger)
    found, error = read_servers(path, support)
    assert error is None
    assert set(found) >= {"mine", *(s.name for s in wanted)}, f"{tool}: servers not under {support.key} of {path}"
    assert list(found)[0] == "mine", "the person's server moved"
    assert found["mine"] == read_servers(path, support)[0]["mine"]
    again = path.read_text()
    ledger = _render(tool, env, wanted, ledger)
    assert path.read_text() == again, "a second render changed the file"
    _render(tool, env, (), ledger)
    assert path.read_text() == baseline, "removing conduit's servers did not give back the person's file"


@pytest.mark.parametrize("tool", MCP_TOOLS)
def test_a_persons_server_of_the_same_name_is_never_rewritten(tool: str, temp_home: Path) -> None:
    adapter = ADAPTERS[tool]
    support, env = adapter.mcp, Env()
    assert support is not None
    path = adapter.mcp_path(env)
    assert path is not None
    _seed(path, support)
    ledger = _render(tool, env, (), McpLedger())
    before = path.read_text()
    mine = McpServer(name="mine", transport="stdio", command="/usr/bin/other")
    ledger = _render(tool, env, (mine,), ledger)
    assert path.read_text() == before
    _render(tool, env, (), ledger)
    assert path.read_text() == before


def test_every_adapter_declares_mcp() -> None:
    """The registry answers for every tool: an ``McpSupport`` or None (no MCP), never a missing attribute."""
    for name, adapter in ADAPTERS.items():
        assert adapter.mcp is None or isinstance(adapter.mcp, McpSupport), name
        assert (adapter.mcp is None) == (adapter.mcp_path(Env()) is None), name
