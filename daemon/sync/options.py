"""How the sync daemon runs: its options and the timing constants of its loop (``conduit.daemon.sync.loop``)."""

from __future__ import annotations

from dataclasses import dataclass

from conduit.adapters.base import Env
from conduit.adapters.writer.backups import BackupStore

__all__ = ["DEBOUNCE_S", "MAX_DELAY_S", "DaemonOptions"]

DEBOUNCE_S = 0.05
"""Quiet time (seconds) the loop waits for before it re-reads a profile that did not parse (never before a
first sync: that one is on the leading edge)."""
MAX_DELAY_S = 0.5
"""Longest time (seconds) a continuous burst of events may postpone that re-read."""


@dataclass
class DaemonOptions:
    """How the daemon runs.

    Attributes:
        profile: profile path (None: ``CONDUIT_PROFILE`` or the default).
        debounce_s: quiet time before re-reading a profile that did not parse, seconds.
        max_delay_s: longest a burst may postpone that re-read, seconds.
        env: where tools' files are found (default: this process's environment).
        backups: where the writer keeps backups (default: the state directory).
    """

    profile: str | None = None
    debounce_s: float = DEBOUNCE_S
    max_delay_s: float = MAX_DELAY_S
    env: Env | None = None
    backups: BackupStore | None = None
