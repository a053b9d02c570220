"""A loopback stand-in for a channel's ``GET /v1/models`` (vLLM, OpenRouter or a plain gateway shape): answers
``body`` at ``<url>/v1/models`` and records each request's path and auth header."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

VLLM_BODY = {"object": "list", "data": [
    {"id": "qwen-coder-7b", "object": "model", "created": 0, "owned_by": "vllm", "root": "/models/qwen",
     "parent": None, "max_model_len": 4096, "permission": []}]}
OPENROUTER_BODY = {"data": [
    {"id": "anthropic/claude-sonnet-4", "name": "Claude Sonnet 4", "context_length": 200000,
     "top_provider": {"context_length": 200000, "max_completion_tokens": 64000, "is_moderated": True}},
    {"id": "meta/llama-3", "context_length": None, "top_provider": {"context_length": 8192}}]}
PLAIN_BODY = {"object": "list", "data": [{"id": "gpt-4o", "object": "model", "owned_by": "openai"}]}


class ModelServer:
    """Serves ``body`` (JSON) at ``GET /v1/models`` with ``status``; 404 elsewhere. ``requests`` holds
    ``(path, auth)`` where auth is the Authorization header, else x-api-key."""

    def __init__(self, body: Any, status: int = 200) -> None:
        self.body, self.status = body, status
        self.requests: list[tuple[str, str | None]] = []
        srv = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                srv.requests.append((self.path, self.headers.get("authorization") or self.headers.get("x-api-key")))
                ok = self.path.endswith("/v1/models")
                data = (srv.body if isinstance(srv.body, bytes) else json.dumps(srv.body).encode()) if ok else b"{}"
                self.send_response(srv.status if ok else 404)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
