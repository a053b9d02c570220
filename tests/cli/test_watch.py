"""``conduit status --watch``: the sparkline helpers and the screen as rendered text, then the real command in a
real terminal (tmux: a pane of a given size, send-keys, capture-pane) against a real agent process with a fake
device set, supervising tests/helpers/fake_vllm.py as its vLLM.

Covered in the terminal: every section is on the screen (channels, GPUs with bars and a sparkline, vLLM with its
live numbers, host memory); the screen follows the agent (a GPU's free memory rewritten in the fake device file
shows up); ``q`` and Ctrl-C quit with exit 0 and the terminal's settings exactly as before (``stty -g``); a
60-column pane renders without a traceback and without colour under ``NO_COLOR``; an agent that is not there is
reported and the view picks it up once it starts; a resize switches the layout; the view's CPU use over 20 s
is measured and printed.
"""

from __future__ import annotations

import contextlib
import io
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from helpers.agentproc import AgentProc, GiB, conduit_exe, fake_gpu, request, short_dir
from helpers.paths import HELPERS
from rich.console import Console

from conduit.daemon.cli.sparkline import BLOCKS, History, Series, sparkline
from conduit.daemon.cli.watch import View, render

FAKE = str(HELPERS / "fake_vllm.py")
# The module-scoped agent below is shared: under pytest-xdist (`--dist loadgroup`) this file runs on one worker.
pytestmark = pytest.mark.xdist_group("test_watch")

# --------------------------------------------------------------------------------------------- helpers


def test_sparkline_scales_between_lo_and_hi() -> None:
    assert sparkline([0, 50, 100], lo=0, hi=100) == "▁▅█"
    assert sparkline([None, 1.0, math.nan, 3.0]) == " ▁ █"
    assert sparkline([5, 5, 5]) == BLOCKS[0] * 3  # an empty scale is the bottom, not a crash
    assert sparkline([-10, 200], lo=0, hi=100) == "▁█"  # clamped
    assert sparkline([]) == "" and sparkline([None, None]) == "  "


def test_series_ignores_repeats_keeps_the_window_and_buckets_by_time() -> None:
    s = Series(window_s=10.0)
    assert s.add(100.0, 5.0) and not s.add(100.0, 6.0) and not s.add(99.0, 1.0) and not s.add(101.0, None)
    for t in range(101, 112):
        s.add(float(t), float(t))
    assert s.values()[0] >= 101.0 and len(s) == 11  # 100 fell out of the 10 s window
    b = s.buckets(now=111.0, width=5)  # 2 s slots over [101, 111]
    assert b == [101.0, 103.0, 105.0, 107.0, 109.0]  # the lowest in each slot
    sparse = Series(window_s=10.0)
    sparse.add(105.0, 7.0)
    assert sparse.buckets(now=111.0, width=5) == [None, None, 7.0, 7.0, 7.0]  # carried forward, blank before
    h = History(window_s=10.0)
    h.add("a", 100.0, 1.0)
    h.add("b", 110.0, 1.0)
    h.prune(now=111.0)
    assert h.keys() == ["b"]


def _status(free: int, t: float, **more: Any) -> dict[str, Any]:
    proto = {"verdict": "ok", "status": 200, "latency_ms": {"last": 12.5, "p50": 11.0, "p95": 20.0, "samples": 3},
             "consecutive_failures": 0, "message": "ok " * 80, "hint": None, "last_probe_at": t}
    return {"agent": {"state": "running", "pid": 123, "uptime_s": 75.0},
            "channels": {"good": {"healthy": True, "verdict": "ok", "protocols": {"openai": proto}}},
            "note": None,
            "gpus": {"gpus": [{"index": 0, "name": "Fake H100 #0", "uuid": "GPU-0", "total_bytes": 80 * GiB,
                               "used_bytes": 80 * GiB - free, "free_bytes": free, "utilization_gpu_pct": 10,
                               "window": {"min_free_bytes": 40 * GiB}}], "reason": None, "sampled_at": t},
            "host": {"total_bytes": 32 * GiB, "available_bytes": 20 * GiB, "swap_total_bytes": 0, "load_avg_1m": 0.5},
            "vllm": {"state": "ready", "since": t - 100, "pid": 999, "served_model_name": "qwen",
                     "metrics": {"kv_cache_usage_fraction": 0.42, "requests_running": 3.0, "requests_waiting": 1.0,
                                 "ttft_recent": {"p50_ms": 120.0, "p95_ms": 340.0},
                                 "generation_tokens_per_s": 512.3, "prompt_tokens_per_s": 1024.0}},
            "tools": {"tools": {}}, **more}


