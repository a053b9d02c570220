"""Telling conduit's own writes from drift, and what one drift looks like.

After each sync the daemon remembers the SHA-256 of every file it synced (``ToolTrack``). An event on a file
whose bytes still hash the same is conduit's own write (never drift, never a loop). Otherwise a dry-run sync of
the tool says whether an owned key changed behind conduit's back: that is **drift**, recorded as a
``DriftRecord`` (``drift_record``). One drift is identified by the lines it changes (``diff_core``), so the same
drift seen again keeps its ``detected_at`` and is logged once. With ``on_drift = "reapply"`` the profile is
written back at most ``REAPPLY_LIMIT`` times per ``REAPPLY_WINDOW_S`` per tool, so a tool that keeps writing its
cached settings back cannot make the two programs ping-pong forever.
"""

from __future__ import annotations

import collections
import hashlib
import logging
import os
import re
import stat
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from conduit.daemon.config.redaction import REDACTOR
from conduit.daemon.sync.engine import ToolReport
from conduit.daemon.sync.modes import tighten_keyed
from conduit.daemon.sync.state import DriftRecord, utc_now

__all__ = ["REAPPLY_LIMIT", "REAPPLY_WINDOW_S", "ToolTrack", "changed_keys", "diff_core", "drift_record",
           "drift_remedy", "drift_summary", "file_digest", "tighten", "warn_readable"]

log = logging.getLogger("conduit.daemon")

REAPPLY_LIMIT = 3
"""Re-applies of the profile to one tool allowed within ``REAPPLY_WINDOW_S``."""
REAPPLY_WINDOW_S = 60.0
"""The window (seconds) ``REAPPLY_LIMIT`` counts in."""


def file_digest(path: Path) -> str | None:
    """SHA-256 (hex) of a file's bytes, plus its ``-wal`` companion when present; None when missing.

    Never hangs and never reads without end: the file is opened with ``O_NONBLOCK`` and read only when
    ``fstat`` says it is a regular file, up to the size it had then (a FIFO, a device or ``/dev/zero`` in its
    place counts as "special", which is a change like any other).
    """
    h = hashlib.sha256()
    found = False
    for p in (path, path.with_name(path.name + "-wal")):
        try:
            fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            h.update(b"\0missing")
            continue
        found = True
        try:
            _hash_fd(fd, h)
        except OSError:
            h.update(b"\0unreadable")
        finally:
            os.close(fd)
    return h.hexdigest() if found else None


def _hash_fd(fd: int, h: hashlib._Hash) -> None:
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        h.update(f"\0special {stat.S_IFMT(st.st_mode)}".encode())
        return
    left = st.st_size
    while left > 0 and (chunk := os.read(fd, min(left, 1 << 20))):
        h.update(chunk)
        left -= len(chunk)


@dataclass
class ToolTrack:
    """What the daemon remembers of one tool between syncs.

    Attributes:
        files: the tool's files (and databases) the last sync handled.
        digests: ``file_digest`` of each, as the daemon last saw it (after its write, or an accepted drift).
        reapplies: ``time.monotonic()`` of the last re-applies (at most ``REAPPLY_LIMIT``).
    """

    files: list[Path] = field(default_factory=list)
    digests: dict[Path, str | None] = field(default_factory=dict)
    reapplies: collections.deque[float] = field(default_factory=lambda: collections.deque(maxlen=REAPPLY_LIMIT))

    def refresh(self) -> None:
        """Remember the files' current content as seen (conduit's write, or a drift already reported); a file
        holding a key that became readable by others is made private again (``tighten``)."""
        tighten(self.files)
        self.digests = {p: file_digest(p) for p in self.files}

    def unchanged(self, hit: set[Path]) -> bool:
        """True when every file in ``hit`` still has the content last seen: the event was conduit's own write
        (or a tool's save of the same bytes, whose mode ``tighten`` checks)."""
        tighten(hit)
        return all(file_digest(p) == self.digests.get(p) for p in hit)

    def may_reapply(self) -> bool:
        """Spend one re-apply if the budget allows (``REAPPLY_LIMIT`` per ``REAPPLY_WINDOW_S``)."""
        now = time.monotonic()
        if len(self.reapplies) == REAPPLY_LIMIT and now - self.reapplies[0] < REAPPLY_WINDOW_S:
            return False
        self.reapplies.append(now)
        return True


