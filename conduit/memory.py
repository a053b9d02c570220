"""Handing freed memory back to the system, for the long-running processes (the sync daemon, the agent)."""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Callable

__all__ = ["limit_arenas", "release_free_memory"]

_trim: Callable[[int], int] | None = None
_tried = False
_M_ARENA_MAX = -8
"""glibc's ``mallopt`` parameter for the most malloc arenas (``malloc.h``: ``M_ARENA_MAX``)."""


def limit_arenas(most: int = 2) -> bool:
    """Let glibc's malloc keep at most ``most`` arenas in this process (``mallopt(M_ARENA_MAX, most)``); True when
    it could be asked. Call it before threads start.

    glibc gives a thread that allocates while another holds the main arena an arena of its own (up to 8 per
    core), each with pages of its own. The sync daemon's threads (one inotify emitter per watched folder) only
    hand events over and need none: two arenas keep its idle size down (about 0.8 MB with 21 tools, measured
    by bench/propagation.py). False (a no-op) where the C library has no ``mallopt`` (musl, macOS).
    """
    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(_M_ARENA_MAX, most))


def release_free_memory() -> bool:
    """Return the C heap's free pages to the system (glibc ``malloc_trim(0)``); True when it could be asked.

    A sync of many tools, or a probe that read a large answer, frees what it parsed, but the allocator keeps
    the pages, so a process that runs for days would carry its busiest moment's size. The daemon calls this when
    a batch is done and its queue is empty, the agent after each round of its file loop. False (a no-op) where
    the C library has no ``malloc_trim`` (musl, macOS).
    """
    global _trim, _tried
    if not _tried:
        _tried = True
        try:
            _trim = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
        except (OSError, AttributeError):
            _trim = None
    if _trim is None:
        return False
    _trim(0)
    return True
