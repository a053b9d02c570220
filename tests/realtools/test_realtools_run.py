"""``conduit run`` with the real CLIs: the session reaches the recording gateway with the profile's key, model and
path, and no file of the user's changes (docs/formats/copilot.md, docs/tools.md "`conduit run` and `conduit env`").

Each case runs ``conduit run TOOL [--channel NAME] -- <the tool's one-shot arguments>`` as a real subprocess in the
verify sandbox (network cut where the kernel allows; the gateway inside), with HOME a fresh directory, and
byte-compares every file under HOME before and after (Copilot's own state, ``~/.copilot``, excepted: sessions and
logs it writes on every run). GitHub Copilot CLI is configured by environment only; Claude Code by its files, so
its session gets a re-rendered temporary copy of ``~/.claude`` (``CLAUDE_CONFIG_DIR``) for a second channel.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from realtools.tier import routes

from conduit.adapters.registry import ADAPTERS
from conduit.daemon.verify.runner import OPT_OUT_ENV, ToolRun
from conduit.daemon.verify.tools import ONE_SHOTS, find_binary

pytestmark = [pytest.mark.realtools, pytest.mark.timeout(900)]

KEY = "sk-realtools-run-0123456789abcdef"
SECOND_KEY = "sk-realtools-second-fedcba9876543210"
MODEL = "conduit-test-model"
PROMPT = "say ok"
OWN_STATE = (".copilot", ".cache/copilot", ".cache/Microsoft/DeveloperTools")
"""Folders under HOME a tool writes its own state into on a run (not a configuration file): Copilot's sessions and
logs, the program it unpacks at first run, and the device id file its telemetry library creates."""


def write_profile(home: Path, tool: str, main_url: str, second_url: str) -> None:
    """A profile whose channel ``gw`` has ``main_url`` and channel ``second`` ``second_url`` (each with its key
    file), ``tool`` enabled."""
    cfg = home / ".config" / "conduit"
    (cfg / "keys").mkdir(parents=True)
    for name, key in (("gw", KEY), ("second", SECOND_KEY)):
        (cfg / "keys" / name).write_text(key + "\n")
        (cfg / "keys" / name).chmod(0o600)
    channels = "".join(f'[channels.{n}]\nbase_url = {json.dumps(u)}\nprotocols = ["openai", "anthropic"]\n'
                       f'key = {{ file = "~/.config/conduit/keys/{n}" }}\n\n'
                       for n, u in (("gw", main_url), ("second", second_url)))
    (cfg / "profile.toml").write_text(f'version = 1\nchannel = "gw"\nmodel = "{MODEL}"\n\n{channels}[tools.{tool}]\n')


def home_files(home: Path) -> dict[str, bytes]:
    """Every file under ``home`` (path relative) but those in ``OWN_STATE``: a file changed, created or removed
    anywhere else shows as a difference."""
    out = {}
    for p in sorted(home.rglob("*")):
        rel = p.relative_to(home).as_posix()
        if p.is_file() and not any(rel == d or rel.startswith(d + "/") for d in OWN_STATE):
            out[rel] = p.read_bytes()
    return out


def conduit_run(sandbox: Any, home: Path, project: Path, tool_path: str, tool: str, *options: str,
                extra_env: dict[str, str] | None = None) -> Any:
    """``conduit run TOOL OPTIONS -- <one-shot arguments>`` in the sandbox; the ``RunResult``."""
    spec = ONE_SHOTS[tool]
    argv = [sys.executable, "-m", "conduit.daemon.cli", "run", tool, *options, "--", *spec.argv("_", PROMPT)[1:]]
    env = {"HOME": str(home), "PATH": tool_path, "LANG": "C.UTF-8", "TERM": "dumb", "CONDUIT_STABLE_INSTALL": "1",
           **OPT_OUT_ENV,
           **spec.extra_env, **(extra_env or {})}
    return sandbox.run(ToolRun(argv=argv, env=env, cwd=project, timeout_s=spec.timeout_s + 30))


def why(result: Any) -> str:
    return (f"exit {result.exit_code}, timed out {result.timed_out}, requests "
            f"{[f'{r.method} {r.path}' for r in result.requests]}\nstderr: {result.stderr_tail[-1500:]}\n"
            f"stdout: {result.stdout_tail[-800:]}")


@pytest.mark.parametrize("form", ADAPTERS["copilot"].base_forms)
def test_conduit_run_copilot(form: str, temp_home: Path, tmp_path: Path, tool_cache: Path, tool_path: str,
                             sandbox: Any, tier_rows: list[dict[str, Any]]) -> None:
    assert find_binary(ONE_SHOTS["copilot"], tool_cache.joinpath("bin").as_posix()) is not None
    project = tmp_path / "project"
    project.mkdir()
    write_profile(temp_home, "copilot", sandbox.root + form, sandbox.root + "/second")
    before = home_files(temp_home)
    # Exported in the shell and outranking the profile: conduit's session replaces or unsets them.
    shell = {"COPILOT_MODEL": "shell-model", "COPILOT_PROVIDER_BEARER_TOKEN": "sk-shell-token-000000"}
    result = conduit_run(sandbox, temp_home, project, tool_path, "copilot", extra_env=shell)
    reqs = [r for r in result.requests if r.path.split("?")[0] in routes("copilot", MODEL)]
    tier_rows.append({"tool": "copilot (conduit run)", "form": form, "path_hit": bool(reqs),
                      "auth_ok": bool(reqs) and all(r.auth_value == KEY for r in reqs),
                      "model_ok": bool(reqs) and all(r.model == MODEL for r in reqs),
                      "seconds": round(result.duration_s, 1), "exit": result.exit_code})
    assert reqs, why(result)
    assert all((r.auth_header, r.auth_value, r.model) == ("authorization", KEY, MODEL) for r in reqs), \
        [(r.auth_header, r.model) for r in reqs]
    assert result.exit_code == 0, why(result)
    assert home_files(temp_home) == before


def test_conduit_run_claude_code_on_a_second_channel(temp_home: Path, tmp_path: Path, tool_cache: Path,
                                                     tool_path: str, sandbox: Any,
                                                     tier_rows: list[dict[str, Any]]) -> None:
    """After `conduit sync` to the main channel, `conduit run claude_code --channel second` reaches the second
    channel with its key, and ``~/.claude/settings.json`` (and every other file under HOME) is unchanged."""
    import subprocess

    assert find_binary(ONE_SHOTS["claude_code"], tool_cache.joinpath("bin").as_posix()) is not None
    project = tmp_path / "project"
    project.mkdir()
    write_profile(temp_home, "claude_code", sandbox.root + "/main", sandbox.root + "/api")
    r = subprocess.run([sys.executable, "-m", "conduit.daemon.cli", "sync"], capture_output=True, text=True,
                       env={"HOME": str(temp_home), "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8",
                            "CONDUIT_STABLE_INSTALL": "1"}, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    settings = temp_home / ".claude" / "settings.json"
    assert json.loads(settings.read_text())["env"]["ANTHROPIC_BASE_URL"].endswith("/main")
    before = home_files(temp_home)
    result = conduit_run(sandbox, temp_home, project, tool_path, "claude_code", "--channel", "second")
    reqs = [r for r in result.requests if r.path.split("?")[0] in routes("claude_code", MODEL)]
    tier_rows.append({"tool": "claude_code (conduit run --channel)", "form": "/api", "path_hit": bool(reqs),
                      "auth_ok": bool(reqs) and all(r.auth_value == SECOND_KEY for r in reqs),
                      "model_ok": bool(reqs) and all(r.model == MODEL for r in reqs),
                      "seconds": round(result.duration_s, 1), "exit": result.exit_code})
    assert reqs, why(result)
    assert all((r.auth_value, r.model) == (SECOND_KEY, MODEL) for r in reqs), [r.model for r in reqs]
    assert not [r for r in result.requests if r.path.startswith("/main")], why(result)
    assert result.exit_code == 0, why(result)
    assert home_files(temp_home) == before
