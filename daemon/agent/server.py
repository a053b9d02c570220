"""The conduit agent: HTTP/1.1 + JSON on a Unix socket, answered from state kept by background loops.

One concurrency model (STYLE.md habit 13): asyncio. The server is aiohttp's (no hand-written HTTP parsing);
blocking work (NVML, resolving the profile's key sources) runs in worker threads through
``asyncio.to_thread`` and only ever updates state the handlers read, so a slow gateway or a stuck NVML call
never delays an answer.

Socket (DESIGN.md "The agent's socket"): ``conduit.daemon.config.paths.agent_socket_path()``; directory 0700 when
conduit creates it (or when it is conduit's runtime dir), socket 0600, and every request's peer uid is checked
with ``SO_PEERCRED``: another uid gets ``403`` and the connection is closed. A lock file next to the socket
(``agent.sock.lock``, holding the pid) makes a second agent refuse to start (``AgentAlreadyRunning``, exit 1);
a socket left by a crashed agent (nobody holds the lock, nobody answers a connect) is replaced.

Limits: request line and each header at most 8190 bytes, at most 128 headers (aiohttp's parser answers 400
and closes); a connection that has not sent a complete request within ``idle_timeout_s`` (default 10 s) is
closed, which bounds slow ("one byte a second") clients; the open-files limit is raised to its hard limit.

Routes (all JSON; see docs/agent.md for real examples and ``GET /v1/openapi.json``):
    GET  /v1/healthz                 liveness: {"ok": true, "state": "running", "pid", "uptime_s", "version"}
    GET  /v1/status                  everything below in one object
    GET  /v1/channels                {"channels": {name: ChannelState}, "note": str|None}
    GET  /v1/channels/{name}         one ChannelState (404 with the known names)
    POST /v1/channels/{name}/probe   probe now; waits up to ``?wait=`` seconds (default 5, max 30, 0 = just
                                     schedule) and answers 200 with the fresh state, or 202 with the current
                                     state and ``"pending": true`` while the probe still runs
    GET  /v1/gpus                    {"gpus": [...], "reason": str|None, "sampled_at", "window_s"}
    GET  /v1/host                    host memory (psutil)
    GET  /v1/tools                   the daemon's sync state file, or {"tools": {}, "note": "no sync state yet"}
    GET  /v1/vllm                    the vLLM slot's snapshot(), or {"state": "not_configured"}
    POST /v1/vllm/{start|stop|restart}   call the slot (waits up to 30 s), answer its snapshot(); 409 without one
    GET  /v1/openapi.json            OpenAPI 3.1 description

The vLLM slot. When the profile has a ``[vllm]`` table and no slot was passed in, the agent fills it with a
``conduit.daemon.vllm.supervisor.Supervisor`` and follows the profile: a reload whose ``[vllm]`` settings changed
calls ``apply_settings`` (which restarts vLLM only when what it is launched with changed), removing the table
stops vLLM, adding it starts one; an invalid profile changes nothing (a typo never stops a serving model). On
SIGTERM the agent leaves a running vLLM serving (the supervisor's design: the next agent adopts it through the
pid file); ``conduit vllm stop`` (``POST /v1/vllm/stop``) is the way to stop it. A slot passed in
(``run_agent(config, vllm=...)``) is run as given, without following the profile; it is any object with::

    class VllmSlot(Protocol):
        async def start(self) -> None      # launch vLLM; returns once launched (readiness shows in snapshot)
        async def stop(self) -> None       # stop it (TERM the process group, grace, KILL)
        async def restart(self) -> None
        def snapshot(self) -> dict         # JSON-able; "state" (e.g. "ready") is read by `conduit wait --vllm-ready`
        async def run(self) -> None        # its background task; the agent starts it and cancels it on exit
        def pids(self) -> set[int]         # optional: host pids of vLLM's process tree (marks GPU processes);
                                           # without it, snapshot()["pids"] is used when present

Errors raised: ``AgentAlreadyRunning`` (exit 1) and ``ConduitError`` for an unusable socket path.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import fcntl
import functools
import json
import logging
import os
import resource
import signal
import socket
import stat
import struct
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from aiohttp import web

from conduit.daemon.agent.gpu import (
    GpuHistory,
    GpuProbe,
    GpuReport,
    HostSnapshot,
    default_probe,
    host_snapshot,
    report_json,
)
from conduit.daemon.agent.prober import Prober, ProbeTarget
from conduit.daemon.config import paths
from conduit.errors import ConduitError
from conduit.sdnotify import sd_notify

if TYPE_CHECKING:
    from conduit.daemon.config.vllm import VllmSettings
    from conduit.daemon.vllm.supervisor import Supervisor

log = logging.getLogger("conduit.agent")

API_VERSION = "v1"
SUN_PATH_MAX = 107  # sockaddr_un.sun_path is 108 bytes on Linux, including the NUL


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


class AgentAlreadyRunning(ConduitError):
    """Another agent serves (or holds the lock for) this socket. Exit code 1."""


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


# --------------------------------------------------------------------------------------------- socket


def peer_uid(sock: Any) -> int | None:
    """The uid of the process at the other end of a connected Unix socket (``SO_PEERCRED``), or None when
    the kernel cannot tell (not a Unix socket, already closed)."""
    try:
        raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except (OSError, AttributeError):
        return None
    _pid, uid, _gid = struct.unpack("3i", raw)
    return uid


def _socket_answers(path: Path) -> bool:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(1.0)
    try:
        s.connect(str(path))
        return True
    except OSError:
        return False
    finally:
        s.close()


@dataclass
class ClaimedSocket:
    """A listening socket plus the lock that makes it ours; ``release`` removes both."""

    sock: socket.socket
    path: Path
    lock_fd: int
    inode: int
    released: bool = False

    def release(self) -> None:
        """Close the socket, unlink it if it is still ours, and drop the lock. Idempotent: a second call must
        not close an unrelated file descriptor that reused the lock's number."""
        if self.released:
            return
        self.released = True
        with contextlib.suppress(OSError):
            self.sock.close()
        with contextlib.suppress(OSError):
            if os.lstat(self.path).st_ino == self.inode:
                os.unlink(self.path)
        with contextlib.suppress(OSError):
            os.close(self.lock_fd)


