"""Crash-detection latency and stop-to-all-gone time of the vLLM supervisor, against tests/helpers/fake_vllm.py.

Baselines measured in the same run, interleaved with the supervisor rounds:
  * sigchld: the kernel delivering SIGCHLD for a trivial child (``sleep``) after SIGKILL, read with
    ``sigtimedwait`` (SIGCHLD blocked), i.e. the floor any exit-based detection sits on;
  * asyncio wait: ``await proc.wait()`` returning for a trivial asyncio child after SIGKILL (the mechanism the
    supervisor uses, without the supervisor).

Measured per round, with a fake server that has EngineCore and Worker children (three processes):
  * detect: SIGKILL of the API server -> the supervisor's exit watcher has woken up;
  * to restarting: SIGKILL -> state ``restarting`` (the rest of the group is killed and checked gone first);
  * stop: ``await stop()`` on a ready server -> it returns, with psutil finding nothing of the group left.

    .venv/bin/python bench/supervisor.py --runs 20

Prints milliseconds (median, p90, min, max) and each median as a ratio of the sigchld median. Timings are
wall-clock on a shared machine: compare ratios within one run, not numbers across runs.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FAKE = str(ROOT / "tests" / "helpers" / "fake_vllm.py")


def sigchld_once() -> float:
    """Seconds from SIGKILL of a trivial child to SIGCHLD being delivered to us."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})
    try:
        child = subprocess.Popen(["sleep", "60"])
        time.sleep(0.02)
        t0 = time.perf_counter()
        os.kill(child.pid, signal.SIGKILL)
        signal.sigtimedwait({signal.SIGCHLD}, 5.0)
        dt = time.perf_counter() - t0
        child.wait()
        return dt
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


async def asyncio_wait_once() -> float:
    proc = await asyncio.create_subprocess_exec("sleep", "60")
    await asyncio.sleep(0.02)
    t0 = time.perf_counter()
    proc.kill()
    await proc.wait()
    return time.perf_counter() - t0


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def supervisor_round(children: bool) -> tuple[float, float, float]:
    from conduit.daemon.agent.gpu import memory_by_index
    from conduit.daemon.config.vllm import VllmSettings
    from conduit.daemon.vllm.supervisor import Supervisor, VllmState

    s = VllmSettings.model_validate({
        "model": "fake", "port": _port(), "command": [sys.executable, FAKE],
        "extra_env": {"FAKE_VLLM_CHILDREN": "1" if children else "0", "FAKE_VLLM_STARTUP_S": "0"},
        "health_interval_s": 0.5, "stop_grace_s": 5,
        "restart": {"backoff_initial_s": 60, "backoff_max_s": 60},  # measure, then stop during the backoff
    })
    sup = Supervisor(s, memory_probe=memory_by_index)
    task = asyncio.create_task(sup.run())
    try:
        await sup.wait_for(VllmState.READY, timeout_s=30)
        await asyncio.sleep(0.05)
        pid = sup.snapshot()["pid"]
        t0 = time.perf_counter()
        m0 = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        await sup.wait_for(VllmState.RESTARTING, VllmState.FAILED, timeout_s=30)
        to_restarting = time.perf_counter() - t0
        detect = (sup.exit_seen_monotonic or m0) - m0
        await sup.stop()
        await sup.start()
        await sup.wait_for(VllmState.READY, timeout_s=30)
        await asyncio.sleep(0.05)
        t1 = time.perf_counter()
        snap = await sup.stop()
        stop = time.perf_counter() - t1
        assert snap["state"] == "stopped" and not sup.pids()
        return detect, to_restarting, stop
    finally:
        await sup.aclose(stop_vllm=True)
        if not task.done():
            task.cancel()


def _row(name: str, xs: list[float], base: float) -> str:
    ms = sorted(x * 1000 for x in xs)
    med = statistics.median(ms)
    p90 = ms[min(len(ms) - 1, int(round(0.9 * (len(ms) - 1))))]
    return f"{name:<34} {med:9.3f} {p90:9.3f} {ms[0]:9.3f} {ms[-1]:9.3f} {med / base:10.1f}x"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--no-children", action="store_true", help="fake server without EngineCore/Worker")
    args = ap.parse_args()
    os.environ["HOME"] = tempfile.mkdtemp(prefix="conduit-bench-")  # state dir and logs go there
    for var in ("XDG_STATE_HOME", "XDG_RUNTIME_DIR"):
        os.environ.pop(var, None)

    sigchld: list[float] = []
    awaited: list[float] = []
    detect: list[float] = []
    restarting: list[float] = []
    stop: list[float] = []
    for _ in range(args.runs):
        sigchld.append(sigchld_once())
        awaited.append(asyncio.run(asyncio_wait_once()))
        d, r, s = asyncio.run(supervisor_round(not args.no_children))
        detect.append(d)
        restarting.append(r)
        stop.append(s)

    base = statistics.median(sigchld) * 1000
    procs = "1 process" if args.no_children else "3 processes (API server, EngineCore, Worker)"
    print(f"vLLM supervisor vs fake server, {args.runs} runs, {procs}; python {sys.version.split()[0]}")
    print(f"{'milliseconds':<34} {'median':>9} {'p90':>9} {'min':>9} {'max':>9} {'/sigchld':>11}")
    print(_row("baseline: SIGCHLD delivery", sigchld, base))
    print(_row("baseline: asyncio proc.wait()", awaited, base))
    print(_row("crash detect (exit watcher woke)", detect, base))
    print(_row("crash -> restarting (group gone)", restarting, base))
    print(_row("stop -> all gone (TERM, verify)", stop, base))


if __name__ == "__main__":
    main()
