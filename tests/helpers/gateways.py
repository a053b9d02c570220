"""The loopback gateway of the tests: conduit verify's ``RecordingGateway``, started at once, answering what a
test gives it.

``Gateway`` records every request (``recorded()``: method, path, lower-cased headers, parsed body, credential)
and answers, first match wins:

1. ``answers[path]`` when the path (query stripped) is exactly one of them: an ``Answer`` as it is, anything
   else as a 200 JSON body;
2. ``respond(request)`` when given and it returns an ``Answer`` (it may sleep: a slow gateway);
3. with ``protocols``, each wire protocol in its own shape (``RecordingGateway``'s route table); without, 404.

``answers`` and ``responder`` (the ``respond`` given) may be replaced while it serves. ``MESSAGE``, ``COMPLETION`` and ``RESPONSE`` are
bodies the real clients' tests answer: their SDKs (anthropic, openai) are pointed at it with exactly what an
adapter wrote, and the recorded (method, path, auth) shows which URL each client really built.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from conduit.daemon.verify import replies
from conduit.daemon.verify.gateway import Answer, Recorded, RecordingGateway, Responder

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


class Gateway(RecordingGateway):
    """A started ``RecordingGateway`` on 127.0.0.1 answering ``answers``, then ``respond``, then (with
    ``protocols``) the route table, else 404; ``url`` is its root, ``close()`` stops it."""

    def __init__(self, answers: Mapping[str, Any] | None = None, *, respond: Responder | None = None,
                 protocols: bool = False, reply: str = "ok", models: tuple[str, ...] = ()) -> None:
        super().__init__(reply=reply, models=models, respond=self._answer)
        self.answers: Mapping[str, Any] = dict(answers or {})
        self.responder = respond
        self.protocols = protocols
        self.start()

    def _answer(self, rec: Recorded) -> Answer | None:
        if rec.route in self.answers:
            fixed = self.answers[rec.route]
            return fixed if isinstance(fixed, Answer) else Answer(200, fixed)
        answer = self.responder(rec) if self.responder is not None else None
        if answer is not None or self.protocols:
            return answer
        data, ctype = replies.not_found(rec.method, rec.route)
        return Answer(404, data, ctype)

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``, no trailing slash."""
        return self.root

    def calls(self) -> list[tuple[str, str, str | None]]:
        """(method, path, auth) per request, auth the raw Authorization header, else x-api-key, else None."""
        return [(r.method, r.path, r.headers.get("authorization") or r.headers.get("x-api-key"))
                for r in self.recorded()]

    def close(self) -> None:
        """Stop serving (``stop()``)."""
        self.stop()
