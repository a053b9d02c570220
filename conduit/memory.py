"""Handing freed memory back to the system, for the long-running processes (the sync daemon, the agent)."""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Callable

__all__ = ["release_free_memory"]

_trim: Callable[[int], int] | None = None
_tried = False


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
