"""Switching back from the ``[fallback]`` channel (or removing a setting) leaves none of conduit's old values, and
a routing switch never takes CC Switch's "current" from a provider the user picked (field cases S5 F4, F5).

Each test runs the real CLI (``conduit sync`` in a subprocess, HOME from the suite's fixture) with the routing
file written as the agent writes it (``write_routing``), and checks the tools' files on disk.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.toolfiles import DEEPSEEK_ID, add_endpoints, cc_switch_db
from helpers.toolsamples import aider, opencode
from ruamel.yaml import YAML

from conduit.daemon.config.fallback import FallbackSettings
from conduit.daemon.config.routing import decision, write_routing

BASE = "http://127.0.0.1:9/api"  # nothing listens: a sync writes files and never needs the channel


def _profile(home: Path, *, small: str = "", timeout: str = "", fallback: bool = True,
             tools: tuple[str, ...] = ("claude_code", "opencode", "aider")) -> Path:
    """A profile: primary ``prim`` (``small`` / ``timeout`` lines added to the profile / the channel), channel
    ``fb`` with ``timeout = 120``, and a ``[fallback]`` to ``fb`` with a small model (unless ``fallback`` is
    false)."""
    cfg = home / ".config" / "conduit"
    (cfg / "keys").mkdir(parents=True, exist_ok=True)
    for name in ("prim", "fb"):
        (cfg / "keys" / name).write_text(f"sk-test-{name}\n")
        (cfg / "keys" / name).chmod(0o600)
    fb = '[fallback]\nchannel = "fb"\nmodel = "fb-model"\nsmall_model = "haiku"\n\n' if fallback else ""
    text = (f'version = 1\nchannel = "prim"\nmodel = "qwen"\n{small}\n'
            f'[channels.prim]\nbase_url = "{BASE}"\nprotocols = ["openai", "anthropic"]\n'
            f'key = {{ file = "~/.config/conduit/keys/prim" }}\n{timeout}\n'
            f'[channels.fb]\nbase_url = "{BASE}"\nprotocols = ["openai", "anthropic"]\n'
            'key = { file = "~/.config/conduit/keys/fb" }\ntimeout = 120\n\n'
            + fb + "".join(f"[tools.{t}]\n" for t in tools))
    path = cfg / "profile.toml"
    path.write_text(text)
    return path


def _route(profile: Path, active: str) -> None:
    """Write the agent's routing decision: ``fallback`` or ``primary``."""
    fb = FallbackSettings(channel="fb", model="fb-model", small_model="haiku", after_s=5)
    write_routing(decision(active, "test", str(profile), "prim", fb))  # type: ignore[arg-type]


def _sync(home: Path) -> None:
    env = dict(os.environ, HOME=str(home), NO_COLOR="1", COLUMNS="200")
    r = subprocess.run([sys.executable, "-m", "conduit.daemon.cli", "sync"], capture_output=True, text=True,
                       env=env, timeout=120)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]


def _claude_env(home: Path) -> dict[str, str]:
    env: dict[str, str] = json.loads((home / ".claude" / "settings.json").read_text())["env"]
    return env


def _tools(home: Path) -> tuple[str, dict[str, object]]:
    """OpenCode's config text and Aider's YAML as a dict."""
    return ((home / ".config" / "opencode" / "opencode.jsonc").read_text(),
            YAML(typ="safe").load((home / ".aider.conf.yml").read_text()))


def _user_content(home: Path) -> None:
    opencode(home)
    aider(home)
    (home / ".claude").mkdir()
    (home / ".claude" / "settings.json").write_text(json.dumps({"env": {"MY_VAR": "1"}, "theme": "dark"}))


def test_switch_back_removes_the_fallback_small_model_and_timeout(temp_home: Path) -> None:
    _user_content(temp_home)
    profile = _profile(temp_home)
    _sync(temp_home)
    _route(profile, "fallback")
    _sync(temp_home)
    text, conf = _tools(temp_home)
    assert '"small_model": "conduit/haiku"' in text  # routed: the fallback's small model
    assert conf["weak-model"] == "openai/haiku" and _claude_env(temp_home)["API_TIMEOUT_MS"] == "120000"
    _route(profile, "primary")
    _sync(temp_home)
    text, conf = _tools(temp_home)
    assert '"small_model"' not in text and '"model": "conduit/qwen"' in text
    assert "// Theme configuration" in text  # the user's comments stay
    assert "weak-model" not in conf and conf["model"] == "openai/qwen" and conf["auto-commits"] is False
    env = _claude_env(temp_home)
    assert "API_TIMEOUT_MS" not in env and env["MY_VAR"] == "1" and env["ANTHROPIC_MODEL"] == "qwen"


