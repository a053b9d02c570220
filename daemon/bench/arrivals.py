"""When requests are sent: closed-loop workers over a list of concurrency levels.

A *level* sends a fixed number of requests with ``concurrency`` closed-loop workers: each worker sends its
next request as soon as its previous one ends, so exactly ``concurrency`` requests are in flight until the
last ones drain. A *sweep* runs the levels in order (default 1, 2, 4, ... 64). One concurrency model
(STYLE.md habit 13): asyncio tasks in one ``TaskGroup``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

DEFAULT_LEVELS: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)

W = TypeVar("W")
R = TypeVar("R")


def parse_levels(text: str) -> tuple[int, ...]:
    """Parse ``"1,2,4"`` into ``(1, 2, 4)`` (blank items are skipped).

    Raises:
        ValueError: an item is not a positive integer (the message names it), or no item is given.
    """
    out = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        if not item.isdigit() or int(item) < 1:
            raise ValueError(f"{item!r} is not a positive integer")
        out.append(int(item))
    if not out:
        raise ValueError("no concurrency level given")
    return tuple(out)


async def closed_loop(workers: Sequence[W], count: int, job: Callable[[W, int], Awaitable[R]]) -> list[R]:
    """Run ``job(worker, i)`` for i in 0..count-1 with one closed loop per worker; return results by ``i``.

    Worker k takes the next unclaimed ``i`` whenever its previous job ends, so at most ``len(workers)`` jobs
    run at once (fewer when ``count`` is smaller). A job that raises cancels the rest (``TaskGroup``).
    """
    results: dict[int, R] = {}
    next_index = 0

    async def loop(worker: W) -> None:
        nonlocal next_index
        while next_index < count:
            i = next_index  # claimed before the await: asyncio switches tasks only there
            next_index += 1
            results[i] = await job(worker, i)

    async with asyncio.TaskGroup() as tg:
        for worker in workers[:count]:
            tg.create_task(loop(worker))
    return [results[i] for i in sorted(results)]
