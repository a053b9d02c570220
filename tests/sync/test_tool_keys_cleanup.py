"""conduit's shared key files (``<config>/conduit/tool-keys/CHANNEL.key``: OpenCode's and Kilo's ``{file:...}``,
Pi's ``!cat``) go when no tool reads them any more, and stay while any tool file names one (a tool removed from
the profile keeps pointing there). The real CLI in subprocesses (``conduit sync`` runs ``rest_after_sync``),
real files under a temporary HOME."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from helpers.toolfiles import write_profile

from conduit.adapters.base import Env
from conduit.daemon.sync.engine import SyncReport
from conduit.daemon.sync.toolkeys import remove_stale_tool_keys

KEY = "sk-toolkeys-0123456789abcdefXYZ"
TOOLS = ('[tools.opencode]\ncreate = true\n{oc}[tools.kilo]\ncreate = true\n{oc}'
         '[tools.pi]\ncreate = true\n{pi}')


def _cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, HOME=str(home), NO_COLOR="1", COLUMNS="200")
    env.pop("XDG_CONFIG_HOME", None)
    return subprocess.run([sys.executable, "-m", "conduit.daemon.cli", *args], capture_output=True, text=True,
                          env=env, timeout=120)


def _profile(home: Path, *, oc: str = "", pi: str = "", tools: str | None = None) -> None:
    extra = TOOLS.format(oc=oc, pi=pi) if tools is None else tools
    write_profile(home, key_text=KEY + "\n", tools=(), extra=extra)


def _key_files(home: Path) -> list[str]:
    folder = home / ".config" / "conduit" / "tool-keys"
    return sorted(p.name for p in folder.glob("*.key")) if folder.is_dir() else []


def test_the_shared_key_file_goes_when_the_last_tool_stops_reading_it(temp_home: Path) -> None:
    _profile(temp_home)
    assert _cli(temp_home, "sync").returncode == 0
    assert _key_files(temp_home) == ["gw.key"]
    _profile(temp_home, oc='key_source = "env"\n')  # OpenCode and Kilo by variable; Pi still reads the file
    assert _cli(temp_home, "sync").returncode == 0
    assert _key_files(temp_home) == ["gw.key"]
    _profile(temp_home, oc='key_source = "env"\n', pi='key_source = "inline"\n')
    r = _cli(temp_home, "sync")
    assert r.returncode == 0, r.stdout + r.stderr
    assert _key_files(temp_home) == []
    hits = [p for p in temp_home.rglob("*") if p.is_file() and KEY.encode() in p.read_bytes()]
    assert sorted(p.name for p in hits) == ["gw", "models.json"]  # the key's own file and Pi's inline copy


def test_a_key_file_a_tool_file_still_names_is_kept(temp_home: Path) -> None:
    """A tool taken out of the profile is no longer synced, but its file still points at the key file."""
    _profile(temp_home)
    assert _cli(temp_home, "sync").returncode == 0
    _profile(temp_home, tools="[tools.opencode]\ncreate = true\nkey_source = \"env\"\n")
    assert _cli(temp_home, "sync").returncode == 0
    assert _key_files(temp_home) == ["gw.key"]  # Kilo's and Pi's files still name it


def test_nothing_is_removed_after_a_sync_in_which_a_tool_failed(temp_home: Path) -> None:
    folder = temp_home / ".config" / "conduit" / "tool-keys"
    folder.mkdir(parents=True)
    (folder / "old.key").write_text(KEY)
    from conduit.daemon.sync.engine import ToolReport

    failed = SyncReport(tools=[ToolReport(tool="opencode", display="OpenCode", status="error")], notices=[])
    assert remove_stale_tool_keys(failed, Env()) == []
    assert remove_stale_tool_keys(SyncReport(tools=[], notices=[]), Env()) == [folder / "old.key"]


def test_a_quoted_path_still_counts_as_named(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Pi writes ``!cat '<path>'`` shell-quoted: a config folder with a quote in its name splits the path. Pi,
    taken out of the profile, is the only tool still naming the key file."""
    home = tmp_path / "o'brien"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    _profile(home)
    assert _cli(home, "sync").returncode == 0
    env_only = '[tools.opencode]\ncreate = true\nkey_source = "env"\n[tools.kilo]\ncreate = true\nkey_source = "env"\n'
    _profile(home, tools=env_only)
    assert _cli(home, "sync").returncode == 0
    assert _key_files(home) == ["gw.key"]