def claim_socket(path: Path) -> ClaimedSocket:
    """Create the runtime directory (0700), take the lock, replace a stale socket and listen (0600).

    Raises:
        AgentAlreadyRunning: another agent holds the lock or answers on ``path``.
        ConduitError: the path is too long for a Unix socket, is not a socket, or cannot be created.
    """
    path = Path(path)
    if len(os.fsencode(path)) > SUN_PATH_MAX:
        raise ConduitError(f"socket path {path} is {len(os.fsencode(path))} bytes; Unix sockets allow {SUN_PATH_MAX}",
                           hint="choose a shorter --socket path or XDG_RUNTIME_DIR")
    d = path.parent
    created = not d.exists()
    try:
        d.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise ConduitError(f"cannot create the agent's directory {d}: {exc.strerror}",
                           hint="check XDG_RUNTIME_DIR or pass --socket PATH") from exc
    st = os.lstat(d)
    if st.st_uid != os.getuid() or not stat.S_ISDIR(st.st_mode):
        # Someone else made the directory first (the /tmp fallback is guessable): they could swap the socket.
        raise ConduitError(f"the agent's directory {d} is not a directory owned by you (uid {st.st_uid})",
                           hint="remove it, or set XDG_RUNTIME_DIR / pass --socket PATH in a directory of yours")
    if (created or d == paths.runtime_dir()) and stat.S_IMODE(st.st_mode) != 0o700:
        os.chmod(d, 0o700)
    lock_path = path.with_name(path.name + ".lock")
    try:
        # O_NOFOLLOW: a planted symlink must not make the agent truncate some other file.
        lock_fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    except OSError as exc:
        raise ConduitError(f"cannot open the agent's lock {lock_path}: {exc.strerror}",
                           hint="remove it if it is a symlink or not yours, then start the agent again") from None
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        pid = os.pread(lock_fd, 32, 0).decode(errors="replace").strip() or "?"
        os.close(lock_fd)
        raise AgentAlreadyRunning(f"another conduit agent (pid {pid}) is already serving {path}",
                                  hint="use it (`conduit status`), or stop it first") from None
    try:
        try:
            st_sock = os.lstat(path)
        except FileNotFoundError:
            st_sock = None
        if st_sock is not None:
            if not stat.S_ISSOCK(st_sock.st_mode):
                raise ConduitError(f"{path} exists and is not a socket", hint="move it away, or pass --socket PATH")
            if _socket_answers(path):
                raise AgentAlreadyRunning(f"something already answers on {path} (an agent without the lock?)",
                                          hint="stop it first, or pass --socket PATH")
            log.info("replacing a stale socket left at %s", path)
            os.unlink(path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)
        try:
            sock.bind(str(path))
        finally:
            os.umask(old)
        os.chmod(path, 0o600)
        sock.listen(1024)
        sock.setblocking(False)
        os.ftruncate(lock_fd, 0)
        os.pwrite(lock_fd, f"{os.getpid()}\n".encode(), 0)
        return ClaimedSocket(sock=sock, path=path, lock_fd=lock_fd, inode=os.lstat(path).st_ino)
    except OSError as exc:
        os.close(lock_fd)
        raise ConduitError(f"cannot listen on {path}: {exc.strerror or exc}", hint="pass --socket PATH") from exc
    except BaseException:
        os.close(lock_fd)
        raise


