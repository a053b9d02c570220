"""The failures of vLLM across nodes ([vllm.cluster]), recognised in what vLLM, Ray and torch print.

Like ``causes``: each rule reads the whole log tail and returns a ``Diagnosis`` (reason with what the log gives,
fix naming the key or command) or None. Sources, with the wording matched:

- vLLM 0.32 ``vllm/v1/executor/ray_utils.py``: ``Cannot provide a placement group ... within N seconds``
  (the Ray cluster lacks the GPUs TP x PP needs); ``current platform cpu does not support ray.`` (a platform
  with no Ray device key: vLLM's CPU build; CUDA, ROCm and XPU have ``GPU``).
- Ray 2.60 ``ray/autoscaler/v2/event_logger.py``: ``No available node types can fulfill resource requests``;
  Ray's scheduler warning ``The following resource request cannot be scheduled right now``.
- Ray 2.60 ``ray/_private/utils.py`` ``check_version_info``: ``Version mismatch: The cluster was started with:
  Ray: X Python: Y ... This process on NODE was started with: Ray: X' ...``.
- torch ``c10d``: NCCL's watchdog ``Watchdog caught collective operation timeout: WorkNCCL(...) ran for N
  milliseconds before timing out``; Gloo's ``Timed out waiting Nms for recv operation``; the TCPStore's
  ``client socket has timed out after Nms while trying to connect to (HOST, PORT)``.
"""

from __future__ import annotations

import re

from conduit.daemon.vllm.causes import Diagnosis

_PG = re.compile(r"Cannot provide a placement group (?:requiring (\d+) GPUs )?.*?within (\d+) seconds", re.S)
_FULFIL = re.compile(r"No available node types can fulfill resource requests?\s*(\{[^}]*\})?|"
                     r"resource request cannot be scheduled right now:?\s*(\{[^}]*\})?")
_MISMATCH = re.compile(r"Version mismatch: The cluster was started with:\s*Ray: (\S+)\s*Python: (\S+)\s*"
                       r"This process on (.+?) was started with:\s*Ray: (\S+)\s*Python: (\S+)")
_NO_RAY = re.compile(r"current platform (\w+) does not support ray")
_NCCL = re.compile(r"Watchdog caught collective operation timeout: WorkNCCL\((.*?)\) ran for (\d+) milliseconds")
_GLOO = re.compile(r"(?:gloo|Gloo)[^\n]*Timed out waiting (\d+)ms|Timed out waiting (\d+)ms for (?:recv|send) operation")
_STORE = re.compile(r"client socket has timed out after (\d+)ms while trying to connect to \(([^,]+), (\d+)\)")


def placement(text: str) -> Diagnosis | None:
    """vLLM's Ray executor could not reserve its GPUs: the cluster has fewer than TP x PP."""
    m = _PG.search(text)
    if not m:
        return None
    need = f"{m.group(1)} GPUs" if m.group(1) else "its placement group"
    return Diagnosis("ray_placement", f"vLLM could not reserve {need} on the Ray cluster within {m.group(2)} s",
                     "check `ray status` on the head: every node joined with its GPUs? Otherwise lower "
                     "[vllm].tensor_parallel_size x pipeline_parallel_size to the GPUs the cluster has")


def unschedulable(text: str) -> Diagnosis | None:
    """Ray says no node can fulfil a resource request (a bundle bigger than any one node)."""
    m = _FULFIL.search(text)
    if not m:
        return None
    req = m.group(1) or m.group(2) or ""
    return Diagnosis("ray_unschedulable", f"no Ray node can fulfil the resource request {req}".rstrip(),
                     "one bundle must fit one node: keep tensor_parallel_size <= GPUs per node and spread across "
                     "nodes with pipeline_parallel_size; or join a node with those resources ([vllm.cluster].nodes)")


def version_mismatch(text: str) -> Diagnosis | None:
    """A node (or vLLM's driver) runs another Ray or Python than the cluster was started with."""
    m = _MISMATCH.search(text)
    if not m:
        return None
    ray0, py0, where, ray1, py1 = m.groups()
    return Diagnosis("ray_version_mismatch",
                     f"Ray version mismatch: cluster Ray {ray0} / Python {py0}, {where.strip()} Ray {ray1} / "
                     f"Python {py1}",
                     f"install ray=={ray0} on Python {py0} in [vllm].python on every node (the same venv "
                     "everywhere), then restart the agents")


def no_ray_platform(text: str) -> Diagnosis | None:
    """vLLM's platform has no Ray device (the CPU build): its Ray executor refuses."""
    m = _NO_RAY.search(text)
    if not m:
        return None
    return Diagnosis("ray_platform", f"vLLM's {m.group(1)} platform does not support the Ray executor",
                     "the Ray executor needs GPUs (CUDA, ROCm, XPU); on CPU nodes remove [vllm.cluster] or use "
                     "backend = \"mp\"")


def collective_timeout(text: str) -> Diagnosis | None:
    """NCCL/Gloo collectives or the TCPStore rendezvous timed out: the nodes cannot reach each other."""
    m = _NCCL.search(text)
    if m:
        return Diagnosis("nccl_timeout", f"an NCCL collective timed out after {int(m.group(2)) // 1000} s "
                                         f"({m.group(1)[:120]})",
                         "the GPUs cannot talk across nodes: set NCCL_SOCKET_IFNAME (and GLOO_SOCKET_IFNAME) in "
                         "[vllm].extra_env to the interface the nodes share, open the ports between them, and "
                         "run with NCCL_DEBUG=INFO to see which link fails")
    m = _GLOO.search(text)
    if m:
        ms = int(m.group(1) or m.group(2))
        return Diagnosis("gloo_timeout", f"a Gloo operation timed out after {ms // 1000} s",
                         "set GLOO_SOCKET_IFNAME in [vllm].extra_env to the interface the nodes share, and open "
                         "the ports between them")
    m = _STORE.search(text)
    if m:
        return Diagnosis("rendezvous_timeout", f"could not reach {m.group(2)}:{m.group(3)} within "
                                               f"{int(m.group(1)) // 1000} s (torch's TCPStore)",
                         "check [vllm.cluster].head_address and that the port is open from every node")
    return None


#: In order: the specific before the general.
RULES = (version_mismatch, no_ray_platform, placement, unschedulable, collective_timeout)

__all__ = ["RULES", "collective_timeout", "no_ray_platform", "placement", "unschedulable", "version_mismatch"]
