"""The sync daemon's loop: one thread that turns file events into syncs, in order, on the leading edge.

watchdog's observer threads only put paths on a ``queue.Queue``; ``SyncDaemon.run_loop`` does everything else,
so two syncs never overlap. Nothing polls: an idle daemon sleeps in ``queue.get()`` and inotify. Under
systemd's watchdog (``WatchdogSec=``) the wait has a timeout of the ping interval and every step of the loop
reports progress (``conduit.daemon.sync.progress``): a loop that is stuck stops pinging and gets restarted.

Leading edge, then coalescing: the first event of a burst is handled at once, with whatever else
is already queued; events that arrive while a batch is handled wait in the queue and become exactly one more
batch after it. So one save costs one sync, and a burst ends in exactly the last state: any event that arrives
after a sync started reading the profile brings one more read. A profile that does not parse may be a save in
progress (truncated, renamed away): then the loop waits for the burst to settle (``debounce_s`` of quiet, at
most ``max_delay_s``) and reads it again before it calls it an error.

What one event batch does:

1. **Profile or key file changed** -> re-read the profile. Invalid: nothing is written, the error is logged once
   and recorded in the state file, the last good profile stays in force. Valid (and different, or a key file
   changed): full sync of every tool. A channel whose key changed is a rotation: the old key is kept out of
   the new backups and removed from the old ones (``conduit.daemon.sync.scrub``).
   **The routing file changed** (``conduit.daemon.sync.routed``) -> a full sync when the agent's decision moves
   the tools of the profile in force (to the ``[fallback]`` or back); logged with the tools to restart.
   **A channel's model-list cache changed** (``conduit.daemon.sync.catalogs``) -> a full sync when the models
   it lists differ from those the last full sync read (new context windows reach the tools).
2. **A tool's file changed** -> conduit's own write (same digest as after the sync) is ignored; otherwise a
   dry-run sync of that tool tells drift from nothing (``conduit.daemon.sync.drift``); with
   ``on_drift = "reapply"`` the profile is written back, within the re-apply budget.

Watches come before reads (the first full sync included): the profile and routing file before anything is read,
a profile's key files and model caches before they are read, a tool's files dry-run checked once when first
watched. A watched directory deleted or replaced is watched again when it comes back (``Watcher.dirty``). While a
``fallback`` decision is in the routing file, the idle loop wakes when it may turn stale (``routed.recheck_in``).

Logging: one line per tool per sync (``sync claude_code: changed settings.json``); ``--verbose`` adds the
events and diffs. Every key read is taught to the process's ``Redactor``, which masks logs and the state file;
a key rotated out while the daemon runs is kept out of every later backup (a tool's stale save may bring it back).
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from pathlib import Path

from conduit.adapters.base import Env
from conduit.adapters.writer.backups import BackupStore
from conduit.adapters.writer.latesaves import LATE_SAVES
from conduit.daemon.config import paths
from conduit.daemon.config.profile import LoadedProfile, load_profile
from conduit.daemon.config.resolve import Resolver
from conduit.daemon.config.routing import read_routing, reading_problem, routing_path
from conduit.daemon.config.sources import key_file_path
from conduit.daemon.sync.catalogs import CatalogKey, catalog_files, catalog_key
from conduit.daemon.sync.drift import (
    REAPPLY_LIMIT,
    REAPPLY_WINDOW_S,
    ToolTrack,
    drift_record,
    drift_summary,
    warn_readable,
)
from conduit.daemon.sync.engine import SyncReport, ToolReport, sync
from conduit.daemon.sync.keyrest import rest_after_sync
from conduit.daemon.sync.logs import log_tool
from conduit.daemon.sync.options import DEBOUNCE_S, MAX_DELAY_S, DaemonOptions
from conduit.daemon.sync.progress import LoopProgress
from conduit.daemon.sync.routed import RouteKey, log_switch, recheck_in, route_key
from conduit.daemon.sync.scrub import redacting_store, scrub_backups
from conduit.daemon.sync.state import (
    ChannelInfo,
    DaemonInfo,
    ProfileInfo,
    SyncState,
    record_report,
    status_line,
    utc_now,
    write_state,
)
from conduit.daemon.sync.watcher import Watcher
from conduit.errors import ConduitError
from conduit.fileio import PROFILE_MAX_BYTES, read_regular_file
from conduit.memory import release_free_memory
from conduit.redact import Redactor, fingerprint
from conduit.sdnotify import sd_notify

__all__ = ["DEBOUNCE_S", "MAX_DELAY_S", "DaemonOptions", "SyncDaemon"]

log = logging.getLogger("conduit.daemon")

_STOP = object()
_RESYNC = object()


class SyncDaemon:
    """The daemon's loop and its state (see the module docstring).

    Args:
        options: ``DaemonOptions``.
        redactor: the process's redactor, taught every key read (the daemon passes the config layer's
            ``REDACTOR``, which ``read_key`` teaches too; ``setup_logging`` returns it from the log handler).

    Run it with ``conduit.daemon.sync.syncd.serve`` in a process of its own (signals, lock, sd_notify), or
    ``start()``/``stop()`` in a thread (tests)::

        daemon = SyncDaemon(DaemonOptions(profile="p.toml"))
        daemon.start(); daemon.ready.wait(10)
        ...
        daemon.stop()
    """

    def __init__(self, options: DaemonOptions | None = None, redactor: Redactor | None = None) -> None:
        self.options = options or DaemonOptions()
        self.env = self.options.env or Env()
        self.redactor = redactor if redactor is not None else Redactor()
        self.profile_path = paths.profile_path(self.options.profile)
        self.profile: LoadedProfile | None = None
        self.profile_text: str | None = None
        self.profile_error: str | None = None
        self.queue: queue.Queue[object] = queue.Queue()
        self.watcher = Watcher(self.queue.put)
        self.state = SyncState()
        self.tracks: dict[str, ToolTrack] = {}
        self.keys: dict[str, str | None] = {}
        self.retired: list[str] = []  # keys rotated out while running
        self.resolver: Resolver | None = None
        self.key_files: set[Path] = set()
        self.routing_path = routing_path()  # the agent's fallback decision (conduit.daemon.sync.routed)
        self.route: RouteKey | None = None
        self.routing_problem: str | None = None  # why the routing file could not be read, as last logged
        self.catalogs: CatalogKey | None = None  # the model lists the last full sync read (sync.catalogs)
        self.catalog_files: set[Path] = set()
        self.ready = threading.Event()
        self.progress = LoopProgress()
        self.syncs = 0
        self._thread: threading.Thread | None = None
        self._recheck_at: float | None = None  # monotonic time to look at a fallback decision again
        self._seen_files: set[Path] = set()  # tool files watched so far

    # -- lifecycle -------------------------------------------------------------------------------------

    def start(self) -> None:
        """Run the loop in a background thread (returns at once; ``ready`` is set after the first sync)."""
        self._thread = threading.Thread(target=self.run_loop, name="conduit-syncd", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10) -> bool:
        """Ask the loop to finish its current batch and stop; join it (at most ``timeout`` seconds).
        Returns False when the loop is still running after ``timeout``."""
        self.queue.put(_STOP)
        if self._thread is not None:
            self._thread.join(timeout)
            return not self._thread.is_alive()
        return True

    def request_resync(self) -> None:
        """Re-read the profile and keys and sync every tool (SIGHUP)."""
        self.queue.put(_RESYNC)

    # -- the loop --------------------------------------------------------------------------------------

    def run_loop(self) -> None:
        """First sync, READY=1, then handle event batches until stopped.

        The only thread that syncs, re-watches (``Watcher.watch``) and reports progress (``self.progress``)."""
        self.watcher.start()
        LATE_SAVES.enable()  # in-place saves landing in a file this daemon just replaced are put back
        try:
            self.state.daemon = DaemonInfo(pid=os.getpid(), started_at=utc_now(),
                                           debounce_ms=round(self.options.debounce_s * 1000))
            self.progress.begin()
            self._rewatch()  # before the first read: a save during the first sync is an event
            try:
                self._reload_and_sync(trigger="start", force=True)
            except Exception:  # the daemon must survive anything a sync throws, the first one included
                log.exception("unexpected error in the first sync; the daemon keeps running")
            if self.profile is None:
                self._rewatch()  # wait for a valid profile to appear
            self._save_state()
            self.progress.end()
            self.ready.set()
            sd_notify(f"READY=1\nSTATUS={status_line(self.state, self.profile is not None, self.profile_error)}")
            log.info("watching %s", ", ".join(str(d) for d in self.watcher.directories))
            while self._next_batch():
                pass
        finally:
            self.watcher.stop()

    def _next_batch(self) -> bool:
        """Wait for an event (idle: at most the watchdog interval, or forever when the watchdog is off), then
        handle it at once with whatever else is already queued; False when the daemon is to stop.

        Leading edge: the first event of a burst is handled immediately. Events that arrive while it is
        handled stay queued, so the next call takes all of them as one batch: one more sync, never fewer."""
        try:
            item = self.queue.get(timeout=self._wait_s())
        except queue.Empty:  # the watchdog's interval, a displaced file to look at, or a fallback decision
            self.progress.tick()
            LATE_SAVES.check_and_log(log)
            if self._recheck_at is None or time.monotonic() < self._recheck_at:
                return True
            item = self.routing_path  # handled as its event: one sync when the route it gives moved
        if item is _STOP:
            return False
        batch = {item}
        stopping = self._drain(batch)
        self.progress.begin()
        try:
            self._handle(batch)
        except Exception:  # the daemon must survive anything a sync throws
            log.exception("unexpected error while handling changes; the daemon keeps running")
        finally:
            self.progress.end()
        LATE_SAVES.check_and_log(log)
        if self.queue.empty():  # idle again: what the batch parsed and freed goes back to the system
            release_free_memory()
        return not (stopping or _STOP in batch)

    def _wait_s(self) -> float | None:
        """How long the idle loop may wait for an event: the watchdog's interval, or less while a ``fallback``
        decision may turn stale (``recheck_in``; sets ``_recheck_at``); None: as long as it takes."""
        again = recheck_in(self.profile, read_routing(self.routing_path)) if self.profile else None
        self._recheck_at = None if again is None else time.monotonic() + again
        late = LATE_SAVES.next_check_in()
        return min([w for w in (self.progress.interval_s, again, late) if w is not None], default=None)

    def _drain(self, batch: set[object]) -> bool:
        """Move every event already queued into ``batch`` (no waiting); True when a stop was among them."""
        while True:
            try:
                item = self.queue.get_nowait()
            except queue.Empty:
                return False
            if item is _STOP:
                batch.add(_STOP)
                return True
            batch.add(item)

    def _settle(self, batch: set[object]) -> None:
        """Wait for the burst to end (``debounce_s`` of quiet, at most ``max_delay_s``), adding its events to
        ``batch``: a profile that does not parse may be an editor's save in progress (truncated, renamed away)."""
        deadline = time.monotonic() + self.options.max_delay_s
        while _STOP not in batch:
            wait = min(self.options.debounce_s, deadline - time.monotonic())
            if wait <= 0:
                return
            try:
                batch.add(self.queue.get(timeout=wait))
            except queue.Empty:
                return
            self.progress.tick()

    def _handle(self, batch: set[object]) -> None:
        if self.watcher.dirty:  # a directory on the way to a watched file came or went: follow it before reading
            self._rewatch()
        files = {p for p in batch if isinstance(p, Path)}
        for p in sorted(files):
            log.debug("event: %s", p)
        touched = bool(_RESYNC in batch or files & ({self.profile_path} | self.key_files))
        routed = self.routing_path in files and self.profile is not None and \
            route_key(self.profile, read_routing(self.routing_path)) != self.route
        self._note_routing_problem()
        listed = self._catalogs_moved(files)
        if touched or routed or listed:
            trigger = ("routing" if routed else "models") if not touched else \
                "key" if not files & {self.profile_path} else "profile"
            self._reload_and_sync(trigger=trigger, batch=batch,
                                  force=_RESYNC in batch or bool(files & self.key_files) or routed or listed)
            touched = True
            files = {p for p in batch if isinstance(p, Path)}  # with the events a settle wait added
        tool_events: dict[str, set[Path]] = {}
        for name, track in self.tracks.items():
            hit = files & set(track.files)
            if hit:
                tool_events[name] = hit
        if tool_events and self.profile is not None:
            touched = self._check_tools(self.profile, tool_events) or touched
        if touched:  # only conduit's own writes seen: the state file already says everything
            self._save_state()

    # -- profile and full syncs ------------------------------------------------------------------------

    def _reload_and_sync(self, *, trigger: str, force: bool, batch: set[object] | None = None) -> None:
        """Re-read the profile; a valid one that changed (or ``force``) is synced to every tool.

        One that does not parse, read while events are being handled (``batch``), is read again once the
        burst has settled (``_settle``), so an editor's half-done save is not reported as an error; a
        parseable half-written one is applied, and the events of the rest of the save (queued meanwhile)
        bring the follow-up sync that applies the whole file."""
        try:  # a FIFO or /dev/zero must not hang the loop: load_profile below says what is wrong with it
            text = read_regular_file(self.profile_path, max_bytes=PROFILE_MAX_BYTES,
                                     what="profile").decode("utf-8", "replace")
        except (OSError, ConduitError):
            text = None
        if text is not None and text == self.profile_text and not force and self.profile_error is None:
            log.debug("profile unchanged; nothing to do")
            return
        try:
            loaded = load_profile(self.profile_path)
        except ConduitError as exc:
            if batch is not None:
                self._settle(batch)
                if _STOP not in batch:
                    self._reload_and_sync(trigger=trigger, force=force)
                    return
            self._profile_failed(str(exc))
            return
        if self.profile_error is not None:
            log.info("profile is valid again: %s", self.profile_path)
        self.profile, self.profile_text, self.profile_error = loaded, loaded.text, None
        self.state.profile = ProfileInfo(path=str(self.profile_path), ok=True, error=None, error_at=None,
                                         applied_at=utc_now(), on_drift=loaded.model.on_drift)
        for notice in loaded.notices:
            log.info("profile: %s", notice)
        self._rewatch()  # this profile's key files and model caches, before they are read
        self._full_sync(loaded, trigger)

    def _profile_failed(self, message: str) -> None:
        message = self.redactor(message)
        if message != self.profile_error:
            kept = "the last good profile stays in force" if self.profile else "no profile in force yet"
            log.error("profile error (nothing written; %s): %s", kept, message)
        self.profile_error = message
        prof = self.state.profile
        error_at = prof.error_at if prof.error == message else utc_now()  # the same error keeps its time
        prof.path, prof.ok, prof.error, prof.error_at = str(self.profile_path), False, message, error_at
        self._rewatch()
        self._save_state()

    def _read_keys(self, profile: LoadedProfile) -> dict[str, str | None]:
        """Every channel's current key (None when it has none or its source fails); teaches the redactor every
        key before any error text is masked (a failing channel's message may hold a key read after it)."""
        resolver = self.resolver = Resolver(profile)  # reused by the drift checks until the next full sync
        keys: dict[str, str | None] = {}
        errors: dict[str, str] = {}
        for name in profile.model.channels:
            try:
                keys[name] = resolver.channel(name).key
            except ConduitError as exc:
                keys[name], errors[name] = None, str(exc)
            self.progress.tick()  # one key read (a command may take seconds): progress
        self.redactor.add(keys.values())
        chans = self.state.channels
        for name, key in keys.items():
            chans[name] = ChannelInfo(key_fingerprint=fingerprint(key) if key else None,
                                      key_error=self.redactor(errors[name]) if name in errors else None)
        for gone in set(chans) - set(profile.model.channels):
            del chans[gone]
        return keys

    def _catalogs_moved(self, files: set[Path]) -> bool:
        """A model-list cache event whose lists differ from those the last full sync read. An event that
        changes nothing re-watches (the first cache write creates the models directory, to be watched)."""
        if not files & self.catalog_files or self.profile is None:
            return False
        if catalog_key(self.profile) != self.catalogs:
            return True
        self._rewatch()
        return catalog_key(self.profile) != self.catalogs  # a file renamed in before the new watch could see it

    def _backups(self) -> BackupStore | None:
        return redacting_store(self.retired, self.options.backups)

    def _full_sync(self, profile: LoadedProfile, trigger: str) -> None:
        self.catalogs = catalog_key(profile)  # read before the sync: a list written after it brings one more
        keys = self._read_keys(profile)
        rotated = [old for ch, old in self.keys.items() if old and keys.get(ch) and keys[ch] != old]
        self.retired = [*self.retired, *rotated][-64:]
        report = sync(profile, env=self.env, backups=redacting_store(self.retired, self.options.backups),
                      resolver=self.resolver)
        self.progress.tick()
        self.keys = keys
        if rotated:
            scrub_backups(rotated, self.options.backups)
            log.info("key rotated on %d channel(s): old key removed from conduit's backups", len(rotated))
        self._record(report, trigger)
        self.route = log_switch(self.route, profile, self.resolver, report)
        self._note_routing_problem()  # the sync's Resolver read the routing file too
        self._rewatch()
        self._check_new_files(profile)
        if self.catalog_files and catalog_key(profile) != self.catalogs:
            # a list written during the sync, maybe into a directory watched only from now on: one more batch
            self.queue.put(next(iter(self.catalog_files)))

    def _check_new_files(self, profile: LoadedProfile) -> None:
        """Tools whose files are watched from now on (known only once their adapter planned them): dry-run
        checked once, so a change made between the sync's write and the new watch is drift, not lost."""
        ok = {n for n, t in self.state.tools.items() if t.status in ("changed", "unchanged") and n in profile.model.tools}
        fresh = [n for n, t in self.tracks.items() if set(t.files) - self._seen_files and n in ok]
        self._seen_files |= {f for t in self.tracks.values() for f in t.files}
        for tr in sync(profile, tools=fresh, env=self.env, dry_run=True, resolver=self.resolver).tools if fresh else ():
            self._drift(profile, tr)

    def _note_routing_problem(self) -> None:
        """Log why the routing file could not be read (``reading_problem``: unparseable, too large...) once per
        distinct problem (only for a profile with a ``[fallback]``); the last good decision stays in force."""
        problem = reading_problem() if self.profile is not None and self.profile.model.fallback is not None else None
        if problem is not None and problem != self.routing_problem:
            log.warning("routing: %s", self.redactor(problem))
        self.routing_problem = problem

    def _record(self, report: SyncReport, trigger: str, *, drift_check: bool = False) -> None:
        """Log one line per tool, remember what conduit wrote (digests), update the state document."""
        self.syncs += 1
        warn_readable(report.notices)  # a key file or the secrets file others may read: said once, naming the fix
        rests = rest_after_sync(report, self.resolver, self.env, self.options.backups) if self.resolver else None
        record_report(self.state, report, trigger, mask=self.redactor, drift_check=drift_check, rests=rests)
        for tr in report.tools:
            log_tool(tr, trigger)
            track = self.tracks.setdefault(tr.tool, ToolTrack())
            if tr.results:
                track.files = [r.path for r in tr.results]
            track.refresh()
        enabled = set(self.profile.model.tools if self.profile else ())
        for gone in set(self.state.tools) - {t.tool for t in report.tools} - enabled:
            del self.state.tools[gone]
            self.tracks.pop(gone, None)

    def _rewatch(self) -> None:
        files: set[Path] = {self.profile_path, self.routing_path}
        self.catalog_files = catalog_files(self.profile) if self.profile is not None else set()
        files |= self.catalog_files
        self.key_files = set()
        if self.profile is not None:
            for ch in self.profile.model.channels.values():
                kp = key_file_path(ch.key) if ch.key is not None else None
                if kp is not None:
                    self.key_files.add(kp)
        files |= self.key_files
        for track in self.tracks.values():
            files |= set(track.files)
        self.watcher.watch(sorted(files))
        self.state.daemon.watching = [str(d) for d in self.watcher.directories]

    # -- drift -----------------------------------------------------------------------------------------

    def _check_tools(self, profile: LoadedProfile, events: dict[str, set[Path]]) -> bool:
        """Tool files changed: a tool whose last sync failed is synced again (the change may have fixed it);
        the others are dry-run synced to tell drift from nothing. False when every event was conduit's own
        write (nothing to record)."""
        suspects = []
        for name, hit in events.items():
            if self.tracks[name].unchanged(hit):
                log.debug("%s: event from conduit's own write (content unchanged since the sync)", name)
            else:
                suspects.append(name)
        errored = [t for t in suspects if t in self.state.tools
                   and self.state.tools[t].status in ("error", "not_found")]
        if errored:  # the file was broken or missing: a real sync, not drift
            self._record(sync(profile, tools=errored, env=self.env, backups=self._backups(),
                              resolver=self.resolver), "tool file")
            self._rewatch()
        checks = [t for t in suspects if t not in errored and t in profile.model.tools]
        if checks:
            dry = sync(profile, tools=checks, env=self.env, dry_run=True, resolver=self.resolver)
            for tr in dry.tools:
                self._drift(profile, tr)
        return bool(suspects)

    def _drift(self, profile: LoadedProfile, dry: ToolReport) -> None:
        """Record (and with ``reapply``, undo) what a dry-run sync of one tool found."""
        entry, track = self.state.tool(dry.tool), self.tracks[dry.tool]
        policy = profile.model.on_drift
        if dry.status != "changed":
            if entry.drift:
                log.info("drift %s: resolved (owned keys match the profile again)", dry.tool)
            entry.drift = None
            track.refresh()
            return
        record, same = drift_record(dry, entry.drift, policy)
        if not same:
            log.warning("drift %s: %s", dry.tool, drift_summary(record, policy))
            log.debug("drift %s diff (profile would write):\n%s", dry.tool, record.diff)
        entry.drift = record
        if policy == "reapply" and track.may_reapply():
            real = sync(profile, tools=[dry.tool], env=self.env, backups=self._backups())
            self._record(real, "drift", drift_check=True)
            record.reapplied, record.reapplied_at = True, utc_now()
            log.info("drift %s: profile re-applied", dry.tool)
            return
        if policy == "reapply":
            log.warning("drift %s: not re-applied: changed back %d times in %.0f s; another program keeps "
                        "writing it (close it, then save the profile)", dry.tool, REAPPLY_LIMIT, REAPPLY_WINDOW_S)
        track.refresh()  # remember this content as seen, so the same drift is not re-checked on every event

    # -- state -----------------------------------------------------------------------------------------

    def _save_state(self) -> None:
        try:
            write_state(self.state, redact=self.redactor)  # no key the daemon knows may reach the file
        except OSError as exc:
            log.error("cannot write the state file: %s", exc)
        if self.ready.is_set():
            sd_notify(f"STATUS={status_line(self.state, self.profile is not None, self.profile_error)}")

