"""``conduit key``: store, list, remove and rotate keys in conduit's own secrets file or, with ``--keyring``, the
OS keychain; move one into the keychain (``migrate``); print a channel's key into a pipe for a tool's key helper
(``print``). Thin: the work is in ``conduit.daemon.config.secrets``, ``conduit.daemon.config.keychain``,
``conduit.daemon.sync.rotate`` and ``conduit.daemon.sync.migrate``.

``conduit key set NAME`` reads the key from stdin when stdin is not a terminal (``pass show x | conduit key set
x``, ``conduit key set x < file``), else from a prompt that does not echo. It never takes the key as an
argument: arguments land in shell history and in ``ps`` for every user of the machine.
"""

from __future__ import annotations

import getpass
import json
import sys
from typing import Annotated

import typer

from conduit.daemon.cli.app import state
from conduit.daemon.config.redaction import REDACTOR
from conduit.daemon.config.secrets import key_list, key_rm, key_set, looks_like_key
from conduit.errors import BadArguments, KeyError_
from conduit.fileio import KEY_MAX_BYTES

commands = typer.Typer(suggest_commands=False)  # loaded lazily by the root app (cli.commands.COMMANDS); click
# itself says "Did you mean" for a mistyped subcommand, and typer's own suggestion (inherited by sub-apps) repeats it

key_app = typer.Typer(
    name="key",
    help="Store, list and remove keys in conduit's secrets file (~/.config/conduit/secrets.toml, mode 0600) "
    "or, with --keyring, in the OS keychain.",
    no_args_is_help=True,
)
commands.add_typer(key_app, name="key")


def read_key_input(name: str) -> str:
    """The key as the person gives it: all of stdin when it is not a terminal (at most
    ``KEY_MAX_BYTES`` bytes), else one line from a no-echo prompt on the terminal.

    Raises:
        KeyError_: stdin holds more than ``KEY_MAX_BYTES`` bytes.
    """
    if sys.stdin is None or not sys.stdin.isatty():
        data = sys.stdin.buffer.read(KEY_MAX_BYTES + 1) if sys.stdin is not None else b""
        if len(data) > KEY_MAX_BYTES:
            raise KeyError_(
                f"standard input holds more than {KEY_MAX_BYTES} bytes; a key is one line",
                hint=f"give only the key: `conduit key set {name} < KEYFILE`",
            )
        text = data.decode("utf-8", errors="replace")
    else:
        text = getpass.getpass(f"key for `{name}` (input hidden): ")
    REDACTOR.add([text, text.strip()])  # masked in any error this run prints (conduit.daemon.cli.main)
    return text


_EXTRA_WORDS = {"allow_extra_args": True, "ignore_unknown_options": True}
"""Words after NAME are taken (not shown in the usage line) so that a key typed there is refused in words
rather than by a usage error that would echo it."""


def refuse_key_argument(command: str, name: str, extra: list[str]) -> None:
    """Raise ``BadArguments`` (exit 3) when ``extra`` holds words after NAME: probably a key, never echoed.

    Args:
        command: ``set`` or ``rotate``; name: the secret or channel name given; extra: the words after it.
    """
    if extra:
        raise BadArguments(
            f"`conduit key {command}` takes no key on the command line (it would land in shell history and "
            "`ps`); nothing was stored",
            f"pipe it in (`conduit key {command} {name} < KEYFILE`) or run `conduit key {command} {name}` for a "
            "hidden prompt, and consider that key exposed: rotate it",
        )


@key_app.command("set", context_settings=_EXTRA_WORDS)
def set_(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Secret name, used in the profile as key = { secret = \"NAME\" }.")],
    keyring: Annotated[bool, typer.Option("--keyring", help="Store it in the OS keychain (service `conduit`); "
                                          "the profile reads it as key = { keyring = \"NAME\" }.")] = False,
) -> None:
    """Store a key read from stdin (or a hidden prompt) under NAME. Never pass the key as an argument."""
    refuse_key_argument("set", name, list(ctx.args))  # says nothing about the extra words: they may be the key
    if looks_like_key(name):
        key_set(name, "")  # raises the unechoed "looks like an API key" error before any prompt shows the name
    if keyring:
        from conduit.daemon.config.keychain import keychain_key_set  # lazy: only this option

        typer.echo(keychain_key_set(name, read_key_input(name)))
    else:
        typer.echo(key_set(name, read_key_input(name)))
    unused = _unreferenced(name, "keyring" if keyring else "secret")
    if unused:
        typer.echo(f"warning: {unused}", err=True)


