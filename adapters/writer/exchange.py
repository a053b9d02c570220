"""The writer's last step: put a filled temp file at a tool's path so that the check and the swap are one step.

A plain ``os.replace`` after a final re-read leaves a window: a file another program renames over the path (or
writes in place) between the re-read and the rename is lost. Linux's ``renameat2(RENAME_EXCHANGE)`` (man 2
renameat2; Linux 3.15+, ext4, btrfs, xfs, tmpfs and others) swaps two names atomically, so the file that was
displaced is still there under the temp name and can be compared *after* the swap with what was merged: if it
is not what the writer merged from, the swap is undone (a second exchange) and the writer renders again. A new
file is put in place with ``RENAME_NOREPLACE`` (or ``link``), so a file another program created meanwhile is
never replaced. Where the OS or file system offers neither, ``os.replace`` is used, right after the check.

A program that opened the file for an in-place save *before* the swap and writes after the check writes into
the displaced file, which nobody reads again: ``conduit.adapters.writer.latesaves`` keeps it open a little while
to catch that save and put it back.

Everything here works on paths in one directory (the temp file sits next to the file, ``conduit.fileio``).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from conduit.adapters.writer.snapshot import Seen, read_seen

__all__ = ["exchange", "place_new", "swap_if_same"]

_AT_FDCWD = -100
_RENAME_NOREPLACE = 1
_RENAME_EXCHANGE = 2
_UNSUPPORTED = {errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EPERM}


@functools.cache
def _load_renameat2() -> Callable[..., int] | None:
    """glibc's ``renameat2`` (2.28+), or None where the C library lacks it. Looked up on the first write (ctypes
    and the C library cost a command that writes nothing, such as a no-op ``conduit sync``), then kept."""
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn: Any = libc.renameat2
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn  # type: ignore[no-any-return]


def _rename2(src: Path, dst: Path, flags: int) -> bool:
    """``renameat2(src, dst, flags)``. True when done; False when this OS or file system does not support it.

    Raises:
        OSError: any other failure (``EEXIST`` for ``RENAME_NOREPLACE`` onto an existing name).
    """
    renameat2 = _load_renameat2()
    if renameat2 is None:
        return False
    import ctypes  # imported by _load_renameat2 already: a dictionary lookup here
    if renameat2(_AT_FDCWD, os.fsencode(src), _AT_FDCWD, os.fsencode(dst), flags) == 0:
        return True
    err = ctypes.get_errno()
    if err in _UNSUPPORTED:
        return False
    raise OSError(err, os.strerror(err), str(dst))


def exchange(tmp: Path, path: Path) -> bool:
    """Swap the files named ``tmp`` and ``path`` (both must exist) in one step: afterwards ``path`` holds what
    ``tmp`` held and ``tmp`` what ``path`` held.

    Returns:
        True when swapped; False when the swap is not supported here (nothing changed: use ``os.replace``).

    Raises:
        OSError: the swap failed for another reason (``ENOENT`` when ``path`` was removed meanwhile).
    """
    return _rename2(tmp, path, _RENAME_EXCHANGE)


def place_new(tmp: Path, path: Path) -> bool:
    """Give the filled ``tmp`` the name ``path`` only if nothing is there (``RENAME_NOREPLACE``, else a hard
    link then unlinking ``tmp``).

    Returns:
        True when placed (``tmp`` is gone); False when neither way is supported here (use ``os.replace``).

    Raises:
        FileExistsError: another program created ``path`` meanwhile; nothing changed.
        OSError: any other failure.
    """
    if _rename2(tmp, path, _RENAME_NOREPLACE):
        return True
    try:
        os.link(tmp, path)
    except FileExistsError:
        raise
    except OSError as err:
        if err.errno in _UNSUPPORTED or err.errno == errno.EXDEV:
            return False
        raise
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)
    return True


def swap_if_same(tmp: Path, real: Path, seen: Seen) -> tuple[bool, Seen]:
    """Put the filled ``tmp`` at ``real`` if ``real`` is still ``seen``: compared right before the swap; with
    ``renameat2(RENAME_EXCHANGE)`` also right after it, on the file the swap displaced (now named ``tmp``), and
    undone when that is not ``seen``. A new file is placed only where nothing is (``RENAME_NOREPLACE``).

    Returns:
        (True, seen) when placed (``tmp`` then names the displaced file, if any); (False, what ``real`` holds
        now) when another program changed it.

    Raises:
        OSError: the swap failed for a reason other than a concurrent save.
    """
    last = read_seen(real)
    if not last.same(seen):
        return False, last
    if seen.data is None:
        try:
            if not place_new(tmp, real):
                os.replace(tmp, real)
        except FileExistsError:
            return False, read_seen(real)
        return True, seen
    ours = os.lstat(tmp).st_ino
    if not exchange(tmp, real):
        os.replace(tmp, real)  # no atomic swap on this file system: the check above was the last moment
        return True, seen
    if read_seen(tmp).same(seen):
        return True, seen
    # Another program saved between the check and the swap: its file goes back in place, and we merge again.
    with contextlib.suppress(OSError):
        exchange(tmp, real)
        if os.lstat(tmp).st_ino != ours:  # yet another save replaced ours meanwhile: that newest one goes back
            exchange(tmp, real)
    return False, read_seen(real)
