"""Whether a client may believe the agent socket at a path: the directory and the socket must be the user's.

Without ``XDG_RUNTIME_DIR`` the socket's directory is the guessable ``/tmp/conduit-<uid>``: another user can
create it first and plant an agent of their own there, which would then tell this user's scripts whatever it
likes (``conduit status``, ``conduit wait``). So a client trusts a socket only when

- its directory is owned by the user and has no permission bits for group or others (mode 0700), and
- the socket itself is owned by the user,

and otherwise refuses it (``UntrustedSocket``, exit code 2) naming the directory, its owner and mode, and
what to do. The agent creates the directory 0700 itself (``unixsocket.claim_socket``), so a directory it made
always passes.

Standard library only: the ``conduit status --json`` fast path (``conduit.daemon.cli.entry``) uses it too.
Facts come from ``os.lstat`` (a symlink in place of the directory or the socket is refused, not followed).
"""

from __future__ import annotations

import os
import pwd
import stat

from conduit.errors import AgentUnreachable


class UntrustedSocket(AgentUnreachable):
    """The socket's directory or the socket is not the user's alone; the client refuses to use it (exit 2)."""


def _owner(uid: int) -> str:
    try:
        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except KeyError:
        return f"uid {uid}"


def socket_problem(path: str | os.PathLike[str], uid: int | None = None) -> UntrustedSocket | None:
    """Why the socket at ``path`` must not be trusted, or None when it may be (or when nothing is there yet:
    a missing socket or directory is "the agent does not answer", the caller's ordinary error).

    Args:
        path: the agent's socket.
        uid: the user the socket must belong to (default ``os.getuid()``).
    Returns:
        an ``UntrustedSocket`` to raise (message: the directory, its owner and mode; hint: what to do), or None.
    """
    me = os.getuid() if uid is None else uid
    sock = os.path.abspath(os.fspath(path))
    directory = os.path.dirname(sock) or "/"
    try:
        dst = os.lstat(directory)
        sst = os.lstat(sock)
    except OSError:
        return None
    fix = (f"remove {directory} (if nothing of yours is in it) and start the agent again, or set "
           "XDG_RUNTIME_DIR to a directory of yours")
    mode = stat.S_IMODE(dst.st_mode)
    if not stat.S_ISDIR(dst.st_mode):
        return UntrustedSocket(f"refusing the agent socket {sock}: {directory} is not a directory "
                               f"(owner {_owner(dst.st_uid)}, mode {mode:04o})", hint=fix)
    if dst.st_uid != me or mode & 0o077:
        why = "is not owned by you" if dst.st_uid != me else "is open to other users"
        return UntrustedSocket(f"refusing the agent socket {sock}: its directory {directory} {why} "
                               f"(owner {_owner(dst.st_uid)}, mode {mode:04o}; it must be yours with mode 0700), "
                               "so another user could have put an agent there", hint=fix)
    if sst.st_uid != me or not stat.S_ISSOCK(sst.st_mode):
        what = "is not a socket" if not stat.S_ISSOCK(sst.st_mode) else "is not owned by you"
        return UntrustedSocket(f"refusing the agent socket {sock}: it {what} (owner {_owner(sst.st_uid)})",
                               hint=f"remove {sock} and start the agent again")
    return None


def check_socket(path: str | os.PathLike[str]) -> None:
    """Raise ``socket_problem(path)`` when there is one.

    Raises:
        UntrustedSocket: the socket's directory is not the user's with mode 0700, or the socket is not the user's.
    """
    problem = socket_problem(path)
    if problem is not None:
        raise problem


__all__ = ["UntrustedSocket", "check_socket", "socket_problem"]
