"""doctor says what really wins: the source that outranks conduit, and how to hand the choice back to it.

Each test writes real files under the temporary HOME, runs the real `conduit sync` and `conduit doctor --json`
as subprocesses in the working folder a user would be in, and asserts the state, why and fix the user sees.
A fake `codex` on PATH prints a version string (the real binary is exercised by the real-tool tier).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers.gateways import Gateway

from conduit.daemon.verify.gateway import Answer, Recorded

KEY = "sk-test-abc"
CONDUIT = [sys.executable, "-m", "conduit.daemon.cli"]


def write_profile(home: Path, tools: str, protocols: str = '"openai", "anthropic", "gemini"') -> Path:
    """A profile with one channel speaking ``protocols`` and the ``[tools.*]`` tables in ``tools``."""
    cfg = home / ".config" / "conduit"
    (cfg / "keys").mkdir(parents=True, exist_ok=True)
    (cfg / "keys" / "gw").write_text(KEY + "\n")
    (cfg / "keys" / "gw").chmod(0o600)
    path = cfg / "profile.toml"
    path.write_text(f'version = 1\nchannel = "gw"\nmodel = "m-main"\n\n[channels.gw]\n'
                    f'base_url = "https://gw.example.com/api"\nprotocols = [{protocols}]\n'
                    f'key = {{ file = "~/.config/conduit/keys/gw" }}\n\n{tools}')
    return path


def run(home: Path, *args: str, cwd: Path | None = None, env: dict[str, str] | None = None,
        path_dirs: tuple[Path, ...] = ()) -> subprocess.CompletedProcess[str]:
    """``conduit ARGS`` as a user runs it in ``cwd`` (default HOME), with ``env`` exported on top."""
    environ = dict(os.environ, HOME=str(home), COLUMNS="200", NO_COLOR="1", **(env or {}))
    environ["PATH"] = os.pathsep.join([*map(str, path_dirs), environ.get("PATH", "")])
    return subprocess.run([*CONDUIT, *args], capture_output=True, text=True, env=environ, timeout=60,
                          cwd=cwd or home)


def doctor(home: Path, cwd: Path | None = None, **kw: Any) -> tuple[int, dict[str, Any]]:
    r = run(home, "doctor", "--json", cwd=cwd, **kw)
    assert "Traceback" not in r.stdout + r.stderr, r.stderr
    return r.returncode, json.loads(r.stdout)


def synced(home: Path, **kw: Any) -> subprocess.CompletedProcess[str]:
    r = run(home, "sync", **kw)
    assert r.returncode == 0, r.stdout + r.stderr
    return r


def fake_codex(home: Path, version: str) -> Path:
    """A ``codex`` on a private bin folder that prints ``codex-cli VERSION`` for ``--version``."""
    bindir = home / "fakebin"
    bindir.mkdir(exist_ok=True)
    exe = bindir / "codex"
    exe.write_text(f'#!/bin/sh\necho "codex-cli {version}"\n')
    exe.chmod(0o755)
    return bindir


def folder(home: Path, rel: str) -> Path:
    p = home / rel
    p.mkdir(parents=True, exist_ok=True)
    return p


# -- Gemini CLI: folder trust ----------------------------------------------------------------------------------

def test_gemini_in_a_new_folder_is_untrusted_and_doctor_says_how_to_trust_it(temp_home: Path) -> None:
    (temp_home / ".gemini").mkdir()
    write_profile(temp_home, "[tools.gemini]\n")
    synced(temp_home)
    proj = folder(temp_home, "proj")
    rc, rep = doctor(temp_home, cwd=proj)
    g = rep["tools"]["gemini"]
    assert rc == 1 and not rep["ok"]
    assert g["state"] == "untrusted"
    assert f"does not trust {proj}" in g["why"] and "no rule in" in g["why"]
    assert f'trust = ["{proj}"]' in g["fix"] and "GEMINI_CLI_TRUST_WORKSPACE=true" in g["fix"]
    assert g["facts"]["trust"]["trusted"] is False
    assert g["blockers"][0]["source"] == str(temp_home / ".gemini" / "trustedFolders.json")


def test_trust_option_merges_folders_and_keeps_the_users_entries(temp_home: Path) -> None:
    gem = temp_home / ".gemini"
    gem.mkdir()
    user = {"/opt/elsewhere": "DO_NOT_TRUST", "/srv/repo/x": "TRUST_PARENT"}
    (gem / "trustedFolders.json").write_text(json.dumps(user, indent=2))
    write_profile(temp_home, '[tools.gemini]\ntrust = ["~/src", "/data/work/"]\n')
    synced(temp_home)
    doc = json.loads((gem / "trustedFolders.json").read_text())
    assert doc == {**user, str(temp_home / "src"): "TRUST_FOLDER", "/data/work": "TRUST_FOLDER"}
    assert list(doc)[:2] == list(user)
    assert (gem / "trustedFolders.json").stat().st_mode & 0o777 == 0o600
    again = synced(temp_home)
    assert "Gemini CLI: unchanged" in again.stdout
    rc, rep = doctor(temp_home, cwd=folder(temp_home, "src/app/deep"))
    g = rep["tools"]["gemini"]
    assert (rc, g["state"], g["blockers"]) == (0, "in_sync", [])
    assert g["facts"]["trust"]["rule"] == str(temp_home / "src")


def test_a_longer_do_not_trust_rule_wins_and_is_left_alone(temp_home: Path) -> None:
    gem = temp_home / ".gemini"
    gem.mkdir()
    secret = str(temp_home / "src" / "secret")
    (gem / "trustedFolders.json").write_text(json.dumps({secret: "DO_NOT_TRUST"}))
    write_profile(temp_home, '[tools.gemini]\ntrust = ["~/src", "~/src/secret"]\n')
    synced(temp_home)
    assert json.loads((gem / "trustedFolders.json").read_text())[secret] == "DO_NOT_TRUST"
    rc, rep = doctor(temp_home, cwd=folder(temp_home, "src/secret/x"))
    g = rep["tools"]["gemini"]
    assert rc == 1 and g["state"] == "untrusted"
    assert f'"{secret}": DO_NOT_TRUST' in g["why"]
    assert "is yours and conduit never changes it" in g["fix"] and '"TRUST_FOLDER"' in g["fix"]


def test_trust_option_not_synced_yet_says_run_sync(temp_home: Path) -> None:
    (temp_home / ".gemini").mkdir()
    write_profile(temp_home, "[tools.gemini]\n")
    synced(temp_home)
    write_profile(temp_home, '[tools.gemini]\ntrust = ["~/src"]\n')
    rc, rep = doctor(temp_home, cwd=folder(temp_home, "src/app"))
    g = rep["tools"]["gemini"]
    assert rc == 1 and g["state"] == "untrusted" and g["fix"].startswith("run `conduit sync`")
    assert g["message"].count("conduit sync") == 1  # said once, not again for "not synced"


@pytest.mark.parametrize("how", ["env", "settings"])
def test_gemini_trusted_everywhere(temp_home: Path, how: str) -> None:
    (temp_home / ".gemini").mkdir()
    if how == "settings":
        (temp_home / ".gemini" / "settings.json").write_text(
            '{\n  // folder trust off\n  "security": {"folderTrust": {"enabled": false}}\n}\n')
    write_profile(temp_home, "[tools.gemini]\n")
    env = {"GEMINI_CLI_TRUST_WORKSPACE": "true"} if how == "env" else {}
    synced(temp_home, env=env)
    rc, rep = doctor(temp_home, cwd=folder(temp_home, "proj"), env=env)
    g = rep["tools"]["gemini"]
    assert (rc, g["state"]) == (0, "in_sync"), g
    assert g["facts"]["trust"]["trusted"] and ("GEMINI_CLI_TRUST_WORKSPACE" if how == "env" else "folderTrust") \
        in g["facts"]["trust"]["source"]


def test_trust_entry_must_be_absolute(temp_home: Path) -> None:
    (temp_home / ".gemini").mkdir()
    write_profile(temp_home, '[tools.gemini]\ntrust = ["src"]\n')
    r = run(temp_home, "sync")
    assert r.returncode != 0 and "Traceback" not in r.stdout + r.stderr
    assert "'src' is not an absolute folder" in r.stdout + r.stderr
    assert not (temp_home / ".gemini" / "trustedFolders.json").exists()


def test_gemini_exported_model_overrides(temp_home: Path) -> None:
    (temp_home / ".gemini").mkdir()
    write_profile(temp_home, '[tools.gemini]\ntrust = ["~"]\n')
    synced(temp_home)
    rc, rep = doctor(temp_home, env={"GEMINI_MODEL": "gemini-other", "GEMINI_API_KEY": "AIza-exported-0000"})
    g = rep["tools"]["gemini"]
    assert rc == 1 and g["state"] == "overridden"
    assert [b["source"] for b in g["blockers"]] == ["shell environment"] * 2
    assert {b["fix"].split()[1] for b in g["blockers"]} == {"GEMINI_API_KEY", "GEMINI_MODEL"}
    assert "AIza-exported-0000" not in json.dumps(rep)


# -- Codex CLI: versions that refuse a setting, profiles ------------------------------------------------------

def test_codex_never_writes_chat_for_a_version_that_refuses_it(temp_home: Path) -> None:
    (temp_home / ".codex").mkdir()
    write_profile(temp_home, '[tools.codex]\nwire_api = "chat"\n')
    bindir = fake_codex(temp_home, "0.171.0")
    r = synced(temp_home, path_dirs=(bindir,))
    assert 'wrote wire_api = "responses", not the profile\'s "chat": the installed Codex 0.171.0 refuses' in r.stdout
    assert 'wire_api = "responses"' in (temp_home / ".codex" / "config.toml").read_text()
    rc, rep = doctor(temp_home, path_dirs=(bindir,))
    c = rep["tools"]["codex"]
    assert (rc, c["state"], c["facts"]["version"]) == (0, "in_sync", "0.171.0")


def test_codex_older_version_still_gets_chat(temp_home: Path) -> None:
    (temp_home / ".codex").mkdir()
    write_profile(temp_home, '[tools.codex]\nwire_api = "chat"\n')
    bindir = fake_codex(temp_home, "0.94.0")
    r = synced(temp_home, path_dirs=(bindir,))
    assert "refuses" not in r.stdout
    assert 'wire_api = "chat"' in (temp_home / ".codex" / "config.toml").read_text()
    rc, rep = doctor(temp_home, path_dirs=(bindir,))
    assert (rc, rep["tools"]["codex"]["state"]) == (0, "in_sync")


def test_another_chat_provider_makes_codex_refuse_its_config(temp_home: Path) -> None:
    (temp_home / ".codex").mkdir()
    (temp_home / ".codex" / "config.toml").write_text(
        '[model_providers.old]\nname = "old"\nbase_url = "http://old/v1"\nwire_api = "chat"\n')
    write_profile(temp_home, "[tools.codex]\n")
    bindir = fake_codex(temp_home, "0.171.0")
    synced(temp_home, path_dirs=(bindir,))
    rc, rep = doctor(temp_home, path_dirs=(bindir,))
    c = rep["tools"]["codex"]
    assert rc == 1 and c["state"] == "refused"
    assert c["blockers"][0]["source"].endswith("config.toml [model_providers.old]")
    assert "Codex 0.171.0 refuses wire_api = \"chat\"" in c["why"]
    assert 'set wire_api = "responses" in [model_providers.old]' in c["fix"]
    _, rep = doctor(temp_home, path_dirs=(fake_codex(temp_home, "0.90.1"),))
    assert rep["tools"]["codex"]["state"] == "in_sync"  # that version still reads "chat"


def test_codex_selected_profile_overrides(temp_home: Path) -> None:
    (temp_home / ".codex").mkdir()
    (temp_home / ".codex" / "config.toml").write_text(
        'profile = "work"\n\n[profiles.work]\nmodel_provider = "openai"\nmodel = "gpt-5"\n')
    write_profile(temp_home, "[tools.codex]\n")
    synced(temp_home)
    rc, rep = doctor(temp_home)
    c = rep["tools"]["codex"]
    assert rc == 1 and c["state"] == "overridden"
    assert {b["source"] for b in c["blockers"]} == {f"{temp_home / '.codex' / 'config.toml'} [profiles.work]"}
    assert 'model_provider = "openai" replaces conduit\'s "conduit"' in c["why"]
    assert c["fix"].startswith('delete the line profile = "work"')


# -- Claude Code: clouds, apiKeyHelper, model keys, the other auth variable ---------------------------------

def test_claude_bedrock_switch_in_the_shell(temp_home: Path) -> None:
    write_profile(temp_home, "[tools.claude_code]\n")
    synced(temp_home)
    rc, rep = doctor(temp_home, env={"CLAUDE_CODE_USE_BEDROCK": "1"})
    c = rep["tools"]["claude_code"]
    assert rc == 1 and c["state"] == "overridden"
    assert c["why"] == "CLAUDE_CODE_USE_BEDROCK=1 sends every request to Amazon Bedrock, not to conduit's " \
                       "ANTHROPIC_BASE_URL"
    assert c["fix"].startswith("unset CLAUDE_CODE_USE_BEDROCK")


def test_claude_vertex_switch_in_a_project_settings_file(temp_home: Path) -> None:
    write_profile(temp_home, "[tools.claude_code]\n")
    synced(temp_home)
    proj = folder(temp_home, "proj")
    local = proj / ".claude" / "settings.local.json"
    local.parent.mkdir()
    local.write_text('{"env": {"CLAUDE_CODE_USE_VERTEX": "true", "ANTHROPIC_MODEL": "claude-opus-x"}}')
    rc, rep = doctor(temp_home, cwd=proj)
    c = rep["tools"]["claude_code"]
    assert rc == 1 and c["state"] == "overridden"
    assert [b["source"] for b in c["blockers"]] == [str(local)] * 2
    assert c["fix"] == f'remove "CLAUDE_CODE_USE_VERTEX" from "env" in {local}'
    assert any('remove "ANTHROPIC_MODEL"' in b["fix"] for b in c["blockers"])
    # the project turns the switch off again: the shell's switch does not win over a settings env value
    local.write_text('{"env": {"CLAUDE_CODE_USE_VERTEX": "0"}}')
    rc, rep = doctor(temp_home, cwd=proj, env={"CLAUDE_CODE_USE_VERTEX": "1"})
    assert (rc, rep["tools"]["claude_code"]["state"]) == (0, "in_sync")


def test_claude_api_key_helper_and_model_key(temp_home: Path) -> None:
    write_profile(temp_home, '[tools.claude_code]\nkey_delivery = "copy"\n')  # a reference replaces the helper
    settings = temp_home / ".claude" / "settings.json"
    settings.parent.mkdir()
    settings.write_text('{"apiKeyHelper": "pass show anthropic", "model": "claude-opus-4-6"}')
    synced(temp_home)
    rc, rep = doctor(temp_home)
    c = rep["tools"]["claude_code"]
    assert rc == 1 and c["state"] == "overridden"
    fixes = [b["fix"] for b in c["blockers"]]
    assert fixes == [f'remove "apiKeyHelper" from {settings}'] and "pass show" not in json.dumps(c["blockers"])
    # the top-level model is shadowed by the env.ANTHROPIC_MODEL conduit wrote (Claude Code 2.1.197: C33)
    assert any('"model": "claude-opus-4-6"' in w and "is ignored" in w for w in rep["warnings"])
    doc = json.loads(settings.read_text())
    del doc["apiKeyHelper"]
    doc["model"] = "opus"  # an alias resolves through conduit's ANTHROPIC_DEFAULT_OPUS_MODEL
    settings.write_text(json.dumps(doc))
    rc, rep = doctor(temp_home)
    assert (rc, rep["tools"]["claude_code"]["state"]) == (0, "in_sync")


def test_claude_other_auth_variable_exported(temp_home: Path) -> None:
    write_profile(temp_home, "[tools.claude_code]\n")
    synced(temp_home)
    rc, rep = doctor(temp_home, env={"ANTHROPIC_API_KEY": "sk-ant-shell-000000",
                                     "ANTHROPIC_BASE_URL": "https://elsewhere.example"})
    c = rep["tools"]["claude_code"]
    assert rc == 1 and c["state"] == "overridden" and len(c["blockers"]) == 1  # the base URL loses to settings
    assert "ANTHROPIC_API_KEY is exported in the shell while conduit writes ANTHROPIC_AUTH_TOKEN" in c["why"]
    assert c["fix"].startswith("unset ANTHROPIC_API_KEY") and "sk-ant-shell-000000" not in json.dumps(rep)


# -- Aider: AIDER_* in the shell or any .env, project YAML ----------------------------------------------------

def aider_synced(home: Path) -> None:
    (home / ".aider.conf.yml").write_text("# mine\ndark-mode: true\n")
    write_profile(home, "[tools.aider]\n")
    synced(home)


def test_aider_model_in_a_git_root_env_file(temp_home: Path) -> None:
    aider_synced(temp_home)
    repo = folder(temp_home, "repo")
    (repo / ".git").mkdir()
    (repo / ".env").write_text("AIDER_MODEL=anthropic/claude-x\n")
    rc, rep = doctor(temp_home, cwd=folder(temp_home, "repo/sub"))
    a = rep["tools"]["aider"]
    assert rc == 1 and a["state"] == "overridden"
    assert a["blockers"][0]["source"] == str(repo / ".env")
    assert a["why"] == f"AIDER_MODEL = anthropic/claude-x in {repo / '.env'} outranks model in every .aider.conf.yml"
    assert a["fix"] == f"remove the AIDER_MODEL line from {repo / '.env'}"


def test_aider_shell_switch_and_project_yaml(temp_home: Path) -> None:
    aider_synced(temp_home)
    proj = folder(temp_home, "proj")
    (proj / ".aider.conf.yml").write_text("model: openai/other-model\n")
    rc, rep = doctor(temp_home, cwd=proj, env={"AIDER_OPENAI_API_BASE": "https://other.example/v1",
                                                "OPENAI_API_BASE": "https://ignored.example/v1"})
    a = rep["tools"]["aider"]
    assert rc == 1 and a["state"] == "overridden"
    assert sorted(b["source"] for b in a["blockers"]) == sorted([str(proj / ".aider.conf.yml"), "shell environment"])
    assert any(b["fix"] == f"remove model from {proj / '.aider.conf.yml'}" for b in a["blockers"])
    assert "ignored.example" not in json.dumps(a)  # a plain OPENAI_API_BASE loses: Aider sets it from the YAML


def test_aider_env_value_equal_to_the_profile_is_fine(temp_home: Path) -> None:
    aider_synced(temp_home)
    (temp_home / ".env").write_text("AIDER_MODEL=openai/m-main\n")
    rc, rep = doctor(temp_home, env={"OPENAI_API_BASE": "https://ignored.example/v1"})
    assert (rc, rep["tools"]["aider"]["state"], rep["tools"]["aider"]["fix"]) == (0, "in_sync", None)


# -- a 401/403 from a gateway: the other auth style, probed once -------------------------------------------------

def _x_api_key_only(rec: Recorded) -> Answer:
    """``GET /api/v1/models`` answers 200 only for ``x-api-key: KEY``, anything else 401."""
    if rec.route == "/api/v1/models" and rec.headers.get("x-api-key") == KEY:
        return Answer(200, {"data": []})
    return Answer(401, {"error": "unauthorized"})


def test_live_401_names_the_auth_style_that_works(temp_home: Path) -> None:
    gw = Gateway(respond=_x_api_key_only)
    try:
        path = write_profile(temp_home, "[tools.claude_code]\n", protocols='"anthropic"')
        path.write_text(path.read_text().replace("https://gw.example.com/api", f"{gw.url}/api"))
        r = run(temp_home, "doctor", "--live", "--json",
                env={"CONDUIT_AGENT_SOCKET": str(temp_home / "no-agent.sock")})
        assert "Traceback" not in r.stdout + r.stderr, r.stderr
        rep = json.loads(r.stdout)
    finally:
        gw.close()
    probe = rep["live"]["channels"]["gw"]["protocols"]["anthropic"]
    assert r.returncode == 1 and probe["verdict"] == "auth"
    assert probe["message"] == "HTTP 401 with Authorization: Bearer; the same key works as x-api-key (HTTP 200)"
    assert probe["hint"] == 'set auth = "x-api-key" in [channels.gw]'
    styles = [("authorization" in x.headers, "x-api-key" in x.headers) for x in gw.recorded()]
    assert styles == [(True, False), (False, True)]
    assert KEY not in r.stdout


def test_a_fifo_named_by_a_gemini_variable_does_not_hang_doctor(temp_home: Path, tmp_path: Path) -> None:
    """``GEMINI_CLI_SYSTEM_SETTINGS_PATH`` pointing at a FIFO hung doctor (a review finding)."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    write_profile(temp_home, "[tools.gemini]\ncreate = true\n")
    rc, rep = doctor(temp_home, env={"GEMINI_CLI_SYSTEM_SETTINGS_PATH": str(fifo),
                                     "GEMINI_CLI_TRUSTED_FOLDERS_PATH": str(fifo)})
    assert rc in (0, 1) and rep["tools"]["gemini"]["state"]
