"""The agent: HTTP/1.1 + JSON on a Unix socket, answered from state its background loops keep.

Entry points: ``server.run_agent`` (the ``conduit agent`` process), ``client.AgentClient`` (the tiny client
every command uses) and ``wait.wait_until`` (``conduit wait``'s conditions against ``/v1/status``).

- ``server`` / ``guard`` / ``bodies`` / ``models`` / ``openapi``: routes, the uid check, answer bodies kept
  between requests, the pydantic response models and the OpenAPI document made from them.
- ``loops`` / ``state``: the background loops (channels, GPUs, the vLLM supervisor, routing) and what they
  keep.
- ``prober`` / ``otherauth``: token-free channel health probes.
- ``gpu`` / ``snapshots``: VRAM and host memory through NVML and psutil, as typed snapshots (the one NVML
  reader).
- ``routing`` / ``cluster``: the primary/fallback decision; this node's part of a ``[vllm.cluster]``.
- ``unixsocket`` / ``trust`` / ``client`` / ``wait``: the socket's claim and who may believe it; the client
  side.
- ``live`` / ``toolcall`` / ``logs``: ``conduit doctor --live [--deep]``; the agent's masked logging.
"""
