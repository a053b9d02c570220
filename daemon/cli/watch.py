"""``conduit status --watch``: a live view of the agent, redrawn about once a second until ``q`` or Ctrl-C.

What it shows, all from one ``GET /v1/status`` a second over the agent's socket (``AgentClient``; body shapes in
``conduit.daemon.agent.models.Status``):

- the agent (state, pid, uptime) and the clock of the last answer;
- the routing state, when the body has a ``routing`` key (a string, or an object whose ``state``/``mode``/
  ``active`` is shown with its other plain values); nothing when it has none;
- each channel x protocol: verdict, last and p95 probe latency, and a sparkline of the latencies of the last
  probes the view saw (one character per probe, scaled 0..the highest; a probe that got no answer is ``·``);
- each GPU: a used/total bar, free memory, a sparkline of its free memory over the last five minutes (the
  view's own samples, one slot per ``300 / width`` seconds, the lowest reading in each slot, scaled 0..total),
  and the agent's own five-minute minimum (``window.min_free_bytes``, which covers time before the view began);
- the supervised vLLM: state, KV cache use, running and waiting requests, TTFT p50/p95 (the recent window when
  the agent has one, ``ttft_recent``, else since start) and prompt/generation tokens per second;
- host memory (used bar, available of total, swap, 1-minute load).

When the agent does not answer, the view says so in red above the last data it had, and keeps asking once a
second. The terminal: stdin in cbreak mode (``tty.setcbreak``: keys arrive one at a time, unechoed; Ctrl-C still
raises SIGINT), a ``select`` with the time left to the next redraw as its timeout (no busy loop), the alternate
screen while it runs (``rich.live.Live(screen=True)``, refreshed only by this loop: ``auto_refresh=False``), and
everything restored on the way out, also on an exception or SIGTERM. Colours follow rich, which honours
``NO_COLOR`` (any non-empty value: no colour, bars still drawn with ``█``/``░``). The width is read at every
redraw; a resize (SIGWINCH) redraws at once.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from conduit.daemon.agent.client import AgentClient, AgentError
from conduit.daemon.cli.kvtierview import kv_tier_lines
from conduit.daemon.cli.sparkline import History, sparkline
from conduit.daemon.cli.terminal import Keys
from conduit.errors import AgentUnreachable, BadArguments
from conduit.units import format_bytes

GPU_WINDOW_S = 300.0
LATENCY_PROBES = 120  # probes of each channel kept for its sparkline
EXIT_OK = 0


# --------------------------------------------------------------------------------------------- state


@dataclass
class View:
    """What the view knows: the last ``/v1/status`` body, the last error, and the history it collected.

    ``gpu_free`` is keyed by GPU uuid (``index:N`` without one), values in bytes, times the agent's
    ``sampled_at`` (Unix seconds); ``latency`` by ``channel/protocol``, values in ms, times ``last_probe_at``.
    """

    status: dict[str, Any] | None = None
    error: str | None = None
    answered_at: float | None = None  # Unix time of the last answer
    polls: int = 0
    gpu_free: History = field(default_factory=lambda: History(GPU_WINDOW_S))
    latency: History = field(default_factory=lambda: History(3600.0, LATENCY_PROBES))

    def poll(self, client: AgentClient) -> None:
        """Ask the agent for ``/v1/status`` once; on an answer record it, else keep the error's text."""
        self.polls += 1
        try:
            status = client.get("/v1/status")
        except (AgentUnreachable, AgentError) as exc:  # UntrustedSocket is an AgentUnreachable
            self.error = exc.message + (f" ({exc.hint})" if exc.hint else "")
            return
        self.error = None
        self.answered_at = time.time()
        self.observe(status, self.answered_at)

    def observe(self, status: dict[str, Any], now: float) -> None:
        """Take ``status`` as the latest body and add its new samples to the histories."""
        self.status = status
        gpus = status.get("gpus") or {}
        t = gpus.get("sampled_at")
        if t is not None:
            for g in gpus.get("gpus") or []:
                self.gpu_free.add(_gpu_key(g), float(t), g.get("free_bytes"))
        for name, ch in (status.get("channels") or {}).items():
            for proto, p in (ch.get("protocols") or {}).items():
                at = p.get("last_probe_at")
                if at is None:
                    continue
                answered = p.get("status") is not None
                last = (p.get("latency_ms") or {}).get("last")
                self.latency.add(f"{name}/{proto}", float(at), last if answered and last is not None else math.nan)
        self.gpu_free.prune(now)


