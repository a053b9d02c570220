"""The sync loop's proof of life: systemd's watchdog and the busy marker ``conduit doctor`` reads.

Two facts, both sent or written only by the loop thread, and only when it really gets on with its work:

- **systemd's watchdog** (sd_watchdog_enabled(3)): when the unit sets ``WatchdogSec=``, systemd passes
  ``$WATCHDOG_USEC`` and expects ``WATCHDOG=1`` at least that often; a daemon that stops pinging is killed and
  restarted (``Restart=on-failure``). The loop waits for events with a timeout of the ping interval
  (``conduit.sdnotify.watchdog_interval_s``: half of ``WatchdogSec=``), so an idle daemon wakes up only that
  often, and only when the watchdog is on; without it nothing wakes up at all. A loop stuck inside a sync (a
  lock it waits on, a key command that hangs, a deadlock) sends nothing, which is the point.
- **The busy marker**, for doctor (``conduit.daemon.sync.lock.daemon_activity``): while the loop handles a
  batch it keeps ``busy <t>`` in the daemon's lock file, ``t`` the ``CLOCK_MONOTONIC`` time (seconds) of its
  last progress; between batches the line is gone. Idle costs nothing; a stalled loop leaves an old ``t``,
  and doctor says "alive but stalled" when it is older than ``STALL_AFTER_S``.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping

from conduit.sdnotify import sd_notify, watchdog_interval_s

__all__ = ["LoopProgress", "monotonic_s"]

log = logging.getLogger("conduit.daemon")


def monotonic_s() -> float:
    """``CLOCK_MONOTONIC`` in seconds: one clock for every process of the machine (the daemon writes it, doctor
    compares with it), unaffected by changes of the wall clock."""
    return time.clock_gettime(time.CLOCK_MONOTONIC)


class LoopProgress:
    """What the sync loop calls when it makes progress (see the module docstring).

    Args:
        environ: where ``WATCHDOG_USEC``/``WATCHDOG_PID`` and ``NOTIFY_SOCKET`` come from (default
            ``os.environ``), read once here.

    Attributes:
        interval_s: how often (seconds) the loop must tick for systemd's watchdog, or None when the
            watchdog is off (then the loop never wakes up unless something happens).
        lock_fd: the daemon's lock file (``conduit.daemon.sync.lock.acquire_lock``) where the busy marker goes,
            or None (a daemon run in a thread by a test: no marker).
    """

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        self._environ = dict(environ if environ is not None else os.environ)
        self.interval_s = watchdog_interval_s(self._environ)
        self.lock_fd: int | None = None
        self._marker_at: int | None = None  # offset of the busy line in the lock file (after the pid line)
        self._busy = False
        self._last_ping = -float("inf")
        self._marker_failed = False

    def begin(self) -> None:
        """A batch starts: the busy marker appears (now), and the watchdog hears that the loop is alive."""
        self._busy = True
        self.tick()

    def tick(self) -> None:
        """The loop made progress (a batch step finished, or an idle wait timed out): ping the watchdog (at most
        every half interval) and, while busy, move the marker's time to now."""
        now = monotonic_s()
        if self.interval_s is not None and now - self._last_ping >= self.interval_s / 2:
            sd_notify("WATCHDOG=1", self._environ)
            self._last_ping = now
        if self._busy:
            self._mark(f"busy {now:.3f}\n")

    def end(self) -> None:
        """A batch is done: the marker goes away; the watchdog is pinged."""
        self.tick()
        self._busy = False
        self._mark("")

    def _mark(self, line: str) -> None:
        fd = self.lock_fd
        if fd is None:
            return
        try:
            if self._marker_at is None:
                head = os.pread(fd, 64, 0)
                self._marker_at = head.index(b"\n") + 1 if b"\n" in head else len(head)
            data = line.encode("ascii")
            if data:
                os.pwrite(fd, data, self._marker_at)
            os.ftruncate(fd, self._marker_at + len(data))
        except OSError as exc:  # a full or read-only state directory: doctor cannot see stalls, syncs go on
            if not self._marker_failed:
                log.warning("cannot update the busy marker in the lock file: %s", exc.strerror or exc)
                self._marker_failed = True
