"""What ``conduit wait`` waits for, and the waiting: conditions checked against ``/v1/status`` bodies.

The third everyday use (docs/design.md): a script asks "is there 20 GiB free and is the gateway healthy?"
before it starts. The answer is an exit code, pg_isready style: 0 ready, 1 not ready (timeout reached), 2 agent
unreachable, 3 bad arguments (``BadArguments``: a GPU or channel the agent does not know).

Only the standard library and the kernel are imported: every ``conduit`` command imports the CLI module
that uses this one.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from conduit.errors import AgentUnreachable, BadArguments
from conduit.units import format_bytes

EXIT_READY, EXIT_NOT_READY, EXIT_UNREACHABLE, EXIT_BAD_ARGS = 0, 1, 2, 3


@dataclass
class Conditions:
    """What ``conduit wait`` waits for; None/False means "not asked".

    Attributes:
        vram_free_bytes: a GPU (or MIG instance) with at least this much free memory, bytes.
        gpu: restrict ``vram_free_bytes`` to this GPU (index or uuid).
        channels: channel names that must be healthy (every protocol's last probe ok).
        vllm_ready: the supervised vLLM's snapshot says ``state == "ready"``.
    """

    vram_free_bytes: int | None = None
    gpu: str | None = None
    channels: tuple[str, ...] = ()
    vllm_ready: bool = False

    def empty(self) -> bool:
        """True when nothing was asked."""
        return self.vram_free_bytes is None and not self.channels and not self.vllm_ready


def _memory_units(status: dict[str, Any], gpu: str | None) -> list[tuple[str, int | None]]:
    """(name, free bytes) of each place a job could go: every GPU, or each MIG instance of a GPU in MIG
    mode (a job cannot span instances). Raises BadArguments for a ``gpu`` the agent does not see."""
    gpus = (status.get("gpus") or {}).get("gpus") or []
    if gpu is not None:
        sel = [g for g in gpus if str(g.get("index")) == gpu or g.get("uuid") == gpu]
        if not sel and gpus:
            raise BadArguments(f"no GPU {gpu!r}; the agent sees "
                               + ", ".join(f"{g.get('index')} ({g.get('uuid')})" for g in gpus))
        gpus = sel
    units: list[tuple[str, int | None]] = []
    for g in gpus:
        if g.get("mig_enabled") and g.get("mig"):
            units += [(f"GPU {g['index']} MIG {m['index']}", m.get("free_bytes")) for m in g["mig"]]
        else:
            units.append((f"GPU {g.get('index')}", g.get("free_bytes")))
    return units


def _vram_unmet(status: dict[str, Any], want: int, gpu: str | None) -> list[str]:
    units = _memory_units(status, gpu)
    if not units:
        return [f"no GPU to check ({(status.get('gpus') or {}).get('reason') or 'none reported'})"]
    if any(free is not None and free >= want for _, free in units):
        return []
    best = ", ".join(f"{name}: {format_bytes(free)} free" for name, free in units)
    return [f"want {format_bytes(want)} free; {best}"]


def _channels_unmet(status: dict[str, Any], names: tuple[str, ...]) -> list[str]:
    channels = status.get("channels") or {}
    out: list[str] = []
    for name in names:
        ch = channels.get(name)
        if ch is None:
            raise BadArguments(f"no channel named {name!r}; the agent knows: {', '.join(channels) or '(none)'}")
        if not ch.get("healthy"):
            msgs = "; ".join(f"{p}: {v.get('verdict')} ({v.get('message')})" for p, v in ch.get("protocols", {}).items())
            out.append(f"channel {name} is not healthy: {msgs}")
    return out


def unmet(status: dict[str, Any], cond: Conditions) -> list[str]:
    """The conditions ``status`` (a ``/v1/status`` body) does not meet, one line each; empty when ready.

    Raises:
        BadArguments: ``--gpu`` or ``--channel`` names something the agent does not know (exit code 3).
    """
    out: list[str] = []
    if cond.vram_free_bytes is not None:
        out += _vram_unmet(status, cond.vram_free_bytes, cond.gpu)
    out += _channels_unmet(status, cond.channels)
    if cond.vllm_ready:
        state = (status.get("vllm") or {}).get("state")
        if state != "ready":
            out.append(f"vLLM is not ready (state: {state})")
    return out


def wait_until(cond: Conditions, timeout_s: float, fetch: Callable[[], dict[str, Any]],
               poll_s: float = 0.5, sleep: Callable[[float], None] = time.sleep) -> tuple[int, str]:
    """Poll ``fetch()`` (a ``/v1/status`` body) until ``cond`` holds or ``timeout_s`` passes.

    Returns:
        (exit code, one line): 0 ready; 1 timed out (the line lists what is unmet); 2 the agent was still
        unreachable at the deadline (an agent started just before, ``conduit agent & conduit wait ...``, is
        waited for within ``timeout_s``; with ``timeout_s`` 0, one try).
    Raises:
        BadArguments: unknown GPU or channel (exit code 3).
    """
    deadline = time.monotonic() + timeout_s
    last_unreachable: AgentUnreachable | None = None
    problems: list[str] = []
    while True:
        try:
            status = fetch()
            last_unreachable = None
            problems = unmet(status, cond)
            if not problems:
                return EXIT_READY, "ready"
        except AgentUnreachable as exc:
            last_unreachable = exc
        left = deadline - time.monotonic()
        if left <= 0:
            if last_unreachable is not None:
                return EXIT_UNREACHABLE, str(last_unreachable)
            return EXIT_NOT_READY, f"timed out after {timeout_s:g} s: " + "; ".join(problems)
        sleep(min(poll_s, left))


__all__ = ["EXIT_BAD_ARGS", "EXIT_NOT_READY", "EXIT_READY", "EXIT_UNREACHABLE", "Conditions", "unmet",
           "wait_until"]
