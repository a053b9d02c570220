"""conduit: one profile for every AI coding tool, and a watch on the local inference server.

This package is the kernel, which imports nothing else of conduit:

- ``errors``: conduit's few error types and the exit codes they map to (foreign errors are translated into
  them).
- ``units``: one grammar for sizes and durations, one byte formatter, one percentile.
- ``redact``: the one place secrets are masked (``redact``, ``Redactor``).
- ``fileio``: atomic file I/O and locks for every file conduit writes.
- ``sdnotify``: systemd's readiness protocol for the sync daemon and the agent.

The top-level folders install under this namespace through committed links (folder = import path):
``conduit.adapters`` (one module per tool, the writer, the text formats), ``conduit.daemon`` (config, sync,
agent, vllm, plan, catalog, bench, verify, cli), ``conduit.profiles`` and ``conduit.systemd`` (package data).
Dependencies run one way: daemon -> adapters -> kernel. The console script is
``conduit.daemon.cli.entry:main``.
"""

__version__ = "0.1.0"