def _unreferenced(name: str, kind: str = "secret") -> str | None:
    """A warning when the profile loads and no channel's key is ``{ <kind> = NAME }`` (``kind``: ``secret`` or
    ``keyring``): a typo of the name stores a key nothing reads. None when it is referenced, or when there is
    no profile to ask."""
    from conduit.daemon.config.profile import did_you_mean, load_profile  # lazy: only after the key is stored
    from conduit.errors import ConduitError

    try:
        profile = load_profile(state.profile)
    except ConduitError:
        return None
    names = [str(getattr(ch.key, kind)) for ch in profile.model.channels.values()
             if ch.key is not None and getattr(ch.key, kind)]
    what = "secret" if kind == "secret" else "keyring entry"
    if name in names or not names:
        return None if name in names else f"no channel in {profile.path} reads {what} `{name}` yet"
    return (f"no channel in {profile.path} reads {what} `{name}` yet: " + did_you_mean(name, names)
            + f" (a typo: `conduit key rm {name}` and store it again under the right name; a channel you are "
            f"about to add: give it `key = {{ {kind} = \"{name}\" }}`)")


@key_app.command("list")
def list_(as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False) -> None:
    """List stored key names with fingerprints (never the keys)."""
    rows = key_list()
    if as_json:
        typer.echo(json.dumps({"keys": [{"name": n, "fingerprint": fp} for n, fp in rows]}))
        return
    if not rows:
        typer.echo("no keys stored (add one with `conduit key set NAME`)")
        return
    width = max(len(name) for name, _ in rows)
    for name, fp in rows:
        typer.echo(f"{name:<{width}}  {fp}")


@key_app.command("rm")
def rm(name: Annotated[str, typer.Argument(help="Secret name to remove.")],
       keyring: Annotated[bool, typer.Option("--keyring", help="Remove it from the OS keychain.")] = False) -> None:
    """Remove the key stored under NAME."""
    if keyring:
        from conduit.daemon.config.keychain import keychain_key_rm  # lazy: only this option

        typer.echo(keychain_key_rm(name))
        return
    typer.echo(key_rm(name))


@key_app.command("migrate")
def migrate(name: Annotated[str, typer.Argument(help="Secret name in conduit's secrets file.")],
            to: Annotated[str, typer.Option("--to", help="Where to: `keyring` (the OS keychain).")] = "keyring",
            ) -> None:
    """Move the key NAME from conduit's secrets file into the OS keychain, repoint the channels that read it,
    and replace it by its fingerprint in conduit's backups."""
    from conduit.daemon.sync.migrate import migrate_to_keyring  # lazy for start-up speed

    for line in migrate_to_keyring(name, to=to, profile_path=state.profile).lines:
        typer.echo(line)


@key_app.command("rotate", context_settings=_EXTRA_WORDS)
def rotate_cmd(
    ctx: typer.Context,
    channel: str = typer.Argument(..., help="The channel whose key to replace."),
    force: bool = typer.Option(False, "--force", help="Store the key even when the gateway rejects it (401/403) "
                               "or cannot be reached."),
    wait: float = typer.Option(15.0, "--wait", help="Seconds to wait for a running daemon to propagate it."),
) -> int:
    """Replace CHANNEL's key everywhere: reads the new key from stdin, checks it, stores it, syncs every tool."""
    from conduit.daemon.sync.rotate import rotate_key  # lazy for start-up speed: httpx, only this command

    refuse_key_argument("rotate", channel, list(ctx.args))
    result = rotate_key(channel, read_key_input(channel), profile_path=state.profile, force=force, wait_s=wait)
    for line in result.lines:
        typer.echo(line)
    if result.report is not None and not result.report.ok:
        return 1
    return 0 if result.propagated or result.stored is None else 1


@key_app.command("print")
def print_key(channel: Annotated[str, typer.Argument(help="The channel whose key to print.")]) -> None:
    """Print CHANNEL's key on stdout, read now from its key source: the command a tool runs to get the key
    (Claude Code's apiKeyHelper, written by `conduit sync` with key_delivery = "reference"). Refused on a
    terminal: the key would stay in its scrollback."""
    from conduit.daemon.config.profile import load_profile  # lazy: only this command
    from conduit.daemon.config.resolve import require_channel, resolve_channel

    if sys.stdout is not None and sys.stdout.isatty():
        raise BadArguments("`conduit key print` writes the key only into a pipe, never on a terminal",
                           f"it is what a tool runs to get the key; `conduit key print {channel} | wc -c` checks "
                           "that it works")
    profile = load_profile(state.profile)
    require_channel(profile, channel)
    resolved = resolve_channel(profile, channel)
    if resolved.key is None:
        raise KeyError_(f"channel `{channel}` has no key source ({profile.path})",
                        f'add key = {{ secret = "{channel}" }} to [channels.{channel}]')
    sys.stdout.write(resolved.key + "\n")
    sys.stdout.flush()
