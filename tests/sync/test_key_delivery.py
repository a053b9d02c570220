"""``key_delivery``: a reference by default where a tool takes one (Claude Code's ``apiKeyHelper``), the channel's
setting beside the tool's (the tool's wins), a copy when conduit runs from a temporary virtual environment (with
doctor's note), ``key_at_rest`` in the sync state file and ``conduit status``, and the switch to a reference
taking the key out of that tool's backups. Real files under a temporary HOME, the real CLI in subprocesses."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

import pytest
from helpers.toolfiles import cc_switch_db, claude_settings, cline_gen_c, write_profile

from conduit.adapters.keyref import DELIVERY_OPTIONS, delivery_options
from conduit.adapters.registry import ADAPTERS
from conduit.daemon.agent.loops import read_tools
from conduit.daemon.cli.agent import render_status
from conduit.daemon.config.profile import load_profile
from conduit.daemon.config.resolve import Resolver
from conduit.redact import fingerprint

KEY = "sk-delivery-0123456789abcdefQRS"


def cli(home: Path, *args: str, python: str = sys.executable) -> subprocess.CompletedProcess[str]:
    """``conduit ARGS`` with ``python``; a python other than the suite's runs without ``CONDUIT_STABLE_INSTALL``
    (its place decides, as for a person)."""
    env = dict(os.environ, HOME=str(home), NO_COLOR="1", COLUMNS="200", PATH="/usr/bin:/bin")
    env.pop("NOTIFY_SOCKET", None)
    if python != sys.executable:
        env.pop("CONDUIT_STABLE_INSTALL", None)
    return subprocess.run([python, "-m", "conduit.daemon.cli", *args], capture_output=True, text=True, env=env,
                          timeout=120)


def setup(home: Path, *, channel: str | None = None, claude: str = "", tools: tuple[str, ...] = ()) -> Path:
    claude_settings(home)
    cline_gen_c(home)
    cc_switch_db(home)
    profile = write_profile(home, key_text=KEY + "\n", key_delivery=channel,
                            tools=("claude_code", "cline", "cc_switch", *tools))
    profile.write_text(profile.read_text().replace("[tools.claude_code]\n", f"[tools.claude_code]\n{claude}"))
    return profile


def claude_doc(home: Path) -> dict[str, Any]:
    return dict(json.loads((home / ".claude" / "settings.json").read_text()))


def test_reference_is_the_default_and_status_says_where_each_key_rests(temp_home: Path) -> None:
    setup(temp_home)
    r = cli(temp_home, "sync")
    assert r.returncode == 0, r.stdout + r.stderr
    doc = claude_doc(temp_home)
    assert doc["apiKeyHelper"].endswith(" key print gw") and "ANTHROPIC_AUTH_TOKEN" not in doc["env"]
    state = temp_home / ".local" / "state" / "conduit" / "sync.json"
    tools = read_tools(state).tools  # what the agent answers under "tools" in /v1/status
    assert tools["claude_code"]["key_at_rest"] == "reference (apiKeyHelper)"
    assert tools["cline"]["key_at_rest"] == "file 0600"
    assert tools["cc_switch"]["key_at_rest"] == "database 0600"
    assert KEY not in state.read_text()
    buf = io.StringIO()
    render_status({"agent": {"state": "ready", "pid": 1, "uptime_s": 3, "socket": "/s"}, "channels": {}, "gpus": {},
                   "host": {}, "vllm": {"state": "not_configured"}, "tools": {"tools": tools}}, file=buf)
    text = buf.getvalue()
    assert "key at rest" in text
    assert "reference (apiKeyHelper)" in next(line for line in text.splitlines() if "Claude Code" in line)
    assert "database 0600" in next(line for line in text.splitlines() if "CC Switch" in line)


def test_the_channels_copy_applies_and_the_tools_own_setting_wins(temp_home: Path) -> None:
    profile = setup(temp_home, channel="copy")
    assert cli(temp_home, "sync").returncode == 0
    doc = claude_doc(temp_home)
    assert "apiKeyHelper" not in doc and doc["env"]["ANTHROPIC_AUTH_TOKEN"] == KEY
    profile.write_text(profile.read_text().replace("[tools.claude_code]\n",
                                                   '[tools.claude_code]\nkey_delivery = "reference"\n'))
    assert cli(temp_home, "sync").returncode == 0
    doc = claude_doc(temp_home)
    assert doc["apiKeyHelper"].endswith(" key print gw") and "ANTHROPIC_AUTH_TOKEN" not in doc["env"]
    assert KEY not in json.dumps(doc)


def test_a_channels_delivery_maps_to_each_tools_own_option(temp_home: Path) -> None:
    """Pi's ``key_source`` follows the channel (``copy`` -> ``inline``); its own option wins; Codex's
    ``key_method`` takes ``dotenv`` for a copy; an adapter's Options accept every mapped value."""
    for tool, (option, values) in DELIVERY_OPTIONS.items():
        for value in values.values():
            ADAPTERS[tool].Options.model_validate({option: value})  # raises when the table names a wrong value
    setup(temp_home, channel="copy", tools=("pi",))
    resolver = Resolver(load_profile(temp_home / ".config" / "conduit" / "profile.toml"))
    assert resolver.tool_settings("pi").options.model_dump()["key_source"] == "inline"
    assert resolver.tool_settings("claude_code").options.model_dump()["key_delivery"] == "copy"
    assert delivery_options("pi", "copy", {"key_source": "file"}) == {"key_source": "file"}
    assert delivery_options("codex", "copy", {}) == {"key_method": "dotenv"}
    assert delivery_options("opencode", "copy", {}) == {}  # no copy form: its own default stays
    assert delivery_options("cline", "reference", {"x": 1}) == {"x": 1}