def test_removing_small_model_and_timeout_from_the_profile_removes_them(temp_home: Path) -> None:
    _user_content(temp_home)
    _profile(temp_home, small='small_model = "mini"\n', timeout="timeout = 30\n", fallback=False)
    _sync(temp_home)
    text, conf = _tools(temp_home)
    assert '"small_model": "conduit/mini"' in text and conf["weak-model"] == "openai/mini"
    assert _claude_env(temp_home)["API_TIMEOUT_MS"] == "30000"
    _profile(temp_home, fallback=False)
    _sync(temp_home)
    text, conf = _tools(temp_home)
    assert '"small_model"' not in text and "weak-model" not in conf
    assert "API_TIMEOUT_MS" not in _claude_env(temp_home)


def test_the_users_own_values_stay_or_come_back(temp_home: Path) -> None:
    """A value conduit replaced while routed comes back; one the person changed after conduit wrote it stays."""
    _user_content(temp_home)
    oc = temp_home / ".config" / "opencode" / "opencode.jsonc"
    oc.write_text(oc.read_text().replace('"$schema"', '"small_model": "anthropic/claude-haiku", "$schema"', 1))
    ai = temp_home / ".aider.conf.yml"
    ai.write_text(ai.read_text() + "weak-model: gpt-4o-mini\n")
    profile = _profile(temp_home)
    _sync(temp_home)
    text, conf = _tools(temp_home)
    assert '"small_model": "anthropic/claude-haiku"' in text and conf["weak-model"] == "gpt-4o-mini"
    _route(profile, "fallback")
    _sync(temp_home)
    assert _tools(temp_home)[1]["weak-model"] == "openai/haiku"
    claude = temp_home / ".claude" / "settings.json"
    claude.write_text(claude.read_text().replace('"120000"', '"300000"'))  # the person's own timeout now
    _route(profile, "primary")
    _sync(temp_home)
    text, conf = _tools(temp_home)
    assert '"small_model": "anthropic/claude-haiku"' in text and conf["weak-model"] == "gpt-4o-mini"
    assert _claude_env(temp_home)["API_TIMEOUT_MS"] == "300000"


def _current(db: Path) -> tuple[list[str], str]:
    with sqlite3.connect(db) as conn:
        ids = [r[0] for r in conn.execute("SELECT id FROM providers WHERE app_type = 'claude' AND is_current")]
    conn.close()
    return ids, json.loads((db.parent / "settings.json").read_text())["currentProviderClaude"]


def _choose(db: Path, pid: str) -> None:
    """What CC Switch's window does when the user picks a provider: both layers."""
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE providers SET is_current = (id = ?) WHERE app_type = 'claude'", (pid,))
    conn.close()
    doc = json.loads((db.parent / "settings.json").read_text())
    doc["currentProviderClaude"] = pid
    (db.parent / "settings.json").write_text(json.dumps(doc))


def test_cc_switch_users_pick_survives_a_fallback_round_trip(temp_home: Path) -> None:
    db = cc_switch_db(temp_home)
    profile = _profile(temp_home, tools=("cc_switch",))
    _sync(temp_home)
    add_endpoints(db, "conduit-prim", ["https://backup.example.com/api"])
    _choose(db, DEEPSEEK_ID)
    for active in ("fallback", "primary"):
        _route(profile, active)
        _sync(temp_home)
        assert _current(db) == ([DEEPSEEK_ID], DEEPSEEK_ID), active
    with sqlite3.connect(db) as conn:
        urls = conn.execute("SELECT provider_id, url FROM provider_endpoints").fetchall()
        fb = json.loads(conn.execute("SELECT settings_config FROM providers WHERE id = 'conduit-fb'").fetchone()[0])
    conn.close()
    assert ("conduit-prim", "https://backup.example.com/api") in urls  # C19: endpoints kept
    assert fb["env"]["ANTHROPIC_MODEL"] == "fb-model"  # conduit's fallback row is still written


def test_cc_switch_on_conduits_row_follows_the_routing(temp_home: Path) -> None:
    db = cc_switch_db(temp_home)
    profile = _profile(temp_home, tools=("cc_switch",))
    _sync(temp_home)
    assert _current(db) == (["conduit-prim"], "conduit-prim")
    _route(profile, "fallback")
    _sync(temp_home)
    assert _current(db) == (["conduit-fb"], "conduit-fb")
    _route(profile, "primary")
    _sync(temp_home)
    assert _current(db) == (["conduit-prim"], "conduit-prim")


