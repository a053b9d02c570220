"""Imports every CLI command module; each registers its commands on ``conduit.daemon.cli.app.app``.

One import line per module: a module that adds commands imports ``app`` from ``conduit.daemon.cli.app`` and
decorates its functions. Keeping this list here means the root app never grows.
"""

import conduit.daemon.cli.agent  # noqa: F401  agent, status, wait
import conduit.daemon.cli.bench  # noqa: F401  bench (streaming load generator, concurrency sweep)
import conduit.daemon.cli.daemon  # noqa: F401  daemon, key rotate, service install
import conduit.daemon.cli.key  # noqa: F401  key set/list/rm
import conduit.daemon.cli.plan  # noqa: F401  plan (vLLM memory ledger)
import conduit.daemon.cli.sync  # noqa: F401  init, sync, doctor, use, restore, demo
import conduit.daemon.cli.vllm  # noqa: F401  vllm run/logs (the supervised local server)
