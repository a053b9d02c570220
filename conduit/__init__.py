"""conduit: one profile for every AI coding tool, and a watch on the local inference server.

The code lives in two folders installed under this namespace: ``conduit.daemon`` (profile, keys,
sync engine, CLI, agent) and ``conduit.adapters`` (one module per tool). Dependencies run one way:
daemon -> adapters.
"""

__version__ = "0.1.0"
