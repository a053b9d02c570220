"""`conduit mcp list --probe`'s reader of a tool's listing command (``conduit.daemon.sync.mcpprobe``), against
real child processes standing in for ``claude`` on PATH: the names it prints are found (a longer name that
contains one is not it), a command that hangs is killed at the deadline with its whole process group, and a
missing command is said in words. The real tools' own listings are judged in the real-tool tier."""

from __future__ import annotations

from pathlib import Path

import psutil

from conduit.adapters.base import Env
from conduit.daemon.sync.mcpprobe import probe_listing


def _fake(home: Path, body: str) -> Env:
    bin_dir = home / "bin"
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / "claude"
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(0o755)
    return Env({"HOME": str(home), "PATH": f"{bin_dir}:/usr/bin:/bin"}, cwd=home)


def test_names_found_in_the_output(temp_home: Path) -> None:
    env = _fake(temp_home, 'echo "files: /usr/bin/x - Connected"\necho "web-2: http://h/mcp (HTTP) - Failed"\n')
    got = probe_listing("claude_code", ["files", "web", "web-2"], env)
    assert got.problem is None and got.seen == {"files", "web-2"}


def test_a_hanging_listing_is_killed_with_its_children(temp_home: Path) -> None:
    env = _fake(temp_home, "sleep 300 &\necho $! > \"$HOME/child\"\nsleep 300\n")
    got = probe_listing("claude_code", ["files"], env, timeout_s=1)
    assert got.problem is not None and "ran past" in got.problem
    child = int((temp_home / "child").read_text())
    try:  # SIGKILL is delivered at once; the exit itself may take a moment on a loaded machine
        gone, _ = psutil.wait_procs([psutil.Process(child)], timeout=10)
        assert gone or psutil.Process(child).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        pass


def test_missing_command_and_exit_status(temp_home: Path) -> None:
    env = Env({"HOME": str(temp_home), "PATH": str(temp_home / "nowhere")}, cwd=temp_home)
    assert "not on PATH" in (probe_listing("claude_code", ["files"], env).problem or "")
    env = _fake(temp_home, "echo files\nexit 3\n")
    got = probe_listing("claude_code", ["files"], env)
    assert got.seen == {"files"} and "status 3" in (got.problem or "")


def test_a_server_left_running_by_the_listing_does_not_hold_the_probe(temp_home: Path) -> None:
    """The listing command exits at once but leaves a process of its own session holding its output: the probe
    waits for the command, not for the end of its output, and reads what it printed."""
    env = _fake(temp_home, 'echo "files: /usr/bin/x - Connected"\nsetsid sleep 30 &\necho $! > "$HOME/stray.pid"\n'
                           'exit 0\n')
    got = probe_listing("claude_code", ["files"], env, timeout_s=10)
    assert got.problem is None and got.seen == {"files"}
    stray = psutil.Process(int((temp_home / "stray.pid").read_text()))
    assert stray.is_running()  # the probe came back while the stray still held the output: it waited for the command
    stray.kill()
