"""CLI: ``conduit daemon`` and ``conduit service install`` (thin: parse, call, print).

The work is in ``conduit.daemon.sync.syncd`` (the daemon) and ``install_units`` below (systemd user units);
``conduit key rotate`` lives with the other key commands in ``conduit.daemon.cli.key``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import typer

from conduit.daemon.cli.app import state
from conduit.daemon.config import paths
from conduit.daemon.config.profile import load_profile
from conduit.errors import ConduitError

commands = typer.Typer(suggest_commands=False)  # loaded lazily by the root app (cli.commands.COMMANDS); click
# itself says "Did you mean" for a mistyped subcommand, and typer's own suggestion (inherited by sub-apps) repeats it

UNITS = ("conduit-sync.service", "conduit-agent.service")
TEMPLATE_EXEC = "ExecStart=/usr/bin/env conduit "


@commands.command("daemon")
def daemon_cmd(
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Also log every file event and each diff (masked)."),
    debounce_ms: int = typer.Option(50, "--debounce-ms", min=0, max=10_000,
                                    help="Quiet time before re-reading a profile that did not parse: a save in progress (ms)."),
) -> int:
    """Watch the profile, its key files and the tools' files; keep every tool in sync (runs until stopped)."""
    from conduit.daemon.sync.syncd import run_daemon  # lazy for start-up speed: watchdog, only this command

    return run_daemon(state.profile, verbose=verbose, debounce_s=debounce_ms / 1000)


service_app = typer.Typer(name="service", help="Install conduit's systemd user units.", no_args_is_help=True)
commands.add_typer(service_app, name="service")


@dataclass
class InstallResult:
    """What ``install_units`` did: units written, commands (run or to run), warnings, command failures."""

    written: list[Path] = field(default_factory=list)
    commands: list[list[str]] = field(default_factory=list)
    ran: bool = False
    warnings: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    succeeded: int = 0  # how many of ``commands`` ran with exit 0, in order


def unit_dir(environ: dict[str, str] | None = None) -> Path:
    """``$XDG_CONFIG_HOME/systemd/user`` (default ``~/.config/systemd/user``)."""
    env = os.environ if environ is None else environ
    base = env.get("XDG_CONFIG_HOME", "").strip() or str(Path(env.get("HOME") or Path.home()) / ".config")
    return Path(base) / "systemd" / "user"


def unit_template(name: str) -> str:
    """The text of a unit shipped in ``systemd/`` (package data ``conduit.systemd``, or the source tree)."""
    try:
        from importlib.resources import files

        return (files("conduit.systemd") / name).read_text(encoding="utf-8")
    except (ModuleNotFoundError, FileNotFoundError, OSError):
        # daemon/cli/daemon.py -> the source tree's root, where systemd/ is
        return (Path(__file__).resolve().parents[2] / "systemd" / name).read_text(encoding="utf-8")


def conduit_command() -> str:
    """How systemd should start conduit: this installation's ``conduit`` script (next to the interpreter),
    else the one on PATH, else ``<python> -m conduit.daemon.cli``."""
    beside = Path(sys.executable).parent / "conduit"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("conduit")
    if found:
        return found
    return f"{sys.executable} -m conduit.daemon.cli"


def render_unit(name: str, command: str | None = None) -> str:
    """A unit's text with ``ExecStart`` pointing at ``command`` (default ``conduit_command()``)."""
    text = unit_template(name)
    return text.replace(TEMPLATE_EXEC, f"ExecStart={command or conduit_command()} ")


def env_key_warnings(profile_path: str | None = None) -> list[str]:
    """One warning per channel whose key is an environment variable (a systemd service does not see shell
    exports). An invalid or missing profile gives no warnings here (the daemon reports it)."""
    try:
        profile = load_profile(profile_path)
    except ConduitError:
        return []
    out = []
    for name, ch in profile.model.channels.items():
        if ch.key is not None and ch.key.env:
            out.append(f"channels.{name}.key reads ${ch.key.env}: a systemd user service does not see variables "
                       f"exported in your shell. Use a key file, or `conduit key set {name}` and "
                       f'key = {{ secret = "{name}" }}')
    return out


