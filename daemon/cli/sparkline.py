"""Sparklines and the short history behind them, for ``conduit status --watch`` (standard library only).

A sparkline is one character per value from the eight block elements ``▁▂▃▄▅▆▇█`` (U+2581..U+2588), the lowest
for the bottom of the scale and the highest for the top; a missing value is a space. The view keeps its own
history of what it polled (``Series``: timestamped values, the last ``window_s`` seconds), because the agent's
``/v1/gpus`` reports only the extremes of its window (``GpuHistory.window``: ``min_free_bytes``,
``peak_used_bytes``), not the samples themselves.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterable, Sequence

BLOCKS = "▁▂▃▄▅▆▇█"


def sparkline(values: Sequence[float | None], lo: float | None = None, hi: float | None = None,
              missing: str = " ") -> str:
    """One block character per value, scaled between ``lo`` and ``hi``.

    Args:
        values: the values, oldest first; None (or NaN) is drawn as ``missing`` (default a space).
        lo, hi: the bottom and top of the scale (default: the smallest and largest value given). Values outside
            are clamped. When the scale is empty (``hi <= lo``) every value is drawn as the lowest block.
    Returns:
        a string of ``len(values)`` characters.
    """
    known = [v for v in values if v is not None and not math.isnan(v)]
    if not known:
        return missing * len(values)
    bottom = min(known) if lo is None else lo
    top = max(known) if hi is None else hi
    span = top - bottom
    out = []
    for v in values:
        if v is None or math.isnan(v):
            out.append(missing)
        elif span <= 0:
            out.append(BLOCKS[0])
        else:
            frac = min(1.0, max(0.0, (v - bottom) / span))
            out.append(BLOCKS[min(len(BLOCKS) - 1, int(frac * len(BLOCKS)))])
    return "".join(out)


class Series:
    """Timestamped values of one quantity over the last ``window_s`` seconds (Unix time, seconds).

    Args:
        window_s: how far back values are kept, seconds (default 300, the view's five minutes).
        maxlen: at most this many values (default: one a second over the window, plus one).
    """

    def __init__(self, window_s: float = 300.0, maxlen: int | None = None) -> None:
        self.window_s = window_s
        self._points: deque[tuple[float, float]] = deque(maxlen=maxlen or int(window_s) + 1)

    def add(self, t: float, value: float | None) -> bool:
        """Record ``value`` taken at ``t``; a value not newer than the last one (the same sample polled
        again) or None is ignored. Returns whether it was recorded. Values older than the window are dropped."""
        if value is None or (self._points and t <= self._points[-1][0]):
            return False
        self._points.append((t, float(value)))
        while self._points and self._points[0][0] < t - self.window_s:
            self._points.popleft()
        return True

    def __len__(self) -> int:
        return len(self._points)

    @property
    def last_t(self) -> float | None:
        """When the newest value was taken (Unix seconds), or None when there is none."""
        return self._points[-1][0] if self._points else None

    def values(self, n: int | None = None) -> list[float]:
        """The values, oldest first; only the newest ``n`` when given."""
        vals = [v for _, v in self._points]
        return vals if n is None else vals[-n:] if n > 0 else []

    def buckets(self, now: float, width: int, agg: Callable[[Iterable[float]], float] = min) -> list[float | None]:
        """The window ``[now - window_s, now]`` cut into ``width`` equal slots, oldest first, each the ``agg``
        (default ``min``: the worst headroom) of the values taken in it. A slot before the first value is None;
        an empty slot after it repeats the one before (a reading holds until the next one)."""
        if width <= 0:
            return []
        slot_s = self.window_s / width
        start = now - self.window_s
        slots: list[list[float]] = [[] for _ in range(width)]
        for t, v in self._points:
            i = int((t - start) / slot_s)
            if 0 <= i < width:
                slots[i].append(v)
            elif i == width:  # taken exactly at ``now``
                slots[-1].append(v)
        out: list[float | None] = []
        prev: float | None = None
        for vals in slots:
            cur = agg(vals) if vals else prev
            out.append(cur)
            prev = cur
        return out


class History:
    """A ``Series`` per key (a GPU's uuid, a ``channel/protocol``), made on first use; keys not updated for a
    whole window are dropped by ``prune``."""

    def __init__(self, window_s: float = 300.0, maxlen: int | None = None) -> None:
        self.window_s = window_s
        self.maxlen = maxlen
        self._series: dict[str, Series] = {}

    def series(self, key: str) -> Series:
        """The series of ``key`` (an empty one the first time)."""
        s = self._series.get(key)
        if s is None:
            s = self._series[key] = Series(self.window_s, self.maxlen)
        return s

    def add(self, key: str, t: float, value: float | None) -> bool:
        """``series(key).add(t, value)``."""
        return self.series(key).add(t, value)

    def prune(self, now: float) -> None:
        """Forget the keys whose newest value is older than the window (a GPU or channel that went away)."""
        for key in [k for k, s in self._series.items() if s.last_t is None or s.last_t < now - self.window_s]:
            del self._series[key]

    def keys(self) -> list[str]:
        """The keys with a series, in the order they were first seen."""
        return list(self._series)


__all__ = ["BLOCKS", "History", "Series", "sparkline"]
