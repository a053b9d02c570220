"""Supervise one local vLLM server: the lifecycle state machine (launch, readiness, crashes, restarts, stop).

One asyncio loop (the agent's one concurrency model): ``Supervisor.run()`` is the agent's long-running task
and the only place state changes. Everything else arrives as a typed message on one queue (``messages``): commands from
the socket, the child's exit and the health polls (``monitor``), backoff timers.

The parts, one module each:

- ``process``: the process group (``start_new_session=True``; TERM to the group, grace, KILL, psutil check).
- ``tree``: every descendant of a launch, also one that called ``setsid()``, and its re-parented orphans.
- ``logs``: ``state_dir()/vllm/vllm.log``, rotated at each launch, copy-truncated past ``log_max_bytes``.
- ``monitor``: ready = ``/health`` 200 **and** ``/v1/models`` lists the served name; then health and metrics.
- ``preflight``: a GPU launch is refused before it starts when the free memory is short (injected probe).
- ``adoption``: the pid file, and adoption by the next agent of a healthy vLLM an earlier one launched (why not PDEATHSIG).
- ``settings``: flags for the installed vLLM version, and that version.

A crash is noticed from the child's exit, whatever its status (vLLM can exit 0 after its engine died). An exit
before the server was ready goes to ``failed`` at once with the diagnosis (the same settings would fail the
same way: a missing model, an unknown flag, too little memory); only a port vLLM picked for itself being taken
(``lifecycle.RETRY_AT_START``) and exits after ``ready`` are retried with backoff. After
any exit the rest of the group is killed (SIGKILL to the API server alone leaves EngineCore and Worker alive:
case C16). An agent stopping on purpose calls ``aclose(stop_vllm=True)``; a dead one leaves at most a serving
vLLM behind, which the next agent adopts.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
import uuid
from pathlib import Path
from typing import Any

from conduit.daemon.config import paths
from conduit.daemon.config.vllm import VllmSettings
from conduit.daemon.vllm.adoption import PidRecord, digest, recover, write_pid_file
from conduit.daemon.vllm.diagnose import (
    Diagnosis,
    crash_diagnosis,
    diagnose,
    stop_incomplete_diagnosis,
    timeout_diagnosis,
    unhealthy_diagnosis,
)
from conduit.daemon.vllm.lifecycle import (
    ACTIVE,
    DETERMINISTIC,
    RETRY_AT_START,
    CrashWindow,
    IllegalTransition,
    Lifecycle,
    VllmState,
)
from conduit.daemon.vllm.logs import VllmLog
from conduit.daemon.vllm.messages import Cmd, Exited, Health, Launch, Message, Ready, RestartDue, StartTimeout
from conduit.daemon.vllm.metrics import MetricsTracker
from conduit.daemon.vllm.monitor import Monitor, track, watch_exit
from conduit.daemon.vllm.preflight import CapabilityProbe, MemoryProbe, plan_launch
from conduit.daemon.vllm.process import group_members, kill_group, spawn_group
from conduit.daemon.vllm.reports import Reports
from conduit.daemon.vllm.settings import Version
from conduit.daemon.vllm.tree import MARKER_ENV, Tree
from conduit.errors import ConduitError
from conduit.redact import Redactor, mask_argv

__all__ = ["DETERMINISTIC", "IllegalTransition", "Supervisor", "VllmState"]

class Supervisor(Lifecycle, Reports):
    """Keeps one vLLM server in the state the profile asks for. Asyncio only; create it inside the loop's thread.

    Args:
        settings: the profile's ``[vllm]`` table.
        memory_probe / capability_probe: the GPU memory and compute capability readers of the launch preflight
            (``preflight.MemoryProbe``, ``CapabilityProbe``); the agent and ``conduit vllm run`` pass
            ``agent.gpu.memory_by_index`` / ``capability_by_index``, tests stand-ins (this package reads no GPU).
        autostart: launch (or adopt) as soon as ``run()`` begins.
        state_dir: where ``vllm.log`` and ``vllm.pid`` live; default ``paths.state_dir()/vllm``.
        redactor: masks what the snapshot quotes from vLLM (log tails, reasons, warnings), with key-like flag
            values (``conduit.redact.mask_key_flags``); taught ``[vllm].api_key``. The agent passes its own.

    The state is ``state`` / ``since`` / ``history``; ``wait_for(*states, timeout_s)`` waits for one
    (``lifecycle.Lifecycle``).

    Usage::

        sup = Supervisor(settings, memory_probe=lambda: memory_by_index(probe))
        task = asyncio.create_task(sup.run())
        await sup.wait_for(VllmState.READY, timeout_s=600)
        print(sup.snapshot()["base_url"])
        await sup.aclose(stop_vllm=True)
    """

    def __init__(
        self,
        settings: VllmSettings,
        *,
        memory_probe: MemoryProbe,
        capability_probe: CapabilityProbe | None = None,
        autostart: bool = True,
        state_dir: Path | None = None,
        redactor: Redactor | None = None,
    ) -> None:
        Reports.__init__(self, redactor)
        self.settings = settings
        self.teach(settings)
        self.autostart = autostart
        self.recovering = False  # True while ``run`` checks an earlier agent's server for adoption
        self.dir = state_dir or paths.state_dir() / "vllm"
        self.memory_probe = memory_probe
        self.capability_probe = capability_probe
        Lifecycle.__init__(self)
        self.restarts = 0
        self.version: Version | None = None
        self.distribution: str | None = None
        #: time.monotonic() when the last unasked exit of vLLM was seen (for bench/supervisor.py)
        self.exit_seen_monotonic: float | None = None
        self._events: asyncio.Queue[Message] = asyncio.Queue()
        self._cur: Launch | None = None
        self._gen = 0
        self._crashes = CrashWindow()
        self._timer: asyncio.Task[None] | None = None
        self._unhealthy_since: float | None = None
        self._metrics = MetricsTracker()
        self._monitor = Monitor(lambda: self.settings, self._post, self._metrics, lambda: self._log.truncate_if_big())
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

    @property
    def _log(self) -> VllmLog:
        # built on each use: log_backups / log_max_bytes may change without a relaunch
        return VllmLog(self.log_path, self.settings.log_backups, self.settings.log_max_bytes)

    # ---------------------------------------------------------------- public API
    async def run(self) -> None:
        """The long-running task: recover (adopt or clean up) a vLLM from an earlier agent, then process
        messages forever. Cancelling it leaves a running vLLM alive for the next agent to adopt; call
        ``aclose(stop_vllm=True)`` to stop vLLM too.

        Raises:
            ConduitError: this supervisor already runs.
        """
        if self._running:
            raise ConduitError("the vLLM supervisor is already running", "run one supervisor per agent")
        self._running = True
        self._run_task = asyncio.current_task()
        try:
            self.recovering = True  # the router counts this as a first start: no evidence either way
            try:
                adopted = await self._recover()
            finally:
                self.recovering = False
            if self.autostart and not adopted:
                await self._launch()
            while True:
                ev = await self._events.get()
                try:
                    await self._handle(ev)
                except Exception as exc:  # a bug must not kill supervision; answer the command with it
                    if isinstance(ev, Cmd) and not ev.done.done():
                        ev.done.set_exception(exc)
                    else:
                        self.warnings_push(f"internal error handling {type(ev).__name__}: {exc!r}")
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
        snap: dict[str, Any] = await self._command("start")
        return snap

    async def stop(self) -> dict[str, Any]:
        """Stop the group (TERM, grace, KILL, check) and return the snapshot (``stopped``, or ``failed`` with
        the processes left)."""
        snap: dict[str, Any] = await self._command("stop")
        return snap

    async def restart(self) -> dict[str, Any]:
        """Stop whatever runs and launch again; returns the snapshot in ``starting`` (or ``failed``)."""
        snap: dict[str, Any] = await self._command("restart")
        return snap

    async def apply_settings(self, new: VllmSettings) -> bool:
        """Take new ``[vllm]`` settings. Restarts vLLM only when what it is launched with changed
        (``VllmSettings.launch_fingerprint``), or starts it when it had ``failed``. Returns True when vLLM
        was (re)launched."""
        return bool(await self._command("apply", new))

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
            "argv": mask_argv(cur.argv) if cur else None,
            "log_path": str(self.log_path),
            "kv_cache": self.kv_cache,
            "history": [list(h) for h in self.history],
        }

    def pids(self) -> set[int]:
        """PIDs of the live processes in the current vLLM group (API server, EngineCore, Workers...)."""
        cur = self._cur
        if cur is None:
            return set()
        tracked = cur.tree.pids() if cur.tree else set()
        return tracked | {p.pid for p in group_members(cur.pgid, cur.sid, cur.create_time)}

    async def scrape_now(self) -> dict[str, Any] | None:
        """Scrape ``/metrics`` once now (tests, ``conduit status --fresh``); returns the metrics snapshot."""
        return await self._monitor.scrape()

    # ---------------------------------------------------------------- internals: state
    async def _command(self, kind: str, settings: VllmSettings | None = None) -> Any:
        if not self._running:
            raise ConduitError("the vLLM supervisor loop is not running", "start the agent (`conduit agent`)")
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        await self._events.put(Cmd(kind, fut, settings))
        return await fut

    def _post(self, ev: Message) -> None:
        self._events.put_nowait(ev)

    def _fail(self, d: Diagnosis, exit_code: int | None = None, tail: str | None = None) -> None:
        self._record_failure(d, exit_code, tail)
        self._to(VllmState.FAILED)

    def _record_failure(self, d: Diagnosis, exit_code: int | None, tail: str | None) -> None:
        self.record_failure(d, exit_code, tail if tail is not None else self._log.tail())

    # ---------------------------------------------------------------- internals: messages
    async def _handle(self, ev: Message) -> None:
        cur = self._cur
        if isinstance(ev, Cmd):
            await self._handle_cmd(ev)
            return
        if cur is None or ev.gen != cur.gen:
            if isinstance(ev, RestartDue) and ev.gen == self._gen and self.state is VllmState.RESTARTING:
                self.restarts += 1
                await self._launch()
            return  # a message about a launch that is already gone
        if isinstance(ev, Exited):
            self.exit_seen_monotonic = ev.seen
            await self._on_exit(cur, ev.code)
        elif isinstance(ev, Ready):
            if self.state is VllmState.STARTING:
                self._to(VllmState.READY)
                self.read_kv_cache_line(self._log)
        elif isinstance(ev, StartTimeout):
            if self.state is VllmState.STARTING:
                tail = self._log.tail()
                left = await self._kill(cur)
                self._fail(timeout_diagnosis(self.settings.startup_timeout_s, tail), None, tail)
                self.note_left(left)
        elif isinstance(ev, Health):
            await self._on_health(cur, ev)

    async def _handle_cmd(self, cmd: Cmd) -> None:
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
            if cmd.settings is None:
                raise ConduitError("internal: an apply command without settings")
            result = await self._apply(cmd.settings)
        if result is None:
            result = self.snapshot()
        if not cmd.done.done():
            cmd.done.set_result(result)

    async def _apply(self, new: VllmSettings) -> bool:
        """Take ``new``; relaunch when a launch setting changed and vLLM runs or had failed."""
        old, self.settings = self.settings, new
        self.teach(new)
        changed = old.launch_fingerprint() != new.launch_fingerprint()
        if not changed or not (self.state in ACTIVE or self.state is VllmState.FAILED):
            return False
        self._crashes.clear()
        if self.state in ACTIVE:
            await self._stop(None)
            self.restarts += 1
        await self._launch()
        return True

    async def _on_exit(self, cur: Launch, code: int | None) -> None:
        cur.exit_code = code
        was = self.state
        tail = self._log.tail()
        left = await self._kill(cur)  # the API server is gone; EngineCore/Worker may not be (C16)
        d = diagnose(tail, exit_code=code, port=self.settings.port, model=self.settings.model)
        self.note_left(left)
        if was is VllmState.STARTING and d.kind not in RETRY_AT_START:
            self._fail(d, code, tail)  # a start-up failure: relaunching the same settings cannot help
        elif was is VllmState.STARTING:
            self._crashed(d, code, tail)
        else:
            self._crashed(crash_diagnosis(d, tail, code, was.value), code, tail)

    async def _on_health(self, cur: Launch, ev: Health) -> None:
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
                tail = self._log.tail()
                left = await self._kill(cur)
                self.note_left(left)
                self._crashed(unhealthy_diagnosis(now - since, ev.detail), None, tail)

    def _crashed(self, d: Diagnosis, code: int | None, tail: str) -> None:
        """An unasked exit: restart after a doubling backoff, or fail (mode ``never``, or a crash loop)."""
        pol = self.settings.restart
        n = self._crashes.record(pol)
        final = CrashWindow.give_up(pol, n, d)
        if final is not None:
            self._fail(final, code, tail)
            return
        self._record_failure(d, code, tail)
        self._to(VllmState.RESTARTING)
        self._timer = asyncio.create_task(self._later(CrashWindow.backoff_s(pol, n), RestartDue(self._gen)))

    async def _later(self, delay: float, ev: Message) -> None:
        await asyncio.sleep(delay)
        self._post(ev)

    # ---------------------------------------------------------------- launch / stop
    async def _launch(self) -> None:
        """Launch vLLM for the current settings (state -> starting), or fail with a diagnosis."""
        s = self.settings
        self._metrics.reset()
        self.kv_cache = None
        self._gen += 1
        try:
            plan = await plan_launch(s, self.memory_probe, self.distribution, self.capability_probe)
        except ConduitError as exc:
            self._fail_launch(Diagnosis("launch_error", exc.message, exc.hint or "fix [vllm].python"))
            return
        self.version, self.distribution = plan.version, plan.distribution
        for w in plan.warnings:
            if w not in self.warnings:
                self.warnings_push(w)
        if plan.refused:
            self._fail_launch(plan.refused)
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        self._log.rotate()
        argv, marker = plan.argv, uuid.uuid4().hex  # every process of the launch inherits the marker
        fd = self._log.open_for_child()
        try:
            child = await spawn_group(argv, {**plan.env, MARKER_ENV: marker}, fd)
        except OSError as exc:
            self._fail_launch(Diagnosis("launch_error", f"cannot start {argv[0]}: {exc.strerror}",
                                        "fix [vllm].python or [vllm].command"))
            return
        finally:
            os.close(fd)
        cur = Launch(self._gen, child.pid, child.pid, child.pid, child.create_time, child.proc, argv, self.log_path,
                     tree=Tree(child.pid, child.create_time, marker))
        self._cur = cur
        write_pid_file(self.pid_path, PidRecord(cur.pid, cur.pgid, cur.sid, cur.create_time,
                                                digest(s.launch_fingerprint()), cur.argv, str(cur.log_path), marker))
        self._to(VllmState.STARTING)
        self._watch(cur, ready=False)

    def _watch(self, cur: Launch, ready: bool) -> None:
        """Start ``cur``'s exit watcher and monitor (``ready``: it already serves, skip the readiness wait)."""
        cur.tasks = [
            asyncio.create_task(watch_exit(cur, self._post)),
            asyncio.create_task(self._monitor.run(cur, ready=ready)),
            asyncio.create_task(track(cur)),
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
            self._fail(stop_incomplete_diagnosis(left), None, "")
            return
        if final is not None:
            self._to(final)

    async def _kill(self, cur: Launch) -> list[str]:
        """Kill ``cur``'s group and forget it; remove the pid file once nothing is left."""
        self._cur = None
        self._unhealthy_since = None
        me = asyncio.current_task()
        for t in cur.tasks:
            if t is not me:
                t.cancel()
        left = await kill_group(cur.pgid, cur.sid, grace_s=self.settings.stop_grace_s, not_before=cur.create_time,
                                tree=cur.tree)
        if cur.proc is not None:
            with contextlib.suppress(asyncio.TimeoutError, ProcessLookupError):
                await asyncio.wait_for(cur.proc.wait(), 2.0)  # reap the leader
        if not left:
            with contextlib.suppress(FileNotFoundError):
                self.pid_path.unlink()
        return left

    # ---------------------------------------------------------------- adoption (see ``adoption``)
    async def _recover(self) -> bool:
        """Adopt a healthy vLLM an earlier agent launched with the same settings, or kill what is left of it.

        Returns True when a server was adopted (state ``ready``).
        """
        found = await recover(self.pid_path, self.settings.launch_fingerprint(), self.settings.stop_grace_s,
                              self._monitor.check_ready, patience_s=self.settings.unhealthy_restart_s)
        for w in found.warnings:
            self.warnings_push(w)
        self.note_left(list(found.left))
        if found.adopt is not None:
            self._adopt(found.adopt)
        return found.adopt is not None

    def _adopt(self, rec: PidRecord) -> None:
        """Take over a serving group an earlier agent launched (no exit status: it is not our child)."""
        self._gen += 1
        cur = Launch(self._gen, rec.pid, rec.pgid, rec.sid, rec.create_time, None, list(rec.argv), self.log_path,
                     adopted=True, tree=Tree(rec.pid, rec.create_time, rec.marker))
        self._cur = cur
        self._to(VllmState.READY)
        self.warnings_push(f"adopted vLLM pid {rec.pid} launched by an earlier agent")
        self.read_kv_cache_line(self._log)
        self._watch(cur, ready=True)
