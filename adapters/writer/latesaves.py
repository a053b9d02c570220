"""A save that lands in the file conduit just replaced: caught and put back.

The writer swaps its merged file in with ``renameat2(RENAME_EXCHANGE)`` and compares the displaced file with what
it merged from (``conduit.adapters.writer.exchange``). One window is left: a program that saves *in place*
(open, truncate, write) and opened the file *before* the swap writes through its open descriptor into the
displaced file, after the check. That file has no name any more, so the save would be lost although the
program finished without an error.

So the writer keeps the displaced file open (``keep``) for ``GRACE_S`` instead of dropping it. ``check`` (the
daemon calls it while idle, ``next_check_in`` says when) looks at each one: unchanged after the grace, it is
closed; written meanwhile (size or mtime moved), its new bytes are the other program's latest save, and once they
are whole (not blank, they parse) they go back in place of conduit's file, provided that file is still exactly
what conduit put there. The daemon then sees the change like any other save by a tool and merges its own keys
into it again. A save into the displaced file that never becomes whole within ``MAX_WAIT_S`` is dropped with a
notice, as is one whose path another program has saved since (the newer save wins). conduit writing the same
path again meanwhile is not such a save: the held file then answers for conduit's newest file.

One registry per process (``LATE_SAVES``), off until a long-running process that checks it turns it on
(``enable``: the sync daemon); a one-shot command holds nothing. The daemon's loop thread writes and checks; the
lock only guards the list (no call out of this module is made while it is held).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from conduit.adapters.writer.exchange import swap_if_same
from conduit.adapters.writer.snapshot import Seen, read_seen, whole_text_problem
from conduit.fileio import fill_tmp, fsync_dir, new_tmp, release_tmp

__all__ = ["GRACE_S", "LATE_SAVES", "MAX_WAIT_S", "LateSaves"]

GRACE_S = 1.0
"""Seconds a displaced file is kept open after the swap: far longer than the gap between an in-place save's
``open`` and its ``truncate``/``write`` (microseconds to a few hundred ms in a slow writer)."""
MAX_WAIT_S = 5.0
"""Seconds a displaced file that was written but is not whole yet (blank, does not parse) is waited for."""
_READ_CAP = 64 << 20
"""Bytes read back from a displaced file at most (a tool's settings file is far smaller)."""


@dataclass
class _Displaced:
    """One displaced file held open: what it was at the swap (``before``: size, mtime_ns) and what conduit put
    at ``real`` instead (``ours``: device, inode, size, mtime_ns)."""

    fd: int
    real: Path
    before: tuple[int, int]
    ours: tuple[int, int, int, int]
    since: float


def _key(st: os.stat_result) -> tuple[int, int, int, int]:
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


class LateSaves:
    """The displaced files of recent swaps, held open for ``GRACE_S``; see the module docstring."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: list[_Displaced] = []
        self.enabled = False

    def enable(self) -> None:
        """Hold displaced files from now on (a process that calls ``check`` when ``next_check_in`` says)."""
        self.enabled = True

    def keep(self, displaced: Path, real: Path, seen: Seen) -> None:
        """Hold ``displaced`` (the swap's temp name, which now names the replaced file) open. ``seen`` is what
        the writer merged from (the displaced file as it was). Never raises: a file that cannot be opened or
        stat'ed is simply not held."""
        if not self.enabled or seen.st is None:
            return
        try:
            fd = os.open(displaced, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return
        try:
            ours = _key(os.stat(real))
        except OSError:
            os.close(fd)
            return
        merged_from = _key(seen.st)
        with self._lock:
            for h in self._held:
                if h.real == real and h.ours == merged_from:
                    # conduit wrote the same path again within the grace, over its own file: a late save held
                    # from an earlier swap still goes back, in place of conduit's newest file
                    h.ours = ours
            self._held.append(_Displaced(fd, real, (seen.st.st_size, seen.st.st_mtime_ns), ours,
                                         time.monotonic()))

    def next_check_in(self) -> float | None:
        """Seconds until ``check`` has something to decide (0 when due now); None when nothing is held."""
        with self._lock:
            if not self._held:
                return None
            oldest = min(d.since for d in self._held)
        return max(0.0, oldest + GRACE_S - time.monotonic())

    def check(self, *, now: float | None = None) -> list[str]:
        """Decide every held file whose grace is over: close it, or put its late save back in place.

        Returns:
            One line per file put back or dropped (paths only, never content), for the log.
        """
        now = time.monotonic() if now is None else now
        with self._lock:
            due = [d for d in self._held if now - d.since >= GRACE_S]
            self._held = [d for d in self._held if now - d.since < GRACE_S]
        lines: list[str] = []
        keep: list[_Displaced] = []
        for d in due:
            try:
                verdict = self._decide(d, now)
            except Exception as exc:  # noqa: BLE001 - one odd file (too deep to parse, gone) must not stop the rest
                verdict = f"{d.real}: a save in the file conduit had replaced was not put back ({type(exc).__name__})"
            if verdict is None:
                keep.append(d)
                continue
            with contextlib.suppress(OSError):
                os.close(d.fd)
            if verdict:
                lines.append(verdict)
        if keep:
            with self._lock:
                self._held.extend(keep)
        return lines

    def check_and_log(self, log: logging.Logger) -> None:
        """``check``, each line logged as a warning (the daemon's loop, while idle and after each batch: a save
        put back is a tool's save like any other, its event comes through the watcher and is merged again)."""
        for line in self.check():
            log.warning("%s", line)

    def close_all(self) -> None:
        """Drop everything held (a process about to exit)."""
        with self._lock:
            held, self._held = self._held, []
        for d in held:
            with contextlib.suppress(OSError):
                os.close(d.fd)

    def _decide(self, d: _Displaced, now: float) -> str | None:
        """``""`` nothing to do, a line when put back or dropped, None when to wait longer."""
        try:
            st = os.fstat(d.fd)
        except OSError:
            return ""
        if (st.st_size, st.st_mtime_ns) == d.before:
            return ""
        data = os.pread(d.fd, min(st.st_size, _READ_CAP), 0)
        problem = whole_text_problem(d.real, data)
        if problem is not None:
            if now - d.since < MAX_WAIT_S:
                return None
            return f"{d.real}: a save landed in the file conduit had just replaced, but {problem}: not put back"
        return _put_back(d, data, st.st_mode & 0o7777)


def _put_back(d: _Displaced, data: bytes, mode: int) -> str:
    """Put ``data`` (another program's late save) in place of conduit's file, if ``d.real`` is still conduit's."""
    now = read_seen(d.real)
    if now.st is None or _key(now.st) != d.ours:
        return f"{d.real}: a save landed in the file conduit had replaced, after a newer save: the newer one stays"
    tmp = new_tmp(d.real.parent, d.real.name)
    try:
        fill_tmp(tmp, data, mode, (now.st.st_uid, now.st.st_gid), [])
        placed, _ = swap_if_same(tmp, d.real, now)
        if placed:
            fsync_dir(d.real.parent)
    except OSError:
        placed = False
    finally:
        release_tmp(tmp, unlink=True)
    if not placed:
        return f"{d.real}: a save landed in the file conduit had replaced, after a newer save: the newer one stays"
    return f"{d.real}: another program saved into the file conduit had just replaced; its save is back in place"


LATE_SAVES = LateSaves()
"""The process's registry (the writer keeps, the daemon checks)."""
