"""The CLI as a person runs it: real subprocesses under a temporary HOME; bad input gets a clear error, exit
code and no traceback, and nothing on disk changes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from helpers.toolfiles import CLAUDE_SETTINGS, cc_switch_db, claude_settings, cline_gen_c, write_profile

CONDUIT = [sys.executable, "-m", "conduit.daemon.cli"]


def conduit(home: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, HOME=str(home), COLUMNS="200", NO_COLOR="1")
    return subprocess.run([*CONDUIT, *args], input=stdin, capture_output=True, text=True, env=env, timeout=60)


def no_traceback(r: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in r.stderr + r.stdout, r.stderr


def snapshot(home: Path) -> dict[Path, bytes]:
    """Every file under HOME but conduit's own state files (the state file records the failed sync, and the
    contacts record the host a key was sent to, by design)."""
    state = home / ".local" / "state" / "conduit"
    own = {state / "sync.json", state / "contacts.json"}
    return {p: p.read_bytes() for p in home.rglob("*") if p.is_file() and p not in own}


def test_init_key_set_sync_doctor_use_restore(temp_home: Path) -> None:
    claude_settings(temp_home, {"permissions": {"allow": ["Bash"]}})
    cline_gen_c(temp_home)
    cc_switch_db(temp_home)
    r = conduit(temp_home, "init", "--no-discover", "--base-url", "https://taotoken.net/api", "--channel", "taotoken")
    assert r.returncode == 0, r.stderr
    profile = temp_home / ".config" / "conduit" / "profile.toml"
    assert profile.exists()
    r = conduit(temp_home, "key", "set", "taotoken", stdin="sk-test-0123456789abcd\n")
    assert r.returncode == 0, r.stderr
    assert "sk-test-0123456789abcd" not in r.stdout + r.stderr
    r = conduit(temp_home, "sync", "--dry-run")
    assert r.returncode == 0, r.stderr
    assert "ANTHROPIC_BASE_URL" in r.stdout and "sk-test-0123456789abcd" not in r.stdout
    assert json.loads((temp_home / ".claude" / "settings.json").read_text()) == {"permissions": {"allow": ["Bash"]}}
    r = conduit(temp_home, "sync")
    assert r.returncode == 0, r.stderr
    doc = json.loads((temp_home / ".claude" / "settings.json").read_text())
    assert doc["env"]["ANTHROPIC_BASE_URL"] == "https://taotoken.net/api"
    assert doc["apiKeyHelper"].endswith(" key print taotoken") and "ANTHROPIC_AUTH_TOKEN" not in doc["env"]
    # without a daemon, a plain sync keeps the state file that `conduit status` and `doctor` read
    state = json.loads((temp_home / ".local" / "state" / "conduit" / "sync.json").read_text())
    assert state["tools"]["claude_code"]["status"] == "changed" and state["last_sync"]["trigger"] == "conduit sync"
    assert "sk-test-0123456789abcd" not in json.dumps(state)
    r = conduit(temp_home, "doctor", "--json")
    no_traceback(r)
    rep = json.loads(r.stdout)
    assert {k: v["state"] for k, v in rep["tools"].items() if v["managed"]} == {
        "claude_code": "in_sync", "cline": "in_sync", "cc_switch": "in_sync"}
    assert rep["tools"]["codex"]["state"] == "not_managed" and rep["ok"] is True
    assert "sk-test-0123456789abcd" not in r.stdout
    r = conduit(temp_home, "use", "deepseek-chat")
    assert r.returncode == 0, r.stderr
    assert "# The channel and model every tool uses" in profile.read_text()
    env = json.loads((temp_home / ".claude" / "settings.json").read_text())["env"]
    assert env["ANTHROPIC_MODEL"] == "deepseek-chat"
    providers = json.loads((temp_home / ".cline" / "data" / "settings" / "providers.json").read_text())
    assert providers["providers"]["openai-compatible"]["settings"]["model"] == "deepseek-chat"
    r = conduit(temp_home, "restore", "claude_code", "--list")
    assert r.returncode == 0 and "settings.json" in r.stdout
    r = conduit(temp_home, "restore", "claude_code")
    assert r.returncode == 0, r.stderr
    env = json.loads((temp_home / ".claude" / "settings.json").read_text())["env"]
    assert env["ANTHROPIC_MODEL"] == "claude-sonnet-4-20250514"  # the state before `use`


def test_init_proposes_profile_from_existing_tools(temp_home: Path) -> None:
    claude_settings(temp_home)  # points at https://old.example.com/api/v1 with a key
    r = conduit(temp_home, "init")
    assert r.returncode == 0, r.stderr
    text = (temp_home / ".config" / "conduit" / "profile.toml").read_text()
    assert 'base_url = "https://old.example.com/api"' in text and "sk-old" not in text
    assert "sk-old" not in r.stdout and "sk-...0000" in r.stdout
    secrets = temp_home / ".config" / "conduit" / "secrets.toml"
    assert secrets.stat().st_mode & 0o777 == 0o600
    r = conduit(temp_home, "sync", "--dry-run")  # the tool named no model: init's MODEL-NAME is refused
    assert r.returncode == 1 and "model `MODEL-NAME` is a placeholder" in r.stdout, r.stdout + r.stderr
    r = conduit(temp_home, "use", "claude-sonnet-4-20250514", "--no-check", "--no-sync")
    assert r.returncode == 0, r.stderr
    r = conduit(temp_home, "sync", "--dry-run")
    assert r.returncode == 0, r.stdout + r.stderr


def test_init_refuses_to_overwrite(temp_home: Path) -> None:
    write_profile(temp_home)
    before = snapshot(temp_home)
    r = conduit(temp_home, "init")
    assert r.returncode == 1 and "already exists" in r.stderr and "--force" in r.stderr
    assert snapshot(temp_home) == before


@pytest.mark.parametrize("case", ["unparseable", "unknown_key", "missing_key_file", "key_line_break",
                                  "tool_file_comment", "unknown_tool_flag"])
def test_bad_input_clear_error_nothing_changed(temp_home: Path, case: str) -> None:
    claude_settings(temp_home)
    write_profile(temp_home, tools=("claude_code",))
    profile = temp_home / ".config" / "conduit" / "profile.toml"
    keyfile = temp_home / ".config" / "conduit" / "keys" / "gw"
    settings = temp_home / ".claude" / "settings.json"
    expect = {
        "unparseable": "not valid TOML",
        "unknown_key": "did you mean `base_url`",
        "missing_key_file": "keys/gw",
        "key_line_break": "line break",
        "tool_file_comment": "settings.json",
        "unknown_tool_flag": "No such option",
    }[case]
    args = ["sync"]
    if case == "unparseable":
        profile.write_text(profile.read_text().replace('channel = "gw"', 'channel = "gw'))
    elif case == "unknown_key":
        profile.write_text(profile.read_text().replace("base_url", "base_ur"))
    elif case == "missing_key_file":
        keyfile.unlink()
    elif case == "key_line_break":
        keyfile.write_text("sk-test-ab\ncd")
    elif case == "tool_file_comment":
        settings.write_text('{\n  "env": {}, // comment\n}\n')
    elif case == "unknown_tool_flag":
        args = ["sync", "--tools", "x"]
    before = snapshot(temp_home)
    r = conduit(temp_home, *args)
    no_traceback(r)
    assert r.returncode == (3 if case == "unknown_tool_flag" else 1), (r.stdout, r.stderr)
    assert expect in r.stdout + r.stderr
    assert "sk-test-ab" not in r.stdout + r.stderr
    assert snapshot(temp_home) == before


@contextmanager
def immutable(path: Path) -> Iterator[None]:
    """Make a directory unwritable even for root (chattr +i)."""
    if shutil.which("chattr") is None or subprocess.run(["chattr", "+i", str(path)]).returncode != 0:
        pytest.fail("chattr +i is needed to make a directory unwritable for root on this machine")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)


def test_unwritable_directory(temp_home: Path) -> None:
    claude_settings(temp_home, CLAUDE_SETTINGS)
    cline_gen_c(temp_home)
    write_profile(temp_home, tools=("claude_code", "cline"))
    before = (temp_home / ".claude" / "settings.json").read_bytes()
    with immutable(temp_home / ".claude"):
        r = conduit(temp_home, "sync")
    no_traceback(r)
    assert r.returncode == 1
    assert ".claude" in r.stdout and "writable" in r.stdout.lower()
    assert (temp_home / ".claude" / "settings.json").read_bytes() == before
    providers = json.loads((temp_home / ".cline" / "data" / "settings" / "providers.json").read_text())
    assert "openai-compatible" in providers["providers"]  # the other tool still synced


def test_no_profile_says_run_init(temp_home: Path) -> None:
    r = conduit(temp_home, "sync")
    no_traceback(r)
    assert r.returncode == 1 and "conduit init" in r.stderr


def test_init_proposes_from_cc_switch_current_provider(temp_home: Path) -> None:
    cc_switch_db(temp_home)  # current provider: DeepSeek's Anthropic endpoint
    r = conduit(temp_home, "init")
    assert r.returncode == 0, r.stderr
    text = (temp_home / ".config" / "conduit" / "profile.toml").read_text()
    assert 'base_url = "https://api.deepseek.com/anthropic"' in text and 'model = "deepseek-chat"' in text
    assert 'protocols = ["anthropic"]' in text and "[tools.cc_switch]" in text
    assert "sk-deepseek" not in text + r.stdout
    assert conduit(temp_home, "sync", "--dry-run").returncode == 0


def test_init_print_is_verbatim_toml(temp_home: Path) -> None:
    import tomllib

    for template in ("hosted", "local-vllm", "both"):
        r = subprocess.run([*CONDUIT, "init", "--print", "--template", template], capture_output=True, text=True,
                           env=dict(os.environ, HOME=str(temp_home), COLUMNS="60"), timeout=60)
        assert r.returncode == 0, r.stderr
        tomllib.loads(r.stdout)  # no line wrapped by the terminal width


def test_init_from_a_tool_without_a_key_points_at_the_secret_and_never_writes_a_placeholder(temp_home: Path) -> None:
    """A new user's pass: a Claude Code file with a gateway but no key. The proposal names the secret to store;
    until it is stored, sync says so and writes nothing (never the `no-key-needed` placeholder)."""
    doc = {"permissions": {"allow": ["Read(*)"]}, "env": {"ANTHROPIC_BASE_URL": "https://old.example.com/api"}}
    claude_settings(temp_home, doc)
    before = snapshot(temp_home)
    r = conduit(temp_home, "init")
    assert r.returncode == 0, r.stderr
    text = (temp_home / ".config" / "conduit" / "profile.toml").read_text()
    assert 'secret = "gateway"' in text
    assert "conduit key set gateway" in r.stdout and "MODEL-NAME" in r.stdout
    r = conduit(temp_home, "sync")
    assert r.returncode == 1 and "run `conduit key set gateway`" in r.stdout + r.stderr, r.stdout + r.stderr
    no_traceback(r)
    assert (temp_home / ".claude" / "settings.json").read_bytes() == before[temp_home / ".claude" / "settings.json"]
    r = conduit(temp_home, "key", "set", "gateway", stdin="sk-live-0123456789abcdef\n")
    assert r.returncode == 0, r.stderr
    r = conduit(temp_home, "use", "claude-sonnet-4-20250514")
    assert r.returncode == 0, r.stderr
    doc = json.loads((temp_home / ".claude" / "settings.json").read_text())
    assert doc["apiKeyHelper"].endswith(" key print gateway") and "ANTHROPIC_AUTH_TOKEN" not in doc["env"]
    helper = subprocess.run(["/bin/sh", "-c", doc["apiKeyHelper"]], capture_output=True, text=True, timeout=60,
                            env={"HOME": str(temp_home), "PATH": "/usr/bin:/bin"})
    assert helper.stdout == "sk-live-0123456789abcdef\n", helper.stderr
