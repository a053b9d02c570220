"""What a channel's server can do: its ``GET /v1/models`` list, each model's context length where it says,
cached per channel in the state directory (``models``), and the context settings that follow for each tool
(``context``).

A sibling of ``vllm`` and ``plan``: it imports only ``conduit.daemon.config``, the adapters and the kernel.
"""
