"""Every process one vLLM launch started, including those that left its process group and session.

A descendant that calls ``setsid()`` (or ``setpgid``) leaves the group that ``process.kill_group`` signals, and
one whose parent exits is re-parented away from the launch (docs/cases.md C16). So the supervisor also
keeps a ``Tree`` per launch and the stop kills all of it:

- ``become_subreaper``: the agent (and ``conduit vllm run``) is a child subreaper (``prctl(2)``
  ``PR_SET_CHILD_SUBREAPER``, Linux), so orphans of the launch are re-parented to it rather than to init;
- ``Tree.sample``: while the launch runs, the leader's descendants (psutil ``children(recursive=True)``) and the
  supervising process's own children that carry the launch's marker (``CONDUIT_VLLM_LAUNCH`` in their
  environment: orphans re-parented to the subreaper) are remembered with their create times;
- ``Tree.sweep``: at a stop, the same plus every process of the user that carries the marker (an orphan that
  went to init where there is no subreaper);
- ``Tree.reap``: remembered processes that died as our children (re-parented orphans) are waited for, so they
  do not stay zombies; the leader is left to its asyncio watcher.

A remembered pid counts only while its create time matches (a reused pid is someone else's). Facts come from
psutil (``/proc`` on Linux); ESRCH/EPERM are tolerated everywhere.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import sys
import threading
from collections.abc import Iterable

import psutil

log = logging.getLogger("conduit.daemon.vllm.supervisor")

#: The environment variable every process of one launch inherits; its value names the launch.
MARKER_ENV = "CONDUIT_VLLM_LAUNCH"
#: prctl(2) option number (linux/prctl.h).
PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    """Make this process a child subreaper (``prctl(PR_SET_CHILD_SUBREAPER, 1)`` through ctypes), so
    orphaned descendants re-parent to it. Returns True when set; elsewhere than Linux, or when the call fails,
    logs why at debug level and returns False (the marker sweep still finds orphans at a stop)."""
    if not sys.platform.startswith("linux"):
        log.debug("not a child subreaper: PR_SET_CHILD_SUBREAPER exists on Linux only")
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        rc = libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError) as exc:
        log.debug("not a child subreaper: %s", exc)
        return False
    if rc != 0:
        log.debug("not a child subreaper: prctl failed: %s", os.strerror(ctypes.get_errno()))
        return False
    return True


def _same(p: psutil.Process, create_time: float) -> bool:
    try:
        return bool(abs(p.create_time() - create_time) < 0.5)
    except psutil.Error:
        return False


def _marked(p: psutil.Process, marker: str) -> bool:
    try:
        return bool(p.environ().get(MARKER_ENV) == marker)
    except (psutil.Error, OSError):
        return False


class Tree:
    """The processes of one launch (see the module). Thread-safe: ``sample`` may run in a worker thread.

    Args:
        leader: the launched process's pid (its group's pgid).
        create_time: the leader's create time, epoch seconds (psutil).
        marker: the launch's ``CONDUIT_VLLM_LAUNCH`` value, or None (an adopted launch from before markers).
    """

    def __init__(self, leader: int, create_time: float, marker: str | None) -> None:
        self.leader = leader
        self.marker = marker
        self._lock = threading.Lock()
        self._seen: dict[int, float] = {leader: create_time}

    def _remember(self, procs: Iterable[psutil.Process]) -> None:
        found: dict[int, float] = {}
        for p in procs:
            with contextlib.suppress(psutil.Error):
                found[p.pid] = p.create_time()
        with self._lock:
            for pid, ct in found.items():
                self._seen.setdefault(pid, ct)

    def _scan(self, everywhere: bool) -> list[psutil.Process]:
        """One pass over the process table: the descendants of every live remembered process, and the marked
        processes among our children (re-parented orphans) -- or, ``everywhere``, among the user's processes
        younger than the leader (an orphan that went to init)."""
        roots = {p.pid for p in self.alive()}
        with self._lock:
            known, born = set(self._seen), self._seen[self.leader] - 1.0
        me, uid = os.getpid(), os.getuid()
        attrs = ["ppid", "uids", "create_time"] if everywhere else ["ppid"]  # the periodic pass reads less
        procs = {p.pid: p for p in psutil.process_iter(attrs)}
        kids: dict[int, list[int]] = {}
        for pid, p in procs.items():
            kids.setdefault(p.info["ppid"] or 0, []).append(pid)
        found, todo = set(), list(roots)
        while todo:  # breadth-first below the roots
            for child in kids.get(todo.pop(), []):
                if child not in found and child not in roots:
                    found.add(child)
                    todo.append(child)
        if self.marker is not None:
            for pid, p in procs.items():
                if pid in known or pid in found:
                    continue
                ours = everywhere and p.info["uids"] is not None and p.info["uids"].real == uid
                young = everywhere and (p.info["create_time"] or 0) >= born
                if (p.info["ppid"] == me or (ours and young)) and _marked(p, self.marker):
                    found.add(pid)
        return [procs[pid] for pid in found]

    def sample(self) -> None:
        """Remember the launch's descendants and its re-parented orphans; reap dead ones."""
        self._remember(self._scan(everywhere=False))
        self.reap()

    def sweep(self) -> list[psutil.Process]:
        """``sample`` plus every process of the user carrying the marker; returns the live members."""
        self._remember(self._scan(everywhere=True))
        return self.alive()

    def alive(self) -> list[psutil.Process]:
        """Remembered processes that still run (not zombies) and are still the same process; those gone for
        good (not even a zombie to reap) are forgotten, so a long run that spawns many helpers stays small."""
        with self._lock:
            seen = dict(self._seen)
        out, gone = [], []
        for pid, ct in seen.items():
            try:
                p = psutil.Process(pid)
                if not _same(p, ct):
                    gone.append(pid)
                elif p.status() != psutil.STATUS_ZOMBIE:
                    out.append(p)
            except psutil.NoSuchProcess:
                gone.append(pid)
            except psutil.Error:
                continue
        with self._lock:
            for pid in gone:
                if pid != self.leader:
                    self._seen.pop(pid, None)
        return out

    def pids(self) -> set[int]:
        """The pids of ``alive()``."""
        return {p.pid for p in self.alive()}

    def reap(self) -> None:
        """Wait for remembered processes that died as children of this process (not the leader: its asyncio
        watcher owns its exit status), so a re-parented orphan does not stay a zombie."""
        me = os.getpid()
        with self._lock:
            seen = dict(self._seen)
        for pid, ct in seen.items():
            if pid == self.leader:
                continue
            try:
                p = psutil.Process(pid)
                if p.ppid() != me or p.status() != psutil.STATUS_ZOMBIE or not _same(p, ct):
                    continue
            except psutil.Error:
                continue
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(pid, os.WNOHANG)


__all__ = ["MARKER_ENV", "PR_SET_CHILD_SUBREAPER", "Tree", "become_subreaper"]
