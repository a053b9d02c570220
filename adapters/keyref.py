"""How a tool gets a channel's key: a copy, or a reference (``key_delivery``), and the command a tool runs to
get the key from conduit: ``<conduit> key print <channel>``.

A tool that takes a command instead of a key (Claude Code's ``apiKeyHelper``) runs this each time it needs the
key, so the key rests only where the channel's key source keeps it (conduit's secrets file, the OS keychain, a
key file) and a rotation changes nothing in the tool's file. The executable is this installation's ``conduit``
script (next to the interpreter), else ``<python> -m conduit.daemon.cli``, as absolute paths: the tool's PATH
may not hold conduit. A non-default profile (``CONDUIT_PROFILE`` of the syncing process) is passed on with
``--profile``. An executable in a temporary place (``unstable_reason``: ``uvx``'s or ``pipx run``'s cached
environment, a virtual environment under ``/tmp``) would vanish under the tool, so such a helper is not written:
the tool gets a copy, and ``conduit doctor`` says why.

``DELIVERY_OPTIONS``: what a channel's ``key_delivery`` (``[channels.NAME] key_delivery``) means in each tool's
own options; a tool's own option, when set, wins (docs/keys.md).
"""

from __future__ import annotations

import os
import shlex
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from conduit.adapters.base import Env

__all__ = ["DELIVERY_OPTIONS", "RUNS_CONDUIT", "STABLE_INSTALL_VAR", "Delivery", "conduit_argv", "delivery_options", "key_helper_command",
           "unstable_reason"]

Delivery = Literal["copy", "reference"]

DELIVERY_OPTIONS: Mapping[str, tuple[str, Mapping[str, str]]] = {
    "claude_code": ("key_delivery", {"copy": "copy", "reference": "reference"}),
    "pi": ("key_source", {"copy": "inline", "reference": "file"}),
    "opencode": ("key_source", {"reference": "file"}),
    "kilo": ("key_source", {"reference": "file"}),
    "droid": ("key_source", {"copy": "file"}),
    "codex": ("key_method", {"copy": "dotenv"}),
    "qwen": ("key_source", {"copy": "dotenv"}),
    "crush": ("key_source", {"copy": "file"}),
}
"""tool -> (its option, {channel ``key_delivery``: that option's value}). A delivery a tool has no form for is
absent: the tool keeps its own default (OpenCode and Kilo have no copy form: their key rests in conduit's 0600
key file). A reference that works only when the tool is started with the variable set (Droid's, Codex's, Qwen
Code's and Crush's ``env`` forms: ``conduit run`` or your own export) is chosen per tool, never by a channel's ``reference``:
a tool started from a plain shell would have no key."""

RUNS_CONDUIT = frozenset({"claude_code"})
"""Tools whose reference is a command that runs conduit (``key_helper_command``): it answers only where
conduit's profile and key sources are, so a temporary HOME (``conduit verify``) gives these tools a copy."""

_EPHEMERAL_PARTS = (("uv", "archive-v0"), ("uv", "builds-v0"), ("pipx", ".cache"))
"""Path parts of environments a runner deletes on its own (``uvx``'s cached tool environments, ``pipx run``)."""


def delivery_options(tool: str, delivery: str | None, options: Mapping[str, object]) -> dict[str, object]:
    """``options`` (a ``[tools.<tool>]`` table's own options) with the channel's ``delivery`` (``copy`` or
    ``reference``; None: not set) filled in as the tool's option, unless the table sets that option itself (the
    tool's setting wins) or the tool has no such form (``DELIVERY_OPTIONS``). A new dict; ``options`` is kept."""
    out = dict(options)
    entry = DELIVERY_OPTIONS.get(tool)
    if delivery is None or entry is None:
        return out
    option, values = entry
    if option not in out and delivery in values:
        out[option] = values[delivery]
    return out


def conduit_argv() -> list[str]:
    """The argv that starts this installation's conduit: ``[<bin>/conduit]`` when that script exists and is
    executable, else ``[<python>, "-m", "conduit.daemon.cli"]``."""
    beside = Path(sys.executable).parent / "conduit"
    if beside.is_file() and os.access(beside, os.X_OK):
        return [str(beside)]
    return [sys.executable, "-m", "conduit.daemon.cli"]


STABLE_INSTALL_VAR = "CONDUIT_STABLE_INSTALL"
"""Set to ``1``: conduit's installation stays where it is, even in a temporary directory (``unstable_reason``)."""


def unstable_reason(argv: list[str] | None = None) -> str | None:
    """Why conduit's executable (``argv[0]``, default ``conduit_argv()``) is no place for a tool to run later,
    or None when it is: it lies in a temporary directory (``tempfile.gettempdir()``, ``/tmp``, ``/var/tmp``,
    ``/dev/shm``) or in an environment a runner deletes (``uv``'s ``archive-v0``/``builds-v0``, ``pipx``'s
    ``.cache``). ``CONDUIT_STABLE_INSTALL=1`` in conduit's environment says the installation stays wherever it
    lies (a virtual environment under ``/tmp`` that you keep, a CI checkout): None then."""
    if os.environ.get(STABLE_INSTALL_VAR) == "1":
        return None
    exe = Path((argv or conduit_argv())[0]).absolute()
    temps = {Path(tempfile.gettempdir()), Path("/tmp"), Path("/var/tmp"), Path("/dev/shm")}
    if any(t in exe.parents for t in temps):
        return f"conduit runs from {exe}, in a temporary directory"
    parts = exe.parts
    for a, b in _EPHEMERAL_PARTS:
        if any(parts[i:i + 2] == (a, b) for i in range(len(parts) - 1)):
            return f"conduit runs from {exe}, an environment {a} deletes on its own"
    return None


def key_helper_command(channel: str, env: Env) -> str | None:
    """The shell command that prints ``channel``'s key (``conduit key print CHANNEL``), each word quoted for
    ``/bin/sh``; with ``--profile`` when the environment names a profile (``CONDUIT_PROFILE``). None when
    conduit's executable is in a temporary place (``unstable_reason``): the tool then gets a copy."""
    argv = conduit_argv()
    if unstable_reason(argv) is not None:
        return None
    profile = env.get("CONDUIT_PROFILE")
    if profile:
        argv += ["--profile", str(Path(profile).expanduser().absolute())]
    return shlex.join([*argv, "key", "print", channel])
