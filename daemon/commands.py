"""Registers every CLI command module with ``conduit.daemon.cli.app``.

One import line per module: a module that adds commands imports ``app`` from ``conduit.daemon.cli`` and
decorates its functions. Keeping this list here means cli.py never grows.
"""

from conduit.daemon import cmd_key  # noqa: F401,E402  conduit key set/list/rm
from conduit.daemon import cmd_sync  # noqa: F401,E402  init, sync, doctor, use, restore
from conduit.daemon import cmd_agent  # noqa: F401,E402  agent, status, wait