def _raise_nofile_limit() -> None:
    with contextlib.suppress(ValueError, OSError):
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        target = hard if hard != resource.RLIM_INFINITY else 65536
        if soft < target:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


# --------------------------------------------------------------------------------------------- profile


@dataclass
class ProfileView:
    """What the agent takes from one read of the profile (made in a worker thread by ``read_profile``).

    Attributes:
        targets, problems: probe targets and unresolvable channels (``conduit.daemon.agent.prober.targets_for``).
        note: why there are no channels (the profile is missing or invalid), else None.
        valid: the profile was read and validated; when false, ``vllm`` means nothing and vLLM is left alone.
        vllm: the ``[vllm]`` settings ready to launch with, None without a table, or the ``ConduitError`` met
            reading ``[vllm].api_key``'s key source.
    """

    targets: list[ProbeTarget]
    problems: dict[str, str]
    note: str | None
    valid: bool
    vllm: VllmSettings | ConduitError | None = None


def read_profile(path: str | None) -> ProfileView:
    """Load the profile once and derive probe targets and vLLM settings. Blocking (key sources may run
    commands): call it through ``asyncio.to_thread``. Never raises."""
    from conduit.daemon.agent.prober import targets_for
    from conduit.daemon.config.profile import load_profile
    from conduit.daemon.config.resolve import vllm_settings

    try:
        loaded = load_profile(path)
    except ConduitError as exc:
        return ProfileView([], {}, str(exc), valid=False)
    except OSError as exc:
        return ProfileView([], {}, f"cannot read the profile: {exc}", valid=False)
    targets, problems = targets_for(loaded)
    vllm: VllmSettings | ConduitError | None
    try:
        vllm = vllm_settings(loaded)
    except ConduitError as exc:
        vllm = exc
    return ProfileView(targets, problems, None, valid=True, vllm=vllm)


def _default_supervisor(settings: VllmSettings) -> Supervisor:
    from conduit.daemon.vllm.supervisor import Supervisor

    return Supervisor(settings)


# --------------------------------------------------------------------------------------------- agent


