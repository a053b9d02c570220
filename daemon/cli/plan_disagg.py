"""``conduit plan --disaggregated``'s output: the prefill and the decode instance's ledgers (each printed as
``conduit plan`` prints one) and the KV connector's extra memory (``conduit.daemon.plan.disagg``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from rich.console import Console
from rich.table import Table

from conduit.units import format_bytes


def render_disaggregated(d: Mapping[str, Any], console: Console,
                         render_one: Callable[[Mapping[str, Any], Console], None]) -> None:
    """Print ``plan.disagg.plan_disaggregated``'s result: the GPUs, each instance's ledger (``render_one``,
    ``cli.plan.render``), the connector table and the notes."""
    have = "unknown" if d["gpus_available"] is None else str(d["gpus_available"])
    console.print(f"[bold]prefill/decode disaggregation[/bold]: {d['gpus_needed']} GPUs needed "
                  f"({d['gpus_per_instance']} per instance), {have} there; "
                  + ("each instance on GPUs of its own" if d["mode"] == "separate"
                     else "both instances share the same GPUs, each with half"), highlight=False)
    for inst in d["instances"]:
        console.print(f"\n[bold]{inst['role']} instance[/bold] (kv_role {inst['kv_role']})", highlight=False)
        render_one({"ledger": inst["ledger"]}, console)
    c = d["connector"]
    t = Table(title=f"KV connector: {c['connector']}, extra memory per GPU worker")
    for col in ("where", "bytes", "how"):
        t.add_column(col)
    t.add_row("device", format_bytes(c["device_bytes"]), "the KV cache is registered with NIXL in place")
    t.add_row("host", format_bytes(c["host_bytes"]),
              f"kv_buffer_device {c['kv_buffer_device']}; with \"cpu\" a host copy of the KV cache: "
              f"{format_bytes(c['host_bytes_with_cpu_buffer'])}")
    console.print(t)
    console.print(f"  source: {c['source']}", highlight=False)
    for line in (*c["undocumented"], *c["not_planned"], *d["notes"]):
        console.print(f"  note: {line}", highlight=False)
