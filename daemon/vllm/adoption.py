"""Handing vLLM over between agents: the pid file, and adopting (or cleaning up) what an earlier agent left.

Agent death (the choice, and why): ``PR_SET_PDEATHSIG`` was rejected: it is not inherited by EngineCore/Worker
(so it would kill only the API server and leave exactly the orphans C16 is about), it fires when the *thread*
that forked exits, and it would kill a healthy serving model on every agent upgrade. Instead a pid file
(``state_dir()/vllm/vllm.pid``: pid, pgid, sid, the leader's create time and the launch fingerprint) records
what this user's agent launched. When an agent starts, the supervisor first reads it: a live leader with the
same create time, answering ready, launched with the same settings, is **adopted** (state ``ready``, no
restart); anything else left of that group (an unhealthy server, or EngineCore/Worker whose API server died)
is killed and checked gone before a fresh launch. So a dead agent leaves at most a *serving* vLLM behind,
which the next agent takes over.

File format (JSON, written atomically)::

    {"pid": 1234, "pgid": 1234, "sid": 1234, "create_time": 1733000000.5,
     "fingerprint": "<sha256 of VllmSettings.launch_fingerprint()>", "argv": [...], "log_path": "...",
     "marker": "<the launch's CONDUIT_VLLM_LAUNCH value>"}

The marker lets a later agent find (and kill) what is left of that launch even where it left the group and
session (``tree.Tree``).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from conduit.daemon.vllm.process import describe, group_members, kill_group
from conduit.daemon.vllm.tree import Tree


def digest(text: str) -> str:
    """sha256 hex of ``text`` (the launch fingerprint is stored hashed: it may hold a hashed key)."""
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class PidRecord:
    """What one launch wrote: the group's ids, the leader's create time (epoch s) and how it was launched."""

    pid: int
    pgid: int
    sid: int
    create_time: float
    fingerprint: str | None = None
    argv: list[str] = field(default_factory=list)
    log_path: str | None = None
    marker: str | None = None

    def leader_alive(self) -> bool:
        """The leader still runs and is the same process (create time within 1 s: the pid was not reused)."""
        try:
            p = psutil.Process(self.pid)
            return bool(abs(p.create_time() - self.create_time) < 1.0 and p.status() != psutil.STATUS_ZOMBIE)
        except psutil.Error:
            return False


def write_pid_file(path: Path, record: PidRecord) -> None:
    """Write ``record`` to ``path`` atomically (a temp file beside it, then rename)."""
    data = {
        "pid": record.pid, "pgid": record.pgid, "sid": record.sid, "create_time": record.create_time,
        "fingerprint": record.fingerprint, "argv": record.argv, "log_path": record.log_path, "marker": record.marker,
    }
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data))
    tmp.replace(path)


def read_pid_file(path: Path) -> PidRecord | None:
    """The record at ``path``, or None when there is no file.

    Raises:
        ValueError: the file exists but is unreadable or not a record (the caller warns and removes it).
    """
    try:
        info = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise ValueError(str(exc)) from exc
    try:
        return PidRecord(
            pid=int(info["pid"]), pgid=int(info["pgid"]), sid=int(info["sid"]),
            create_time=float(info["create_time"]), fingerprint=info.get("fingerprint"),
            argv=list(info.get("argv", [])), log_path=info.get("log_path"), marker=info.get("marker"),
        )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ValueError(f"not a vLLM pid record: {exc}") from exc


@dataclass(frozen=True)
class Recovery:
    """What ``recover`` found: a group to adopt (or None), warnings to show, processes that survived SIGKILL."""

    adopt: PidRecord | None = None
    warnings: tuple[str, ...] = ()
    left: tuple[str, ...] = ()


async def recover(
    pid_path: Path, fingerprint: str, grace_s: float, ready: Callable[[], Awaitable[tuple[bool, str]]],
    patience_s: float = 0.0,
) -> Recovery:
    """Decide what to do with the group the pid file at ``pid_path`` describes.

    Args:
        fingerprint: ``VllmSettings.launch_fingerprint()`` of the settings this agent would launch with.
        grace_s: SIGTERM grace for a leftover group, seconds.
        ready: the readiness check (``Monitor.check_ready``) against the configured address.
        patience_s: how long a live leader with the same settings may go on failing the check before it is
            given up (seconds; the supervisor passes ``unhealthy_restart_s``, what a running server gets too):
            a saturated vLLM can take longer than one check's timeout to answer ``/health``, and killing it
            loses its requests and a model load. The check is retried every ``RETRY_S`` meanwhile.

    Returns: ``Recovery(adopt=record)`` for a live leader with the same create time and fingerprint that
    answers ready within ``patience_s`` (the pid file stays); otherwise whatever is left of that group is
    killed, the pid file is removed, and the warnings say what was done and why.
    """
    try:
        rec = read_pid_file(pid_path)
    except ValueError:
        _unlink(pid_path)
        return Recovery(warnings=(f"{pid_path}: unreadable pid file ignored",))
    if rec is None:
        return Recovery()
    leader_alive = rec.leader_alive()
    same = rec.fingerprint == digest(fingerprint)
    why = "settings changed" if leader_alive and not same else "API server gone"
    if leader_alive and same:
        answered, why = await _ready_within(rec, ready, patience_s)
        if answered:
            return Recovery(adopt=rec)
        leader_alive = rec.leader_alive()
        why = f"not ready within {patience_s:g} s: {why}" if leader_alive else "API server gone"
    out = Recovery()
    tree = Tree(rec.pid, rec.create_time, rec.marker)
    before = {p.pid: p for p in [*group_members(rec.pgid, rec.sid, rec.create_time), *tree.sweep()]}
    if before:
        described = ", ".join(describe(before.values()))  # while they still have command lines
        left = await kill_group(rec.pgid, rec.sid, grace_s=grace_s, not_before=rec.create_time, tree=tree)
        out = Recovery(
            warnings=(f"killed a leftover vLLM group from an earlier agent ({why}): {described}",),
            left=tuple(left),
        )
    _unlink(pid_path)
    return out


RETRY_S = 0.5
"""Seconds between two readiness checks of a server ``recover`` may adopt."""


async def _ready_within(rec: PidRecord, ready: Callable[[], Awaitable[tuple[bool, str]]],
                        patience_s: float) -> tuple[bool, str]:
    """``(True, "")`` once ``ready()`` answers; ``(False, last reason)`` when the leader dies or ``patience_s``
    runs out first (one check at least)."""
    deadline = time.monotonic() + patience_s
    while True:
        ok, why = await ready()
        if ok:
            return True, ""
        if not rec.leader_alive() or time.monotonic() >= deadline:
            return False, why or "no answer"
        await asyncio.sleep(min(RETRY_S, max(0.0, deadline - time.monotonic())))


def _unlink(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink()
