"""The shared writer: no-op detection, symlinks, modes, bad files, unwritable places, concurrent edits,
backups and restore, SQLite transactions and locks, masked diffs, and crash safety (simulated at every OS
call, and real SIGKILLs of a writing subprocess).

Everything runs on real files under the temporary HOME (tests/conftest.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import sqlite3
import stat
import subprocess
import sys
import tempfile
import textwrap
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.isolation import env_for_subprocess
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conduit.adapters.base import SqliteTarget, TextTarget
from conduit.adapters.formats.jsonfile import json_target
from conduit.adapters.writer import apply as writer_mod
from conduit.adapters.writer.apply import Writer
from conduit.adapters.writer.backups import BackupStore
from conduit.adapters.writer.sqlite_apply import SqliteApplier
from conduit.errors import ToolFileError
from conduit.fileio import TMP_MARK
from conduit.redact import fingerprint

KEY = "sk-live-0123456789abcdefXYZ"


def _set(**values: Any) -> Callable[[dict[str, Any]], dict[str, Any]]:
    def transform(doc: dict[str, Any]) -> dict[str, Any]:
        env = doc.setdefault("env", {})
        env.update(values)
        return doc

    return transform


def _store(home: Path, keep: int = 10) -> BackupStore:
    return BackupStore(home / "backups", keep=keep)


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def _tmp_files(directory: Path) -> list[str]:
    return [p.name for p in directory.iterdir() if TMP_MARK in p.name]


# ------------------------------------------------------------------------------------------------ text files


def test_nothing_changed_writes_nothing(temp_home: Path) -> None:
    path = temp_home / ".claude" / "settings.json"
    path.parent.mkdir()
    path.write_text('{\n    "env": {"ANTHROPIC_BASE_URL": "https://gw/api"},   "hooks": {}\n}')
    os.chmod(path, 0o600)
    os.utime(path, ns=(1_000_000_000, 1_000_000_000))
    before = os.stat(path)
    result = Writer(_store(temp_home)).apply(
        "claude_code", json_target(path, _set(ANTHROPIC_BASE_URL="https://gw/api"), secret_keys=())
    )
    after = os.stat(path)
    assert result.error is None and not result.changed and result.diff == "" and result.backup is None
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, 1_000_000_000)
    assert not (temp_home / "backups").exists()


def test_change_merges_and_keeps_other_keys(temp_home: Path) -> None:
    path = temp_home / "settings.json"
    path.write_text('{\n  "permissions": {"allow": ["Bash"]},\n  "env": {"X": "1"},\n  "hooks": {}\n}\n')
    result = Writer(_store(temp_home)).apply("claude_code", json_target(path, _set(Y="2"), secret_keys=()))
    assert result.changed and result.error is None and result.backup is not None
    assert list(json.loads(path.read_text())) == ["permissions", "env", "hooks"]
    assert json.loads(path.read_text())["env"] == {"X": "1", "Y": "2"}
    assert (
        result.backup.read_text()
        == '{\n  "permissions": {"allow": ["Bash"]},\n  "env": {"X": "1"},\n  "hooks": {}\n}\n'
    )


def test_symlink_stays_a_symlink_and_target_changes(temp_home: Path) -> None:
    real = temp_home / "dotfiles" / "claude" / "settings.json"
    real.parent.mkdir(parents=True)
    real.write_text('{"env": {}}\n')
    link = temp_home / ".claude" / "settings.json"
    link.parent.mkdir()
    link.symlink_to(Path("..") / "dotfiles" / "claude" / "settings.json")
    result = Writer(_store(temp_home)).apply("claude_code", json_target(link, _set(A="1"), secret_keys=()))
    assert result.error is None and result.changed
    assert link.is_symlink() and os.readlink(link) == "../dotfiles/claude/settings.json"
    assert json.loads(real.read_text()) == {"env": {"A": "1"}}
    assert any("symlink" in n for n in result.notices)
    assert _tmp_files(real.parent) == [] and _tmp_files(link.parent) == []


def test_dangling_symlink_is_written_at_its_target(temp_home: Path) -> None:
    (temp_home / "dotfiles").mkdir()
    link = temp_home / "settings.json"
    link.symlink_to(temp_home / "dotfiles" / "settings.json")
    result = Writer(_store(temp_home)).apply("t", json_target(link, _set(A="1"), secret_keys=()))
    assert result.error is None and link.is_symlink()
    assert json.loads((temp_home / "dotfiles" / "settings.json").read_text()) == {"env": {"A": "1"}}


def test_symlink_into_a_missing_folder_is_refused(temp_home: Path) -> None:
    link = temp_home / "settings.json"
    link.symlink_to(temp_home / "gone" / "dotfiles" / "settings.json")
    result = Writer(_store(temp_home)).apply("t", json_target(link, _set(A="1"), secret_keys=()))
    assert result.error is not None and "does not exist" in result.error and not result.changed
    assert not (temp_home / "gone").exists() and link.is_symlink()


def test_loose_mode_is_tightened_with_a_notice(temp_home: Path) -> None:
    path = temp_home / "secrets.json"
    path.write_text("{}\n")
    os.chmod(path, 0o644)
    result = Writer(_store(temp_home)).apply("cline", json_target(path, _set(K=KEY), secret_keys=("K",)))
    assert result.error is None
    assert _mode(path) == 0o600
    assert "tightened mode 0644 -> 0600" in result.notices


def test_stricter_mode_is_kept(temp_home: Path) -> None:
    path = temp_home / "globalState.json"
    path.write_text("{}\n")
    os.chmod(path, 0o400)
    result = Writer(_store(temp_home)).apply(
        "cline", json_target(path, _set(K="v"), secret_keys=(), mode=0o644)
    )
    assert result.error is None and result.notices == []
    assert _mode(path) == 0o400


def test_new_file_is_0600_under_umask_022_and_dir_0700(temp_home: Path) -> None:
    path = temp_home / ".cline" / "data" / "secrets.json"
    old = os.umask(0o022)
    try:
        result = Writer(_store(temp_home)).apply("cline", json_target(path, _set(K=KEY), secret_keys=("K",)))
    finally:
        os.umask(old)
    assert result.error is None and result.changed and result.backup is None
    assert _mode(path) == 0o600
    assert _mode(path.parent) == 0o700 and _mode(path.parent.parent) == 0o700
    assert result.diff.startswith("--- /dev/null")


def test_missing_file_not_created_when_create_is_false(temp_home: Path) -> None:
    path = temp_home / "nodir" / "x.json"
    result = Writer(_store(temp_home)).apply(
        "t", json_target(path, _set(A="1"), secret_keys=(), create=False)
    )
    assert result.error is None and not result.changed and result.notices
    assert not path.parent.exists()


@pytest.mark.parametrize(
    "text,what",
    [
        ('{\n  "env": {},\n  // note\n  "hooks": {}\n}\n', "comment"),
        ('{\n  "env": {"A": "1",},\n  "hooks": {}\n}\n', "trailing comma"),
    ],
)
def test_unparseable_json_is_reported_and_left_byte_identical(temp_home: Path, text: str, what: str) -> None:
    path = temp_home / "settings.json"
    path.write_bytes(text.encode())
    before = os.stat(path)
    result = Writer(_store(temp_home)).apply("claude_code", json_target(path, _set(A="2"), secret_keys=()))
    assert result.error is not None and not result.changed and result.backup is None
    assert str(path) in result.error and what in result.error and "line " in result.error
    assert "conduit left it unchanged" in result.error
    assert path.read_bytes() == text.encode()
    assert os.stat(path).st_mtime_ns == before.st_mtime_ns
    assert _tmp_files(temp_home) == []


def test_not_utf8_is_reported(temp_home: Path) -> None:
    path = temp_home / "settings.json"
    path.write_bytes(b'{"a": "\xff"}')
    result = Writer(_store(temp_home)).apply("t", json_target(path, _set(A="2"), secret_keys=()))
    assert result.error is not None and "UTF-8" in result.error
    assert path.read_bytes() == b'{"a": "\xff"}'


@contextlib.contextmanager
def _unprivileged() -> Iterator[None]:
    """Drop the effective uid to nobody while root (root ignores directory permissions); no-op otherwise."""
    if os.geteuid() != 0:
        yield
        return
    os.setegid(65534)
    os.seteuid(65534)
    try:
        yield
    finally:
        os.seteuid(0)
        os.setegid(0)


def test_unwritable_directory_is_an_error_and_nothing_is_lost() -> None:
    # Tests may run as root, which ignores the 0555 below: the writer then runs with the effective uid
    # dropped to nobody, in a directory outside the root-only pytest temp tree.
    base = Path(tempfile.mkdtemp(prefix="conduit-ro-"))
    try:
        os.chmod(base, 0o755)
        directory = base / "tool"
        directory.mkdir()
        path = directory / "settings.json"
        path.write_text('{"env": {"A": "1"}}\n')
        os.chmod(path, 0o666)
        os.chmod(directory, 0o555)
        if os.geteuid() == 0:
            os.chown(directory, 65534, 65534)
            os.chown(path, 65534, 65534)
        writer = Writer(BackupStore(base / "backups"))
        with _unprivileged():
            assert not os.access(directory, os.W_OK, effective_ids=True)
            result = writer.apply("t", json_target(path, _set(A="2"), secret_keys=()))
        assert result.error is not None and not result.changed
        assert (
            "Permission denied" in result.error and "writable" in result.error and str(path) in result.error
        )
        assert path.read_text() == '{"env": {"A": "1"}}\n'
        assert _tmp_files(directory) == []
    finally:
        os.chmod(base / "tool", 0o755)
        shutil.rmtree(base)


def test_parent_that_is_a_regular_file_is_an_error(temp_home: Path) -> None:
    blocker = temp_home / ".cline"
    blocker.write_text("not a directory")
    result = Writer(_store(temp_home)).apply(
        "cline", json_target(blocker / "data" / "secrets.json", _set(K=KEY), secret_keys=("K",))
    )
    assert result.error is not None and str(blocker) in result.error
    assert blocker.read_text() == "not a directory"
    direct = Writer(_store(temp_home)).apply(
        "cline", json_target(blocker / "x.json", _set(K="1"), secret_keys=())
    )
    assert direct.error is not None and "not a directory" in direct.error


def test_concurrent_edit_between_read_and_write_survives(temp_home: Path) -> None:
    path = temp_home / "settings.json"
    path.write_text('{\n  "env": {}\n}\n')
    inner = json_target(path, _set(ANTHROPIC_MODEL="m1"), secret_keys=())
    calls: list[str | None] = []

    def render(text: str | None) -> str:
        calls.append(text)
        if len(calls) == 1:  # another program adds a hook while conduit is rendering
            path.write_text('{\n  "env": {},\n  "hooks": {"Stop": [{"command": "notify"}]}\n}\n')
        return inner.render(text)

    target = TextTarget(path=path, render=render, mask=inner.mask, label="settings.json")
    result = Writer(_store(temp_home)).apply("claude_code", target)
    assert result.error is None and result.changed
    doc = json.loads(path.read_text())
    assert doc == {"env": {"ANTHROPIC_MODEL": "m1"}, "hooks": {"Stop": [{"command": "notify"}]}}
    assert len(calls) == 2
    # The backup holds what was replaced: the other program's version.
    assert result.backup is not None and "notify" in result.backup.read_text()


def test_file_that_keeps_changing_is_an_error_and_the_other_edit_survives(temp_home: Path) -> None:
    path = temp_home / "settings.json"
    path.write_text("{}\n")
    inner = json_target(path, _set(A="1"), secret_keys=())
    n = [0]

    def render(text: str | None) -> str:
        n[0] += 1
        path.write_text(json.dumps({"other": n[0]}) + "\n")
        return inner.render(text)

    result = Writer(_store(temp_home)).apply("t", TextTarget(path=path, render=render))
    assert result.error is not None and "kept changing" in result.error
    assert json.loads(path.read_text()) == {"other": writer_mod.MAX_RENDERS}
    assert _tmp_files(temp_home) == []


def test_dry_run_computes_diff_and_writes_nothing(temp_home: Path) -> None:
    path = temp_home / "settings.json"
    path.write_text('{"env": {}}\n')
    os.chmod(path, 0o644)
    new = temp_home / "new" / "x.json"
    writer = Writer(_store(temp_home), dry_run=True)
    r1 = writer.apply("t", json_target(path, _set(A="1"), secret_keys=()))
    r2 = writer.apply("t", json_target(new, _set(A="1"), secret_keys=()))
    assert r1.changed and '+{"env": {"A": "1"}}' in r1.diff and r1.backup is None
    assert r1.notices == ["would tighten mode 0644 -> 0600"]
    assert r2.changed and r2.diff.startswith("--- /dev/null")
    assert path.read_text() == '{"env": {}}\n' and _mode(path) == 0o644
    assert not new.parent.exists() and not (temp_home / "backups").exists()


def test_diff_masks_secrets(temp_home: Path) -> None:
    path = temp_home / "settings.json"
    old_key = "sk-old-abcdefghijklmnop"
    path.write_text(json.dumps({"env": {"ANTHROPIC_AUTH_TOKEN": old_key}}, indent=2) + "\n")
    # The new key appears under an owned secret key AND inside a URL that the target's mask does not know.
    transform = _set(ANTHROPIC_AUTH_TOKEN=KEY, HELPER_URL=f"https://gw/api?key={KEY}")
    result = Writer(_store(temp_home), secrets=[KEY]).apply(
        "claude_code", json_target(path, transform, secret_keys=("ANTHROPIC_AUTH_TOKEN",))
    )
    assert result.changed and result.error is None
    assert KEY not in result.diff and old_key not in result.diff
    assert fingerprint(KEY) in result.diff and fingerprint(old_key) in result.diff
    assert KEY not in repr(result)
    assert KEY in path.read_text()  # the file itself holds the real key


def test_error_messages_are_masked(temp_home: Path) -> None:
    def render(text: str | None) -> str:
        raise ToolFileError(f"bad value {KEY}")

    result = Writer(_store(temp_home), secrets=[KEY]).apply(
        "t", TextTarget(path=temp_home / "x", render=render)
    )
    assert result.error is not None and KEY not in result.error and fingerprint(KEY) in result.error


def test_stale_temp_files_of_dead_writers_are_removed(temp_home: Path) -> None:
    path = temp_home / "settings.json"
    path.write_text("{}\n")
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    dead_pid = int(dead.stdout)
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        stale = temp_home / f".settings.json{TMP_MARK}{dead_pid}-deadbeef"
        busy = temp_home / f".settings.json{TMP_MARK}{live.pid}-cafebabe"
        other = temp_home / f".other.json{TMP_MARK}{dead_pid}-deadbeef"
        for p in (stale, busy, other):
            p.write_text("{partial")
        result = Writer(_store(temp_home)).apply("t", json_target(path, _set(A="1"), secret_keys=()))
        assert result.error is None
        assert not stale.exists() and busy.exists() and other.exists()
        assert any("interrupted write" in n for n in result.notices)
    finally:
        live.kill()
        live.wait()


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can give a file to another owner to start with")
def test_owner_is_kept(temp_home: Path) -> None:
    path = temp_home / "settings.json"
    path.write_text("{}\n")
    os.chown(path, 65534, 65534)
    result = Writer(_store(temp_home)).apply("t", json_target(path, _set(A="1"), secret_keys=()))
    assert result.error is None and result.changed
    assert (os.stat(path).st_uid, os.stat(path).st_gid) == (65534, 65534)


def test_hard_link_is_reported(temp_home: Path) -> None:
    path = temp_home / "settings.json"
    path.write_text("{}\n")
    os.link(path, temp_home / "other-name.json")
    result = Writer(_store(temp_home)).apply("t", json_target(path, _set(A="1"), secret_keys=()))
    assert any("hard links" in n for n in result.notices)
    assert (temp_home / "other-name.json").read_text() == "{}\n"


# --------------------------------------------------------------------------------------------------- backups


def test_backups_are_private_kept_to_n_and_listed_newest_first(temp_home: Path) -> None:
    path = temp_home / "settings.json"
    path.write_text('{"env": {"N": "0"}}\n')
    store = _store(temp_home, keep=3)
    for i in range(1, 6):
        result = Writer(store).apply("claude_code", json_target(path, _set(N=str(i)), secret_keys=()))
        assert result.changed and result.error is None
    backups = store.list("claude_code")
    assert len(backups) == 3
    assert [json.loads(b.file.read_text())["env"]["N"] for b in backups] == ["4", "3", "2"]
    assert all(b.path == path and b.kind == "text" and b.size == b.file.stat().st_size for b in backups)
    assert backups[0].created >= backups[1].created >= backups[2].created
    assert all(_mode(b.file) == 0o600 for b in backups)
    assert _mode(store.tool_dir("claude_code")) == 0o700 and _mode(store.root) == 0o700
    assert backups[0].id.endswith("--settings.json") and backups[0].id[8] == "T"
    files = sorted(p.name for p in store.tool_dir("claude_code").iterdir() if not p.name.startswith("."))
    assert files == sorted([b.id for b in backups] + ["index.json"])
    assert store.list("never_synced") == []


def test_keep_counts_per_file(temp_home: Path) -> None:
    a, b = temp_home / "globalState.json", temp_home / "secrets.json"
    a.write_text("{}\n")
    b.write_text("{}\n")
    store = _store(temp_home, keep=2)
    for i in range(4):
        Writer(store).apply("cline", json_target(a, _set(N=str(i)), secret_keys=()))
    Writer(store).apply("cline", json_target(b, _set(K="1"), secret_keys=()))
    paths = [x.path for x in store.list("cline")]
    assert paths.count(a) == 2 and paths.count(b) == 1


def test_restore_round_trip_and_undo(temp_home: Path) -> None:
    path = temp_home / "settings.json"
    original = '{\n    "env": {"N": "0"},\n    "hooks": {}\n}\n'
    path.write_text(original)
    os.chmod(path, 0o640)
    store = _store(temp_home)
    Writer(store).apply("claude_code", json_target(path, _set(N="1"), secret_keys=()))
    synced = path.read_text()
    assert synced != original
    restored = store.restore("claude_code")
    assert restored == [path]
    assert path.read_text() == original
    # The restore took a backup itself: restoring again undoes it.
    store.restore("claude_code")
    assert path.read_text() == synced
    # And a specific backup by id (a unique prefix is enough).
    first = store.list("claude_code")[-1]
    store.restore("claude_code", first.id.split("--")[0] + "--")
    assert path.read_text() == original


def test_restore_undoes_the_whole_batch(temp_home: Path) -> None:
    a, b = temp_home / "globalState.json", temp_home / "secrets.json"
    a.write_text('{"m": "old"}\n')
    b.write_text('{"k": "old"}\n')
    store = _store(temp_home)
    w1 = Writer(store)
    w1.apply("cline", json_target(a, lambda d: {**d, "m": "new1"}, secret_keys=()))
    w1.apply("cline", json_target(a, lambda d: {**d, "m": "new2"}, secret_keys=()))  # twice in one run
    w1.apply("cline", json_target(b, lambda d: {**d, "k": "new"}, secret_keys=()))
    assert sorted(store.restore("cline")) == sorted([a, b])
    assert json.loads(a.read_text()) == {"m": "old"} and json.loads(b.read_text()) == {"k": "old"}


def test_restore_recreates_a_deleted_file_through_symlink(temp_home: Path) -> None:
    real = temp_home / "dot" / "settings.json"
    real.parent.mkdir()
    real.write_text('{"a": 1}\n')
    link = temp_home / "settings.json"
    link.symlink_to(real)
    store = _store(temp_home)
    Writer(store).apply("t", json_target(link, lambda d: {**d, "a": 2}, secret_keys=()))
    real.unlink()
    store.restore("t")
    assert link.is_symlink() and real.read_text() == '{"a": 1}\n'


def test_restore_errors(temp_home: Path) -> None:
    store = _store(temp_home)
    with pytest.raises(ToolFileError, match="no backups"):
        store.restore("claude_code")
    path = temp_home / "x.json"
    path.write_text("{}\n")
    Writer(store).apply("t", json_target(path, _set(A="1"), secret_keys=()))
    with pytest.raises(ToolFileError, match="matches no backup"):
        store.restore("t", "nope")
    with pytest.raises(ToolFileError, match="not a tool name"):
        store.restore("../etc")


def test_backup_failure_leaves_file_unchanged(temp_home: Path) -> None:
    path = temp_home / "settings.json"
    path.write_text("{}\n")
    (temp_home / "state").write_text("a file where the backup directory should be")
    result = Writer(BackupStore(temp_home / "state" / "backups")).apply(
        "t", json_target(path, _set(A="1"), secret_keys=())
    )
    assert result.error is not None and not result.changed
    assert path.read_text() == "{}\n" and _tmp_files(temp_home) == []


def test_corrupt_index_loses_no_backup_files(temp_home: Path) -> None:
    path = temp_home / "settings.json"
    path.write_text('{"n": 0}\n')
    store = _store(temp_home)
    Writer(store).apply("t", json_target(path, lambda d: {**d, "n": 1}, secret_keys=()))
    first = store.list("t")[0]
    (store.tool_dir("t") / "index.json").write_text("{ not json")
    Writer(store).apply("t", json_target(path, lambda d: {**d, "n": 2}, secret_keys=()))
    assert first.file.exists()  # unindexed now, but not deleted
    assert [b.seq for b in store.list("t")] == [first.seq + 1]
    store.restore("t")
    assert json.loads(path.read_text()) == {"n": 1}


def test_default_backup_root_follows_home(temp_home: Path) -> None:
    from conduit.daemon.config.paths import backups_dir

    assert BackupStore(backups_dir()).root == backups_dir()
    assert str(backups_dir()).startswith(str(temp_home))


# ---------------------------------------------------------------------------------------------------- SQLite


def _make_db(path: Path, journal: str = "delete") -> None:
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA journal_mode={journal}")
    conn.execute("CREATE TABLE providers (id TEXT PRIMARY KEY, app_type TEXT, settings_config TEXT)")
    conn.execute("INSERT INTO providers VALUES ('p1', 'claude', '{}')")
    conn.commit()
    conn.close()


def _rows(path: Path) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute("SELECT * FROM providers ORDER BY id").fetchall()
    finally:
        conn.close()


def _upsert(value: str) -> Callable[[sqlite3.Connection, bool], list[str]]:
    def apply(conn: sqlite3.Connection, dry_run: bool) -> list[str]:
        cur = conn.execute("SELECT settings_config FROM providers WHERE id='conduit'").fetchone()
        if cur and cur[0] == value:
            return []
        conn.execute("INSERT OR REPLACE INTO providers VALUES ('conduit', 'claude', ?)", (value,))
        return [f"providers.conduit.settings_config: {cur[0] if cur else None} -> {value}"]

    return apply


@pytest.mark.parametrize("journal", ["delete", "wal"])
def test_sqlite_commit_backup_and_noop(temp_home: Path, journal: str) -> None:
    db = temp_home / ".cc-switch" / "cc-switch.db"
    db.parent.mkdir()
    _make_db(db, journal)
    store = _store(temp_home)
    result = Writer(store).apply("cc_switch", SqliteTarget(path=db, apply=_upsert('{"a": 1}')))
    assert result.error is None and result.changed and '-> {"a": 1}' in result.diff
    assert _rows(db) == [("conduit", "claude", '{"a": 1}'), ("p1", "claude", "{}")]
    assert result.backup is not None and _mode(result.backup) == 0o600
    bconn = sqlite3.connect(result.backup)
    assert bconn.execute("SELECT id FROM providers").fetchall() == [("p1",)]
    bconn.close()
    again = Writer(store).apply("cc_switch", SqliteTarget(path=db, apply=_upsert('{"a": 1}')))
    assert again.error is None and not again.changed and again.backup is None
    assert len(store.list("cc_switch")) == 1
    assert [
        p.name for p in (temp_home / "backups" / "cc_switch").iterdir() if p.name.startswith(".pending")
    ] == []
    # Restore puts the rows back, and can itself be undone.
    assert store.restore("cc_switch") == [db]
    assert _rows(db) == [("p1", "claude", "{}")]
    store.restore("cc_switch")
    assert _rows(db) == [("conduit", "claude", '{"a": 1}'), ("p1", "claude", "{}")]


def test_sqlite_dry_run_rolls_back(temp_home: Path) -> None:
    db = temp_home / "cc-switch.db"
    _make_db(db)
    seen: list[bool] = []

    def apply(conn: sqlite3.Connection, dry_run: bool) -> list[str]:
        seen.append(dry_run)
        return _upsert("x")(conn, dry_run)  # writes even in a dry run: the writer must roll back

    result = Writer(_store(temp_home), dry_run=True).apply("cc_switch", SqliteTarget(path=db, apply=apply))
    assert seen == [True] and result.changed and result.backup is None and "-> x" in result.diff
    assert _rows(db) == [("p1", "claude", "{}")]
    assert not (temp_home / "backups").exists()


def test_sqlite_missing_database_is_never_created(temp_home: Path) -> None:
    db = temp_home / ".cc-switch" / "cc-switch.db"
    result = Writer(_store(temp_home)).apply("cc_switch", SqliteTarget(path=db, apply=_upsert("x")))
    assert result.error is not None and "not found" in result.error and str(db) in result.error
    assert not db.exists() and not db.parent.exists()


def test_sqlite_not_a_database_is_an_error(temp_home: Path) -> None:
    db = temp_home / "cc-switch.db"
    db.write_bytes(b"this is not sqlite" * 100)
    result = Writer(_store(temp_home)).apply("cc_switch", SqliteTarget(path=db, apply=_upsert("x")))
    assert result.error is not None and str(db) in result.error
    assert db.read_bytes() == b"this is not sqlite" * 100


def test_sqlite_apply_error_rolls_back(temp_home: Path) -> None:
    db = temp_home / "cc-switch.db"
    _make_db(db)

    def apply(conn: sqlite3.Connection, dry_run: bool) -> list[str]:
        conn.execute("DELETE FROM providers")
        raise ToolFileError(f"{db}: settings_config of p1 is not JSON")

    result = Writer(_store(temp_home)).apply("cc_switch", SqliteTarget(path=db, apply=apply))
    assert result.error is not None and "not JSON" in result.error
    assert _rows(db) == [("p1", "claude", "{}")]
    assert _store(temp_home).list("cc_switch") == []


def _hold_lock(db: Path, locked: threading.Event, release: threading.Event) -> None:
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    conn.execute("UPDATE providers SET app_type='codex' WHERE id='p1'")
    locked.set()
    release.wait(10)
    conn.execute("COMMIT")
    conn.close()


def test_sqlite_locked_database_is_retried(temp_home: Path) -> None:
    db = temp_home / "cc-switch.db"
    _make_db(db)
    locked, release = threading.Event(), threading.Event()
    holder = threading.Thread(target=_hold_lock, args=(db, locked, release))
    holder.start()
    assert locked.wait(10)
    attempts = [0]
    real_once = SqliteApplier._once

    def counting(self: SqliteApplier, *args: Any) -> None:
        attempts[0] += 1
        if attempts[0] == 2:
            release.set()  # the other program finishes while conduit backs off
            holder.join(10)
        real_once(self, *args)

    SqliteApplier._once = counting  # type: ignore[method-assign]
    try:
        result = Writer(_store(temp_home), sqlite_timeout_s=0.01, sqlite_retries=5).apply(
            "cc_switch", SqliteTarget(path=db, apply=_upsert("x"))
        )
    finally:
        SqliteApplier._once = real_once  # type: ignore[method-assign]
        release.set()
        holder.join(10)
    assert result.error is None and result.changed
    assert attempts[0] == 2
    assert _rows(db) == [("conduit", "claude", "x"), ("p1", "codex", "{}")]  # both changes kept


def test_sqlite_lock_that_stays_is_an_error(temp_home: Path) -> None:
    db = temp_home / "cc-switch.db"
    _make_db(db)
    locked, release = threading.Event(), threading.Event()
    holder = threading.Thread(target=_hold_lock, args=(db, locked, release))
    holder.start()
    try:
        assert locked.wait(10)
        result = Writer(_store(temp_home), sqlite_timeout_s=0.01, sqlite_retries=2).apply(
            "cc_switch", SqliteTarget(path=db, apply=_upsert("x"))
        )
    finally:
        release.set()
        holder.join(10)
    assert result.error is not None and "locked" in result.error and "3 attempts" in result.error
    assert _rows(db) == [("p1", "codex", "{}")]


# ------------------------------------------------------------------------------------------- crash safety


class SimulatedCrash(BaseException):
    """Raised in place of an OS call: the process 'dies' there (BaseException: no handler swallows it)."""


CRASH_POINTS = ("open", "write", "fsync", "fchmod", "fchown", "replace", "rename", "close", "unlink", "mkdir")


@contextlib.contextmanager
def _crash_after(k: int) -> Iterator[list[str]]:
    """Make the k-th call (1-based) of any os function in CRASH_POINTS raise SimulatedCrash, and every later
    call too (a dead process does nothing more; close still releases the descriptor to keep the test
    process healthy)."""
    calls: list[str] = []
    originals = {name: getattr(os, name) for name in CRASH_POINTS}

    def wrap(name: str) -> Callable[..., Any]:
        real = originals[name]

        def fake(*args: Any, **kwargs: Any) -> Any:
            calls.append(name)
            if len(calls) >= k:
                if name == "close":
                    real(*args, **kwargs)
                raise SimulatedCrash(f"crash at call {len(calls)} ({name})")
            return real(*args, **kwargs)

        return fake

    for name in CRASH_POINTS:
        setattr(os, name, wrap(name))
    try:
        yield calls
    finally:
        for name, real in originals.items():
            setattr(os, name, real)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    old=st.none() | st.dictionaries(st.text(max_size=6), st.text(max_size=20), max_size=5),
    new_value=st.text(min_size=1, max_size=200),
    loose=st.booleans(),
)
def test_crash_at_every_os_call_leaves_old_or_new(
    old: dict[str, str] | None, new_value: str, loose: bool
) -> None:
    base = Path(tempfile.mkdtemp(prefix="conduit-crash-"))
    try:
        path = base / "tool" / "settings.json"
        if old is not None:
            path.parent.mkdir()
            path.write_text(json.dumps(old, indent=2) + "\n")
            os.chmod(path, 0o644 if loose else 0o600)
        old_bytes = path.read_bytes() if old is not None else None

        def target() -> TextTarget:
            return json_target(path, lambda d: {**d, "conduit": new_value}, secret_keys=())

        expected = target().render(old_bytes.decode() if old_bytes is not None else None).encode()
        k = 1
        while True:
            store = BackupStore(base / "backups", keep=2)
            with _crash_after(k) as calls:
                try:
                    result = Writer(store).apply("t", target())
                    crashed = False
                except SimulatedCrash:
                    crashed = True
            now = path.read_bytes() if path.exists() else None
            assert now in (old_bytes, expected), f"torn file after crash at call {k} ({calls[-1:]})"
            if now == expected and path.exists():
                assert _mode(path) == 0o600
            if not crashed:
                assert result.error is None and now == expected
                break
            # Recovery: the next normal run finishes the job and leaves no temp files behind.
            again = Writer(store).apply("t", target())
            assert again.error is None, again.error
            assert path.read_bytes() == expected
            assert _tmp_files(path.parent) == []
            assert all(b.file.exists() for b in store.list("t"))
            # Reset for the next crash point.
            if old_bytes is None:
                shutil.rmtree(path.parent)
            else:
                path.write_bytes(old_bytes)
                os.chmod(path, 0o644 if loose else 0o600)
            k += 1
        assert k > 5  # the writer does make several OS calls; each was a crash point
    finally:
        shutil.rmtree(base)


CRASH_LOOP = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from conduit.adapters.formats.jsonfile import json_target
    from conduit.adapters.writer.backups import BackupStore
    from conduit.adapters.writer.apply import Writer

    path, backups = Path(sys.argv[1]), Path(sys.argv[2])
    writer = Writer(BackupStore(backups, keep=3))
    i = 0
    while True:
        i += 1
        def transform(doc, i=i):
            doc["n"] = i
            doc["pad"] = "x" * (i * 7919 % 20000)
            return doc
        result = writer.apply("t", json_target(path, transform, secret_keys=()))
        if result.error:
            print(result.error, file=sys.stderr)
            sys.exit(3)
        if i == 3:
            print("ready", flush=True)
    """
)