def _gpu_key(g: dict[str, Any]) -> str:
    return str(g.get("uuid") or f"index:{g.get('index')}")


# --------------------------------------------------------------------------------------------- rendering


def render(view: View, width: int, now: float | None = None) -> RenderableType:
    """The whole screen for a terminal ``width`` columns wide: header, routing, channels, GPUs, vLLM, host.

    Narrow terminals (under 90 columns) drop the less important columns (protocol message, GPU name, utilization,
    the agent's window minimum); sparklines and bars shrink with the width.
    """
    now = time.time() if now is None else now
    parts: list[RenderableType] = [_header(view, now)]
    if view.error is not None:
        parts.append(Text(f"agent unreachable: {view.error} - retrying every second", style="bold red"))
        if view.status is None:
            return Group(*parts)
        parts.append(Text("(the last data it sent follows)", style="dim"))
    status = view.status or {}
    if status.get("routing") is not None:  # null: the profile has no [fallback]
        parts.append(_routing(status["routing"]))
    lay = Layout.for_width(width)
    parts.append(_channels(status, view, lay))
    parts.append(_gpus(status.get("gpus") or {}, view, now, lay))
    parts.extend(_vllm(status.get("vllm") or {}, lay.bar_w))
    for name, body in (status.get("engines") or {}).items():  # [engines.NAME], beside [vllm]
        parts.extend(_vllm(body if isinstance(body, dict) else {}, lay.bar_w, f"engine {name}"))
    parts.append(_host(status.get("host") or {}, lay.bar_w))
    return Group(*parts)


