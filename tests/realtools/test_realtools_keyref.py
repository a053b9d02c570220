"""The key by reference, with the real binary: ``[tools.claude_code] key_delivery = "reference"`` makes
`conduit sync` write ``apiKeyHelper`` (``<conduit> key print gw``) and no key into ``~/.claude/settings.json``;
the real ``claude -p`` runs the helper and reaches the recording gateway with the channel's key; after
`conduit key rotate` the next one-shot sends the new key while settings.json keeps every byte.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from realtools.tier import routes
from test_realtools import KEY, MODEL, PROMPT, sync, tool_env, write_profile

from conduit.daemon.verify.runner import ToolRun
from conduit.daemon.verify.tools import ONE_SHOTS, find_binary

pytestmark = [pytest.mark.realtools, pytest.mark.timeout(600)]

NEW = "sk-realtools-rotated-9876543210fedcba"


def _keys_sent(sandbox: Any, binary: Path, home: Path, tool_path: str, project: Path) -> set[str]:
    """The credentials of the model requests of one `claude -p` run (x-api-key and Bearer values)."""
    spec = ONE_SHOTS["claude_code"]
    result = sandbox.run(ToolRun(argv=spec.argv(binary, PROMPT), env=tool_env(home, tool_path, spec), cwd=project,
                                 timeout_s=spec.timeout_s))
    reqs = [r for r in result.requests if r.path.split("?")[0] in routes("claude_code", MODEL)]
    assert reqs, f"no model request: exit {result.exit_code}; {[r.path for r in result.requests]}\n" \
                 f"{result.stderr_tail[-1500:]}"
    sent = set()
    for r in reqs:
        sent.add(r.headers.get("x-api-key", ""))
        sent.add(r.headers.get("authorization", "").removeprefix("Bearer "))
    return sent - {""}


def test_claude_code_gets_the_key_through_api_key_helper(temp_home: Path, tmp_path: Path, tool_cache: Path,
                                                         tool_path: str, sandbox: Any,
                                                         tier_rows: list[dict[str, Any]]) -> None:
    binary = find_binary(ONE_SHOTS["claude_code"], tool_cache.joinpath("bin").as_posix())
    assert binary is not None
    project = tmp_path / "project"
    project.mkdir()
    write_profile(temp_home, "claude_code", sandbox.root + "/api", KEY + "\n", project,
                  extra='key_delivery = "reference"\n')
    sync(temp_home)
    path = temp_home / ".claude" / "settings.json"
    written = path.read_bytes()
    doc = json.loads(written)
    assert "key print gw" in doc["apiKeyHelper"]
    assert not {"ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_API_KEY"} & set(doc["env"])
    assert KEY[:-4].encode() not in written  # neither the key nor its prefix

    assert _keys_sent(sandbox, binary, temp_home, tool_path, project) == {KEY}

    env = {"HOME": str(temp_home), "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "CONDUIT_STABLE_INSTALL": "1"}
    r = subprocess.run([sys.executable, "-m", "conduit.daemon.cli", "key", "rotate", "gw", "--force"], input=NEW,
                       env=env, cwd=temp_home, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr  # the gateway lives in the sandbox's network: --force
    assert path.read_bytes() == written
    assert _keys_sent(sandbox, binary, temp_home, tool_path, project) == {NEW}
    assert NEW[:-4].encode() not in path.read_bytes()
    tier_rows.append({"tool": "claude_code", "form": "/api (apiKeyHelper)", "key": "reference",
                      "path_hit": "settings.json holds no key", "auth_ok": "key, then rotated key",
                      "model_ok": "settings.json unchanged by rotation"})