def _text(view: View, width: int, now: float) -> str:
    console = Console(file=io.StringIO(), width=width, color_system=None)
    console.print(render(view, width, now))
    out = console.file.getvalue()  # type: ignore[attr-defined]
    assert all(len(line) <= width for line in out.splitlines()), out
    return str(out)


def test_render_shows_every_section_and_the_history() -> None:
    now = 1_700_000_000.0
    view = View()
    for i in range(300):  # free memory falls from 80 to 20 GiB over five minutes, polled twice a second
        t = now - 299 + i
        for _ in range(2):
            view.observe(_status(int((80 - i / 5) * GiB), t), t)
    assert len(view.gpu_free.series("GPU-0")) == 300  # the same sample polled twice counts once
    assert len(view.latency.series("good/openai")) == 120  # one per probe, the last LATENCY_PROBES
    for width in (140, 100, 60):
        out = _text(view, width, now)
        for needle in ("channels", "good/openai", "GPUs", "vLLM: ready", "KV cache", "42%", "running 3",
                       "waiting 1", "TTFT p50 120.0 ms", "p95 340.0 ms", "512.3", "host memory", "20.00 GiB available"):
            assert needle in out, (width, needle, out)
        gpu_line = next(line for line in out.splitlines() if line.lstrip().startswith("0 "))
        spark = re.search(f"[{BLOCKS}]{{8,}}", gpu_line.split("80.00 GiB")[1])
        assert spark and spark.group()[0] == "█" and spark.group()[-1] in "▁▂▃", gpu_line  # high, then low
        assert "…" not in gpu_line and "20.20 GiB" in gpu_line, gpu_line  # no column squeezed to fit
        chan_line = next(line for line in out.splitlines() if "good/openai" in line)
        assert re.search(r"ok\s+12\.5\s+20\.0\s+█", chan_line), chan_line
        assert "routing" not in out  # the agent reports no routing: the view claims none
    assert "routing: fallback (channel b)" in _text(View(status=_status(GiB, now, routing={"state": "fallback",
                                                                                           "channel": "b"})), 100, now)


def test_render_says_when_the_agent_is_away() -> None:
    view = View(error="the conduit agent does not answer on /x (hint)")
    out = _text(view, 80, 0.0)
    assert "agent unreachable: the conduit agent does not answer" in out and "GPUs" not in out
    view.observe(_status(GiB, 0.0), 0.0)
    view.error = "gone"
    out = _text(view, 80, 1.0)
    assert "agent unreachable: gone" in out and "the last data it sent follows" in out and "GPUs" in out


