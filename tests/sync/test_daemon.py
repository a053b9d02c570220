"""`conduit daemon` as a real process under a temporary HOME, with real files of the three tools.

No wall-clock assertions: every wait is an upper bound (daemonproc.WAIT_S), never a measure of speed.
"""

from __future__ import annotations

import json
import os
import random
import re
import sqlite3
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.daemonproc import (
    Daemon,
    all_at,
    cc_switch_env,
    claude_env,
    cline_settings,
    models,
    read_state,
    set_model,
    wait_for,
)
from helpers.toolfiles import cc_switch_db, claude_settings, cline_gen_c, write_profile

START = "claude-sonnet-4-20250514"


@pytest.fixture
def tools(temp_home: Path) -> Path:
    """The three tools installed with their real-format files, and a profile for channel `gw`."""
    claude_settings(temp_home)
    cline_gen_c(temp_home)
    cc_switch_db(temp_home)
    return write_profile(temp_home, key_text="sk-test-daemon-0123456789\n")


@pytest.fixture
def daemon(temp_home: Path, tmp_path: Path, tools: Path) -> Iterator[Daemon]:
    d = Daemon(temp_home, tmp_path)
    try:
        yield d
    finally:
        d.stop()


def test_first_sync_then_ready(daemon: Daemon, temp_home: Path) -> None:
    daemon.start()  # returns after READY=1
    assert models(temp_home) == (START, START, START)
    state = read_state(temp_home)
    assert state["profile"]["ok"] and state["last_sync"]["trigger"] == "start"
    assert {t: v["status"] for t, v in state["tools"].items()} == {"claude_code": "changed", "cline": "changed",
                                                                  "cc_switch": "changed"}
    assert state["daemon"]["pid"] == daemon.proc.pid  # type: ignore[union-attr]
    assert "sk-test-daemon-0123456789" not in json.dumps(state)
    assert "sk-test-daemon-0123456789" not in daemon.log()
    assert re.search(r"sync claude_code: changed settings.json \(start\)", daemon.log())


@pytest.mark.parametrize("how", ["rename", "truncate", "sed"])
def test_each_save_style_propagates_to_all_three_tools(daemon: Daemon, tools: Path, temp_home: Path,
                                                       how: str) -> None:
    daemon.start()
    for i in range(3):
        model = f"model-{how}-{i}"
        set_model(tools, model, how)
        wait_for(all_at(temp_home, model), what=f"{how} save {i} in all three tools")


def test_burst_of_20_saves_ends_in_the_last_state_with_no_half_written_file(
        daemon: Daemon, tools: Path, temp_home: Path) -> None:
    daemon.start()
    stop = threading.Event()
    problems: list[str] = []
    reads = [0]

    def reader() -> None:
        claude = temp_home / ".claude" / "settings.json"
        cline = temp_home / ".cline" / "data" / "settings" / "providers.json"
        while not stop.is_set():
            for path in (claude, cline):
                try:
                    doc = json.loads(path.read_bytes())
                except json.JSONDecodeError as exc:
                    problems.append(f"{path.name}: {exc}")
                    continue
                except FileNotFoundError:
                    problems.append(f"{path.name}: missing")
                    continue
                if path is claude and "permissions" not in doc:
                    problems.append("settings.json lost a key conduit does not own")
            try:
                env = cc_switch_env(temp_home)
                if env and not env.get("ANTHROPIC_MODEL"):
                    problems.append("cc-switch row without a model")
            except sqlite3.OperationalError as exc:  # a lock wait longer than the timeout is not a torn read
                if "locked" not in str(exc):
                    problems.append(f"cc-switch.db: {exc}")
            reads[0] += 1

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    try:
        styles = ["atomic", "rename", "truncate", "sed"]
        for i in range(20):
            set_model(tools, f"burst-{i}", styles[i % len(styles)])
            time.sleep(0.045)  # 20 saves in about one second
        wait_for(all_at(temp_home, "burst-19"), what="the last of 20 saves in all three tools")
        time.sleep(0.5)  # nothing later may overwrite the last state
        assert models(temp_home) == ("burst-19", "burst-19", "burst-19")
    finally:
        stop.set()
        t.join(10)
    assert reads[0] > 20
    assert problems == []


