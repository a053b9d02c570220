"""One ``conduit daemon`` per user: the lock file ``state_dir()/daemon.lock``, and asking who holds it.

The running daemon holds an exclusive ``flock`` on the file for its whole life and writes its pid into it.
Others (``conduit sync``, ``doctor``, ``key rotate``) test it with a non-blocking shared ``flock``: the kernel
drops the lock when the daemon exits, even on ``kill -9``, so a stale file never counts. (``conduit.fileio.locked``
is the bounded *wait* for a short critical section; this lock is held, not waited for, so it stays a plain
non-blocking ``flock``.)

The file's first line is the pid; while the loop handles a batch, a second line ``busy <t>`` says since when
(``CLOCK_MONOTONIC`` seconds) it has made no progress (``conduit.daemon.sync.progress``), which ``daemon_activity``
reads for doctor. A state directory that is full or read-only must not keep the daemon from running: when the
lock file cannot be created, the daemon locks the state directory itself instead (readers check both), and a pid
it cannot write is only a warning.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from conduit.daemon.config import paths
from conduit.daemon.sync.progress import monotonic_s
from conduit.errors import ConduitError
from conduit.fileio import make_private_dirs

__all__ = ["DaemonActivity", "acquire_lock", "daemon_activity", "lock_path", "running_daemon_pid"]

log = logging.getLogger("conduit.daemon")

_HEAD_BYTES = 128  # what is read of the lock file: a pid line and the busy line


def lock_path() -> Path:
    """``state_dir()/daemon.lock``: held (``flock``) by the running daemon, and holding its pid."""
    return paths.state_dir() / "daemon.lock"


def _read_head(fd: int) -> list[str]:
    return os.pread(fd, _HEAD_BYTES, 0).decode("ascii", "replace").splitlines()


def _read_pid(fd: int) -> str:
    lines = _read_head(fd)
    return lines[0].strip() if lines else ""


@dataclass(frozen=True)
class DaemonActivity:
    """Who holds the daemon lock and what its loop is doing.

    Attributes:
        pid: the daemon's pid; -1 when it holds the lock but its pid cannot be read (being written, or a full
            state directory).
        stalled_for_s: seconds since the loop's last progress while it handles a batch (``busy`` marker), or
            None when it is idle between batches (or the marker cannot be read).
    """

    pid: int
    stalled_for_s: float | None


def _held(fd: int) -> bool:
    """True when another open file holds an exclusive ``flock`` on ``fd``'s file (probed with a shared one)."""
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as exc:
        return exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN)
    fcntl.flock(fd, fcntl.LOCK_UN)
    return False


def _dir_held(directory: Path) -> bool:
    """True when a daemon holds the fallback lock on the state directory itself."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        return _held(fd)
    finally:
        os.close(fd)


def daemon_activity() -> DaemonActivity | None:
    """The running ``conduit daemon`` (state directory) and how long its loop has been stuck, or None when no
    daemon runs. Source: the lock file (``flock`` held, pid, ``busy <CLOCK_MONOTONIC s>`` line)."""
    try:
        fd = os.open(lock_path(), os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return DaemonActivity(pid=-1, stalled_for_s=None) if _dir_held(lock_path().parent) else None
    except OSError:
        return None
    try:
        if not _held(fd):
            return DaemonActivity(pid=-1, stalled_for_s=None) if _dir_held(lock_path().parent) else None
        lines = _read_head(fd)
    finally:
        os.close(fd)
    pid = lines[0].strip() if lines else ""
    stalled: float | None = None
    busy = lines[1].split() if len(lines) > 1 else []
    if len(busy) == 2 and busy[0] == "busy":
        try:
            stalled = max(0.0, monotonic_s() - float(busy[1]))
        except ValueError:
            stalled = None
    return DaemonActivity(pid=int(pid) if pid.isdigit() else -1, stalled_for_s=stalled)


def running_daemon_pid() -> int | None:
    """The pid of the ``conduit daemon`` running for this user (state directory), or None.

    -1 when a daemon holds the lock but its pid cannot be read (it is still writing it, or the state directory
    is full).
    """
    act = daemon_activity()
    return act.pid if act is not None else None


def acquire_lock() -> int:
    """Take the single-instance lock and write our pid into it; returns the fd (keep it open: closing it, or
    the process ending, releases the lock).

    When the lock file cannot be created (a full or read-only state directory), the state directory itself is
    locked instead, with a warning: the daemon still runs, and readers still see it (pid unknown).

    Raises:
        ConduitError: another daemon holds it (its pid in the message).
        OSError: the state directory cannot be created or opened.
    """
    p = lock_path()
    make_private_dirs(p.parent)
    if _dir_held(p.parent):  # a daemon that could not create the lock file holds the directory
        raise _already_running("?", p)
    try:
        fd = os.open(p, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        log.warning("cannot create the lock file %s (%s): locking its directory instead", p, exc.strerror or exc)
        fd = os.open(p.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        _lock_or_refuse(fd, p)
        return fd
    _lock_or_refuse(fd, p)
    try:  # over the old bytes first, then cut: the file keeps its block, so a full disk still takes the pid
        data = f"{os.getpid()}\n".encode()
        os.pwrite(fd, data, 0)
        os.ftruncate(fd, len(data))
    except OSError as exc:  # ENOSPC, EDQUOT on a new, empty lock file: the lock holds; readers see pid -1
        log.warning("cannot write the pid into %s: %s", p, exc.strerror or exc)
    return fd


def _lock_or_refuse(fd: int, p: Path) -> None:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        try:
            other = _read_pid(fd)
        except OSError:  # the directory itself (the fallback lock) holds no pid
            other = ""
        os.close(fd)
        raise _already_running(other or "?", p) from None


def _already_running(pid: str, p: Path) -> ConduitError:
    return ConduitError(f"a conduit daemon is already running (pid {pid}; lock {p})",
                        "stop it first (`systemctl --user stop conduit-sync`), or use `conduit sync` "
                        "for a one-off sync")
