"""``conduit mcp list --probe``: ask each installed tool, through its own listing command
(``McpSupport.list_argv``: ``claude mcp list``, ``codex mcp list``, ``gemini mcp list``...), which servers it sees.

Bounded: each command gets ``timeout_s`` seconds, stdin closed, in a session of its own whose whole process group
is killed afterwards (a listing command that starts the stdio servers to check them leaves nothing behind).
Only server *names* are looked for in what it prints; the output itself is never shown or stored (it may name a
header or a command line).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass

from conduit.adapters.base import Env
from conduit.adapters.registry import ADAPTERS

__all__ = ["LISTING_TIMEOUT_S", "Listing", "probe_listing"]

LISTING_TIMEOUT_S = 60.0
"""Seconds one listing command may run (``claude mcp list`` checks each server's health: a few seconds each)."""
_OUTPUT_CAP = 1 << 20


@dataclass
class Listing:
    """What one tool's listing command said: ``seen`` (names found in its output), or ``problem`` in words
    (not installed, timed out, exit status) with ``seen`` empty."""

    seen: set[str]
    problem: str | None = None


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def probe_listing(tool: str, names: Iterable[str], env: Env, *, timeout_s: float = LISTING_TIMEOUT_S) -> Listing:
    """Run ``tool``'s listing command (its environment: ``env.environ``, its folder: ``env.cwd``) and say which
    of ``names`` it lists. Never raises."""
    support = ADAPTERS[tool].mcp
    if support is None or not support.list_argv:
        return Listing(set(), "the tool has no listing command")
    exe = shutil.which(support.list_argv[0], path=env.environ.get("PATH"))
    if exe is None:
        return Listing(set(), f"`{support.list_argv[0]}` is not on PATH")
    # Output goes to a file, not a pipe: a server the listing command started may leave its session and keep a
    # pipe open for good; the wait is for the command itself, bounded.
    with tempfile.TemporaryFile() as sink:
        try:
            proc = subprocess.Popen([exe, *support.list_argv[1:]], stdin=subprocess.DEVNULL, stdout=sink,
                                    stderr=subprocess.STDOUT, env=dict(env.environ), cwd=env.cwd,
                                    start_new_session=True)
        except OSError as exc:
            return Listing(set(), f"`{' '.join(support.list_argv)}` could not start: {exc.strerror or exc}")
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc.pid)
            proc.wait()
            return Listing(set(), f"`{' '.join(support.list_argv)}` ran past {timeout_s:.0f} s")
        finally:
            _kill_group(proc.pid)
        sink.seek(0)
        out = sink.read(_OUTPUT_CAP)
    text = out[:_OUTPUT_CAP].decode("utf-8", errors="replace")
    seen = {n for n in names if re.search(rf"(?<![\w-]){re.escape(n)}(?![\w-])", text)}
    if proc.returncode != 0:
        return Listing(seen, f"`{' '.join(support.list_argv)}` exited with status {proc.returncode}")
    return Listing(seen)
