"""The conduit agent: HTTP/1.1 + JSON on a Unix socket, answered from state kept by background loops.

One concurrency model: asyncio. The server is aiohttp's (no hand-written HTTP parsing);
the state it answers from is kept by ``conduit.daemon.agent.loops.Keeper``, so a slow gateway or a stuck
NVML call never delays an answer. The socket is claimed by ``conduit.daemon.agent.unixsocket.claim_socket``
(directory 0700, socket 0600, a lock against a second agent, a crashed agent's socket replaced), and every
request's peer uid is checked here with ``SO_PEERCRED``: another uid gets ``403`` and the connection is closed.

Nothing secret leaves: the agent holds one ``conduit.redact.Redactor`` taught every key the profile resolves
(channel keys and ``[vllm].api_key``, at each read of the profile); every answer's body passes through it (in
the middleware, whatever route made it), and so does every log line (``conduit.daemon.agent.logs``), and the
supervisor it makes masks vLLM's log tails with it too. A malformed request is logged as one line, and a storm of
them as one summary line per 10 s, never one traceback each.

Limits: request line and each header at most 8190 bytes, at most 128 headers (aiohttp's parser answers 400
and closes); a connection that has not sent a complete request within ``idle_timeout_s`` (default 10 s) is
closed, which bounds slow ("one byte a second") clients; the open-files limit is raised to its hard limit.

Routes (all JSON; every body is a model of ``conduit.daemon.agent.models``, listed in
``conduit.daemon.agent.openapi.ROUTES`` and described by ``GET /v1/openapi.json``):
    GET  /v1/healthz                 liveness: {"ok": true, "state": "running", "pid", "uptime_s", "version"}
    GET  /v1/status                  everything below in one object, and "routing" (the [fallback] decision)
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

The vLLM slot (``conduit.daemon.agent.state.VllmSlot``). When the profile has a ``[vllm]`` table and no slot
was passed in, the agent fills it with a ``conduit.daemon.vllm.supervisor.Supervisor`` and follows the
profile (``conduit.daemon.agent.loops``). On SIGTERM the agent leaves a running vLLM serving (the
supervisor's design: the next agent adopts it through the pid file); ``conduit vllm stop``
(``POST /v1/vllm/stop``) is the way to stop it. A slot passed in (``run_agent(config, vllm=...)``) is run as
given, without following the profile.

Errors raised: ``AgentAlreadyRunning`` (exit 1) and ``ConduitError`` for an unusable socket path.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiohttp import web
from pydantic import BaseModel, ValidationError

from conduit.daemon.agent.bodies import BodyCache, masked_response
from conduit.daemon.agent.gpu import GpuProbe, capability_by_index, default_probe, memory_by_index
from conduit.daemon.agent.guard import Handler, answer, error, guard_middleware
from conduit.daemon.agent.logs import MALFORMED_INTERVAL_S, MalformedRequests, setup_logging
from conduit.daemon.agent.loops import Keeper
from conduit.daemon.agent.models import (
    AgentInfo,
    ChannelAnswer,
    Channels,
    Cluster,
    Healthz,
    OpenApiDocument,
    ProbeAnswer,
    Routing,
    Status,
    UnknownChannel,
    VllmBody,
    VllmError,
    VllmFailure,
    VllmPending,
    render,
    render_dict,
)
from conduit.daemon.agent.openapi import ROUTES, openapi_document
from conduit.daemon.agent.prober import Prober
from conduit.daemon.agent.state import API_VERSION, AgentConfig, AgentState, VllmSlot, transition, version
from conduit.daemon.agent.unixsocket import (
    AgentAlreadyRunning,
    ClaimedSocket,
    claim_socket,
    peer_uid,
    raise_nofile_limit,
)
from conduit.daemon.config import paths
from conduit.daemon.config.redaction import REDACTOR
from conduit.daemon.vllm.tree import become_subreaper
from conduit.errors import ConduitError
from conduit.redact import Redactor
from conduit.sdnotify import sd_notify

if TYPE_CHECKING:
    from conduit.daemon.config.vllm import VllmSettings
    from conduit.daemon.vllm.supervisor import Supervisor

log = logging.getLogger("conduit.agent")

VLLM_ACTION_WAIT_S = 30.0


def _supervisor_factory(redactor: Redactor) -> Callable[[VllmSettings], Supervisor]:
    """Makes the agent's supervisor: the preflight reads GPUs through agent.gpu, log tails masked by ``redactor``."""

    def make(settings: VllmSettings) -> Supervisor:
        # Lazy for start-up speed: the supervisor (and what it imports) loads only for a profile with [vllm].
        if not settings.manage:  # an engine the person runs: observed, never launched (docs/engines.md)
            from conduit.daemon.vllm.observer import Observer

            return Observer(settings, redactor=redactor, on_windows=_keep_windows)  # type: ignore[return-value]
        from conduit.daemon.vllm.supervisor import Supervisor

        return Supervisor(settings, memory_probe=memory_by_index, capability_probe=capability_by_index,
                          redactor=redactor)

    return make


