"""Registers every CLI command module with ``conduit.daemon.cli.app``.

One import line per module: a module that adds commands imports ``app`` from ``conduit.daemon.cli`` and
decorates its functions. Keeping this list here means cli.py never grows.
"""

import conduit.daemon.cmd_agent  # noqa: F401  agent, status, wait
import conduit.daemon.cmd_bench  # noqa: F401  bench (streaming load generator, concurrency sweep)
import conduit.daemon.cmd_daemon  # noqa: F401  daemon, key rotate, service install
import conduit.daemon.cmd_key  # noqa: F401  key set/list/rm
import conduit.daemon.cmd_plan  # noqa: F401  plan (vLLM memory ledger)
import conduit.daemon.cmd_sync  # noqa: F401  init, sync, doctor, use, restore, demo
import conduit.daemon.cmd_vllm  # noqa: F401  vllm run/logs (the supervised local server)
