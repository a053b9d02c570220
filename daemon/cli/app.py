"""The ``conduit`` command: parses and dispatches, nothing else (STYLE.md habit 11).

Each noun's commands live in their own module and register themselves here; the work is done in plain
functions that tests call directly. Exit codes (DESIGN.md): 0 ok/ready, 1 not ready or failed,
2 agent unreachable, 3 bad arguments.
"""

from __future__ import annotations

import os
import sys

import typer

from conduit.errors import ConduitError

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


def _register_commands() -> None:
    """Import the command modules; each calls ``app.command``/``app.add_typer`` on import."""
    from conduit.daemon.cli import commands  # noqa: F401


# typer >= 0.26 vendors click, so its usage-error class is reached through a public subclass rather than
# imported from a `click` package that may not be installed.
UsageError: type[Exception] = typer.BadParameter.__mro__[1]


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point. Maps usage errors to exit code 3 and ConduitError to its own code."""
    _register_commands()
    try:
        rv = app(args=argv, standalone_mode=False)
    except typer.Exit as exc:
        return int(exc.exit_code)
    except UsageError as exc:
        exc.show()  # type: ignore[attr-defined]
        return EXIT_BAD_ARGS
    except typer.Abort:
        print("aborted", file=sys.stderr)
        return 1
    except ConduitError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # last line of defence: no traceback for people, unless asked
        if os.environ.get("CONDUIT_DEBUG"):
            raise
        print(f"internal error: {type(exc).__name__}: {exc}\n  (set CONDUIT_DEBUG=1 for a traceback)", file=sys.stderr)
        return 1
    return rv if isinstance(rv, int) else 0


if __name__ == "__main__":  # pragma: no cover
    # Run through the imported module, not this __main__ copy: command modules register on
    # `conduit.daemon.cli.app.app`, which is a different object from this file's `app` when run with -m.
    from conduit.daemon.cli.app import main as _main

    sys.exit(_main())
