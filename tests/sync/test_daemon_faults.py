"""`conduit daemon` under real faults: re-watching during an event storm, systemd's watchdog, a stalled
loop seen by doctor, a state directory it cannot write, temp files a killed daemon left, a canary key.

Real processes only: the daemon is ``python -m conduit.daemon.cli daemon`` under the test's HOME (daemonproc).
Every wait is bounded; the only time limit asserted is the one docs/cases.md C21 names (SIGTERM within 5 s).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.daemonproc import Daemon, claude_env, wait_for
from helpers.toolfiles import claude_settings, write_profile

from conduit.daemon.sync.syncd import STOP_WAIT_S

KEY = "sk-test-storm-0123456789abcdef"


def _profile_text(model: str, key_dir: str) -> str:
    return (f'version = 1\nchannel = "gw"\nmodel = "{model}"\n\n[channels.gw]\nbase_url = "https://gw.example.com/api"\n'
            f'protocols = ["openai", "anthropic"]\nkey = {{ file = "~/.config/conduit/keys/{key_dir}/gw" }}\n'
            f'auth = "bearer"\n\n[tools.claude_code]\n')


def _save(profile: Path, text: str) -> None:
    tmp = profile.with_name(".profile.toml.edit")
    tmp.write_text(text)
    os.replace(tmp, profile)


class Storm:
    """A thread writing, creating and removing files in the daemon's watched directories as fast as it can."""

    def __init__(self, dirs: list[Path]) -> None:
        self.dirs = dirs
        self.stop = threading.Event()
        self.events = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        n = 0
        while not self.stop.is_set():
            for d in self.dirs:
                p = d / f"storm-{n % 3}"
                try:
                    fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                    os.write(fd, b"x")
                    os.close(fd)
                    if n % 7 == 0:
                        os.unlink(p)
                except OSError:
                    pass
                self.events += 1
            n += 1
            if n % 8 == 0:
                time.sleep(0.0005)  # leave the daemon (two shared cores) some CPU

    def __enter__(self) -> Storm:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(10)


@pytest.fixture
def storm_home(temp_home: Path) -> Path:
    claude_settings(temp_home)
    keys = temp_home / ".config" / "conduit" / "keys"
    for d in ("a", "b"):
        (keys / d).mkdir(parents=True)
        (keys / d / "gw").write_text(KEY + "\n")
        (keys / d / "gw").chmod(0o600)
    profile = temp_home / ".config" / "conduit" / "profile.toml"
    profile.write_text(_profile_text("m-start", "a"))
    return profile


def test_rewatch_during_an_event_storm_never_hangs(storm_home: Path, temp_home: Path, tmp_path: Path) -> None:
    """Each save moves the key file to the other directory, so every full sync re-watches (unschedules one
    directory, schedules another) while watchdog's thread dispatches a storm of events from the same
    directories. 200 cycles, no hang, SIGTERM honoured within 5 s."""
    d = Daemon(temp_home, tmp_path)
    d.start()
    keys = temp_home / ".config" / "conduit" / "keys"
    dirs = [temp_home / ".claude", keys / "a", keys / "b", temp_home / ".config" / "conduit"]
    try:
        with Storm(dirs) as storm:
            for i in range(200):
                model = f"m-{i}"
                _save(storm_home, _profile_text(model, "b" if i % 2 == 0 else "a"))
                try:
                    wait_for(lambda m=model: claude_env(temp_home).get("ANTHROPIC_MODEL") == m,  # type: ignore[misc]
                             timeout=20, what=f"cycle {i}: the save applied")
                except AssertionError as exc:
                    raise AssertionError(f"{exc}: the daemon hung; its threads:\n{d.stacks()}") from None
                if i % 2 == 0:  # a SIGHUP full sync as well: the same re-watch, queued behind the storm
                    assert d.proc is not None
                    d.proc.send_signal(signal.SIGHUP)
        assert storm.events > 1000, storm.events
        assert d.proc is not None
        d.proc.send_signal(signal.SIGTERM)
        try:
            rc = d.proc.wait(5)
        except subprocess.TimeoutExpired:
            pytest.fail("SIGTERM not honoured within 5 s")
        assert rc == 0
        assert "Traceback" not in d.log()
    finally:
        d.stop()


