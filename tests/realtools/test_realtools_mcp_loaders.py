"""MCP servers of the installed tools that have no listing command, judged by the tool's own config loader: after
`conduit sync` with a stdio server and a streamable-HTTP server in the profile, the loader the tool itself runs
at start-up reads both from the file conduit wrote, with the transport conduit meant.

- Mistral Vibe (no `vibe mcp list`): its user-config orchestrator (``vibe/core/config/default_orchestrator.py``
  ``build_user_config_orchestrator``), in the tool's own venv, validates ``config.toml`` with its pydantic models.
- Cline CLI (``cline mcp`` has ``add``/``remove`` only): ``@cline/core``'s ``resolveMcpServerRegistrations``, the
  function the CLI loads ``cline_mcp_settings.json`` with, run by the system Node.

Continue's ``cn`` bundles its loader inside one file with no entry point to call, so it is proven by the format
tests only (docs/formats/continue.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from test_realtools import KEY, sync, write_profile

from conduit.adapters.base import Env
from conduit.adapters.registry import ADAPTERS

pytestmark = [pytest.mark.realtools, pytest.mark.timeout(300)]

URL = "http://127.0.0.1:9/mcp"
SERVERS = (f'\n[mcp.servers.probe]\ncommand = {json.dumps(sys.executable)}\nargs = ["-m", "probe"]\n\n'
           f'[mcp.servers.web]\nurl = {json.dumps(URL)}\n')

VIBE = """
import asyncio
import json
from vibe.core.config.harness_files._harness_manager import init_harness_files_manager
init_harness_files_manager("user")
from vibe.core.config.default_orchestrator import build_user_config_orchestrator
config = asyncio.run(build_user_config_orchestrator()).config
print(json.dumps({s.name: [s.transport, getattr(s, "url", None) or s.argv()] for s in config.mcp_servers}))
"""
CLINE = """
const core = await import(process.argv[1]);
const found = core.resolveMcpServerRegistrations({filePath: process.argv[2]});
console.log(JSON.stringify(Object.fromEntries(found.map(r => [r.name, [r.transport.type,
  r.transport.url ?? [r.transport.command, ...(r.transport.args ?? [])]]]))));
"""


def _load(tool: str, home: Path, cache: Path) -> str:
    """What the tool's own loader reads from the file conduit wrote (its printed summary)."""
    if tool == "vibe":
        argv = [str(cache / "vibe" / "bin" / "python"), "-c", VIBE]
    else:
        path = ADAPTERS["cline"].mcp_path(Env({"HOME": str(home)}, cwd=home))
        argv = ["node", "--input-type=module", "-e", CLINE, "--",
                str(cache / "npm" / "node_modules" / "@cline" / "core" / "dist" / "index.js"), str(path)]
    r = subprocess.run(argv, env={"HOME": str(home), "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}, cwd=home,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"{tool} loader exit {r.returncode}: {r.stderr[-2000:]}"
    return r.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize("tool", ["vibe", "cline"])
def test_tool_loader_reads_both_servers(tool: str, temp_home: Path, tmp_path: Path, tool_cache: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    write_profile(temp_home, tool, "http://127.0.0.1:9/api", KEY + "\n", project, extra=SERVERS)
    sync(temp_home)
    seen = _load(tool, temp_home, tool_cache)
    http = "streamable-http" if tool == "vibe" else "streamableHttp"
    want = {"probe": ["stdio", [sys.executable, "-m", "probe"]], "web": [http, URL]}
    assert json.loads(seen) == want, seen
