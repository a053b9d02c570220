"""Supervise this node's Ray process: ``ray start ... --block`` (``conduit.daemon.vllm.cluster.ray_start_argv``).

``ray start --block`` stays in the foreground while its raylet (and on the head the GCS server) run; it exits
when one of them dies, and its raylet exits when it is killed (Ray 2.60, seen here with SIGKILL). The group is
started in its own session with the launch marker (``conduit.daemon.vllm.tree``), so after any exit every
process it left -- also one that called ``setsid()`` -- is killed before the next start (TERM, grace, KILL,
psutil check: ``conduit.daemon.vllm.process.kill_group``). Restarted after ``restart_backoff_s`` until
``stop()``. Output goes to ``<state>/vllm/ray.log`` (appended; ``ray.log.1`` keeps the previous run's).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
import uuid
from pathlib import Path
from typing import Any

from conduit.daemon.vllm.process import kill_group, spawn_group
from conduit.daemon.vllm.tree import MARKER_ENV, Tree
from conduit.redact import mask_argv


class RayProcess:
    """One supervised ``ray start --block``.

    Args:
        argv: the full command line. env: its environment. log_path: where its output goes.
        restart_backoff_s: wait between an exit and the next start, seconds. stop_grace_s: TERM -> KILL wait.

    Attributes: ``state`` (``starting``/``running``/``restarting``/``stopped``), ``pid``, ``restarts``,
    ``last_exit`` (``{code, at, left}`` or None), ``tree`` (the current launch's processes).
    """

    def __init__(self, argv: list[str], env: dict[str, str], log_path: Path, restart_backoff_s: float = 5.0,
                 stop_grace_s: float = 15.0) -> None:
        self.argv, self.env, self.log_path = argv, env, log_path
        self.backoff_s, self.grace_s = restart_backoff_s, stop_grace_s
        self.state = "stopped"
        self.pid: int | None = None
        self.restarts = 0
        self.last_exit: dict[str, Any] | None = None
        self.tree: Tree | None = None
        self._stopping = False
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start supervising (idempotent) on the running loop."""
        if self._task is None or self._task.done():
            self._stopping = False
            self._task = asyncio.create_task(self._run(), name="ray")

    async def _run(self) -> None:
        while not self._stopping:
            self.state = "starting"
            code = await self._once()
            if self._stopping:
                break
            left = await self._clean()
            self.last_exit = {"code": code, "at": time.time(), "left": left}
            self.state = "restarting"
            await asyncio.sleep(self.backoff_s)
            self.restarts += 1
        self.state = "stopped"

    async def _once(self) -> int | None:
        """Spawn the group and wait for its leader to exit; its exit status (None: it could not start)."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(OSError):
            if self.log_path.exists():
                os.replace(self.log_path, self.log_path.with_name(self.log_path.name + ".1"))
        marker = uuid.uuid4().hex
        fd = os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            child = await spawn_group(self.argv, {**self.env, MARKER_ENV: marker}, fd)
        except OSError as exc:
            os.write(fd, f"conduit: cannot start {self.argv[0]}: {exc.strerror}\n".encode())
            return None
        finally:
            os.close(fd)
        self.pid, self.tree = child.pid, Tree(child.pid, child.create_time, marker)
        self.state = "running"
        sampler = asyncio.create_task(self._track(self.tree))
        try:
            return await child.proc.wait()
        finally:
            sampler.cancel()

    @staticmethod
    async def _track(tree: Tree) -> None:
        """Remember every process of the launch as it appears (raylet, GCS, Ray workers), every second."""
        while True:
            await asyncio.to_thread(tree.sample)
            await asyncio.sleep(1.0)

    async def _clean(self) -> list[str]:
        """Kill what the last launch left (raylet, GCS, workers); the survivors as text (empty: none)."""
        pid, tree = self.pid, self.tree
        self.pid = None
        if pid is None or tree is None:
            return []
        return await kill_group(pid, pid, grace_s=self.grace_s, tree=tree)

    async def stop(self) -> list[str]:
        """Stop the Ray process and everything it started; returns what could not be killed (empty: all gone)."""
        self._stopping = True
        task = self._task
        left = await self._clean()
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self.state = "stopped"
        return left

    def snapshot(self) -> dict[str, Any]:
        """``{state, pid, restarts, last_exit, log_path, argv}``; in ``argv`` the values of key-like flags
        (``--redis-password=X``, ``--token X``: ``conduit.redact.mask_argv``) show as fingerprints."""
        return {"state": self.state, "pid": self.pid, "restarts": self.restarts, "last_exit": self.last_exit,
                "log_path": str(self.log_path), "argv": mask_argv(self.argv)}


__all__ = ["RayProcess"]