def tighten(files: Iterable[Path]) -> None:
    """Each tool file that holds a key this process read (``REDACTOR``) and that group or others may read is
    made private again and the log says so (``conduit.daemon.sync.modes.tighten_keyed``): run after every sync
    and every drift check, so a tool's own save with the usual umask never leaves conduit's key readable."""
    secrets = REDACTOR.secrets
    for path in files:
        said = tighten_keyed(path, secrets)
        if said:
            log.warning("%s", said)


_WARNED: set[str] = set()


def warn_readable(notices: Iterable[str]) -> None:
    """Log, once per process and file, each notice of a sync saying that a key file or the secrets file can be
    read by other users (it names the fix, ``chmod 600 PATH``): the daemon's log says it, not only the state."""
    for notice in notices:
        if "chmod 600" in notice and notice not in _WARNED:
            _WARNED.add(notice)
            log.warning("%s", notice)


def diff_core(diff: str) -> list[str]:
    """The changed lines of a diff (no headers, no context, no hunk positions): what identifies one drift."""
    return [ln for ln in diff.splitlines()
            if ln[:1] in "+-" and not ln.startswith(("+++", "---")) and ln.strip()]


_KEY_RES = (
    re.compile(r'\s*"((?:[^"\\]|\\.)+)"\s*:'),  # JSON / JSONC: "key": value
    re.compile(r"\s*\[+\s*([^\]]+?)\s*\]+\s*$"),  # a TOML table header
    re.compile(r"\s*(?:export\s+)?([A-Za-z0-9_.$@/-]+)\s*[=:]"),  # TOML, YAML, .env: key = / key:
)


def changed_keys(diff: str) -> list[str]:
    """The names of the keys a unified diff's changed lines hold (JSON, TOML, YAML or .env), in order, each
    once: ``ANTHROPIC_BASE_URL``, ``model_provider``... A changed line that holds no key (an array item, a
    closing brace) names none."""
    out: dict[str, None] = {}
    for line in diff_core(diff):
        for rx in _KEY_RES:
            m = rx.match(line[1:])
            if m:
                out[m.group(1)] = None
                break
    return list(out)


def drift_remedy(policy: str) -> str:
    """What a person does about drift under ``on_drift = policy``: run a sync, or let the daemon re-apply."""
    if policy == "reapply":
        return "the daemon writes the profile back (on_drift = \"reapply\"); to keep the change, put it in the profile"
    return "run `conduit sync` to write the profile back, or set on_drift = \"reapply\" in the profile"


def drift_summary(record: DriftRecord, policy: str) -> str:
    """The daemon's log line for one drift: which keys in which files changed, and the remedy."""
    keys = ", ".join(changed_keys(record.diff)) or "owned keys"
    return f"{keys} in {', '.join(record.files)} changed behind conduit's back; {drift_remedy(policy)}"


def drift_record(dry: ToolReport, previous: DriftRecord | None, policy: str) -> tuple[DriftRecord, bool]:
    """The drift a dry-run sync that would change ``dry.tool`` shows, and whether it is the ``previous`` one
    again (same changed lines: it keeps its ``detected_at``)."""
    changed = [r for r in dry.results if r.changed]
    diff = "\n".join(r.diff for r in changed if r.diff)
    same = diff_core(previous.diff if previous else "") == diff_core(diff)
    detected_at = (previous.detected_at if previous else None) if same else utc_now()
    record = DriftRecord(detected_at=detected_at, files=[str(r.path) for r in changed], diff=diff, policy=policy,
                         reapplied=False)
    return record, same
