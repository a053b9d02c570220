"""CLI: ``conduit agent``, ``conduit status`` and ``conduit wait``: parsing, dispatch and the status table.

The work is elsewhere: the agent in ``conduit.daemon.agent.server``, the waiting in
``conduit.daemon.agent.wait``, sizes and durations in ``conduit.units`` (a size needs a unit:
``--vram-free 20GiB``, or ``1500000000B`` for bytes).

Exit codes (docs/design.md, pg_isready style): 0 ready, 1 not ready (timeout), 2 agent unreachable,
3 bad arguments.

Import cost matters here: ``conduit status --json`` and ``conduit wait`` run in loops, so this module
imports only typer (already loaded by the CLI) and standard-library-only modules (``conduit.units``,
``conduit.daemon.agent.wait``, ``engineview``) at the top; the agent (aiohttp, psutil, pynvml) loads only in
``conduit agent``, httpx only when a client is made, rich only for the table.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import typer

from conduit.daemon.agent.wait import EXIT_READY, Conditions, wait_until
from conduit.daemon.cli.app import state
from conduit.daemon.cli.clusterview import print_cluster
from conduit.daemon.cli.engineview import engine_lines, ollama_lines
from conduit.daemon.cli.kvtierview import kv_tier_lines
from conduit.errors import BadArguments
from conduit.units import format_bytes, parse_duration, parse_size

commands = typer.Typer()  # this module's commands; the root app loads them lazily (cli.commands.COMMANDS)

# --------------------------------------------------------------------------------------------- table


def routing_line(routing: Any) -> str | None:
    """``routing: fallback since 14:02:11 (why)`` (rich markup) from ``/v1/status``'s ``routing``, or None without
    one (where the tools on the primary channel are routed now)."""
    from rich.markup import escape as esc

    if not isinstance(routing, dict):
        return None
    since = routing.get("since")
    when = time.strftime(" since %H:%M:%S", time.localtime(since)) if isinstance(since, (int, float)) else ""
    colour = "yellow" if routing.get("active") == "fallback" else "green"
    return f"routing: [{colour}]{esc(str(routing.get('active')))}[/]{when} ({esc(str(routing.get('why')))})"


def render_status(status: dict[str, Any], file: Any = None) -> None:
    """Print ``status`` (a ``/v1/status`` body) as rich tables: channels, GPUs (free/total bars), vLLM, tools."""
    from conduit.daemon.cli.console import make_console

    console = make_console(file=file, highlight=True)
    agent = status.get("agent", {})
    console.print(f"[bold]conduit agent[/] {agent.get('state')} (pid {agent.get('pid')}, "
                  f"up {agent.get('uptime_s', 0):.0f} s) on {_home_short(str(agent.get('socket')))}")
    if rline := routing_line(status.get("routing")):
        console.print(rline)

    t = channels_table(status.get("channels") or {})
    if t.row_count:
        console.print(t)
    else:
        console.print(f"channels: none ({status.get('note') or 'the profile has no channels'})", markup=False)

    gpus = status.get("gpus") or {}
    g = gpus_table(gpus, bars=console.width >= 100)  # the free-memory bar only where it fits beside the numbers
    if g.row_count:
        console.print(g)
    else:
        console.print(f"GPUs: none ({gpus.get('reason') or 'none reported'})", markup=False)

    host = status.get("host") or {}
    if "total_bytes" in host:
        console.print(f"host memory: {format_bytes(host['available_bytes'])} available of {format_bytes(host['total_bytes'])}")
    for line in vllm_lines(status.get("vllm") or {}):
        console.print(line, markup=False, soft_wrap=True, highlight=False)
    for name, body in (status.get("engines") or {}).items():  # [engines.NAME], side by side with [vllm]
        for line in engine_lines(name, body, vllm_lines):
            console.print(line, markup=False, soft_wrap=True, highlight=False)
    print_cluster(console, status.get("cluster"))  # [vllm.cluster], every node
    tools = status.get("tools") or {}
    table = tools_table(tools.get("tools") or {})
    if table.row_count:
        console.print(table)
    else:
        console.print(f"tools: none ({tools.get('note') or 'no sync has run yet'})", markup=False)


def gpus_table(gpus: dict[str, Any], *, bars: bool) -> Any:
    """The GPUs part of ``conduit status``: index, name, free / total (with a bar when ``bars``), utilization,
    the lowest free memory in the sampling window, and the processes (folded, never cut)."""
    from rich import box
    from rich.markup import escape as esc
    from rich.table import Table

    g = Table("GPU", "name", "free / total", "util", "min free", "processes", box=box.SIMPLE_HEAD, pad_edge=False,
              show_edge=False, padding=(0, 1, 0, 0))
    g.columns[5].overflow = "fold"
    for gpu in gpus.get("gpus", []):
        total, free = gpu.get("total_bytes"), gpu.get("free_bytes")
        win = gpu.get("window") or {}
        procs = ", ".join(f"{p['pid']}{' (vLLM)' if p.get('vllm') else ''}: {format_bytes(p.get('used_bytes'))}"
                          for p in gpu.get("processes", []))
        mem = f"{format_bytes(free)} / {format_bytes(total)}" + (f" {_bar(free, total)}" if bars else "")
        g.add_row(str(gpu.get("index")), esc(str(gpu.get("name"))), mem,
                  _num(gpu.get("utilization_gpu_pct"), "%"), format_bytes(win.get("min_free_bytes")), procs)
    return g


def channels_table(channels: dict[str, Any]) -> Any:
    """The channels part of ``conduit status``: one row per channel and verdict (protocols with the same verdict
    and message share a row), latency last / p50 / p95 in ms, consecutive failures and the message (folded,
    never cut). Channel names, messages and hints come from the profile and gateways: printed as text."""
    from rich import box
    from rich.markup import escape as esc
    from rich.table import Table

    t = Table("channel", "protocol", "verdict", "ms last/p50/p95", "fails", "message", box=box.SIMPLE_HEAD,
              pad_edge=False, show_edge=False, padding=(0, 1, 0, 0))
    t.columns[5].overflow = "fold"
    for name, ch in channels.items():
        rows: dict[tuple[str, str], list[str]] = {}
        shown: dict[tuple[str, str], dict[str, Any]] = {}
        for proto, p in ch.get("protocols", {}).items():
            message = (p.get("message") or "") + (f" (hint: {p['hint']})" if p.get("hint") else "")
            key = (str(p.get("verdict")), message)
            rows.setdefault(key, []).append(proto)
            shown.setdefault(key, p)
        for (verdict, message), protos in rows.items():
            lat = shown[(verdict, message)].get("latency_ms", {})
            colour = "green" if verdict == "ok" else "yellow" if verdict == "pending" else "red"
            ms = "/".join(_num(lat.get(k)) for k in ("last", "p50", "p95"))
            t.add_row(esc(name), ", ".join(protos), f"[{colour}]{esc(verdict)}[/]", "-" if ms == "-/-/-" else ms,
                      str(shown[(verdict, message)].get("consecutive_failures", "")), esc(_home_short(message)))
    return t


def tools_table(tools: dict[str, Any]) -> Any:
    """The tools part of ``conduit status``: one row per tool of the sync state file's ``tools`` object
    (``conduit.daemon.sync.state``), by its display name when the agent gives one: its status, when it was last
    synced (UTC), where its key rests (``key_at_rest``: ``conduit.daemon.sync.keyrest``; ``-`` before a sync
    recorded it), and notes: restart needed (since the last change), drift, the message (folded, ``$HOME`` as
    ``~``, never cut). Values that are not objects are shown as the status."""
    from rich import box
    from rich.markup import escape as esc
    from rich.table import Table

    t = Table("tool", "status", "last sync (UTC)", "key at rest", "notes", box=box.SIMPLE_HEAD, pad_edge=False,
              show_edge=False, padding=(0, 1, 0, 0))
    t.columns[0].no_wrap = t.columns[2].no_wrap = True
    t.columns[4].overflow = "fold"
    for name, info in tools.items():
        info = info if isinstance(info, dict) else {"status": info}
        status = str(info.get("status") or info.get("state") or "-")
        colour = {"changed": "green", "unchanged": "green", "error": "red", "unsupported": "red",
                  "not_found": "yellow"}.get(status, "white")
        notes = []
        if info.get("restart_needed"):
            notes.append(f"restart needed since {_when(info.get('last_change_at'))[11:] or '-'}")
        if info.get("drift"):
            notes.append("drifted: `conduit doctor` shows the fix")
        if info.get("message"):  # its first clause; `conduit doctor` gives the whole message and the fix
            notes.append(_home_short(str(info["message"]).split("; ")[0]))
        t.add_row(esc(str(info.get("display") or name)), f"[{colour}]{esc(status)}[/]", _when(info.get("last_sync_at")),
                  esc(str(info.get("key_at_rest") or "-")), esc("; ".join(notes)))
    return t


def _home_short(text: str) -> str:
    """``text`` with the home directory written ``~`` (the agent runs as this user, so its paths are ours)."""
    home = str(Path.home()).rstrip("/")
    return text.replace(home + "/", "~/") if home and home != "/" else text


def _when(stamp: Any) -> str:
    """``2026-01-01T12:00:00.000Z`` as ``2026-01-01 12:00:00``; ``-`` when unknown."""
    return str(stamp)[:19].replace("T", " ") if stamp else "-"


def vllm_lines(vllm: dict[str, Any]) -> list[str]:
    """The vLLM part of ``conduit status`` as plain lines, from a ``/v1/vllm`` body (``Supervisor.snapshot``):
    state (since when, pid, restarts, URL, model), the last failure's reason and fix, the live numbers
    (KV cache use, running/waiting requests, preemptions, prefix-cache hit rate, TTFT and inter-token latency
    mean/p50/p95 in ms, prompt/generation tokens per second) and the warnings."""
    state = vllm.get("state")
    if state in (None, "not_configured"):
        return ["vLLM: not_configured (add a [vllm] table to the profile)"]
    head = f"vLLM: {state}"
    if vllm.get("since"):
        head += " since " + time.strftime("%H:%M:%S", time.localtime(vllm["since"]))
    bits = []
    if vllm.get("pid"):
        bits.append(f"pid {vllm['pid']}" + (", adopted" if vllm.get("adopted") else ""))
    if vllm.get("restarts"):
        bits.append(f"restarts {vllm['restarts']}")
    if vllm.get("managed") is False:
        bits.append(f"observed {vllm.get('engine') or 'engine'}, manage = false")
    if bits:
        head += f" ({', '.join(bits)})"
    if vllm.get("base_url"):
        head += f" at {vllm['base_url']}/v1, model {vllm.get('served_model_name')}"
    if vllm.get("message"):
        head += f" - {vllm['message']}"
    lines = [head]
    f = vllm.get("last_failure")
    if f and state in ("failed", "restarting", "starting", "unhealthy"):
        lines.append(f"  last failure: {f.get('reason')}")
        if f.get("fix"):
            lines.append(f"  fix: {f['fix']}")
    m = vllm.get("metrics")
    if m and state in ("ready", "unhealthy"):
        live = [f"KV cache {_pct(m.get('kv_cache_usage_fraction'))}",
                f"running {_count(m.get('requests_running'))}", f"waiting {_count(m.get('requests_waiting'))}",
                f"preemptions {_count(m.get('preemptions_total'))}",
                f"prefix-cache hits {_pct(m.get('prefix_cache_hit_rate'))}"]
        lines.append("  live: " + ", ".join(live))
        lat = []
        for key, label in (("ttft", "TTFT"), ("itl", "inter-token")):
            h = m.get(f"{key}_recent") or m.get(key) or {}
            if h.get("mean_ms") is not None:
                lat.append(f"{label} mean {_num(h['mean_ms'])} / p50 {_num(h.get('p50_ms'))} / "
                           f"p95 {_num(h.get('p95_ms'))} ms")
        rates = (f"tokens/s prompt {_num(m.get('prompt_tokens_per_s'))}, "
                 f"generation {_num(m.get('generation_tokens_per_s'))} "
                 f"(total {_count(m.get('prompt_tokens_total'))} / {_count(m.get('generation_tokens_total'))})")
        lines.append("  " + "; ".join([*lat, rates]))
        lines += ["  " + line for line in kv_tier_lines(m.get("kv_tier"))]
    lines += ollama_lines(vllm.get("ollama"))
    if state not in ("stopped", "stopping", "not_configured"):  # a stopped server's warnings are history
        for w in (vllm.get("warnings") or [])[-5:]:
            lines.append(f"  warning: {w}")
    return lines


def _count(v: float | None) -> str:
    """Prometheus exposes counters and gauges as floats; requests and tokens are whole numbers."""
    return "-" if v is None else f"{int(v):,}"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.0%}"


def _num(v: float | int | None, suffix: str = "") -> str:
    return "-" if v is None else f"{v:g}{suffix}" if isinstance(v, int) else f"{v:.1f}{suffix}"


def _bar(free: int | None, total: int | None, width: int = 20) -> str:
    if not free or not total:
        return ""
    n = round(width * free / total)
    return "[green]" + "█" * n + "[/][dim]" + "░" * (width - n) + "[/]"


# --------------------------------------------------------------------------------------------- commands


SocketOpt = typer.Option(None, "--socket", help="The agent's socket (default: $XDG_RUNTIME_DIR/conduit/agent.sock).")


@commands.command("agent")
def agent_cmd(
    socket: Path = SocketOpt,
    profile: str = typer.Option(None, "--profile", help="Profile file (default: the usual lookup)."),
    probe_interval: float = typer.Option(60.0, "--probe-interval", help="Seconds between channel probes."),
    idle_timeout: float = typer.Option(10.0, "--idle-timeout", hidden=True,
                                       help="Close connections without a complete request after this many seconds."),
) -> int:
    """Run the agent in the foreground: status API on a Unix socket, channel probes, GPU sampling."""
    from conduit.daemon.agent.server import AgentConfig, run_agent
    return run_agent(AgentConfig(socket_path=socket, profile_path=profile or state.profile,
                                 probe_interval_s=probe_interval,
                                 idle_timeout_s=idle_timeout))


@commands.command("status")
def status_cmd(
    as_json: bool = typer.Option(False, "--json", help="Print the agent's /v1/status JSON."),
    socket: Path = SocketOpt,
    watch: bool = typer.Option(False, "--watch", help="A live view, redrawn every second; q or Ctrl-C quits."),
) -> int:
    """Show channels, GPUs, vLLM and tools as the agent sees them. Exit 2 when the agent does not answer."""
    if watch:  # rich Live and the view load only here
        from conduit.daemon.cli import watch as live_view

        return live_view.run(socket, with_json=as_json)
    status = _fast_status(socket) if not as_json else None
    if status is None:  # the full client owns every error message (and `--json` comes here only as a fallback)
        from conduit.daemon.agent.client import AgentClient

        with AgentClient(socket) as client:
            status = client.get("/v1/status")
    if as_json:
        sys.stdout.write(json.dumps(status) + "\n")
    else:
        render_status(status)
    return EXIT_READY


def _fast_status(socket: Path | None) -> dict[str, Any] | None:
    """The agent's status over the standard-library path of ``conduit.daemon.cli.entry`` (no httpx), or None
    on anything unexpected (the caller then asks through ``AgentClient``, which explains the failure)."""
    from conduit.daemon.cli.entry import _socket_path, fast_status

    path = str(socket) if socket is not None else _socket_path(["status", "--json"])
    body = fast_status(path) if path else None
    try:
        doc = json.loads(body) if body is not None else None
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None


ChannelOpt = typer.Option(None, "--channel", help="Wait for this channel to be healthy (repeatable).")


@commands.command("wait")
def wait_cmd(
    vram_free: str = typer.Option(None, "--vram-free", help="Wait for a GPU with this much free memory (20GiB; 1500000000B for bytes)."),
    gpu: str = typer.Option(None, "--gpu", help="Only this GPU (index or uuid) counts for --vram-free."),
    channel: list[str] = ChannelOpt,
    vllm_ready: bool = typer.Option(False, "--vllm-ready", help="Wait for the supervised vLLM to be ready."),
    timeout: str = typer.Option("60s", "--timeout", help="Give up after this long (10m, 90s; 0 = check once)."),
    socket: Path = SocketOpt,
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Print nothing; the exit code says it all."),
) -> int:
    """Wait until conditions hold. Exit 0 ready, 1 timed out, 2 agent unreachable, 3 bad arguments."""
    cond = Conditions(vram_free_bytes=parse_size(vram_free, option="--vram-free") if vram_free else None,
                      gpu=gpu, channels=tuple(channel or ()), vllm_ready=vllm_ready)
    if gpu is not None and cond.vram_free_bytes is None:
        raise BadArguments("--gpu only makes sense with --vram-free")
    if cond.empty():
        raise BadArguments("nothing to wait for: give --vram-free, --channel or --vllm-ready")
    timeout_s = parse_duration(timeout, option="--timeout")
    from conduit.daemon.agent.client import AgentClient

    with AgentClient(socket) as client:
        code, line = wait_until(cond, timeout_s, lambda: client.get("/v1/status"))
    if not quiet:  # a failure is said like every other command's error (conduit.daemon.cli.main)
        print(f"error: {line}" if code else line, file=sys.stderr if code else sys.stdout)
    return code


# ``conduit.daemon.cli.vllm`` imports parse_duration from here.
__all__ = ["agent_cmd", "parse_duration", "render_status", "status_cmd", "vllm_lines", "wait_cmd"]