def _mp_cluster(slot: Any, source: tuple[str, Any]) -> Cluster | None:
    """``[vllm.cluster] backend = "mp"``: this node's part, from its supervisor (``conduit.daemon.agent.mpview``)."""
    from conduit.daemon.agent.mpview import mp_cluster

    found = mp_cluster(getattr(slot, "settings", None), source[1] if source[0] == "slot" else None)
    return Cluster.model_validate(found) if found is not None else None


def _engine_bodies(snap: dict[str, Any] | None) -> dict[str, VllmBody] | None:
    """``[engines.NAME]``'s snapshots as ``VllmBody``; one that does not fit says so in its own entry."""
    if snap is None:
        return None
    out = {}
    for name, body in snap.items():
        try:
            out[name] = VllmBody.model_validate(body)
        except ValidationError as exc:
            out[name] = VllmBody(state="error", message=f"engine snapshot does not fit the API: {exc.errors()[0]['msg']}")
    return out


def _keep_windows(windows: dict[str, int]) -> None:
    """An observed engine's context windows (an Ollama's ``/api/ps``) into the ``local`` channel's catalog,
    where the tools' settings read them (``conduit.daemon.catalog.models.write_windows``)."""
    from conduit.daemon.catalog.models import write_windows
    from conduit.daemon.config.profile import LOCAL_CHANNEL

    try:
        write_windows(LOCAL_CHANNEL, windows)
    except OSError as exc:
        log.warning("cannot keep the engine's context windows: %s", exc)


def _unknown_channel(name: str, known: list[str]) -> web.Response:
    return answer(UnknownChannel(error="unknown_channel", message=f"no channel named {name!r}",
                                 hint=f"known channels: {', '.join(known) or '(none)'}", known=known), 404)


