"""`key = { keyring = "NAME" }` against a real Secret Service (a private D-Bus session bus and an unlocked
gnome-keyring, tests/helpers/secretservice.py): key set --keyring, sync, rotate, migrate and rm through the
real CLI; with the keyring daemon killed or frozen, every command ends with a clear error and writes nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import gateways, secretservice
from helpers.daemonproc import Daemon, keys, wait_for
from helpers.secretservice import SecretService
from helpers.toolfiles import cc_switch_db, claude_settings, cline_gen_c, write_profile

from conduit.daemon.verify.gateway import Answer, Recorded

OLD = "sk-keyring-old-1111111111aaaa"
NEW = "sk-keyring-new-2222222222-longer-bbbb"


@pytest.fixture
def ss(temp_home: Path, tmp_path: Path) -> Iterator[SecretService]:
    secretservice.require()
    service = SecretService.start(temp_home, tmp_path)
    yield service
    service.close()


@pytest.fixture
def gateway() -> Iterator[gateways.Gateway]:
    def check(rec: Recorded) -> Answer:
        ok = rec.headers.get("authorization", "") == f"Bearer {NEW}"
        return Answer(200, {"object": "list", "data": [{"id": "m"}]}) if ok else Answer(401, {"error": "bad"})

    gw = gateways.Gateway(respond=check)
    yield gw
    gw.close()


def conduit(ss: SecretService, *args: str, stdin: str = "", **env: str) -> subprocess.CompletedProcess[str]:
    full = ss.child_env(NO_COLOR="1", COLUMNS="200", **env)
    full.pop("NOTIFY_SOCKET", None)
    return subprocess.run([sys.executable, "-m", "conduit.daemon.cli", *args], input=stdin, capture_output=True,
                          text=True, env=full, timeout=120)


def setup_home(home: Path, url: str, source: str = 'key = { keyring = "gw" }') -> Path:
    claude_settings(home)
    cline_gen_c(home)
    cc_switch_db(home)
    profile = write_profile(home, url + "/api", key_text=None, key_delivery="copy")  # copies a rotation reaches
    profile.write_text(profile.read_text().replace('auth = "bearer"', f'{source}\nauth = "bearer"'))
    return profile


def snapshot(home: Path) -> dict[str, bytes]:
    """Every file under ``home`` except the keyring's own and the state file (a failed sync records its error
    there), by path: what "nothing written" compares."""
    return {str(p.relative_to(home)): p.read_bytes() for p in sorted(home.rglob("*"))
            if p.is_file() and ".local/share/keyrings" not in str(p) and not p.name.endswith(".lock")
            and p.name != "sync.json"}


def holding(root: Path, needle: str) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")
                  if p.is_file() and needle.encode() in p.read_bytes())


def test_set_sync_rotate_rm_through_the_keychain(temp_home: Path, ss: SecretService,
                                                  gateway: gateways.Gateway) -> None:
    setup_home(temp_home, gateway.url)
    r = conduit(ss, "key", "set", "gw", "--keyring", stdin=OLD + "\n")
    assert r.returncode == 0, r.stderr
    assert "stored key `gw` (sk-...aaaa) in the keychain" in r.stdout
    r = conduit(ss, "sync")
    assert r.returncode == 0, r.stdout + r.stderr
    assert keys(temp_home) == (OLD, OLD, OLD)
    # the key rests in the keychain (encrypted) and in the files of the tools that take a copy: nowhere else
    assert holding(temp_home, OLD) == [".cc-switch/cc-switch.db", ".claude/settings.json",
                                       ".cline/data/settings/providers.json"]  # tools that take a copy only
    r = conduit(ss, "key", "rotate", "gw", stdin=NEW + "\n")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "keyring entry `gw`" in r.stdout
    assert keys(temp_home) == (NEW, NEW, NEW)
    assert holding(temp_home, OLD) == []  # backups too
    r = conduit(ss, "key", "rm", "gw", "--keyring")
    assert r.returncode == 0, r.stderr
    r = conduit(ss, "sync")
    assert r.returncode != 0
    assert "keyring entry `gw` does not exist in the keychain" in r.stdout + r.stderr
    for out in (r.stdout, r.stderr):
        assert NEW not in out and OLD not in out


def test_migrate_moves_the_secret_repoints_the_profile_and_scrubs_backups(
        temp_home: Path, ss: SecretService, gateway: gateways.Gateway) -> None:
    profile = setup_home(temp_home, gateway.url, 'key = { secret = "gw" }  # moved by migrate')
    profile.write_text(profile.read_text() + '\n[mcp.servers.web]\nurl = "http://127.0.0.1:9/mcp"\n'
                       'bearer_token = { secret = "gw" }\n')  # a second reader of the same secret
    assert conduit(ss, "key", "set", "gw", stdin=OLD).returncode == 0
    assert conduit(ss, "sync").returncode == 0
    profile.write_text(profile.read_text().replace("claude-sonnet-4-20250514", "m2"))
    assert conduit(ss, "sync").returncode == 0
    backups = temp_home / ".local" / "state" / "conduit" / "backups"
    assert holding(backups, OLD)  # the second sync backed up files holding the key
    r = conduit(ss, "key", "migrate", "gw", "--to", "keyring")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "now reading the keychain: channels.gw.key, mcp.servers.web.bearer_token" in r.stdout
    assert 'key = { keyring = "gw" }' in profile.read_text()
    assert 'bearer_token = { keyring = "gw" }' in profile.read_text() and "secret" not in profile.read_text()
    assert "# moved by migrate" in profile.read_text()  # the rest of the line kept
    assert holding(backups, OLD) == []
    assert OLD not in (temp_home / ".config" / "conduit" / "secrets.toml").read_text()
    r = conduit(ss, "sync")
    assert r.returncode == 0, r.stdout + r.stderr
    assert keys(temp_home) == (OLD, OLD, OLD)
    r = conduit(ss, "key", "migrate", "gw", "--to", "keyring")
    assert r.returncode != 0 and "there is no key `gw`" in r.stderr


@pytest.mark.parametrize("how", ["killed", "frozen"])
def test_a_stopped_keyring_ends_every_command_with_a_clear_error_and_writes_nothing(
        temp_home: Path, ss: SecretService, gateway: gateways.Gateway, how: str) -> None:
    profile = setup_home(temp_home, gateway.url)
    assert conduit(ss, "key", "set", "gw", "--keyring", stdin=OLD).returncode == 0
    assert conduit(ss, "sync").returncode == 0
    text = profile.read_text()
    profile.write_text(text.replace('key = { keyring = "gw" }', 'key = { secret = "gw" }'))
    assert conduit(ss, "key", "set", "gw", stdin=OLD).returncode == 0  # for migrate
    profile.write_text(text)
    if how == "killed":
        ss.stop_keyring()
        said = "no Secret Service answers on the D-Bus session bus"
    else:
        ss.freeze_keyring()
        said = "the keyring did not answer within 2 s"
    before = snapshot(temp_home)
    commands: list[tuple[tuple[str, ...], str]] = [
        (("key", "set", "gw", "--keyring"), NEW), (("sync",), ""), (("key", "rotate", "gw"), NEW),
        (("key", "migrate", "gw", "--to", "keyring"), ""), (("key", "rm", "gw", "--keyring"), "")]
    for args, stdin in commands:
        r = conduit(ss, *args, stdin=stdin, CONDUIT_KEYRING_TIMEOUT_S="2")
        out = r.stdout + r.stderr
        assert r.returncode != 0, (args, out)
        assert said in out, (args, out)
        assert "secret =" in out, (args, out)  # the fallback is named
        assert OLD not in out and NEW not in out
        assert snapshot(temp_home) == before, args
    assert not [p for p in Path("/proc").glob("[0-9]*") if _is_child_left(p, temp_home)]


def _is_child_left(proc: Path, home: Path) -> bool:
    """A keyring child of a conduit run of this test still running (it must have been killed with its group)."""
    try:
        return b"get_keyring" in (proc / "cmdline").read_bytes() and \
            f"HOME={home}".encode() in (proc / "environ").read_bytes().split(b"\0")
    except OSError:
        return False


def test_no_bus_at_all_names_what_is_missing(temp_home: Path) -> None:
    write_profile(temp_home, key_text=None)
    env = {k: v for k, v in os.environ.items() if k != "DBUS_SESSION_BUS_ADDRESS"}
    r = subprocess.run([sys.executable, "-m", "conduit.daemon.cli", "key", "set", "gw", "--keyring"], input=OLD,
                       capture_output=True, text=True, env=dict(env, HOME=str(temp_home),
                                                                XDG_RUNTIME_DIR=str(temp_home)), timeout=60)
    assert r.returncode != 0
    assert "no D-Bus session bus" in r.stderr
    assert 'key = { secret = "NAME" }' in r.stderr
    assert OLD not in r.stdout + r.stderr


def test_the_key_is_in_no_argv_while_a_keyring_call_hangs(temp_home: Path, ss: SecretService) -> None:
    """Canary: with the keyring frozen, `key set --keyring` waits in its child; meanwhile no process of this HOME
    has the key in its command line or its environment (the key goes to the child on stdin)."""
    write_profile(temp_home, key_text=None)
    ss.freeze_keyring()
    env = ss.child_env(CONDUIT_KEYRING_TIMEOUT_S="8")
    proc = subprocess.Popen([sys.executable, "-m", "conduit.daemon.cli", "key", "set", "gw", "--keyring"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    assert proc.stdin is not None
    proc.stdin.write(NEW.encode())
    proc.stdin.close()
    seen: list[bytes] = []
    while proc.poll() is None and not any(b"get_keyring" in c for c in seen):
        seen = []
        for p in Path("/proc").glob("[0-9]*"):
            try:
                if f"HOME={temp_home}".encode() in (p / "environ").read_bytes().split(b"\0"):
                    seen.append((p / "cmdline").read_bytes() + b"\0" + (p / "environ").read_bytes())
            except OSError:
                continue
    proc.wait(timeout=60)
    assert proc.stdout is not None and proc.stderr is not None
    out, err = proc.stdout.read(), proc.stderr.read()
    proc.stdout.close()
    proc.stderr.close()
    assert any(b"get_keyring" in c for c in seen), "the keyring child was never seen"
    assert not [c for c in seen if NEW.encode() in c]
    assert proc.returncode != 0 and NEW.encode() not in out + err


def test_rotate_a_keyring_key_with_a_running_daemon(temp_home: Path, tmp_path: Path, ss: SecretService,
                                                     gateway: gateways.Gateway) -> None:
    """No file changes for the daemon to notice: rotation sends it SIGHUP and waits for the new fingerprint."""
    setup_home(temp_home, gateway.url)
    assert conduit(ss, "key", "set", "gw", "--keyring", stdin=OLD).returncode == 0
    daemon = Daemon(temp_home, tmp_path, env=dict(ss.env)).start()
    try:
        wait_for(lambda: keys(temp_home) == (OLD, OLD, OLD))
        r = conduit(ss, "key", "rotate", "gw", stdin=NEW)
        assert r.returncode == 0, r.stdout + r.stderr
        assert f"the running daemon (pid {daemon.proc.pid}) propagated it" in r.stdout  # type: ignore[union-attr]
        assert keys(temp_home) == (NEW, NEW, NEW)
    finally:
        daemon.stop()
    assert OLD not in daemon.log() and NEW not in daemon.log()
    assert holding(temp_home, OLD) == []
