"""What ``conduit doctor --live --deep`` prints for the tool-call checks (``conduit.daemon.agent.toolcall``).

One row per (channel, model): the protocol used, the verdict, who uses the pair and the server's answer. Each
failure, with its fix (the flags and ``[vllm]`` keys for a supervised vLLM), is among the live problems printed
after the table. The data was redacted by the caller (keys as fingerprints).
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape as esc
from rich.table import Table


def print_tool_calls(out: Console, tool_calls: dict[str, Any]) -> None:
    """Print ``tool_calls`` (``{"checks": [...], "problems", "ok"}``) as a table."""
    out.print("[bold]tool calls[/] (one tiny request per channel and model)")
    table = Table("channel", "model", "protocol", "verdict", "used by", "details")
    for c in tool_calls.get("checks") or ():
        verdict = c.get("verdict")
        table.add_row(esc(str(c.get("channel"))), esc(str(c.get("model"))), str(c.get("protocol")),
                      f"[{'green' if verdict == 'tool_call' else 'red'}]{verdict}[/]",
                      esc(", ".join(c.get("used_by") or ())), esc(str(c.get("message") or "")))
    out.print(table)
