"""systemd's readiness protocol (sd_notify(3)), for the sync daemon and the agent (both ``Type=notify`` units)."""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Mapping

log = logging.getLogger(__name__)


def sd_notify(message: str, environ: Mapping[str, str] | None = None) -> bool:
    """Send ``message`` (``READY=1``, ``STATUS=...``, ``STOPPING=1``) to systemd's notification socket.

    Protocol (sd_notify(3)): one datagram to the ``AF_UNIX`` ``SOCK_DGRAM`` socket named by ``$NOTIFY_SOCKET``;
    a name starting with ``@`` is in the abstract namespace. The send never blocks (``MSG_DONTWAIT``): a
    receiver whose queue is full loses the message instead of stalling the daemon. Returns False when the
    variable is unset (not run by systemd) or the send fails; never raises.
    """
    addr = (environ if environ is not None else os.environ).get("NOTIFY_SOCKET", "")
    if not addr:
        return False
    target = "\0" + addr[1:] if addr.startswith("@") else addr
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as s:
            s.connect(target)
            # never block the loop on a receiver that does not read (a full queue drops the status line)
            s.send(message.encode("utf-8"), socket.MSG_DONTWAIT)
        return True
    except OSError as exc:
        log.debug("sd_notify to %s failed: %s", addr, exc)
        return False


def watchdog_interval_s(environ: Mapping[str, str] | None = None) -> float | None:
    """How often to send ``WATCHDOG=1``, in seconds, or None when systemd's watchdog is not enabled for us.

    Per sd_watchdog_enabled(3): ``$WATCHDOG_USEC`` is the unit's ``WatchdogSec=`` in microseconds, and
    ``$WATCHDOG_PID``, when set, must be this process's pid. Half the interval is returned, as the manual
    page recommends, so one late ping does not get the service killed.
    """
    env = environ if environ is not None else os.environ
    usec = env.get("WATCHDOG_USEC", "")
    pid = env.get("WATCHDOG_PID", "")
    if not usec.isdigit() or int(usec) <= 0:
        return None
    if pid and (not pid.isdigit() or int(pid) != os.getpid()):
        return None
    return int(usec) / 1e6 / 2
