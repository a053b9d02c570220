"""The socket's answers as pydantic models: one per route body, plus the error bodies.

Every handler builds one of these and answers ``render(model)``, so what a client reads is what the model
says, and ``GET /v1/openapi.json`` is generated from the same classes (``conduit.daemon.agent.openapi``).

Keys a body may leave out are fields with a default; ``render`` writes only the keys a model was given
(``exclude_unset``), so e.g. ``/v1/gpus`` has no ``window_s`` before the first sample and ``/v1/tools`` passes
the sync state file through as written. Nulls that were given stay nulls. Bodies that carry another
program's free-form JSON (the vLLM slot's snapshot, the sync daemon's state file) allow extra keys; every
other body forbids them, so a renamed key fails a test instead of drifting from the schema.

Body shapes, outermost first (``?`` marks a key that may be absent)::

    Healthz        {ok, state, pid, version, api, socket, started_at, uptime_s}
    Status         {agent: AgentInfo, channels: {name: ChannelState}, note, gpus: Gpus, host, vllm, tools}
    Channels       {channels: {name: ChannelState}, note}
    ChannelAnswer  {name, healthy, verdict, protocols: {protocol: ProtocolHealth}}
    ProbeAnswer    {name, pending, healthy, verdict, protocols}
    Gpus           {gpus: [GpuInfo], reason, sampled_at, window_s?}
    HostSample     {total_bytes, available_bytes, ...} or HostNote {note}
    ToolsBody      {tools: {tool: ...}, note?, ...the sync state file's other keys}
    VllmBody       {state, ...the slot's snapshot}; VllmPending adds {pending: true} first
    ErrorBody      {error, message, hint}; UnknownChannel adds known?; VllmError adds state and the snapshot
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, RootModel

from conduit.daemon.agent.prober import Verdict
from conduit.daemon.agent.state import AgentState


class Body(BaseModel):
    """Base of every answer: unknown keys refused; NaN/Infinity written as JSON's usual extensions, as
    ``json.dumps`` does (a Prometheus gauge may be NaN)."""

    model_config = ConfigDict(extra="forbid", ser_json_inf_nan="constants")


class OpenBody(Body):
    """A body that passes another program's free-form JSON through: extra keys are kept, in order."""

    model_config = ConfigDict(extra="allow")


def render_dict(model: BaseModel) -> dict[str, Any]:
    """``model`` as a JSON-able dict of the keys it was given; values JSON cannot hold (a slot's ``Path``)
    become ``str``."""
    return model.model_dump(mode="json", exclude_unset=True, fallback=str)


def render(model: BaseModel) -> bytes:
    """The bytes of an answer: the keys ``model`` was given, as compact UTF-8 JSON (pydantic-core's
    serializer: about a third of the cost of ``json.dumps`` over ``render_dict``; the same JSON values).
    Values JSON cannot hold (a slot's ``Path``) become ``str``; NaN and Infinity are written as
    ``json.dumps`` writes them."""
    return model.model_dump_json(exclude_unset=True, fallback=str).encode()


# --------------------------------------------------------------------------------------------- agent


class AgentInfo(Body):
    """The agent process (``/v1/status`` ``agent``)."""

    state: AgentState
    pid: int
    version: str = Field(description="conduit's installed version")
    api: str = Field(description="the API version of the paths, 'v1'")
    socket: str = Field(description="the socket path this agent listens on")
    started_at: float = Field(description="Unix time the agent started, seconds")
    uptime_s: float = Field(description="seconds since start (monotonic clock)")


class _Ok(Body):
    ok: bool = Field(description="true while the agent is starting or running")


class Healthz(AgentInfo, _Ok):
    """``GET /v1/healthz``: liveness, ``ok`` first, then the ``AgentInfo`` keys."""


# --------------------------------------------------------------------------------------------- channels


class LatencyMs(Body):
    """Probe latencies of one channel x protocol, milliseconds, over the last probes that got an answer."""

    last: float | None
    p50: float | None
    p95: float | None
    samples: int


class ProtocolHealth(Body):
    """One channel x protocol (``conduit.daemon.agent.prober.ChannelHealth.to_json``)."""

    protocol: str = Field(description="openai or anthropic")
    url: str | None = Field(description="the URL probed; null for a channel the profile could not resolve")
    auth: str | None
    key: str | None = Field(description="the key's fingerprint (sk-...c3f9), never the key")
    verdict: Verdict
    healthy: bool
    status: int | None = Field(description="HTTP status of the last probe; null when no answer came")
    message: str
    hint: str | None
    phase: str | None = Field(description="connect or read, for timeouts")
    working_base: str | None = Field(description="for verdict path: the neighbouring base URL that answered")
    latency_ms: LatencyMs
    consecutive_failures: int
    last_success_at: float | None
    last_probe_at: float | None
    probes: int


class ChannelState(Body):
    """One channel: healthy when every protocol's last probe was ok; ``verdict`` is the first non-ok one."""

    healthy: bool
    verdict: Verdict
    protocols: dict[str, ProtocolHealth]