def test_invalid_save_changes_nothing_and_next_valid_save_applies(
        daemon: Daemon, tools: Path, temp_home: Path) -> None:
    daemon.start()
    watched = [temp_home / ".claude" / "settings.json", temp_home / ".cline" / "data" / "settings" / "providers.json",
               temp_home / ".cc-switch" / "cc-switch.db", temp_home / ".cc-switch" / "settings.json"]
    before = {p: p.read_bytes() for p in watched}
    good = tools.read_text()
    bad = good.replace(f'model = "{START}"', 'model = "unterminated')
    tools.write_text(bad)
    wait_for(lambda: read_state(temp_home)["profile"]["ok"] is False, what="the profile error in the state file")
    state = read_state(temp_home)
    assert "profile.toml:3" in state["profile"]["error"]
    # the same invalid text saved again is not logged again
    tools.write_text(bad + "\n")
    tools.write_text(bad)
    time.sleep(0.5)
    assert {p: p.read_bytes() for p in watched} == before
    assert daemon.log().count("profile error") == 1, daemon.log()
    tools.write_text(good.replace(START, "after-error"))
    wait_for(all_at(temp_home, "after-error"), what="the valid save after the invalid one")
    wait_for(lambda: read_state(temp_home)["profile"]["ok"] is True, what="the profile error cleared")


def _file_models(home: Path) -> dict[str, str | None]:
    """Each tool file parsed (raises on a torn file), mapped to the model it holds."""
    out: dict[str, str | None] = {}
    out["claude"] = claude_env(home).get("ANTHROPIC_MODEL")
    out["cline"] = cline_settings(home).get("model")
    out["cc_switch"] = cc_switch_env(home).get("ANTHROPIC_MODEL")
    return out


