"""The one writer against other programs saving the same file at the same time, with real processes.

- An in-place (truncate-then-write) saver racing many writes: conduit never merges from a half-saved file,
  never writes over one, and never keeps a blank or unparseable backup; the saver's last document survives.
- A file that stays blank or unparseable is skipped with an error naming it; a restore refuses such a backup.
- A save that lands between conduit's last check and its swap (rename-style or in place) is put back and
  merged, never replaced (``conduit.adapters.writer.exchange``).
- A writer killed mid-write leaves a temp file that the next ``conduit sync`` removes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers.isolation import env_for_subprocess
from helpers.toolfiles import write_profile

from conduit.adapters.formats.jsonfile import json_target
from conduit.adapters.writer import apply as writer_mod
from conduit.adapters.writer import exchange as exchange_mod
from conduit.adapters.writer.apply import Writer
from conduit.adapters.writer.backups import BackupStore
from conduit.errors import ToolFileError
from conduit.fileio import TMP_MARK

IN_PLACE_SAVER = textwrap.dedent(
    """
    import json, sys, time
    path, n = sys.argv[1], int(sys.argv[2])
    keys = {}
    for i in range(1, n + 1):
        keys[f"k{i % 40}"] = i
        text = json.dumps({"owner": "other", "n": i, "keys": keys, "pad": "x" * (i * 37 % 4000)}, indent=2) + "\\n"
        with open(path, "w") as fh:      # truncate, then write in two parts: empty, then half, then whole
            time.sleep(0.0005)
            fh.write(text[: len(text) // 2])
            fh.flush()
            time.sleep(0.0005)
            fh.write(text[len(text) // 2 :])
        time.sleep(0.001)
    print(json.dumps(keys), flush=True)
    """
)


def _tmp_files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if TMP_MARK in p.name)


def _recording(seen: list[dict[str, Any]]) -> Callable[[dict[str, Any]], dict[str, Any]]:
    def transform(doc: dict[str, Any]) -> dict[str, Any]:
        seen.append(json.loads(json.dumps(doc)))
        doc.setdefault("env", {})["ANTHROPIC_MODEL"] = "m-conduit"
        return doc

    return transform


def test_in_place_saver_racing_many_writes_loses_nothing(temp_home: Path) -> None:
    path = temp_home / ".claude" / "settings.json"
    path.parent.mkdir()
    path.write_text('{"owner": "other", "n": 0, "keys": {}}\n')
    store = BackupStore(temp_home / "backups", keep=1000)
    saver = subprocess.Popen([sys.executable, "-c", IN_PLACE_SAVER, str(path), "1500"], stdout=subprocess.PIPE,
                             text=True, env=env_for_subprocess(temp_home))
    merged_from: list[dict[str, Any]] = []
    errors: list[str] = []
    writes = 0
    try:
        while saver.poll() is None and writes < 5000:
            result = Writer(store).apply("claude_code", json_target(path, _recording(merged_from), secret_keys=()))
            writes += 1
            if result.error:
                errors.append(result.error)
    finally:
        out, _ = saver.communicate(timeout=60)
    assert saver.returncode == 0
    last_keys = json.loads(out)
    # Conduit never rendered from a half-saved document: every one it merged from is the saver's whole one.
    assert merged_from and all(d.get("owner") == "other" and "n" in d for d in merged_from), \
        [d for d in merged_from if "n" not in d][:3]
    backups = store.list("claude_code")
    assert backups, "no write happened during the race"
    for b in backups:  # every restore point is a whole file
        data = b.file.read_bytes()
        assert data.strip() and json.loads(data)["owner"] == "other", b.id
    # The saver's last document is all there, before and after one more sync.
    doc = json.loads(path.read_text())
    assert doc["keys"] == last_keys and doc["n"] == 1500
    final = Writer(store).apply("claude_code", json_target(path, _recording([]), secret_keys=()))
    assert final.error is None
    doc = json.loads(path.read_text())
    assert doc["keys"] == last_keys and doc["env"] == {"ANTHROPIC_MODEL": "m-conduit"}
    assert _tmp_files(path.parent) == []
    assert all("empty" in e or "not valid JSON" in e or "kept changing" in e for e in errors), errors[:3]


@pytest.mark.parametrize("text", ["", "\n  \n", '{"owner": "other", "keys": {"k1"'])
def test_a_file_that_stays_blank_or_half_saved_is_skipped_and_left_alone(temp_home: Path, text: str) -> None:
    path = temp_home / "settings.json"
    path.write_text(text)
    before = path.stat()
    store = BackupStore(temp_home / "backups")
    result = Writer(store).apply("claude_code", json_target(path, _recording([]), secret_keys=()))
    assert result.error is not None and str(path) in result.error and not result.changed
    assert ("empty" in result.error and "delete it" in result.error) if not text.strip() else \
        "not valid JSON" in result.error
    after = path.stat()
    assert path.read_text() == text and (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert store.list("claude_code") == []


def test_a_file_emptied_for_a_moment_is_waited_for(temp_home: Path) -> None:
    path = temp_home / "settings.json"
    path.write_text("")
    merged_from: list[dict[str, Any]] = []
    calls = [0]
    real_sleep = writer_mod.time.sleep

    def sleep(s: float) -> None:  # the other program finishes its save during conduit's first wait
        calls[0] += 1
        if calls[0] == 1:
            path.write_text('{"owner": "other"}\n')
        real_sleep(s)

    writer_mod.time.sleep = sleep  # type: ignore[assignment]
    try:
        result = Writer(BackupStore(temp_home / "b")).apply("t", json_target(path, _recording(merged_from),
                                                                           secret_keys=()))
    finally:
        writer_mod.time.sleep = real_sleep  # type: ignore[assignment]
    assert result.error is None and result.changed
    assert merged_from == [{"owner": "other"}]
    assert json.loads(path.read_text()) == {"owner": "other", "env": {"ANTHROPIC_MODEL": "m-conduit"}}


def test_a_missing_file_is_still_created(temp_home: Path) -> None:
    path = temp_home / "new" / "settings.json"
    result = Writer(BackupStore(temp_home / "b")).apply("t", json_target(path, _recording([]), secret_keys=()))
    assert result.error is None and json.loads(path.read_text()) == {"env": {"ANTHROPIC_MODEL": "m-conduit"}}


def test_restore_refuses_a_blank_or_unparseable_backup_and_takes_none_of_a_blank_file(temp_home: Path) -> None:
    path = temp_home / "settings.json"
    store = BackupStore(temp_home / "backups")
    for bad in (b"", b'{"half": '):
        path.write_text('{"good": 1}\n')
        b = store.save_bytes("claude_code", path, bad, mode=0o600, batch=f"old-{len(bad)}")
        with pytest.raises(ToolFileError, match="no restore point"):
            store.restore("claude_code", b.id)
        with pytest.raises(ToolFileError, match="no restore point"):
            store.restore("claude_code")  # the newest batch holds it
        assert path.read_text() == '{"good": 1}\n'
        store.forget(b)
    # A good backup restores over a file left empty, and the empty file is no backup of its own.
    good = store.save_bytes("claude_code", path, b'{"good": 2}\n', mode=0o600, batch="good")
    path.write_text("")
    assert store.restore("claude_code", good.id) == [path]
    assert path.read_text() == '{"good": 2}\n'
    assert [b.id for b in store.list("claude_code")] == [good.id]


# ------------------------------------------------------------------- a save between the last check and the swap


def _save_before_the_swap(monkeypatch: pytest.MonkeyPatch, save: Callable[[], None]) -> list[int]:
    """Make another program's ``save`` happen just before the writer's first swap, after its last check."""
    real = exchange_mod.exchange
    done: list[int] = []

    def exchange(tmp: Path, path: Path) -> bool:
        if not done:
            done.append(1)
            save()
        return real(tmp, path)

    monkeypatch.setattr(exchange_mod, "exchange", exchange)
    return done


@pytest.mark.parametrize("how", ["rename", "in place"])
def test_a_save_between_the_last_check_and_the_swap_is_merged_not_replaced(
        temp_home: Path, monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    path = temp_home / "settings.json"
    path.write_text('{"owner": "other", "n": 1}\n')
    theirs = '{"owner": "other", "n": 2, "hooks": {"Stop": "notify"}}\n'

    def save() -> None:
        if how == "rename":
            tmp = path.with_name("settings.json.tmp")
            tmp.write_text(theirs)
            os.replace(tmp, path)
        else:
            with open(path, "w") as fh:
                fh.write(theirs)

    done = _save_before_the_swap(monkeypatch, save)
    merged_from: list[dict[str, Any]] = []
    result = Writer(BackupStore(temp_home / "b")).apply("t", json_target(path, _recording(merged_from),
                                                                       secret_keys=()))
    assert done and result.error is None and result.changed
    assert json.loads(path.read_text()) == {**json.loads(theirs), "env": {"ANTHROPIC_MODEL": "m-conduit"}}
    assert [d["n"] for d in merged_from] == [1, 2]
    assert result.backup is not None and json.loads(result.backup.read_text())["n"] == 2
    assert _tmp_files(temp_home) == []


# ---------------------------------------------------------------------------------- a writer killed mid-write

STUCK_WRITER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from conduit.adapters.writer import apply as writer
    from conduit.adapters.writer.backups import BackupStore
    from conduit.adapters.formats.jsonfile import json_target

    def stuck(*args):  # the temp file is filled; the process dies before it is put in place
        print("ready", flush=True)
        time.sleep(60)

    writer.exchange = stuck
    writer.os.replace = stuck
    path = Path(sys.argv[1])
    writer.Writer(BackupStore(Path(sys.argv[2]))).apply(
        "claude_code", json_target(path, lambda d: {**d, "env": {"ANTHROPIC_MODEL": "x"}}, secret_keys=()))
    """
)


def test_temp_file_of_a_writer_killed_mid_write_is_removed_by_the_next_sync(temp_home: Path) -> None:
    write_profile(temp_home, tools=("claude_code",))
    settings = temp_home / ".claude" / "settings.json"
    settings.parent.mkdir()
    settings.write_text('{"mine": true}\n')
    proc = subprocess.Popen([sys.executable, "-c", STUCK_WRITER, str(settings), str(temp_home / "b")],
                            stdout=subprocess.PIPE, text=True, env=env_for_subprocess(temp_home))
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        assert len(_tmp_files(settings.parent)) == 1
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(30)
        if proc.stdout:
            proc.stdout.close()
    assert proc.returncode == -signal.SIGKILL
    run = subprocess.run([sys.executable, "-m", "conduit.daemon.cli", "sync"], capture_output=True, text=True,
                         env=env_for_subprocess(temp_home), timeout=60, cwd=temp_home)
    assert run.returncode == 0, run.stdout + run.stderr
    assert _tmp_files(settings.parent) == []
    doc = json.loads(settings.read_text())
    assert doc["mine"] is True and doc["env"]["ANTHROPIC_MODEL"] == "claude-sonnet-4-20250514"
