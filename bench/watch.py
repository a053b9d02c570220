"""Benchmark the CPU use of ``conduit status --watch`` against a bare 1 Hz poll of the same agent, in one run.

Measures, over the same number of seconds each, against one real ``conduit agent`` process (a fake device set of
four GPUs, so the screen has four GPU rows with bars and sparklines):
- the view: ``conduit status --watch`` in a real terminal (a detached tmux pane, 160 x 50), its process's
  ``cpu_times`` (user + system) from psutil, after it has drawn its first screen;
- the baseline: a Python process doing only what the view cannot avoid, one ``GET /v1/status`` a second with
  ``conduit.daemon.agent.client.AgentClient`` and ``json``, nothing drawn;
and prints both as a share of one core, the view's cost per redraw, and the ratio view / baseline.

Goal: under 3 % of one core for the view.

Usage: ``python bench/watch.py [--seconds 30]``; needs tmux. Bounded: about 2 x seconds + 15 s.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import psutil

GiB = 1024**3

POLLER = textwrap.dedent("""
    import sys, time
    from conduit.daemon.agent.client import AgentClient
    with AgentClient(sys.argv[1], timeout_s=2.0) as c:
        due = time.monotonic()
        while True:
            c.get("/v1/status")
            due += 1.0
            time.sleep(max(0.0, due - time.monotonic()))
""")


def _gpus() -> dict[str, object]:
    return {"devices": [{"name": f"Fake H100 #{i}", "uuid": f"GPU-bench-{i}", "total": 80 * GiB,
                         "used": (20 + 10 * i) * GiB, "free": (59 - 10 * i) * GiB, "reserved": GiB,
                         "util": [10 * i, 5], "processes": []} for i in range(4)]}


def _share(proc: psutil.Process, seconds: float) -> float:
    """CPU seconds per wall second of ``proc`` over ``seconds``."""
    t0, c0 = time.monotonic(), proc.cpu_times()
    time.sleep(seconds)
    t1, c1 = time.monotonic(), proc.cpu_times()
    return ((c1.user - c0.user) + (c1.system - c0.system)) / (t1 - t0)


def _wait_socket(sock: Path, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not sock.exists():
        time.sleep(0.1)
    if not sock.exists():
        raise SystemExit(f"the agent did not create {sock} in {timeout} s")


def _view(tmux: list[str], env: dict[str, str], conduit: str) -> psutil.Process:
    """Start the view in a 160 x 50 pane; return its process once the screen shows the GPUs."""
    subprocess.run([*tmux, "new-session", "-d", "-s", "b", "-x", "160", "-y", "50", f"{conduit} status --watch"],
                   env=env, check=True, timeout=20)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        screen = subprocess.run([*tmux, "capture-pane", "-p", "-t", "b"], capture_output=True, text=True,
                                timeout=20).stdout
        if "Fake H100 #3" in screen and "host memory" in screen:
            pid = int(subprocess.run([*tmux, "display-message", "-p", "-t", "b", "#{pane_pid}"],
                                     capture_output=True, text=True, timeout=20).stdout)
            return psutil.Process(pid)
        time.sleep(0.2)
    raise SystemExit(f"the view did not draw in 30 s; the pane shows:\n{screen}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=30.0, help="seconds measured for each (default 30)")
    args = ap.parse_args()
    if shutil.which("tmux") is None:
        raise SystemExit("needs tmux (apt-get install -y tmux)")
    work = Path(tempfile.mkdtemp(prefix="cw-", dir="/tmp"))
    home, sock, gpus = work / "home", work / "run" / "agent.sock", work / "gpus.json"
    home.mkdir()
    gpus.write_text(json.dumps(_gpus()))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CONDUIT_", "XDG_"))}
    env.update(HOME=str(home), CONDUIT_AGENT_SOCKET=str(sock), CONDUIT_FAKE_GPUS=str(gpus), TERM="xterm-256color")
    env.pop("TMUX", None)
    conduit = str(Path(sys.executable).parent / "conduit")
    tmux = ["tmux", "-S", str(work / "tmux.sock"), "-f", "/dev/null"]
    agent = subprocess.Popen([conduit, "agent"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True)
    poller: subprocess.Popen[bytes] | None = None
    try:
        _wait_socket(sock)
        view = _view(tmux, env, conduit)
        time.sleep(2)  # past start-up
        v = _share(view, args.seconds)
        subprocess.run([*tmux, "kill-server"], capture_output=True, timeout=20)
        poller = subprocess.Popen([sys.executable, "-c", POLLER, str(sock)], env=env)
        time.sleep(2)
        b = _share(psutil.Process(poller.pid), args.seconds)
        print(f"CPU over {args.seconds:.0f} s each (share of one core), 4 fake GPUs, 160 x 50 pane:")
        print(f"  conduit status --watch      {v:7.2%}   ({v * 1000:.1f} ms per redraw at 1 Hz)")
        print(f"  bare 1 Hz GET /v1/status    {b:7.2%}   (view x{v / b:.1f} of the bare poll)" if b > 0 else
              f"  bare 1 Hz GET /v1/status    {b:7.2%}")
        print(f"  goal: under 3 % of one core -> {'met' if v < 0.03 else 'NOT met'}")
        return 0
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True, timeout=20)
        for p in (poller, agent):
            if p is not None and p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(15)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(5)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
