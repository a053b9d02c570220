"""Codex CLI adapter: config.toml provider table with comments kept, key in $CODEX_HOME/.env, options, doctor."""

from __future__ import annotations

from pathlib import Path

import tomlkit
from helpers import toolsamples
from helpers.toolfiles import lifecycle, run_sync, write_profile

from conduit.adapters.base import Env
from conduit.adapters.formats.textformats import read_dotenv
from conduit.daemon.sync.doctor import doctor

OWNED_ROOT = {"model", "model_provider"}


def test_fixture_survives_only_owned_keys_change(temp_home: Path) -> None:
    path = toolsamples.codex(temp_home)
    before = tomlkit.parse(path.read_text()).unwrap()
    write_profile(temp_home, tools=("codex",))
    lifecycle(temp_home)
    text = path.read_text()
    after = tomlkit.parse(text).unwrap()
    assert {k: v for k, v in after.items() if k not in OWNED_ROOT | {"model_providers"}} == \
        {k: v for k, v in before.items() if k not in OWNED_ROOT | {"model_providers"}}
    assert after["model_providers"]["ollama"] == before["model_providers"]["ollama"]
    assert list(after)[:4] == ["model", "model_reasoning_effort", "approval_policy", "model_provider"]
    for comment in ("# Codex user configuration", "# the default model", "# a local model for offline work",
                    "# keep me"):
        assert comment in text
    assert after["model_provider"] == "conduit" and after["model"] == "claude-sonnet-4-20250514"
    assert after["model_providers"]["conduit"] == {
        "name": "conduit (gw)", "base_url": "https://gw.example.com/api/v1", "wire_api": "responses",
        "env_key": "CONDUIT_API_KEY"}
    assert "sk-test-abc" not in text  # the key stays out of config.toml
    env_text = (temp_home / ".codex" / ".env").read_text()
    assert env_text.startswith(toolsamples.CODEX_DOTENV)  # other lines and comments kept, in order
    assert read_dotenv(env_text)["CONDUIT_API_KEY"] == "sk-test-abc"


def test_wire_api_chat_option_and_v4(temp_home: Path) -> None:
    path = toolsamples.codex(temp_home)
    write_profile(temp_home, "https://gw.example.com/api/v4", tools=(), extra='[tools.codex]\nwire_api = "chat"\n')
    lifecycle(temp_home)
    prov = tomlkit.parse(path.read_text()).unwrap()["model_providers"]["conduit"]
    assert prov["wire_api"] == "chat" and prov["base_url"] == "https://gw.example.com/api/v4"


def test_inline_key_method_replaces_env_key(temp_home: Path) -> None:
    path = toolsamples.codex(temp_home)
    write_profile(temp_home, tools=("codex",))
    run_sync(temp_home)
    write_profile(temp_home, tools=(), extra='[tools.codex]\nkey_method = "inline"\n')
    report = lifecycle(temp_home)
    prov = tomlkit.parse(path.read_text()).unwrap()["model_providers"]["conduit"]
    assert prov["experimental_bearer_token"] == "sk-test-abc" and "env_key" not in prov
    assert path.stat().st_mode & 0o777 == 0o600  # config.toml now holds the key
    assert all("sk-test-abc" not in r.diff for t in report.tools for r in t.results)


def test_codex_home_variable(temp_home: Path, monkeypatch) -> None:
    custom = temp_home / "elsewhere"
    custom.mkdir()
    monkeypatch.setenv("CODEX_HOME", str(custom))
    write_profile(temp_home, tools=("codex",))
    lifecycle(temp_home)
    assert tomlkit.parse((custom / "config.toml").read_text())["model_provider"] == "conduit"
    assert not (temp_home / ".codex").exists()


def test_new_file_when_dir_exists(temp_home: Path) -> None:
    (temp_home / ".codex").mkdir()
    write_profile(temp_home, tools=("codex",))
    lifecycle(temp_home)
    doc = tomlkit.parse((temp_home / ".codex" / "config.toml").read_text()).unwrap()
    assert doc["model_provider"] == "conduit"


def test_invalid_toml_left_alone_other_tools_synced(temp_home: Path) -> None:
    path = toolsamples.write(temp_home / ".codex" / "config.toml", 'model = "x"\n[broken\n')
    toolsamples.aider(temp_home)
    write_profile(temp_home, tools=("codex", "aider"))
    report = run_sync(temp_home)
    by = {t.tool: t for t in report.tools}
    assert by["codex"].status == "error" and "config.toml:2" in (by["codex"].message or "")
    assert path.read_text() == 'model = "x"\n[broken\n'
    assert by["aider"].status == "changed"


def test_doctor_reports_profile_override(temp_home: Path) -> None:
    path = toolsamples.codex(temp_home)
    write_profile(temp_home, tools=("codex",))
    run_sync(temp_home)
    path.write_text('profile = "fast"\n' + path.read_text().replace(
        '[profiles.fast]\nmodel = "gpt-5-mini"', '[profiles.fast]\nmodel = "gpt-5-mini"\nmodel_provider = "openai"'))
    rep = doctor(None, Env(cwd=temp_home))
    eff = rep["tools"]["codex"]["facts"]["effective"]
    assert eff["model_provider"]["overrides_conduit"] and eff["model_provider"]["value"] == "openai"
    assert any("codex: model_provider" in w for w in rep["warnings"])
    assert rep["tools"]["codex"]["facts"]["owned"]["CONDUIT_API_KEY"] == "sk-...-abc" or \
        "sk-test-abc" not in str(rep)


def test_installed_version_is_cached_per_binary_and_mtime(tmp_path: Path) -> None:
    import os

    from conduit.adapters.formats.versions import at_least, installed_version

    exe = tmp_path / "codex"
    exe.write_text('#!/bin/sh\necho "codex-cli 0.171.0"\n')
    exe.chmod(0o755)
    assert installed_version(("nope-not-here", "codex"), path=str(tmp_path)) == "0.171.0"
    exe.write_text('#!/bin/sh\necho "codex-cli 0.90.2"\n')
    st = exe.stat()
    os.utime(exe, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # an upgrade in place: a new mtime
    assert installed_version(("codex",), path=str(tmp_path)) == "0.90.2"
    exe.write_text("#!/bin/sh\necho no version here; exit 3\n")
    os.utime(exe, ns=(st.st_atime_ns, st.st_mtime_ns + 2 * 10**9))
    assert installed_version(("codex",), path=str(tmp_path)) is None
    assert installed_version(("codex",), path="") is None
    assert at_least("0.97", (0, 97, 0)) and not at_least("0.96.9", (0, 97, 0)) and not at_least(None, (0,))
