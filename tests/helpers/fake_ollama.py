"""A stand-in for an Ollama server on loopback, built from Ollama's documented answers (ollama/ollama
``docs/api.md``: "List Running Models" ``GET /api/ps``, "Show Model Information" ``POST /api/show``, and
``GET /api/version``; ``context_length`` in ``/api/ps`` as docs.ollama.com/api/ps shows it) and its
OpenAI-compatible ``GET /v1/models`` and ``POST /v1/chat/completions``. The real ``ollama`` binary does not
install from the registries this project uses (pip's and npm's ``ollama`` are client libraries only).

    with FakeOllama(models={"qwen2.5:0.5b": 32768}) as ollama:
        ollama.load("qwen2.5:0.5b", context_length=8192)    # now listed by /api/ps
        ollama.url                                          # http://127.0.0.1:PORT
        ollama.requests                                     # [(method, path), ...]

A model's ``/api/show`` answer carries its maximum in ``model_info`` (``qwen2.context_length``) and, when
``num_ctx`` is given to the constructor, a ``PARAMETER num_ctx`` line in ``parameters``.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

GiB = 1024**3


class FakeOllama:
    """See the module docstring. ``models``: name -> the model's maximum context (``model_info``);
    ``num_ctx``: name -> the Modelfile's ``num_ctx`` parameter."""

    def __init__(self, models: dict[str, int], num_ctx: dict[str, int] | None = None, version: str = "0.12.3") -> None:
        self.models, self.num_ctx, self.version = dict(models), dict(num_ctx or {}), version
        self.loaded: dict[str, dict[str, Any]] = {}
        self.requests: list[tuple[str, str]] = []
        self._server: ThreadingHTTPServer | None = None

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def load(self, name: str, context_length: int | None = 8192, size: int = 2 * GiB, vram: int = 2 * GiB) -> None:
        """Make ``name`` a loaded model (``/api/ps``); ``context_length`` None: an older Ollama without the field."""
        entry: dict[str, Any] = {
            "name": name, "model": name, "size": size, "size_vram": vram,
            "digest": "2ae6f6dd7a3dd734790bbbf58b8909a606e0e7e97e94b7604e0aa7ae4490e6d8",
            "details": {"parent_model": "", "format": "gguf", "family": "qwen2", "families": ["qwen2"],
                        "parameter_size": "494.03M", "quantization_level": "Q4_K_M"},
            "expires_at": "2026-12-02T14:38:31.83753-07:00"}
        if context_length is not None:
            entry["context_length"] = context_length
        self.loaded[name] = entry

    def unload(self, name: str) -> None:
        self.loaded.pop(name, None)

    def _show(self, name: str) -> dict[str, Any] | None:
        if ":" not in name:  # Ollama's rule: no tag means "latest"
            name += ":latest"
        if name not in self.models:
            return None
        params = 'stop                           "<|im_end|>"'
        if name in self.num_ctx:
            params = f"num_ctx                        {self.num_ctx[name]}\n" + params
        return {"modelfile": f"FROM {name}\n", "parameters": params, "template": "{{ .Prompt }}",
                "details": {"parent_model": "", "format": "gguf", "family": "qwen2", "families": ["qwen2"],
                            "parameter_size": "494.03M", "quantization_level": "Q4_K_M"},
                "model_info": {"general.architecture": "qwen2", "general.parameter_count": 494032768,
                               "qwen2.context_length": self.models[name], "qwen2.block_count": 24},
                "capabilities": ["completion", "tools"]}

    def answer(self, method: str, path: str, body: Any) -> tuple[int, Any]:
        """The status and JSON answer to one request."""
        self.requests.append((method, path))
        if (method, path) == ("GET", "/api/version"):
            return 200, {"version": self.version}
        if (method, path) == ("GET", "/api/ps"):
            return 200, {"models": list(self.loaded.values())}
        if (method, path) == ("GET", "/api/tags"):
            return 200, {"models": [{"name": n, "model": n, "size": 2 * GiB} for n in self.models]}
        if (method, path) == ("POST", "/api/show"):
            shown = self._show(str((body or {}).get("model") or (body or {}).get("name") or ""))
            return (200, shown) if shown else (404, {"error": "model not found"})
        if (method, path) == ("GET", "/v1/models"):
            return 200, {"object": "list", "data": [{"id": n, "object": "model", "created": 1733000000,
                                                     "owned_by": "library"} for n in self.models]}
        if (method, path) == ("POST", "/v1/chat/completions"):
            model = (body or {}).get("model")
            self.load(str(model))
            return 200, {"id": "chatcmpl-1", "object": "chat.completion", "model": model, "choices": [
                {"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}}
        if (method, path) == ("GET", "/"):
            return 200, "Ollama is running"
        return 404, "404 page not found"

    def start(self) -> FakeOllama:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def _reply(self, method: str) -> None:
                n = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(n) if n else b""
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = None
                status, out = fake.answer(method, self.path.split("?")[0], body)
                data = (json.dumps(out) if not isinstance(out, str) else out).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json" if not isinstance(out, str) else "text/plain")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802
                self._reply("GET")

            def do_POST(self) -> None:  # noqa: N802
                self._reply("POST")

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def __enter__(self) -> FakeOllama:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
