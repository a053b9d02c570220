"""Atomic file I/O and locks for every file conduit writes: its own (profile, secrets, state) and, through the
one writer (``conduit.adapters.writer.apply``), the tools'.

- ``atomic_write``: temp file in the same directory, fsync, rename, directory fsync; through symlinks.
- ``new_tmp`` / ``fill_tmp`` / ``release_tmp``: the pieces, for a writer that must compare the file once more
  between filling the temp file and the rename. Temp files are named ``.<name>.conduit-tmp-<pid>-<hex>``;
  ``remove_stale_temps`` removes those a crashed writer left.
- ``make_private_dirs``: 0700 directories whatever the umask.
- ``locked``: an exclusive ``flock`` on a lock file, with a bounded wait.
- ``read_regular_file``: the one way to read a file a person names (profile, key file, secrets file): a
  regular file only, opened without blocking, read up to a size cap.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import secrets as _secrets
import stat
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from conduit.errors import ConduitError

TMP_MARK = ".conduit-tmp-"
"""Infix of the writer's temp files: ``.<name>.conduit-tmp-<pid>-<hex>`` next to the file being written."""

STALE_TMP_AGE_S = 24 * 3600
"""A temp file older than this (seconds) is stale even if its writer's pid is alive (pid reuse)."""

_active_tmp: set[str] = set()
_active_lock = threading.Lock()



def pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def new_tmp(directory: Path, name: str) -> Path:
    tmp = directory / f".{name}{TMP_MARK}{os.getpid()}-{_secrets.token_hex(4)}"
    with _active_lock:
        _active_tmp.add(str(tmp))
    return tmp


def release_tmp(tmp: Path, *, unlink: bool) -> None:
    with _active_lock:
        _active_tmp.discard(str(tmp))
    if unlink:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def remove_stale_temps(path: Path) -> int:
    """Remove temp files of ``path`` left by a crashed write (their pid is gone, or they are a day old).

    Temp files that a live writer (this process or another) is still using are left alone.
    Returns how many were removed.
    """
    prefix = f".{path.name}{TMP_MARK}"
    removed = 0
    try:
        entries = list(os.scandir(path.parent))
    except OSError:
        return 0
    for entry in entries:
        if not entry.name.startswith(prefix):
            continue
        full = str(path.parent / entry.name)
        with _active_lock:
            if full in _active_tmp:
                continue
        pid_text = entry.name[len(prefix) :].split("-", 1)[0]
        pid = int(pid_text) if pid_text.isdigit() else -1
        try:
            age = time.time() - entry.stat(follow_symlinks=False).st_mtime
        except OSError:
            continue
        if pid != os.getpid() and pid_alive(pid) and age < STALE_TMP_AGE_S:
            continue
        with contextlib.suppress(OSError):
            os.unlink(full)
            removed += 1
    return removed


def fill_tmp(tmp: Path, data: bytes, mode: int, owner: tuple[int, int] | None, notices: list[str]) -> None:
    """Create ``tmp`` exclusively, write ``data``, fsync, set owner then mode (chown may clear mode bits)."""
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
        if owner is not None:
            st = os.fstat(fd)
            if (st.st_uid, st.st_gid) != owner:
                try:
                    os.fchown(fd, *owner)
                except PermissionError:
                    notices.append(f"could not keep owner {owner[0]}:{owner[1]}; the file is now yours")
        os.fchmod(fd, mode)
    finally:
        os.close(fd)


