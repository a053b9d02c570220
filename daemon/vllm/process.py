"""vLLM's process group: launch it in a session of its own, signal it, wait for it, check it is gone.

Supervision by process group (after honcho): the child is started with
``start_new_session=True``, so the API server, its ``resource_tracker``, ``VLLM::EngineCore`` and
``VLLM::Worker`` share one process group (and session) that conduit owns. Killing the API server alone
leaves EngineCore and Worker alive (case C16), so every stop signals the whole group:

    SIGTERM to the group -> ``grace_s`` -> SIGKILL to what is left -> a psutil scan (by group and session)

A descendant that left the group and session (``setsid()``) is still signalled: ``kill_group`` also takes the
launch's ``tree.Tree`` (every descendant seen while it ran, and its re-parented orphans) and signals each of
those directly. What survives is named by pid and command line (``describe``).

ESRCH and EPERM (a process that vanished, or one that is someone else's) are tolerated everywhere; zombies
count as gone (they hold no memory).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Iterable
from dataclasses import dataclass

import psutil

from conduit.daemon.vllm.tree import Tree

#: At most this much of a survivor's command line is quoted, characters.
CMDLINE_MAX = 200


def group_members(pgid: int, sid: int | None = None, not_before: float | None = None) -> list[psutil.Process]:
    """Live (non-zombie) processes in process group ``pgid`` or session ``sid``.

    Args:
        not_before: the group leader's create time (epoch seconds); older processes are someone else's
            (a reused pgid cannot hold them, but a reused *sid* number could), so they are skipped.
    """
    out: list[psutil.Process] = []
    for p in psutil.process_iter(["status", "create_time"]):
        try:
            if p.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            if os.getpgid(p.pid) != pgid and (sid is None or os.getsid(p.pid) != sid):
                continue
            if not_before is not None and p.info["create_time"] < not_before - 1.0:
                continue
            out.append(p)
        except (ProcessLookupError, PermissionError, psutil.Error):
            continue
    return out


def describe(procs: Iterable[psutil.Process]) -> list[str]:
    """``["1234 python3 -m vllm.entrypoints.openai.api_server --model m", "1240 VLLM::EngineCor", ...]`` for
    messages: pid and command line (the process name when it has none), at most ``CMDLINE_MAX`` characters."""
    out = []
    for p in procs:
        try:
            text = f"{p.pid} {' '.join(p.cmdline()) or p.name()}"
        except psutil.Error:
            text = str(p.pid)
        out.append(text if len(text) <= CMDLINE_MAX else text[: CMDLINE_MAX - 3] + "...")
    return out


def _members(pgid: int, sid: int | None, not_before: float | None, tree: Tree | None) -> list[psutil.Process]:
    """The group's and session's live processes plus the live members of ``tree`` (swept), each once."""
    found = {p.pid: p for p in group_members(pgid, sid, not_before)}
    for p in tree.sweep() if tree is not None else ():
        found.setdefault(p.pid, p)
    return list(found.values())


def _alive(p: psutil.Process) -> bool:
    try:
        return bool(p.is_running() and p.status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def _signal(pgid: int, members: Iterable[psutil.Process], sig: int) -> None:
    """``killpg`` plus a direct signal to members that left the group (same session); ESRCH/EPERM tolerated."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
    for p in members:
        with contextlib.suppress(psutil.Error, ProcessLookupError, PermissionError):
            if os.getpgid(p.pid) != pgid:
                p.send_signal(sig)


async def _wait_gone(
    pgid: int, sid: int | None, not_before: float | None, members: list[psutil.Process], timeout_s: float,
    tree: Tree | None = None,
) -> list[psutil.Process]:
    """Wait until no member is alive and a full scan finds none; return what is still alive at the deadline."""
    deadline = time.monotonic() + timeout_s
    while True:
        members = [p for p in members if _alive(p)]
        if not members:
            members = _members(pgid, sid, not_before, tree)
            if not members:
                return []
        if time.monotonic() >= deadline:
            return members
        await asyncio.sleep(0.01)


async def kill_group(
    pgid: int,
    sid: int | None = None,
    *,
    grace_s: float = 15.0,
    not_before: float | None = None,
    kill_wait_s: float = 5.0,
    tree: Tree | None = None,
) -> list[str]:
    """SIGTERM the group (and every live member of ``tree``, however it left the group), wait ``grace_s``
    seconds, SIGKILL what is left, wait, and check with psutil; then reap the tree's re-parented orphans.

    Returns the processes still alive afterwards as ``"pid command line"`` strings (empty: all gone). Never
    raises for processes that vanish or belong to someone else (ESRCH/EPERM).
    """
    members = _members(pgid, sid, not_before, tree)
    left: list[psutil.Process] = []
    if members:
        _signal(pgid, members, signal.SIGTERM)
        left = await _wait_gone(pgid, sid, not_before, members, grace_s, tree)
    if left:
        _signal(pgid, left, signal.SIGKILL)
        left = await _wait_gone(pgid, sid, not_before, left, kill_wait_s, tree)
    if tree is not None:
        tree.reap()
    return describe(left)


async def wait_pid_exit(pid: int) -> None:
    """Wait for a process that is not our child to exit (pidfd readable on exit; polling where no pidfd)."""
    loop = asyncio.get_running_loop()
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        await _poll_pid_exit(pid)
        return
    fut: asyncio.Future[None] = loop.create_future()

    def readable() -> None:
        if not fut.done():
            fut.set_result(None)

    loop.add_reader(fd, readable)
    try:
        await fut
    finally:
        loop.remove_reader(fd)
        os.close(fd)


async def _poll_pid_exit(pid: int) -> None:
    """The fallback of ``wait_pid_exit``: look every 0.2 s until the process is gone or a zombie."""
    while True:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return
        except psutil.Error:
            return
        await asyncio.sleep(0.2)


@dataclass(frozen=True)
class Spawned:
    """A freshly started group leader: the child, and its create time (epoch s, psutil; for pid reuse checks)."""

    proc: asyncio.subprocess.Process
    create_time: float

    @property
    def pid(self) -> int:
        """The leader's pid, which is also the group's pgid and the session's sid."""
        return int(self.proc.pid)


async def spawn_group(argv: list[str], env: dict[str, str], stdout_fd: int) -> Spawned:
    """Start ``argv`` as the leader of a new session, stdout and stderr going to ``stdout_fd``.

    The child writes its log file directly (``VllmLog.open_for_child``), so its output never depends on the
    agent staying alive to drain a pipe. stdin is ``/dev/null``. The caller closes ``stdout_fd``.

    Raises:
        OSError: the program cannot be started (missing, not executable).
    """
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=stdout_fd,
        stderr=asyncio.subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )
    try:
        create_time = psutil.Process(proc.pid).create_time()
    except psutil.Error:
        create_time = time.time()
    return Spawned(proc, create_time)
