"""The real CLIs, after `conduit sync` alone, send their model request to the profile's gateway with the
profile's key and model (facts in docs/formats/real-tools.md).

Per case (``realtools.tier.cases()``, from the adapters' declarations): a fresh HOME (the suite's autouse
fixture), a profile whose channel base_url is the sandbox's gateway root plus FORM (the adapter's
``base_forms``; conduit normalizes each to the root ``/api``) and the adapter's ``fresh_options``, the key in a
key file (the first form's file is dirty: BOM, ``Bearer ``, a trailing space, CRLF), `conduit sync` as a real
subprocess, then the tool's one-shot command (``conduit.daemon.verify.tools.ONE_SHOTS``) in the verify
sandbox (network cut where the kernel allows). Asserts: a request on the tool's ``model_routes`` under ``/api``,
every model request carrying exactly the clean key and the profile's model, and no tool process left running.
A tool lacking a declaration the tier reads has one case, which fails naming it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from realtools.runenv import session_env
from realtools.tier import case_id, cases, check_declared, options_toml, routes

from conduit.adapters.registry import ADAPTERS
from conduit.daemon.verify.runner import OPT_OUT_ENV, ToolRun
from conduit.daemon.verify.tools import ONE_SHOTS, OneShot, find_binary

pytestmark = [pytest.mark.realtools, pytest.mark.timeout(1800)]

KEY = "sk-realtools-0123456789abcdef"
DIRTY_KEY = "\ufeffBearer " + KEY + " \r\n"
MODEL = "conduit-test-model"
PROMPT = "Say ok"

VENDOR_HOSTS = {"codex": "api.openai.com", "claude_code": "api.anthropic.com"}
CASES = cases()
_VERSIONS: dict[str, str | None] = {}


def write_profile(home: Path, tool: str, base_url: str, key_text: str, project: Path, *, trust: bool = True,
                  extra: str = "") -> None:
    """The profile (one channel speaking all three protocols, ``tool`` enabled with its ``fresh_options`` and the
    TOML lines ``extra``) and its key file; Gemini's ``trust`` option names ``project`` unless ``trust`` is
    False."""
    cfg = home / ".config" / "conduit"
    (cfg / "keys").mkdir(parents=True)
    keyfile = cfg / "keys" / "gw"
    keyfile.write_bytes(key_text.encode())
    keyfile.chmod(0o600)
    extra = options_toml(tool) + extra + (f"trust = [{json.dumps(str(project))}]\n" if tool == "gemini" and trust
                                          else "")
    (cfg / "profile.toml").write_text(
        f'version = 1\nchannel = "gw"\nmodel = "{MODEL}"\n\n[channels.gw]\nbase_url = {json.dumps(base_url)}\n'
        'protocols = ["openai", "anthropic", "gemini"]\nkey = { file = "~/.config/conduit/keys/gw" }\n\n'
        f"[tools.{tool}]\n{extra}")


def tool_env(home: Path, path: str, spec: OneShot) -> dict[str, str]:
    """The tool's whole environment: HOME, PATH, a locale, the opt-outs; nothing else of this process's."""
    return {"HOME": str(home), "PATH": path, "LANG": "C.UTF-8", "TERM": "dumb", **OPT_OUT_ENV, **spec.extra_env}


def version_of(sandbox: Any, spec: OneShot, binary: Path, env: dict[str, str], cwd: Path) -> str | None:
    """The binary's version, asked once per tool inside the sandbox (no network: no update check delays)."""
    if spec.tool not in _VERSIONS:
        r = sandbox.run(ToolRun(argv=[str(binary), *spec.version_argv], env=env, cwd=cwd, timeout_s=30))
        _VERSIONS[spec.tool] = spec.parse_version(r.stdout_tail) or spec.parse_version(r.stderr_tail)
    return _VERSIONS[spec.tool]


