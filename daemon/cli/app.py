"""The root of the ``conduit`` command: the typer app and the options given before the command.

Each noun's commands live in their own module, import ``app`` from here and register themselves on it;
``conduit.daemon.cli.main`` imports them all and runs the app (so imports go one way: main -> commands -> app).
The work is done in plain functions that tests call directly (STYLE.md habit 11). Exit codes (DESIGN.md): 0 ok/ready, 1 not ready or failed,
2 agent unreachable, 3 bad arguments.
"""

from __future__ import annotations

import typer

app = typer.Typer(
    name="conduit",
    help="One profile for every AI coding tool, and a watch on the local inference server.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

EXIT_BAD_ARGS = 3


class _State:
    """Options given before the command (``conduit --profile PATH sync``)."""

    profile: str | None = None


state = _State()


@app.callback()
def _root(
    profile: str | None = typer.Option(
        None, "--profile", envvar="CONDUIT_PROFILE", help="Profile file (default ~/.config/conduit/profile.toml)."
    ),
) -> None:
    state.profile = profile
