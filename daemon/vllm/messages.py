"""The typed messages of the supervisor's one loop, and the record of one launched process group.

Everything that can change the supervisor's state arrives as one of these on one asyncio queue (after
honcho: child events as typed messages to one loop)::

    start()/stop()/restart()/apply_settings() --Cmd--------> +------------+
    per-launch exit watcher (await proc.wait()) --Exited---> | run() loop | --> state, snapshot()
    per-launch monitor --Ready / StartTimeout / Health-----> |            |
    backoff timer --RestartDue------------------------------> +------------+

Every launch has a generation number ``gen``; a message whose ``gen`` is not the current launch's is about a
launch that is already gone and is dropped.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conduit.daemon.config.vllm import VllmSettings
from conduit.daemon.vllm.tree import Tree


@dataclass
class Cmd:
    """A command from the public API; ``done`` receives the answer (a snapshot, or a bool for ``apply``)."""

    kind: str  # start | stop | restart | apply
    done: asyncio.Future[Any]
    settings: VllmSettings | None = None


@dataclass
class Exited:
    """The group leader exited."""

    gen: int
    code: int | None  # None for an adopted process (not our child: no exit status)
    seen: float = 0.0  # time.monotonic() when the watcher woke up


@dataclass
class Ready:
    """``/health`` answered 200 and ``/v1/models`` lists the served name."""

    gen: int


@dataclass
class StartTimeout:
    """Not ready within ``startup_timeout_s``."""

    gen: int


@dataclass
class Health:
    """One ``/health`` poll of a launch that was ready once."""

    gen: int
    ok: bool
    detail: str


@dataclass
class RestartDue:
    """The restart backoff is over."""

    gen: int


Message = Cmd | Exited | Ready | StartTimeout | Health | RestartDue


@dataclass
class Launch:
    """One launched (or adopted) vLLM process group."""

    gen: int
    pid: int
    pgid: int
    sid: int
    create_time: float
    proc: asyncio.subprocess.Process | None
    argv: list[str]
    log_path: Path
    adopted: bool = False
    tasks: list[asyncio.Task[Any]] = field(default_factory=list)
    exit_code: int | None = None
    tree: Tree | None = None  # every process of the launch (``tree``), killed with the group
