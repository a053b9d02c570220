"""The agent's side of ``[vllm.cluster]`` with ``backend = "ray"``: this node's Ray process, and on the head the
one vLLM of the group, launched when the group is whole and stopped when it is not.

A worker's agent supervises ``ray start --address=HEAD --block`` and serves no vLLM. The head's agent
supervises ``ray start --head --block``, reads the nodes every ``poll_interval_s`` (``cluster.read_nodes``),
judges them (``gate.judge``: node count, GPUs per node, same vLLM and Ray versions) and lets ``gate.Gate``
decide: ``launch`` -> the supervisor (made with ``autostart = False``) starts vLLM with
``--distributed-executor-backend ray``; ``stop`` (a node lost) -> it stops vLLM; whole again -> it starts it
again. Before a launch the head's preflight checks the model (``conduit.daemon.plan.model.inspect_model``) and,
with a GPU reading, the per-GPU memory by the ledger (``conduit.daemon.plan.ledger.plan``, the profile's TP/PP).
``snapshot()`` is the ``cluster`` object of ``/v1/status``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from pathlib import Path
from typing import Any

from conduit.daemon.config.vllm import VllmSettings
from conduit.daemon.vllm.cluster import RAY_LABEL, VLLM_LABEL, Node, ray_start_argv, read_nodes, read_versions
from conduit.daemon.vllm.gate import Gate, Verdict, judge
from conduit.daemon.vllm.raynode import RayProcess
from conduit.errors import ConduitError

log = logging.getLogger(__name__)


def preflight(s: VllmSettings, gpu_total_bytes: int | None) -> Verdict | None:
    """The head's checks before a launch: the model can be read, and (with ``gpu_total_bytes``, the smallest
    GPU's total memory) the ledger says it fits per GPU at the profile's TP/PP. None when all is well.

    Sources: ``conduit.daemon.plan.model.inspect_model`` (config.json and weights of the model directory or
    hub cache) and ``conduit.daemon.plan.ledger.plan`` (per-GPU weights and KV under TP x PP).
    """
    from conduit.daemon.plan.ledger import Verdict as Fit
    from conduit.daemon.plan.ledger import plan
    from conduit.daemon.plan.model import inspect_model
    from conduit.daemon.plan.settings import settings_from_vllm_section

    try:
        info = inspect_model(s.model, s.launch_env())
    except (ConduitError, OSError, ValueError) as exc:
        return Verdict(False, "model_missing", f"the model `{s.model}` cannot be read on the head: {exc}",
                       "put the model at [vllm].model on every node (same path), or fix the path")
    if not gpu_total_bytes:
        return None  # no GPU reading (a CPU node): the memory check needs one
    try:
        settings = settings_from_vllm_section(s.model_dump(mode="json", exclude={"api_key"}))
        led = plan(info, {**settings, "gpu_memory_bytes": gpu_total_bytes})
    except (ConduitError, ValueError) as exc:
        return Verdict(False, "plan_error", f"the memory ledger cannot plan these settings: {exc}",
                       "run `conduit plan` on the head and fix the [vllm] key it names")
    if led.verdict is Fit.DOES_NOT_FIT:
        fixes = "; ".join(f"{f.setting} = {f.value}" for f in led.fixes) or "a larger tensor_parallel_size"
        return Verdict(False, "gpu_memory_short", f"per GPU: {led.summary}", f"set {fixes} (`conduit plan`)")
    return None


class ClusterKeeper:
    """Runs this node's part of the cluster (see the module). Create and ``start()`` inside the agent's loop.

    Args:
        settings: the ``[vllm]`` settings, ``cluster`` set with ``backend = "ray"``.
        state_dir: where ``ray.log`` goes (the supervisor's ``<state>/vllm``).
        gpu_total_bytes: ``() -> the smallest local GPU's total bytes, or None`` for the ledger check.

    Attributes: ``supervisor`` (the head's vLLM supervisor, set by the keeper once made; None on workers),
    ``generation`` (bumped after each change of what ``snapshot`` shows).
    """

    def __init__(self, settings: VllmSettings, state_dir: Path, gpu_total_bytes: Any = None) -> None:
        if settings.cluster is None:
            raise ValueError("ClusterKeeper needs [vllm.cluster]")
        self.settings, self.c = settings, settings.cluster
        self.state_dir = state_dir
        self.gpu_total_bytes = gpu_total_bytes or (lambda: None)
        self.supervisor: Any = None
        self.ray: RayProcess | None = None
        self.gate = Gate(self.c.join_timeout_s, time.monotonic())
        self.nodes: list[Node] = []
        self.versions: dict[str, str | None] = {}
        self.problem: Verdict | None = None
        self.generation = 0
        self._pending: str | None = None
        self._last: object = None
        self._task: asyncio.Task[None] | None = None
        self._act_task: asyncio.Task[None] | None = None

    @property
    def head(self) -> bool:
        """This node is the head."""
        return self.c.role == "head"

    def start(self) -> None:
        """Start the Ray process and the node readings (idempotent)."""
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="cluster")

    def attach(self, supervisor: Any) -> None:
        """Hand the head's vLLM supervisor over; an action decided before it existed is applied now."""
        self.supervisor = supervisor
        if self._pending is not None:
            self._dispatch(self._pending)

    def _dispatch(self, action: str) -> None:
        """Hand ``action`` to the supervisor in a task kept in ``_act_task`` (one at a time; the newest action
        waits in ``_pending`` and is taken when the running one ends), so the readings go on meanwhile."""
        self._pending = action
        if self._act_task is None or self._act_task.done():
            self._act_task = asyncio.create_task(self._drain(), name="cluster-act")

    async def _drain(self) -> None:
        while self._pending is not None and self.supervisor is not None:
            action, self._pending = self._pending, None
            await self._act(action)

    async def _run(self) -> None:
        python = self.settings.interpreter()
        self.versions = await read_versions(python)
        if not self.versions.get("ray"):
            self.problem = Verdict(False, "ray_missing", f"Ray is not installed for {python}",
                                   "pip install ray (the head's version) into the environment of [vllm].python")
            self.generation += 1
            return
        labels = {k: str(v) for k, v in ((VLLM_LABEL, self.versions.get("vllm")),
                                          (RAY_LABEL, self.versions.get("ray"))) if v}
        self.ray = RayProcess(ray_start_argv(self.settings, labels), self.settings.launch_env(),
                              self.state_dir / "ray.log", self.c.restart_backoff_s, self.settings.stop_grace_s)
        self.ray.start()
        while True:
            try:
                await self._poll(python)
            except Exception:  # a bug must not end the cluster's supervision
                log.exception("reading the Ray cluster failed")
            await asyncio.sleep(self.c.poll_interval_s)

    async def _poll(self, python: str) -> None:
        try:
            _, nodes = await read_nodes(python, self.c.head_address)
            verdict = judge(self.c, nodes)
            self.nodes = nodes
        except RuntimeError as exc:
            verdict = judge(self.c, None, str(exc))
        if self.head and verdict.whole and self.gate.state != "whole":
            refused = await asyncio.to_thread(preflight, self.settings, self.gpu_total_bytes())
            verdict = refused if refused is not None else verdict
        self.problem = None if verdict.whole else verdict
        action = self.gate.step(verdict, time.monotonic()) if self.head else None
        self.gate.verdict = verdict  # a worker reports what it sees of the group, without acting on it
        if action is not None:
            log.info("cluster %s: %s -> vLLM %s", self.gate.state, verdict.reason, action)
            self._dispatch(action)
        seen = (self.gate.state, verdict, [n.to_dict() for n in self.nodes], self.ray.snapshot() if self.ray else None)
        if seen != self._last:
            self._last = seen
            self.generation += 1

    async def _act(self, action: str) -> None:
        sup = self.supervisor
        if sup is None:
            self._pending = action
            return
        for _ in range(60):  # the supervisor's loop may not run yet right after it was made
            try:
                await (sup.start() if action == "launch" else sup.stop())
                return
            except ConduitError:
                await asyncio.sleep(0.5)
        log.error("cluster: the vLLM supervisor did not take %r", action)

    async def aclose(self) -> list[str]:
        """Stop the readings, the head's vLLM, and the Ray process; returns what could not be killed."""
        for task in (self._task, self._act_task):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if self.supervisor is not None and self.head:
            with contextlib.suppress(ConduitError):
                await self.supervisor.stop()
        left = await self.ray.stop() if self.ray is not None else []
        self.generation += 1
        return left

    def snapshot(self) -> dict[str, Any]:
        """``/v1/status``'s ``cluster``: ``backend``, ``role``, ``head_address``, ``nodes_expected``, ``state``
        (head: ``forming``/``incomplete``/``whole``/``degraded``; worker: ``member``), ``since`` (epoch s),
        ``reason`` / ``fix`` / ``kind`` (why it is not whole; null when whole), ``launches``, ``nodes`` (each
        ``{node_id, address, head, state, cpus, gpus, memory_bytes, labels, death}``), ``versions`` (this
        node's ``{vllm, ray}``), ``ray`` (the Ray process: ``{state, pid, restarts, last_exit, log_path, argv}``)."""
        v, p = self.gate.verdict, self.problem
        return {
            "backend": self.c.backend, "role": self.c.role, "head_address": self.c.head_address,
            "nodes_expected": self.c.nodes, "state": self.gate.state if self.head else "member",
            "since": time.time() - (time.monotonic() - self.gate.since), "reason": p.reason if p else (v.reason if v else None),
            "fix": p.fix if p else None, "kind": p.kind if p else (v.kind if v else None),
            "launches": self.gate.launches, "nodes": [n.to_dict() for n in self.nodes],
            "versions": dict(self.versions), "ray": self.ray.snapshot() if self.ray else None,
        }


async def follow_cluster(current: ClusterKeeper | None, new: VllmSettings | None, supervisor: Any,
                         state_dir: Path, gpu_total_bytes: Any = None) -> ClusterKeeper | None:
    """Make the agent's cluster keeper match ``new.cluster`` (``backend = "ray"``): keep it when the table is
    unchanged, replace it (stopping the old Ray process) when it changed, close it when the table is gone or
    names ``mp`` (vLLM's own launcher needs no Ray). A kept keeper takes the rest of ``new`` (model, TP/PP: the
    next preflight checks those); a changed ``[vllm].python`` or ``extra_env`` (what Ray runs from) replaces it too.
    Hands ``supervisor`` (the head's, or None) to the keeper."""
    want = new.cluster if new is not None and new.cluster is not None and new.cluster.backend == "ray" else None
    if current is not None and (want is None or new is None or current.c != want
                                or _ray_runtime(current.settings) != _ray_runtime(new)):
        log.info("[vllm.cluster] or the Python Ray runs from changed: stopping this node's Ray process")
        left = await current.aclose()
        if left:
            log.warning("Ray processes left after stop: %s", "; ".join(left))
        current = None
    if want is None or new is None:
        return None
    if current is None:
        current = ClusterKeeper(new, state_dir, gpu_total_bytes)
        current.start()
        log.info("cluster: %s of %s nodes, head %s", want.role, want.nodes, want.head_address)
    else:
        current.settings = new
    if supervisor is not None and current.supervisor is None and current.head:
        current.attach(supervisor)
    return current


def _ray_runtime(s: VllmSettings) -> tuple[str, dict[str, str]]:
    """What this node's Ray process runs from: ``[vllm].python`` and ``[vllm].extra_env``."""
    return s.interpreter(), dict(s.extra_env)


def serves_api(new: VllmSettings | None) -> bool:
    """False for a Ray worker node: its Ray process lends the node to the head's vLLM; it launches none. True for
    an ``mp`` follower: it launches vLLM ``--headless`` (no API), whose supervisor counts it ready while it lives
    (``conduit.daemon.vllm.monitor.Monitor.run``)."""
    c = new.cluster if new is not None else None
    return not (c is not None and c.backend == "ray" and c.role == "worker")


__all__ = ["ClusterKeeper", "follow_cluster", "preflight", "serves_api"]
