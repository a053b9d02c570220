"""CLI: ``conduit vllm run | logs`` (thin: parse, call, print, return an exit code).

``run`` supervises vLLM in the foreground from the profile's ``[vllm]`` table until Ctrl-C (then stops it),
printing each state change. ``logs`` prints the end of the current launch's log. ``start``/``stop``/
``restart`` belong to the agent (they call its socket) and are added once ``conduit.daemon.client`` exists.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import time
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from conduit.adapters.errors import ConduitError
from conduit.daemon import paths
from conduit.daemon.cli import app, state
from conduit.daemon.supervisor import Supervisor, VllmState
from conduit.daemon.vllm_settings import VllmSettings, load

vllm_app = typer.Typer(help="Supervise the local vLLM server described by the profile's vllm table.",
                       no_args_is_help=True)
app.add_typer(vllm_app, name="vllm")

out = Console(highlight=False)
err = Console(stderr=True, highlight=False)


def settings_from_profile(profile: str | None) -> VllmSettings:
    """The validated ``[vllm]`` table of the profile (``--profile``/``CONDUIT_PROFILE``/default path).

    Raises:
        ProfileError: the profile is invalid (file, line, key path), or its ``[vllm]`` table is.
        ConduitError: the profile has no ``[vllm]`` table.
    """
    from conduit.daemon.profile import load_profile

    loaded = load_profile(profile)
    table = loaded.model.vllm
    if not table:
        raise ConduitError(f"{loaded.path}: no [vllm] table", 'add one: at least `[vllm]` with `model = "..."`')
    return load(table, where=str(loaded.path))


def log_path() -> Path:
    """The current launch's log: ``state_dir()/vllm/vllm.log``."""
    return paths.state_dir() / "vllm" / "vllm.log"


def tail_text(path: Path, lines: int) -> str:
    """The last ``lines`` lines of ``path`` (reads at most the last 4 MiB).

    Raises:
        ConduitError: no log yet.
    """
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - 4 * 1024 * 1024))
            data = f.read().decode("utf-8", errors="replace")
    except FileNotFoundError:
        raise ConduitError(f"{path}: no vLLM log yet", "start vLLM first (`conduit vllm run`)") from None
    return "\n".join(data.splitlines()[-lines:]) if lines > 0 else ""


async def run_foreground(settings: VllmSettings, on_change: Any = None) -> dict[str, Any]:
    """Supervise until SIGINT/SIGTERM, then stop vLLM; return the final snapshot.

    ``on_change(snapshot)`` is called on every state change.
    """
    sup = Supervisor(settings)
    task = asyncio.create_task(sup.run())
    loop = asyncio.get_running_loop()
    quit_ev = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, quit_ev.set)
    try:
        seen = None
        while not quit_ev.is_set() and not task.done():
            if sup.state is not seen:
                seen = sup.state
                if on_change:
                    on_change(sup.snapshot())
            waiter = asyncio.create_task(sup.wait_for(*(s for s in VllmState if s is not seen), timeout_s=3600))
            quitter = asyncio.create_task(quit_ev.wait())
            await asyncio.wait({waiter, quitter, task}, return_when=asyncio.FIRST_COMPLETED)
            for t in (waiter, quitter):
                t.cancel()
        if task.done():
            task.result()  # surface a crash of the loop itself
        await sup.aclose(stop_vllm=True)
        if on_change:
            on_change(sup.snapshot())
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    return sup.snapshot()


def _print_change(snap: dict[str, Any]) -> None:
    stamp = time.strftime("%H:%M:%S", time.localtime(snap["since"]))
    line = f"{stamp} vllm {snap['state']}"
    if snap["state"] == "starting" and snap["argv"]:
        line += f" pid {snap['pid']} ({snap['base_url']}, model {snap['served_model_name']})"
    if snap["state"] == "ready":
        line += f" at {snap['base_url']}/v1"
        if snap["kv_cache"]:
            line += f"; KV cache {snap['kv_cache']['tokens']:,} tokens"
    out.print(line, markup=False)
    f = snap["last_failure"]
    if snap["state"] in ("failed", "restarting") and f:
        out.print(f"  reason: {f['reason']}\n  fix: {f['fix']}", markup=False, soft_wrap=True)
    for w in snap["warnings"]:
        if w not in _printed:
            _printed.add(w)
            err.print(f"  warning: {w}", markup=False, soft_wrap=True)


_printed: set[str] = set()


@vllm_app.command("run")
def run_cmd(as_json: bool = typer.Option(False, "--json", help="Print the final snapshot as JSON.")) -> int:
    """Run vLLM in the foreground from the profile's vllm table until Ctrl-C (then stop it cleanly)."""
    settings = settings_from_profile(state.profile)
    snap = asyncio.run(run_foreground(settings, _print_change))
    if as_json:
        out.print_json(json.dumps(snap))
    return 0 if snap["state"] == "stopped" else 1


@vllm_app.command("logs")
def logs_cmd(
    lines: int = typer.Option(100, "-n", "--lines", help="How many lines from the end."),
    follow: bool = typer.Option(False, "-f", "--follow", help="Keep printing new lines (Ctrl-C ends)."),
) -> int:
    """Print the end of the vLLM log (the current launch; earlier ones are vllm.log.1, .2, ...)."""
    path = log_path()
    text = tail_text(path, lines)
    if text:
        print(text, flush=True)
    if not follow:
        return 0
    pos = path.stat().st_size
    try:
        while True:
            time.sleep(0.5)
            try:
                size = path.stat().st_size
            except FileNotFoundError:
                continue
            if size < pos:  # rotated or truncated: start from the top of the new file
                pos = 0
            if size > pos:
                with open(path, "rb") as f:
                    f.seek(pos)
                    print(f.read().decode("utf-8", errors="replace"), end="", flush=True)
                pos = size
    except KeyboardInterrupt:
        return 0
