"""The command a tool runs to get a channel's key from conduit: ``<conduit> key print <channel>``.

A tool that takes a command instead of a key (Claude Code's ``apiKeyHelper``) runs this each time it needs the
key, so the key rests only where the channel's key source keeps it (conduit's secrets file, the OS keychain, a
key file) and a rotation changes nothing in the tool's file. The executable is this installation's ``conduit``
script (next to the interpreter), else ``<python> -m conduit.daemon.cli``, as absolute paths: the tool's PATH
may not hold conduit. A non-default profile (``CONDUIT_PROFILE`` of the syncing process) is passed on with
``--profile``.
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

from conduit.adapters.base import Env

__all__ = ["conduit_argv", "key_helper_command"]


def conduit_argv() -> list[str]:
    """The argv that starts this installation's conduit: ``[<bin>/conduit]`` when that script exists and is
    executable, else ``[<python>, "-m", "conduit.daemon.cli"]``."""
    beside = Path(sys.executable).parent / "conduit"
    if beside.is_file() and os.access(beside, os.X_OK):
        return [str(beside)]
    return [sys.executable, "-m", "conduit.daemon.cli"]


def key_helper_command(channel: str, env: Env) -> str:
    """The shell command that prints ``channel``'s key (``conduit key print CHANNEL``), each word quoted for
    ``/bin/sh``; with ``--profile`` when the environment names a profile (``CONDUIT_PROFILE``)."""
    argv = conduit_argv()
    profile = env.get("CONDUIT_PROFILE")
    if profile:
        argv += ["--profile", str(Path(profile).expanduser().absolute())]
    return shlex.join([*argv, "key", "print", channel])
