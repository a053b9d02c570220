"""Starter profiles shipped with conduit, read by ``conduit init`` (``conduit.daemon.sync.init``) as package
data with ``importlib.resources.files("conduit.profiles")``.

- ``hosted.toml``: one hosted gateway for every tool.
- ``local-vllm.toml``: every tool on a local vLLM server that the agent runs.
- ``both.toml``: a hosted gateway for most tools, and a local vLLM for one of them.
"""
