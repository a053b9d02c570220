"""CLI: ``conduit verify [TOOL...]`` (thin: parse, call ``conduit.daemon.verify.verify.verify``, print, exit code).

Exit codes: 0 every checked tool sent what the profile says; 1 one did not (or a named tool is not installed,
or none is, or the profile does not load, as in every command); 3 an unknown or not-enabled tool name. Everything printed passes through the ``REDACTOR``:
keys appear only as fingerprints.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape as esc

from conduit.daemon.cli.app import EXIT_BAD_ARGS, state
from conduit.daemon.config.profile import load_profile
from conduit.daemon.config.redaction import REDACTOR, redact_data
from conduit.daemon.verify.verify import ToolCheck, exit_code, verify
from conduit.errors import BadArguments, ProfileError
from conduit.redact import mask_key_flags

commands = typer.Typer()  # this module's commands; the root app loads them lazily (cli.commands.COMMANDS)

out = Console(highlight=False)
_STYLE = {"ok": "green", "not_installed": "dim"}


@commands.command("verify")
def verify_cmd(
    tools: list[str] = typer.Argument(None, help="Tools to check (registry names); default every enabled tool "
                                      "with a command line."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable report (a list, one object per tool)."),
    timeout: float = typer.Option(60.0, "--timeout", min=1.0, help="Seconds each tool's run may take."),
) -> int:
    """Run each installed tool once against a loopback canary with conduit's config; report what it sent."""
    try:
        profile = load_profile(state.profile)
        checks = verify(profile, tools or [], environ=os.environ, cwd=Path.cwd(), timeout_s=timeout)
    except ProfileError as exc:  # exit 1, as in sync, use and doctor: the file is wrong, not the arguments
        print(REDACTOR(f"error: {exc}"), file=sys.stderr)
        return 1
    except BadArguments as exc:
        print(REDACTOR(f"error: {exc}"), file=sys.stderr)
        return EXIT_BAD_ARGS
    if as_json:
        out.print_json(json.dumps(redact_data([c.to_json() for c in checks])))
    else:
        print_checks(checks)
    return exit_code(checks)


def print_checks(checks: list[ToolCheck]) -> None:
    """The table (tool, version, verdict, path, auth, model, seconds), then one line per tool's detail."""
    from rich.table import Table  # lazy for start-up speed: only this command

    table = Table("tool", "version", "verdict", "path", "auth", "model", "seconds")
    for c in checks:
        auth = f"{c.auth_header} {c.key_fingerprint}" if c.auth_header else ""
        table.add_row(c.display, c.version or "", f"[{_STYLE.get(c.verdict, 'red')}]{c.verdict}[/]",
                      esc(REDACTOR(f"{c.method} {c.path}" if c.path else "")), esc(auth),
                      esc(REDACTOR(c.model or "")),
                      f"{c.seconds:.1f}" if c.seconds is not None else "")
    out.print(table)
    for c in checks:
        if c.detail:
            out.print(f"[bold]{esc(c.display)}[/]: {esc(REDACTOR(c.detail))}", soft_wrap=True)
        if c.outranking and c.verdict != "ok":
            out.print(f"  may outrank conduit: {esc(', '.join(c.outranking))}", soft_wrap=True)
        if c.leftovers:
            out.print(f"  left running (killed): {esc(mask_key_flags(REDACTOR(', '.join(c.leftovers)))[:200])}",
                      soft_wrap=True)
    if checks and checks[0].isolation:
        isolation = next((c.isolation for c in checks if c.isolation), "")
        out.print(f"[dim]isolation: {esc(isolation)}[/]")
    if not checks:
        out.print("no tool to verify: enable one in the profile ([tools.<name>])")
