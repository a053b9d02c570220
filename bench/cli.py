"""Benchmark how fast ``conduit`` commands start, against ``python -c pass`` of the same interpreter.

Measures the wall time of each of these, run as a person runs them (the ``conduit`` console script next to
this interpreter, a fresh process each time, output to a pipe), in a temporary HOME:
- ``conduit --help``,
- ``conduit sync`` with nothing to change (a profile and one tool file, synced once before measuring),
- ``conduit doctor``,
- ``conduit status`` (the tables) and ``conduit status --json``, against a real ``conduit agent`` started under
  that HOME on its own socket (``CONDUIT_AGENT_SOCKET``) with a fake one-GPU device set (``CONDUIT_FAKE_GPUS``),
- ``python -c pass`` (the floor of any Python command),
- the libraries' floor: ``import tomlkit`` and one pydantic model built and used, what every command that
  reads the profile (``sync``, ``doctor``) loads before any code of conduit's: it shows how much of their time
  is conduit's own.

The commands are interleaved round by round (so drift hits all alike); each figure is the median of N rounds,
printed with its ratio to the floor. Goals: ``sync`` and ``--help`` within x5, ``status`` within x6,
``status --json`` within x1.5.

Usage: ``python bench/cli.py [--runs 15]``. Bounded: every command has a 60 s timeout, the agent 30 s to start;
about runs x 6 command starts (well under a minute with the defaults on an idle machine).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GiB = 1024**3
PROFILE = """version = 1
channel = "local"
model = "claude-sonnet-4-20250514"

[channels.local]
base_url = "http://127.0.0.1:9/api"
protocols = ["openai", "anthropic"]
key = { file = "~/.config/conduit/keys/local" }
auth = "bearer"

[tools.claude_code]
"""
FAKE_GPUS = {"devices": [{"name": "Fake H100 #0", "uuid": "GPU-fake-0", "total": 80 * GiB, "used": 19 * GiB,
                          "free": 60 * GiB, "reserved": GiB, "util": [10, 5], "processes": []}]}


def conduit_exe() -> str:
    """The ``conduit`` console script of this interpreter."""
    exe = Path(sys.executable).parent / "conduit"
    if not exe.exists():
        sys.exit(f"no conduit script next to {sys.executable}: install the project (pip install -e .)")
    return str(exe)


def make_home(root: Path) -> Path:
    """A HOME with a profile, its key file and one tool file (Claude Code's settings.json)."""
    home = root / "home"
    cfg = home / ".config" / "conduit"
    (cfg / "keys").mkdir(parents=True)
    key = cfg / "keys" / "local"
    key.write_text("sk-bench-0123456789abcdef\n")
    key.chmod(0o600)
    (cfg / "profile.toml").write_text(PROFILE)
    (home / ".claude").mkdir()
    (home / ".claude" / "settings.json").write_text("{}\n")
    return home


def healthy(sock: Path) -> bool:
    """The agent answers ``GET /v1/healthz`` with ok."""
    conn = http.client.HTTPConnection("localhost", timeout=2)
    try:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(2)
        s.connect(str(sock))
        conn.sock = s
        conn.request("GET", "/v1/healthz")
        return bool(json.loads(conn.getresponse().read() or b"{}").get("ok"))
    except (OSError, ValueError):
        return False
    finally:
        conn.close()


def start_agent(env: dict[str, str], sock: Path, log: Path) -> subprocess.Popen[bytes]:
    """``conduit agent`` on ``sock``; returns once it is healthy (exits the bench after 30 s)."""
    with open(log, "wb") as out:
        proc = subprocess.Popen([conduit_exe(), "agent"], env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"agent exited {proc.returncode}: {log.read_text()}")
        if healthy(sock):
            return proc
        time.sleep(0.05)
    stop(proc)
    sys.exit(f"agent not healthy in 30 s: {log.read_text()}")


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL the process group after 15 s."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)


def timed(argv: list[str], env: dict[str, str], cwd: Path) -> float:
    """Wall seconds of one run of ``argv``; exits the bench when it fails."""
    t0 = time.perf_counter()
    r = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, timeout=60)
    dt = time.perf_counter() - t0
    if r.returncode != 0:
        sys.exit(f"{' '.join(argv)} exited {r.returncode}: {r.stderr.decode(errors='replace')}")
    return dt


def measure(runs: int, root: Path) -> dict[str, list[float]]:
    """Wall times of every case over ``runs`` interleaved rounds, in seconds."""
    home = make_home(root)
    run_dir = root / "run"
    run_dir.mkdir(mode=0o700)
    sock = run_dir / "agent.sock"
    gpus = root / "gpus.json"
    gpus.write_text(json.dumps(FAKE_GPUS))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CONDUIT_", "XDG_"))}
    env.update(HOME=str(home), CONDUIT_AGENT_SOCKET=str(sock), CONDUIT_FAKE_GPUS=str(gpus), COLUMNS="120")
    exe = conduit_exe()
    cases = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "libraries' floor": [sys.executable, "-c", LIBRARY_FLOOR],
        "conduit --help": [exe, "--help"],
        "conduit sync": [exe, "sync"],
        "conduit doctor": [exe, "doctor"],
        "conduit status": [exe, "status"],
        "conduit status --json": [exe, "status", "--json"],
    }
    timed([exe, "sync"], env, home)  # the first sync writes; the measured ones have nothing to change
    agent = start_agent(env, sock, root / "agent.log")
    try:
        for argv in cases.values():  # warm the page cache and .pyc files
            timed(argv, env, home)
        times: dict[str, list[float]] = {name: [] for name in cases}
        for _ in range(runs):
            for name, argv in cases.items():
                times[name].append(timed(argv, env, home))
    finally:
        stop(agent)
    return times


LIBRARY_FLOOR = "import tomlkit\nfrom pydantic import BaseModel\nclass M(BaseModel):\n    x: int\nM(x=1)"
"""What any command that reads the profile must load before conduit's own code: tomlkit (round-trip TOML) and
pydantic with one model built and used (its first model imports most of pydantic's internals)."""

GOALS = {"conduit --help": 5.0, "conduit sync": 5.0, "conduit status": 6.0, "conduit status --json": 1.5}


def main() -> int:
    """Run the bench and print a table: median ms, ratio to ``python -c pass``, goal."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=15, help="Rounds; each figure is the median (default 15).")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="cb-", dir="/tmp") as tmp:
        times = measure(max(1, args.runs), Path(tmp))
    floor = statistics.median(times["python -c pass"])
    libs = statistics.median(times["libraries' floor"])
    print(f"{'command':<24}{'median ms':>10}{'ratio':>8}  goal  (median of {args.runs}, {sys.executable})")
    for name, ts in times.items():
        med = statistics.median(ts)
        goal = GOALS.get(name)
        verdict = "" if goal is None else f"x{goal:g} {'met' if med / floor <= goal else 'MISSED'}"
        print(f"{name:<24}{med * 1000:>10.1f}{med / floor:>7.2f}x  {verdict}")
    sync = statistics.median(times["conduit sync"])
    print(f"conduit sync beyond the libraries' floor: {(sync - libs) * 1000:.1f} ms "
          f"(x{sync / libs:.2f} of it; the floor alone is x{libs / floor:.2f} of python -c pass)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