# --------------------------------------------------------------------------- systemd's watchdog, a stalled loop

BLOCK_VAR = "CONDUIT_TEST_BLOCK_KEY"  # set in the daemon's environment only: doctor's own key read never blocks


@pytest.fixture
def blockable(temp_home: Path, tmp_path: Path) -> tuple[Path, Path, Path]:
    """A profile whose key command blocks while ``block`` exists (in a process that has ``BLOCK_VAR``), after
    creating ``started``: a sync loop stuck in a key read, as with a `pass`/`op` prompt nobody answers."""
    claude_settings(temp_home)
    block, started = tmp_path / "block", tmp_path / "started"
    command = (f'if [ -n "${BLOCK_VAR}" ] && [ -e {block} ]; then touch {started}; '
               f'while [ -e {block} ]; do sleep 0.05; done; fi; echo {KEY}')
    profile = write_profile(temp_home, key_text=None, tools=("claude_code",))
    profile.write_text(profile.read_text().replace('auth = "bearer"', f"key = {{ command = '{command}' }}\n"
                                                   'auth = "bearer"'))
    return profile, block, started


def _pings(d: Daemon, seconds: float) -> int:
    """WATCHDOG=1 datagrams received on the daemon's notify socket within ``seconds``."""
    assert d.notify is not None
    n, deadline = 0, time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        d.notify.sock.settimeout(left)
        try:
            n += "WATCHDOG=1" in d.notify.sock.recv(4096).decode().splitlines()
        except TimeoutError:
            break
    return n


def _received(d: Daemon) -> list[str]:
    """The datagrams waiting on the daemon's notify socket (without waiting for more)."""
    assert d.notify is not None
    got: list[str] = []
    d.notify.sock.setblocking(False)
    try:
        while True:
            got.append(d.notify.sock.recv(4096).decode())
    except BlockingIOError:
        pass
    finally:
        d.notify.sock.setblocking(True)
    return got


def _drain(d: Daemon) -> None:
    _received(d)


def _block_the_loop(d: Daemon, block: Path, started: Path) -> None:
    block.touch()
    assert d.proc is not None
    d.proc.send_signal(signal.SIGHUP)  # a full sync: its key read now blocks
    wait_for(started.exists, what="the key command to start blocking")


def test_watchdog_pings_only_while_the_loop_makes_progress(blockable: tuple[Path, Path, Path], temp_home: Path,
                                                           tmp_path: Path) -> None:
    _, block, started = blockable
    d = Daemon(temp_home, tmp_path, env={"WATCHDOG_USEC": "400000", "WATCHDOG_PID": None, BLOCK_VAR: "1"})
    try:
        d.start()
        assert _pings(d, 1.5) >= 3  # idle: the loop wakes every 0.2 s and says it is alive
        _block_the_loop(d, block, started)
        _drain(d)  # anything sent before the loop got stuck
        assert _pings(d, 2.0) == 0  # stuck in a key read: no pings, systemd would restart it
        block.unlink()
        assert _pings(d, 2.0) >= 3  # progress again
        assert d.stop() == 0
    finally:
        block.unlink(missing_ok=True)
        d.stop()


def test_no_watchdog_no_wakeups(blockable: tuple[Path, Path, Path], temp_home: Path, tmp_path: Path) -> None:
    """Without WATCHDOG_USEC the idle loop never wakes up: no WATCHDOG=1, and no CPU time over 2 s."""
    d = Daemon(temp_home, tmp_path, env={"WATCHDOG_USEC": None})
    try:
        d.start()
        assert d.proc is not None
        time.sleep(0.5)  # let the start-up settle
        before = _cpu_ticks(d.proc.pid)
        assert _pings(d, 2.0) == 0
        assert _cpu_ticks(d.proc.pid) - before <= 2  # clock ticks (1/100 s): nothing ran
    finally:
        d.stop()