def make_private_dirs(directory: Path) -> None:
    """Create ``directory`` and every missing parent with mode 0700, whatever the umask
    (``os.makedirs`` gives only the last one its mode). Existing directories are left as they are.
    Raises OSError."""
    missing: list[Path] = []
    probe = directory
    while not probe.is_dir():
        missing.append(probe)
        if probe.parent == probe:
            break
        probe = probe.parent
    for d in reversed(missing):
        try:
            os.mkdir(d, 0o700)
        except FileExistsError:
            if not d.is_dir():
                raise
            continue
        os.chmod(d, 0o700)  # mkdir's mode is masked by the umask


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes, mode: int = 0o600) -> None:
    """Write one of conduit's own files atomically: a temp file in the same directory created with ``mode``
    (whatever the umask), written, fsynced, renamed over ``path``, then the directory fsynced. A symlink at
    ``path`` is written through (its target is replaced). Readers see the old bytes or the new ones, never a
    mix; a crash leaves at most a ``.conduit-tmp-`` file, which the next write removes.

    Raises:
        OSError: the directory cannot be written; ``path`` is unchanged.
    """
    path = Path(os.path.realpath(path))
    tmp = new_tmp(path.parent, path.name)
    done = False
    try:
        fill_tmp(tmp, data, mode, None, [])
        os.replace(tmp, path)
        done = True
        fsync_dir(path.parent)
    finally:
        release_tmp(tmp, unlink=not done)


@contextlib.contextmanager
def locked(path: Path, *, timeout_s: float = 10.0, mode: int = 0o600) -> Iterator[int]:
    """Hold an exclusive ``flock`` on ``path`` (created with ``mode`` when missing) for the ``with`` block;
    yields the lock file's descriptor.

    The wait is bounded: the lock is tried every 20 ms until ``timeout_s`` (seconds) has passed.

    Raises:
        TimeoutError: another process held the lock for ``timeout_s``.
        OSError: the lock file cannot be opened.
    """
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, mode)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES) or time.monotonic() >= deadline:
                    if exc.errno in (errno.EAGAIN, errno.EACCES):
                        raise TimeoutError(f"{path} stayed locked for {timeout_s:g} s") from exc
                    raise
                time.sleep(0.02)
        yield fd
    finally:
        os.close(fd)


PROFILE_MAX_BYTES = 1 << 20
"""Cap on the profile and the secrets file: 1 MiB (a real one is a few KiB)."""

KEY_MAX_BYTES = 64 << 10
"""Cap on a key file or a key command's output: 64 KiB (a real key is under 1 KiB)."""


def read_regular_file(path: Path, *, max_bytes: int, what: str,
                      error: type[ConduitError] = ConduitError) -> bytes:
    """Read a file a person named, refusing what would hang or exhaust memory.

    The file is opened with ``O_NONBLOCK`` (a FIFO with no writer would otherwise block ``open`` forever),
    checked with ``fstat`` to be a regular file (a FIFO, a socket, ``/dev/zero`` or a directory is refused),
    and read up to ``max_bytes`` + 1 bytes (more is refused). Symlinks are followed, as a person expects.

    Args:
        path: the file. max_bytes: the cap, bytes. what: what it is, for the message ("profile", "key file").
        error: the ConduitError subclass to raise (ProfileError, KeyError_).

    Raises:
        FileNotFoundError: ``path`` does not exist (callers word this one themselves).
        error: not a regular file, over the cap, or unreadable; the message names the file and what to do.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise error(f"{path}: cannot open the {what}: {exc.strerror or exc}",
                    hint=f"check the path and its permissions (`ls -l {path}`)") from exc
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise error(f"{path}: the {what} is not a regular file ({_kind(st.st_mode)})",
                        hint="point it at an ordinary file: conduit reads only regular files, so nothing can hang it")
        if st.st_size > max_bytes:
            raise error(f"{path}: the {what} is {st.st_size} bytes, over the {max_bytes}-byte limit",
                        hint=f"a {what} is far smaller; check that the path names the right file")
        chunks: list[bytes] = []
        size = 0
        while size <= max_bytes:
            chunk = os.read(fd, max_bytes + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > max_bytes:  # it grew while being read
            raise error(f"{path}: the {what} is over the {max_bytes}-byte limit",
                        hint=f"a {what} is far smaller; check that the path names the right file")
        return b"".join(chunks)
    except OSError as exc:
        raise error(f"{path}: cannot read the {what}: {exc.strerror or exc}") from exc
    finally:
        os.close(fd)


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "named pipe"), (stat.S_ISSOCK, "socket"), (stat.S_ISCHR, "character device"),
                       (stat.S_ISBLK, "block device"), (stat.S_ISDIR, "directory")):
        if test(mode):
            return name
    return "special file"
