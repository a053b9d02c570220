"""``conduit daemon``: keep every tool in line with the profile, continuously. This module is the process.

The parts, one responsibility each:

- ``conduit.daemon.sync.loop``: the loop (``SyncDaemon``): events -> syncs (leading edge), drift checks, state file.
- ``conduit.daemon.sync.drift``: conduit's own writes versus drift, the re-apply budget.
- ``conduit.daemon.sync.logs``: stderr logging, keys masked by the kernel's ``Redactor``, journald levels.
- ``conduit.daemon.sync.lock``: one daemon per user (``state_dir()/daemon.lock``).
- ``conduit.daemon.sync.state``: the state file (``sync.json``) that doctor, ``key rotate`` and the agent read.

One concurrency model: threads. The main thread blocks SIGTERM/SIGINT/SIGHUP before any thread starts (they
inherit the mask) and waits for them with ``sigwait``, so no Python signal handler can interrupt the loop
half-way through a sync. SIGHUP re-reads the profile and keys (``systemctl --user reload conduit-sync``);
SIGTERM/SIGINT finish the current batch and exit 0.

Readiness (sd_notify(3)): ``READY=1`` goes to ``$NOTIFY_SOCKET`` after the first sync (``Type=notify`` units),
then ``STATUS=`` lines; ``STOPPING=1`` on shutdown. With ``WatchdogSec=`` the loop pings ``WATCHDOG=1`` while it
makes progress (``conduit.daemon.sync.progress``).

SIGTERM is honoured within ``STOP_WAIT_S`` even when the loop is stuck: the loop is asked to finish its batch;
one that does not is left behind (every file is written atomically, so each is old or new) and the process exits
1. A state directory that is full or read-only does not stop the daemon: it says so in the log and keeps
syncing. At start the daemon removes the temp files a killed predecessor left next to the state file.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal

from conduit.daemon.config.redaction import REDACTOR
from conduit.daemon.sync.lock import acquire_lock
from conduit.daemon.sync.logs import setup_logging
from conduit.daemon.sync.loop import DEBOUNCE_S, DaemonOptions, SyncDaemon
from conduit.daemon.sync.state import state_path
from conduit.fileio import remove_stale_temps
from conduit.memory import limit_arenas
from conduit.sdnotify import sd_notify

__all__ = ["STOP_WAIT_S", "run_daemon", "serve"]

STOP_WAIT_S = 4.0
"""How long (seconds) SIGTERM waits for the loop to finish its batch before the process exits anyway."""

log = logging.getLogger("conduit.daemon")

_SIGNALS = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP}


def serve(daemon: SyncDaemon) -> int:
    """Run ``daemon`` as this process's daemon: lock, signals, loop; returns the exit code (0 on SIGTERM/SIGINT).

    Returns 1 when the loop did not finish its batch within ``STOP_WAIT_S`` of SIGTERM.

    Raises:
        ConduitError: another daemon holds the lock.
        OSError: the state directory cannot be created or opened.
    """
    lock_fd = acquire_lock()
    removed = remove_stale_temps(state_path())  # a killed daemon's half-written state files
    if removed:
        log.info("removed %d temp file(s) a stopped daemon left next to %s", removed, state_path())
    daemon.progress.lock_fd = lock_fd
    signal.pthread_sigmask(signal.SIG_BLOCK, _SIGNALS)  # before any thread starts: they inherit the mask
    limit_arenas()  # before any thread starts too: its threads only hand events over
    try:
        daemon.start()
        while True:
            sig = signal.sigwait(_SIGNALS)
            if sig == signal.SIGHUP:
                log.info("SIGHUP: re-reading the profile and keys")
                daemon.request_resync()
                continue
            log.info("%s: stopping", signal.Signals(sig).name)
            for s in (signal.SIGTERM, signal.SIGINT):  # a second signal must not cut the shutdown short
                signal.signal(s, signal.SIG_IGN)
            sd_notify("STOPPING=1")
            if daemon.stop(timeout=STOP_WAIT_S):
                return 0
            log.error("the sync loop did not finish its batch within %.0f s; exiting without it "
                      "(files are written atomically: each is old or new)", STOP_WAIT_S)
            return 1
    finally:
        with contextlib.suppress(OSError):
            os.close(lock_fd)


def run_daemon(profile: str | None = None, *, verbose: bool = False, debounce_s: float = DEBOUNCE_S) -> int:
    """Entry point of ``conduit daemon``: logging, lock, loop until SIGTERM/SIGINT. Returns the exit code.

    Args:
        profile: the profile path (None: ``CONDUIT_PROFILE`` or the default).
        verbose: log events and diffs (DEBUG).
        debounce_s: quiet time before re-reading a profile that did not parse (a save in progress), seconds.
    Raises:
        ConduitError: another daemon is already running for this user.
    """
    redactor = setup_logging(verbose, redactor=REDACTOR)  # the one redaction: every key the profile resolves
    daemon = SyncDaemon(DaemonOptions(profile=profile, debounce_s=debounce_s), redactor=redactor)
    log.info("conduit daemon %d starting; profile %s", os.getpid(), daemon.profile_path)
    return serve(daemon)
