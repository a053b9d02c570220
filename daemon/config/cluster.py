"""The profile's ``[vllm.cluster]`` table: one vLLM across several machines, with vLLM's and Ray's own launchers.

Every node's profile holds the same table except ``role`` (and ``node_rank`` for ``mp``)::

    [vllm.cluster]
    backend = "ray"                  # or "mp": vLLM's own multi-node launcher (--nnodes/--node-rank)
    role = "head"                    # "worker" on the other machines
    head_address = "10.0.0.1:6379"   # the head's reachable address: Ray's GCS port (ray) or the master port (mp)
    nodes = 2                        # nodes the group needs, the head included
    gpus_per_node = 8                # the head waits until every node reports this many GPUs (optional)

With ``backend = "ray"`` the agent of a worker supervises ``ray start --address=HEAD --block``; the head's agent
supervises ``ray start --head --port=PORT --block``, waits for ``nodes`` nodes, then launches vLLM with
``--distributed-executor-backend ray`` (``conduit.daemon.vllm.cluster``). With ``backend = "mp"`` each node
runs vLLM itself: ``--nnodes N --node-rank R --master-addr HOST --master-port PORT``, ``--headless`` on
followers (flags of ``vllm.engine.arg_utils.EngineArgs`` and ``vllm serve`` in vLLM 0.32).

Errors (through ``conduit.daemon.config.profile``): ProfileError naming ``[vllm.cluster].<key>`` and the fix.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from conduit.daemon.config.fields import MAX_SECONDS, Float, Int

#: Ray's default GCS port (``ray start --head`` without ``--port``).
RAY_DEFAULT_PORT = 6379


def split_address(text: str) -> tuple[str, int]:
    """``"host:port"`` (``"[v6]:port"`` too) -> ``(host, port)``.

    Raises:
        ValueError: no port, a port outside 1..65535, or an empty host (the message says the form wanted).
    """
    host, sep, port = text.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ValueError(f"`{text}` is not host:port; write e.g. head_address = \"10.0.0.1:{RAY_DEFAULT_PORT}\"")
    return host, int(port)


class ClusterSettings(BaseModel):
    """The ``[vllm.cluster]`` table. Unknown keys are refused.

    Attributes:
        backend: ``ray`` (a Ray cluster, vLLM's Ray executor on the head) or ``mp`` (vLLM's own launcher).
        role: ``head`` (serves the API) or ``worker`` (lends its GPUs).
        head_address: ``host:port`` of the head as the other nodes reach it; Ray's GCS port for ``ray``, the
            torch master port for ``mp``.
        nodes: nodes the group needs, the head included (>= 1); vLLM launches only when that many joined.
        gpus_per_node: GPUs each node must report before the launch (None: any).
        node_rank: this node's rank for ``mp`` (0 on the head, 1.. on workers); unused for ``ray``.
        num_cpus, num_gpus: passed to ``ray start --num-cpus/--num-gpus`` (None: Ray detects them).
        ray_args: further ``ray start`` flags (``--temp-dir``, ``--object-store-memory``, ports...).
        ray_command: the Ray CLI (None: ``<[vllm] python> -m ray.scripts.scripts``, the Ray of vLLM's Python).
        poll_interval_s: seconds between two readings of the cluster's nodes on the head.
        join_timeout_s: after this long without the full group the head reports it as incomplete (and waits on).
        restart_backoff_s: wait before the Ray process is started again after it exited, seconds.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    backend: Literal["ray", "mp"] = "ray"
    role: Literal["head", "worker"]
    head_address: str
    nodes: Int = Field(default=1, ge=1, le=4096)
    gpus_per_node: Int | None = Field(default=None, ge=0)
    node_rank: Int | None = Field(default=None, ge=0)
    num_cpus: Int | None = Field(default=None, ge=0)
    num_gpus: Int | None = Field(default=None, ge=0)
    ray_args: list[str] = Field(default_factory=list)
    ray_command: list[str] | None = None
    poll_interval_s: Float = Field(default=5.0, gt=0, le=MAX_SECONDS)
    join_timeout_s: Float = Field(default=600.0, gt=0, le=MAX_SECONDS)
    restart_backoff_s: Float = Field(default=5.0, gt=0, le=MAX_SECONDS)

    @field_validator("head_address")
    @classmethod
    def _address(cls, v: str) -> str:
        split_address(v)
        return v

    @model_validator(mode="after")
    def _roles(self) -> ClusterSettings:
        if self.ray_command is not None and not self.ray_command:
            raise ValueError("ray_command is an empty list; remove it to use the Ray of [vllm].python")
        if self.backend == "mp":
            if self.role == "head" and self.node_rank not in (None, 0):
                raise ValueError("the mp head is node_rank 0; remove node_rank or set it to 0")
            if self.role == "worker" and not self.node_rank:
                raise ValueError(f"an mp worker needs node_rank = 1..{max(self.nodes - 1, 1)} (unique per node)")
            if self.node_rank is not None and self.node_rank >= self.nodes:
                raise ValueError(f"node_rank {self.node_rank} is not below nodes = {self.nodes}; raise nodes")
        return self

    @property
    def host(self) -> str:
        """The head's host, from ``head_address``."""
        return split_address(self.head_address)[0]

    @property
    def port(self) -> int:
        """The head's port, from ``head_address``."""
        return split_address(self.head_address)[1]

    @property
    def rank(self) -> int:
        """This node's rank: ``node_rank``, else 0 (the head)."""
        return self.node_rank or 0


__all__ = ["RAY_DEFAULT_PORT", "ClusterSettings", "split_address"]
