"""MCP servers from the profile, judged by the real tools: a real stdio server and a real streamable-HTTP server
on loopback (both built with the ``mcp`` Python SDK: tests/helpers/mcp_probe_server.py) go into a test profile;
after `conduit sync`, every installed tool whose adapter declares a listing command (``McpSupport.list_argv``,
driven by the registry) lists both through that command (bounded in time), and the tool's one-shot request to
the recording gateway carries the stdio server's tool (``PROBE_TOOL``) in its tool list.

Tools whose listing command needs a network or a login are in ``NO_LISTING`` with the reason."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.mcp_probe_server import PROBE_TOOL
from realtools.runenv import session_env
from test_realtools import KEY, PROMPT, sync, tool_env, write_profile

from conduit.adapters.registry import ADAPTERS
from conduit.daemon.verify.runner import ToolRun
from conduit.daemon.verify.tools import ONE_SHOTS, find_binary

pytestmark = [pytest.mark.realtools, pytest.mark.timeout(900)]

SERVER = Path(__file__).parent.parent / "helpers" / "mcp_probe_server.py"
NO_LISTING: dict[str, str] = {}
"""Tools with a listing command the tier cannot run, and why (none so far)."""
NO_REQUEST_PROOF: dict[str, str] = {
    "codex": "Codex 0.171.0 with a custom Responses provider (conduit's) sends no MCP function in its model request: "
             "it defers MCP tools behind tool_search, which it offers only to OpenAI's own models "
             "(docs/formats/codex.md); `codex mcp list` is the proof",
    "hermes": "Hermes 0.19.0 `-z` discovers MCP servers in the background and waits `mcp_discovery_timeout` (1.5 s "
              "by default) before its first request; the SDK-built probe takes longer to start, so the request "
              "goes out without it (docs/formats/hermes.md); `hermes mcp list` is the proof",
    "openclaw": "OpenClaw 2026.9.6 puts the tool schemas of a loopback (local) model route behind Tool Search, so "
                "the request lists `tool_search`, not the MCP tool (docs/formats/openclaw.md); `openclaw mcp list` "
                "is the proof",
}
"""Tools whose one-shot request cannot carry an MCP tool, and why: their listing command alone is the proof."""
PROOF_ARGS: dict[str, tuple[str, ...]] = {"gemini": ("--approval-mode", "yolo"),
                                          "droid": ("--add-tools", "MCP:probe")}
"""Words added to the one-shot for the proof run: Gemini CLI's non-interactive mode leaves out of the request
every tool that would ask for confirmation, an MCP tool of a server without ``trust`` included (seen with
0.61.0: the shell and write tools go too); with ``yolo`` it sends ``mcp_probe_<tool>``. Droid 0.215.0 ``exec``
does not wait for its MCP servers before the first request (``blockOnMcpLoad`` is off by default); naming the
server's tools with ``--add-tools MCP:probe`` makes it load them first (docs/formats/droid.md)."""
LISTERS = [t for t, a in ADAPTERS.items() if a.mcp is not None and a.mcp.list_argv and a.package is not None
           and t not in NO_LISTING]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def http_server() -> Iterator[str]:
    """The streamable-HTTP probe on 127.0.0.1, up before the tests (its port accepts), stopped after."""
    port = _free_port()
    proc = subprocess.Popen([sys.executable, str(SERVER), "http", str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _profile(home: Path, tool: str, base: str, project: Path, url: str) -> None:
    write_profile(home, tool, base, KEY + "\n", project)
    with (home / ".config" / "conduit" / "profile.toml").open("a") as f:
        f.write(f'\n[mcp.servers.probe]\ncommand = {json.dumps(sys.executable)}\n'
                f'args = [{json.dumps(str(SERVER))}, "stdio"]\n\n[mcp.servers.web]\nurl = {json.dumps(url)}\n')


@pytest.mark.parametrize("tool", LISTERS)
def test_tool_lists_both_servers_and_sends_the_probe_tool(tool: str, temp_home: Path, tmp_path: Path,
                                                          tool_cache: Path, tool_path: str, sandbox: Any,
                                                          http_server: str) -> None:
    adapter = ADAPTERS[tool]
    assert adapter.mcp is not None and adapter.mcp.list_argv
    spec = ONE_SHOTS[tool]
    binary = find_binary(spec, tool_cache.joinpath("bin").as_posix())
    assert binary is not None, f"{spec.binaries} not in {tool_cache / 'bin'}"
    project = tmp_path / "project"
    project.mkdir()
    _profile(temp_home, tool, sandbox.root + "/api", project, http_server)
    sync(temp_home)
    env = {**tool_env(temp_home, tool_path, spec), **session_env(temp_home, tool)}  # Copilot: `conduit env`
    argv = [str(binary), *adapter.mcp.list_argv[1:]]
    listed = subprocess.run(argv, env=env, cwd=project, capture_output=True, text=True, timeout=180)
    text = listed.stdout + listed.stderr
    assert listed.returncode == 0, f"{' '.join(adapter.mcp.list_argv)} exit {listed.returncode}: {text[-2000:]}"
    for name in ("probe", "web"):
        assert name in text, f"{' '.join(adapter.mcp.list_argv)} does not list `{name}`:\n{text[-2000:]}"
    probed = subprocess.run([sys.executable, "-m", "conduit.daemon.cli", "mcp", "list", "--probe", "--json"],
                            env=env, cwd=project, capture_output=True, text=True, timeout=300)
    assert probed.returncode == 0, probed.stderr[-2000:]
    assert set(json.loads(probed.stdout)["listed"][tool]["seen"]) >= {"probe", "web"}  # conduit's own reading
    if tool in NO_REQUEST_PROOF:
        return
    # The one-shot runs in verify's sandbox, which reaches only its gateway: the HTTP probe is turned off there
    # (enabled = false: conduit removes its own entry), so a tool that fails on an unreachable server still runs.
    profile = temp_home / ".config" / "conduit" / "profile.toml"
    profile.write_text(profile.read_text().replace("[mcp.servers.web]\n", "[mcp.servers.web]\nenabled = false\n"))
    sync(temp_home)
    argv = [*spec.argv(binary, PROMPT), *PROOF_ARGS.get(tool, ())]
    for _ in range(2):  # Claude Code once sent its request before the stdio probe had started (cold import)
        result = sandbox.run(ToolRun(argv=argv, env=env, cwd=project, timeout_s=spec.timeout_s))
        bodies = [json.dumps(r.body) for r in result.requests if r.method == "POST"]
        if any(PROBE_TOOL in b for b in bodies):
            break
    assert any(PROBE_TOOL in b for b in bodies), (
        f"{tool}: no request listed {PROBE_TOOL}; exit {result.exit_code}, "
        f"requests {[f'{r.method} {r.path}' for r in result.requests]}\nstderr: {result.stderr_tail[-1500:]}")
