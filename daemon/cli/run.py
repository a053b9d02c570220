"""CLI: ``conduit run TOOL [--channel NAME] [--model M] [-- ARGS]`` and ``conduit env TOOL [--channel NAME]
[--show-key]`` (thin: parse, call ``conduit.daemon.verify.session``, print, exit code).

``run`` starts the tool with the profile's settings for that session only and exits with the tool's exit code
(127 when its binary is not on PATH; 1 when the profile or a tool file cannot be used; 3 for bad arguments).
``env`` prints ``export VAR=...`` lines for ``eval "$(conduit env TOOL)"``; the key as a commented-out
fingerprint unless ``--show-key``. Notes go to stderr, through the ``REDACTOR``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import typer

from conduit.adapters.registry import ADAPTERS
from conduit.daemon.cli.app import state
from conduit.daemon.config.profile import load_profile
from conduit.daemon.config.redaction import REDACTOR
from conduit.daemon.verify.session import export_lines, open_session, run_session, session_variables

commands = typer.Typer()  # this module's commands; the root app loads them lazily (cli.commands.COMMANDS)

_CHANNEL_HELP = "Another channel of the profile for this session (default: the tool's, as conduit sync uses)."


@commands.command("run", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def run_cmd(
    tool: str = typer.Argument(..., help="The tool (registry name: copilot, claude_code, codex...)."),
    args: list[str] = typer.Argument(None, help="Arguments for the tool, after `--` (e.g. -- -p \"say ok\")."),
    channel: str | None = typer.Option(None, "--channel", help=_CHANNEL_HELP),
    model: str | None = typer.Option(None, "--model", help="Another model for this session."),
) -> int:
    """Start a tool with the profile's settings for this session only; its own files are left as they are.

    The exit code is the tool's (127 when it is not on PATH).
    """
    profile = load_profile(state.profile)
    with open_session(profile, tool, args or [], channel=channel, model=model, environ=os.environ,
                      cwd=Path.cwd()) as session:
        if session.unset:
            print(f"conduit: unset for this session: {', '.join(session.unset)}", file=sys.stderr)
        if session.note:
            print(REDACTOR(f"conduit: {session.note}"), file=sys.stderr)
        sys.stdout.flush()
        return run_session(session)


@commands.command("env")
def env_cmd(
    tool: str = typer.Argument(..., help="The tool (registry name), e.g. copilot."),
    channel: str | None = typer.Option(None, "--channel", help=_CHANNEL_HELP),
    model: str | None = typer.Option(None, "--model", help="Another model."),
    show_key: bool = typer.Option(False, "--show-key", help="Print the key itself (default: a commented-out "
                                  "fingerprint)."),
) -> int:
    """Print the shell lines that give a tool the profile's settings: eval "$(conduit env copilot --show-key)".

    `unset` lines drop the variables that would outrank them.
    """
    profile = load_profile(state.profile)
    settings, variables = session_variables(profile, tool, channel=channel, model=model, environ=os.environ,
                                            cwd=Path.cwd())
    for line in export_lines(variables, settings.key, show_key=show_key):
        print(line)
    if settings.key and not show_key and settings.key in variables.values():
        print("conduit: the key is masked; add --show-key to print it", file=sys.stderr)
    adapter = ADAPTERS[tool]
    if adapter.configured_by == "files":
        print(f"conduit: {adapter.display_name} also reads its own files, which may outrank these variables; "
              f"`conduit run {tool}` uses a re-rendered copy of them", file=sys.stderr)
    return 0


__all__ = ["commands", "env_cmd", "run_cmd"]
