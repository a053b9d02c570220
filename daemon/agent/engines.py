"""The agent's observers of ``[engines.NAME]`` (``conduit.daemon.config.engines``): one
``conduit.daemon.vllm.observer.Observer`` per engine, beside the ``[vllm]`` slot, each in its own task.

``follow`` makes the set match a profile read: a new table gets an observer, a changed one takes the new settings
(an observer never launches anything), a removed one is closed. ``snapshot`` is ``/v1/status``'s ``engines``:
``{name: the observer's snapshot}`` (a bad table: ``{"state": "error", "message"}``). ``read_engines`` reads
the tables and which channel points at which engine; ``engine_route`` makes that engine's state the fallback
judge's evidence when it is the primary channel's (``state_of``); an Ollama's windows go to that channel.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field, replace
from typing import Any

from conduit.daemon.agent.routing import RoutePlan
from conduit.daemon.config.engines import engine_for, engine_settings
from conduit.daemon.config.vllm import VllmSettings
from conduit.redact import Redactor

log = logging.getLogger("conduit.agent")


@dataclass(frozen=True)
class EnginesRead:
    """``[engines]`` from one read of the profile.

    Attributes:
        settings: ``{name: VllmSettings}`` (manage = false) of the good tables.
        problems: ``{name: sentence}`` of the bad ones.
        channels: ``{engine name: the channel whose base URL points at it}`` (a profile's own channels only).
    """

    settings: dict[str, VllmSettings] = field(default_factory=dict)
    problems: dict[str, str] = field(default_factory=dict)
    channels: dict[str, str] = field(default_factory=dict)


def read_engines(loaded: Any) -> EnginesRead:
    """``EnginesRead`` of a ``LoadedProfile`` (``conduit.daemon.config.profile``). Never raises."""
    settings, problems = engine_settings(loaded.model.engines, str(loaded.path))
    channels: dict[str, str] = {}
    for ch_name, ch in loaded.channels.items():
        name = engine_for(ch.base_url, settings) if ch_name not in loaded.implicit_channels else None
        if name is not None and name not in channels:
            channels[name] = ch_name
    return EnginesRead(settings, problems, channels)


def engine_route(plan: RoutePlan | None, read: EnginesRead) -> RoutePlan | None:
    """``plan`` with ``engine`` set (and ``supervised``: the engine's state is evidence) when its primary channel
    points at an observed engine; else ``plan`` as it is."""
    if plan is None or plan.supervised:
        return plan
    for engine, channel in read.channels.items():
        if channel == plan.primary:
            return replace(plan, supervised=True, engine=engine)
    return plan


def _keep_windows(channel: str | None, windows: dict[str, int]) -> None:
    """An observed Ollama's context windows into the catalog of the channel pointing at it (the tools read them
    there: ``conduit.daemon.catalog.models.write_windows``); nothing when no channel points at it."""
    from conduit.daemon.catalog.models import write_windows

    if channel is None:
        return
    try:
        write_windows(channel, windows)
    except OSError as exc:
        log.warning("cannot keep the context windows of channel %s: %s", channel, exc)


class EngineSet:
    """The observed engines (see the module). Asyncio only; create it in the agent's loop.

    Args:
        redactor: the agent's, for what the snapshots quote (log tails, reasons).
    """

    def __init__(self, redactor: Redactor | None = None) -> None:
        self.redactor = redactor
        self.observers: dict[str, Any] = {}
        self.problems: dict[str, str] = {}
        self.channels: dict[str, str] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}

    def _make(self, name: str, s: VllmSettings) -> Any:
        from conduit.daemon.vllm.observer import Observer

        return Observer(s, redactor=self.redactor, on_windows=lambda w: _keep_windows(self.channels.get(name), w),
                        table=f"[engines.{name}]")

    async def follow(self, read: EnginesRead) -> None:
        """Match ``read.settings`` (``{name: VllmSettings}``, manage = false); keep its problems and channels."""
        settings, self.problems, self.channels = read.settings, dict(read.problems), dict(read.channels)
        for name in [n for n in self.observers if n not in settings]:
            log.info("[engines.%s] removed: no longer observed", name)
            await self._close(name)
        for name, s in settings.items():
            obs = self.observers.get(name)
            task = self._tasks.get(name)
            if obs is not None and task is not None and not task.done():
                await obs.apply_settings(s)
                continue
            if obs is not None:
                log.error("the observer of [engines.%s] ended unexpectedly; starting a new one", name)
            obs = self._make(name, s)
            self.observers[name] = obs
            self._tasks[name] = asyncio.create_task(obs.run(), name=f"engine-{name}")
            log.info("observing [engines.%s]: %s at %s", name, s.name, s.base_url)

    async def _close(self, name: str) -> None:
        obs, task = self.observers.pop(name, None), self._tasks.pop(name, None)
        if obs is not None:
            with contextlib.suppress(Exception):
                await obs.aclose(stop_vllm=False)
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def aclose(self) -> None:
        """Stop every observer (the engines themselves are not conduit's: they keep running)."""
        for name in list(self.observers):
            await self._close(name)

    def snapshot(self) -> dict[str, dict[str, Any]] | None:
        """``{name: observer snapshot}`` plus ``{name: {"state": "error", "message"}}`` for a bad table; None
        without ``[engines]``."""
        out: dict[str, dict[str, Any]] = {}
        for name, obs in self.observers.items():
            try:
                out[name] = obs.snapshot()
            except Exception as exc:  # a bug in one must not hide the others
                out[name] = {"state": "error", "message": f"snapshot failed: {type(exc).__name__}: {exc}"}
        for name, why in self.problems.items():
            out[name] = {"state": "error", "message": why}
        return out or None

    def state_of(self, name: str) -> str | None:
        """The state of engine ``name`` for the fallback judge: ``starting`` before its first look (no evidence
        either way), None when it is not observed."""
        obs = self.observers.get(name)
        if obs is None:
            return None
        return "starting" if getattr(obs, "recovering", False) else str(obs.state.value)


__all__ = ["EngineSet", "EnginesRead", "engine_route", "read_engines"]
