"""The sync daemon's logging: one handler on stderr, keys masked on the way out, journald levels under systemd.

- Every record passes ``RedactFilter``: the kernel's ``conduit.redact.Redactor`` (the keys the daemon has read)
  over the formatted message and its traceback, so a key is only ever logged as its fingerprint. A safety net:
  messages are built from fingerprints already.
- Nothing else reaches stderr unmasked: an uncaught exception in any thread (``sys.excepthook``,
  ``threading.excepthook``) and watchdog's own warnings are logged through the same handler.
- Under systemd (``$JOURNAL_STREAM`` names stderr) lines carry ``<N>`` syslog priority prefixes instead of
  timestamps, so journald stores levels (sd-daemon(3), "SD_WARNING"...); elsewhere
  ``2026-01-01 12:00:00 INFO message``.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Mapping

from conduit.daemon.sync.engine import ToolReport
from conduit.redact import Redactor
from conduit.text import log_safe

__all__ = ["RedactFilter", "log_tool", "setup_logging", "under_journal"]

_PRIORITY = {logging.DEBUG: 7, logging.INFO: 6, logging.WARNING: 4, logging.ERROR: 3, logging.CRITICAL: 2}
"""Python level -> syslog priority (``<7>`` debug ... ``<2>`` critical), what journald reads as the level."""


class RedactFilter(logging.Filter):
    """A logging filter that masks every secret a ``Redactor`` knows, in the message and its traceback.

    Args:
        redactor: the process's redactor (teach it keys with ``redactor.add``); a new one by default.
    """

    def __init__(self, redactor: Redactor | None = None) -> None:
        super().__init__()
        self.redactor = redactor if redactor is not None else Redactor()

    def filter(self, record: logging.LogRecord) -> bool:
        """Replace the record's message (with its traceback folded in) by its redacted text; keeps every record."""
        msg = record.getMessage()
        if record.exc_info:
            msg += "\n" + logging.Formatter().formatException(record.exc_info)
            record.exc_info = None
        record.msg, record.args = log_safe(self.redactor(msg)), None  # no raw escapes, no forged lines
        return True


class _JournalFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return f"<{_PRIORITY.get(record.levelno, 6)}>{super().format(record)}"


def under_journal(environ: Mapping[str, str] | None = None) -> bool:
    """True when stderr is connected to journald (``$JOURNAL_STREAM`` = stderr's ``device:inode``,
    systemd.exec(5))."""
    value = (environ if environ is not None else os.environ).get("JOURNAL_STREAM", "")
    try:
        st = os.fstat(sys.stderr.fileno())
    except (OSError, ValueError, AttributeError):
        return False
    return value == f"{st.st_dev}:{st.st_ino}"


def setup_logging(verbose: bool = False, *, redactor: Redactor | None = None) -> Redactor:
    """Log the ``conduit`` loggers to stderr: ``<N>message`` under journald, else ``2026-01-01 12:00:00 INFO
    message``; DEBUG with ``verbose``, else INFO. Replaces handlers an earlier call installed.

    Returns the redactor the handler masks with (add keys to it as they are read).
    """
    mask = RedactFilter(redactor)
    handler = logging.StreamHandler(sys.stderr)
    if under_journal():
        handler.setFormatter(_JournalFormatter("%(message)s"))
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s", "%Y-%m-%d %H:%M:%S"))
    handler.addFilter(mask)
    root = logging.getLogger("conduit")
    for name, level in (("conduit", logging.DEBUG if verbose else logging.INFO), ("watchdog", logging.WARNING)):
        logger = logging.getLogger(name)
        for h in list(logger.handlers):
            logger.removeHandler(h)
        logger.addHandler(handler)
        logger.setLevel(level)
        logger.propagate = False
    _route_uncaught(root.getChild("daemon"))
    return mask.redactor


def _route_uncaught(log: logging.Logger) -> None:
    """Uncaught exceptions (main thread and any other) go through ``log``, so through the redaction, instead of
    Python's default hooks, which print the traceback to stderr as it is."""

    def main_hook(tp: type[BaseException], value: BaseException, tb: object) -> None:
        log.critical("uncaught exception", exc_info=(tp, value, tb))  # type: ignore[arg-type]

    def thread_hook(args: threading.ExceptHookArgs) -> None:
        if args.exc_type is SystemExit:
            return
        name = args.thread.name if args.thread is not None else "?"
        log.error("uncaught exception in thread %s", name,
                  exc_info=(args.exc_type, args.exc_value, args.exc_traceback))  # type: ignore[arg-type]

    sys.excepthook = main_hook
    threading.excepthook = thread_hook


_SAID_ABSENT: set[str] = set()
"""Tools whose ``not_found`` this process already logged at INFO (``log_tool``)."""


def log_tool(tr: ToolReport, trigger: str) -> None:
    """One line per tool per sync (``sync claude_code: changed settings.json (profile)``); diffs at DEBUG."""
    labels = ", ".join(r.label for r in tr.results if r.changed) or ", ".join(r.label for r in tr.results)
    level = logging.WARNING if tr.status in ("error", "unsupported") else logging.INFO
    if tr.status == "not_found":  # an absent tool is said once per daemon start, then only at DEBUG
        level = logging.DEBUG if tr.tool in _SAID_ABSENT else logging.INFO
        _SAID_ABSENT.add(tr.tool)
    else:
        _SAID_ABSENT.discard(tr.tool)  # installed since: said again if it goes away again
    detail = f" {labels}" if tr.status == "changed" else ""
    if tr.message and tr.status != "changed":
        detail = f": {tr.message.splitlines()[0]}"
    daemon_log = logging.getLogger("conduit.daemon")
    daemon_log.log(level, "sync %s: %s%s (%s)", tr.tool, tr.status.replace("_", " "), detail, trigger)
    for r in tr.results:
        if r.changed and r.diff:
            daemon_log.debug("%s diff:\n%s", r.label, r.diff)
