"""Registers every CLI command module with ``conduit.daemon.cli.app``.

One import line per module: a module that adds commands imports ``app`` from ``conduit.daemon.cli`` and
decorates its functions. Keeping this list here means cli.py never grows.
"""
from conduit.daemon import cmd_agent  # noqa: F401  agent, status, wait
