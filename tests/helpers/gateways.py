"""A loopback gateway for the real-client tests: answers the routes it is given, records every request.

The tools' own SDKs (anthropic, openai) are pointed at it with exactly what an adapter wrote; the recorded
(method, path, auth) shows which URL each client really built.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MESSAGE = {"id": "msg_1", "type": "message", "role": "assistant", "model": "m",
           "content": [{"type": "text", "text": "hi"}], "stop_reason": "end_turn", "stop_sequence": None,
           "usage": {"input_tokens": 1, "output_tokens": 1}}
COMPLETION = {"id": "c1", "object": "chat.completion", "created": 0, "model": "m",
              "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
              "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}
RESPONSE = {"id": "resp_1", "object": "response", "created_at": 0, "status": "completed", "model": "m",
            "output": [{"type": "message", "id": "msg_1", "status": "completed", "role": "assistant",
                        "content": [{"type": "output_text", "text": "hi", "annotations": []}]}],
            "parallel_tool_calls": False, "tool_choice": "auto", "tools": []}
COMPLETION = {"id": "c1", "object": "chat.completion", "created": 0, "model": "m",
              "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
              "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}


class Gateway:
    """Answers POST ``routes`` (path -> JSON body) with 200, anything else with 404; records
    ``(method, path, auth)`` where auth is the Authorization header, else x-api-key."""

    def __init__(self, routes: dict[str, Any]) -> None:
        self.requests: list[tuple[str, str, str | None]] = []
        gw = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                self.rfile.read(int(self.headers.get("content-length") or 0))
                auth = self.headers.get("authorization") or self.headers.get("x-api-key")
                gw.requests.append(("POST", self.path, auth))
                body = routes.get(self.path)
                data = json.dumps(body or {"error": {"type": "not_found", "message": self.path}}).encode()
                self.send_response(200 if body else 404)
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