def _cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def test_doctor_says_the_daemon_is_alive_but_stalled(blockable: tuple[Path, Path, Path], temp_home: Path,
                                                      tmp_path: Path) -> None:
    from conduit.daemon.sync.doctor import doctor

    _, block, started = blockable
    d = Daemon(temp_home, tmp_path, env={"WATCHDOG_USEC": None, BLOCK_VAR: "1"})
    try:
        d.start()
        assert d.proc is not None
        rep = doctor(stall_after_s=1.0)
        assert rep["daemon"]["pid"] == d.proc.pid and rep["daemon"]["stalled_for_s"] is None  # idle is fine
        assert not any("alive but" in w for w in rep["warnings"])
        _block_the_loop(d, block, started)
        time.sleep(1.5)
        rep = doctor(stall_after_s=1.0)
        assert rep["ok"] is False and rep["daemon"]["stalled_for_s"] >= 1.0
        line = (f"sync daemon pid {d.proc.pid} is alive but its loop has not progressed for "
                f"{rep['daemon']['stalled_for_s']:.0f} s: restart it with systemctl --user restart conduit-sync")
        assert line in rep["warnings"]
        # the real CLI, with the bound lowered from 60 s to 1 s for the test
        code = ("import sys, conduit.daemon.sync.doctor as d; d.STALL_AFTER_S = 1.0; "
                "from conduit.daemon.cli.main import main; sys.exit(main(sys.argv[1:]))")
        env = dict(os.environ, HOME=str(temp_home))
        for args in (["doctor"], ["doctor", "--json"]):
            r = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env,
                               timeout=60)
            assert r.returncode == 1, r.stderr
            out = " ".join(r.stdout.split())
            assert f"sync daemon pid {d.proc.pid} is alive but its loop has not progressed for" in out, r.stdout
            if "--json" in args:
                assert json.loads(r.stdout)["daemon"]["stalled_for_s"] >= 1.0
        block.unlink()
        wait_for(lambda: doctor(stall_after_s=1.0)["daemon"]["stalled_for_s"] is None, what="the loop to move on")
    finally:
        block.unlink(missing_ok=True)
        d.stop()


# --------------------------------------------------------------------------- a full state directory, stale temps


