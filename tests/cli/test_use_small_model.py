"""`conduit use MODEL [--small-model M] [--dry-run]`: the background model (Claude Code's haiku slot) is never
left on another vendor's model silently; the choices come from the channel's cached model list (no request)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from helpers.toolfiles import claude_settings, write_profile

from conduit.daemon.catalog.models import Catalog, ModelInfo, write_cache
from conduit.daemon.cli.smallmodel import small_candidates, vendor_of

CONDUIT = [sys.executable, "-m", "conduit.daemon.cli"]
IDS = ("deepseek-chat", "deepseek-reasoner", "qwen-max", "qwen-turbo", "qwen3-coder-flash", "claude-3-5-haiku-20241022")


def conduit(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, HOME=str(home), NO_COLOR="1", COLUMNS="200")
    return subprocess.run([*CONDUIT, *args], capture_output=True, text=True, env=env, timeout=60,
                          stdin=subprocess.DEVNULL)


def _cache(base: str = "https://gw.example.com/api/v1") -> None:
    write_cache(Catalog("gw", base, time.time(), tuple(ModelInfo(i, None, None) for i in IDS)))


def _profile(home: Path) -> str:
    return (home / ".config" / "conduit" / "profile.toml").read_text()


def test_vendors_and_small_candidates() -> None:
    assert vendor_of("claude-3-5-haiku-20241022") == vendor_of("anthropic/claude-3.5-haiku") == "anthropic"
    assert vendor_of("deepseek-chat") == "deepseek" and vendor_of("gpt-4o-mini") == "openai"
    assert vendor_of("my-own-model") is None
    assert small_candidates(list(IDS), "qwen") == ["qwen-turbo", "qwen3-coder-flash"]


def test_other_vendor_small_model_is_said_with_the_cached_choices(temp_home: Path) -> None:
    write_profile(temp_home, tools=("claude_code",))
    _cache()
    r = conduit(temp_home, "use", "qwen-max", "--no-sync")
    assert r.returncode == 0, r.stderr
    text = " ".join(r.stdout.split())
    assert "small_model `claude-3-5-haiku-20241022` (anthropic) stays behind the new model `qwen-max`" in text
    assert "qwen-turbo, qwen3-coder-flash" in text and "--small-model qwen-turbo" in text
    assert 'small_model = "claude-3-5-haiku-20241022"' in _profile(temp_home)  # said, not changed behind one's back


def test_no_known_small_model_says_how_to_set_one(temp_home: Path) -> None:
    write_profile(temp_home, tools=("claude_code",))
    r = conduit(temp_home, "use", "deepseek-chat", "--no-sync", "--no-check")
    assert r.returncode == 0, r.stderr
    text = " ".join(r.stdout.split())
    assert "no small model of deepseek is known" in text and "--small-model ID" in text


def test_small_model_option_sets_it_and_claude_code_gets_it(temp_home: Path) -> None:
    write_profile(temp_home, tools=("claude_code",))
    claude_settings(temp_home)
    _cache()
    r = conduit(temp_home, "use", "qwen-max", "--small-model", "qwen-turbo")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "stays behind" not in r.stdout
    assert 'small_model = "qwen-turbo"' in _profile(temp_home) and 'model = "qwen-max"' in _profile(temp_home)
    env = json.loads((temp_home / ".claude" / "settings.json").read_text())["env"]
    assert env["ANTHROPIC_MODEL"] == "qwen-max" and env["ANTHROPIC_DEFAULT_HAIKU_MODEL"] == "qwen-turbo"
    r = conduit(temp_home, "use", "qwen-max", "--small-model", "", "--no-sync")
    assert r.returncode == 0 and "small_model" not in _profile(temp_home)


def test_dry_run_writes_nothing_and_asks_no_gateway(temp_home: Path) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        listener.setblocking(False)
        base = f"http://127.0.0.1:{listener.getsockname()[1]}/api"
        write_profile(temp_home, base, tools=("claude_code",))
        _cache(base + "/v1")
        before = _profile(temp_home)
        r = conduit(temp_home, "use", "qwen-max", "--dry-run")
        assert r.returncode == 0, r.stderr
        assert "would set model = qwen-max" in r.stdout and "qwen-turbo" in r.stdout
        assert _profile(temp_home) == before and not (temp_home / ".claude" / "settings.json").exists()
        try:
            listener.accept()
            raise AssertionError("`use --dry-run` connected to the gateway")
        except BlockingIOError:
            pass
