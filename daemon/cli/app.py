"""The root of the ``conduit`` command: the typer app, the options given before the command, and the lazy
root group that imports a command's module only when that command runs.

Each noun's commands live in their own module (``commands = typer.Typer()`` there, its functions decorated on
it); ``conduit.daemon.cli.commands.COMMANDS`` names the module and the help line of every top-level command.
``conduit --help`` lists them from that table without importing any of them, and ``conduit sync`` imports only
``conduit.daemon.cli.sync`` (so not the bench, agent, vLLM or planner code, and not httpx or aiohttp). Imports
go one way: main -> app -> commands (a table); a command module imports ``state`` from here. The work is done
in plain functions that tests call directly (a thin CLI). Exit codes (docs/design.md): 0 ok/ready, 1 not ready
or failed, 2 agent unreachable, 3 bad arguments.
"""

from __future__ import annotations

import importlib
import os
from difflib import get_close_matches
from pathlib import Path

import typer
import typer.core
from click import Command, Context, HelpFormatter
from click.exceptions import UsageError

from conduit.daemon.cli.commands import COMMANDS, Entry

EXIT_BAD_ARGS = 3


def load_command(name: str, entry: Entry) -> Command:
    """The click command (or group) ``name`` built from ``conduit.daemon.cli.<entry.module>.commands``.

    Imports that module (and so whatever it imports). Raises KeyError when the module does not define
    ``name`` (a stale ``COMMANDS`` line: tests/cli/test_cli_start.py loads every one).
    """
    module = importlib.import_module(f"conduit.daemon.cli.{entry.module}")
    return _plain_help(typer.main.get_group(module.commands).commands[name])


def _plain_help(cmd: Command) -> Command:
    """``cmd`` and its subcommands set to click's plain help layout, as the root is (``rich_markup_mode=None``
    below): a module's ``typer.Typer()`` defaults to rich's, whose import (``typer.rich_utils``: rich's markdown,
    traceback and pygments) alone costs about x5 of a bare interpreter's start. Returns ``cmd``."""
    if getattr(cmd, "rich_markup_mode", None) is not None:
        cmd.rich_markup_mode = None  # type: ignore[attr-defined]
    for sub in getattr(cmd, "commands", {}).values():
        _plain_help(sub)
    return cmd


class LazyGroup(typer.core.TyperGroup):
    """The root group: commands named in ``COMMANDS`` are imported on first use.

    While its own help is formatted, a command not yet loaded is listed through a stand-in carrying only the
    table's help line, so ``conduit --help`` imports no command module.
    """

    _listing = False

    def list_commands(self, ctx: Context) -> list[str]:
        """Commands already built, then the table's, in the table's order."""
        return [*self.commands, *(n for n in COMMANDS if n not in self.commands)]

    def get_command(self, ctx: Context, cmd_name: str) -> Command | None:
        """The command ``cmd_name`` (importing its module), or None when there is no such command."""
        cmd = self.commands.get(cmd_name)
        entry = COMMANDS.get(cmd_name)
        if cmd is not None or entry is None:
            return cmd
        if self._listing:
            return typer.core.TyperCommand(cmd_name, help=entry.help)
        cmd = self.commands[cmd_name] = load_command(cmd_name, entry)
        return cmd

    def resolve_command(self, ctx: Context, args: list[str]) -> tuple[str | None, Command | None, list[str]]:
        """typer's resolution, with its "Did you mean" drawn from every command, loaded or not."""
        try:
            return super().resolve_command(ctx, args)
        except UsageError as exc:
            matches = get_close_matches(args[0], self.list_commands(ctx)) if args else []
            if not matches or "Did you mean" in exc.message:
                raise
            hint = f"{exc.message.rstrip('.')}. Did you mean {', '.join(map(repr, matches))}?"
            raise UsageError(hint, ctx=exc.ctx) from None

    def format_help(self, ctx: Context, formatter: HelpFormatter) -> None:
        """The root help, listing every command from the table without importing it."""
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False


app = typer.Typer(
    name="conduit",
    cls=LazyGroup,
    help="One profile for every AI coding tool, and a watch on the local inference server.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # click's plain help: rich's help formatter costs more than all of `conduit --help`
)


class _State:
    """Options given before the command (``conduit --profile PATH sync``)."""

    profile: str | None = None


state = _State()


DISTRIBUTION = "conduit-sync"
"""The distribution that installs the ``conduit`` command (``pyproject.toml``)."""


def version_text() -> str:
    """``conduit-sync X.Y.Z`` from the installed distribution's metadata; ``conduit-sync (version unknown: not
    installed)`` when running from a checkout that was never installed."""
    from importlib import metadata  # lazy: only --version reads it

    try:
        return f"{DISTRIBUTION} {metadata.version(DISTRIBUTION)}"
    except metadata.PackageNotFoundError:
        return f"{DISTRIBUTION} (version unknown: not installed)"


def _print_version(value: bool) -> None:
    if value:
        print(version_text())
        raise typer.Exit(0)


@app.callback()
def _root(
    profile: str | None = typer.Option(
        None, "--profile", envvar="CONDUIT_PROFILE", help="Profile file (default ~/.config/conduit/profile.toml)."
    ),
    version: bool = typer.Option(False, "--version", is_eager=True, callback=_print_version,
                                 help="Print the version of conduit-sync and exit."),
) -> None:
    state.profile = profile
    if profile:  # what conduit starts (Claude Code's key helper: adapters/keyref.py) reads the same profile
        os.environ["CONDUIT_PROFILE"] = str(Path(profile).expanduser().absolute())