class Channels(Body):
    """``GET /v1/channels``."""

    channels: dict[str, ChannelState]
    note: str | None = Field(description="why there are no channels (no profile, an invalid profile)")


class _Named(Body):
    name: str


class _NamedPending(Body):
    name: str
    pending: bool = Field(description="the probe still runs; the state is the one before it")


class ChannelAnswer(ChannelState, _Named):
    """``GET /v1/channels/{name}``: ``name`` first, then the ``ChannelState`` keys."""


class ProbeAnswer(ChannelState, _NamedPending):
    """``POST /v1/channels/{name}/probe``: 200 with the fresh state, or 202 with ``pending: true``."""


# --------------------------------------------------------------------------------------------- GPUs, host


class GpuProcessInfo(Body):
    """A compute process on a GPU (``nvidia-smi --query-compute-apps``)."""

    pid: int
    used_bytes: int | None
    vllm: bool = Field(description="the pid belongs to the vLLM the agent supervises")


class MigInfo(Body):
    """A MIG instance of a GPU (``conduit.daemon.agent.gpu.MigSnapshot``)."""

    index: int
    uuid: str | None
    total_bytes: int | None
    used_bytes: int | None
    free_bytes: int | None
    processes: list[GpuProcessInfo]


class GpuWindow(Body):
    """Extremes of one GPU over the agent's window (``conduit.daemon.agent.gpu.GpuHistory.window``)."""

    min_free_bytes: int | None
    peak_used_bytes: int | None
    samples: int
    window_s: float = Field(description="the span the samples actually cover, seconds")


class GpuInfo(Body):
    """One GPU (``conduit.daemon.agent.gpu.GpuSnapshot`` plus its ``window``); each figure's
    ``nvidia-smi --query-gpu=`` twin is in that class's docstring."""

    index: int
    name: str | None
    uuid: str | None
    total_bytes: int | None
    used_bytes: int | None
    free_bytes: int | None
    reserved_bytes: int | None
    utilization_gpu_pct: int | None
    utilization_memory_pct: int | None
    mig_enabled: bool | None
    mig: list[MigInfo]
    processes: list[GpuProcessInfo]
    errors: dict[str, str] = Field(description="field -> NVML's reason, for every field that is null")
    window: GpuWindow | None
    compute_capability: int | None = Field(default=None, description="CUDA compute capability, major x 10 + minor")


class Gpus(Body):
    """``GET /v1/gpus`` (``conduit.daemon.agent.gpu.report_json``)."""

    gpus: list[GpuInfo]
    reason: str | None = Field(description="why gpus is empty (no NVIDIA GPU, not sampled yet)")
    sampled_at: float | None = Field(description="Unix time of the sample, seconds; null before the first")
    window_s: float | None = Field(default=None, description="the window's span, seconds; absent before a sample")


class HostSample(Body):
    """Host memory and load (``conduit.daemon.agent.gpu.HostSnapshot``, ``free -b``'s columns)."""

    total_bytes: int
    available_bytes: int
    used_bytes: int
    percent: float
    swap_total_bytes: int
    swap_used_bytes: int
    cpu_count: int | None
    load_avg_1m: float | None
    sampled_at: float


class HostNote(Body):
    """The host before its first sample."""

    note: str


class Host(RootModel[HostSample | HostNote]):
    """``GET /v1/host``: a sample, or ``{"note": "not sampled yet"}``."""


# --------------------------------------------------------------------------------------------- tools, vLLM


class ToolsBody(OpenBody):
    """``GET /v1/tools``: the sync daemon's state file (``sync.json``) as written, or a note why there is none."""

    tools: dict[str, Any]
    note: str | None = None


class VllmFailure(OpenBody):
    """Why vLLM last failed (the supervisor's ``last_failure``)."""

    kind: str
    reason: str
    fix: str | None
    exit_code: int | None
    log_tail: str
    at: float


class VllmBody(OpenBody):
    """``GET /v1/vllm``: the vLLM slot's ``snapshot()``, or ``{"state": "not_configured"}``, or
    ``{"state": "failed", "last_failure"}`` when the profile's ``[vllm]`` cannot be used (its key source
    fails), or ``{"state": "error", "message"}`` when the slot's snapshot failed. Apart from ``state`` every
    key is optional: the fields below are those of ``conduit.daemon.vllm.supervisor.Supervisor.snapshot``,
    in its order; a slot of another kind may add its own."""

    state: str = Field(description="not_configured, stopped, starting, ready, unhealthy, restarting, failed, "
                                   "stopping, or error")
    since: float | None = Field(default=None, description="Unix time of the last state change, seconds")
    pid: int | None = None
    pgid: int | None = None
    adopted: bool = Field(default=False, description="the server was launched by an earlier agent")
    restarts: int = 0
    last_failure: VllmFailure | None = None
    metrics: dict[str, Any] | None = Field(default=None, description="vLLM's /metrics digested "
                                           "(conduit.daemon.vllm.metrics.MetricsTracker.update)")
    served_model_name: str | None = None
    base_url: str | None = Field(default=None, description="the server's root, without /v1")
    warnings: list[str] = Field(default_factory=list)
    version: str | None = None
    distribution: str | None = None
    argv: list[str] | None = Field(default=None, description="the launch command, without the API key")
    log_path: str | None = None
    kv_cache: dict[str, Any] | None = Field(default=None, description="vLLM's 'KV cache size' log line")
    history: list[list[Any]] = Field(default_factory=list, description="[[state, unix_s], ...], the last 64")
    managed: bool | None = Field(default=None, description="false: an engine conduit observes ([vllm] manage = "
                                 "false, conduit.daemon.vllm.observer.Observer), never starts or stops")
    engine: str | None = Field(default=None, description="an observed engine's kind: vllm or ollama")
    ollama: dict[str, Any] | None = Field(default=None, description="an observed Ollama: version, loaded models "
                                          "(/api/ps), the served model's context window")
    message: str | None = None