def test_cc_switch_users_pick_of_an_older_conduit_row_survives_the_routing(temp_home: Path) -> None:
    """A `conduit-old` row (a channel the profile used before) that the person picked in CC Switch is their
    choice: a routing switch moves "current" only between this route's rows (conduit-prim, conduit-fb)."""
    db = cc_switch_db(temp_home)
    profile = _profile(temp_home, tools=("cc_switch",))
    _sync(temp_home)
    with sqlite3.connect(db) as conn:
        conn.execute("INSERT INTO providers (id, app_type, name, settings_config, is_current) "
                     "SELECT 'conduit-old', app_type, 'conduit: old', settings_config, 0 FROM providers "
                     "WHERE id = 'conduit-prim'")
    conn.close()
    _choose(db, "conduit-old")
    for active in ("fallback", "primary"):
        _route(profile, active)
        _sync(temp_home)
        assert _current(db) == (["conduit-old"], "conduit-old"), active


def _damage(path: Path, how: str) -> None:
    if how == "deleted":
        path.unlink()
    elif how == "truncated":
        path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2])
    else:
        path.write_bytes(b"\x00garbage{{[not json")


def _sync_here(home: Path) -> None:
    """One ``conduit sync`` in this process (HOME is the test's)."""
    from conduit.adapters.base import Env
    from conduit.daemon.config.profile import load_profile
    from conduit.daemon.sync.engine import sync

    assert sync(load_profile(home / ".config" / "conduit" / "profile.toml"), env=Env()).ok


def _no_fallback_value(home: Path) -> None:
    text, conf = _tools(home)
    assert '"small_model"' not in text and '"model": "conduit/qwen"' in text, text
    assert "weak-model" not in conf and conf["model"] == "openai/qwen", conf
    env = _claude_env(home)
    assert "API_TIMEOUT_MS" not in env and env["ANTHROPIC_MODEL"] == "qwen", env


@pytest.mark.parametrize("how", ["deleted", "truncated", "garbage"])
def test_switch_back_after_limits_json_was_lost_leaves_no_fallback_value(temp_home: Path, how: str) -> None:
    """``limits.json`` (who wrote each limit value) lost or damaged during a fallback: the fallback's small model
    and timeout are still known as conduit's (the profile's ``[fallback]`` says what that route writes)."""
    _user_content(temp_home)
    profile = _profile(temp_home)
    _sync_here(temp_home)
    _route(profile, "fallback")
    _sync_here(temp_home)
    assert _claude_env(temp_home)["API_TIMEOUT_MS"] == "120000" and _tools(temp_home)[1]["weak-model"] == "openai/haiku"
    limits = temp_home / ".local" / "state" / "conduit" / "limits.json"
    _damage(limits, how)
    _sync_here(temp_home)  # a sync while still routed (a profile edit, a restart) with the record gone
    _route(profile, "primary")
    _sync_here(temp_home)
    _no_fallback_value(temp_home)
    assert "// Theme configuration" in _tools(temp_home)[0]


def test_a_stale_fallback_decision_with_no_agent_is_not_applied(temp_home: Path, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A fallback decision older than ``STALE_AFTER_S`` with nothing answering on the agent's socket: tools stay on
    (or go back to) the primary and ``conduit sync`` says why, with the decision's date; an agent alive behind the
    same decision keeps it in force."""
    import socket
    import time

    from conduit.daemon.config.routing import STALE_AFTER_S

    sock = tmp_path / "agent.sock"
    monkeypatch.setenv("CONDUIT_AGENT_SOCKET", str(sock))
    _user_content(temp_home)
    profile = _profile(temp_home)
    fb = FallbackSettings(channel="fb", model="fb-model", small_model="haiku", after_s=5)
    old = time.time() - 3 * STALE_AFTER_S
    write_routing(decision("fallback", "vLLM failed", str(profile), "prim", fb, since=old))
    _sync_here(temp_home)
    _no_fallback_value(temp_home)
    env = dict(os.environ, HOME=str(temp_home), NO_COLOR="1", COLUMNS="300")
    r = subprocess.run([sys.executable, "-m", "conduit.daemon.cli", "sync"], capture_output=True, text=True,
                       env=env, timeout=120)
    day = time.strftime("%Y-%m-%d", time.localtime(old))
    assert r.returncode == 0 and f"fallback since {day}" in r.stdout and "no agent is running" in r.stdout, r.stdout
    assert "not applied" in r.stdout, r.stdout
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as agent:  # an agent stands behind it: applied
        agent.bind(str(sock))
        agent.listen(8)
        time.sleep(1.1)  # the last "no agent" answer is kept for 1 s
        _sync_here(temp_home)
        assert _claude_env(temp_home)["ANTHROPIC_MODEL"] == "fb-model"