@pytest.fixture
def tiny_fs(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs for the state directory (needs CAP_SYS_ADMIN, as root in the test container)."""
    mnt = tmp_path / "state"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=0700", "tmpfs", str(mnt)],
                       capture_output=True, text=True, timeout=30)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True, timeout=30)


def _fill(mnt: Path) -> None:
    with open(mnt / "filler", "wb") as fh:
        try:
            while True:
                fh.write(b"\0" * 65536)
                fh.flush()
        except OSError as exc:
            assert exc.errno == 28, exc  # ENOSPC: the file system is full


def test_a_full_state_directory_does_not_stop_the_daemon(tiny_fs: Path, temp_home: Path, tmp_path: Path) -> None:
    from conduit.daemon.sync.lock import running_daemon_pid

    claude_settings(temp_home)
    profile = write_profile(temp_home, tools=("claude_code",))
    env: dict[str, str | None] = {"XDG_STATE_HOME": str(tiny_fs)}
    # `conduit sync` ran here before (state file and backups exist, no daemon lock file yet); the disk fills up
    r = subprocess.run([sys.executable, "-m", "conduit.daemon.cli", "sync"], capture_output=True, text=True,
                       timeout=60, env=dict(os.environ, HOME=str(temp_home), XDG_STATE_HOME=str(tiny_fs)))
    assert r.returncode == 0, r.stderr
    assert (tiny_fs / "conduit" / "sync.json").exists()
    _fill(tiny_fs)
    (tmp_path / "second").mkdir()
    d = Daemon(temp_home, tmp_path / "second", env=env)
    try:
        d.start()  # READY=1: it started
        assert d.proc is not None and d.proc.poll() is None
        wait_for(lambda: "cannot write the state file" in d.log() and "No space left on device" in d.log(),
                 what="the state file error in the log")
        os.environ["XDG_STATE_HOME"] = str(tiny_fs)  # removed by the autouse fixture's monkeypatch afterwards
        try:
            assert running_daemon_pid() in (d.proc.pid, -1)  # running (its pid may not fit on the disk)
        finally:
            del os.environ["XDG_STATE_HOME"]
        from helpers.daemonproc import set_model

        # It keeps handling changes: a save is synced (the writer may refuse to change a tool's file whose
        # backup cannot be written to the full state directory: its error is logged, nothing is lost).
        set_model(profile, "while-disk-full", "atomic")
        wait_for(lambda: "sync claude_code:" in d.log().split("(start)", 1)[-1], what="the sync of the save")
        (tiny_fs / "filler").unlink()  # space again: the next save is applied and the state file written
        set_model(profile, "after-disk-full", "atomic")
        wait_for(lambda: claude_env(temp_home).get("ANTHROPIC_MODEL") == "after-disk-full",
                 what="the sync once the disk has space again")
        state = tiny_fs / "conduit" / "sync.json"
        wait_for(lambda: json.loads(state.read_text())["last_sync"] == {**json.loads(state.read_text())[
                 "last_sync"], "trigger": "profile", "ok": True}, what="the state file written again")
        assert "Traceback" not in d.log()
    finally:
        assert d.stop() == 0


def test_the_next_daemon_removes_the_temp_files_a_killed_one_left(temp_home: Path, tmp_path: Path) -> None:
    claude_settings(temp_home)
    write_profile(temp_home, tools=("claude_code",))
    state_dir = temp_home / ".local" / "state" / "conduit"
    state_dir.mkdir(parents=True)
    gone = subprocess.Popen(["true"])
    gone.wait(10)  # its pid is free now: the writer that left this file is dead
    stale = state_dir / f".sync.json.conduit-tmp-{gone.pid}-0badc0de"
    stale.write_text('{"half": ')
    live = state_dir / f".sync.json.conduit-tmp-{os.getpid()}-0123abcd"  # a live writer's: kept
    live.write_text("{}")
    d = Daemon(temp_home, tmp_path)
    try:
        d.start()
        assert not stale.exists()
        assert live.exists()
        assert "removed 1 temp file(s)" in d.log()
    finally:
        d.stop()


# --------------------------------------------------------------------------- one redaction: a canary key


def _wait_quiet(d: Daemon, quiet_s: float = 1.0, timeout_s: float = 30.0) -> None:
    """Wait until the daemon's log has not grown for ``quiet_s`` seconds (bounded by ``timeout_s``)."""
    deadline = time.monotonic() + timeout_s
    size, since = len(d.log()), time.monotonic()
    while time.monotonic() - since < quiet_s:
        if time.monotonic() > deadline:
            raise AssertionError("the daemon's log never went quiet")
        time.sleep(0.05)
        now = len(d.log())
        if now != size:
            size, since = now, time.monotonic()


CANARY = "sk-canary-7f3a9c2e5b1d4086aa"
CANARY2 = "sk-canary-rotated-0c9e8d7f6a5b"


def test_a_canary_key_reaches_no_log_line_and_not_the_state_file(temp_home: Path, tmp_path: Path) -> None:
    """The canary is the profile's key; a second channel's command fails after printing it to stderr and
    stdout; Cline's file cannot be parsed and holds it; the key rotates (diffs at DEBUG show old and new); a
    drift puts it back in Claude Code's file, next to a line of its own holding the canary. The daemon's log (-v), its state file and its notify messages hold
    neither the canary nor the rotated key."""
    from helpers.toolfiles import cline_gen_c

    settings = claude_settings(temp_home)
    doc = json.loads(settings.read_text())
    doc["env"]["TEAM_NOTE"] = f"shared key {CANARY}"  # not an owned key: a context line of every env diff
    settings.write_text(json.dumps(doc, indent=2) + "\n")
    cline_gen_c(temp_home)
    cline = temp_home / ".cline" / "data" / "settings" / "providers.json"
    cline.write_text('{"providers": {"openai-compatible": {"settings": {"apiKey": "' + CANARY + '"\n')  # torn
    profile = write_profile(temp_home, key_text=CANARY + "\n", tools=("claude_code", "cline"), key_delivery="copy")
    leaky = f"echo {CANARY}; echo {CANARY} >&2; echo 'token {CANARY} rejected' >&2; exit 3"
    profile.write_text(profile.read_text().replace(
        "[channels.gw]", f'[channels.aaa]\nbase_url = "https://aaa.example.com"\nprotocols = ["openai"]\n'
                         f"key = {{ command = \"{leaky}\" }}\n\n[channels.gw]"))
    d = Daemon(temp_home, tmp_path)
    try:
        d.start()
        assert claude_env(temp_home)["ANTHROPIC_AUTH_TOKEN"] == CANARY  # the tool file holds it: that is the job
        keyfile = temp_home / ".config" / "conduit" / "keys" / "gw"
        keyfile.write_text(CANARY2 + "\n")
        wait_for(lambda: claude_env(temp_home)["ANTHROPIC_AUTH_TOKEN"] == CANARY2, what="the rotated key")
        from helpers.daemonproc import read_state

        # the batch is over (state saved after it): a write now is another program's, not part of the sync
        wait_for(lambda: read_state(temp_home)["last_sync"]["trigger"] == "key", what="the key sync's end")
        # the key file's save was several events: the follow-up sync they coalesce into re-applies the key, so
        # wait until the daemon's log has been quiet for a second before another program writes
        _wait_quiet(d)
        settings = temp_home / ".claude" / "settings.json"
        settings.write_text(settings.read_text().replace(CANARY2, CANARY))  # drift: the old key is back

        try:
            wait_for(lambda: read_state(temp_home)["tools"]["claude_code"]["drift"], what="the drift recorded")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; daemon log:\n{d.log()[-3000:]}") from None
        assert d.proc is not None
        d.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: "SIGHUP" in d.log(), what="the SIGHUP resync")
        state_text = (temp_home / ".local" / "state" / "conduit" / "sync.json").read_text()
        state = json.loads(state_text)
        assert state["channels"]["aaa"]["key_error"], state["channels"]  # the failure is reported...
        assert state["tools"]["cline"]["status"] == "error"
        notify = "\n".join(d.notify.messages + _received(d)) if d.notify else ""
    finally:
        d.stop()
    log = d.log()
    assert "settings.json diff:" in log  # -v: the diffs were logged, masked
    for secret in (CANARY, CANARY2):
        assert secret not in log, [ln for ln in log.splitlines() if secret in ln][:5]
        assert secret not in state_text
        assert secret not in notify


def test_sigterm_is_honoured_while_the_loop_is_stuck(blockable: tuple[Path, Path, Path], temp_home: Path,
                                                     tmp_path: Path) -> None:
    """The key command blocks until the test ends; SIGTERM still ends the daemon, after ``STOP_WAIT_S`` (4 s).
    The wait allows far more than that (a loaded machine): what matters is that it exits, and with 1."""
    _, block, started = blockable
    d = Daemon(temp_home, tmp_path, env={"WATCHDOG_USEC": None, BLOCK_VAR: "1"})
    try:
        d.start()
        _block_the_loop(d, block, started)
        assert d.proc is not None
        d.proc.send_signal(signal.SIGTERM)
        try:
            rc = d.proc.wait(STOP_WAIT_S + 60)
        except subprocess.TimeoutExpired:
            pytest.fail(f"SIGTERM not honoured within {STOP_WAIT_S + 60:.0f} s while the loop was stuck")
        assert rc == 1  # it says it left a batch unfinished
        assert "did not finish its batch" in d.log()
    finally:
        block.unlink(missing_ok=True)
        d.stop()
