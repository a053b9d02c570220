"""Running a ``command`` key source (``key = { command = "pass show x" }``) so that nothing can hang it, exhaust
memory, outlive it or leak through it.

- **Time**: the command has ``timeout_s`` seconds; then its whole process group is killed.
- **Output**: stdout is read incrementally and never past ``KEY_MAX_BYTES`` (64 KiB): ``command = "yes"`` is
  stopped at the cap, not buffered without bound.
- **Processes**: the command starts in a session of its own (``start_new_session``), and its process group is
  killed with SIGKILL when conduit stops reading, whatever happened. Once the command itself (``/bin/sh``) has
  exited, conduit reads for ``EXIT_GRACE_S`` more seconds only, so a daemonized child that keeps stdout open
  (``(sleep 1000 &); echo key``) cannot hold conduit until it exits.
- **Nothing shown**: stderr goes to ``/dev/null`` (a failing password manager may print the key there, and the
  daemon's stderr is its log) and stdout is never quoted: an error gives the exit status and a hint only.

The group is killed *before* the leader is reaped (its exit is noticed with ``waitid(WNOWAIT)``), so the
process group id cannot have been reused by an unrelated process when the signal is sent.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import time
from collections.abc import Mapping
from typing import Literal

from conduit.errors import KeyError_
from conduit.fileio import KEY_MAX_BYTES

__all__ = ["EXIT_GRACE_S", "run_key_command"]

EXIT_GRACE_S = 0.5
"""Seconds conduit keeps reading a command's stdout after the command itself exited (a child may hold it)."""

_POLL_S = 0.02  # seconds between checks of whether the command exited, while its stdout stays silent
_REAP_S = 5.0  # seconds to wait for the killed leader to be reaped (SIGKILL cannot be ignored)

Outcome = Literal["done", "held", "timeout", "too_big"]

_RUN_HINT = "run it yourself to see why (conduit never shows what a key command prints: it may hold the key)"


def run_key_command(command: str, *, described: str, environ: Mapping[str, str], timeout_s: float,
                    max_bytes: int = KEY_MAX_BYTES) -> bytes:
    """Run ``command`` through ``/bin/sh -c`` and return its standard output (see the module docstring).

    Args:
        command: the shell command of the key source.
        described: the source in words for messages (``command `pass show x```).
        environ: the command's environment.
        timeout_s: seconds the command may run; then its process group is killed.
        max_bytes: cap on its standard output, bytes (default ``KEY_MAX_BYTES``, 64 KiB).

    Returns:
        what the command printed on stdout, at most ``max_bytes`` bytes.

    Raises:
        KeyError_: it could not be started, ran past ``timeout_s``, printed more than ``max_bytes``, exited
            non-zero or was killed by a signal. The message holds the exit status or the signal only, never
            anything the command printed.
    """
    try:
        proc = subprocess.Popen(["/bin/sh", "-c", command], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, env=dict(environ), start_new_session=True)
    except OSError as exc:
        raise KeyError_(f"{described} could not be started: {exc.strerror or exc}",
                        hint="check that /bin/sh exists and the command is right") from None
    assert proc.stdout is not None
    try:
        out, outcome = _collect(proc.pid, proc.stdout.fileno(), timeout_s, max_bytes)
    finally:
        _kill_group(proc.pid)
        proc.stdout.close()
        returncode = _reap(proc)
        _reap_orphans(proc.pid)
    if outcome == "timeout":
        raise KeyError_(f"{described} did not finish within {timeout_s:g} s",
                        hint="run it by hand; a password manager may be waiting for an unlock or a prompt")
    if outcome == "too_big":
        raise KeyError_(f"{described} printed more than {max_bytes} bytes; a key is one line",
                        hint="make it print only the key")
    if returncode != 0:
        raise KeyError_(f"{described} {_how(returncode)}", hint=_RUN_HINT)
    return out


def _how(returncode: int) -> str:
    if returncode > 0:
        return f"exited with status {returncode}"
    try:
        return f"was killed by {signal.Signals(-returncode).name}"
    except ValueError:
        return f"was killed by signal {-returncode}"


def _exited(pid: int) -> bool:
    """Whether child ``pid`` has exited, without reaping it (its pid, and so its group id, stay reserved)."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _collect(pid: int, fd: int, timeout_s: float, max_bytes: int) -> tuple[bytes, Outcome]:
    """Read ``fd`` (the command's stdout) until end of file with the command exited, the grace after its exit,
    the deadline or the cap; returns what was read and which of those ended it."""
    os.set_blocking(fd, False)
    buf = bytearray()
    deadline = time.monotonic() + timeout_s
    exited_at: float | None = None
    eof = False
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while True:
            now = time.monotonic()
            if exited_at is None and _exited(pid):
                exited_at = now
            if exited_at is not None and (eof or now - exited_at >= EXIT_GRACE_S):
                return bytes(buf), "done" if eof else "held"
            if exited_at is None and now >= deadline:
                return bytes(buf), "timeout"
            wait = min(_POLL_S, max(deadline - now, 0.0))
            if eof:
                time.sleep(wait)  # stdout is closed but the command still runs: wait for its exit
                continue
            if not sel.select(wait):
                continue
            try:
                chunk = os.read(fd, max_bytes + 1 - len(buf))
            except BlockingIOError:
                continue
            if not chunk:
                eof = True
                sel.unregister(fd)
                continue
            buf += chunk
            if len(buf) > max_bytes:
                return bytes(buf[:max_bytes]), "too_big"


def _kill_group(pid: int) -> None:
    """SIGKILL the command's process group (its id is the leader's pid: ``start_new_session``)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _reap_orphans(pgid: int) -> None:
    """Reap the killed members of group ``pgid`` that became this process's children: in a child subreaper
    (the agent: ``PR_SET_CHILD_SUBREAPER``) a command's orphans are re-parented here, and would stay zombies.
    Bounded by ``_REAP_S``; returns at once where there are none (``ChildProcessError``)."""
    deadline = time.monotonic() + _REAP_S
    while time.monotonic() < deadline:
        try:
            pid, _ = os.waitpid(-pgid, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            time.sleep(_POLL_S)  # killed, not yet dead


def _reap(proc: subprocess.Popen[bytes]) -> int:
    """The leader's exit status, reaping it (it was just sent SIGKILL, so the wait is short)."""
    try:
        return proc.wait(timeout=_REAP_S)
    except subprocess.TimeoutExpired:  # not in its own group any more (cannot happen to a session leader)
        proc.kill()
        return proc.wait()