def test_an_unknown_channel_delivery_is_refused_with_the_key_named(temp_home: Path) -> None:
    setup(temp_home, channel="plain")
    r = cli(temp_home, "sync")
    assert r.returncode != 0
    assert "key_delivery" in r.stderr + r.stdout and "Traceback" not in r.stderr


@pytest.fixture
def temp_venv(tmp_path: Path) -> Path:
    """A virtual environment under the temporary directory whose interpreter imports this conduit (a ``.pth``
    file adds this interpreter's site-packages): conduit run from a place that vanishes."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    purelib = Path(sysconfig.get_paths(vars={"base": str(venv), "platbase": str(venv)})["purelib"])
    purelib.joinpath("parent.pth").write_text(f"import site; site.addsitedir({sysconfig.get_paths()['purelib']!r})\n")
    return venv / "bin" / "python"


def test_conduit_in_a_temporary_venv_writes_a_copy_and_doctor_says_why(temp_home: Path, temp_venv: Path) -> None:
    setup(temp_home)
    r = cli(temp_home, "sync", python=str(temp_venv))
    assert r.returncode == 0, r.stdout + r.stderr
    doc = claude_doc(temp_home)
    assert "apiKeyHelper" not in doc and doc["env"]["ANTHROPIC_AUTH_TOKEN"] == KEY
    report = json.loads(cli(temp_home, "doctor", "--json", python=str(temp_venv)).stdout)
    warning = next(w for w in report["warnings"] if 'key_delivery = "reference", but conduit runs from' in w)
    assert str(temp_venv) in warning and "a temporary directory" in warning
    assert report["tools"]["claude_code"]["key_at_rest"]["where"] == "file 0600"
    assert cli(temp_home, "sync").returncode == 0  # from a stable place, the reference comes
    assert claude_doc(temp_home)["apiKeyHelper"].endswith(" key print gw")


def test_switching_to_a_reference_takes_the_key_out_of_that_tools_backups(temp_home: Path) -> None:
    profile = setup(temp_home, channel="copy")
    assert cli(temp_home, "sync").returncode == 0
    text = profile.read_text()
    profile.write_text(text.replace('model = "claude-sonnet-4-20250514"', 'model = "claude-opus-4-1"'))
    assert cli(temp_home, "sync").returncode == 0  # a backup of settings.json holding the key
    backups = temp_home / ".local" / "state" / "conduit" / "backups"

    def holding(tool: str) -> list[Path]:
        return [p for p in (backups / tool).rglob("*") if p.is_file() and KEY.encode() in p.read_bytes()]

    assert holding("claude_code") and holding("cline")
    profile.write_text(profile.read_text().replace('key_delivery = "copy"\n', ""))
    assert cli(temp_home, "sync").returncode == 0
    assert KEY not in (temp_home / ".claude" / "settings.json").read_text()
    assert holding("claude_code") == []
    assert holding("cline")  # Cline's live file still holds the key: its backups keep it
    assert any(fingerprint(KEY).encode() in p.read_bytes() for p in (backups / "claude_code").rglob("*") if p.is_file())


def test_a_profile_given_with_the_option_reaches_the_helper(temp_home: Path) -> None:
    """``conduit --profile P sync``: the helper Claude Code runs reads P, not the default profile (which may have a
    channel of the same name with another key)."""
    profile = setup(temp_home)
    other = temp_home / "work.toml"
    other.write_text(profile.read_text())
    profile.write_text(profile.read_text().replace("keys/gw", "keys/personal"))
    (profile.parent / "keys" / "personal").write_text("sk-personal-ZZZZZZZZZZZZZZZZ\n")
    assert cli(temp_home, "--profile", str(other), "sync").returncode == 0
    helper = claude_doc(temp_home)["apiKeyHelper"]
    assert f"--profile {other}" in helper
    env = dict(os.environ, HOME=str(temp_home))
    env.pop("CONDUIT_PROFILE", None)
    printed = subprocess.run(helper, shell=True, capture_output=True, text=True, env=env, timeout=60)
    assert printed.stdout.strip() == KEY, printed.stderr


def test_a_key_from_an_exported_variable_is_copied_unless_a_reference_is_asked_for(temp_home: Path) -> None:
    """``key = { env = "X" }``: the helper would read X in Claude Code's environment (an editor, a launcher),
    where it is often not set; so the default there is a copy; an explicit ``key_delivery`` still decides."""
    profile = setup(temp_home)
    text = profile.read_text().replace('key = { file = "~/.config/conduit/keys/gw" }', 'key = { env = "GW_KEY" }')
    profile.write_text(text)
    os.environ["GW_KEY"] = KEY
    try:
        assert cli(temp_home, "sync").returncode == 0
        doc = claude_doc(temp_home)
        assert "apiKeyHelper" not in doc and doc["env"]["ANTHROPIC_AUTH_TOKEN"] == KEY
        profile.write_text(text.replace('auth = "bearer"\n', 'auth = "bearer"\nkey_delivery = "reference"\n'))
        assert cli(temp_home, "sync").returncode == 0
        assert claude_doc(temp_home)["apiKeyHelper"].endswith(" key print gw")
    finally:
        del os.environ["GW_KEY"]
