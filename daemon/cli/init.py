"""CLI: ``conduit init`` (thin: ask for the gateway when a person is there, write, say what to do next).

conduit has no default gateway. ``init`` proposes a profile from the tools already configured
(``conduit.daemon.sync.init.propose``); otherwise it takes the gateway root and a channel name from
``--base-url`` and ``--channel``, or asks for them when stdin is a terminal, or (stdin not a terminal, no
flags) writes the starter with the placeholder base URL every command refuses, and says what to set. Nothing
is sent anywhere by ``init``.
"""

from __future__ import annotations

import re
import sys

import typer

from conduit.adapters.base import Env
from conduit.daemon.cli.app import state
from conduit.daemon.cli.console import make_console
from conduit.daemon.config import paths
from conduit.daemon.sync.init import STARTER_CHANNEL, TEMPLATES, discover, init_profile, starter_text

commands = typer.Typer()  # this module's commands; the root app loads them lazily (cli.commands.COMMANDS)

out = make_console()


def _ask(template: str, no_discover: bool) -> tuple[str | None, str | None]:
    """(base URL, channel) typed at the terminal; (None, None) when stdin is not a terminal, the template has
    no hosted channel, the tools' settings will be proposed instead, or the person leaves the URL empty."""
    if sys.stdin is None or not sys.stdin.isatty() or STARTER_CHANNEL not in starter_text(template):
        return None, None
    if not no_discover and discover(Env()):
        return None, None
    print("conduit has no default gateway: your key goes only to the gateway you name here.")
    url = input("your gateway's root URL, as its docs give it (empty: write a placeholder): ").strip()
    if not url:
        return None, None
    name = input(f"a name for this channel [{STARTER_CHANNEL}]: ").strip() or STARTER_CHANNEL
    return url, name


def next_step(text: str, notes: list[str], channel: str | None) -> str:
    """The ``next:`` line: which key to store (naming the channel), or none for a profile without a key to
    store (the local template), then the dry run."""
    missing = [n.split("`")[1] for n in notes if n.startswith("no key found for channel `")]
    if missing:
        return (f"next: store the key of channel `{missing[0]}` with `conduit key set {missing[0]}` (reads stdin), "
                "then `conduit sync --dry-run`.")
    if any(n.startswith("copied ") for n in notes) or "conduit init" in text.splitlines()[0]:
        return "next: `conduit sync --dry-run` to see what would change."
    if not re.search(r"^\s*key\s*=", text, re.M):  # no channel with a key (the local template)
        return "next: `conduit sync --dry-run` (no key to store: the local channel needs none)."
    name = channel or STARTER_CHANNEL
    placeholder = any(n.startswith("no gateway named") for n in notes)
    return ((f"next: set channels.{name}.base_url in the profile, then " if placeholder else "next: ")
            + f"store the key of channel `{name}` with `conduit key set {name}` (reads stdin), then "
              "`conduit sync --dry-run`.")


@commands.command()
def init(
    template: str = typer.Option("hosted", help=f"Starter profile: {', '.join(TEMPLATES)}."),
    base_url: str | None = typer.Option(None, "--base-url", help="Your gateway's root URL as its docs give it "
                                        "(https://HOST/api); the key is sent only there. Asked when omitted "
                                        "and stdin is a terminal."),
    channel: str | None = typer.Option(None, "--channel", help=f"Name of that channel (default "
                                       f"`{STARTER_CHANNEL}`); `conduit key set NAME` stores its key."),
    force: bool = typer.Option(False, "--force", help="Replace an existing profile (a .bak copy is kept)."),
    print_only: bool = typer.Option(False, "--print", help="Print the starter profile instead of writing it."),
    no_discover: bool = typer.Option(False, "--no-discover", help="Do not build the profile from the tools' "
                                     "current settings."),
) -> int:
    """Write a starter profile (or one proposed from the tools already configured)."""
    starter_text(template)  # an unknown --template is refused (exit 3) even when discovery would not use it
    if print_only:
        sys.stdout.write(starter_text(template))  # verbatim: rich would wrap long lines and break the TOML
        return 0
    path = paths.profile_path(state.profile)
    if path.exists() and not force:  # said before any question is asked
        init_profile(path, force=False)
    if base_url is None and channel is None:
        base_url, channel = _ask(template, no_discover)
    text, notes = init_profile(path, template=template, force=force, discover_tools=not no_discover,
                               base_url=base_url, channel=channel)
    out.print(f"wrote {path}")
    for note in notes:
        out.print(f"  {note}", markup=False, soft_wrap=True)
    out.print(next_step(text, notes, channel), markup=False, soft_wrap=True)
    return 0