def sync(home: Path) -> None:
    """`conduit sync` as a person runs it (this interpreter's conduit, HOME=home, no XDG overrides)."""
    env = {"HOME": str(home), "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "CONDUIT_STABLE_INSTALL": "1"}
    r = subprocess.run([sys.executable, "-m", "conduit.daemon.cli", "sync"], env=env, cwd=home,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"conduit sync exit {r.returncode}:\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}"


def alive_with_home(home: Path) -> list[str]:
    """Command lines of live processes whose environment has HOME=home (this case's tool), after a short settle."""
    found: list[str] = []
    for _ in range(20):
        found = []
        for p in psutil.process_iter(["cmdline"]):
            try:
                if p.environ().get("HOME") == str(home):
                    found.append(" ".join(p.info.get("cmdline") or []))
            except (psutil.Error, OSError):
                continue
        if not found:
            return []
        time.sleep(0.25)
    return found


@pytest.mark.parametrize(("tool", "form", "dirty"), CASES, ids=[case_id(*c) for c in CASES])
def test_tool_uses_the_profile(tool: str, form: str, dirty: bool, temp_home: Path, tmp_path: Path,
                               tool_cache: Path, tool_path: str, sandbox: Any,
                               tier_rows: list[dict[str, Any]]) -> None:
    check_declared(tool, form)
    assert ADAPTERS[tool].package is not None, f"{tool} declares a one_shot but no package: the tier cannot install it"
    spec = ONE_SHOTS[tool]
    binary = find_binary(spec, tool_cache.joinpath("bin").as_posix())
    assert binary is not None, f"{spec.binaries} not in {tool_cache / 'bin'} (rerun tests/realtools/ensure_tools.sh)"
    project = tmp_path / "project"
    project.mkdir()
    write_profile(temp_home, tool, sandbox.root + form, DIRTY_KEY if dirty else KEY + "\n", project)
    sync(temp_home)
    env = {**tool_env(temp_home, tool_path, spec), **session_env(temp_home, tool)}  # Copilot: `conduit env`
    version = version_of(sandbox, spec, binary, env, project)
    result = sandbox.run(ToolRun(argv=spec.argv(binary, PROMPT), env=env, cwd=project, timeout_s=spec.timeout_s))
    model_reqs = [r for r in result.requests if r.path.split("?")[0] in routes(tool, MODEL)]
    row = {"tool": tool, "version": version, "form": form, "key": "dirty" if dirty else "clean",
           "path_hit": bool(model_reqs), "auth_ok": bool(model_reqs) and all(r.auth_value == KEY for r in model_reqs),
           "model_ok": bool(model_reqs) and all(r.model == MODEL for r in model_reqs),
           "seconds": round(result.duration_s, 1), "exit": result.exit_code, "leftovers": len(result.leftovers),
           "isolation": result.isolation, "dns_names": result.dns_names,
           "paths": [f"{r.method} {r.path}" for r in result.requests]}
    tier_rows.append(row)
    why = (f"{tool} {version} ({form}): exit {result.exit_code}, timed out {result.timed_out}, "
           f"requests {row['paths']}\nstderr: {result.stderr_tail[-1500:]}\nstdout: {result.stdout_tail[-800:]}")
    assert model_reqs, f"no request on {routes(tool, MODEL)}: {why}"
    assert row["auth_ok"], f"a model request did not carry exactly the key: " \
                           f"{[(r.auth_header, r.to_json()['auth_value']) for r in model_reqs]}"
    assert row["model_ok"], f"a model request asked another model: {[r.model for r in model_reqs]}"
    assert alive_with_home(temp_home) == [], "a tool process is still running after the run"


@pytest.mark.parametrize("tool", ["codex", "claude_code"])
def test_without_sync_nothing_reaches_the_gateway(tool: str, temp_home: Path, tmp_path: Path, tool_cache: Path,
                                                   tool_path: str, sandbox: Any) -> None:
    """The control: without `conduit sync` the tool asks its vendor's host (cut off), never the gateway, so a
    passing case above is conduit's doing."""
    spec = ONE_SHOTS[tool]
    binary = find_binary(spec, tool_cache.joinpath("bin").as_posix())
    assert binary is not None
    project = tmp_path / "project"
    project.mkdir()
    env = {**tool_env(temp_home, tool_path, spec), "OPENAI_API_KEY": KEY, "ANTHROPIC_API_KEY": KEY}
    # Both retry their vendor's host until stopped: 8 s is enough for the first look-up.
    result = sandbox.run(ToolRun(argv=spec.argv(binary, PROMPT), env=env, cwd=project, timeout_s=8))
    assert [r for r in result.requests if r.path.split("?")[0] in routes(tool, MODEL)] == [], result.requests
    if sandbox.isolated:
        assert VENDOR_HOSTS[tool] in result.dns_names, result.dns_names


def test_gemini_untrusted_folder_ignores_conduits_files(temp_home: Path, tmp_path: Path, tool_cache: Path,
                                                        tool_path: str, sandbox: Any) -> None:
    """Without ``[tools.gemini] trust`` the project folder is untrusted: Gemini CLI does not read
    ``~/.gemini/.env`` and exits without a model request (docs/formats/real-tools.md: exit 41)."""
    spec = ONE_SHOTS["gemini"]
    binary = find_binary(spec, tool_cache.joinpath("bin").as_posix())
    assert binary is not None
    project = tmp_path / "project"
    project.mkdir()
    write_profile(temp_home, "gemini", sandbox.root + "/api", KEY + "\n", project, trust=False)
    sync(temp_home)
    env = tool_env(temp_home, tool_path, spec)
    result = sandbox.run(ToolRun(argv=spec.argv(binary, PROMPT), env=env, cwd=project, timeout_s=spec.timeout_s))
    assert [r for r in result.requests if r.path.split("?")[0] in routes("gemini", MODEL)] == [], result.requests
    assert result.exit_code not in (0, None), (result.exit_code, result.stderr_tail[-800:])