def install_units(*, enable: bool = False, agent: bool = False, profile_path: str | None = None,
                  command: str | None = None) -> InstallResult:
    """Write conduit's units to ``unit_dir()`` (mode 0644), create conduit's state directory (0700; the sync
    unit's hardening needs it to exist), and with ``enable`` run ``systemctl --user daemon-reload`` and
    ``enable --now`` (the sync unit; also the agent's with ``agent``).

    Raises:
        ConduitError: the unit directory cannot be written.
    """
    res = InstallResult()
    target = unit_dir()
    try:
        target.mkdir(parents=True, exist_ok=True)
        paths.state_dir().mkdir(parents=True, exist_ok=True, mode=0o700)
        for name in UNITS:
            p = target / name
            p.write_text(render_unit(name, command), encoding="utf-8")
            p.chmod(0o644)
            res.written.append(p)
    except OSError as exc:
        raise ConduitError(f"cannot write the units to {target}: {exc.strerror or exc}",
                           "check that the directory is writable") from None
    wanted = ["conduit-sync.service"] + (["conduit-agent.service"] if agent else [])
    res.commands = [["systemctl", "--user", "daemon-reload"], ["systemctl", "--user", "enable", "--now", *wanted]]
    res.warnings = env_key_warnings(profile_path)
    if enable:
        if shutil.which("systemctl") is None:
            res.errors.append("systemctl is not installed here; run the commands above on a machine with systemd")
            return res
        res.ran = True
        for cmd in res.commands:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
            if proc.returncode != 0:
                res.errors.append(systemctl_failure(cmd, proc.returncode, proc.stderr or proc.stdout))
                break
            res.succeeded += 1
    return res


_NO_USER_BUS = ("failed to connect to bus", "failed to connect to user scope bus", "no medium found",
                "$dbus_session_bus_address", "system has not been booted with systemd")


def systemctl_failure(cmd: list[str], returncode: int, output: str) -> str:
    """One line for a failed ``systemctl --user`` command: when no user manager answers (a root shell, ``su``,
    an SSH session without lingering, a container), say so and what to do; else its last line of output."""
    last = next((ln.strip() for ln in reversed(output.strip().splitlines()) if ln.strip()), "no output")
    said = f"`{' '.join(cmd)}` failed (exit {returncode}): {last}"
    if any(marker in output.lower() for marker in _NO_USER_BUS):
        return (f"{said}. No systemd user manager is running for this session (common under `su`, `sudo`, a "
                "container, or an SSH login without lingering): log in as this user directly, or run "
                "`loginctl enable-linger $USER` and then `export XDG_RUNTIME_DIR=/run/user/$(id -u)`, then run the "
                "commands again; without systemd, run `conduit daemon` yourself (e.g. from your session's autostart)")
    return said


@service_app.command("install")
def service_install(
    enable: bool = typer.Option(False, "--enable", help="Also run `systemctl --user daemon-reload` and "
                                "`enable --now` the sync unit."),
    agent: bool = typer.Option(False, "--agent", help="With --enable, also enable the agent's unit."),
) -> int:
    """Copy conduit-sync.service and conduit-agent.service to ~/.config/systemd/user/."""
    res = install_units(enable=enable, agent=agent, profile_path=state.profile)
    for p in res.written:
        typer.echo(f"wrote {p}")
    for w in res.warnings:
        typer.echo(f"warning: {w}", err=True)
    if not res.ran:
        typer.echo("next:" if not enable else "run these:")
        for cmd in res.commands:
            typer.echo("  " + " ".join(cmd))
        if not agent:
            typer.echo("  # and, for vLLM supervision and the status socket (`conduit status`, `conduit wait`):\n"
                       "  systemctl --user enable --now conduit-agent.service")
    elif res.succeeded:
        typer.echo("ran: " + "; ".join(" ".join(c) for c in res.commands[: res.succeeded]))
    for e in res.errors:
        typer.echo(f"error: {e}", err=True)
    return 1 if res.errors else 0
