"""Review findings kept fixed: odd inputs are reported per tool, never as a traceback or a clobber."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.toolfiles import cc_switch_db, claude_settings, cline_gen_c, run_sync, write_json, write_profile

from conduit.adapters.base import Root, ToolSettings
from conduit.daemon.config.profile import parse_profile
from conduit.errors import ProfileError


def test_deeply_nested_file_is_one_tools_error(temp_home: Path) -> None:
    path = temp_home / ".claude" / "settings.json"
    path.parent.mkdir()
    text = '{"a": ' + "[" * 100_000 + "]" * 100_000 + "}"
    path.write_text(text)
    cline_gen_c(temp_home)
    write_profile(temp_home, tools=("claude_code", "cline"))
    by = {t.tool: t for t in run_sync(temp_home).tools}
    assert by["claude_code"].status == "error" and "nested too deeply" in (by["claude_code"].message or "")
    assert path.read_text() == text
    assert by["cline"].status == "changed"


def test_out_of_range_number_is_refused_not_rewritten_as_infinity(temp_home: Path) -> None:
    path = temp_home / ".claude" / "settings.json"
    path.parent.mkdir()
    path.write_text('{"feedbackSurveyRate": 1e999}')
    write_profile(temp_home, tools=("claude_code",))
    (t,) = run_sync(temp_home).tools
    assert t.status == "error" and "out of range" in (t.message or "")
    assert path.read_text() == '{"feedbackSurveyRate": 1e999}'


@pytest.mark.parametrize("doc,tool", [({"env": "oops"}, "claude_code"),
                                      ({"version": 1, "providers": {"openai-compatible": "legacy"}}, "cline")])
def test_non_object_values_are_refused_not_replaced(temp_home: Path, doc: dict, tool: str) -> None:
    path = (claude_settings(temp_home, doc) if tool == "claude_code"
            else write_json(temp_home / ".cline/data/settings/providers.json", doc))
    before = path.read_text()
    write_profile(temp_home, tools=(tool,))
    (t,) = run_sync(temp_home).tools
    assert t.status == "error" and "not an object" in (t.message or "")
    assert path.read_text() == before


def test_table_defined_twice_is_a_profile_error(tmp_path: Path) -> None:
    text = 'version = 1\nchannel = "c"\nmodel = "m"\n[channels.c]\nbase_url = "https://x"\n' \
           '[tools]\ncline = {}\n[tools.cline]\n'
    with pytest.raises(ProfileError, match="not valid TOML"):
        parse_profile(text, tmp_path / "p.toml")


def test_tool_settings_repr_hides_the_key() -> None:
    s = ToolSettings(tool="t", channel="c", root=Root("https://x"), key="sk-SECRET-0123456789")
    assert "sk-SECRET" not in repr(s)


def test_adapters_never_import_the_daemon(temp_home: Path) -> None:
    """Dependencies run one way, daemon -> adapters (docs/design.md "Layout"). Plan every adapter, then look at
    sys.modules."""
    cc_switch_db(temp_home)
    code = f"""
import sys
from pathlib import Path
from conduit.adapters.base import Env, Root, ToolSettings
from conduit.adapters.registry import ADAPTERS
env = Env({{"HOME": {str(temp_home)!r}}})
for name, a in ADAPTERS.items():
    s = ToolSettings(tool=name, channel="c", root=Root("https://gw/api"), key="sk-test-abc", model="m",
                     options=a.Options.model_validate({{"create": True}} if "create" in a.Options.model_fields
                                                     else {{}}))
    try:
        for t in a.plan(s, env):
            getattr(t, "render", lambda x: None)(None)
    except Exception as exc:
        print(name, type(exc).__name__)
    a.inspect(env)
print(sorted(m for m in sys.modules if m.startswith("conduit.daemon")))
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "[]", r.stdout


def test_init_with_an_unusable_found_url_falls_back(temp_home: Path) -> None:
    claude_settings(temp_home, {"env": {"ANTHROPIC_BASE_URL": "localhost:4000"}})
    r = subprocess.run([sys.executable, "-m", "conduit.daemon.cli", "init"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    assert "starter profile" in r.stdout
    assert json.loads((temp_home / ".claude/settings.json").read_text())["env"]["ANTHROPIC_BASE_URL"] == "localhost:4000"


def test_key_like_secret_names(temp_home: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "conduit.daemon.cli", "key", "set", "sk-live-0123456789abcdef"],
                       input="x", capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "looks like an API key" in r.stderr and "0123456789abcdef" not in r.stderr
    r = subprocess.run([sys.executable, "-m", "conduit.daemon.cli", "key", "set", "key-prod"], input="sk-test-abc\n",
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr


def test_status_prints_bracketed_text_as_text(monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    monkeypatch.setenv("COLUMNS", "250")
    from conduit.daemon.cli.agent import render_status

    buf = io.StringIO()
    render_status({"agent": {"state": "running"}, "channels": {"tao[/x]": {"protocols": {"openai": {
        "verdict": "config", "message": "command `pass show work/[/]tao` failed", "latency_ms": {}}}}},
        "gpus": {"gpus": [], "reason": "no [bold]GPU"}, "vllm": {"state": "not_configured"}}, file=buf)
    out = buf.getvalue()
    assert "tao[/x]" in out and "work/[/]tao" in out and "no [bold]GPU" in out
