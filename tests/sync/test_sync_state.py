"""The sync daemon's parts that need no daemon: the state file model, backup scrubbing, the log filter, the lock."""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import sys
from pathlib import Path

from conduit.daemon.sync import lock
from conduit.daemon.sync.logs import RedactFilter
from conduit.daemon.sync.scrub import RedactingBackupStore, scrub_backups
from conduit.daemon.sync.state import (
    DaemonInfo,
    DriftRecord,
    LastSync,
    ProfileInfo,
    SyncState,
    profile_error,
    read_state,
    tool_facts,
    write_state,
)
from conduit.redact import Redactor

OLD = "sk-old-0123456789aaaa"  # fingerprint sk-...aaaa


def test_the_state_file_holds_only_what_was_set_in_the_documented_order(tmp_path: Path) -> None:
    state = SyncState()
    state.daemon = DaemonInfo(pid=7, started_at="t0", debounce_ms=50)
    state.daemon.watching = ["/w"]
    state.profile.path, state.profile.ok, state.profile.error, state.profile.error_at = "p", False, "bad", "t1"
    entry = state.tool("claude_code")
    entry.status, entry.last_sync_at, entry.message, entry.files = "unchanged", "t2", None, ["/f"]
    entry.drift = DriftRecord(detected_at="t3", files=["/f"], diff="+x", policy="report", reapplied=False)
    state.last_sync = LastSync(at="t2", trigger="start", ok=True)
    path = write_state(state, tmp_path / "sync.json")
    doc = json.loads(path.read_text())
    assert list(doc) == ["version", "updated_at", "daemon", "profile", "last_sync", "channels", "tools"]
    assert doc["daemon"] == {"pid": 7, "started_at": "t0", "debounce_ms": 50, "watching": ["/w"]}
    assert list(doc["profile"]) == ["path", "ok", "error", "error_at"]  # never applied: no applied_at key
    assert list(doc["tools"]["claude_code"]) == ["drift", "restart_needed", "status", "last_sync_at", "message",
                                                 "files"]
    assert doc["tools"]["claude_code"]["drift"] == {"detected_at": "t3", "files": ["/f"], "diff": "+x",
                                                    "policy": "report", "reapplied": False}
    assert path.stat().st_mode & 0o777 == 0o600
    again = read_state(path)
    assert again.to_json() == doc  # a round trip keeps every key and its order
    assert profile_error(again) == "bad"
    assert tool_facts(again)["claude_code"].drift == doc["tools"]["claude_code"]["drift"]


def test_a_missing_or_corrupt_state_file_reads_as_the_empty_state(tmp_path: Path) -> None:
    empty = SyncState().to_json()
    assert empty == {"version": 1, "updated_at": None, "daemon": {}, "profile": {}, "last_sync": None,
                     "channels": {}, "tools": {}}
    assert read_state(tmp_path / "nothing.json").to_json() == empty
    for text in ("{not json", "[1, 2]", '{"tools": 3}', ""):
        (tmp_path / "sync.json").write_text(text)
        assert read_state(tmp_path / "sync.json").to_json() == empty
    (tmp_path / "sync.json").write_text('{"tools": {}, "route": {"active": "fallback"}}')
    assert read_state(tmp_path / "sync.json").to_json()["route"] == {"active": "fallback"}  # newer keys kept
    assert profile_error(SyncState(profile=ProfileInfo(ok=True, error="old"))) is None


def test_write_state_passes_the_text_through_the_redactor(tmp_path: Path) -> None:
    state = SyncState()
    state.tool("cline").message = f"rejected {OLD}"
    text = write_state(state, tmp_path / "sync.json", redact=Redactor([OLD])).read_text()
    assert OLD not in text and "sk-...aaaa" in text


def test_scrub_replaces_the_old_key_by_its_fingerprint_in_text_and_sqlite_backups(tmp_path: Path) -> None:
    store = RedactingBackupStore([OLD], root=tmp_path / "backups")
    backup = store.save_bytes("claude_code", tmp_path / "settings.json", f'{{"key": "{OLD}"}}'.encode(), mode=0o600)
    assert OLD.encode() not in backup.file.read_bytes() and b"sk-...aaaa" in backup.file.read_bytes()
    old_text = tmp_path / "backups" / "cline" / "old.json"
    old_text.parent.mkdir(parents=True)
    old_text.write_text(f"key={OLD}\n")
    db = tmp_path / "backups" / "cc_switch" / "old.db"
    db.parent.mkdir(parents=True)
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE providers (id TEXT, settings TEXT)")
        conn.execute("INSERT INTO providers VALUES ('a', ?)", (f'{{"token": "{OLD}"}}',))
    conn.close()
    assert scrub_backups([OLD], store) == 2
    assert old_text.read_text() == "key=sk-...aaaa\n"
    assert OLD.encode() not in db.read_bytes()
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT settings FROM providers").fetchone() == ('{"token": "sk-...aaaa"}',)
    conn.close()
    assert scrub_backups([OLD], store) == 0  # nothing left to do


def test_the_log_filter_masks_messages_and_tracebacks() -> None:
    redactor = Redactor()
    mask = RedactFilter(redactor)
    redactor.add([OLD])  # learned after the filter was made: masked from then on
    try:
        raise ValueError(f"bad key {OLD}")
    except ValueError:
        record = logging.LogRecord("conduit", logging.ERROR, __file__, 1, "read %s", (OLD,), sys.exc_info())
    assert mask.filter(record)
    text = record.getMessage()
    assert OLD not in text and text.startswith("read sk-...aaaa") and "ValueError: bad key sk-...aaaa" in text


def test_the_lock_names_the_running_daemon_and_only_while_held(temp_home: Path) -> None:
    assert lock.running_daemon_pid() is None
    fd = lock.acquire_lock()
    try:
        assert lock.running_daemon_pid() == os.getpid()
        assert lock.lock_path().stat().st_mode & 0o777 == 0o600
    finally:
        os.close(fd)
    assert lock.running_daemon_pid() is None  # the file is still there, but nobody holds it
