"""A key made readable by someone else's save: a tool that saves its settings by temp file + rename with the
usual umask leaves conduit's key at 0644 with the same bytes; the running daemon makes it 0600 again and says
so once (conduit.daemon.sync.modes, called from conduit.daemon.sync.drift.ToolTrack). A key file readable by
others gets a warning naming ``chmod 600 PATH``."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from helpers.daemonproc import Daemon, wait_for
from helpers.toolfiles import claude_settings, write_profile

from conduit.daemon.sync.modes import tighten_keyed

KEY = "sk-test-modes-0123456789abcdef"


def _save_like_a_tool(path: Path, mode: int = 0o644) -> None:
    """The same bytes, written to a temp file with ``mode`` and renamed over ``path`` (a tool's own save)."""
    tmp = path.with_name(path.name + ".tool-tmp")
    tmp.write_bytes(path.read_bytes())
    os.chmod(tmp, mode)
    os.replace(tmp, path)


def test_tighten_keyed_only_touches_open_regular_files_that_hold_a_key(tmp_path: Path) -> None:
    holds, plain, fifo = tmp_path / "holds.json", tmp_path / "plain.json", tmp_path / "fifo"
    holds.write_text(f'{{"key": "{KEY}"}}')
    plain.write_text('{"key": "none"}')
    os.mkfifo(fifo)
    for p in (holds, plain, fifo):
        os.chmod(p, 0o644)
    said = tighten_keyed(holds, [KEY])
    assert said and "it is now 0600" in said and KEY not in said
    assert stat.S_IMODE(holds.stat().st_mode) == 0o600
    assert tighten_keyed(holds, [KEY]) is None  # once: nothing more to say
    assert tighten_keyed(plain, [KEY]) is None and stat.S_IMODE(plain.stat().st_mode) == 0o644
    assert tighten_keyed(fifo, [KEY]) is None  # never waited on
    assert tighten_keyed(tmp_path / "missing", [KEY]) is None


def test_the_daemon_tightens_a_tool_file_a_tool_saved_0644(temp_home: Path, tmp_path: Path) -> None:
    claude_settings(temp_home)
    write_profile(temp_home, key_text=KEY + "\n", tools=("claude_code",), key_delivery="copy")  # a file holding it
    settings = temp_home / ".claude" / "settings.json"
    daemon = Daemon(temp_home, tmp_path)
    try:
        daemon.start()
        assert KEY in settings.read_text() and stat.S_IMODE(settings.stat().st_mode) == 0o600
        _save_like_a_tool(settings)  # same bytes: not drift, and conduit has nothing to write
        wait_for(lambda: stat.S_IMODE(settings.stat().st_mode) == 0o600, what="settings.json made 0600 again")
        wait_for(lambda: "holds a key and was readable by others" in daemon.log(), what="the log line")
        assert daemon.log().count("holds a key and was readable") == 1
        # the key file itself made readable by others: a warning that names the fix
        keyfile = temp_home / ".config" / "conduit" / "keys" / "gw"
        os.chmod(keyfile, 0o644)
        keyfile.write_text("sk-test-modes-rotated-0123456789\n")
        wait_for(lambda: "chmod 600" in daemon.log(), what="the key file warning")
    finally:
        daemon.stop()
    assert KEY not in daemon.log()
