"""conduit.daemon: everything above the adapters, one package per responsibility.

Layers (import-linter, ``make lint``): ``config`` <- {``vllm`` | ``plan`` | ``catalog``} <- {``sync`` |
``agent`` | ``bench`` | ``verify``} <- ``cli``; every package may use the adapters and the kernel
(``conduit.*`` modules).

- ``config``: the profile, key sources, base-URL and key normalization, what each tool resolves to.
- ``sync``: ``conduit sync`` / ``doctor`` / ``init`` and the sync daemon.
- ``agent``: the socket server and its loops, and the client every command uses.
- ``vllm``: the local vLLM server's supervisor, diagnosis and metrics.
- ``plan``: vLLM's memory ledger (``conduit plan``).
- ``catalog``: a channel's model list and the context settings that follow per tool.
- ``bench``: the streaming load test (``conduit bench``).
- ``verify``: the real tools run once against a recording gateway (``conduit verify``).
- ``cli``: the ``conduit`` command (entry point ``conduit.daemon.cli.entry:main``).
"""
