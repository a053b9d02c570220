"""The key by reference to an environment variable, with the real binaries: Codex ``key_method = "env"``
(``env_key``), Qwen Code ``key_source = "env"`` (``envKey``), Droid ``key_source = "env"`` (``${VAR}``), OpenCode
and Kilo CLI ``key_source = "env"`` (``{env:VAR}``).
`conduit sync` writes the reference and no key anywhere under HOME (the key file excepted); `conduit run TOOL`
reads the key from its source and gives it to the tool's environment, and the tool's model request reaches the
recording gateway with it; after `conduit key rotate` the next `conduit run` sends the new key and no tool file
changed; the same tool started without conduit (no variable) sends no key (docs/keys.md).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from realtools.tier import routes
from test_realtools import KEY, MODEL, PROMPT, sync, tool_env, write_profile
from test_realtools_run import conduit_run, why

from conduit.daemon.verify.runner import ToolRun
from conduit.daemon.verify.tools import ONE_SHOTS, find_binary

pytestmark = [pytest.mark.realtools, pytest.mark.timeout(600)]

NEW = "sk-realtools-envref-rotated-fedcba9876"

OPTION = {"codex": 'key_method = "env"\n', "qwen": 'key_source = "env"\n', "droid": 'key_source = "env"\n',
          "opencode": 'key_source = "env"\n', "kilo": 'key_source = "env"\n'}
REFERENCE = {"codex": b'env_key = "CONDUIT_API_KEY"', "qwen": b'"envKey": "CONDUIT_API_KEY"',
             "droid": b'"apiKey": "${CONDUIT_API_KEY}"', "opencode": b'{env:CONDUIT_API_KEY}',
             "kilo": b'{env:CONDUIT_API_KEY}'}
MISSING = {"codex": "Missing environment variable: `CONDUIT_API_KEY`",
           "qwen": "Missing API key for OpenAI-compatible auth. Set the 'CONDUIT_API_KEY' environment variable."}
"""What the tool says when started without the variable (a clear message, exit 1), where it says one; Droid
0.215.0 says nothing and sends the text ``${CONDUIT_API_KEY}`` itself as the key, OpenCode 1.18.33 and Kilo 7.7.7
send no ``Authorization`` (the gateway refuses both)."""


def files(home: Path) -> dict[str, bytes]:
    """Every file under ``home`` but conduit's state and the tools' own logs and sessions, by relative path."""
    skip = (".local/state/", ".codex/sessions", ".codex/log", ".qwen/tmp", ".qwen/debug", ".factory/sessions",
            ".factory/logs", ".factory/history")
    return {str(p.relative_to(home)): p.read_bytes() for p in sorted(home.rglob("*"))
            if p.is_file() and not str(p.relative_to(home)).startswith(skip)}


def holding(home: Path, needle: str) -> list[str]:
    return sorted(str(p.relative_to(home)) for p in home.rglob("*")
                  if p.is_file() and not p.is_symlink() and needle.encode() in p.read_bytes())


@pytest.mark.parametrize("tool", sorted(OPTION))
def test_reference_to_a_variable_that_conduit_run_sets(tool: str, temp_home: Path, tmp_path: Path, tool_cache: Path,
                                                       tool_path: str, sandbox: Any,
                                                       tier_rows: list[dict[str, Any]]) -> None:
    spec = ONE_SHOTS[tool]
    binary = find_binary(spec, tool_cache.joinpath("bin").as_posix())
    assert binary is not None
    project = tmp_path / "project"
    project.mkdir()
    write_profile(temp_home, tool, sandbox.root + "/api", KEY + "\n", project, extra=OPTION[tool])
    sync(temp_home)
    assert holding(temp_home, KEY[:-4]) == [".config/conduit/keys/gw"]  # neither the key nor its prefix elsewhere
    assert any(REFERENCE[tool] in p.read_bytes() for p in temp_home.rglob("*") if p.is_file())

    result = conduit_run(sandbox, temp_home, project, tool_path, tool)
    reqs = [r for r in result.requests if r.path.split("?")[0] in routes(tool, MODEL)]
    assert reqs, why(result)
    assert {r.headers.get("authorization", "") for r in reqs} == {f"Bearer {KEY}"}, why(result)
    assert holding(temp_home, KEY[:-4]) == [".config/conduit/keys/gw"]

    bare = sandbox.run(ToolRun(argv=spec.argv(binary, PROMPT), env=tool_env(temp_home, tool_path, spec), cwd=project,
                               timeout_s=spec.timeout_s))
    sent = {r.headers.get("authorization", "") for r in bare.requests if r.path.split("?")[0] in routes(tool, MODEL)}
    assert f"Bearer {KEY}" not in sent, why(bare)
    if tool in MISSING:
        assert bare.exit_code != 0 and MISSING[tool] in bare.stderr_tail + bare.stdout_tail, why(bare)
    else:  # Droid sends the reference's text, OpenCode and Kilo no Authorization at all
        assert sent == ({"Bearer ${CONDUIT_API_KEY}"} if tool == "droid" else {""}), why(bare)

    before = files(temp_home)
    env = {"HOME": str(temp_home), "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "CONDUIT_STABLE_INSTALL": "1"}
    r = subprocess.run([sys.executable, "-m", "conduit.daemon.cli", "key", "rotate", "gw", "--force"], input=NEW,
                       env=env, cwd=temp_home, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr  # the gateway lives in the sandbox's network: --force
    result = conduit_run(sandbox, temp_home, project, tool_path, tool)
    assert {r.headers.get("authorization", "") for r in result.requests
            if r.path.split("?")[0] in routes(tool, MODEL)} == {f"Bearer {NEW}"}, why(result)
    after = files(temp_home)
    assert {p: b for p, b in after.items() if not p.startswith(".config/conduit/")} == \
        {p: b for p, b in before.items() if not p.startswith(".config/conduit/")}  # no tool file changed
    tier_rows.append({"tool": tool, "form": "/api (env reference)", "key": "reference",
                      "path_hit": "no file holds the key", "auth_ok": "conduit run: key, then rotated key",
                      "model_ok": f"without conduit run: exit {bare.exit_code}, {len(bare.requests)} requests"})