def test_kill_9_in_the_middle_of_a_sync_leaves_every_file_old_or_new(
        daemon: Daemon, tools: Path, temp_home: Path) -> None:
    daemon.start()
    db = temp_home / ".cc-switch" / "cc-switch.db"
    # Hold CC Switch's database (as CC Switch itself may): the daemon writes Claude Code and Cline, then waits for
    # the lock inside its sync. That is the middle of a sync, deterministically.
    holder = sqlite3.connect(db, timeout=10, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        set_model(tools, "mid-sync", "atomic")
        wait_for(lambda: claude_env(temp_home).get("ANTHROPIC_MODEL") == "mid-sync", what="Claude Code written")
        daemon.kill9()
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    got = _file_models(temp_home)
    assert got["claude"] == "mid-sync"
    assert got["cline"] in (START, "mid-sync")
    assert got["cc_switch"] == START  # its transaction never committed
    # random kill points: every file must parse and hold either the old or the new model
    rng = random.Random(1234)
    old = "mid-sync"
    for i in range(6):
        daemon.start()
        wait_for(all_at(temp_home, old), what="restart brings every tool to the profile")
        new = f"kill-{i}"
        set_model(tools, new, "atomic")
        time.sleep(rng.uniform(0.0, 0.15))
        daemon.kill9()
        got = _file_models(temp_home)
        for tool, value in got.items():
            assert value in (old, new), (tool, value)
        old = new
    daemon.start()
    wait_for(all_at(temp_home, old), what="the last profile after the last restart")


def test_drift_is_reported_not_reapplied_and_causes_no_write_loop(
        daemon: Daemon, temp_home: Path) -> None:
    daemon.start()
    settings = temp_home / ".claude" / "settings.json"
    doc = json.loads(settings.read_text())
    doc["env"]["ANTHROPIC_MODEL"] = "someone-else"
    settings.write_text(json.dumps(doc, indent=2) + "\n")
    written = settings.stat()

    def drift() -> dict | None:
        return read_state(temp_home)["tools"]["claude_code"]["drift"]

    record = wait_for(drift, what="drift recorded in the state file")
    assert record["policy"] == "report" and not record["reapplied"]
    assert '-    "ANTHROPIC_MODEL": "someone-else"' in record["diff"]
    assert "sk-test-daemon-0123456789" not in json.dumps(read_state(temp_home))
    time.sleep(1.0)
    after = settings.stat()
    assert (after.st_ino, after.st_mtime_ns) == (written.st_ino, written.st_mtime_ns)  # conduit wrote nothing
    assert claude_env(temp_home)["ANTHROPIC_MODEL"] == "someone-else"
    assert daemon.log().count("drift claude_code: ") == 1
    from conduit.daemon.sync.doctor import doctor

    rep = doctor()
    assert rep["daemon"]["running"] and rep["daemon"]["pid"] == daemon.proc.pid  # type: ignore[union-attr]
    assert rep["tools"]["claude_code"]["drift"]["policy"] == "report"
    assert rep["tools"]["claude_code"]["restart_needed"] is True
    assert any("behind conduit's back" in w for w in rep["warnings"])
    # an unrelated change by the tool is not drift
    doc["permissions"]["allow"].append("Bash(ls)")
    settings.write_text(json.dumps(doc, indent=2) + "\n")
    time.sleep(0.5)
    assert daemon.log().count("drift claude_code: ") == 1


def test_drift_reapply_writes_once_and_does_not_loop(daemon: Daemon, tools: Path, temp_home: Path) -> None:
    tools.write_text(tools.read_text().replace('model = "', 'on_drift = "reapply"\nmodel = "', 1))
    daemon.start()
    settings = temp_home / ".claude" / "settings.json"
    doc = json.loads(settings.read_text())
    doc["env"]["ANTHROPIC_BASE_URL"] = "https://elsewhere.example.com"
    tmp = settings.with_name("settings.json.edit")
    tmp.write_text(json.dumps(doc, indent=2) + "\n")
    os.replace(tmp, settings)  # the test's write
    wait_for(lambda: claude_env(temp_home)["ANTHROPIC_BASE_URL"] == "https://gw.example.com/api",
             what="the profile re-applied")
    # Conduit's one re-apply, and nothing after it: the file keeps the inode of that write (every atomic
    # replace gives a new one) and the log shows one drift write. (Counting inodes with a polling thread
    # missed the test's own short-lived write on a loaded machine.)
    reapplied = settings.stat()
    time.sleep(1.5)
    after = settings.stat()
    assert (after.st_ino, after.st_mtime_ns) == (reapplied.st_ino, reapplied.st_mtime_ns)
    assert daemon.log().count("sync claude_code: changed settings.json (drift)") == 1
    state = read_state(temp_home)["tools"]["claude_code"]
    assert state["drift"]["reapplied"] is True
    assert daemon.log().count("drift claude_code: profile re-applied") == 1


def test_key_file_change_propagates(daemon: Daemon, temp_home: Path) -> None:
    daemon.start()
    keyfile = temp_home / ".config" / "conduit" / "keys" / "gw"
    tmp = keyfile.with_name("gw.new")
    tmp.write_text("sk-test-second-key-987654\n")
    os.replace(tmp, keyfile)
    wait_for(lambda: cline_settings(temp_home)["apiKey"] == "sk-test-second-key-987654", what="Cline")
    # Claude Code holds a reference (the default): its apiKeyHelper prints the new key, its file holds none
    helper = json.loads((temp_home / ".claude" / "settings.json").read_text())["apiKeyHelper"]
    printed = subprocess.run(["/bin/sh", "-c", helper], capture_output=True, text=True, timeout=60,
                             env={"HOME": str(temp_home), "PATH": "/usr/bin:/bin"})
    assert printed.stdout == "sk-test-second-key-987654\n", printed.stderr
    assert "ANTHROPIC_AUTH_TOKEN" not in claude_env(temp_home)
    rests = wait_for(lambda: {t: i.get("key_at_rest") for t, i in read_state(temp_home)["tools"].items()}
                     if "cline" in read_state(temp_home)["tools"] else None, what="the state file")
    assert rests == {"claude_code": "reference (apiKeyHelper)", "cline": "file 0600", "cc_switch": "database 0600"}
    wait_for(lambda: cc_switch_env(temp_home)["ANTHROPIC_AUTH_TOKEN"] == "sk-test-second-key-987654",
             what="CC Switch")
    assert "sk-test-second-key-987654" not in daemon.log()


def test_second_daemon_refuses_and_sigterm_exits_cleanly(daemon: Daemon, temp_home: Path, tmp_path: Path) -> None:
    daemon.start()
    (tmp_path / "other").mkdir()
    other = Daemon(temp_home, tmp_path / "other")
    other.start(wait_ready=False)
    assert other.proc is not None
    assert other.proc.wait(30) == 1
    assert "already running" in other.log() and "Traceback" not in other.log()
    other.stop()
    assert daemon.stop() == 0
    assert "Traceback" not in daemon.log()


def test_command_key_source_runs_once_per_full_sync(daemon: Daemon, tools: Path, temp_home: Path) -> None:
    """`op read` / `pass show` may prompt to unlock: drift checks reuse the keys of the last full sync."""
    calls = temp_home / "calls"
    tools.write_text(tools.read_text().replace(
        'key = { file = "~/.config/conduit/keys/gw" }',
        f'key = {{ command = "echo call >> {calls}; echo sk-test-command-0123456789" }}'))
    daemon.start()
    assert calls.read_text().count("call") == 1
    settings = temp_home / ".claude" / "settings.json"
    doc = json.loads(settings.read_text())
    doc["hooks"]["Stop"] = [{"hooks": [{"type": "command", "command": "true"}]}]  # not an owned key
    settings.write_text(json.dumps(doc, indent=2) + "\n")
    time.sleep(1.0)  # let the tool-file event be handled on its own (not merged into the next sync)
    set_model(tools, "m-after")  # a full sync, queued after the tool-file event
    wait_for(lambda: models(temp_home) == ("m-after",) * 3, what="the model change in every tool")
    assert calls.read_text().count("call") == 2  # start + the profile change; none for the drift check


def _profile_syncs(daemon: Daemon) -> int:
    """Full syncs the daemon ran for profile changes (one ``sync claude_code: ... (profile)`` line each)."""
    return len(re.findall(r"sync claude_code: .*\(profile\)", daemon.log()))


def _slow_save(profile: Path, model: str, how: str) -> None:
    """An editor's save whose first event comes well before the new text: renamed away (vim) or truncated."""
    new = re.sub(r'(?m)^model = ".*"$', f'model = "{model}"', profile.read_text())
    if how == "slow-rename":
        backup = profile.with_name(profile.name + "~")
        os.rename(profile, backup)
        time.sleep(0.02)
        profile.write_text(new)
        os.unlink(backup)
    else:
        with open(profile, "r+") as fh:
            fh.truncate(0)
            fh.flush()
            time.sleep(0.02)
            fh.write(new)


@pytest.mark.parametrize("how", ["atomic", "rename", "slow-rename", "slow-truncate"])
def test_a_single_save_costs_exactly_one_sync(daemon: Daemon, tools: Path, temp_home: Path, how: str) -> None:
    """Leading edge: the save syncs once. A save whose first event finds no profile, or an empty one, too: the
    loop waits for the save to settle and reads again, instead of reporting an error."""
    daemon.start()
    if how.startswith("slow-"):
        _slow_save(tools, f"single-{how}", how)
    else:
        set_model(tools, f"single-{how}", how)
    wait_for(all_at(temp_home, f"single-{how}"), what="the save in all three tools")
    time.sleep(1.0)  # room for a second sync, which must not come
    assert _profile_syncs(daemon) == 1, daemon.log()
    assert "profile error" not in daemon.log()
    assert read_state(temp_home)["last_sync"]["trigger"] == "profile"


def test_saves_during_a_sync_give_exactly_one_more_sync(daemon: Daemon, tools: Path, temp_home: Path) -> None:
    """The first save's sync is held inside CC Switch's database lock; three saves meanwhile end in one more
    sync, which applies the last of them."""
    daemon.start()
    db = temp_home / ".cc-switch" / "cc-switch.db"
    holder = sqlite3.connect(db, timeout=10, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # the daemon's busy timeout is 5 s per attempt: it waits, then commits
    try:
        set_model(tools, "during-0", "atomic")
        wait_for(lambda: claude_env(temp_home).get("ANTHROPIC_MODEL") == "during-0", what="the first sync started")
        for i in (1, 2, 3):
            set_model(tools, f"during-{i}", ("atomic", "truncate", "rename")[i - 1])
            time.sleep(0.05)
        time.sleep(0.3)  # every event of those saves is queued while the sync still waits for the lock
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    wait_for(all_at(temp_home, "during-3"), what="the last save in all three tools")
    time.sleep(1.0)
    assert _profile_syncs(daemon) == 2, daemon.log()
    assert models(temp_home) == ("during-3",) * 3
