"""``conduit daemon``: keep every tool in line with the profile, continuously.

One concurrency model: threads. watchdog's observer threads only put paths on a ``queue.Queue``; one loop
thread (``SyncDaemon.run_loop``) does everything else in order, so two syncs never overlap. The main thread
blocks SIGTERM/SIGINT/SIGHUP before any thread starts and waits for them with ``sigwait`` (no Python signal
handler can interrupt the loop half-way through a sync). Nothing polls: an idle daemon sleeps in
``queue.get()`` and inotify.

What one event batch does (events are debounced: ``debounce_s`` of quiet, at most ``max_delay_s``):

1. **Profile or key file changed** -> re-read the profile. Invalid: nothing is written, the error is logged once
   and recorded in the state file, the last good profile stays in force. Valid (and different, or a key file
   changed): full sync of every tool.
2. **A tool's file changed** -> was it conduit's own write? The SHA-256 of every file conduit synced is
   remembered after each sync; an event on a file whose bytes still hash the same is ignored, so conduit's own
   writes never count as drift and never loop. Otherwise a dry-run sync of that tool: when it would change an
   owned key, that is **drift**: recorded in the state file, logged once, and with ``on_drift = "reapply"``
   the profile is written back (at most ``REAPPLY_LIMIT`` times per ``REAPPLY_WINDOW_S`` per tool, so a tool
   that keeps writing its cached settings back cannot make the two programs ping-pong forever).

Logging: one line per tool per sync (``sync claude_code: changed settings.json``), keys masked by a filter that
knows every key the daemon has read; ``--verbose`` adds the events. Under systemd (``JOURNAL_STREAM`` matches
stderr) lines carry ``<N>`` syslog priority prefixes instead of timestamps, so journald stores levels.

Readiness: ``READY=1`` goes to ``$NOTIFY_SOCKET`` after the first sync (``Type=notify`` units), then
``STATUS=`` lines; ``STOPPING=1`` on shutdown.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import fcntl
import hashlib
import logging
import os
import queue
import signal
import sys
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conduit.adapters.base import Env
from conduit.adapters.writer import BackupStore
from conduit.daemon.config import paths
from conduit.daemon.config.keys import KeySource
from conduit.daemon.config.profile import LoadedProfile, load_profile
from conduit.daemon.config.resolve import Resolver
from conduit.daemon.sync.engine import SyncReport, ToolReport, sync
from conduit.daemon.sync.state import empty_state, record_report, utc_now, write_state
from conduit.daemon.sync.watcher import Watcher
from conduit.errors import ConduitError
from conduit.redact import fingerprint
from conduit.sdnotify import sd_notify

log = logging.getLogger("conduit.daemon")

DEBOUNCE_S = 0.05
"""Quiet time (seconds) after the last event of a burst before the daemon acts on it."""
MAX_DELAY_S = 0.5
"""Longest time (seconds) a continuous burst of events may postpone a sync."""
REAPPLY_LIMIT = 3
REAPPLY_WINDOW_S = 60.0

_STOP = object()
_RESYNC = object()


# ------------------------------------------------------------------------------------------ sd_notify


# ---------------------------------------------------------------------------------------------- logging


class SecretMaskFilter(logging.Filter):
    """Replaces every known key in a log record by its fingerprint (a safety net: messages are built from
    fingerprints already). Keys are added with ``add``; thread-safe."""

    def __init__(self) -> None:
        super().__init__()
        self._secrets: set[str] = set()
        self._lock = threading.Lock()

    def add(self, secrets: Iterable[str | None]) -> None:
        """Remember more keys to mask (empty and very short strings are ignored)."""
        with self._lock:
            self._secrets |= {s for s in secrets if s and len(s) >= 4}

    def mask(self, text: str) -> str:
        """``text`` with every known key replaced by ``fingerprint(key)``."""
        with self._lock:
            secrets = sorted(self._secrets, key=len, reverse=True)
        for s in secrets:
            if s in text:
                text = text.replace(s, fingerprint(s))
        return text

    def filter(self, record: logging.LogRecord) -> bool:
        msg = record.getMessage()
        if record.exc_info:
            msg += "\n" + logging.Formatter().formatException(record.exc_info)
            record.exc_info = None
        record.msg, record.args = self.mask(msg), None
        return True


_PRIORITY = {logging.DEBUG: 7, logging.INFO: 6, logging.WARNING: 4, logging.ERROR: 3, logging.CRITICAL: 2}


class _JournalFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return f"<{_PRIORITY.get(record.levelno, 6)}>{super().format(record)}"


def under_journal(environ: Mapping[str, str] | None = None) -> bool:
    """True when stderr is connected to journald (``$JOURNAL_STREAM`` = stderr's ``device:inode``)."""
    value = (environ if environ is not None else os.environ).get("JOURNAL_STREAM", "")
    try:
        st = os.fstat(sys.stderr.fileno())
    except (OSError, ValueError, AttributeError):
        return False
    return value == f"{st.st_dev}:{st.st_ino}"


def setup_logging(verbose: bool = False, *, masker: SecretMaskFilter | None = None) -> SecretMaskFilter:
    """Log to stderr: ``<N>message`` under journald, else ``2026-01-01 12:00:00 INFO message``.

    Returns the mask filter attached to the handler (add keys to it as they are read).
    """
    masker = masker or SecretMaskFilter()
    handler = logging.StreamHandler(sys.stderr)
    if under_journal():
        handler.setFormatter(_JournalFormatter("%(message)s"))
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s", "%Y-%m-%d %H:%M:%S"))
    handler.addFilter(masker)
    root = logging.getLogger("conduit")
    for h in list(root.handlers):
        root.removeHandler(h)
    root.addHandler(handler)
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    root.propagate = False
    return masker


# ----------------------------------------------------------------------------------------- single instance


def lock_path() -> Path:
    """``state_dir()/daemon.lock``: held (``flock``) by the running daemon, and holding its pid."""
    return paths.state_dir() / "daemon.lock"


def running_daemon_pid() -> int | None:
    """The pid of the ``conduit daemon`` running for this user (state directory), or None.

    Tested with a non-blocking ``flock`` on ``lock_path()``: the kernel drops the lock when the daemon exits,
    even on ``kill -9``, so a stale file never counts.
    """
    p = lock_path()
    try:
        fd = os.open(p, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                return None
            data = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
            return int(data) if data.isdigit() else -1
        return None
    finally:
        os.close(fd)


def acquire_lock() -> int:
    """Take the single-instance lock and write our pid into it; returns the fd (keep it open).

    Raises:
        ConduitError: another daemon holds it.
    """
    p = lock_path()
    p.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(p, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        other = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
        os.close(fd)
        raise ConduitError(f"a conduit daemon is already running (pid {other or '?'}; lock {p})",
                           "stop it first (`systemctl --user stop conduit-sync`), or use `conduit sync` "
                           "for a one-off sync") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


# ------------------------------------------------------------------------------------------------ helpers


def file_digest(path: Path) -> str | None:
    """SHA-256 (hex) of a file's bytes, plus its ``-wal`` companion when present; None when missing."""
    h = hashlib.sha256()
    found = False
    for p in (path, path.with_name(path.name + "-wal")):
        try:
            with open(p, "rb") as fh:
                while chunk := fh.read(1 << 20):
                    h.update(chunk)
            found = True
        except OSError:
            h.update(b"\0missing")
    return h.hexdigest() if found else None


def key_file_path(source: KeySource, environ: Mapping[str, str] | None = None) -> Path | None:
    """The file a key source reads (``file`` sources, and the secrets file for ``secret``), or None."""
    env = os.environ if environ is None else environ
    if source.file is not None:
        text = source.file
        if text == "~" or text.startswith("~/"):
            return Path(env.get("HOME") or os.path.expanduser("~")) / text[2:]
        p = Path(text).expanduser()
        return p if p.is_absolute() else paths.config_dir() / p
    if source.secret is not None:
        return paths.secrets_path()
    return None


@dataclass
class DaemonOptions:
    """How the daemon runs.

    Attributes:
        profile: profile path (None: ``CONDUIT_PROFILE`` or the default).
        debounce_s: quiet time after a burst of events, seconds.
        max_delay_s: longest a burst may postpone a sync, seconds.
        env: where tools' files are found (default: this process's environment).
        backups: where the writer keeps backups (default: the state directory).
    """

    profile: str | None = None
    debounce_s: float = DEBOUNCE_S
    max_delay_s: float = MAX_DELAY_S
    env: Env | None = None
    backups: BackupStore | None = None


@dataclass
class _ToolTrack:
    files: list[Path] = field(default_factory=list)
    digests: dict[Path, str | None] = field(default_factory=dict)
    reapplies: collections.deque[float] = field(default_factory=lambda: collections.deque(maxlen=REAPPLY_LIMIT))


class SyncDaemon:
    """The daemon's loop and its state (see the module docstring).

    Args:
        options: ``DaemonOptions``.
        masker: the log filter to teach the keys read (``setup_logging`` returns one).

    Use ``serve()`` in a process of its own (signals, lock, sd_notify), or ``start()``/``stop()`` to run the
    loop in a thread (tests).
    """

    def __init__(self, options: DaemonOptions | None = None, masker: SecretMaskFilter | None = None) -> None:
        self.options = options or DaemonOptions()
        self.env = self.options.env or Env()
        self.masker = masker or SecretMaskFilter()
        self.profile_path = paths.profile_path(self.options.profile)
        self.profile: LoadedProfile | None = None
        self.profile_text: str | None = None
        self.profile_error: str | None = None
        self.queue: queue.Queue[object] = queue.Queue()
        self.watcher = Watcher(self.queue.put)
        self.state: dict[str, Any] = empty_state()
        self.tracks: dict[str, _ToolTrack] = {}
        self.keys: dict[str, str | None] = {}
        self.resolver: Resolver | None = None
        self.key_files: set[Path] = set()
        self.ready = threading.Event()
        self.syncs = 0
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------------------------------

    def start(self) -> None:
        """Run the loop in a background thread (returns at once; ``ready`` is set after the first sync)."""
        self._thread = threading.Thread(target=self.run_loop, name="conduit-syncd", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10) -> None:
        """Ask the loop to finish its current batch and stop; join it."""
        self.queue.put(_STOP)
        if self._thread is not None:
            self._thread.join(timeout)

    def request_resync(self) -> None:
        """Re-read the profile and keys and sync every tool (SIGHUP)."""
        self.queue.put(_RESYNC)

    def serve(self) -> int:
        """Run as the process's daemon: lock, signals, loop; returns the exit code (0 on SIGTERM/SIGINT)."""
        lock_fd = acquire_lock()
        sigs = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP}
        signal.pthread_sigmask(signal.SIG_BLOCK, sigs)  # before any thread starts: they inherit the mask
        try:
            self.start()
            while True:
                sig = signal.sigwait(sigs)
                if sig == signal.SIGHUP:
                    log.info("SIGHUP: re-reading the profile and keys")
                    self.request_resync()
                    continue
                log.info("%s: stopping", signal.Signals(sig).name)
                for s in (signal.SIGTERM, signal.SIGINT):  # a second signal must not cut the shutdown short
                    signal.signal(s, signal.SIG_IGN)
                sd_notify("STOPPING=1")
                self.stop()
                return 0
        finally:
            with contextlib.suppress(OSError):
                os.close(lock_fd)

    # -- the loop --------------------------------------------------------------------------------------

    def run_loop(self) -> None:
        """First sync, READY=1, then handle debounced event batches until stopped."""
        self.watcher.start()
        try:
            self.state["daemon"] = {"pid": os.getpid(), "started_at": utc_now(),
                                    "debounce_ms": round(self.options.debounce_s * 1000)}
            self._reload_and_sync(trigger="start", force=True)
            if self.profile is None:
                self._rewatch()  # wait for a valid profile to appear
            self._save_state()
            self.ready.set()
            sd_notify(f"READY=1\nSTATUS={self._status_line()}")
            log.info("watching %s", ", ".join(str(d) for d in self.watcher.directories))
            while True:
                item = self.queue.get()
                if item is _STOP:
                    return
                batch, stopping = self._collect(item)
                try:
                    self._handle(batch)
                except Exception:  # the daemon must survive anything a sync throws
                    log.exception("unexpected error while handling changes; the daemon keeps running")
                if stopping:
                    return
        finally:
            self.watcher.stop()

    def _collect(self, first: object) -> tuple[set[object], bool]:
        """The burst that starts with ``first``: until ``debounce_s`` of quiet or ``max_delay_s`` in all."""
        batch = {first}
        deadline = time.monotonic() + self.options.max_delay_s
        while True:
            wait = min(self.options.debounce_s, deadline - time.monotonic())
            if wait <= 0:
                return batch, False
            try:
                item = self.queue.get(timeout=wait)
            except queue.Empty:
                return batch, False
            if item is _STOP:
                return batch, True
            batch.add(item)

    def _handle(self, batch: set[object]) -> None:
        files = {p for p in batch if isinstance(p, Path)}
        for p in sorted(files):
            log.debug("event: %s", p)
        config_changed = _RESYNC in batch or bool(files & ({self.profile_path} | self.key_files))
        if config_changed:
            self._reload_and_sync(trigger="key" if not files & {self.profile_path} else "profile",
                                  force=_RESYNC in batch or bool(files & self.key_files))
        tool_events: dict[str, set[Path]] = {}
        for name, track in self.tracks.items():
            hit = files & set(track.files)
            if hit:
                tool_events[name] = hit
        if tool_events and self.profile is not None:
            self._check_tools(tool_events)
        self._save_state()

    # -- profile and full syncs ------------------------------------------------------------------------

    def _reload_and_sync(self, *, trigger: str, force: bool) -> None:
        try:
            text = self.profile_path.read_text(encoding="utf-8")
        except OSError:
            text = None
        if text is not None and text == self.profile_text and not force and self.profile_error is None:
            log.debug("profile unchanged; nothing to do")
            return
        try:
            loaded = load_profile(self.profile_path)
        except ConduitError as exc:
            self._profile_failed(str(exc))
            return
        if self.profile_error is not None:
            log.info("profile is valid again: %s", self.profile_path)
        self.profile, self.profile_text, self.profile_error = loaded, loaded.text, None
        self.state["profile"] = {"path": str(self.profile_path), "ok": True, "error": None, "error_at": None,
                                 "applied_at": utc_now(), "on_drift": loaded.model.on_drift}
        for notice in loaded.notices:
            log.info("profile: %s", notice)
        self._full_sync(trigger)

    def _profile_failed(self, message: str) -> None:
        message = self.masker.mask(message)
        if message != self.profile_error:
            kept = "the last good profile stays in force" if self.profile else "no profile in force yet"
            log.error("profile error (nothing written; %s): %s", kept, message)
        self.profile_error = message
        prof = self.state.setdefault("profile", {})
        prof.update({"path": str(self.profile_path), "ok": False, "error": message,
                     "error_at": prof.get("error_at") if prof.get("error") == message else utc_now()})
        self._rewatch()
        self._save_state()

    def _read_keys(self, profile: LoadedProfile) -> dict[str, str | None]:
        """Every channel's current key (None when it has none or its source fails), and teach the masker."""
        resolver = self.resolver = Resolver(profile)  # reused by the drift checks until the next full sync
        keys: dict[str, str | None] = {}
        chans = self.state.setdefault("channels", {})
        for name in profile.model.channels:
            try:
                keys[name] = resolver.channel(name).key
                chans[name] = {"key_fingerprint": fingerprint(keys[name]) if keys[name] else None,
                               "key_error": None}
            except ConduitError as exc:
                keys[name] = None
                chans[name] = {"key_fingerprint": None, "key_error": self.masker.mask(str(exc))}
        for gone in set(chans) - set(profile.model.channels):
            del chans[gone]
        self.masker.add(keys.values())
        return keys

    def _backups_for(self, old_keys: list[str]) -> BackupStore | None:
        """A backup store that never writes ``old_keys`` (a rotation), else the configured one."""
        if not old_keys:
            return self.options.backups
        from conduit.daemon.sync.rotate import RedactingBackupStore

        base = self.options.backups
        return RedactingBackupStore(old_keys, root=base.root if base else None, keep=base.keep if base else 10)

    def _full_sync(self, trigger: str) -> None:
        assert self.profile is not None
        keys = self._read_keys(self.profile)
        rotated = [old for ch, old in self.keys.items() if old and keys.get(ch) and keys[ch] != old]
        report = sync(self.profile, env=self.env, backups=self._backups_for(rotated), resolver=self.resolver)
        self.keys = keys
        if rotated:
            from conduit.daemon.sync.rotate import scrub_backups

            scrub_backups(rotated, self.options.backups)
            log.info("key rotated on %d channel(s): old key removed from conduit's backups", len(rotated))
        self._record(report, trigger)
        self._rewatch()

    def _record(self, report: SyncReport, trigger: str, *, drift_check: bool = False) -> None:
        """Log one line per tool, remember what conduit wrote (digests), update the state document."""
        self.syncs += 1
        record_report(self.state, report, trigger, mask=self.masker.mask, drift_check=drift_check)
        tools = self.state["tools"]
        for tr in report.tools:
            self._log_tool(tr, trigger)
            self._remember(tr)
        for gone in set(tools) - {t.tool for t in report.tools} - set(self.profile.model.tools if self.profile else ()):
            del tools[gone]
            self.tracks.pop(gone, None)

    def _remember(self, tr: ToolReport) -> None:
        track = self.tracks.setdefault(tr.tool, _ToolTrack())
        if tr.results:
            track.files = [r.path for r in tr.results]
        track.digests = {p: file_digest(p) for p in track.files}

    def _log_tool(self, tr: ToolReport, trigger: str) -> None:
        labels = ", ".join(r.label for r in tr.results if r.changed) or ", ".join(r.label for r in tr.results)
        level = logging.WARNING if tr.status in ("error", "unsupported") else logging.INFO
        detail = f" {labels}" if tr.status == "changed" else ""
        if tr.message and tr.status != "changed":
            detail = f": {tr.message.splitlines()[0]}"
        log.log(level, "sync %s: %s%s (%s)", tr.tool, tr.status.replace("_", " "), detail, trigger)
        for r in tr.results:
            if r.changed and r.diff:
                log.debug("%s diff:\n%s", r.label, r.diff)

    def _rewatch(self) -> None:
        files: set[Path] = {self.profile_path}
        self.key_files = set()
        if self.profile is not None:
            for ch in self.profile.model.channels.values():
                if ch.key is not None:
                    kp = key_file_path(ch.key)
                    if kp is not None:
                        self.key_files.add(kp)
        files |= self.key_files
        for track in self.tracks.values():
            files |= set(track.files)
        self.watcher.watch(sorted(files))
        self.state.setdefault("daemon", {})["watching"] = [str(d) for d in self.watcher.directories]

    # -- drift -----------------------------------------------------------------------------------------

    def _check_tools(self, events: dict[str, set[Path]]) -> None:
        assert self.profile is not None
        suspects = []
        for name, hit in events.items():
            track = self.tracks[name]
            if all(file_digest(p) == track.digests.get(p) for p in hit):
                log.debug("%s: event from conduit's own write (content unchanged since the sync)", name)
                continue
            suspects.append(name)
        if not suspects:
            return
        tools_state = self.state.setdefault("tools", {})
        errored = [t for t in suspects if (tools_state.get(t) or {}).get("status") in ("error", "not_found")]
        if errored:  # the file was broken or missing; a change may have fixed it: a real sync, not drift
            self._record(sync(self.profile, tools=errored, env=self.env, backups=self.options.backups,
                              resolver=self.resolver), "tool file")
            self._rewatch()
        checks = [t for t in suspects if t not in errored and t in self.profile.model.tools]
        if not checks:
            return
        dry = sync(self.profile, tools=checks, env=self.env, dry_run=True, resolver=self.resolver)
        policy = self.profile.model.on_drift
        for tr in dry.tools:
            entry = tools_state.setdefault(tr.tool, {"drift": None, "restart_needed": False})
            track = self.tracks[tr.tool]
            if tr.status != "changed":
                if entry.get("drift"):
                    log.info("drift %s: resolved (owned keys match the profile again)", tr.tool)
                entry["drift"] = None
                track.digests = {p: file_digest(p) for p in track.files}
                continue
            changed = [r for r in tr.results if r.changed]
            diff = "\n".join(r.diff for r in changed if r.diff)
            previous = entry.get("drift") or {}
            same = _diff_core(previous.get("diff") or "") == _diff_core(diff)
            if not same:
                log.warning("drift %s: %s changed behind conduit's back (on_drift = %s)", tr.tool,
                            ", ".join(str(r.path) for r in changed), policy)
                log.debug("drift %s diff (profile would write):\n%s", tr.tool, diff)
            record = {"detected_at": previous.get("detected_at") if same else utc_now(),
                      "files": [str(r.path) for r in changed], "diff": diff, "policy": policy, "reapplied": False}
            entry["drift"] = record
            if policy == "reapply" and self._may_reapply(tr.tool):
                real = sync(self.profile, tools=[tr.tool], env=self.env, backups=self.options.backups)
                self._record(real, "drift", drift_check=True)
                record["reapplied"] = True
                record["reapplied_at"] = utc_now()
                log.info("drift %s: profile re-applied", tr.tool)
            else:
                if policy == "reapply":
                    log.warning("drift %s: not re-applied: changed back %d times in %.0f s; another program keeps "
                                "writing it (close it, then save the profile)", tr.tool, REAPPLY_LIMIT,
                                REAPPLY_WINDOW_S)
                # remember this content as seen, so the same drift is not re-checked on every event
                track.digests = {p: file_digest(p) for p in track.files}

    def _may_reapply(self, tool: str) -> bool:
        track = self.tracks[tool]
        now = time.monotonic()
        if len(track.reapplies) == REAPPLY_LIMIT and now - track.reapplies[0] < REAPPLY_WINDOW_S:
            return False
        track.reapplies.append(now)
        return True

    # -- state -----------------------------------------------------------------------------------------

    def _status_line(self) -> str:
        if self.profile is None:
            return f"no valid profile: {(self.profile_error or '').splitlines()[0] if self.profile_error else '?'}"
        tools = self.state.get("tools") or {}
        summary = ", ".join(f"{k} {v.get('status')}" for k, v in sorted(tools.items()))
        return f"synced {summary}" + (" (profile error: last good profile in force)" if self.profile_error else "")

    def _save_state(self) -> None:
        try:
            # a last safety net: no key the daemon knows may reach the state file
            import json

            text = self.masker.mask(json.dumps(self.state, default=str))
            write_state(json.loads(text))
        except OSError as exc:
            log.error("cannot write the state file: %s", exc)
        if self.ready.is_set():
            sd_notify(f"STATUS={self._status_line()}")


def _diff_core(diff: str) -> list[str]:
    """The changed lines of a diff (no headers, no context, no hunk positions): what identifies one drift."""
    return [ln for ln in diff.splitlines()
            if ln[:1] in "+-" and not ln.startswith(("+++", "---")) and ln.strip()]


def run_daemon(profile: str | None = None, *, verbose: bool = False, debounce_s: float = DEBOUNCE_S) -> int:
    """Entry point of ``conduit daemon``: logging, lock, loop until SIGTERM/SIGINT. Returns the exit code.

    Raises:
        ConduitError: another daemon is already running for this user.
    """
    masker = setup_logging(verbose)
    daemon = SyncDaemon(DaemonOptions(profile=profile, debounce_s=debounce_s), masker=masker)
    log.info("conduit daemon %d starting; profile %s", os.getpid(), daemon.profile_path)
    return daemon.serve()
