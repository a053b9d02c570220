"""Claude Code adapter: field cases C01, C03-C05, C09-C14 and the format rules of docs/formats/claude-code.md."""

from __future__ import annotations

import json
import os
from pathlib import Path

from helpers.toolfiles import CLAUDE_SETTINGS, claude_settings, lifecycle, run_sync, write_profile

from conduit.adapters.base import Env
from conduit.daemon.sync.doctor import doctor


def settings(home: Path) -> dict:
    return json.loads((home / ".claude" / "settings.json").read_text())


def test_c01_v1_root_is_written_without_v1(temp_home: Path) -> None:
    write_profile(temp_home, "https://GW.example.com/api/v1", tools=("claude_code",))
    claude_settings(temp_home)
    lifecycle(temp_home)
    assert settings(temp_home)["env"]["ANTHROPIC_BASE_URL"] == "https://gw.example.com/api"


def test_c03_pasted_endpoint_is_stripped_with_notice(temp_home: Path) -> None:
    write_profile(temp_home, "https://gw.example.com/v1/chat/completions", tools=("claude_code",))
    report = lifecycle(temp_home)
    assert settings(temp_home)["env"]["ANTHROPIC_BASE_URL"] == "https://gw.example.com"
    assert any("/chat/completions" in n for n in report.notices), report.notices


def test_c04_no_double_slash(temp_home: Path) -> None:
    for raw in ("https://gw.example.com/api/v1/", "https://gw.example.com/api//", "https://gw.example.com//api///v1//"):
        write_profile(temp_home, raw, tools=("claude_code",))
        run_sync(temp_home)
        url = settings(temp_home)["env"]["ANTHROPIC_BASE_URL"]
        assert url == "https://gw.example.com/api"
        assert "//" not in url.split("://", 1)[1]


def test_c05_trailing_space_trimmed(temp_home: Path) -> None:
    write_profile(temp_home, "https://gw.example.com/api ", tools=("claude_code",))
    run_sync(temp_home)
    assert settings(temp_home)["env"]["ANTHROPIC_BASE_URL"] == "https://gw.example.com/api"


def test_c06_key_file_newline_and_c14_bearer_prefix(temp_home: Path) -> None:
    write_profile(temp_home, key_text="sk-test-abc\n", tools=("claude_code",))
    run_sync(temp_home)
    assert settings(temp_home)["env"]["ANTHROPIC_AUTH_TOKEN"] == "sk-test-abc"
    write_profile(temp_home, key_text="Bearer sk-test-abc", tools=("claude_code",))
    run_sync(temp_home)
    assert settings(temp_home)["env"]["ANTHROPIC_AUTH_TOKEN"] == "sk-test-abc"


def test_c07_c08_bad_key_refused_nothing_written(temp_home: Path) -> None:
    path = claude_settings(temp_home)
    before = path.read_bytes()
    for bad, expect in (("sk-test-ab\ncd", "U+000A"), ("sk-test-abcd\u2211efgh", "U+2211 at position 12")):
        write_profile(temp_home, key_text=bad, tools=("claude_code",))
        report = run_sync(temp_home)
        (tool,) = report.tools
        assert tool.status == "error"
        assert expect in (tool.message or "")
        assert "sk-test" not in (tool.message or "")
        assert path.read_bytes() == before


def test_c09_unowned_keys_and_order_survive(temp_home: Path) -> None:
    write_profile(temp_home, tools=("claude_code",))
    claude_settings(temp_home)
    lifecycle(temp_home)
    doc = settings(temp_home)
    assert list(doc) == list(CLAUDE_SETTINGS)
    for key in ("$schema", "permissions", "hooks", "statusLine", "enabledPlugins", "model"):
        assert doc[key] == CLAUDE_SETTINGS[key]
    env = doc["env"]
    assert env["DISABLE_TELEMETRY"] == "1" and list(env)[0] == "DISABLE_TELEMETRY"
    assert env["ANTHROPIC_BASE_URL"] == "https://gw.example.com/api"
    assert env["ANTHROPIC_MODEL"] == "claude-sonnet-4-20250514"
    assert env["ANTHROPIC_DEFAULT_HAIKU_MODEL"] == "claude-3-5-haiku-20241022"
    assert all(isinstance(v, str) for v in env.values())


def test_c10_hooks_added_between_read_and_write_survive(temp_home: Path, monkeypatch) -> None:
    """Another program adds a hooks entry after conduit read the profile and planned, before the write."""
    write_profile(temp_home, tools=("claude_code",))
    path = claude_settings(temp_home)
    from conduit.adapters import claude_code

    real_plan = claude_code.ClaudeCode.plan

    def plan_then_race(self, s, env):  # the race happens after planning, before the writer reads
        targets = real_plan(self, s, env)
        doc = json.loads(path.read_text())
        doc["hooks"]["Stop"] = [{"hooks": [{"type": "command", "command": "notify-send done"}]}]
        path.write_text(json.dumps(doc, indent=2))
        return targets

    monkeypatch.setattr(claude_code.ClaudeCode, "plan", plan_then_race)
    run_sync(temp_home)
    doc = settings(temp_home)
    assert doc["hooks"]["Stop"][0]["hooks"][0]["command"] == "notify-send done"
    assert doc["env"]["ANTHROPIC_BASE_URL"] == "https://gw.example.com/api"


