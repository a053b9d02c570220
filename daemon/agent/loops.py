"""The agent's background loops and the state they keep for the handlers to read.

Answers come from this state; a request never waits on a network probe or NVML (docs/design.md
"The agent's socket"). Blocking work (NVML, resolving the profile's key sources) runs in worker threads through
``asyncio.to_thread`` and only replaces what the handlers read: whole objects, swapped in one assignment.

Loops:
    GPU sampling     every ``gpu_interval_s``: NVML -> ``Keeper.gpus`` (a ``Gpus`` model) and the host figures
    files            every ``reload_interval_s``: the profile (-> probe targets, vLLM settings) when it changed
                     or every ``rekey_interval_s`` (keys may rotate in place), and the sync state file
    channel probes   ``conduit.daemon.agent.prober.Prober``'s own jittered schedules
    routing          every ``routing.TICK_S`` while the profile has ``[fallback]``: the primary probed at least
                     every second, the judge fed, the routing file written on a change (``conduit.daemon.agent.routing``)
    vLLM following   when the agent runs its own supervisor: a reload whose ``[vllm]`` settings changed
                     calls ``apply_settings`` (which restarts vLLM only when what it is launched with changed),
                     removing the table stops vLLM, adding it starts one; an invalid profile changes nothing
                     (a typo never stops a serving model)
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Coroutine
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from conduit.daemon.agent.cluster import ClusterKeeper, follow_cluster, serves_api
from conduit.daemon.agent.engines import EngineSet, EnginesRead, engine_route, read_engines
from conduit.daemon.agent.gpu import GpuHistory, GpuProbe, GpuReport, HostSnapshot, host_snapshot, report_json
from conduit.daemon.agent.models import Channels, Gpus, HostNote, HostSample, ToolsBody
from conduit.daemon.agent.prober import Prober, ProbeTarget, targets_for
from conduit.daemon.agent.routing import TICK_S, RoutePlan, Router, plan_for
from conduit.daemon.agent.state import AgentConfig
from conduit.daemon.config import paths
from conduit.daemon.config.firstuse import announce, is_placeholder_url, placeholder_message
from conduit.daemon.config.profile import load_profile
from conduit.daemon.config.resolve import vllm_settings
from conduit.daemon.config.routing import profile_key
from conduit.daemon.config.vllm import VllmSettings
from conduit.errors import ConduitError
from conduit.memory import release_free_memory
from conduit.redact import Redactor

if TYPE_CHECKING:
    from conduit.daemon.vllm.supervisor import Supervisor

log = logging.getLogger("conduit.agent")

NO_SYNC_STATE = "no sync state yet"


# --------------------------------------------------------------------------------------------- files


@dataclass
class ProfileView:
    """What the agent takes from one read of the profile (made in a worker thread by ``read_profile``).

    Attributes:
        targets, problems: probe targets and unresolvable channels (``conduit.daemon.agent.prober.targets_for``).
        note: why there are no channels (the profile is missing or invalid), else None.
        valid: the profile was read and validated; when false, ``vllm`` means nothing and vLLM is left alone.
        vllm: the ``[vllm]`` settings ready to launch with, None without a table, or the ``ConduitError`` met
            reading ``[vllm].api_key``'s key source.
        route: the ``[fallback]`` plan (``conduit.daemon.agent.routing.RoutePlan``), or None without the table.
        engines: the ``[engines.NAME]`` tables (``conduit.daemon.agent.engines.read_engines``).
    """

    targets: list[ProbeTarget]
    problems: dict[str, str]
    note: str | None
    valid: bool
    vllm: VllmSettings | ConduitError | None = None
    route: RoutePlan | None = None
    engines: EnginesRead = field(default_factory=EnginesRead)

    def secrets(self) -> list[str]:
        """Every key this read resolved: the channels' keys and ``[vllm].api_key`` (for the agent's Redactor)."""
        keys = [t.key for t in self.targets if t.key]
        if isinstance(self.vllm, VllmSettings) and self.vllm.api_key is not None:
            keys.append(self.vllm.api_key.get_secret_value())
        return keys


def read_profile(path: str | None) -> ProfileView:
    """Load the profile once and derive probe targets and vLLM settings. Blocking (key sources may run
    commands): call it through ``asyncio.to_thread``. Never raises."""
    try:
        loaded = load_profile(path)
    except ConduitError as exc:
        return ProfileView([], {}, str(exc), valid=False)
    except OSError as exc:
        return ProfileView([], {}, f"cannot read the profile: {exc}", valid=False)
    targets, problems = targets_for(loaded)
    for t in targets:  # the starter's placeholder gateway is never probed; a new host is said once
        if is_placeholder_url(t.root.url):
            problems[t.channel] = placeholder_message(t.channel, t.root.url)
        else:
            announce(t.channel, t.root.url, t.key)
    targets = [t for t in targets if t.channel not in problems]
    vllm: VllmSettings | ConduitError | None
    try:
        vllm = vllm_settings(loaded)
    except ConduitError as exc:
        vllm = exc
    engines = read_engines(loaded)
    return ProfileView(targets, problems, None, valid=True, vllm=vllm,
                       route=engine_route(plan_for(loaded, profile_key(path)), engines), engines=engines)


def read_tools(path: Path) -> ToolsBody:
    """The ``/v1/tools`` body from the sync daemon's state file: the file as written when it has a
    ``tools`` key, its object under ``tools`` otherwise, or ``{"tools": {}, "note": why}``. Never raises."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return ToolsBody(tools={}, note=f"cannot read {path}: {exc}")
    if not (isinstance(data, dict) and "tools" in data):
        return ToolsBody(tools=_displayed(data) if isinstance(data, dict) else {}, note=None)
    try:
        body = ToolsBody.model_validate(data)
        body.tools = _displayed(body.tools)
        return body
    except ValidationError as exc:  # e.g. "tools" is not an object: not the format the sync daemon writes
        return ToolsBody(tools={}, note=f"cannot read {path}: {exc.errors()[0]['msg']} at {exc.errors()[0]['loc']}")


