"""CLI: ``conduit vllm start | stop | restart | run | logs`` (thin: parse, call, print, return an exit code).

``start``/``stop``/``restart`` ask the agent (``POST /v1/vllm/{action}`` through
``conduit.daemon.agent.client.AgentClient``), which supervises the vLLM of the profile's ``[vllm]`` table. Exit codes
(docs/design.md): 0 done (``stop``: nothing left running; ``start``/``restart``: launched, or ready with ``--wait``),
1 refused or failed (no ``[vllm]`` table, a diagnosed start-up failure, still not ready at ``--timeout``),
2 agent unreachable, 3 bad arguments. ``run`` supervises vLLM in the foreground without the agent until Ctrl-C
(then stops it), printing each state change. ``logs`` prints the end of the current launch's log.
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

from conduit.daemon.agent.client import AgentClient, AgentError
from conduit.daemon.agent.gpu import capability_by_index, default_probe, memory_by_index
from conduit.daemon.cli.agent import vllm_lines
from conduit.daemon.cli.app import state
from conduit.daemon.cli.console import make_console
from conduit.daemon.config import paths
from conduit.daemon.config.redaction import REDACTOR
from conduit.daemon.config.vllm import VllmSettings
from conduit.daemon.vllm.supervisor import Supervisor, VllmState
from conduit.daemon.vllm.tree import become_subreaper
from conduit.errors import ConduitError
from conduit.redact import mask_key_flags
from conduit.units import parse_duration

commands = typer.Typer(suggest_commands=False)  # loaded lazily by the root app (cli.commands.COMMANDS); click
# itself says "Did you mean" for a mistyped subcommand, and typer's own suggestion (inherited by sub-apps) repeats it

vllm_app = typer.Typer(help="Supervise the local vLLM server described by the profile's vllm table.",
                       no_args_is_help=True)
commands.add_typer(vllm_app, name="vllm")

out = make_console()
err = make_console(stderr=True)


def settings_from_profile(profile: str | None) -> VllmSettings:
    """The validated ``[vllm]`` table of the profile (``--profile``/``CONDUIT_PROFILE``/default path).

    Raises:
        ProfileError: the profile is invalid (file, line, key path), or its ``[vllm]`` table is.
        ConduitError: the profile has no ``[vllm]`` table.
    """
    from conduit.daemon.config.profile import load_profile
    from conduit.daemon.config.resolve import vllm_settings

    loaded = load_profile(profile)
    settings = vllm_settings(loaded)
    if settings is None:
        raise ConduitError(f"{loaded.path}: no [vllm] table", 'add one: at least `[vllm]` with `model = "..."`')
    return settings


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

    ``on_change(snapshot)`` is called on every state change. The launch preflight reads the GPUs through
    ``conduit.daemon.agent.gpu`` (real NVML, or the fake named by ``$CONDUIT_FAKE_GPUS``), as the agent does.
    """
    probe = default_probe()
    become_subreaper()  # what the launch leaves behind re-parents to this process, and is stopped with it
    sup = Supervisor(settings, memory_probe=lambda: memory_by_index(probe),
                     capability_probe=lambda: capability_by_index(probe), redactor=REDACTOR)
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
    if not settings.manage:
        raise ConduitError(f"the profile's [vllm] has manage = false: the engine at {settings.base_url} is "
                           "observed, not run by conduit", "run it yourself, or set manage = true")
    snap = asyncio.run(run_foreground(settings, _print_change))
    if as_json:
        out.print_json(json.dumps(snap))
    return 0 if snap["state"] == "stopped" else 1


def _learn_vllm_key() -> None:
    """Teach ``REDACTOR`` the profile's ``[vllm].api_key`` (vLLM may print it); a profile that cannot be read
    teaches nothing (the key-like flags are masked all the same)."""
    with contextlib.suppress(ConduitError, OSError):
        settings = settings_from_profile(state.profile)
        REDACTOR.add([settings.api_key.get_secret_value()] if settings.api_key else [])


@vllm_app.command("logs")
def logs_cmd(
    lines: int = typer.Option(100, "-n", "--lines", help="How many lines from the end."),
    follow: bool = typer.Option(False, "-f", "--follow", help="Keep printing new lines (Ctrl-C ends)."),
) -> int:
    """Print the end of the vLLM log (the current launch; earlier ones are vllm.log.1, .2, ...), values of
    key-like flags masked."""
    path = log_path()
    _learn_vllm_key()
    text = tail_text(path, lines)
    if text:
        print(REDACTOR(mask_key_flags(text)), flush=True)
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
                    print(REDACTOR(mask_key_flags(f.read().decode("utf-8", errors="replace"))), end="", flush=True)
                pos = size
    except KeyboardInterrupt:
        return 0


# --------------------------------------------------------------------------------------------- through the agent

EXIT_OK, EXIT_FAILED, EXIT_UNREACHABLE, EXIT_BAD_ARGS = 0, 1, 2, 3
#: States that count as "launched" for start/restart without --wait.
_LAUNCHED = ("starting", "ready")


