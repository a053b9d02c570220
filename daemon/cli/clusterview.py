"""The ``[vllm.cluster]`` part of ``conduit status``: the group's state and one row per Ray node."""

from __future__ import annotations

from typing import Any


def cluster_lines(cluster: dict[str, Any]) -> tuple[str, Any]:
    """``(headline, rich Table)`` from ``/v1/status``'s ``cluster`` (``ClusterKeeper.snapshot``).

    The headline: backend, role, state, nodes alive of expected (``mp``: this node's rank and its own vLLM
    process, ``conduit.daemon.agent.mpview``), the reason and fix when not whole. The table:
    node (address and the first 8 hex digits of its id), head or worker, state, GPUs, CPUs, vLLM and Ray versions
    (its ``conduit-vllm`` / ``conduit-ray`` labels), and why it died.
    """
    from rich.markup import escape as esc
    from rich.table import Table

    nodes = [n for n in cluster.get("nodes") or [] if isinstance(n, dict)]
    alive = sum(1 for n in nodes if n.get("alive"))
    head = (f"cluster ({cluster.get('backend')}, {cluster.get('role')} of {cluster.get('head_address')}): "
            f"{cluster.get('state')}, {alive} of {cluster.get('nodes_expected')} nodes alive")
    if cluster.get("backend") == "mp":  # no node listing: each node's agent supervises its own vLLM
        head = (f"cluster (mp, {cluster.get('role')} rank {cluster.get('node_rank')} of {cluster.get('nodes_expected')}"
                f" nodes, head {cluster.get('head_address')}): {cluster.get('state')}")
    if cluster.get("reason"):
        head += f" -- {cluster['reason']}"
    if cluster.get("fix"):
        head += f" (fix: {cluster['fix']})"
    proc = cluster.get("process") or {}
    if proc:
        head += (f"; this node's vLLM{' (headless)' if proc.get('headless') else ''}: {proc.get('state')}"
                 + (f", restarts {proc['restarts']}" if proc.get("restarts") else "") + f", log {proc.get('log_path')}")
    ray = cluster.get("ray") or {}
    if ray:
        head += f"; this node's Ray: {ray.get('state')}" + (f", restarts {ray['restarts']}" if ray.get("restarts") else "")
    t = Table("node", "role", "state", "GPUs", "CPUs", "vLLM", "Ray", "why dead", title="cluster nodes",
              title_justify="left")
    for n in nodes:
        labels = n.get("labels") or {}
        colour = "green" if n.get("alive") else "red"
        t.add_row(esc(f"{n.get('address')} ({str(n.get('node_id'))[:8]})"), "head" if n.get("head") else "worker",
                  f"[{colour}]{esc(str(n.get('state')))}[/]", f"{n.get('gpus', 0):g}", f"{n.get('cpus', 0):g}",
                  esc(str(labels.get("conduit-vllm", "?"))), esc(str(labels.get("conduit-ray", "?"))),
                  esc(str(n.get("death") or "")))
    return head, t


def print_cluster(console: Any, cluster: Any) -> None:
    """Print the cluster part of ``conduit status`` on ``console`` (nothing when ``cluster`` is not an object)."""
    if not isinstance(cluster, dict):
        return
    headline, table = cluster_lines(cluster)
    console.print(headline, markup=False, soft_wrap=True, highlight=False)
    if table.row_count:
        console.print(table)


__all__ = ["cluster_lines", "print_cluster"]