def test_c11_exactly_one_auth_variable(temp_home: Path) -> None:
    doc = dict(CLAUDE_SETTINGS, env={"ANTHROPIC_AUTH_TOKEN": "sk-a-000000000000", "ANTHROPIC_API_KEY": "sk-b-00000000000"})
    claude_settings(temp_home, doc)
    write_profile(temp_home, tools=("claude_code",))
    run_sync(temp_home)
    env = settings(temp_home)["env"]
    assert [k for k in env if k in ("ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_API_KEY")] == ["ANTHROPIC_AUTH_TOKEN"]
    write_profile(temp_home, tools=("claude_code",), auth="x-api-key")
    run_sync(temp_home)
    env = settings(temp_home)["env"]
    assert [k for k in env if k in ("ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_API_KEY")] == ["ANTHROPIC_API_KEY"]


def test_c12_doctor_shows_effective_value_and_why(temp_home: Path) -> None:
    write_profile(temp_home, tools=("claude_code",))
    run_sync(temp_home)
    shell_env = dict(os.environ, ANTHROPIC_BASE_URL="https://stale.example.com")
    rep = doctor(None, Env(shell_env, cwd=temp_home))
    eff = rep["tools"]["claude_code"]["facts"]["effective"]["ANTHROPIC_BASE_URL"]
    assert eff["value"] == "https://gw.example.com/api" and not eff["overrides_conduit"]
    assert "ignored" in eff["why"]
    project = temp_home / "proj"
    (project / ".claude").mkdir(parents=True)
    (project / ".claude" / "settings.local.json").write_text(
        json.dumps({"env": {"ANTHROPIC_BASE_URL": "https://project.example.com"}}))
    rep = doctor(None, Env(shell_env, cwd=project))
    eff = rep["tools"]["claude_code"]["facts"]["effective"]["ANTHROPIC_BASE_URL"]
    assert eff["value"] == "https://project.example.com" and eff["overrides_conduit"]
    assert "settings.local.json" in eff["source"]
    assert any("settings.local.json" in w for w in rep["warnings"])


def test_c13_query_dropped_with_warning(temp_home: Path) -> None:
    write_profile(temp_home, "https://gw.example.com/api?utm_source=blog&utm_medium=x", tools=("claude_code",))
    report = run_sync(temp_home)
    assert settings(temp_home)["env"]["ANTHROPIC_BASE_URL"] == "https://gw.example.com/api"
    assert any("utm_source" in n for n in report.notices)


def test_comment_in_settings_is_reported_and_left_alone(temp_home: Path) -> None:
    path = temp_home / ".claude" / "settings.json"
    path.parent.mkdir()
    text = '{\n  // my comment\n  "env": {}\n}\n'
    path.write_text(text)
    write_profile(temp_home, tools=("claude_code", "cline"))
    from helpers.toolfiles import cline_gen_c

    cline_gen_c(temp_home)
    report = run_sync(temp_home)
    by = {t.tool: t for t in report.tools}
    assert by["claude_code"].status == "error" and "settings.json" in (by["claude_code"].message or "")
    assert path.read_text() == text
    assert by["cline"].status == "changed"  # the other tool still syncs


def test_symlinked_settings_stay_a_symlink(temp_home: Path) -> None:
    dotfiles = temp_home / "dotfiles"
    dotfiles.mkdir()
    real = dotfiles / "claude-settings.json"
    real.write_text(json.dumps(CLAUDE_SETTINGS, indent=2))
    (temp_home / ".claude").mkdir()
    link = temp_home / ".claude" / "settings.json"
    link.symlink_to(real)
    write_profile(temp_home, tools=("claude_code",))
    lifecycle(temp_home)
    assert link.is_symlink()
    assert json.loads(real.read_text())["env"]["ANTHROPIC_BASE_URL"] == "https://gw.example.com/api"


def test_claude_config_dir_is_honoured(temp_home: Path, monkeypatch) -> None:
    alt = temp_home / "alt-claude"
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(alt))
    write_profile(temp_home, tools=("claude_code",))
    run_sync(temp_home)
    assert json.loads((alt / "settings.json").read_text())["env"]["ANTHROPIC_MODEL"] == "claude-sonnet-4-20250514"
    assert not (temp_home / ".claude" / "settings.json").exists()
    assert (alt / "settings.json").stat().st_mode & 0o777 == 0o600


def test_deprecated_small_fast_model_removed(temp_home: Path) -> None:
    claude_settings(temp_home, {"env": {"ANTHROPIC_SMALL_FAST_MODEL": "claude-3-haiku"}})
    write_profile(temp_home, tools=("claude_code",), small_model=None)
    run_sync(temp_home)
    env = settings(temp_home)["env"]
    assert "ANTHROPIC_SMALL_FAST_MODEL" not in env
    assert env["ANTHROPIC_DEFAULT_HAIKU_MODEL"] == "claude-sonnet-4-20250514"