def vllm_action(client: Any, action: str, *, wait_ready_s: float | None = None, poll_s: float = 0.5,
                stop_timeout_s: float = 120.0) -> tuple[int, dict[str, Any], str | None]:
    """Ask the agent to ``start``, ``stop`` or ``restart`` vLLM and judge the outcome.

    Args:
        client: a ``conduit.daemon.agent.client.AgentClient`` (its timeout must exceed the agent's 30 s wait).
        action: ``start`` | ``stop`` | ``restart``.
        wait_ready_s: for start/restart, also wait up to this many seconds for ``ready`` (None: do not wait).
        stop_timeout_s: how long a stop the agent answered 202 (still stopping) is followed, seconds.
    Returns:
        ``(exit code, the last /v1/vllm body, an error line or None)``: 0 done, 1 refused/failed/not ready.
    Raises:
        AgentUnreachable: the agent does not answer (exit code 2).
    """
    try:
        snap = client.post(f"/v1/vllm/{action}")
    except AgentError as exc:
        body = exc.body if isinstance(exc.body, dict) else {}
        return EXIT_FAILED, body, str(exc)
    deadline = time.monotonic() + (stop_timeout_s if action == "stop" else (wait_ready_s or 0.0))
    want = ("stopped",) if action == "stop" else ("ready",) if wait_ready_s is not None else _LAUNCHED
    final = ("stopped", "failed") if action == "stop" else ("ready", "failed", "stopped")
    while (snap.get("pending") or snap.get("state") not in want) and snap.get("state") not in final:
        if time.monotonic() >= deadline:
            break
        time.sleep(poll_s)
        snap = client.get("/v1/vllm")
    code = EXIT_OK if snap.get("state") in want and not snap.get("pending") else EXIT_FAILED
    line = None
    if code:
        line = f"vLLM is {snap.get('state')}" + (" (still pending)" if snap.get("pending") else "")
        if wait_ready_s is not None and snap.get("state") not in final:
            line += f" after {wait_ready_s:g} s"
    return code, snap, line


def observed_refusal(action: str, profile: str | None) -> str | None:
    """Why ``action`` is refused when the profile's ``[vllm]`` has ``manage = false`` (an engine conduit only
    observes), else None; a profile that cannot be read refuses nothing here (the agent still judges)."""
    try:
        settings = settings_from_profile(profile)
    except (ConduitError, OSError):
        return None
    if settings.manage:
        return None
    return (f"cannot {action} the engine at {settings.base_url}: the profile's [vllm] has manage = false "
            "(conduit only observes an engine you run yourself); "
            f"{action} it the way you run it (docker, systemd...), or set manage = true for conduit to launch it")


def _agent_action(action: str, wait: bool, timeout: str, socket: Path | None) -> int:
    refused = observed_refusal(action, state.profile)
    if refused:
        err.print(f"error: {refused}", markup=False, soft_wrap=True)
        return EXIT_FAILED
    wait_s = parse_duration(timeout) if wait else None
    with AgentClient(socket, timeout_s=45.0) as client:
        code, snap, line = vllm_action(client, action, wait_ready_s=wait_s)
    for text in vllm_lines(snap) if snap.get("state") else []:
        (err if code else out).print(text, markup=False, soft_wrap=True)
    if line:
        err.print(f"error: {line}", markup=False, soft_wrap=True)
    return code


SocketOpt = typer.Option(None, "--socket", help="The agent's socket (default: $XDG_RUNTIME_DIR/conduit/agent.sock).")
WaitOpt = typer.Option(False, "--wait", help="Wait until vLLM is ready (exit 1 if it fails or --timeout passes).")
TimeoutOpt = typer.Option("10m", "--timeout", help="With --wait: give up after this long (90s, 10m).")


@vllm_app.command("start")
def start_cmd(wait: bool = WaitOpt, timeout: str = TimeoutOpt, socket: Path = SocketOpt) -> int:
    """Ask the agent to launch vLLM (after a stop or a failure). Exit 0 launched, 1 refused/failed, 2 no agent."""
    return _agent_action("start", wait, timeout, socket)


@vllm_app.command("stop")
def stop_cmd(socket: Path = SocketOpt) -> int:
    """Ask the agent to stop vLLM: SIGTERM to its process group, grace, SIGKILL, checked gone. It stays
    stopped until `conduit vllm start` (or an agent restart). Exit 0 stopped, 1 not stopped, 2 no agent."""
    return _agent_action("stop", False, "0", socket)


@vllm_app.command("restart")
def restart_cmd(wait: bool = WaitOpt, timeout: str = TimeoutOpt, socket: Path = SocketOpt) -> int:
    """Ask the agent to stop vLLM and launch it again. Exit 0 launched, 1 refused/failed, 2 no agent."""
    return _agent_action("restart", wait, timeout, socket)
