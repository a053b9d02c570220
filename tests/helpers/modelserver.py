"""A loopback stand-in for a channel's ``GET /v1/models`` (vLLM, OpenRouter or a plain gateway shape): the tests'
``Gateway`` answering ``body`` at ``<url>/v1/models``, recording each request."""

from __future__ import annotations

from typing import Any

from conduit.daemon.verify.gateway import Answer, Recorded
from helpers.gateways import Gateway

VLLM_BODY = {"object": "list", "data": [
    {"id": "qwen-coder-7b", "object": "model", "created": 0, "owned_by": "vllm", "root": "/models/qwen",
     "parent": None, "max_model_len": 4096, "permission": []}]}
OPENROUTER_BODY = {"data": [
    {"id": "anthropic/claude-sonnet-4", "name": "Claude Sonnet 4", "context_length": 200000,
     "top_provider": {"context_length": 200000, "max_completion_tokens": 64000, "is_moderated": True}},
    {"id": "meta/llama-3", "context_length": None, "top_provider": {"context_length": 8192}}]}
PLAIN_BODY = {"object": "list", "data": [{"id": "gpt-4o", "object": "model", "owned_by": "openai"}]}


class ModelServer(Gateway):
    """Serves ``body`` (JSON, or bytes as they are) at ``GET .../v1/models`` with ``status``; 404 elsewhere. Both
    may be changed while it serves; ``calls()`` gives each request's (method, path, auth)."""

    def __init__(self, body: Any, status: int = 200) -> None:
        self.body, self.status = body, status
        super().__init__(respond=self._models)

    def _models(self, rec: Recorded) -> Answer | None:
        return Answer(self.status, self.body) if rec.method == "GET" and rec.route.endswith("/v1/models") else None
