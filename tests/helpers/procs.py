"""Process checks shared by the supervisor tests (fake and real vLLM): which processes are alive, their names,
the process group of a launch. Zombies count as gone: they hold no memory and are reaped by their parent."""

from __future__ import annotations

import os

import psutil


def alive(pids: set[int]) -> set[int]:
    """The pids in ``pids`` that still run (not zombies)."""
    out = set()
    for p in pids:
        try:
            if psutil.Process(p).status() != psutil.STATUS_ZOMBIE:
                out.add(p)
        except psutil.Error:
            pass
    return out


def names(pids: set[int]) -> set[str]:
    """Process names of ``pids`` (those that still exist)."""
    out = set()
    for p in pids:
        try:
            out.add(psutil.Process(p).name())
        except psutil.Error:
            pass
    return out


def has_engine_and_worker(pids: set[int]) -> bool:
    """EngineCore and a Worker among ``pids`` (psutil gives the kernel's 15-character name, or the full
    title vLLM sets with setproctitle when the command line carries it)."""
    ns = names(pids)
    return any(n.startswith("VLLM::EngineCor") for n in ns) and any(n.startswith("VLLM::Worker") for n in ns)


def group(pgid: int) -> set[int]:
    """Live processes of process group ``pgid`` (the API server's group: EngineCore and Worker are in it)."""
    out = set()
    for p in psutil.process_iter(["status"]):
        try:
            if p.info["status"] != psutil.STATUS_ZOMBIE and os.getpgid(p.pid) == pgid:
                out.add(p.pid)
        except (ProcessLookupError, psutil.Error):
            pass
    return out


def cpu_wait_s() -> float:
    """Seconds this process's live threads have spent runnable but waiting for a CPU (``run_delay``, the second
    field of ``/proc/self/task/*/schedstat``, ns); 0.0 where the kernel does not say. A timing check skips its
    exact figures when the machine kept the test waiting (the shape of the result is still checked)."""
    from pathlib import Path

    total = 0
    for f in Path("/proc/self/task").glob("*/schedstat"):
        try:
            total += int(f.read_text().split()[1])
        except (OSError, IndexError, ValueError):
            continue
    return total / 1e9
