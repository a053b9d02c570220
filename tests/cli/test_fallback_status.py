"""How `conduit status` and `conduit status --watch` show the agent's routing: the one line from
`/v1/status`'s `routing`, and nothing when it is null (no [fallback] in the profile)."""

from __future__ import annotations

import io
import time

from rich.console import Console

from conduit.daemon.cli.agent import render_status, routing_line
from conduit.daemon.cli.watch import View, render

SINCE = 1796141560.0
ROUTING = {"active": "fallback", "since": SINCE, "why": "the supervised vLLM is failed (for 20 s)"}
BASE = {"agent": {"state": "running", "pid": 1, "uptime_s": 5.0, "socket": "/s"}, "channels": {}, "note": None,
        "gpus": {"gpus": []}, "host": {"note": "x"}, "vllm": {"state": "failed"}, "tools": {"tools": {}}}


def test_routing_line() -> None:
    line = routing_line(ROUTING)
    assert line is not None
    assert "fallback" in line and time.strftime("%H:%M:%S", time.localtime(SINCE)) in line and "(for 20 s)" in line
    assert routing_line(None) is None
    assert "primary" in (routing_line({"active": "primary", "since": None, "why": "no switch yet"}) or "")


def test_status_prints_routing_only_when_there_is_one() -> None:
    out = io.StringIO()
    render_status({**BASE, "routing": ROUTING}, file=out)
    assert "routing: fallback since" in out.getvalue()
    out = io.StringIO()
    render_status({**BASE, "routing": None}, file=out)
    assert "routing" not in out.getvalue()


def _watch(status: dict[str, object]) -> str:
    console = Console(file=io.StringIO(), width=120, color_system=None)
    view = View()
    view.observe(status, SINCE)
    console.print(render(view, 120, SINCE))
    return str(console.file.getvalue())  # type: ignore[attr-defined]


def test_watch_shows_one_routing_line() -> None:
    out = _watch({**BASE, "routing": ROUTING})
    lines = [line for line in out.splitlines() if line.startswith("routing:")]
    assert len(lines) == 1 and "fallback" in lines[0], out
    assert time.strftime("%H:%M:%S", time.localtime(SINCE)) in lines[0]
    assert "routing" not in _watch({**BASE, "routing": None})
