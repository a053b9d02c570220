"""The Resolver under the agent's routing decision: tools on the primary go to the [fallback] channel and
model; `[tools.X] fallback = false`, a tool on another channel, a decision for another profile or primary, and
an unreadable routing file each behave as the contract (conduit.daemon.config.routing) says. Real files under a
temporary HOME, the real sync engine."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.isolation import env_for_subprocess

from conduit.adapters.base import Env
from conduit.daemon.config.profile import load_profile
from conduit.daemon.config.resolve import Resolver
from conduit.daemon.config.routing import (
    RoutingDecision,
    RoutingReader,
    decision,
    kept_path,
    profile_key,
    read_routing,
    routing_path,
    write_routing,
)
from conduit.daemon.sync.doctor import doctor
from conduit.daemon.sync.engine import sync
from conduit.daemon.sync.loop import DaemonOptions, SyncDaemon
from conduit.errors import ConduitError

PROFILE = """version = 1
channel = "local"
model = "qwen"
small_model = "qwen-small"

[channels.local]
base_url = "http://127.0.0.1:8000"
protocols = ["openai", "anthropic"]

[channels.hosted]
base_url = "http://127.0.0.1:9100/api"
protocols = ["openai", "anthropic"]

[channels.other]
base_url = "http://127.0.0.1:9200"
protocols = ["openai", "anthropic"]

[channels.oai]
base_url = "http://127.0.0.1:9300"
protocols = ["openai"]

[fallback]
channel = "hosted"
model = "claude-sonnet-4-20250514"
small_model = "claude-3-5-haiku-20241022"
after_s = 2

