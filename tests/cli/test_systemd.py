"""systemd user units: `systemd-analyze verify` on the shipped and the installed units, READY=1 on a real
NOTIFY_SOCKET, and `conduit service install`."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.daemonproc import Daemon, read_state
from helpers.paths import REPO
from helpers.toolfiles import claude_settings, write_profile

from conduit.daemon.cli.daemon import UNITS, install_units, render_unit
from conduit.sdnotify import sd_notify

ANALYZE = shutil.which("systemd-analyze")
needs_analyze = pytest.mark.skipif(ANALYZE is None, reason="systemd-analyze is not installed on this machine, so the "
                                   "unit files cannot be verified here")


def verify(unit: Path) -> subprocess.CompletedProcess[str]:
    assert ANALYZE is not None
    # Without --user: no user manager runs on a test machine. The unit is checked from its own directory.
    return subprocess.run([ANALYZE, "verify", unit.name], cwd=unit.parent, capture_output=True, text=True,
                          timeout=120)


@needs_analyze
@pytest.mark.parametrize("name", UNITS)
def test_shipped_units_verify(name: str) -> None:
    r = verify(REPO / "systemd" / name)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stderr.strip() == "", r.stderr


@needs_analyze
def test_installed_units_verify_and_point_at_this_conduit(temp_home: Path) -> None:
    res = install_units()
    assert [p.name for p in res.written] == list(UNITS)
    assert all(p.parent == temp_home / ".config" / "systemd" / "user" for p in res.written)
    assert (temp_home / ".local" / "state" / "conduit").is_dir()
    for p in res.written:
        text = p.read_text()
        assert "ExecStart=/usr/bin/env conduit" not in text
        exe = next(line for line in text.splitlines() if line.startswith("ExecStart=")).split("=", 1)[1].split()[0]
        assert os.access(exe, os.X_OK), exe
        r = verify(p)
        assert r.returncode == 0, r.stdout + r.stderr
    assert res.commands[-1] == ["systemctl", "--user", "enable", "--now", "conduit-sync.service"]
    assert not res.ran


def test_unit_content_is_notify_restart_and_hardened() -> None:
    text = render_unit("conduit-sync.service", "/opt/conduit/bin/conduit")
    for line in ("Type=notify", "Restart=on-failure", "ExecStart=/opt/conduit/bin/conduit daemon",
                 "NoNewPrivileges=yes", "ProtectSystem=strict", "StandardError=journal",
                 "WatchdogSec=60s"):  # the loop pings WATCHDOG=1 while it progresses (test_daemon_faults.py)
        assert line in text.splitlines(), line
    rw = next(line for line in text.splitlines() if line.startswith("ReadWritePaths="))
    # Every tool's files live under HOME (Aider's directly in it), so HOME stays writable; the system does not.
    assert rw.split("=", 1)[1].split() == ["%h"]


def test_ready_reaches_the_notify_socket_after_the_first_sync(temp_home: Path, tmp_path: Path) -> None:
    claude_settings(temp_home)
    write_profile(temp_home, tools=("claude_code",))
    d = Daemon(temp_home, tmp_path)
    try:
        d.start(wait_ready=False)
        assert d.notify is not None
        messages = d.notify.wait_for("READY=1")
        # READY=1 is sent after the first sync: the state file already records it
        assert read_state(temp_home)["last_sync"]["trigger"] == "start"
        ready = next(m for m in messages if "READY=1" in m.splitlines())
        assert "STATUS=synced claude_code changed" in ready
        assert d.proc is not None
        d.proc.send_signal(signal.SIGTERM)
        d.notify.wait_for("STOPPING=1")
    finally:
        assert d.stop() == 0


def test_agent_sends_ready_to_the_notify_socket(temp_home: Path) -> None:
    """conduit-agent.service is Type=notify too: without READY=1 systemd would restart it in a loop."""
    from helpers.agentproc import AgentProc, short_dir

    d = short_dir()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    listener.bind(str(d / "notify"))
    listener.settimeout(30)
    try:
        with AgentProc(temp_home, env={"NOTIFY_SOCKET": str(d / "notify")}) as agent:
            assert listener.recv(100) == b"READY=1"
            assert agent.proc is not None
            agent.proc.send_signal(signal.SIGTERM)
            assert listener.recv(100) == b"STOPPING=1"
    finally:
        listener.close()
        import shutil

        shutil.rmtree(d, ignore_errors=True)


def test_agent_refuses_a_runtime_directory_it_does_not_own(temp_home: Path) -> None:
    from helpers.agentproc import conduit_exe, short_dir

    d = short_dir()
    try:
        run = d / "run"
        run.mkdir(mode=0o777)
        os.chown(run, 65534, 65534)
        victim = d / "victim.txt"
        victim.write_text("precious\n")
        r = subprocess.run([conduit_exe(), "agent", "--socket", str(run / "agent.sock")], capture_output=True,
                           text=True, timeout=30, env=dict(os.environ, HOME=str(temp_home)))
        assert r.returncode == 1 and "not a directory owned by you" in r.stderr, r.stderr
        assert victim.read_text() == "precious\n"
    finally:
        import shutil

        shutil.rmtree(d, ignore_errors=True)


def test_sd_notify_abstract_socket_and_unset() -> None:
    name = f"conduit-test-{os.getpid()}"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind("\0" + name)
    s.settimeout(10)
    try:
        assert sd_notify("READY=1", {"NOTIFY_SOCKET": "@" + name})
        assert s.recv(100) == b"READY=1"
    finally:
        s.close()
    assert sd_notify("READY=1", {}) is False
    assert sd_notify("READY=1", {"NOTIFY_SOCKET": "/nonexistent/socket"}) is False


def test_service_install_cli_warns_about_env_keys(temp_home: Path) -> None:
    write_profile(temp_home, key_text=None, tools=("claude_code",),
                  extra="").write_text((temp_home / ".config/conduit/profile.toml").read_text().replace(
                      'auth = "bearer"', 'key = { env = "GW_KEY" }\nauth = "bearer"'))
    r = subprocess.run([sys.executable, "-m", "conduit.daemon.cli", "service", "install"], capture_output=True,
                       text=True, env=dict(os.environ, HOME=str(temp_home)), timeout=60)
    assert r.returncode == 0, r.stderr
    assert "wrote" in r.stdout and "systemctl --user enable --now conduit-sync.service" in r.stdout
    assert "systemctl --user enable --now conduit-agent.service" in r.stdout  # the agent's unit is named too
    assert "GW_KEY" in r.stderr and "does not see" in r.stderr
    assert (temp_home / ".config" / "systemd" / "user" / "conduit-sync.service").exists()


def test_a_notify_socket_nobody_reads_never_stalls_the_daemon(temp_home: Path, tmp_path: Path) -> None:
    """A datagram queue holds ~10 messages; the daemon sends STATUS= after every batch and must not block."""
    import re

    from helpers.daemonproc import all_at, set_model
    from helpers.toolfiles import cc_switch_db, cline_gen_c

    cline_gen_c(temp_home)
    cc_switch_db(temp_home)
    claude_settings(temp_home)
    profile = write_profile(temp_home)
    d = Daemon(temp_home, tmp_path)
    try:
        d.start()  # reads up to READY=1, then never again
        for i in range(25):
            set_model(profile, f"undrained-{i}", "atomic")
            from helpers.daemonproc import wait_for

            wait_for(all_at(temp_home, f"undrained-{i}"), what=f"save {i} with an undrained notify socket")
        # the log line follows the write it reports: wait for it rather than read the log at once
        from helpers.daemonproc import wait_for

        wait_for(lambda: len(re.findall("sync claude_code: changed", d.log())) >= 26,
                 what="26 logged syncs (start + 25 saves)")
    finally:
        assert d.stop() == 0
