"""OpenCode adapter: JSONC with comments and trailing commas, {file:} key reference, options, refusals."""

from __future__ import annotations

import json
from pathlib import Path

from helpers import toolsamples
from helpers.toolfiles import lifecycle, run_sync, write_profile

from conduit.adapters.formats.textformats import parse_jsonc


def test_fixture_survives_only_owned_keys_change(temp_home: Path) -> None:
    path = toolsamples.opencode(temp_home)
    write_profile(temp_home, tools=("opencode",))
    lifecycle(temp_home)
    text = path.read_text()
    before, after = parse_jsonc(toolsamples.OPENCODE_JSONC, path=path), parse_jsonc(text, path=path)
    conduit = after["provider"].pop("conduit")
    assert after.pop("model") == "conduit/claude-sonnet-4-20250514"
    assert after.pop("small_model") == "conduit/claude-3-5-haiku-20241022"
    before.pop("model")
    assert after == before
    for kept in ("// Theme configuration", "/* from the shell */", '"enabled": true,'):
        assert kept in text
    key_file = temp_home / ".config" / "conduit" / "tool-keys" / "gw.key"
    assert conduit == {
        "npm": "@ai-sdk/openai-compatible", "name": "conduit (gw)",
        "options": {"baseURL": "https://gw.example.com/api/v1", "apiKey": f"{{file:{key_file}}}"},
        "models": {"claude-sonnet-4-20250514": {"name": "claude-sonnet-4-20250514"},
                   "claude-3-5-haiku-20241022": {"name": "claude-3-5-haiku-20241022"}}}
    assert "sk-test-abc" not in text
    assert key_file.read_text() == "sk-test-abc" and key_file.stat().st_mode & 0o777 == 0o600


def test_user_model_settings_in_conduit_provider_kept(temp_home: Path) -> None:
    """The person's keys in conduit's model entry stay; ``limit`` is conduit's (removed while the context is
    unknown, so a stale one never outlives a channel change: ``[tools.opencode] context_window`` sets one)."""
    path = toolsamples.opencode(temp_home)
    write_profile(temp_home, tools=("opencode",))
    run_sync(temp_home)
    doc = parse_jsonc(path.read_text(), path=path)
    doc["provider"]["conduit"]["models"]["claude-sonnet-4-20250514"]["limit"] = {"context": 200000}
    doc["provider"]["conduit"]["models"]["claude-sonnet-4-20250514"]["tool_call"] = True
    path.write_text(json.dumps(doc, indent=2) + "\n")
    lifecycle(temp_home)
    model = parse_jsonc(path.read_text(), path=path)["provider"]["conduit"]["models"]["claude-sonnet-4-20250514"]
    assert model == {"name": "claude-sonnet-4-20250514", "tool_call": True}


def test_env_key_source(temp_home: Path) -> None:
    path = toolsamples.opencode(temp_home)
    write_profile(temp_home, tools=(), extra='[tools.opencode]\nkey_source = "env"\n')
    lifecycle(temp_home)
    doc = parse_jsonc(path.read_text(), path=path)
    assert doc["provider"]["conduit"]["options"]["apiKey"] == "{env:CONDUIT_API_KEY}"
    assert not (temp_home / ".config" / "conduit" / "tool-keys").exists()


def test_plain_json_file_used_when_no_jsonc(temp_home: Path) -> None:
    path = toolsamples.write(temp_home / ".config" / "opencode" / "opencode.json",
                             '{\n  "$schema": "https://opencode.ai/config.json",\n  "theme": "tokyonight"\n}\n')
    write_profile(temp_home, tools=("opencode",))
    lifecycle(temp_home)
    doc = json.loads(path.read_text())  # still strict JSON
    assert doc["theme"] == "tokyonight" and doc["model"] == "conduit/claude-sonnet-4-20250514"


def test_xdg_config_home(temp_home: Path, monkeypatch) -> None:
    xdg = temp_home / "xdg"
    (xdg / "opencode").mkdir(parents=True)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(xdg))
    write_profile(temp_home, tools=("opencode",))  # the profile itself is found under XDG too
    (xdg / "conduit").mkdir(exist_ok=True)
    (temp_home / ".config" / "conduit" / "profile.toml").rename(xdg / "conduit" / "profile.toml")
    from conduit.adapters.base import Env
    from conduit.daemon.config.profile import load_profile
    from conduit.daemon.sync.engine import sync

    sync(load_profile(xdg / "conduit" / "profile.toml"), env=Env())
    assert parse_jsonc((xdg / "opencode" / "opencode.json").read_text(), path=Path("x"))["model"].startswith("conduit/")


def test_broken_jsonc_refused_unchanged(temp_home: Path) -> None:
    bad = '{\n  // a comment\n  "model": "x",,\n}\n'
    path = toolsamples.write(temp_home / ".config" / "opencode" / "opencode.jsonc", bad)
    write_profile(temp_home, tools=("opencode",))
    (report,) = run_sync(temp_home).tools
    assert report.status == "error" and "opencode.jsonc" in (report.message or "")
    assert "not valid JSON (JSONC) at line" in (report.message or "")
    assert path.read_text() == bad
