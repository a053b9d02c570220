"""``conduit plan``: vLLM's memory ledger, worked out before a launch, without a GPU and without torch.

Entry points: ``model.inspect_model`` (a model directory -> ``ModelInfo``), ``ledger.plan`` (weights, KV cache
per token, capacity, concurrency: a ``Ledger`` with its verdict and fixes) and ``scaling.smallest_fit`` (how
many GPUs).

- ``model`` / ``safetensors`` / ``dtypes``: reading a model's ``config.json`` and exact weight bytes.
- ``memory`` / ``parallel`` / ``fragmentation``: per-token and per-GPU arithmetic under tensor, pipeline and
  data parallelism, and paged versus preallocated KV slots.
- ``ledger`` / ``scaling`` / ``settings`` / ``errors``: the verdict and fixes, the GPU count, the settings
  read from flags or a ``[vllm]`` table, and the planner's two errors.
"""