class _Pending(Body):
    pending: bool


class VllmPending(VllmBody, _Pending):
    """``POST /v1/vllm/{action}`` after 30 s: 202, ``pending: true`` and the current snapshot."""

    model_config = ConfigDict(extra="allow")


# --------------------------------------------------------------------------------------------- status


class Routing(Body):
    """Where tools that use the primary channel are routed (``conduit.daemon.config.routing``)."""

    active: str = Field(description="primary or fallback")
    since: float | None = Field(description="Unix time of the last switch, seconds; null before any")
    why: str = Field(description="why, in words")


class ClusterNode(Body):
    """One Ray node of ``[vllm.cluster]`` (``conduit.daemon.vllm.cluster.Node``)."""

    node_id: str
    address: str
    head: bool
    state: str = Field(description="alive or dead")
    alive: bool
    cpus: float
    gpus: float
    memory_bytes: float = Field(description="Ray's `memory` resource, bytes")
    labels: dict[str, str] = Field(description="node labels: conduit-vllm / conduit-ray are its versions")
    death: str = Field(description="why it died, as Ray says; empty while alive")


class Cluster(OpenBody):
    """``[vllm.cluster]`` on this node (``conduit.daemon.agent.cluster.ClusterKeeper.snapshot``; ``mp``:
    ``conduit.daemon.agent.mpview.mp_cluster``, with ``node_rank`` and ``process``, this node's own vLLM)."""

    backend: str
    role: str = Field(description="head or worker")
    head_address: str
    nodes_expected: int
    state: str = Field(description="head: forming, incomplete, whole or degraded; worker: member; mp follower: "
                       "member, head unreachable, or its vLLM's state")
    reason: str | None = Field(description="why it is not whole (or what is there when it is)")
    fix: str | None
    kind: str | None
    launches: int = Field(description="vLLM launches the head asked for because the group became whole")
    nodes: list[ClusterNode]


class Status(Body):
    """``GET /v1/status``: everything in one object."""

    agent: AgentInfo
    channels: dict[str, ChannelState]
    note: str | None
    gpus: Gpus
    host: HostSample | HostNote
    vllm: VllmBody
    tools: ToolsBody
    routing: Routing | None = Field(default=None, description="the fallback decision; null without [fallback]")
    cluster: Cluster | None = Field(default=None, description="[vllm.cluster]: the nodes; null without it")
    engines: dict[str, VllmBody] | None = Field(default=None, description="[engines.NAME]: each observed engine "
                                                "(as /v1/vllm shows one); null without [engines]")


class OpenApiDocument(Body):
    """``GET /v1/openapi.json``: the OpenAPI 3.1 description of these routes."""

    openapi: str
    info: dict[str, Any]
    servers: list[dict[str, str]]
    paths: dict[str, Any]
    components: dict[str, Any]


# --------------------------------------------------------------------------------------------- errors


class ErrorBody(Body):
    """Every error answer: a stable ``error`` code, one line for people, and what to do."""

    error: str = Field(description="forbidden, not_found, method_not_allowed, bad_request, unknown_channel, ...")
    message: str
    hint: str | None


class UnknownChannel(ErrorBody):
    """404 ``unknown_channel``: ``known`` lists the channels there are (absent when the channel went away
    while it was probed)."""

    known: list[str] | None = None


class VllmError(ErrorBody):
    """409 ``not_configured`` or ``vllm_refused``: the error keys, then the vLLM slot's snapshot keys."""

    model_config = ConfigDict(extra="allow")

    state: str


__all__ = ["AgentInfo", "Body", "ChannelAnswer", "ChannelState", "Channels", "ErrorBody", "GpuInfo", "Gpus",
           "Healthz", "Host", "HostNote", "HostSample", "OpenApiDocument", "ProbeAnswer", "ProtocolHealth",
           "Routing", "Status", "ToolsBody", "UnknownChannel", "VllmBody", "VllmError", "VllmFailure", "VllmPending",
           "render", "render_dict"]
