"""One ``conduit daemon`` per user: the lock file ``state_dir()/daemon.lock``, and asking who holds it.

The running daemon holds an exclusive ``flock`` on the file for its whole life and writes its pid into it.
Others (``conduit sync``, ``doctor``, ``key rotate``) test it with a non-blocking shared ``flock``: the kernel
drops the lock when the daemon exits, even on ``kill -9``, so a stale file never counts. (``conduit.fileio.locked``
is the bounded *wait* for a short critical section; this lock is held, not waited for, so it stays a plain
non-blocking ``flock``.)
"""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path

from conduit.daemon.config import paths
from conduit.errors import ConduitError
from conduit.fileio import make_private_dirs

__all__ = ["acquire_lock", "lock_path", "running_daemon_pid"]

_PID_BYTES = 32  # what is read of the lock file: a pid and a newline


def lock_path() -> Path:
    """``state_dir()/daemon.lock``: held (``flock``) by the running daemon, and holding its pid."""
    return paths.state_dir() / "daemon.lock"


def _read_pid(fd: int) -> str:
    return os.pread(fd, _PID_BYTES, 0).decode("ascii", "replace").strip()


def running_daemon_pid() -> int | None:
    """The pid of the ``conduit daemon`` running for this user (state directory), or None.

    -1 when a daemon holds the lock but its pid cannot be read (it is still writing it).
    """
    try:
        fd = os.open(lock_path(), os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                return None
            data = _read_pid(fd)
            return int(data) if data.isdigit() else -1
        return None
    finally:
        os.close(fd)


def acquire_lock() -> int:
    """Take the single-instance lock and write our pid into it; returns the fd (keep it open: closing it, or
    the process ending, releases the lock).

    Raises:
        ConduitError: another daemon holds it (its pid in the message).
        OSError: the state directory cannot be created or the lock file opened.
    """
    p = lock_path()
    make_private_dirs(p.parent)
    fd = os.open(p, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        other = _read_pid(fd)
        os.close(fd)
        raise ConduitError(f"a conduit daemon is already running (pid {other or '?'}; lock {p})",
                           "stop it first (`systemctl --user stop conduit-sync`), or use `conduit sync` "
                           "for a one-off sync") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd
