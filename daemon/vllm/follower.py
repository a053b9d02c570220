"""An ``mp`` follower's health: it serves no HTTP, so its health is its process (the exit watcher), its log (the
diagnosis), and whether the head it joins can be reached.

vLLM's multi-node launcher (``--nnodes/--node-rank/--master-addr/--master-port``, vLLM 0.32
``vllm.engine.arg_utils.EngineArgs``) has every node connect to the head's ``--master-addr:--master-port`` (torch's
``TCPStore``, served by rank 0); a follower runs ``vllm serve ... --headless`` (``vllm/entrypoints/cli/serve.py``
``run_headless``: no API server). ``head_reachable`` opens a TCP connection to that address and closes it at once:
refused, timed out or unresolvable means the follower cannot (re)join. A follower is ``ready`` once its log says
vLLM launched its headless executor (``wait_launched``: the flags and the model were accepted, so an exit before
is a start-up failure, diagnosed and not relaunched); then ``Monitor.run`` posts ``head_reachable`` as a
``Health`` message, so the supervisor's own rules apply: ``ready`` while the head answers, ``unhealthy`` when it
does not, and the follower is killed and started again (with backoff) after ``unhealthy_restart_s`` -- a follower
whose head went away cannot serve again without a new rendezvous.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from pathlib import Path

from conduit.daemon.config.vllm import VllmSettings

#: A connection to the head's master port must open within this many seconds.
CONNECT_TIMEOUT_S = 5.0
#: vLLM 0.32's line once a headless node's configuration is valid (``vllm/entrypoints/cli/serve.py``
#: ``run_headless``): "Launching vLLM (v0.32.0) headless multiproc executor, with head node address ..." (TP/PP
#: across nodes), or "Launching N data parallel engine(s) in headless mode" (data parallel).
LAUNCHED_RE = re.compile(rb"headless multiproc executor|data parallel engine\(s\) in headless mode")
#: Only the first 4 MiB of the log are searched for that line (it comes before the model loads).
LAUNCHED_MAX_BYTES = 4 << 20
#: Seconds between two readings of the log while the line is awaited.
LAUNCHED_POLL_S = 0.25


def follower_of(s: VllmSettings) -> tuple[str, int] | None:
    """``(head host, master port)`` when ``s`` is an ``mp`` follower (``node_rank`` > 0), else None."""
    c = s.cluster
    if c is None or c.backend != "mp" or c.rank == 0:
        return None
    return c.host, c.port


def launched(log_path: Path) -> bool:
    """True when the launch's log (``vllm.log``) holds ``LAUNCHED_RE`` in its first ``LAUNCHED_MAX_BYTES``: vLLM
    accepted the flags and the model's configuration (an unknown flag or a missing model exits before it)."""
    try:
        with log_path.open("rb") as f:
            return LAUNCHED_RE.search(f.read(LAUNCHED_MAX_BYTES)) is not None
    except OSError:
        return False


async def wait_launched(log_path: Path, timeout_s: float) -> bool:
    """Wait until ``launched(log_path)``; False after ``timeout_s`` seconds (``[vllm].startup_timeout_s``)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not await asyncio.to_thread(launched, log_path):
        if loop.time() >= deadline:
            return False
        await asyncio.sleep(LAUNCHED_POLL_S)
    return True


async def head_reachable(host: str, port: int, timeout_s: float = CONNECT_TIMEOUT_S) -> tuple[bool, str]:
    """``(True, "head HOST:PORT accepts connections")`` when a TCP connection to the head's master port opens
    within ``timeout_s`` seconds, else ``(False, why)`` (refused, timed out, unknown host). Never raises."""
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout_s)
    except TimeoutError:
        return False, f"the head {where} did not accept a connection within {timeout_s:g} s"
    except OSError as exc:
        return False, f"the head {where} cannot be reached ({type(exc).__name__}: {exc.strerror or exc})"
    writer.close()
    with contextlib.suppress(OSError, TimeoutError):
        await asyncio.wait_for(writer.wait_closed(), 1.0)
    return True, f"the head {where} accepts connections"


__all__ = ["CONNECT_TIMEOUT_S", "LAUNCHED_RE", "follower_of", "head_reachable", "launched", "wait_launched"]
