"""Claiming the agent's Unix socket: the directory, the lock, a stale socket, the listening socket, peer uids.

docs/design.md "The agent's socket": the directory is 0700 when conduit creates it (or when it is conduit's
runtime dir), the socket 0600, and each request's peer uid is checked with ``SO_PEERCRED`` (``peer_uid``;
the check itself is the server's middleware). A lock file next to the socket (``agent.sock.lock``, holding
the pid) makes a second agent refuse to start; a socket left by a crashed agent (nobody holds the lock,
nobody answers a connect) is replaced.

Errors raised: ``AgentAlreadyRunning`` (exit 1) and ``ConduitError`` for an unusable socket path.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import resource
import socket
import stat
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from conduit.daemon.config import paths
from conduit.errors import ConduitError

log = logging.getLogger("conduit.agent")

SUN_PATH_MAX = 107  # sockaddr_un.sun_path is 108 bytes on Linux, including the NUL


class AgentAlreadyRunning(ConduitError):
    """Another agent serves (or holds the lock for) this socket. Exit code 1."""


def peer_uid(sock: Any) -> int | None:
    """The uid of the process at the other end of a connected Unix socket (``SO_PEERCRED``, ``struct
    ucred {pid, uid, gid}`` of socket(7)), or None when the kernel cannot tell (not a Unix socket, closed)."""
    try:
        raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except (OSError, AttributeError):
        return None
    _pid, uid, _gid = struct.unpack("3i", raw)
    return int(uid)


def _socket_answers(path: Path) -> bool:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(1.0)
    try:
        s.connect(str(path))
        return True
    except OSError:
        return False
    finally:
        s.close()


@dataclass
class ClaimedSocket:
    """A listening socket plus the lock that makes it ours; ``release`` removes both."""

    sock: socket.socket
    path: Path
    lock_fd: int
    inode: int
    released: bool = False

    def release(self) -> None:
        """Close the socket, unlink it if it is still ours, and drop the lock. Idempotent: a second call must
        not close an unrelated file descriptor that reused the lock's number."""
        if self.released:
            return
        self.released = True
        with contextlib.suppress(OSError):
            self.sock.close()
        with contextlib.suppress(OSError):
            if os.lstat(self.path).st_ino == self.inode:
                os.unlink(self.path)
        with contextlib.suppress(OSError):
            os.close(self.lock_fd)


def _check_length(path: Path) -> None:
    n = len(os.fsencode(path))
    if n > SUN_PATH_MAX:
        raise ConduitError(f"socket path {path} is {n} bytes; Unix sockets allow {SUN_PATH_MAX}",
                           hint="choose a shorter --socket path or XDG_RUNTIME_DIR")


def _own_directory(d: Path) -> None:
    """Create ``d`` (0700) or check that it is a directory of ours; tighten it to 0700 when conduit made it."""
    created = not d.exists()
    try:
        d.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise ConduitError(f"cannot create the agent's directory {d}: {exc.strerror}",
                           hint="check XDG_RUNTIME_DIR or pass --socket PATH") from exc
    st = os.lstat(d)
    if st.st_uid != os.getuid() or not stat.S_ISDIR(st.st_mode):
        # Someone else made the directory first (the /tmp fallback is guessable): they could swap the socket.
        raise ConduitError(f"the agent's directory {d} is not a directory owned by you (uid {st.st_uid})",
                           hint="remove it, or set XDG_RUNTIME_DIR / pass --socket PATH in a directory of yours")
    if (created or d == paths.runtime_dir()) and stat.S_IMODE(st.st_mode) != 0o700:
        os.chmod(d, 0o700)


def _take_lock(path: Path) -> int:
    """Open and flock ``<socket>.lock``; returns its descriptor. Raises AgentAlreadyRunning when held."""
    lock_path = path.with_name(path.name + ".lock")
    try:
        # O_NOFOLLOW: a planted symlink must not make the agent truncate some other file.
        lock_fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    except OSError as exc:
        raise ConduitError(f"cannot open the agent's lock {lock_path}: {exc.strerror}",
                           hint="remove it if it is a symlink or not yours, then start the agent again") from None
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        pid = os.pread(lock_fd, 32, 0).decode(errors="replace").strip() or "?"
        os.close(lock_fd)
        raise AgentAlreadyRunning(f"another conduit agent (pid {pid}) is already serving {path}",
                                  hint="use it (`conduit status`), or stop it first") from None
    return lock_fd


def _clear_stale(path: Path) -> None:
    """Remove a socket nobody answers on (a crashed agent's); refuse anything else at ``path``."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode):
        raise ConduitError(f"{path} exists and is not a socket", hint="move it away, or pass --socket PATH")
    if _socket_answers(path):
        raise AgentAlreadyRunning(f"something already answers on {path} (an agent without the lock?)",
                                  hint="stop it first, or pass --socket PATH")
    log.info("replacing a stale socket left at %s", path)
    os.unlink(path)


def _listen(path: Path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)  # the socket is born 0600: no window in which another uid could connect
    try:
        sock.bind(str(path))
    finally:
        os.umask(old)
    os.chmod(path, 0o600)
    sock.listen(1024)
    sock.setblocking(False)
    return sock


def claim_socket(path: Path) -> ClaimedSocket:
    """Create the runtime directory (0700), take the lock, replace a stale socket and listen (0600).

    Raises:
        AgentAlreadyRunning: another agent holds the lock or answers on ``path``.
        ConduitError: the path is too long for a Unix socket, is not a socket, or cannot be created.
    """
    path = Path(path)
    _check_length(path)
    _own_directory(path.parent)
    lock_fd = _take_lock(path)
    try:
        _clear_stale(path)
        sock = _listen(path)
        os.ftruncate(lock_fd, 0)
        os.pwrite(lock_fd, f"{os.getpid()}\n".encode(), 0)
        return ClaimedSocket(sock=sock, path=path, lock_fd=lock_fd, inode=os.lstat(path).st_ino)
    except OSError as exc:
        os.close(lock_fd)
        raise ConduitError(f"cannot listen on {path}: {exc.strerror or exc}", hint="pass --socket PATH") from exc
    except BaseException:
        os.close(lock_fd)
        raise


def raise_nofile_limit() -> None:
    """Raise the open-files soft limit to the hard limit (65536 when unlimited): one descriptor per client."""
    with contextlib.suppress(ValueError, OSError):
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        target = hard if hard != resource.RLIM_INFINITY else 65536
        if soft < target:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


__all__ = ["SUN_PATH_MAX", "AgentAlreadyRunning", "ClaimedSocket", "claim_socket", "peer_uid",
           "raise_nofile_limit"]
