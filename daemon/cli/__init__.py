"""The ``conduit`` command line: thin, one module per noun; the work is in the other packages' functions.

Entry points: ``entry.main`` (the console script, with a fast path for ``conduit status --json``),
``main.main`` (runs the app and maps errors to exit codes) and ``python -m conduit.daemon.cli``
(``__main__``).

- ``app`` / ``commands``: the root typer app and the table of commands; a command's module is imported only
  when it runs.
- ``sync`` (init, sync, doctor, use, restore), ``agent`` (agent, status, wait), ``vllm``, ``key``, ``models``,
  ``plan``, ``bench`` / ``bench_vllm``, ``verify``, ``daemon`` (daemon, service install), ``demo``: the
  commands.
- ``console`` / ``watch`` / ``terminal`` / ``sparkline`` / ``clusterview`` / ``toolcalls``: rendering.
- ``samples``: real-format tool files for ``conduit demo`` and the tests.
"""