def _displayed(tools: dict[str, Any]) -> dict[str, Any]:
    """``tools`` with each known tool's ``display`` name added (``conduit status`` shows the names doctor shows)."""
    from conduit.adapters.registry import ADAPTERS  # the adapters load once, at the first read

    return {name: ({**info, "display": ADAPTERS[name].display_name}
                   if isinstance(info, dict) and name in ADAPTERS and "display" not in info else info)
            for name, info in tools.items()}


def file_signature(path: Path) -> tuple[int, int, int] | None:
    """``(mtime_ns, size, inode)`` of ``path``, or None when it cannot be stat'ed: a change means re-read."""
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


# --------------------------------------------------------------------------------------------- keeper


class Keeper:
    """The state the loops keep (read by the handlers) and the loops themselves.

    Args:
        config: the agent's settings.
        gpu_probe: the NVML probe.
        vllm: a vLLM slot run as given, or None: the keeper then makes a supervisor with ``vllm_factory``
            when the profile has a ``[vllm]`` table, and follows the profile.
        prober: a channel prober run as given (its targets are not taken from the profile), or None.
        vllm_factory: makes the supervisor from ``VllmSettings``.
        redactor: taught every key each read of the profile resolves (it masks the agent's answers and log).

    Attributes read by the handlers: ``gpus``, ``host_body``, ``tools``, ``prober``, ``channels_note``,
    ``vllm`` (the slot or supervisor, or None), ``vllm_problem`` (why the profile's ``[vllm]`` cannot be
    applied, as a ``last_failure`` dict, or None; replaced, never changed in place), and the counters the
    handlers key their kept bodies on (``conduit.daemon.agent.bodies``): ``gpu_generation`` (one per GPU/host
    sample) and ``tools_generation`` (one per change of the sync state file).
    """

    def __init__(self, config: AgentConfig, gpu_probe: GpuProbe, vllm: Any, prober: Prober | None,
                 vllm_factory: Callable[[VllmSettings], Supervisor], redactor: Redactor | None = None) -> None:
        self.config = config
        self.redactor = redactor if redactor is not None else Redactor()
        self.gpu_probe = gpu_probe
        self.gpu_history = GpuHistory(window_s=config.gpu_window_s,
                                      maxlen=int(config.gpu_window_s / max(config.gpu_interval_s, 0.05)) + 1)
        self.host: HostSnapshot | None = None
        self.gpus = Gpus.model_validate(report_json(None))  # rebuilt after each sample, not per request
        self.host_body: HostSample | HostNote = HostNote(note="not sampled yet")
        self.tools = ToolsBody(tools={}, note=NO_SYNC_STATE)
        self.gpu_generation = 0  # counts GPU/host samples: bumped after gpus/host_body are replaced
        self.tools_generation = 0  # counts changes of the sync state file: bumped after tools is replaced
        self.vllm: Any = vllm
        self.own_vllm = vllm is None
        self.vllm_problem: dict[str, Any] | None = None
        self._vllm_factory = vllm_factory
        self.cluster: ClusterKeeper | None = None  # [vllm.cluster] backend ray (conduit.daemon.agent.cluster)
        self.engines = EngineSet(self.redactor)  # [engines.NAME], observed beside [vllm]
        self._vllm_task: asyncio.Task[None] | None = None
        self.own_prober = prober is None
        self.prober = prober or Prober([], interval_s=config.probe_interval_s)
        self.channels_note: str | None = "profile not read yet" if prober is None else None
        self._tasks: list[asyncio.Task[Any]] = []
        self._profile_sig: tuple[int, int, int] | None = None
        self._resolved_at = -1e9
        self._tools_sig: tuple[int, int, int] | None = None
        self._last_vllm_state: str | None = None
        self._probing: dict[str, asyncio.Task[Any]] = {}
        self._channels: tuple[int, str | None, Channels] | None = None
        self.router = Router()  # the fallback judge; its generation keys the kept /v1/status body

    # ---- lifecycle

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str | None = None) -> asyncio.Task[Any]:
        """Run ``coro`` as a task the keeper cancels on ``stop``; it forgets the task once done."""
        task = asyncio.create_task(coro, name=name)
        self._tasks.append(task)
        task.add_done_callback(lambda t: self._tasks.remove(t) if t in self._tasks else None)
        return task

    def start(self) -> None:
        """Start the loops on the running event loop (and a slot passed in, and a prober passed in)."""
        self.spawn(self._gpu_loop(), name="gpu")
        self.spawn(self._files_loop(), name="files")
        self.spawn(self._routing_loop(), name="routing")
        if self.vllm is not None and not self.own_vllm:
            self.spawn(self.vllm.run(), name="vllm")
        if not self.own_prober:
            self.prober.start()

    async def stop(self) -> None:
        """Cancel the loops and close the prober's client. A vLLM the keeper's own supervisor runs is left
        serving, for the next agent to adopt (``conduit vllm stop`` stops it)."""
        tasks = list(self._tasks)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self.cluster is not None:  # a group vLLM is not left for adoption: without Ray it cannot serve
            left = await self.cluster.aclose()
            if left:
                log.warning("Ray processes left after stop: %s", "; ".join(left))
        await self.engines.aclose()
        if self.own_vllm and self.vllm is not None:
            try:
                await self.vllm.aclose(stop_vllm=False)
            except Exception:
                log.exception("closing the vLLM supervisor failed")
        await self.prober.aclose()

    def channels(self) -> Channels:
        """The ``/v1/channels`` body: the prober's snapshot and the note on why there are none. Made again
        only when the prober's ``generation`` or the note moved (a request does not rebuild what no probe
        changed)."""
        cached = self._channels
        if cached is None or cached[:2] != (self.prober.generation, self.channels_note):
            body = Channels.model_validate({"channels": self.prober.snapshot(), "note": self.channels_note})
            cached = self._channels = (self.prober.generation, self.channels_note, body)
        return cached[2]

    def probe_now(self, name: str) -> asyncio.Task[Any]:
        """The task probing channel ``name`` now: the one already running, else a new one (one probe per
        channel at a time, however often ``POST /v1/channels/{name}/probe`` is called)."""
        task = self._probing.get(name)
        if task is None or task.done():
            task = self.spawn(self.prober.probe_channel(name))
            self._probing[name] = task
        return task

    # ---- GPUs and host

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
        state = self.vllm.snapshot().get("state") if self.vllm is not None else None
        if state == "ready" and self._last_vllm_state != "ready" and "local" in self.prober.health:
            self.spawn(self.prober.probe_channel("local"))
        self._last_vllm_state = state

    def _gpu_total(self) -> int | None:
        """The smallest total memory of this node's GPUs, bytes (None without a GPU reading)."""
        return min((g.total_bytes for g in self.gpus.gpus if g.total_bytes), default=None)

    def _sample(self) -> None:
        pids = self._vllm_pids()
        report: GpuReport = self.gpu_probe.sample(pids)
        self.gpu_history.add(report)
        gpus = Gpus.model_validate(report_json(report, self.gpu_history))
        host = host_snapshot()
        self.gpus, self.host, self.host_body = gpus, host, HostSample.model_validate(asdict(host))
        self.gpu_generation += 1  # after the swap: a reader that saw the old count rebuilds once more

    async def _gpu_loop(self) -> None:
        interval = self.config.gpu_interval_s
        while True:
            t0 = time.monotonic()
            try:
                self._probe_local_when_ready()
                await asyncio.to_thread(self._sample)
            except Exception:  # never let one bad sample end the loop
                log.exception("GPU/host sample failed")
            await asyncio.sleep(max(0.0, interval - (time.monotonic() - t0)))

    # ---- files: the profile and the sync state

    async def _files_loop(self) -> None:
        """Re-read the profile (-> probe targets) and the sync state file when they change."""
        while True:
            try:
                await self.reload_profile()
                self.reload_tools()
            except Exception:
                log.exception("reloading the profile or the sync state failed")
            release_free_memory()  # what the probes and reloads freed (a large answer read) goes back to the system
            await asyncio.sleep(self.config.reload_interval_s)

    async def reload_profile(self, force: bool = False) -> None:
        """Read the profile again when it changed, when ``rekey_interval_s`` passed, or when ``force``d;
        hand its targets to the prober and its ``[vllm]`` to the supervisor (each only when the keeper
        owns it)."""
        if not self.own_prober and not self.own_vllm:
            return
        sig = file_signature(paths.profile_path(self.config.profile_path))
        stale = time.monotonic() - self._resolved_at > self.config.rekey_interval_s  # keys may rotate in place
        if sig == self._profile_sig and not force and not stale:
            return
        self._profile_sig = sig
        self._resolved_at = time.monotonic()
        view = await asyncio.to_thread(read_profile, self.config.profile_path)
        self.redactor.add(view.secrets())
        if self.own_prober:
            before = {(t.channel, t.protocol): t for t in self.prober.targets()}
            self.prober.set_targets(view.targets, view.problems)
            self.channels_note = view.note
            if force or before != {(t.channel, t.protocol): t for t in view.targets}:
                self.prober.start()  # restart the schedules only when what is probed changed
        if self.own_vllm and view.valid:
            await self._follow_vllm(view.vllm)
        if view.valid:
            await self.engines.follow(view.engines)
            self.router.set_plan(view.route)

    def reload_tools(self) -> None:
        """Read the sync daemon's state file again when it changed."""
        path = paths.state_dir() / "sync.json"
        sig = file_signature(path)
        if sig == self._tools_sig:
            return
        self._tools_sig = sig
        self.tools = read_tools(path) if sig is not None else ToolsBody(tools={}, note=NO_SYNC_STATE)
        self.tools_generation += 1

    # ---- routing (primary / fallback: docs/design.md "Routing")

    async def _routing_loop(self) -> None:
        """Feed the fallback judge every ``TICK_S``; probe the primary when the router asks (at least every 1 s)."""
        while True:
            try:
                plan = self.router.plan
                if plan is not None:
                    state = self.vllm.snapshot().get("state") if self.vllm is not None else None
                    if getattr(self.vllm, "recovering", False):
                        state = "starting"  # an earlier agent's server being checked for adoption: no evidence
                    if plan.engine is not None:  # the primary points at an observed [engines.NAME]
                        state = self.engines.state_of(plan.engine)
                    now = time.monotonic()
                    if self.router.wants_probe(now, state) and plan.primary in self.prober.health:
                        self.probe_now(plan.primary)
                    self.router.tick(now, state, self.prober.health.get(plan.primary, {}))
            except Exception:  # the judge must not end the loop
                log.exception("routing look failed")
            await asyncio.sleep(TICK_S)

    # ---- vLLM following

    def _refuse_vllm(self, problem: ConduitError) -> None:
        """The profile's ``[vllm]`` cannot be used (its api_key source fails): report it, change nothing."""
        self.vllm_problem = {"kind": "api_key", "reason": problem.message, "fix": problem.hint,
                             "exit_code": None, "log_tail": "", "at": time.time()}
        log.warning("[vllm].api_key: %s", problem.message)
        if self.vllm is not None and problem.message not in self.vllm.warnings:
            self.vllm.warnings_push(f"profile change not applied: {problem.message}")

    async def _follow_vllm(self, new: VllmSettings | ConduitError | None) -> None:
        """Make the keeper's supervisor match the profile's ``[vllm]``: start one for a new table, hand
        changed settings to it (it restarts vLLM only when the launch changed), stop it when the table is gone.
        A key source that cannot be read leaves a running vLLM as it is and is reported on ``/v1/vllm``."""
        if isinstance(new, ConduitError):
            self._refuse_vllm(new)
            return
        self.vllm_problem = None
        before = self.cluster
        self.cluster = await follow_cluster(before, new, None, paths.state_dir() / "vllm", self._gpu_total)
        if not serves_api(new):
            new = None  # a Ray worker node launches no vLLM: the head's uses it through Ray
        sup = self.vllm
        if sup is not None and new is not None and self.cluster is not None and self.cluster is not before:
            # a new (or changed) Ray group: its vLLM starts when the keeper finds the group whole, not now
            log.info("[vllm.cluster] is new: stopping this vLLM; the group's starts once every node has joined")
            try:
                await sup.aclose(stop_vllm=True)
            finally:
                self.vllm, self._vllm_task = None, None
            sup = None
        if new is None:
            if sup is not None:
                log.info("the profile has no [vllm] table any more: stopping vLLM")
                try:
                    await sup.aclose(stop_vllm=True)
                finally:
                    self.vllm, self._vllm_task = None, None
            return
        if sup is not None and getattr(sup, "observes", False) == new.manage:  # manage flipped: another kind
            log.info("[vllm].manage changed: %s", "observing, not launching" if not new.manage else "launching")
            try:
                await sup.aclose(stop_vllm=True)  # an observer stops nothing; a supervisor stops its vLLM
            finally:
                self.vllm, self._vllm_task = None, None
            sup = None
        if sup is not None and self._vllm_task is not None and self._vllm_task.done():
            log.error("the vLLM supervisor ended unexpectedly (%r); starting a new one",
                      self._vllm_task.exception() if not self._vllm_task.cancelled() else "cancelled")
            sup = None
        if sup is None:
            sup = self._vllm_factory(new)
            self.vllm = sup
            if self.cluster is not None:  # the cluster launches it once the group is whole
                sup.autostart = False
                self.cluster.attach(sup)
            self._vllm_task = asyncio.create_task(sup.run(), name="vllm")
            log.info("%s for model %s at %s", "supervising vLLM" if new.manage else "observing the engine",
                     new.name, new.base_url)
            return
        if self.cluster is not None and self.cluster.supervisor is None and self.cluster.head:
            self.cluster.attach(sup)
        if await sup.apply_settings(new):
            log.info("the profile's [vllm] settings changed: vLLM relaunched")


__all__ = ["Keeper", "ProfileView", "file_signature", "read_profile", "read_tools"]
