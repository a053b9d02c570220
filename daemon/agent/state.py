"""The agent's settings, its lifecycle and the vLLM slot interface: the vocabulary its other modules share.

The vLLM slot. A slot passed to the agent (``run_agent(config, vllm=...)``) is run as given, without
following the profile; it is any object with::

    class VllmSlot(Protocol):
        async def start(self) -> None      # launch vLLM; returns once launched (readiness shows in snapshot)
        async def stop(self) -> None       # stop it (TERM the process group, grace, KILL)
        async def restart(self) -> None
        def snapshot(self) -> dict         # JSON-able; "state" (e.g. "ready") is read by `conduit wait --vllm-ready`
        async def run(self) -> None        # its background task; the agent starts it and cancels it on exit
        def pids(self) -> set[int]         # optional: host pids of vLLM's process tree (marks GPU processes);
                                           # without it, snapshot()["pids"] is used when present
"""

from __future__ import annotations

import enum
import functools
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

API_VERSION = "v1"


class AgentState(enum.Enum):
    """The agent's lifecycle."""

    STARTING = "starting"  # socket claimed, loops starting; requests already answered
    RUNNING = "running"  # loops running
    STOPPING = "stopping"  # a signal arrived; loops cancelled, socket about to go
    STOPPED = "stopped"  # socket removed


_TRANSITIONS = {
    AgentState.STARTING: {AgentState.RUNNING, AgentState.STOPPING},
    AgentState.RUNNING: {AgentState.STOPPING},
    AgentState.STOPPING: {AgentState.STOPPED},
    AgentState.STOPPED: set(),
}


def transition(current: AgentState, new: AgentState) -> AgentState:
    """``new`` when the lifecycle allows ``current -> new``.

    Raises:
        RuntimeError: an illegal transition (a bug in the agent, not a user's mistake).
    """
    if new not in _TRANSITIONS[current]:
        raise RuntimeError(f"agent state {current.value} -> {new.value} is not allowed")
    return new


@runtime_checkable
class VllmSlot(Protocol):
    """The pluggable vLLM supervisor (see the module docstring)."""

    async def start(self) -> None: ...
    async def stop(self) -> None: ...
    async def restart(self) -> None: ...
    def snapshot(self) -> dict[str, Any]: ...
    async def run(self) -> None: ...


@dataclass
class AgentConfig:
    """Settings of one agent process.

    Attributes:
        socket_path: where to listen (default ``paths.agent_socket_path()``).
        profile_path: the profile (default: conduit's usual lookup).
        probe_interval_s: mean seconds between probes of one channel x protocol (jittered +-20 %).
        gpu_interval_s: seconds between GPU and host samples.
        gpu_window_s: span of the min-free / peak-used window, seconds.
        idle_timeout_s: a connection with no complete request for this long is closed, seconds.
        reload_interval_s: how often the profile and the sync state file are checked for changes, seconds.
        rekey_interval_s: the profile's channels (and so their key sources) are resolved again at least this
            often, seconds, so a key rotated in its file or secret store reaches the probes.
    """

    socket_path: Path | None = None
    profile_path: str | None = None
    probe_interval_s: float = 60.0
    gpu_interval_s: float = 1.0
    gpu_window_s: float = 300.0
    idle_timeout_s: float = 10.0
    reload_interval_s: float = 2.0
    rekey_interval_s: float = 300.0


@functools.cache
def version() -> str:
    """conduit's installed version (``importlib.metadata``), or ``"unknown"`` outside an install."""
    try:
        return metadata.version("conduit")
    except metadata.PackageNotFoundError:  # pragma: no cover
        return "unknown"


__all__ = ["API_VERSION", "AgentConfig", "AgentState", "VllmSlot", "transition", "version"]
