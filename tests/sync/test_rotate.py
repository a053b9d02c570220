"""`conduit key rotate CHANNEL`: a real gateway stand-in on 127.0.0.1, a real daemon (or none), real files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import gateways
from helpers.daemonproc import Daemon, keys, read_state, wait_for
from helpers.toolfiles import cc_switch_db, claude_settings, cline_gen_c, write_profile

from conduit.daemon.verify.gateway import Answer, Recorded

OLD = "sk-old-rotate-1111111111aaaa"
NEW = "sk-new-rotate-2222222222-much-longer-than-before-bbbb"


class Gateway(gateways.Gateway):
    """``GET /api/v1/models`` answers 200 for ``Bearer <accepted>``, 401 otherwise; ``seen`` is each request's
    "path authorization"; ``url`` ends in ``/api``."""

    def __init__(self, accepted: set[str]) -> None:
        self.accepted = accepted
        super().__init__(respond=self._check)

    def _check(self, rec: Recorded) -> Answer:
        ok = rec.path == "/api/v1/models" and rec.headers.get("authorization", "").removeprefix("Bearer ") in self.accepted
        return Answer(200, {"object": "list", "data": [{"id": "m"}]}) if ok else Answer(401, {"error": "bad key"})

    @property
    def url(self) -> str:
        return self.root + "/api"

    @property
    def seen(self) -> list[str]:
        return [f"{r.path} {r.headers.get('authorization', '')}" for r in self.recorded()]


@pytest.fixture
def gateway() -> Iterator[Gateway]:
    gw = Gateway({NEW})
    yield gw
    gw.close()


def _setup(home: Path, gateway: Gateway, extra: str = "") -> Path:
    claude_settings(home)
    cline_gen_c(home)
    cc_switch_db(home)
    # copies, so that a rotation has files to reach (a reference: tests/sync/test_key_at_rest.py)
    return write_profile(home, gateway.url, key_text=OLD + "\n", extra=extra, key_delivery="copy")


def rotate(home: Path, *args: str, stdin: str = NEW + "\n") -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, HOME=str(home), NO_COLOR="1", COLUMNS="200")
    env.pop("NOTIFY_SOCKET", None)
    return subprocess.run([sys.executable, "-m", "conduit.daemon.cli", "key", "rotate", *args], input=stdin,
                          capture_output=True, text=True, env=env, timeout=120)


def grep_tree(root: Path, needle: str) -> list[Path]:
    """Every file under ``root`` whose bytes contain ``needle`` (backups, logs, state and databases included)."""
    hits = []
    for p in root.rglob("*"):
        if p.is_file() and not p.is_symlink():
            try:
                if needle.encode() in p.read_bytes():
                    hits.append(p)
            except OSError:
                pass
    return hits


def test_rotate_with_running_daemon_updates_all_three_tools_and_leaves_no_old_key(
        temp_home: Path, tmp_path: Path, gateway: Gateway) -> None:
    _setup(temp_home, gateway)
    daemon = Daemon(temp_home, tmp_path).start()
    try:
        assert keys(temp_home) == (OLD, OLD, OLD)
        # a second sync that changes something, so backups holding the old key exist before the rotation
        profile = temp_home / ".config" / "conduit" / "profile.toml"
        profile.write_text(profile.read_text().replace("claude-sonnet-4-20250514", "m2"))
        wait_for(lambda: read_state(temp_home)["tools"]["claude_code"].get("status") == "changed"
                 and json.loads((temp_home / ".claude" / "settings.json").read_text())["env"]["ANTHROPIC_MODEL"] == "m2")
        assert grep_tree(temp_home / ".local" / "state" / "conduit" / "backups", OLD)  # backups did hold it
        r = rotate(temp_home, "gw")
        assert r.returncode == 0, r.stdout + r.stderr
        assert keys(temp_home) == (NEW, NEW, NEW)
        assert f"pid {daemon.proc.pid}" in r.stdout  # type: ignore[union-attr]
        assert "sk-...bbbb" in r.stdout
        assert gateway.seen == [f"/api/v1/models Bearer {NEW}"]
        state = read_state(temp_home)
        assert state["channels"]["gw"]["key_fingerprint"] == "sk-...bbbb"
    finally:
        daemon.stop()
    for text in (r.stdout, r.stderr, daemon.log()):
        assert OLD not in text and NEW not in text
    (tmp_path / "rotate.out").write_text(r.stdout + r.stderr)
    assert grep_tree(temp_home, OLD) == []
    assert grep_tree(tmp_path, OLD) == []  # the daemon's log and the rotate output too
    assert (temp_home / ".config" / "conduit" / "keys" / "gw").read_text() == NEW + "\n"
    assert (temp_home / ".config" / "conduit" / "keys" / "gw").stat().st_mode & 0o777 == 0o600


def test_rotate_without_daemon_syncs_directly_into_the_secrets_file(temp_home: Path, gateway: Gateway) -> None:
    profile = _setup(temp_home, gateway)
    text = profile.read_text().replace('key = { file = "~/.config/conduit/keys/gw" }', 'key = { secret = "gw" }')
    profile.write_text(text)
    (temp_home / ".config" / "conduit" / "keys" / "gw").unlink()  # this channel keeps its key in secrets.toml
    r = subprocess.run([sys.executable, "-m", "conduit.daemon.cli", "key", "set", "gw"], input=OLD, text=True,
                       capture_output=True, env=dict(os.environ, HOME=str(temp_home)), timeout=60)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([sys.executable, "-m", "conduit.daemon.cli", "sync"], text=True, capture_output=True,
                       env=dict(os.environ, HOME=str(temp_home)), timeout=60)
    assert r.returncode == 0, r.stderr
    assert keys(temp_home) == (OLD, OLD, OLD)
    r = rotate(temp_home, "gw")
    assert r.returncode == 0, r.stdout + r.stderr
    assert keys(temp_home) == (NEW, NEW, NEW)
    assert "Claude Code: changed" in r.stdout and "CC Switch: changed" in r.stdout
    assert OLD not in r.stdout + r.stderr and NEW not in r.stdout + r.stderr
    assert grep_tree(temp_home, OLD) == []
    assert NEW in (temp_home / ".config" / "conduit" / "secrets.toml").read_text()


def test_rejected_key_is_refused_and_nothing_changes(temp_home: Path, gateway: Gateway) -> None:
    _setup(temp_home, gateway)
    keyfile = temp_home / ".config" / "conduit" / "keys" / "gw"
    r = rotate(temp_home, "gw", stdin="sk-wrong-key-33333333cccc\n")
    assert r.returncode == 1
    assert "rejected the key" in r.stderr and "401" in r.stderr and "--force" in r.stderr
    assert "sk-wrong-key-33333333cccc" not in r.stdout + r.stderr
    assert keyfile.read_text() == OLD + "\n"
    r = rotate(temp_home, "gw", "--force", stdin="sk-wrong-key-33333333cccc\n")
    assert r.returncode == 0, r.stderr
    assert keyfile.read_text() == "sk-wrong-key-33333333cccc\n"
    assert keys(temp_home)[0] == "sk-wrong-key-33333333cccc"


def test_unreachable_gateway_refuses_unless_forced(temp_home: Path, gateway: Gateway) -> None:
    claude_settings(temp_home)
    write_profile(temp_home, "http://127.0.0.1:9/api", key_text=OLD + "\n", tools=("claude_code",), key_delivery="copy")
    r = rotate(temp_home, "gw")
    assert r.returncode == 1 and "could not reach" in r.stderr, r.stderr
    assert "(nothing listens on that port)" in r.stderr and "check the channel's base_url and your network" \
        in r.stderr and "ConnectError" not in r.stderr, r.stderr
    r = rotate(temp_home, "gw", "--force")
    assert r.returncode == 0, r.stderr
    assert keys_claude(temp_home) == NEW


def keys_claude(home: Path) -> str:
    return json.loads((home / ".claude" / "settings.json").read_text())["env"]["ANTHROPIC_AUTH_TOKEN"]


def test_env_and_command_sources_are_refused_with_a_hint(temp_home: Path, gateway: Gateway) -> None:
    profile = _setup(temp_home, gateway)
    base = profile.read_text()
    profile.write_text(base.replace('key = { file = "~/.config/conduit/keys/gw" }', 'key = { env = "GW_KEY" }'))
    r = rotate(temp_home, "gw")
    assert r.returncode == 1 and "environment variable GW_KEY" in r.stderr and "conduit key set" in r.stderr
    profile.write_text(base.replace('key = { file = "~/.config/conduit/keys/gw" }',
                                    'key = { command = "cat ~/.config/conduit/keys/gw" }'))
    r = rotate(temp_home, "gw")
    assert r.returncode == 1 and "command" in r.stderr and "password manager" in r.stderr
    assert gateway.seen == []  # refused before the key was even checked
    assert NEW not in r.stdout + r.stderr


def test_key_on_the_command_line_is_refused(temp_home: Path, gateway: Gateway) -> None:
    _setup(temp_home, gateway)
    r = rotate(temp_home, "gw", NEW, stdin="")
    assert r.returncode != 0
    assert NEW not in r.stdout + r.stderr
    assert (temp_home / ".config" / "conduit" / "keys" / "gw").read_text() == OLD + "\n"


def test_a_stale_save_bringing_back_the_old_key_leaves_it_in_no_backup(
        temp_home: Path, tmp_path: Path, gateway: Gateway) -> None:
    """After a rotation, a tool that saves its stale copy (the old key in it) is drift: the daemon writes the new
    key back, and the backup it takes of the stale file holds the old key's fingerprint, not the key."""
    profile = _setup(temp_home, gateway)
    profile.write_text(profile.read_text().replace("version = 1\n", 'version = 1\non_drift = "reapply"\n'))
    daemon = Daemon(temp_home, tmp_path).start()
    settings = temp_home / ".claude" / "settings.json"
    try:
        stale = settings.read_text()
        assert OLD in stale
        r = rotate(temp_home, "gw")
        assert r.returncode == 0, r.stdout + r.stderr
        assert keys(temp_home) == (NEW, NEW, NEW)
        tmp = settings.with_name(".settings.stale")
        tmp.write_text(stale)  # the tool's own save of what it read before the rotation
        os.replace(tmp, settings)
        wait_for(lambda: NEW in settings.read_text() and OLD not in settings.read_text())
    finally:
        daemon.stop()
    assert grep_tree(temp_home, OLD) == []