@dataclass(frozen=True)
class Layout:
    """Column widths for a terminal ``width`` columns wide, so that no table is squeezed (rich would cut every
    column to fit). The fixed parts: each table gap is three cells (padding and separator) plus two at the
    edges; figures are at most 9 cells (``80.00 GiB``), a verdict 7, a latency 7."""

    narrow: bool
    name_w: int  # channel and GPU names
    chan_spark_w: int
    message_w: int
    gpu_name_w: int
    bar_w: int
    gpu_spark_w: int

    @classmethod
    def for_width(cls, width: int) -> Layout:
        """The widths for ``width`` columns (under 100: no message, fails, GPU name, window minimum, util)."""
        narrow = width < 100
        if narrow:  # channel 14 | verdict 7 | ms 7 | p95 7 | spark;  # 1 | bar | free 9 | total 9 | spark
            chan = max(6, width - 14 - 7 - 7 - 7 - 4 * 3 - 2)
            gpu = max(16, width - 1 - 9 - 9 - 4 * 3 - 2)
            return cls(True, 14, min(48, chan), 0, 0, max(6, min(20, gpu * 2 // 5)), min(48, gpu - gpu * 2 // 5))
        chan = width - 24 - 7 - 7 - 7 - 5 - 6 * 3 - 2  # + spark + message
        gpu = width - 1 - 9 - 9 - 9 - 4 - 7 * 3 - 2  # + name + bar + spark
        spark = max(8, min(48, chan * 2 // 5))
        gspark, bar = max(8, min(48, gpu * 9 // 20)), max(8, min(20, gpu // 4))
        return cls(False, 24, spark, max(8, chan - spark), max(6, min(22, gpu - gspark - bar)), bar, gspark)


def _header(view: View, now: float) -> Text:
    agent = (view.status or {}).get("agent") or {}
    head = Text("conduit ", style="bold", no_wrap=True, overflow="ellipsis")
    if agent:
        head.append(f"agent {agent.get('state')} · pid {agent.get('pid')} · up {_age(agent.get('uptime_s'))}")
    else:
        head.append("agent ?")
    when = time.strftime("%H:%M:%S", time.localtime(now))
    seen = "" if view.answered_at is None else f", answer {_age(now - view.answered_at)} ago"
    head.append(f" · {when}{seen} · q quits", style="dim")
    return head


def _routing(routing: Any) -> Text:
    """``routing: <state>`` from a string, or an object's ``state``/``mode``/``active`` plus its plain values."""
    if isinstance(routing, dict):
        main = next((routing[k] for k in ("state", "mode", "active") if routing.get(k) is not None), "primary")
        extra = [f"{k} {_clock(v) if k == 'since' and isinstance(v, float) else v}" for k, v in routing.items()
                 if k not in ("state", "mode", "active") and isinstance(v, str | int | float | bool)]
        text = f"routing: {main}" + (f" ({', '.join(extra)})" if extra else "")
    else:
        text = f"routing: {routing if routing is not None else 'primary'}"
    return Text(text, style="bold")


def _clock(unix_s: float) -> str:
    """``14:02:11``: a Unix time as the local clock."""
    return time.strftime("%H:%M:%S", time.localtime(unix_s))


def _verdict_style(verdict: Any) -> str:
    return "green" if verdict == "ok" else "yellow" if verdict == "pending" else "red"


def _channels(status: dict[str, Any], view: View, lay: Layout) -> RenderableType:
    channels = status.get("channels") or {}
    if not channels:
        return Text(f"channels: none ({status.get('note') or 'the profile has no channels'})")
    t = Table(title="channels", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    narrow, spark_w = lay.narrow, lay.chan_spark_w
    t.add_column("channel", overflow="ellipsis", no_wrap=True, max_width=lay.name_w)
    t.add_column("verdict", no_wrap=True)
    t.add_column("ms" if narrow else "last ms", justify="right", no_wrap=True)
    t.add_column("p95" if narrow else "p95 ms", justify="right", no_wrap=True)
    t.add_column("latency" if narrow else "latency, last probes", no_wrap=True, min_width=spark_w)
    if not narrow:
        t.add_column("fails", justify="right", no_wrap=True)
        t.add_column("message", overflow="ellipsis", no_wrap=True, max_width=lay.message_w)
    for name, ch in channels.items():
        for proto, p in (ch.get("protocols") or {}).items():
            lat = p.get("latency_ms") or {}
            spark = sparkline(view.latency.series(f"{name}/{proto}").values(spark_w), lo=0.0, missing="·")
            verdict = Text(str(p.get("verdict")), style=_verdict_style(p.get("verdict")))
            row: list[RenderableType] = [Text(f"{name}/{proto}"), verdict, _num(lat.get("last")),
                                         _num(lat.get("p95")), Text(spark, style="cyan")]
            if not narrow:
                hint = f" (hint: {p['hint']})" if p.get("hint") else ""
                row += [str(p.get("consecutive_failures", "")), Text((p.get("message") or "") + hint)]
            t.add_row(*row)
    return t


def _bar(part: float | None, whole: float | None, width: int, style: str) -> Text:
    """``width`` cells, ``part / whole`` of them ``█`` in ``style``, the rest ``░``; blank without figures."""
    if part is None or not whole:
        return Text(" " * width)
    n = max(0, min(width, round(width * part / whole)))
    return Text.assemble(("█" * n, style), ("░" * (width - n), "dim"))


def _used_style(frac: float) -> str:
    return "red" if frac >= 0.95 else "yellow" if frac >= 0.8 else "green"


def _gpus(gpus: dict[str, Any], view: View, now: float, lay: Layout) -> RenderableType:
    rows = gpus.get("gpus") or []
    narrow, spark_w = lay.narrow, lay.gpu_spark_w
    if not rows:
        return Text(f"GPUs: none ({gpus.get('reason') or 'none reported'})")
    age = "" if gpus.get("sampled_at") is None else f", sampled {_age(now - gpus['sampled_at'])} ago"
    t = Table(title=f"GPUs{age}", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    t.add_column("#", no_wrap=True)
    if not narrow:
        t.add_column("name", overflow="ellipsis", no_wrap=True, max_width=lay.gpu_name_w)
    t.add_column("used", no_wrap=True)
    t.add_column("free", justify="right", no_wrap=True)
    t.add_column("total", justify="right", no_wrap=True)
    t.add_column("free, last 5 min", no_wrap=True, min_width=spark_w)
    if not narrow:
        t.add_column("5-min min", justify="right", no_wrap=True)
        t.add_column("util", justify="right", no_wrap=True)
    bar_w = lay.bar_w
    for g in rows:
        total, used, free = g.get("total_bytes"), g.get("used_bytes"), g.get("free_bytes")
        taken = (total - free) if (total and free is not None) else used  # reserved counts as taken
        frac = (taken or 0) / total if total else 0.0
        series = view.gpu_free.series(_gpu_key(g))
        spark = sparkline(series.buckets(now, spark_w), lo=0.0, hi=float(total) if total else None)
        bar = _bar(taken, total, bar_w, _used_style(frac))
        row: list[RenderableType] = [str(g.get("index"))]
        if not narrow:
            row.append(Text(str(g.get("name"))))
        row += [bar, format_bytes(free), format_bytes(total), Text(spark, style="cyan")]
        if not narrow:
            win = g.get("window") or {}
            util = g.get("utilization_gpu_pct")
            row += [format_bytes(win.get("min_free_bytes")), "-" if util is None else f"{util}%"]
        t.add_row(*row)
    return t


def _vllm(vllm: dict[str, Any], bar_w: int, label: str = "vLLM") -> list[RenderableType]:
    state = vllm.get("state")
    if state in (None, "not_configured"):
        return [Text(f"{label}: not configured (add a [vllm] table to the profile)")]
    if state == "error" and vllm.get("message"):
        return [Text(f"{label}: error - {vllm['message']}", style="red")]
    ok = state == "ready"
    head = Text(f"{label}: ", style="bold")
    head.append(str(state), style="green" if ok else "yellow" if state in ("starting", "restarting") else "red")
    if vllm.get("since"):
        head.append(" since " + time.strftime("%H:%M:%S", time.localtime(vllm["since"])))
    if vllm.get("pid"):
        head.append(f" · pid {vllm['pid']}")
    if vllm.get("served_model_name"):
        head.append(f" · model {vllm['served_model_name']}")
    if vllm.get("restarts"):
        head.append(f" · restarts {vllm['restarts']}")
    if vllm.get("managed") is False:
        head.append(f" · observed {vllm.get('engine') or 'engine'} (manage = false)", style="dim")
    lines: list[RenderableType] = [head]
    fail = vllm.get("last_failure")
    if fail and state in ("failed", "restarting", "starting", "unhealthy"):
        lines.append(Text(f"  last failure: {fail.get('reason')}" + (f"; fix: {fail['fix']}" if fail.get("fix") else ""),
                          style="red"))
    m = vllm.get("metrics") or {}
    if m:
        kv = m.get("kv_cache_usage_fraction")
        line = Text("  KV cache ")
        line.append_text(_bar(kv, 1.0, bar_w, _used_style(kv or 0.0)))
        line.append(f" {_pct(kv)} · running {_count(m.get('requests_running'))} · waiting "
                    f"{_count(m.get('requests_waiting'))}")
        lines.append(line)
        ttft = m.get("ttft_recent") or m.get("ttft") or {}
        lines.append(Text(f"  TTFT p50 {_ms(ttft.get('p50_ms'))} · p95 {_ms(ttft.get('p95_ms'))} · "
                          f"tokens/s generation {_num(m.get('generation_tokens_per_s'))} · "
                          f"prompt {_num(m.get('prompt_tokens_per_s'))}"))
        lines += [Text("  " + line) for line in kv_tier_lines(m.get("kv_tier"))]
    if vllm.get("ollama"):
        from conduit.daemon.cli.engineview import ollama_lines

        lines += [Text(line) for line in ollama_lines(vllm["ollama"])]
    if state not in ("stopped", "stopping"):
        lines += [Text(f"  warning: {w}", style="yellow") for w in (vllm.get("warnings") or [])[-2:]]
    return lines


def _host(host: dict[str, Any], bar_w: int) -> RenderableType:
    if "total_bytes" not in host:
        return Text(f"host memory: {host.get('note') or 'not sampled yet'}")
    total, avail = host["total_bytes"], host.get("available_bytes")
    taken = total - avail if avail is not None else None
    line = Text("host memory ", style="bold")
    line.append_text(_bar(taken, total, bar_w, _used_style((taken or 0) / total if total else 0)))
    line.append(f" {format_bytes(avail)} available of {format_bytes(total)}")
    if host.get("swap_total_bytes"):
        line.append(f" · swap {format_bytes(host.get('swap_used_bytes'))} / {format_bytes(host['swap_total_bytes'])}")
    if host.get("load_avg_1m") is not None:
        line.append(f" · load {host['load_avg_1m']:.2f}")
    return line


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    s = max(0.0, seconds)
    if s < 60:
        return f"{s:.1f} s" if s < 10 else f"{s:.0f} s"
    if s < 3600:
        return f"{int(s // 60)}m{int(s % 60):02d}s"
    return f"{int(s // 3600)}h{int(s % 3600 // 60):02d}m"


def _count(v: float | None) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{int(v):,}"


def _pct(v: float | None) -> str:
    return "-" if v is None or math.isnan(v) else f"{v:.0%}"


def _ms(v: float | None) -> str:
    return "-" if v is None or math.isnan(v) else f"{v:.1f} ms"


def _num(v: float | int | None) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.1f}"


# --------------------------------------------------------------------------------------------- terminal


def run(socket_path: str | os.PathLike[str] | Path | None = None, interval_s: float = 1.0,
        with_json: bool = False) -> int:
    """Run the live view until ``q`` or Ctrl-C; returns exit code 0 for both.

    Args:
        socket_path: the agent's socket (default ``conduit.daemon.config.paths.agent_socket_path()``).
        interval_s: seconds between polls and redraws (about 1 Hz; a resize redraws in between).
        with_json: ``--json`` was given too, which a live view cannot honour.
    Raises:
        BadArguments: ``with_json``, or stdout is not a terminal (scripts want ``conduit status --json``).
    """
    if with_json:
        raise BadArguments("--watch and --json do not go together",
                           hint="use `conduit status --json` in scripts, `conduit status --watch` to look")
    from rich.live import Live

    console = Console()
    if not console.is_terminal:
        raise BadArguments("conduit status --watch needs a terminal",
                           hint="use `conduit status --json` (or plain `conduit status`) when output is piped")
    view = View()
    with AgentClient(socket_path, timeout_s=max(0.5, min(2.0, interval_s))) as client, Keys() as keys, \
            Live(console=console, screen=True, auto_refresh=False, redirect_stdout=False,
                 redirect_stderr=False) as live:
        try:
            _loop(view, client, keys, live, console, interval_s)
        except KeyboardInterrupt:
            pass
    return EXIT_OK


def _loop(view: View, client: AgentClient, keys: Keys, live: Any, console: Console, interval_s: float) -> None:
    """Poll, draw, wait; a key or signal ends the wait early. Returns when ``q`` is pressed."""
    due = time.monotonic()
    while True:
        view.poll(client)
        live.update(render(view, console.width), refresh=True)
        due += interval_s
        while True:
            left = due - time.monotonic()
            if left <= 0:
                if left < -interval_s:  # fell far behind (a suspended terminal): start counting again
                    due = time.monotonic()
                break
            what = keys.wait(left)
            if what == "quit":
                return
            if what == "redraw":
                live.update(render(view, console.width), refresh=True)


__all__ = ["Keys", "View", "render", "run"]
