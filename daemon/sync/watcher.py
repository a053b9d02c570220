"""File watching for the sync daemon: watchdog (inotify on Linux) on the *directories* of the files that matter.

Watching a directory, not the file, is what makes every way of saving work:

- vim (``backupcopy=no``) and JetBrains rename the old file away and write a new one: the watch on the old
  inode would go silent, the directory watch sees ``moved``/``created``;
- VS Code and ``sed -i`` write a temp file and rename it over the original: ``moved`` with ``dest_path`` = the file;
- ``> file`` then ``write`` (truncate + write) gives ``modified`` and ``closed`` (IN_CLOSE_WRITE) on the file;
- SQLite commits (CC Switch) give ``modified`` on the database (and its ``-wal`` file in WAL mode).

Only write-side events are subscribed (created, modified, moved, deleted, closed-after-write): the daemon's own
reads of the files it watches (IN_OPEN, IN_CLOSE_NOWRITE) would otherwise wake it up after every sync. A watched
file whose directory does not exist yet is watched through its nearest existing ancestor, so a tool installed
later (``~/.cline`` created) is noticed. The parent of each watched directory is watched too: a directory that is
deleted, moved away or replaced (``rm -rf ~/.local/state/conduit``, ``~/.config/conduit`` restored from a
backup) reports its files and marks the watcher ``dirty``; the next ``watch`` drops the dead inotify watch and
watches the directory again where it is now (or its nearest existing ancestor until it comes back). Nothing
here polls: with watchdog >= 5 the observer's threads block on inotify and on a queue, so an idle daemon does
not wake up.

The watcher only says *which watched file* changed; debouncing and deciding what a change means is the daemon's
job (``conduit.daemon.sync.loop``).
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from watchdog.events import (
    DirCreatedEvent,
    DirDeletedEvent,
    DirMovedEvent,
    FileClosedEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver, ObservedWatch

log = logging.getLogger("conduit.watcher")

#: The event types subscribed to (watchdog turns this list into the inotify mask: no IN_OPEN/IN_ACCESS).
EVENT_FILTER: list[type[FileSystemEvent]] = [
    FileCreatedEvent, FileModifiedEvent, FileMovedEvent, FileDeletedEvent, FileClosedEvent,
    DirCreatedEvent, DirMovedEvent, DirDeletedEvent,
]

#: Suffixes of companion files whose change is a change of the main file (SQLite's write-ahead log).
COMPANION_SUFFIXES = ("-wal",)


def _norm(path: str | os.PathLike[str]) -> str:
    return os.path.normpath(os.path.abspath(os.fspath(path)))


def nearest_existing_dir(path: Path) -> Path:
    """The deepest existing directory at or above ``path.parent`` (``/`` at worst)."""
    d = path.parent
    while not d.is_dir() and d != d.parent:
        d = d.parent
    return d


@dataclass(frozen=True)
class _View:
    """What the handler matches events against: published whole by ``Watcher.watch`` (one attribute store),
    read whole by watchdog's thread, so neither side needs a lock."""

    interest: Mapping[str, tuple[Path, ...]] = field(default_factory=dict)
    dirs: frozenset[str] = frozenset()


