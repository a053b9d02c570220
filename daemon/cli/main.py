"""The ``conduit`` command line: runs the app (whose root group imports a command's module only when it
runs: ``conduit.daemon.cli.app``), maps errors to exit codes.

Exit codes (docs/design.md): 0 ok/ready, 1 not ready or failed, 2 agent unreachable, 3 bad arguments. No
traceback reaches a person unless ``CONDUIT_DEBUG`` is set.

Every error text goes through the config layer's process-wide ``REDACTOR``
(``conduit.daemon.config.redaction``): the keys the profile resolved in this run, and the values of key-like
flags (``--api-key X``) of this command line, are shown as fingerprints only.
"""

from __future__ import annotations

import io
import os
import sys

import typer
from click.exceptions import NoSuchOption, UsageError

from conduit.daemon.cli.app import EXIT_BAD_ARGS, app
from conduit.daemon.config.redaction import REDACTOR, learn_flags
from conduit.errors import ConduitError


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point. Maps usage errors to exit code 3 and ConduitError to its own code; every
    message is masked by ``REDACTOR`` first."""
    learn_flags(sys.argv[1:] if argv is None else argv)
    try:
        rv = app(args=argv, prog_name="conduit", standalone_mode=False)
    except typer.Exit as exc:
        return int(exc.exit_code)
    except UsageError as exc:
        text = io.StringIO()
        exc.show(file=text)
        sys.stderr.write(REDACTOR(text.getvalue()))
        if isinstance(exc, NoSuchOption) and exc.option_name == "--profile":  # global, written after the command
            sys.stderr.write("  hint: --profile goes before the command: conduit --profile PATH COMMAND ...\n")
        return EXIT_BAD_ARGS
    except typer.Abort:
        print("aborted", file=sys.stderr)
        return 1
    except ConduitError as exc:
        print(REDACTOR(f"error: {exc}"), file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # last line of defence: no traceback for people, unless asked
        if os.environ.get("CONDUIT_DEBUG"):
            raise
        print(REDACTOR(f"internal error: {type(exc).__name__}: {exc}\n  (set CONDUIT_DEBUG=1 for a traceback)"),
              file=sys.stderr)
        return 1
    return rv if isinstance(rv, int) else 0