def test_watch_refuses_json_and_a_pipe(temp_home: Path) -> None:
    env = dict(os.environ, HOME=str(temp_home), CONDUIT_AGENT_SOCKET=str(temp_home / "none.sock"))
    r = subprocess.run([conduit_exe(), "status", "--watch", "--json"], env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 3 and "--watch and --json" in r.stderr, r
    r = subprocess.run([conduit_exe(), "status", "--watch"], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 3 and "needs a terminal" in r.stderr, r


# --------------------------------------------------------------------------------------------- tmux


class Pane:
    """A tmux server of its own (private socket, no config) with one shell in a pane of ``width`` x ``height``."""

    def __init__(self, env: dict[str, str], width: int, height: int) -> None:
        self.dir = short_dir()
        self.sock = str(self.dir / "tmux.sock")
        env = dict(env, PS1="$ ", TERM="xterm-256color")
        env.pop("TMUX", None)
        subprocess.run(["tmux", "-S", self.sock, "-f", "/dev/null", "new-session", "-d", "-s", "w", "-x",
                        str(width), "-y", str(height), "bash --norc --noprofile"], env=env, check=True, timeout=20)

    def tmux(self, *args: str) -> str:
        r = subprocess.run(["tmux", "-S", self.sock, *args], capture_output=True, text=True, timeout=20)
        assert r.returncode == 0, r.stderr
        return r.stdout

    def keys(self, *keys: str) -> None:
        self.tmux("send-keys", "-t", "w", *keys)

    def screen(self, escapes: bool = False) -> str:
        return self.tmux("capture-pane", "-p", "-t", "w", *(["-e"] if escapes else []))

    def wait(self, pred: Callable[[str], bool], what: str, timeout: float = 30.0) -> str:
        deadline = time.monotonic() + timeout
        screen = ""
        while time.monotonic() < deadline:
            screen = self.screen()
            if pred(screen):
                return screen
            time.sleep(0.2)
        raise AssertionError(f"the pane never showed {what} in {timeout} s; it shows:\n{screen}")

    def run_watch(self, args: str = "") -> None:
        """Type the command; afterwards the shell prints its exit code and whether ``stty -g`` is unchanged."""
        self.keys(f'S0=$(stty -g); {conduit_exe()} status --watch {args}; echo "EXIT=$? '
                  f'SAME=$([ "$(stty -g)" = "$S0" ] && echo yes || echo no)"', "Enter")

    def watcher(self) -> psutil.Process:
        """The ``conduit status --watch`` process under the pane's shell."""
        shell = psutil.Process(int(self.tmux("display-message", "-p", "-t", "w", "#{pane_pid}").strip()))
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            for p in shell.children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    if "--watch" in p.cmdline():
                        return p
            time.sleep(0.1)
        raise AssertionError("no conduit status --watch process under the pane")

    def close(self) -> None:
        subprocess.run(["tmux", "-S", self.sock, "kill-server"], capture_output=True, timeout=20)
        shutil.rmtree(self.dir, ignore_errors=True)


def _quit_and_check(pane: Pane, key: str) -> None:
    pane.keys(key)
    screen = pane.wait(lambda s: re.search(r"^EXIT=\d+ SAME=", s, re.M) is not None, "the exit line")
    assert re.search(r"^EXIT=0 SAME=yes$", screen, re.M), screen
    assert "Traceback" not in screen, screen


@pytest.fixture(scope="module")
def tmux() -> None:
    if shutil.which("tmux") is None:
        r = subprocess.run("apt-get install -y tmux", shell=True, capture_output=True, timeout=300)
        if shutil.which("tmux") is None:
            pytest.skip(f"SKIPPED LOUDLY: tmux is not installed and `apt-get install -y tmux` failed: {r.stderr[-300:]!r}")


@pytest.fixture(scope="module")
def agent(tmp_path_factory: pytest.TempPathFactory, tmux: None) -> Iterator[AgentProc]:
    """One agent for the module: a fake GPU with 60 GiB free, a channel that refuses, and fake_vllm as [vllm]."""
    home = tmp_path_factory.mktemp("watchhome")
    import socket as _s

    with _s.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    prof = home / ".config" / "conduit" / "profile.toml"
    prof.parent.mkdir(parents=True)
    prof.write_text(f'version = 1\nchannel = "local"\nmodel = "fake"\n\n[channels.gw]\nbase_url = "http://127.0.0.1:9"\n'
                    f'protocols = ["openai"]\n\n[vllm]\nmodel = "fake-model"\nserved_model_name = "fake"\n'
                    f'port = {port}\ncommand = ["{sys.executable}", "{FAKE}"]\nhealth_interval_s = 0.2\n'
                    f'metrics_interval_s = 0.5\nstop_grace_s = 3\ngpu_memory_utilization = 0.4\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CONDUIT_", "XDG_"))}
    proc = AgentProc(home, gpus={"devices": [fake_gpu(0, free=60 * GiB)]}, env={})
    proc.env = dict(env, HOME=str(home), CONDUIT_AGENT_SOCKET=str(proc.sock), CONDUIT_FAKE_GPUS=str(proc.gpu_file))
    vllm_pid = None
    try:
        proc.start()
        snap = proc.wait_for("/v1/vllm", lambda b: b.get("state") == "ready" and b.get("metrics"), timeout=60)
        vllm_pid = snap["pid"]
        proc.wait_for("/v1/channels", lambda b: b["channels"].get("local", {}).get("healthy"), timeout=30)
        yield proc
    finally:
        with contextlib.suppress(Exception):
            request(proc.sock, "POST", "/v1/vllm/stop", timeout=20)
        proc.__exit__()
        if vllm_pid:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(vllm_pid, signal.SIGKILL)


def _all_sections(screen: str) -> bool:
    return all(s in screen for s in ("channels", "local/openai", "gw/openai", "GPUs", "vLLM: ready", "KV cache",
                                     "TTFT", "host memory", "60.00 GiB"))


def test_watch_in_a_real_terminal_shows_everything_and_follows_the_agent(agent: AgentProc) -> None:
    pane = Pane(agent.env, 120, 40)
    try:
        pane.run_watch()
        screen = pane.wait(_all_sections, "every section")
        assert re.search("[█]+[░]+", screen), screen  # the used/total bars
        assert re.search(f"[{BLOCKS}]{{4,}}", screen.split("free, last 5 min")[1]), screen  # the GPU sparkline
        assert re.search(r"\x1b\[[0-9;]*3[0-9]", pane.screen(escapes=True)), "no colour without NO_COLOR"
        clock = re.search(r"\d\d:\d\d:\d\d", screen)
        agent.set_gpus({"devices": [fake_gpu(0, free=45 * GiB)]})
        screen = pane.wait(lambda s: "45.00 GiB" in s, "the new free memory")
        assert clock and re.search(r"\d\d:\d\d:\d\d", screen).group() != clock.group()  # type: ignore[union-attr]

        proc = pane.watcher()
        t0, c0 = time.monotonic(), proc.cpu_times()
        time.sleep(20)
        t1, c1 = time.monotonic(), proc.cpu_times()
        share = ((c1.user - c0.user) + (c1.system - c0.system)) / (t1 - t0)
        print(f"\nconduit status --watch CPU: {share:.2%} of one core over {t1 - t0:.1f} s "
              f"(user {c1.user - c0.user:.3f} s, system {c1.system - c0.system:.3f} s)")
        assert share < 0.25, share  # the bound is loose on purpose: the machine is shared
        assert "Traceback" not in pane.screen()
        _quit_and_check(pane, "q")
    finally:
        pane.close()


def test_watch_in_a_narrow_pane_without_colour_quits_on_ctrl_c(agent: AgentProc) -> None:
    pane = Pane(dict(agent.env, NO_COLOR="1"), 60, 30)
    try:
        pane.run_watch()
        screen = pane.wait(lambda s: all(x in s for x in ("channels", "GPUs", "vLLM: ready", "host memory")),
                           "every section in 60 columns")
        assert "Traceback" not in screen and "free, last 5 min" in screen, screen
        assert "Fake H100 #0" not in screen, screen  # the name column is left out at 60 columns
        raw = pane.screen(escapes=True)
        assert not re.search(r"\x1b\[[0-9;]*(3[0-8]|4[0-8]|9[0-7])[;m]", raw), raw  # no foreground/background colour
        pane.tmux("resize-window", "-t", "w", "-x", "130", "-y", "30")  # the view follows the new width
        pane.wait(lambda s: "Fake H100 #0" in s and "5-min min" in s, "the wide layout after a resize")
        _quit_and_check(pane, "C-c")
    finally:
        pane.close()


def test_watch_reports_a_missing_agent_and_picks_it_up(temp_home: Path, tmux: None) -> None:
    agent = AgentProc(temp_home, gpus={"devices": [fake_gpu(0, free=33 * GiB)]})
    agent.sock.parent.mkdir(mode=0o700)
    pane = Pane(agent.env, 100, 30)
    try:
        pane.run_watch()
        pane.wait(lambda s: "agent unreachable" in s, "the unreachable note")
        agent.start()
        screen = pane.wait(lambda s: "33.00 GiB" in s and "vLLM: not configured" in s, "the agent's data")
        assert "agent unreachable" not in screen, screen
        agent.stop()
        screen = pane.wait(lambda s: "agent unreachable" in s, "the note again after the agent stopped")
        assert "33.00 GiB" in screen and "the last data it sent follows" in screen, screen
        _quit_and_check(pane, "q")
    finally:
        pane.close()
        agent.__exit__()
