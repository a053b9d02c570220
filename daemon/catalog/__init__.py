"""What a channel's server can do: its ``GET /v1/models`` list, each model's context length where it says,
cached per channel in the state directory (``models``), and the context settings that follow for each tool
(``context``).

Entry points: ``models.current`` / ``models.refresh`` (a channel's ``Catalog``, cached or fetched now) and
``context.with_context`` (a tool's settings with ``context_window`` / ``max_output_tokens`` filled).

A sibling of ``vllm`` and ``plan``: it imports only ``conduit.daemon.config``, the adapters and the kernel.
"""
