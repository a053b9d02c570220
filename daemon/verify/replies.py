"""The canned answers of the recording gateway, one builder per wire protocol, each a plain function of
(model, reply text, request body) that returns the bytes to send and their content type.

Shapes, read from each API's reference and the SDKs that parse them:

- Anthropic Messages (``POST /v1/messages``): a ``message`` object, or the SSE events ``message_start``,
  ``content_block_start``, ``content_block_delta`` (``text_delta``), ``content_block_stop``,
  ``message_delta`` (``stop_reason: end_turn``) and ``message_stop``.
- OpenAI chat completions: a ``chat.completion``, or ``chat.completion.chunk`` lines (role, content, finish),
  a usage chunk with empty ``choices`` when ``stream_options.include_usage``, then ``data: [DONE]``.
- OpenAI legacy completions: ``text_completion`` (streamed the same way).
- OpenAI Responses: a ``response`` object, or the SSE events ``response.created`` ... ``response.completed``
  (the one Codex waits for; it carries ``usage``).
- Gemini ``generateContent``: ``{"candidates": [...], "usageMetadata": {...}}``; ``streamGenerateContent``
  sends the same object as ``data:`` lines with ``alt=sse``, else a JSON array of them.

Never a tool call: the tools finish on the first answer. Token counts are small fixed numbers.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Sequence
from typing import Any

JSON = "application/json"
SSE = "text/event-stream"

PROMPT_TOKENS = 8
"""The input token count every answer reports."""
COMPLETION_TOKENS = 1
"""The output token count every answer reports."""

Reply = tuple[bytes, str]
"""(body bytes, content type)."""


def _json(obj: Any) -> Reply:
    return json.dumps(obj).encode(), JSON


def _sse(events: Sequence[tuple[str | None, Any]], done: bool = False) -> Reply:
    """SSE text: each (event name or None, data object) as ``event:``/``data:`` lines and a blank line."""
    out: list[str] = []
    for name, data in events:
        if name:
            out.append(f"event: {name}\n")
        out.append(f"data: {json.dumps(data)}\n\n")
    if done:
        out.append("data: [DONE]\n\n")
    return "".join(out).encode(), SSE


def _id(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:24]}"


def _stream(body: Any) -> bool:
    return isinstance(body, dict) and bool(body.get("stream"))


def anthropic_messages(model: str, reply: str, body: Any) -> Reply:
    """Anthropic Messages: JSON, or SSE when ``body.stream``."""
    usage = {"input_tokens": PROMPT_TOKENS, "output_tokens": COMPLETION_TOKENS}
    msg: dict[str, Any] = {"id": _id("msg_"), "type": "message", "role": "assistant", "model": model,
                           "content": [{"type": "text", "text": reply}], "stop_reason": "end_turn",
                           "stop_sequence": None, "usage": usage}
    if not _stream(body):
        return _json(msg)
    start = dict(msg, content=[], stop_reason=None, usage=dict(usage, output_tokens=0))
    return _sse([
        ("message_start", {"type": "message_start", "message": start}),
        ("content_block_start", {"type": "content_block_start", "index": 0,
                                 "content_block": {"type": "text", "text": ""}}),
        ("ping", {"type": "ping"}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                 "delta": {"type": "text_delta", "text": reply}}),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                           "usage": {"output_tokens": COMPLETION_TOKENS}}),
        ("message_stop", {"type": "message_stop"}),
    ])


def anthropic_count_tokens(model: str, reply: str, body: Any) -> Reply:
    """``POST /v1/messages/count_tokens``: ``{"input_tokens": N}``."""
    return _json({"input_tokens": PROMPT_TOKENS})


def _openai_usage() -> dict[str, int]:
    return {"prompt_tokens": PROMPT_TOKENS, "completion_tokens": COMPLETION_TOKENS,
            "total_tokens": PROMPT_TOKENS + COMPLETION_TOKENS}


def _include_usage(body: Any) -> bool:
    opts = body.get("stream_options") if isinstance(body, dict) else None
    return isinstance(opts, dict) and bool(opts.get("include_usage"))


def chat_completions(model: str, reply: str, body: Any) -> Reply:
    """OpenAI ``/chat/completions``: JSON, or chunks (+ usage chunk) and ``[DONE]`` when streaming."""
    cid, created = _id("chatcmpl-"), int(time.time())
    if not _stream(body):
        return _json({"id": cid, "object": "chat.completion", "created": created, "model": model,
                      "choices": [{"index": 0, "message": {"role": "assistant", "content": reply},
                                   "finish_reason": "stop", "logprobs": None}],
                      "usage": _openai_usage()})

    def chunk(delta: dict[str, Any], finish: str | None) -> tuple[None, Any]:
        return None, {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
                      "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]}

    events = [chunk({"role": "assistant", "content": ""}, None), chunk({"content": reply}, None),
              chunk({}, "stop")]
    if _include_usage(body):
        events.append((None, {"id": cid, "object": "chat.completion.chunk", "created": created,
                              "model": model, "choices": [], "usage": _openai_usage()}))
    return _sse(events, done=True)


def completions(model: str, reply: str, body: Any) -> Reply:
    """OpenAI legacy ``/completions``: ``text_completion``, streamed like chat when asked."""
    cid, created = _id("cmpl-"), int(time.time())
    whole = {"id": cid, "object": "text_completion", "created": created, "model": model,
             "choices": [{"index": 0, "text": reply, "finish_reason": "stop", "logprobs": None}],
             "usage": _openai_usage()}
    if not _stream(body):
        return _json(whole)
    events: list[tuple[str | None, Any]] = [(None, dict(whole, usage=None))]
    if _include_usage(body):
        events.append((None, dict(whole, choices=[], usage=_openai_usage())))
    return _sse(events, done=True)


def _response_obj(rid: str, model: str, status: str, output: list[Any], body: Any) -> dict[str, Any]:
    usage = {"input_tokens": PROMPT_TOKENS, "input_tokens_details": {"cached_tokens": 0},
             "output_tokens": COMPLETION_TOKENS, "output_tokens_details": {"reasoning_tokens": 0},
             "total_tokens": PROMPT_TOKENS + COMPLETION_TOKENS}
    return {"id": rid, "object": "response", "created_at": int(time.time()), "status": status,
            "model": model, "output": output, "error": None, "incomplete_details": None,
            "instructions": body.get("instructions") if isinstance(body, dict) else None,
            "metadata": {}, "parallel_tool_calls": True, "tool_choice": "auto", "tools": [],
            "temperature": 1.0, "top_p": 1.0, "text": {"format": {"type": "text"}}, "truncation": "disabled",
            "usage": usage if status == "completed" else None}


def responses(model: str, reply: str, body: Any) -> Reply:
    """OpenAI Responses ``/responses``: a ``response`` object, or its SSE event sequence when streaming."""
    rid, iid = _id("resp_"), _id("msg_")
    part = {"type": "output_text", "text": reply, "annotations": []}
    item = {"type": "message", "id": iid, "status": "completed", "role": "assistant", "content": [part]}
    done = _response_obj(rid, model, "completed", [item], body)
    if not _stream(body):
        return _json(done)
    started = _response_obj(rid, model, "in_progress", [], body)
    where = {"item_id": iid, "output_index": 0, "content_index": 0}
    seq: list[tuple[str, dict[str, Any]]] = [
        ("response.created", {"response": started}),
        ("response.in_progress", {"response": started}),
        ("response.output_item.added", {"output_index": 0,
                                        "item": dict(item, status="in_progress", content=[])}),
        ("response.content_part.added", dict(where, part=dict(part, text=""))),
        ("response.output_text.delta", dict(where, delta=reply)),
        ("response.output_text.done", dict(where, text=reply)),
        ("response.content_part.done", dict(where, part=part)),
        ("response.output_item.done", {"output_index": 0, "item": item}),
        ("response.completed", {"response": done}),
    ]
    return _sse([(name, {"type": name, "sequence_number": n, **data}) for n, (name, data) in enumerate(seq)])


def schema_value(schema: Any, reply: str, depth: int = 0) -> Any:
    """A value that fits a JSON schema (first enum value, required properties filled), for a tool that asks
    for JSON output (Gemini CLI's side checks); strings are ``reply``. Depth-bounded at 8."""
    if not isinstance(schema, dict) or depth > 8:
        return reply
    if schema.get("enum"):
        return schema["enum"][0]
    kind = str(schema.get("type", "string")).lower()
    if kind == "object":
        props = schema.get("properties") or {}
        return {k: schema_value(v, reply, depth + 1) for k, v in props.items()} if isinstance(props, dict) else {}
    defaults = {"array": [], "boolean": False, "integer": 0, "number": 0, "null": None}
    return defaults.get(kind, reply)


def _gemini_text(reply: str, body: Any) -> str:
    config = body.get("generationConfig") if isinstance(body, dict) else None
    if isinstance(config, dict) and config.get("responseMimeType") == "application/json":
        schema = config.get("responseJsonSchema") or config.get("responseSchema")
        return json.dumps(schema_value(schema, reply))
    return reply


def _gemini_obj(model: str, text: str) -> dict[str, Any]:
    return {"candidates": [{"content": {"role": "model", "parts": [{"text": text}]}, "finishReason": "STOP",
                            "index": 0}],
            "usageMetadata": {"promptTokenCount": PROMPT_TOKENS, "candidatesTokenCount": COMPLETION_TOKENS,
                              "totalTokenCount": PROMPT_TOKENS + COMPLETION_TOKENS},
            "modelVersion": model}


def gemini_generate(model: str, reply: str, body: Any) -> Reply:
    """Gemini ``models/M:generateContent``."""
    return _json(_gemini_obj(model, _gemini_text(reply, body)))


def gemini_stream(model: str, reply: str, body: Any, sse: bool) -> Reply:
    """Gemini ``models/M:streamGenerateContent``: ``data:`` lines with ``alt=sse``, else a JSON array."""
    obj = _gemini_obj(model, _gemini_text(reply, body))
    return _sse([(None, obj)]) if sse else _json([obj])


def gemini_count_tokens(model: str, reply: str, body: Any) -> Reply:
    """Gemini ``models/M:countTokens``: ``{"totalTokens": N}``."""
    return _json({"totalTokens": PROMPT_TOKENS})


def model_list(models: list[str], gemini: bool) -> Reply:
    """``GET */models``: OpenAI ``{"object": "list", "data": [...]}``, or Gemini ``{"models": [...]}``."""
    if gemini:
        return _json({"models": [gemini_model(m) for m in models]})
    return _json({"object": "list", "data": [openai_model(m) for m in models]})


def gemini_model(model: str) -> dict[str, Any]:
    """One Gemini model entry (``models/NAME``)."""
    return {"name": f"models/{model}", "displayName": model, "inputTokenLimit": 1_000_000,
            "outputTokenLimit": 65_536,
            "supportedGenerationMethods": ["generateContent", "streamGenerateContent", "countTokens"]}


def openai_model(model: str) -> dict[str, Any]:
    """One OpenAI model entry (also what Anthropic's ``GET /v1/models/M`` readers accept: ``id``)."""
    return {"id": model, "object": "model", "created": 0, "owned_by": "conduit-verify",
            "type": "model", "display_name": model}


def not_found(method: str, path: str) -> Reply:
    """The JSON error every unknown route gets (OpenAI's and Anthropic's error shapes share ``error``)."""
    return _json({"type": "error", "error": {"type": "not_found_error", "code": 404,
                                             "message": f"conduit verify gateway: no route {method} {path}"}})
