"""When requests are sent: closed-loop workers over concurrency levels, or open-loop arrivals at a rate.

Closed loop (the default sweep): a *level* sends a fixed number of requests with ``concurrency`` workers; each
worker sends its next request as soon as its previous one ends, so exactly ``concurrency`` requests are in
flight until the last ones drain. Levels run in order (default 1, 2, 4, ... 64).

Open loop (``--request-rate``): requests are sent at precomputed times whatever the server does, as
``vllm bench serve`` sends them (``vllm/benchmarks/serve.py``, ``get_request``): gaps are gamma-distributed
with shape ``burstiness`` and mean ``1 / rate`` (burstiness 1 is a Poisson process: exponential gaps), the
cumulative times are rescaled so that the last request is sent at ``n / rate`` (vLLM does this to remove the
1-2 % drift of a sum of random gaps), and ``rate = inf`` sends everything at once. ``max_concurrency`` caps the
requests in flight with a semaphore (vLLM's ``--max-concurrency``); time spent waiting on it is recorded.

One concurrency model (the agent's too): asyncio tasks in one ``TaskGroup``.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
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


def parse_rates(text: str) -> tuple[float, ...]:
    """Parse ``"2,4.5,inf"`` into request rates in requests per second (``inf``: all at once).

    Raises:
        ValueError: an item is not a positive number or ``inf`` (the message names it), or none is given.
    """
    out = []
    for item in text.split(","):
        item = item.strip().lower()
        if not item:
            continue
        try:
            rate = float(item)
        except ValueError:
            raise ValueError(f"{item!r} is not a request rate (requests/s, or inf)") from None
        if math.isnan(rate) or rate <= 0:
            raise ValueError(f"{item!r} is not a positive request rate")
        out.append(rate)
    if not out:
        raise ValueError("no request rate given")
    return tuple(out)


def send_times(n: int, rate: float, burstiness: float = 1.0, rng: random.Random | None = None) -> list[float]:
    """The send time of each of ``n`` requests in seconds after the start, as ``vllm bench serve`` draws them.

    Gap i ~ Gamma(shape=burstiness, scale=1/(rate*burstiness)) (mean 1/rate; burstiness 1: exponential);
    ``rate = inf``: all 0; ``burstiness = inf``: constant gaps 1/rate. The cumulative sums are rescaled so the
    last one is ``n / rate`` (``vllm/benchmarks/serve.py``, ``get_request``). The first request waits its gap
    too, as in vLLM.

    Raises:
        ValueError: ``n`` < 0, ``rate`` <= 0 or ``burstiness`` <= 0.
    """
    if n < 0 or not rate > 0 or not burstiness > 0:
        raise ValueError(f"need n >= 0, rate > 0 and burstiness > 0, got {n}, {rate}, {burstiness}")
    if math.isinf(rate):
        return [0.0] * n
    rng = rng or random.Random(0)
    theta = 1.0 / (rate * burstiness)
    total, out = 0.0, []
    for _ in range(n):
        total += 1.0 / rate if math.isinf(burstiness) else rng.gammavariate(burstiness, theta)
        out.append(total)
    if out and out[-1] > 0:
        scale = (n / rate) / out[-1]
        out = [t * scale for t in out]
    return out


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


async def open_loop(times: Sequence[float], job: Callable[[int, float], Awaitable[R]],
                    max_concurrency: int | None = None) -> list[R]:
    """Start ``job(i, queued_s)`` at ``times[i]`` seconds after now (perf_counter), whatever earlier jobs do.

    With ``max_concurrency``, a job first waits for one of that many slots; ``queued_s`` is how long it waited
    (vLLM's ``client_queue_time``), 0.0 without a cap. Returns results by ``i``. A job that raises cancels the
    rest (``TaskGroup``).

    Raises:
        ValueError: ``max_concurrency`` < 1.
    """
    if max_concurrency is not None and max_concurrency < 1:
        raise ValueError(f"max_concurrency must be at least 1, got {max_concurrency}")
    sem = asyncio.Semaphore(max_concurrency) if max_concurrency else None
    results: dict[int, R] = {}

    async def one(i: int) -> None:
        if sem is None:
            results[i] = await job(i, 0.0)
            return
        arrived = time.perf_counter()
        async with sem:
            results[i] = await job(i, time.perf_counter() - arrived)

    start = time.perf_counter()
    async with asyncio.TaskGroup() as tg:
        for i, t in enumerate(times):
            delay = start + t - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tg.create_task(one(i))
    return [results[i] for i in sorted(results)]
