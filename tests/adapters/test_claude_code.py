"""Claude Code adapter: field cases C01, C03-C05, C09-C14 and the format rules of docs/formats/claude-code.md."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from helpers.modelserver import ModelServer
from helpers.toolfiles import CLAUDE_SETTINGS, claude_settings, lifecycle, run_sync, write_profile

from conduit.adapters.base import Env
from conduit.daemon.catalog.models import refresh
from conduit.daemon.config.profile import load_profile
from conduit.daemon.config.resolve import resolve_channel
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
    write_profile(temp_home, key_text="sk-test-abc\n", tools=("claude_code",), key_delivery="copy")
    run_sync(temp_home)
    assert settings(temp_home)["env"]["ANTHROPIC_AUTH_TOKEN"] == "sk-test-abc"
    write_profile(temp_home, key_text="Bearer sk-test-abc", tools=("claude_code",), key_delivery="copy")
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
    assert list(doc) == [*CLAUDE_SETTINGS, "apiKeyHelper"]  # the key by reference (the default), appended
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
    write_profile(temp_home, tools=("claude_code",), key_delivery="copy")
    run_sync(temp_home)
    env = settings(temp_home)["env"]
    assert [k for k in env if k in ("ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_API_KEY")] == ["ANTHROPIC_AUTH_TOKEN"]
    write_profile(temp_home, tools=("claude_code",), auth="x-api-key", key_delivery="copy")
    run_sync(temp_home)
    env = settings(temp_home)["env"]
    assert [k for k in env if k in ("ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_API_KEY")] == ["ANTHROPIC_API_KEY"]
    write_profile(temp_home, tools=("claude_code",), auth="x-api-key")  # the default: a reference, neither
    run_sync(temp_home)
    assert not {"ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_API_KEY"} & set(settings(temp_home)["env"])


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


# Limits and the local-server switch (docs/formats/claude-code.md "Limits"): CLAUDE_CODE_MAX_OUTPUT_TOKENS,
# CLAUDE_CODE_MAX_CONTEXT_TOKENS, CLAUDE_CODE_ATTRIBUTION_HEADER, each conduit's only while it holds conduit's value.
LIMIT_VARS = ("CLAUDE_CODE_MAX_OUTPUT_TOKENS", "CLAUDE_CODE_MAX_CONTEXT_TOKENS", "CLAUDE_CODE_ATTRIBUTION_HEADER")


def _limits(home: Path) -> dict[str, str]:
    env = settings(home)["env"]
    return {k: env[k] for k in LIMIT_VARS if k in env}


def test_output_limit_leaves_three_quarters_for_the_prompt() -> None:
    from conduit.adapters.claude_code import output_limit

    assert output_limit(32768, None) == 8192  # only the window (vLLM's max_model_len)
    assert output_limit(32768, 16384) == 8192  # the catalog's half is too much for Claude Code's own prompt
    assert output_limit(32768, 4096) == 4096
    assert output_limit(1_000_000, 64000) == 64000
    assert output_limit(None, 4096) == 4096 and output_limit(None, None) is None
    assert output_limit(3, None) == 1


@pytest.mark.parametrize(("channel", "url", "local"), [
    ("gw", "https://gw.example.com/api", False), ("gw", "http://127.0.0.1:8000", True),
    ("gw", "http://localhost:8000", True), ("gw", "http://[::1]:8000", True), ("gw", "http://192.168.1.5:8000", True),
    ("gw", "http://10.0.0.7", True), ("gw", "https://gpu.lan.example.com", False), ("gw", "http://8.8.8.8", False),
    ("local", "https://gpu.lan.example.com", True)])
def test_is_local(channel: str, url: str, local: bool) -> None:
    from conduit.adapters.base import Root, ToolSettings
    from conduit.adapters.claude_code import is_local

    assert is_local(ToolSettings("claude_code", channel, Root(url), None)) is local


def test_window_from_the_model_list_written_for_a_local_channel(temp_home: Path) -> None:
    """A loopback server listing ``max_model_len`` 32768: a quarter for output, the window, no billing block."""
    server = ModelServer({"object": "list", "data": [{"id": "qwen", "max_model_len": 32768}]})
    try:
        write_profile(temp_home, server.url, tools=("claude_code",), model="qwen", small_model=None)
        refresh(resolve_channel(load_profile(temp_home / ".config" / "conduit" / "profile.toml"), "gw"))
    finally:
        server.close()
    claude_settings(temp_home)
    lifecycle(temp_home)
    assert _limits(temp_home) == {"CLAUDE_CODE_MAX_OUTPUT_TOKENS": "8192", "CLAUDE_CODE_MAX_CONTEXT_TOKENS": "32768",
                                  "CLAUDE_CODE_ATTRIBUTION_HEADER": "0"}
    assert list(settings(temp_home)) == [*CLAUDE_SETTINGS, "apiKeyHelper"]


def test_limits_go_and_the_persons_values_come_back(temp_home: Path) -> None:
    """Known: conduit's values over the person's; unknown and hosted again: the person's back, conduit's gone;
    a value the person changed after conduit wrote it stays."""
    claude_settings(temp_home, dict(CLAUDE_SETTINGS, env={"CLAUDE_CODE_MAX_OUTPUT_TOKENS": "4000"}))
    write_profile(temp_home, "http://127.0.0.1:8000", tools=("claude_code",),
                  extra="context_window = 32768\nmax_output_tokens = 2000\n")
    assert run_sync(temp_home).ok
    assert _limits(temp_home) == {"CLAUDE_CODE_MAX_OUTPUT_TOKENS": "2000", "CLAUDE_CODE_MAX_CONTEXT_TOKENS": "32768",
                                  "CLAUDE_CODE_ATTRIBUTION_HEADER": "0"}
    doc = settings(temp_home)
    doc["env"]["CLAUDE_CODE_MAX_CONTEXT_TOKENS"] = "30000"  # the person's now
    (temp_home / ".claude" / "settings.json").write_text(json.dumps(doc))
    write_profile(temp_home, tools=("claude_code",))  # hosted, no window
    assert run_sync(temp_home).ok
    assert _limits(temp_home) == {"CLAUDE_CODE_MAX_OUTPUT_TOKENS": "4000", "CLAUDE_CODE_MAX_CONTEXT_TOKENS": "30000"}
    assert not run_sync(temp_home).changed


def test_persons_own_attribution_switch_stays_when_no_longer_local(temp_home: Path) -> None:
    claude_settings(temp_home, dict(CLAUDE_SETTINGS, env={"CLAUDE_CODE_ATTRIBUTION_HEADER": "false"}))
    write_profile(temp_home, "http://127.0.0.1:8000", tools=("claude_code",))
    assert run_sync(temp_home).ok
    assert _limits(temp_home) == {"CLAUDE_CODE_ATTRIBUTION_HEADER": "0"}
    write_profile(temp_home, tools=("claude_code",))
    assert run_sync(temp_home).ok
    assert _limits(temp_home) == {"CLAUDE_CODE_ATTRIBUTION_HEADER": "false"}


def test_project_attribution_switch_outranks_conduits(temp_home: Path) -> None:
    write_profile(temp_home, "http://127.0.0.1:8000", tools=("claude_code",))
    run_sync(temp_home)
    project = temp_home / "proj"
    (project / ".claude").mkdir(parents=True)
    (project / ".claude" / "settings.json").write_text(json.dumps({"env": {"CLAUDE_CODE_ATTRIBUTION_HEADER": "1"}}))
    rep = doctor(None, Env(dict(os.environ), cwd=project))
    blockers = rep["tools"]["claude_code"]["blockers"]
    assert any("CLAUDE_CODE_ATTRIBUTION_HEADER" in b["why"] for b in blockers), blockers
