"""Tool files that hold a key stay private, even when the tool itself made them readable.

A tool that saves its settings by temp file + rename with the usual umask (022) leaves the file holding
conduit's key at 0644, and the bytes are the same as conduit's: no sync or drift check would write it, so the
writer's own tightening (``conduit.adapters.writer.apply``) never runs. The daemon calls ``tighten_keyed`` for
every tool file after each sync and each drift check, so such a file is made ``0600`` (group and other bits
cleared) again and the daemon's log says so, once per tightening. Only regular files that hold one of the keys
the daemon has read are touched; the file is opened without blocking (a FIFO is never waited on) and read up
to ``MAX_BYTES``.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from pathlib import Path

__all__ = ["MAX_BYTES", "tighten_keyed"]

MAX_BYTES = 64 << 20
"""A tool file longer than this (bytes) is not searched for a key (settings files are a few KiB)."""


def tighten_keyed(path: Path, secrets: Iterable[str | None]) -> str | None:
    """Clear the group and other permission bits of ``path`` when it is a regular file readable by them that
    holds one of ``secrets`` (as UTF-8 bytes); returns the sentence to log (``~/.claude/settings.json holds a
    key and was readable by others (mode 0644); it is now 0600``), or None when nothing was changed. Never
    raises for a missing or unreadable file."""
    keys = [s.encode("utf-8") for s in secrets if s and len(s) >= 8]
    if not keys:
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or not st.st_mode & 0o077 or st.st_size > MAX_BYTES:
            return None
        data = _read_all(fd, st.st_size)
        if not any(k in data for k in keys):
            return None
        before = stat.S_IMODE(st.st_mode)
        os.fchmod(fd, before & ~0o077)
    except OSError:
        return None
    finally:
        os.close(fd)
    return (f"{path} holds a key and was readable by {'others' if before & 0o007 else 'its group'} "
            f"(mode {before:04o}, probably a save by the tool itself); it is now {before & ~0o077:04o}")


def _read_all(fd: int, size: int) -> bytes:
    """Up to ``size`` bytes (plus one read) of ``fd``."""
    parts: list[bytes] = []
    got = 0
    while got <= size:
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            break
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)