class Watcher:
    """Watches the directories of a set of files and calls ``on_change(file)`` for each event that touches one.

    Args:
        on_change: called from watchdog's thread with the watched file's path (as given to ``watch``) for
            every write-side event naming it (as source or destination of a rename), or naming a missing
            directory on the way to it. Must be quick and thread-safe (the daemon puts it on a queue).

    Threads and locks (a lock held across a call into watchdog once deadlocked the daemon; docs/cases.md C21):
    watchdog's dispatcher thread holds the observer's lock while it calls our handler, and
    ``schedule``/``unschedule`` take that same lock. So no lock of ours is ever held across a call into watchdog, and the handler takes
    no lock at all: it reads one immutable ``_View`` that ``watch`` replaces in a single store. ``watch``,
    ``start``, ``stop`` and ``directories`` are called from one thread only (the daemon's loop thread).

    Example::

        w = Watcher(lambda p: q.put(p))
        w.watch([profile, keyfile, claude_settings])
        w.start()
        ...
        w.stop()
    """

    def __init__(self, on_change: Callable[[Path], None]) -> None:
        self._on_change = on_change
        self._observer: BaseObserver = Observer()
        self._view = _View()
        # watched directory -> its watch; only the thread that calls ``watch`` touches it
        self._watches: dict[str, ObservedWatch] = {}
        self._handler = _Handler(self)
        self._started = False
        # directories whose inotify watch died (deleted, moved away, replaced): filled by watchdog's thread
        # (deque appends are atomic), emptied by ``watch``
        self._dead: collections.deque[str] = collections.deque()
        self._dirty = False

    @property
    def dirty(self) -> bool:
        """True when a directory on the way to a watched file appeared, vanished or was replaced since the last
        ``watch``: call ``watch`` again (before reading the files) to follow it."""
        return self._dirty

    @property
    def directories(self) -> list[Path]:
        """The directories currently watched (sorted)."""
        return sorted(Path(d) for d in self._watches)

    def watch(self, files: Iterable[Path] | Mapping[Path, object]) -> None:
        """Watch exactly these files from now on (replaces the previous set).

        Each file is matched by its path and, when it is a symlink, by its resolved path too (so the
        directory holding the real file is watched as well). Directories no longer needed are unwatched.
        Call it from one thread only (the daemon's loop); it holds no lock while it calls watchdog.
        """
        self._dirty = False  # first: an event from now on sets it again
        interest, dirs = _interest(files)
        dead = set()
        while self._dead:
            dead.add(self._dead.popleft())
        # 1. publish the new interest first: events from a directory about to be added already match
        self._view = _View(interest, frozenset(self._watches) | frozenset(dirs))
        # 2. call watchdog with no lock of ours held (its dispatcher may be inside our handler right now)
        for d in [d for d in self._watches if d not in dirs or d in dead]:  # a dead watch is made anew
            with contextlib.suppress(Exception):  # watchdog already stopped the emitter of a deleted directory
                self._observer.unschedule(self._watches.pop(d))
        for d in sorted(dirs - set(self._watches)):
            try:
                self._watches[d] = self._observer.schedule(self._handler, d, recursive=False,
                                                           event_filter=EVENT_FILTER)
            except OSError as exc:  # a directory removed meanwhile, or out of inotify watches
                log.warning("cannot watch %s: %s", d, exc.strerror or exc)
        # 3. publish what is really watched
        self._view = _View(interest, frozenset(self._watches))

    def start(self) -> None:
        """Start watchdog's threads (idempotent)."""
        if not self._started:
            self._observer.start()
            self._started = True

    def stop(self) -> None:
        """Stop and join watchdog's threads (at most 5 s)."""
        if self._started:
            self._observer.stop()
            self._observer.join(timeout=5)
            self._started = False

    def _dispatch(self, event: FileSystemEvent) -> None:
        view = self._view  # one read: the handler never waits on the thread that calls ``watch``
        paths = [event.src_path]
        dest = getattr(event, "dest_path", "")
        if dest:
            paths.append(dest)
        hit: list[Path] = []
        for p in paths:
            hit.extend(view.interest.get(_norm(os.fsdecode(p)), ()))
        if event.is_directory:
            hit.extend(self._directory_moved(view, event))
        for f in dict.fromkeys(hit):
            self._on_change(f)

    def _directory_moved(self, view: _View, event: FileSystemEvent) -> list[Path]:
        """A directory event: a watched directory that was deleted, moved away or replaced is dead (``watch``
        makes it anew) and its files are reported; any directory event on the way to a watched file (an
        ``interest`` key) makes the watcher ``dirty``. Returns the watched files concerned."""
        src = _norm(os.fsdecode(event.src_path))
        dest = getattr(event, "dest_path", "")
        dst = _norm(os.fsdecode(dest)) if dest else ""
        gone = [d for d in dict.fromkeys((src, dst)) if d and d in view.dirs]
        hit: list[Path] = []
        for d in gone:
            self._dead.append(d)
            hit.extend(f for k, fs in view.interest.items() if os.path.dirname(k) == d for f in fs)
        if gone or any(p in view.interest for p in (src, dst) if p):
            self._dirty = True
        return hit


def _interest(files: Iterable[Path] | Mapping[Path, object]) -> tuple[dict[str, tuple[Path, ...]], set[str]]:
    """Normalized path of interest -> the watched files an event on it concerns, and the directories to watch."""
    interest: dict[str, list[Path]] = {}
    dirs: set[str] = set()
    for f in files:
        f = Path(f)
        names = {_norm(f)}
        try:
            names.add(_norm(os.path.realpath(f)))
        except OSError:
            pass
        for name in names:
            p = Path(name)
            for candidate in (name, *(name + s for s in COMPANION_SUFFIXES)):
                interest.setdefault(candidate, []).append(f)
            if p.parent.is_dir():
                dirs.add(_norm(p.parent))
                up = p.parent.parent
                if up != p.parent and up.is_dir():  # the directory's own deletion or return is seen from here
                    dirs.add(_norm(up))
                    interest.setdefault(_norm(p.parent), []).append(f)
            else:
                anchor = nearest_existing_dir(p)
                dirs.add(_norm(anchor))
                # the first missing directory below the anchor: its creation is the event to wait for
                rel = p.relative_to(anchor).parts
                interest.setdefault(_norm(anchor / rel[0]), []).append(f)
    return {k: tuple(dict.fromkeys(v)) for k, v in interest.items()}, dirs


class _Handler(FileSystemEventHandler):
    def __init__(self, watcher: Watcher) -> None:
        self._watcher = watcher

    def on_any_event(self, event: FileSystemEvent) -> None:
        try:
            self._watcher._dispatch(event)
        except Exception:  # never kill watchdog's thread
            log.exception("error handling %s", event)
