"""A save that lands in the file conduit just replaced (``conduit.adapters.writer.latesaves``), with a real
process that saves in place: it opens the file *before* conduit's swap and truncates and writes *after* the
swap's check, so its bytes go into the displaced file. Without the registry that save is lost (the test below
shows it); with it the save is back at the path after the grace, and a newer save in between wins.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from helpers.isolation import env_for_subprocess

from conduit.adapters.formats.jsonfile import json_target
from conduit.adapters.writer import latesaves as late_mod
from conduit.adapters.writer.apply import Writer
from conduit.adapters.writer.backups import BackupStore
from conduit.adapters.writer.latesaves import GRACE_S, MAX_WAIT_S, LateSaves

# Opens the file for an in-place save, says "open", waits for a line, then truncates and writes it (as bench/
# soak.py's other program does). With "slow", it writes half, waits for another line, then the rest.
LATE_SAVER = textwrap.dedent(
    """
    import json, sys
    path, n, slow = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "slow"
    with open(path, "r+") as fh:
        print("open", flush=True)
        sys.stdin.readline()
        fh.truncate(0)
        text = json.dumps({"owner": "other", "n": n}, indent=2) + "\\n"
        fh.write(text[: len(text) // 2] if slow else text)
        fh.flush()
        if slow:
            print("half", flush=True)
            sys.stdin.readline()
            fh.write(text[len(text) // 2 :])
    print("done", flush=True)
    """
)


def _conduit_write(path: Path, home: Path) -> None:
    def transform(doc: dict[str, Any]) -> dict[str, Any]:
        doc.setdefault("env", {})["ANTHROPIC_MODEL"] = "m-conduit"
        return doc

    result = Writer(BackupStore(home / "backups")).apply("claude_code", json_target(path, transform, secret_keys=()))
    assert result.error is None and result.changed


def _start_saver(path: Path, home: Path, n: int, *, slow: bool = False) -> subprocess.Popen[str]:
    saver = subprocess.Popen([sys.executable, "-c", LATE_SAVER, str(path), str(n), "slow" if slow else "fast"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                             env=env_for_subprocess(home))
    assert saver.stdout is not None and saver.stdout.readline().strip() == "open"
    return saver


def _go(saver: subprocess.Popen[str], expect: str) -> None:
    assert saver.stdin is not None and saver.stdout is not None
    saver.stdin.write("go\n")
    saver.stdin.flush()
    assert saver.stdout.readline().strip() == expect


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> LateSaves:
    fresh = LateSaves()
    fresh.enable()
    monkeypatch.setattr(late_mod, "LATE_SAVES", fresh)
    monkeypatch.setattr("conduit.adapters.writer.apply.LATE_SAVES", fresh)
    return fresh


@pytest.fixture
def settings(temp_home: Path) -> Path:
    path = temp_home / ".claude" / "settings.json"
    path.parent.mkdir()
    path.write_text('{"owner": "other", "n": 0}\n')
    return path


def test_a_late_in_place_save_is_put_back(temp_home: Path, settings: Path, registry: LateSaves) -> None:
    for n in range(1, 21):  # twenty rounds: each one's save lands after conduit's swap
        saver = _start_saver(settings, temp_home, n)
        _conduit_write(settings, temp_home)
        _go(saver, "done")
        assert saver.wait(10) == 0
        assert json.loads(settings.read_text())["n"] != n  # lost, until the registry looks
        assert registry.next_check_in() is not None
        lines = registry.check(now=registry_due(registry))
        assert [line for line in lines if "back in place" in line], lines
        assert json.loads(settings.read_text()) == {"owner": "other", "n": n}
        assert registry.next_check_in() is None
    assert not [p.name for p in settings.parent.iterdir() if p.name != "settings.json"]


def test_a_late_save_survives_conduit_writing_the_file_again_within_the_grace(
        temp_home: Path, settings: Path, registry: LateSaves) -> None:
    """conduit's second write displaces its own first file; the person's late save, held from the first swap,
    still goes back (it was dropped as "after a newer save" although the newer save was conduit's)."""
    saver = _start_saver(settings, temp_home, 5)
    _conduit_write(settings, temp_home)
    _go(saver, "done")
    assert saver.wait(10) == 0

    def again(doc: dict[str, Any]) -> dict[str, Any]:
        doc.setdefault("env", {})["ANTHROPIC_MODEL"] = "m-conduit-2"
        return doc

    second = Writer(BackupStore(temp_home / "backups")).apply("claude_code", json_target(settings, again,
                                                                                          secret_keys=()))
    assert second.error is None and second.changed
    lines = registry.check(now=registry_due(registry))
    assert [line for line in lines if "back in place" in line], lines
    assert json.loads(settings.read_text()) == {"owner": "other", "n": 5}


def test_without_the_registry_the_save_is_lost(temp_home: Path, settings: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    off = LateSaves()  # not enabled: what a one-shot command does
    monkeypatch.setattr("conduit.adapters.writer.apply.LATE_SAVES", off)
    saver = _start_saver(settings, temp_home, 7)
    _conduit_write(settings, temp_home)
    _go(saver, "done")
    assert saver.wait(10) == 0
    assert off.check(now=1e12) == []
    assert json.loads(settings.read_text())["n"] == 0  # the race this module exists for


def test_a_half_written_late_save_is_waited_for(temp_home: Path, settings: Path, registry: LateSaves) -> None:
    saver = _start_saver(settings, temp_home, 3, slow=True)
    _conduit_write(settings, temp_home)
    _go(saver, "half")
    due = registry_due(registry)
    assert registry.check(now=due) == []  # not whole yet: held, nothing put back
    assert registry.next_check_in() is not None
    _go(saver, "done")
    assert saver.wait(10) == 0
    assert any("back in place" in line for line in registry.check(now=due))
    assert json.loads(settings.read_text()) == {"owner": "other", "n": 3}


def test_a_late_save_never_whole_is_dropped(temp_home: Path, settings: Path, registry: LateSaves) -> None:
    saver = _start_saver(settings, temp_home, 4, slow=True)
    _conduit_write(settings, temp_home)
    _go(saver, "half")
    written = settings.read_text()
    lines = registry.check(now=registry_due(registry) + MAX_WAIT_S)
    assert lines and "not put back" in lines[0]
    assert settings.read_text() == written
    _go(saver, "done")
    assert saver.wait(10) == 0


def test_a_newer_save_at_the_path_wins(temp_home: Path, settings: Path, registry: LateSaves) -> None:
    saver = _start_saver(settings, temp_home, 5)
    _conduit_write(settings, temp_home)
    _go(saver, "done")
    assert saver.wait(10) == 0
    tmp = settings.with_name(".settings.other-tmp")
    tmp.write_text('{"owner": "newest"}\n')
    tmp.replace(settings)  # another program's save by rename after the late one
    lines = registry.check(now=registry_due(registry))
    assert lines and "the newer one stays" in lines[0]
    assert json.loads(settings.read_text()) == {"owner": "newest"}


def test_an_untouched_displaced_file_is_let_go(temp_home: Path, settings: Path, registry: LateSaves) -> None:
    _conduit_write(settings, temp_home)
    due = registry_due(registry)
    assert registry.check(now=due - GRACE_S / 2) == []
    assert registry.next_check_in() is not None  # still held: the grace is not over
    assert registry.check(now=due) == []
    assert registry.next_check_in() is None
    assert json.loads(settings.read_text())["env"] == {"ANTHROPIC_MODEL": "m-conduit"}


def registry_due(registry: LateSaves) -> float:
    """A monotonic time at which everything held so far is past its grace."""
    import time

    wait = registry.next_check_in()
    assert wait is not None
    return time.monotonic() + wait + 0.001


def test_one_odd_late_save_does_not_stop_the_others(temp_home: Path, settings: Path, registry: LateSaves) -> None:
    """A late save too deep to parse (the parser's recursion limit) is dropped with a line; the next held file is
    still decided and put back, and check() never raises into the daemon's loop."""
    other = settings.with_name("other.json")
    other.write_text('{"owner": "other", "n": 0}\n')
    deep = _start_saver(settings, temp_home, 1)
    _conduit_write(settings, temp_home)
    fine = _start_saver(other, temp_home, 2)
    _conduit_write(other, temp_home)
    _go(deep, "done")
    _go(fine, "done")
    assert deep.wait(10) == 0 and fine.wait(10) == 0
    held = registry._held[0]  # the first displaced file: make its late save absurdly deep
    fd = os.open(f"/proc/self/fd/{held.fd}", os.O_WRONLY)
    os.pwrite(fd, b"[" * 200_000, 0)
    os.close(fd)
    lines = registry.check(now=registry_due(registry) + GRACE_S)  # both past their grace
    assert any("other.json" in line and "back in place" in line for line in lines), lines
    assert any("settings.json" in line and "not put back" in line for line in lines), lines
    assert json.loads(other.read_text()) == {"owner": "other", "n": 2}
    assert registry.next_check_in() is None