def test_real_sigkill_during_writes_leaves_a_whole_version(temp_home: Path) -> None:
    path = temp_home / ".claude" / "settings.json"
    path.parent.mkdir()
    path.write_text('{\n  "keep": "me",\n  "n": 0,\n  "pad": ""\n}\n')
    rng = random.Random()
    seen: set[int] = set()
    for _ in range(8):
        proc = subprocess.Popen(
            [sys.executable, "-c", CRASH_LOOP, str(path), str(temp_home / "backups")],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env_for_subprocess(temp_home),
        )
        try:
            assert proc.stdout is not None
            assert proc.stdout.readline() == "ready\n", proc.stderr.read() if proc.stderr else ""
            threading.Event().wait(rng.uniform(0, 0.15))
            proc.send_signal(signal.SIGKILL)
        finally:
            proc.wait(30)
            if proc.stdout:
                proc.stdout.close()
            if proc.stderr:
                proc.stderr.close()
        assert proc.returncode == -signal.SIGKILL
        doc = json.loads(path.read_text())
        n = doc["n"]
        assert doc == {"keep": "me", "n": n, "pad": "x" * (n * 7919 % 20000)}
        assert n >= 3
        seen.add(n)
        for b in BackupStore(temp_home / "backups").list("t"):
            json.loads(b.file.read_text())  # every indexed backup is a whole file too
    # After the crashes, one normal write cleans up whatever temp files a kill left.
    result = Writer(BackupStore(temp_home / "backups", keep=3)).apply(
        "t", json_target(path, lambda d: {**d, "n": -1}, secret_keys=())
    )
    assert result.error is None
    assert _tmp_files(path.parent) == []
    assert len(BackupStore(temp_home / "backups").list("t")) <= 3