[tools.claude_code]
[tools.codex]
fallback = false
[tools.opencode]
channel = "other"
model = "other-model"
"""


@pytest.fixture
def profile_file(temp_home: Path) -> Path:
    p = temp_home / ".config" / "conduit" / "profile.toml"
    p.parent.mkdir(parents=True)
    p.write_text(PROFILE)
    return p


def fallback_now(profile_file: Path, primary: str = "local", profile: str | None = None) -> RoutingDecision:
    loaded = load_profile(profile_file)
    assert loaded.model.fallback is not None
    d = decision("fallback", "the supervised vLLM is failed (for 2 s)", profile or profile_key(str(profile_file)),
                 primary, loaded.model.fallback)
    write_routing(d)
    return d


def test_no_routing_file_every_tool_on_its_channel(profile_file: Path) -> None:
    r = Resolver(load_profile(profile_file))
    assert r.routing is None
    cc = r.tool_settings("claude_code")
    assert (cc.channel, cc.model, cc.small_model) == ("local", "qwen", "qwen-small")


def test_fallback_decision_routes_only_primary_tools_that_follow(profile_file: Path) -> None:
    fallback_now(profile_file)
    r = Resolver(load_profile(profile_file))
    cc = r.tool_settings("claude_code")
    assert (cc.channel, cc.model, cc.small_model) == ("hosted", "claude-sonnet-4-20250514", "claude-3-5-haiku-20241022")
    assert cc.root.url.startswith("http://127.0.0.1:9100")
    codex = r.tool_settings("codex")  # fallback = false keeps it on the primary
    assert (codex.channel, codex.model) == ("local", "qwen")
    oc = r.tool_settings("opencode")  # a tool on another channel stays there
    assert (oc.channel, oc.model) == ("other", "other-model")
    assert r.tool_channel_name("claude_code") == "hosted"


def test_primary_decision_and_explicit_none(profile_file: Path) -> None:
    loaded = load_profile(profile_file)
    assert loaded.model.fallback is not None
    write_routing(decision("primary", "channel local answers", profile_key(str(profile_file)), "local",
                           loaded.model.fallback))
    assert Resolver(loaded).tool_settings("claude_code").channel == "local"
    fallback_now(profile_file)
    assert Resolver(loaded, routing=None).tool_settings("claude_code").channel == "local"


@pytest.mark.parametrize("how", ["other profile", "other primary"])
def test_stale_decision_is_ignored(profile_file: Path, how: str) -> None:
    if how == "other profile":
        fallback_now(profile_file, profile="/elsewhere/profile.toml")
    else:
        fallback_now(profile_file, primary="other")
    assert Resolver(load_profile(profile_file)).tool_settings("claude_code").channel == "local"


def test_profile_edit_during_fallback_uses_the_edited_tables(profile_file: Path) -> None:
    fallback_now(profile_file)
    profile_file.write_text(PROFILE.replace('model = "claude-sonnet-4-20250514"', 'model = "claude-opus-4"')
                            .replace('model = "qwen"\n', 'model = "qwen-2"\n'))
    r = Resolver(load_profile(profile_file))
    assert r.tool_settings("claude_code").model == "claude-opus-4"  # the edited fallback route
    assert r.tool_settings("codex").model == "qwen-2"  # the edited primary route
    profile_file.write_text(PROFILE.replace('channel = "local"\nmodel', 'channel = "other"\nmodel'))
    assert Resolver(load_profile(profile_file)).tool_settings("claude_code").channel == "other"  # `use` wins


def test_fallback_channel_without_the_tools_protocol_keeps_it(profile_file: Path) -> None:
    profile_file.write_text(PROFILE.replace('channel = "hosted"\nmodel = "claude-sonnet', 'channel = "oai"\nmodel = "claude-sonnet'))
    fallback_now(profile_file)
    r = Resolver(load_profile(profile_file))
    assert r.tool_settings("claude_code").channel == "local"  # "oai" speaks no anthropic


@pytest.mark.parametrize("bad", [b"", b"{not json", b'{"version": 1}', b"\xff\xfe", b"x" * 70000, b"[" * 60000])
def test_unreadable_file_keeps_the_last_good_decision(profile_file: Path, bad: bytes) -> None:
    d = fallback_now(profile_file)
    reader = RoutingReader()
    assert reader.read() == d
    routing_path().write_bytes(bad)
    assert reader.read() == d
    assert reader.problem and str(routing_path()) in reader.problem
    fresh = RoutingReader()  # a process that never read a good one: the agent's kept copy
    assert fresh.read() == d and fresh.problem and "stays in force" in fresh.problem
    kept_path(routing_path()).unlink()
    lost = RoutingReader()
    assert lost.read() is None and lost.problem and "tools use the primary" in lost.problem
    os.unlink(routing_path())
    assert reader.read() is None and reader.problem is None


def test_a_one_shot_sync_keeps_the_fallback_when_the_file_is_damaged(profile_file: Path, temp_home: Path) -> None:
    """A fresh `conduit sync` process (no memory of earlier reads) finds the file empty: tools stay routed."""
    fallback_now(profile_file)
    env = env_for_subprocess(temp_home)
    r = subprocess.run([sys.executable, "-m", "conduit.daemon.cli", "sync"], env=env, capture_output=True,
                       text=True, timeout=120)
    settings = temp_home / ".claude" / "settings.json"
    assert r.returncode == 0 and "claude-sonnet-4-20250514" in settings.read_text(), r.stderr
    assert "routing fallback since" in r.stdout and "claude_code" in r.stdout, r.stdout  # said, not only done
    assert "use channel `hosted`, model `claude-sonnet-4-20250514` instead of `local`" in r.stdout, r.stdout
    routing_path().write_bytes(b"")  # damaged (an editor, a full disk)
    r = subprocess.run([sys.executable, "-m", "conduit.daemon.cli", "sync"], env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert "claude-sonnet-4-20250514" in settings.read_text() and "9100" in settings.read_text()


def test_written_file_is_the_documented_shape(profile_file: Path) -> None:
    fallback_now(profile_file)
    st = routing_path().stat()
    assert st.st_mode & 0o777 == 0o600
    doc = json.loads(routing_path().read_text())
    assert set(doc) == {"version", "active", "since", "why", "profile", "primary", "fallback", "after_s"}
    assert doc["fallback"] == {"channel": "hosted", "model": "claude-sonnet-4-20250514",
                               "small_model": "claude-3-5-haiku-20241022"}
    assert read_routing() is not None


def test_sync_renders_the_fallback_and_back(profile_file: Path, temp_home: Path) -> None:
    """The one-shot sync honours the current routing file; going back rewrites the primary."""
    (temp_home / ".codex").mkdir()
    loaded = load_profile(profile_file)
    sync(loaded, env=Env())
    settings = temp_home / ".claude" / "settings.json"
    before = settings.read_text()
    assert "8000" in before and "claude-sonnet-4-20250514" not in before
    fallback_now(profile_file)
    sync(load_profile(profile_file), env=Env())
    during = settings.read_text()
    assert "9100" in during and "claude-sonnet-4-20250514" in during
    codex = (temp_home / ".codex" / "config.toml").read_text()
    assert "9100" not in codex and "qwen" in codex
    os.unlink(routing_path())
    sync(load_profile(profile_file), env=Env())
    assert settings.read_text() == before


@pytest.mark.parametrize("writer_via_link", [True, False])
def test_symlinked_profile_path_agrees(profile_file: Path, temp_home: Path, writer_via_link: bool) -> None:
    """An agent and a daemon that reach the profile by different paths (a symlink, CONDUIT_PROFILE at the
    target) agree on the decision: both sides tie it to the real path."""
    link = temp_home / "dotfiles-profile.toml"
    link.symlink_to(profile_file)
    writer, reader = (link, profile_file) if writer_via_link else (profile_file, link)
    fallback_now(profile_file, profile=profile_key(str(writer)))
    assert Resolver(load_profile(reader)).tool_settings("claude_code").channel == "hosted"


@pytest.mark.parametrize(("bad", "says"), [(b"{not json", "not a routing decision"), (b"x" * 70000, "routing file")])
def test_daemon_logs_an_unreadable_routing_file_once(profile_file: Path, caplog: pytest.LogCaptureFixture,
                                                     bad: bytes, says: str) -> None:
    caplog.set_level(logging.WARNING, logger="conduit.daemon")
    daemon = SyncDaemon(DaemonOptions(profile=str(profile_file)))
    daemon._reload_and_sync(trigger="start", force=True)
    fallback_now(profile_file)
    daemon._handle({routing_path()})
    routing_path().write_bytes(bad)
    for _ in range(3):  # the same problem, seen again: logged once
        daemon._handle({routing_path()})
    routing_path().write_bytes(b"[]")  # another problem: logged once more
    daemon._handle({routing_path()})
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("routing: ")
             and "last good decision" in r.getMessage()]
    assert len(lines) == 2 and says in lines[0] and "not a routing decision" in lines[1], lines
    assert str(routing_path()) in lines[0]


def test_doctor_warns_about_an_unreadable_routing_file(profile_file: Path) -> None:
    routing_path().parent.mkdir(parents=True, exist_ok=True)
    routing_path().write_bytes(b"{not json")
    warnings = [w for w in doctor(profile_file)["warnings"] if w.startswith("routing: ")]
    assert len(warnings) == 1 and "not a routing decision" in warnings[0], warnings
    os.unlink(routing_path())
    assert not [w for w in doctor(profile_file)["warnings"] if w.startswith("routing: ")]


@pytest.mark.parametrize(("model", "small", "words"), [
    ('"claude-sonnet-4 "', None, None),  # trimmed, as the profile's own `model`
    ('"claude-sonnet-4\\u200b"', None, "U+200B"),
    ('"claude sonnet"', None, "position 6"),
    ('"claude-sonnet-4"', '""', "cannot be empty"),
])
def test_fallback_model_ids_are_checked_like_the_profiles(profile_file: Path, model: str, small: str | None,
                                                          words: str | None) -> None:
    text = PROFILE.replace('model = "claude-sonnet-4-20250514"', f"model = {model}", 1)
    if small is not None:
        text = text.replace('small_model = "claude-3-5-haiku-20241022"', f"small_model = {small}", 1)
    profile_file.write_text(text)
    if words is None:
        fallback = load_profile(profile_file).model.fallback
        assert fallback is not None and fallback.model == "claude-sonnet-4"
        return
    with pytest.raises(ConduitError) as e:
        load_profile(profile_file)
    assert "fallback." in e.value.message and words in e.value.message, e.value.message


def test_doctor_says_a_fallback_key_that_cannot_be_used_before_any_outage(profile_file: Path) -> None:
    text = PROFILE.replace('base_url = "http://127.0.0.1:9100/api"\n',
                           'base_url = "http://127.0.0.1:9100/api"\nkey = { env = "CONDUIT_TEST_NO_SUCH_KEY" }\n', 1)
    profile_file.write_text(text)
    rep = doctor(profile_file)
    got = [w for w in rep["warnings"] if w.startswith("fallback: ")]
    assert len(got) == 1 and "channel `hosted` cannot be used" in got[0] and "CONDUIT_TEST_NO_SUCH_KEY" in got[0]
    assert rep["ok"] is False
    profile_file.write_text(PROFILE)
    assert not [w for w in doctor(profile_file)["warnings"] if w.startswith("fallback: ")]