def _json(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(body=json.dumps(data, default=str).encode(), status=status,
                        content_type="application/json", headers=headers)


def _error(status: int, error: str, message: str, hint: str | None = None, **extra: Any) -> web.Response:
    return _json({"error": error, "message": message, "hint": hint, **extra}, status=status)


class Agent:
    """The agent's state and its HTTP application.

    Args:
        config: settings.
        gpu_probe: the NVML probe (default: real pynvml, or the fake named by ``$CONDUIT_FAKE_GPUS``).
        vllm: a vLLM slot run as given; None: a ``Supervisor`` made from the profile's ``[vllm]`` table when it
            has one, following the profile's changes (else ``{"state": "not_configured"}``).
        prober: a channel prober (default: built from the profile).
        vllm_factory: makes the supervisor from ``VllmSettings`` (default: ``Supervisor(settings)``); tests
            pass one with a private state directory.
    """

    def __init__(self, config: AgentConfig | None = None, gpu_probe: GpuProbe | None = None,
                 vllm: VllmSlot | None = None, prober: Prober | None = None,
                 vllm_factory: Callable[[VllmSettings], Supervisor] | None = None) -> None:
        self.config = config or AgentConfig()
        self.socket_path = Path(self.config.socket_path or paths.agent_socket_path())
        self.gpu_probe = gpu_probe or default_probe()
        self.gpu_history = GpuHistory(window_s=self.config.gpu_window_s,
                                      maxlen=int(self.config.gpu_window_s / max(self.config.gpu_interval_s, 0.05)) + 1)
        self.host: HostSnapshot | None = None
        self._gpus_cache: dict[str, Any] = report_json(None)  # rebuilt after each sample, not per request
        self._host_cache: dict[str, Any] = {"note": "not sampled yet"}
        self.vllm: Any = vllm
        self._own_vllm = vllm is None
        self._vllm_factory = vllm_factory or _default_supervisor
        self._vllm_task: asyncio.Task[None] | None = None
        #: why the profile's [vllm] cannot be applied (its api_key source failed), as a last_failure dict
        self.vllm_problem: dict[str, Any] | None = None
        self._own_prober = prober is None
        self.prober = prober or Prober([], interval_s=self.config.probe_interval_s)
        self.channels_note: str | None = "profile not read yet" if prober is None else None
        self.tools: dict[str, Any] = {"tools": {}, "note": "no sync state yet"}
        self.state = AgentState.STARTING
        self.started_at = time.time()
        self._t0 = time.monotonic()
        self._tasks: list[asyncio.Task[Any]] = []
        self._profile_sig: tuple[Any, ...] | None = None
        self._resolved_at = -1e9
        self._probing: dict[str, asyncio.Task[Any]] = {}
        self._last_vllm_state: str | None = None
        self._tools_sig: tuple[Any, ...] | None = None
        self.app = self._make_app()

    # ---- lifecycle

    def _set_state(self, new: AgentState) -> None:
        if new not in _TRANSITIONS[self.state]:
            raise RuntimeError(f"agent state {self.state.value} -> {new.value} is not allowed")
        self.state = new

    def start_loops(self) -> None:
        """Start the background loops on the running event loop (state becomes RUNNING)."""
        self._tasks.append(asyncio.create_task(self._gpu_loop(), name="gpu"))
        self._tasks.append(asyncio.create_task(self._files_loop(), name="files"))
        if self.vllm is not None and not self._own_vllm:
            self._tasks.append(asyncio.create_task(self.vllm.run(), name="vllm"))
        if not self._own_prober:
            self.prober.start()
        self._set_state(AgentState.RUNNING)

    async def stop_loops(self) -> None:
        """Cancel the loops and close the prober's client (state becomes STOPPING). A vLLM the agent's own
        supervisor runs is left serving, for the next agent to adopt (``conduit vllm stop`` stops it)."""
        if self.state is not AgentState.STOPPING:
            self._set_state(AgentState.STOPPING)
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._own_vllm and self.vllm is not None:
            try:
                await self.vllm.aclose(stop_vllm=False)
            except Exception:
                log.exception("closing the vLLM supervisor failed")
        await self.prober.aclose()

    def _vllm_pids(self) -> set[int]:
        if self.vllm is None:
            return set()
        try:
            fn = getattr(self.vllm, "pids", None)
            if callable(fn):
                return {int(p) for p in fn()}
            return {int(p) for p in (self.vllm.snapshot().get("pids") or ())}
        except Exception:  # a slot's bug must not stop GPU sampling
            log.exception("vLLM slot pids() failed")
            return set()

    def _probe_local_when_ready(self) -> None:
        """When the supervised vLLM turns ready, probe the ``local`` channel now: its last periodic probe may
        have found nothing listening, and `conduit wait --channel local` should not stall for a whole interval."""
        state = (self.vllm.snapshot().get("state") if self.vllm is not None else None)
        if state == "ready" and self._last_vllm_state != "ready" and "local" in self.prober.health:
            task = asyncio.create_task(self.prober.probe_channel("local"))
            self._tasks.append(task)
            task.add_done_callback(lambda t: self._tasks.remove(t) if t in self._tasks else None)
        self._last_vllm_state = state

    async def _gpu_loop(self) -> None:
        interval = self.config.gpu_interval_s
        while True:
            t0 = time.monotonic()
            try:
                self._probe_local_when_ready()
                report: GpuReport = await asyncio.to_thread(lambda: self.gpu_probe.sample(self._vllm_pids()))
                self.gpu_history.add(report)
                self._gpus_cache = report_json(report, self.gpu_history)
                self.host = host_snapshot()
                self._host_cache = asdict(self.host)
            except Exception:  # never let one bad sample end the loop
                log.exception("GPU/host sample failed")
            await asyncio.sleep(max(0.0, interval - (time.monotonic() - t0)))

    @staticmethod
    def _sig(path: Path) -> tuple[Any, ...] | None:
        try:
            st = path.stat()
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size, st.st_ino)

    async def _files_loop(self) -> None:
        """Re-read the profile (-> probe targets) and the sync state file when they change."""
        while True:
            try:
                await self._reload_profile()
                self._reload_tools()
            except Exception:
                log.exception("reloading the profile or the sync state failed")
            await asyncio.sleep(self.config.reload_interval_s)

    async def _reload_profile(self, force: bool = False) -> None:
        if not self._own_prober and not self._own_vllm:
            return
        sig = self._sig(paths.profile_path(self.config.profile_path))
        stale = time.monotonic() - self._resolved_at > self.config.rekey_interval_s  # keys may rotate in place
        if sig == self._profile_sig and not force and not stale:
            return
        self._profile_sig = sig
        self._resolved_at = time.monotonic()
        view = await asyncio.to_thread(read_profile, self.config.profile_path)
        if self._own_prober:
            before = {(t.channel, t.protocol): t for t in self.prober.targets()}
            self.prober.set_targets(view.targets, view.problems)
            self.channels_note = view.note
            if force or before != {(t.channel, t.protocol): t for t in view.targets}:
                self.prober.start()  # restart the schedules only when what is probed changed
        if self._own_vllm and view.valid:
            await self._follow_vllm(view.vllm)

    async def _follow_vllm(self, new: VllmSettings | ConduitError | None) -> None:
        """Make the agent's supervisor match the profile's ``[vllm]``: start one for a new table, hand
        changed settings to it (it restarts vLLM only when the launch changed), stop it when the table is gone.
        A key source that cannot be read leaves a running vLLM as it is and is reported on ``/v1/vllm``."""
        if isinstance(new, ConduitError):
            self.vllm_problem = {"kind": "api_key", "reason": new.message, "fix": new.hint,
                                 "exit_code": None, "log_tail": "", "at": time.time()}
            log.warning("[vllm].api_key: %s", new.message)
            if self.vllm is not None and new.message not in self.vllm.warnings:
                self.vllm.warnings_push(f"profile change not applied: {new.message}")
            return
        self.vllm_problem = None
        sup = self.vllm
        if new is None:
            if sup is not None:
                log.info("the profile has no [vllm] table any more: stopping vLLM")
                try:
                    await sup.aclose(stop_vllm=True)
                finally:
                    self.vllm, self._vllm_task = None, None
            return
        if sup is not None and self._vllm_task is not None and self._vllm_task.done():
            log.error("the vLLM supervisor ended unexpectedly (%r); starting a new one",
                      self._vllm_task.exception() if not self._vllm_task.cancelled() else "cancelled")
            sup = None
        if sup is None:
            sup = self._vllm_factory(new)
            self.vllm = sup
            self._vllm_task = asyncio.create_task(sup.run(), name="vllm")
            log.info("supervising vLLM for model %s at %s", new.name, new.base_url)
            return
        if await sup.apply_settings(new):
            log.info("the profile's [vllm] settings changed: vLLM relaunched")

    def _reload_tools(self) -> None:
        path = paths.state_dir() / "sync.json"
        sig = self._sig(path)
        if sig == self._tools_sig:
            return
        self._tools_sig = sig
        if sig is None:
            self.tools = {"tools": {}, "note": "no sync state yet"}
            return
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            self.tools = {"tools": {}, "note": f"cannot read {path}: {exc}"}
            return
        if isinstance(data, dict) and "tools" in data:
            self.tools = data
        else:
            self.tools = {"tools": data if isinstance(data, dict) else {}, "note": None}

    # ---- state as JSON

    def agent_json(self) -> dict[str, Any]:
        """``{"state", "pid", "version", "socket", "started_at", "uptime_s"}``."""
        return {"state": self.state.value, "pid": os.getpid(), "version": _version(), "api": API_VERSION,
                "socket": str(self.socket_path), "started_at": self.started_at,
                "uptime_s": round(time.monotonic() - self._t0, 3)}

    def channels_json(self) -> dict[str, Any]:
        """``{"channels": {name: {...}}, "note": str|None}``."""
        return {"channels": self.prober.snapshot(), "note": self.channels_note}

    def gpus_json(self) -> dict[str, Any]:
        """The ``/v1/gpus`` body (see ``conduit.daemon.agent.gpu.report_json``), as of the latest sample."""
        return self._gpus_cache

    def host_json(self) -> dict[str, Any]:
        """The ``/v1/host`` body: ``HostSnapshot`` fields, or ``{"note": "not sampled yet"}``."""
        return self._host_cache

    def vllm_json(self) -> dict[str, Any]:
        """The slot's snapshot; ``{"state": "failed", "last_failure": {...}}`` when the profile's ``[vllm]``
        cannot be used (its api_key source fails); else ``{"state": "not_configured"}``."""
        if self.vllm is None:
            if self.vllm_problem is not None:
                return {"state": "failed", "last_failure": self.vllm_problem}
            return {"state": "not_configured"}
        try:
            return self.vllm.snapshot()
        except Exception as exc:
            return {"state": "error", "message": f"vLLM slot snapshot failed: {type(exc).__name__}: {exc}"}

    def status_json(self) -> dict[str, Any]:
        """Everything: ``{"agent", "channels", "gpus", "host", "vllm", "tools"}``."""
        return {"agent": self.agent_json(), **self.channels_json(), "gpus": self.gpus_json(),
                "host": self.host_json(), "vllm": self.vllm_json(), "tools": self.tools}

    # ---- HTTP

    def _make_app(self) -> web.Application:
        my_uid = os.getuid()

        @web.middleware
        async def guard(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                        ) -> web.StreamResponse:
            sock = request.transport.get_extra_info("socket") if request.transport else None
            uid = peer_uid(sock) if sock is not None else None
            if uid is not None and uid != my_uid:
                log.warning("refused a request from uid %s", uid)
                resp = _error(403, "forbidden", f"this agent serves uid {my_uid} only")
                resp.force_close()
                return resp
            try:
                return await handler(request)
            except web.HTTPException as exc:
                if exc.status == 404:
                    return _error(404, "not_found", f"no route {request.method} {request.path}",
                                  hint="see GET /v1/openapi.json")
                if exc.status == 405:
                    return _error(405, "method_not_allowed", f"{request.method} is not allowed on {request.path}")
                raise
            except ConduitError as exc:
                return _error(404, "not_found", exc.message, exc.hint)

        app = web.Application(middlewares=[guard], client_max_size=64 * 1024)
        r = app.router
        r.add_get("/v1/healthz", self._h_healthz)
        r.add_get("/v1/status", self._answer(self.status_json))
        r.add_get("/v1/channels", self._answer(self.channels_json))
        r.add_get("/v1/channels/{name}", self._h_channel)
        r.add_post("/v1/channels/{name}/probe", self._h_probe)
        r.add_get("/v1/gpus", self._answer(self.gpus_json))
        r.add_get("/v1/host", self._answer(self.host_json))
        r.add_get("/v1/tools", self._answer(lambda: self.tools))
        r.add_get("/v1/vllm", self._answer(self.vllm_json))
        r.add_post("/v1/vllm/{action}", self._h_vllm)
        r.add_get("/v1/openapi.json", self._answer(openapi))
        return app

    @staticmethod
    def _answer(state: Callable[[], dict[str, Any]]) -> Callable[[web.Request], Awaitable[web.Response]]:
        """A GET handler answering ``state()`` (already-kept state; nothing here waits)."""

        async def handler(request: web.Request) -> web.Response:
            return _json(state())

        return handler

    async def _h_healthz(self, request: web.Request) -> web.Response:
        a = self.agent_json()
        return _json({"ok": self.state in (AgentState.STARTING, AgentState.RUNNING), **a})

    async def _h_channel(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        snap = self.prober.snapshot()
        if name not in snap:
            return _error(404, "unknown_channel", f"no channel named {name!r}",
                          hint=f"known channels: {', '.join(snap) or '(none)'}", known=list(snap))
        return _json({"name": name, **snap[name]})

    async def _h_probe(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name not in self.prober.health:
            known = sorted(self.prober.health)
            return _error(404, "unknown_channel", f"no channel named {name!r}",
                          hint=f"known channels: {', '.join(known) or '(none)'}", known=known)
        try:
            wait = min(30.0, max(0.0, float(request.query.get("wait", "5"))))
        except ValueError:
            return _error(400, "bad_request", "wait must be a number of seconds (0..30)")
        task = self._probing.get(name)
        if task is None or task.done():  # one probe per channel at a time, however often POST is called
            task = asyncio.create_task(self.prober.probe_channel(name))
            self._probing[name] = task
            self._tasks.append(task)
            task.add_done_callback(lambda t: self._tasks.remove(t) if t in self._tasks else None)
        pending = False
        if wait > 0:
            try:
                await asyncio.wait_for(asyncio.shield(task), wait)
            except TimeoutError:
                pending = True
        else:
            pending = not task.done()
        snapshot = self.prober.snapshot().get(name)
        if snapshot is None:  # the profile dropped the channel while its probe ran
            return _error(404, "unknown_channel", f"channel {name!r} was removed from the profile while probing")
        return _json({"name": name, "pending": pending, **snapshot}, status=202 if pending else 200)

    async def _h_vllm(self, request: web.Request) -> web.Response:
        action = request.match_info["action"]
        if action not in ("start", "stop", "restart"):
            return _error(404, "not_found", f"no vLLM action {action!r}", hint="use start, stop or restart")
        if self.vllm is None:
            if self.vllm_problem is not None:
                return _error(409, "vllm_refused", self.vllm_problem["reason"], self.vllm_problem["fix"],
                              **self.vllm_json())
            return _error(409, "not_configured", "no local vLLM is configured",
                          hint="add a [vllm] table to the profile", state="not_configured")
        fn = getattr(self.vllm, action)
        task = asyncio.ensure_future(fn())
        try:
            await asyncio.wait_for(asyncio.shield(task), 30.0)
        except TimeoutError:
            return _json({"pending": True, **self.vllm_json()}, status=202)
        except ConduitError as exc:
            return _error(409, "vllm_refused", exc.message, exc.hint, **self.vllm_json())
        return _json(self.vllm_json())

    async def serve(self, claimed: ClaimedSocket, stop: asyncio.Event) -> None:
        """Serve on an already claimed socket until ``stop`` is set; then shut down cleanly."""
        runner = web.AppRunner(self.app, handle_signals=False, access_log=None,
                               keepalive_timeout=self.config.idle_timeout_s,
                               max_line_size=8190, max_field_size=8190, max_headers=128, shutdown_timeout=2.0)
        await runner.setup()
        # Read the profile before the first answer: a client that sees the agent up must see its channels.
        await self._reload_profile(force=True)
        site = web.SockSite(runner, claimed.sock, backlog=1024)
        await site.start()
        self.start_loops()
        log.info("conduit agent listening on %s (pid %d)", self.socket_path, os.getpid())
        sd_notify("READY=1")  # conduit-agent.service is Type=notify
        try:
            await stop.wait()
        finally:
            sd_notify("STOPPING=1")
            await self.stop_loops()
            await runner.cleanup()
            claimed.release()
            self._set_state(AgentState.STOPPED)


@functools.cache
def _version() -> str:
    try:
        from importlib.metadata import version

        return version("conduit")
    except Exception:  # pragma: no cover
        return "unknown"


def run_agent(config: AgentConfig | None = None, vllm: VllmSlot | None = None) -> int:
    """Run the agent in the foreground until SIGTERM/SIGINT. Returns the exit code (0).

    Raises:
        AgentAlreadyRunning, ConduitError: see ``claim_socket``.
    """
    config = config or AgentConfig()
    logging.basicConfig(level=os.environ.get("CONDUIT_LOG_LEVEL", "INFO").upper(),
                        format="%(asctime)s conduit-agent %(levelname)s %(message)s")
    # httpx logs every health/metrics poll at INFO (tens of thousands of lines a day): keep only its warnings.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    _raise_nofile_limit()
    agent = Agent(config, vllm=vllm)
    claimed = claim_socket(agent.socket_path)

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await agent.serve(claimed, stop)

    try:
        asyncio.run(main())
    finally:
        claimed.release()
    return 0


# --------------------------------------------------------------------------------------------- OpenAPI


def openapi() -> dict[str, Any]:
    """The OpenAPI 3.1 description served at ``/v1/openapi.json`` (shapes in docs/agent.md)."""
    obj = {"type": "object"}
    err = {"description": "error", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}

    def get(summary: str, schema: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
        op: dict[str, Any] = {"summary": summary, "responses": {
            "200": {"description": "ok", "content": {"application/json": {"schema": schema or obj}}}, **extra}}
        return op

    name = {"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}
    return {
        "openapi": "3.1.0",
        "info": {"title": "conduit agent", "version": _version(),
                 "description": "HTTP/1.1 + JSON on a Unix socket; only the owning uid may connect."},
        "servers": [{"url": "http://localhost"}],
        "paths": {
            "/v1/healthz": {"get": get("Liveness of the agent")},
            "/v1/status": {"get": get("Everything: agent, channels, gpus, host, vllm, tools")},
            "/v1/channels": {"get": get("Health of every channel and protocol")},
            "/v1/channels/{name}": {"get": {**get("One channel", None, **{"404": err}), "parameters": [name]}},
            "/v1/channels/{name}/probe": {"post": {
                **get("Probe a channel now", None, **{"202": {"description": "probe still running"}, "404": err}),
                "parameters": [name, {"name": "wait", "in": "query", "required": False,
                                      "schema": {"type": "number", "minimum": 0, "maximum": 30, "default": 5}}]}},
            "/v1/gpus": {"get": get("GPUs with VRAM figures and a min-free / peak-used window")},
            "/v1/host": {"get": get("Host memory")},
            "/v1/tools": {"get": get("The sync daemon's state")},
            "/v1/vllm": {"get": get("The supervised vLLM")},
            "/v1/vllm/{action}": {"post": {**get("Start, stop or restart vLLM", None, **{"409": err}),
                                           "parameters": [{"name": "action", "in": "path", "required": True,
                                                           "schema": {"enum": ["start", "stop", "restart"]}}]}},
            "/v1/openapi.json": {"get": get("This document")},
        },
        "components": {"schemas": {"Error": {"type": "object", "required": ["error", "message"], "properties": {
            "error": {"type": "string"}, "message": {"type": "string"}, "hint": {"type": ["string", "null"]}}}}},
    }


__all__ = ["Agent", "AgentAlreadyRunning", "AgentConfig", "AgentState", "ClaimedSocket", "VllmSlot",
           "claim_socket", "openapi", "peer_uid", "run_agent"]