class Agent:
    """The agent's lifecycle and its HTTP application, answering from a ``Keeper``'s state.

    Args:
        config: settings.
        redactor: masks every answer's body (and the log, in ``run_agent``); taught the profile's keys at
            each read. Default: a new one.
        gpu_probe: the NVML probe (default: real pynvml, or the fake named by ``$CONDUIT_FAKE_GPUS``).
        vllm: a vLLM slot run as given; None: a ``Supervisor`` made from the profile's ``[vllm]`` table when it
            has one, following the profile's changes (else ``{"state": "not_configured"}``).
        prober: a channel prober (default: built from the profile).
        vllm_factory: makes the supervisor from ``VllmSettings`` (default: ``Supervisor(settings)``); tests
            pass one with a private state directory.

    Example (what ``run_agent`` does)::

        agent = Agent(AgentConfig(socket_path=Path("/run/user/1000/conduit/agent.sock")))
        await agent.serve(claim_socket(agent.socket_path), stop_event)
    """

    def __init__(self, config: AgentConfig | None = None, gpu_probe: GpuProbe | None = None,
                 vllm: VllmSlot | None = None, prober: Prober | None = None,
                 vllm_factory: Callable[[VllmSettings], Supervisor] | None = None,
                 redactor: Redactor | None = None) -> None:
        self.config = config or AgentConfig()
        self.socket_path = Path(self.config.socket_path or paths.agent_socket_path())
        self.redactor = redactor if redactor is not None else Redactor()
        self.malformed: MalformedRequests | None = None  # the log's limiter, flushed while serving
        self.keeper = Keeper(self.config, gpu_probe or default_probe(), vllm, prober,
                             vllm_factory or _supervisor_factory(self.redactor), redactor=self.redactor)
        self.state = AgentState.STARTING
        self.started_at = time.time()
        self._t0 = time.monotonic()
        self._openapi: OpenApiDocument | None = None
        self._agent_head: tuple[AgentState, frozenset[str], bytes] | None = None  # see _agent_bytes
        self.bodies = BodyCache(self.redactor)  # each GET route's last body, made again when its sources change
        self.app = self._make_app()

    # ---- lifecycle

    def _set_state(self, new: AgentState) -> None:
        self.state = transition(self.state, new)

    def start_loops(self) -> None:
        """Start the background loops on the running event loop (state becomes RUNNING)."""
        self.keeper.start()
        self._set_state(AgentState.RUNNING)

    async def stop_loops(self) -> None:
        """Cancel the loops and close the prober's client (state becomes STOPPING). A vLLM the agent's own
        supervisor runs is left serving, for the next agent to adopt (``conduit vllm stop`` stops it)."""
        if self.state is not AgentState.STOPPING:
            self._set_state(AgentState.STOPPING)
        await self.keeper.stop()

    # ---- the bodies, from kept state (nothing here waits)

    def agent_info(self) -> AgentInfo:
        """The ``agent`` part of ``/v1/status``."""
        return AgentInfo(state=self.state, pid=os.getpid(), version=version(), api=API_VERSION,
                         socket=str(self.socket_path), started_at=self.started_at,
                         uptime_s=round(time.monotonic() - self._t0, 3))

    def healthz(self) -> Healthz:
        """``/v1/healthz``: ok while starting or running, and the ``agent_info`` keys."""
        ok = self.state in (AgentState.STARTING, AgentState.RUNNING)
        return Healthz(ok=ok, **dict(self.agent_info()))

    def channels(self) -> Channels:
        """``/v1/channels``: the prober's snapshot and the note on why there are none."""
        return self.keeper.channels()

    def _vllm_source(self) -> tuple[str, Any]:
        """What ``/v1/vllm`` shows, read once: ``("slot", snapshot dict)``, ``("none", vllm_problem)`` or
        ``("raised", exception)``; the key of the kept vLLM bodies (a slot's snapshot is compared with ``==``:
        a slot returns new containers, or replaces nested ones, rather than changing them in place)."""
        slot = self.keeper.vllm
        if slot is None:
            return ("none", self.keeper.vllm_problem)
        try:
            return ("slot", slot.snapshot())
        except Exception as exc:
            return ("raised", exc)

    def vllm_body(self, source: tuple[str, Any] | None = None) -> VllmBody:
        """The slot's snapshot; ``{"state": "failed", "last_failure": {...}}`` when the profile's ``[vllm]``
        cannot be used (its api_key source fails); else ``{"state": "not_configured"}``. A snapshot that fails,
        or that does not fit ``VllmBody``, answers ``{"state": "error", "message"}``. ``source``: a
        ``_vllm_source()`` already read (default: read it now)."""
        kind, value = source if source is not None else self._vllm_source()
        if kind == "none":
            if value is not None:
                return VllmBody(state="failed", last_failure=VllmFailure.model_validate(value))
            return VllmBody(state="not_configured")
        if kind == "raised":
            return VllmBody(state="error", message=f"vLLM slot snapshot failed: {type(value).__name__}: {value}")
        try:
            return VllmBody.model_validate(value)
        except ValidationError as exc:
            first = exc.errors()[0]
            return VllmBody(state="error", message=f"vLLM slot snapshot does not fit the API: {first['msg']} "
                                                   f"at {'.'.join(map(str, first['loc']))}")

    def status(self, vllm_source: tuple[str, Any] | None = None, engines: Any = None) -> Status:
        """``/v1/status``: ``{"agent", "channels", "note", "gpus", "host", "vllm", "tools", "routing", "cluster",
        "engines"}``. ``engines``: ``EngineSet.snapshot()`` already read (default: read it now)."""
        k = self.keeper
        ch = self.channels()
        routing = k.router.brief()
        return Status(agent=self.agent_info(), channels=ch.channels, note=ch.note, gpus=k.gpus, host=k.host_body,
                      vllm=self.vllm_body(vllm_source), tools=k.tools,
                      routing=Routing.model_validate(routing) if routing is not None else None,
                      cluster=Cluster.model_validate(k.cluster.snapshot()) if k.cluster is not None else
                      _mp_cluster(k.vllm, vllm_source if vllm_source is not None else self._vllm_source()),
                      engines=_engine_bodies(engines if engines is not None else k.engines.snapshot()))

    def status_bytes(self) -> tuple[bytes, frozenset[str]]:
        """``render(self.status())`` and the secret set it is masked with, from the kept body when no source
        changed: everything after ``agent`` is kept (``BodyCache`` route ``"status"``, keyed on the prober's
        generation, the channels note, the GPU and tools generations and the vLLM source); ``agent`` (its
        ``uptime_s`` moves) is rendered per request and spliced in front, the same bytes ``render`` writes."""
        k, vsrc, engines = self.keeper, self._vllm_source(), self.keeper.engines.snapshot()
        key = (k.prober.generation, k.channels_note, k.gpu_generation, k.tools_generation, vsrc, k.router.generation,
               k.cluster.generation if k.cluster is not None else None, engines)

        def build() -> bytes:
            whole = render(self.status(vsrc, engines))
            return whole[whole.index(b',"channels":'):]  # the agent object's end: no string holds a bare quote

        rest, secrets = self.bodies.get("status", key, build)
        return b'{"agent":' + self._agent_bytes(secrets) + rest, secrets

    def _agent_bytes(self, secrets: frozenset[str]) -> bytes:
        """``render(self.agent_info())`` masked with ``secrets``: everything up to ``uptime_s`` (its last key,
        the only one that moves between state changes) is kept per (state, secret set); the uptime is written
        as pydantic writes a float of three decimals (the shortest repr, as ``json.dumps``)."""
        uptime = round(time.monotonic() - self._t0, 3)
        kept = self._agent_head
        if kept is None or kept[0] is not self.state or kept[1] is not secrets:
            whole = render(self.agent_info())
            head = whole[:whole.rindex(b'"uptime_s":') + len(b'"uptime_s":')]
            kept = self._agent_head = (self.state, secrets, self.bodies.mask(head, secrets))
        return kept[2] + json.dumps(uptime).encode() + b"}"

    def openapi(self) -> OpenApiDocument:
        """The OpenAPI 3.1 document (``conduit.daemon.agent.openapi``), made once."""
        if self._openapi is None:
            self._openapi = OpenApiDocument.model_validate(openapi_document(version()))
        return self._openapi

    # ---- HTTP

    def _handlers(self) -> dict[tuple[str, str], Handler]:
        def get(view: Callable[[], BaseModel]) -> Handler:
            async def handler(request: web.Request) -> web.StreamResponse:
                return answer(view())

            return handler

        def kept(route: str, key: Callable[[], Any], view: Callable[[Any], BaseModel]) -> Handler:
            """A GET route answered from ``self.bodies``: ``view(key())`` rendered only when ``key()`` moved."""
            async def handler(request: web.Request) -> web.StreamResponse:
                k = key()
                return masked_response(*self.bodies.get(route, k, lambda: render(view(k))))

            return handler

        async def status(request: web.Request) -> web.StreamResponse:
            return masked_response(*self.status_bytes())

        k = self.keeper
        return {
            ("GET", "/v1/healthz"): get(self.healthz),
            ("GET", "/v1/status"): status,
            ("GET", "/v1/channels"): kept("channels", lambda: (k.prober.generation, k.channels_note),
                                          lambda _: self.channels()),
            ("GET", "/v1/channels/{name}"): self._h_channel,
            ("POST", "/v1/channels/{name}/probe"): self._h_probe,
            ("GET", "/v1/gpus"): kept("gpus", lambda: k.gpu_generation, lambda _: k.gpus),
            ("GET", "/v1/host"): kept("host", lambda: k.gpu_generation, lambda _: k.host_body),
            ("GET", "/v1/tools"): kept("tools", lambda: k.tools_generation, lambda _: k.tools),
            ("GET", "/v1/vllm"): kept("vllm", self._vllm_source, self.vllm_body),
            ("POST", "/v1/vllm/{action}"): self._h_vllm,
            ("GET", "/v1/openapi.json"): kept("openapi", lambda: None, lambda _: self.openapi()),
        }

    def _make_app(self) -> web.Application:
        """The aiohttp application: one handler per ``ROUTES`` entry (a route without one is a bug)."""
        handlers = self._handlers()
        missing = [f"{r.method} {r.path}" for r in ROUTES if (r.method, r.path) not in handlers]
        extra = set(handlers) - {(r.method, r.path) for r in ROUTES}
        if missing or extra:
            raise RuntimeError(f"routes and handlers differ: without a handler {missing}, undocumented {extra}")
        app = web.Application(middlewares=[guard_middleware(os.getuid(), self.redactor)], client_max_size=64 * 1024)
        for route in ROUTES:
            h = handlers[(route.method, route.path)]
            if route.method == "GET":
                app.router.add_get(route.path, h)  # and HEAD, as aiohttp's add_get does
            else:
                app.router.add_route(route.method, route.path, h)
        return app

    async def _h_channel(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        snap = self.keeper.prober.snapshot()
        if name not in snap:
            return _unknown_channel(name, list(snap))
        return answer(ChannelAnswer.model_validate({"name": name, **snap[name]}))

    async def _h_probe(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        prober = self.keeper.prober
        if name not in prober.health:
            return _unknown_channel(name, sorted(prober.health))
        try:
            wait = min(30.0, max(0.0, float(request.query.get("wait", "5"))))
        except ValueError:
            return error(400, "bad_request", "wait must be a number of seconds (0..30)")
        task = self.keeper.probe_now(name)
        pending = False
        if wait > 0:
            try:
                await asyncio.wait_for(asyncio.shield(task), wait)
            except TimeoutError:
                pending = True
        else:
            pending = not task.done()
        snapshot = prober.snapshot().get(name)
        if snapshot is None:  # the profile dropped the channel while its probe ran
            return answer(UnknownChannel(error="unknown_channel", hint=None,
                                         message=f"channel {name!r} was removed from the profile while probing"), 404)
        body = ProbeAnswer.model_validate({"name": name, "pending": pending, **snapshot})
        return answer(body, status=202 if pending else 200)

    def _vllm_error(self, code: str, message: str, hint: str | None) -> web.Response:
        snap = render_dict(self.vllm_body())
        extra = {k: v for k, v in snap.items() if k not in ("error", "message", "hint")}
        return answer(VllmError.model_validate({"error": code, "message": message, "hint": hint, **extra}), 409)

    async def _h_vllm(self, request: web.Request) -> web.StreamResponse:
        action = request.match_info["action"]
        if action not in ("start", "stop", "restart"):
            return error(404, "not_found", f"no vLLM action {action!r}", hint="use start, stop or restart")
        slot, problem = self.keeper.vllm, self.keeper.vllm_problem
        if slot is None:
            if problem is not None:
                return self._vllm_error("vllm_refused", problem["reason"], problem["fix"])
            return answer(VllmError(error="not_configured", message="no local vLLM is configured",
                                    hint="add a [vllm] table to the profile", state="not_configured"), 409)
        task = asyncio.ensure_future(getattr(slot, action)())
        try:
            await asyncio.wait_for(asyncio.shield(task), VLLM_ACTION_WAIT_S)
        except TimeoutError:
            pending = {"pending": True, **render_dict(self.vllm_body())}
            return answer(VllmPending.model_validate(pending), 202)
        except ConduitError as exc:
            return self._vllm_error("vllm_refused", exc.message, exc.hint)
        return answer(self.vllm_body())

    async def serve(self, claimed: ClaimedSocket, stop: asyncio.Event) -> None:
        """Serve on an already claimed socket until ``stop`` is set; then shut down cleanly."""
        runner = web.AppRunner(self.app, handle_signals=False, access_log=None,
                               keepalive_timeout=self.config.idle_timeout_s,
                               max_line_size=8190, max_field_size=8190, max_headers=128, shutdown_timeout=2.0)
        await runner.setup()
        # Read the profile before the first answer: a client that sees the agent up must see its channels.
        await self.keeper.reload_profile(force=True)
        site = web.SockSite(runner, claimed.sock, backlog=1024)
        await site.start()
        self.start_loops()
        log.info("conduit agent listening on %s (pid %d)", self.socket_path, os.getpid())
        sd_notify("READY=1")  # conduit-agent.service is Type=notify
        flusher = asyncio.create_task(self._flush_malformed(), name="malformed-log")
        try:
            await stop.wait()
        finally:
            sd_notify("STOPPING=1")
            flusher.cancel()
            if self.malformed is not None:
                self.malformed.flush(force=True)
            await self.stop_loops()
            await runner.cleanup()
            claimed.release()
            self._set_state(AgentState.STOPPED)

    async def _flush_malformed(self) -> None:
        """Write the malformed-request summary once per interval while a storm lasts."""
        while True:
            await asyncio.sleep(self.malformed.interval_s if self.malformed else MALFORMED_INTERVAL_S)
            if self.malformed is not None:
                self.malformed.flush()


def run_agent(config: AgentConfig | None = None, vllm: VllmSlot | None = None) -> int:
    """Run the agent in the foreground until SIGTERM/SIGINT. Returns the exit code (0).

    Raises:
        AgentAlreadyRunning, ConduitError: see ``claim_socket``.
    """
    config = config or AgentConfig()
    redactor = REDACTOR  # the process's one Redactor: key sources register every key they read in it too
    malformed = setup_logging(redactor, os.environ.get("CONDUIT_LOG_LEVEL", "INFO"))
    raise_nofile_limit()
    become_subreaper()  # what a vLLM launch leaves behind re-parents to the agent, not to init
    agent = Agent(config, vllm=vllm, redactor=redactor)
    agent.malformed = malformed
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


def openapi() -> dict[str, Any]:
    """The OpenAPI 3.1 description served at ``/v1/openapi.json`` (``conduit.daemon.agent.openapi``)."""
    return openapi_document(version())


__all__ = ["Agent", "AgentAlreadyRunning", "AgentConfig", "AgentState", "ClaimedSocket", "VllmSlot", "answer",
           "claim_socket", "error", "openapi", "peer_uid", "run_agent"]
