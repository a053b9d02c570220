"""The recording gateway answered by real clients: the openai and anthropic SDKs (streaming and not) and httpx
for the Responses API's and Gemini's SSE, on loopback. Each test checks what was recorded (path with query,
auth header and raw value, model) and that the client parsed the reply text."""

from __future__ import annotations

import gzip
import json
import socket
from collections.abc import Iterator

import anthropic
import httpx
import openai
import pytest

from conduit.daemon.verify import replies
from conduit.daemon.verify.gateway import MAX_BODY_BYTES, Answer, Recorded, RecordingGateway
from conduit.redact import fingerprint

KEY = "sk-test-0123456789abcdef"
REPLY = "canary-reply"


@pytest.fixture
def gw() -> Iterator[RecordingGateway]:
    with RecordingGateway(reply=REPLY) as g:
        yield g


def sse_events(text: str) -> list[tuple[str | None, str]]:
    """(event name, data) of each SSE message in ``text``."""
    out = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        name, data = None, []
        for line in block.splitlines():
            if line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].strip())
        if data:
            out.append((name, "\n".join(data)))
    return out


def test_openai_sdk_chat_plain_and_streaming(gw: RecordingGateway) -> None:
    client = openai.OpenAI(base_url=gw.root + "/api/v1", api_key=KEY, max_retries=0)
    done = client.chat.completions.create(model="qwen-x", messages=[{"role": "user", "content": "hi"}])
    assert done.choices[0].message.content == REPLY and done.model == "qwen-x"
    chunks = list(client.chat.completions.create(model="qwen-y", messages=[{"role": "user", "content": "hi"}],
                                                 stream=True, stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == REPLY
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == replies.COMPLETION_TOKENS
    a, b = gw.recorded()
    assert (a.method, a.path, a.model, a.auth_header, a.auth_value) == (
        "POST", "/api/v1/chat/completions", "qwen-x", "authorization", KEY)
    assert b.model == "qwen-y" and b.body["stream"] is True


def test_openai_sdk_legacy_completions_and_models(gw: RecordingGateway) -> None:
    client = openai.OpenAI(base_url=gw.root + "/x/v1", api_key=KEY, max_retries=0)
    assert client.completions.create(model="m-c", prompt="hi").choices[0].text == REPLY
    ids = [m.id for m in client.models.list()]
    assert ids == ["m-c"]
    assert client.models.retrieve("m-z").id == "m-z"
    assert [r.route for r in gw.recorded()] == ["/x/v1/completions", "/x/v1/models", "/x/v1/models/m-z"]


def test_openai_sdk_responses_plain_and_streaming(gw: RecordingGateway) -> None:
    client = openai.OpenAI(base_url=gw.root + "/api/v1", api_key=KEY, max_retries=0)
    assert client.responses.create(model="r-1", input="hi").output_text == REPLY
    with client.responses.stream(model="r-2", input="hi") as stream:
        final = stream.get_final_response()
    assert final.output_text == REPLY and final.usage is not None
    assert [r.model for r in gw.recorded()] == ["r-1", "r-2"]


def test_responses_sse_with_httpx_is_codex_shaped(gw: RecordingGateway) -> None:
    r = httpx.post(gw.root + "/api/v1/responses", json={"model": "gpt-x", "stream": True, "input": []},
                   headers={"Authorization": f"Bearer {KEY}"})
    assert r.headers["content-type"].startswith("text/event-stream")
    events = sse_events(r.text)
    names = [n for n, _ in events]
    assert names[0] == "response.created" and names[-1] == "response.completed"
    assert "response.output_text.delta" in names and "response.output_item.done" in names
    datas = [json.loads(d) for _, d in events]
    assert [d["type"] for d in datas] == names
    assert [d["sequence_number"] for d in datas] == list(range(len(datas)))
    completed = datas[-1]["response"]
    assert completed["model"] == "gpt-x" and completed["usage"]["total_tokens"] > 0
    assert completed["output"][0]["content"][0]["text"] == REPLY


def test_anthropic_sdk_plain_streaming_and_count(gw: RecordingGateway) -> None:
    client = anthropic.Anthropic(base_url=gw.root + "/api", auth_token=KEY, max_retries=0)
    msg = client.messages.create(model="claude-x", max_tokens=8, messages=[{"role": "user", "content": "hi"}])
    assert msg.content[0].type == "text" and msg.content[0].text == REPLY and msg.model == "claude-x"
    with client.messages.stream(model="claude-y", max_tokens=8,
                                messages=[{"role": "user", "content": "hi"}]) as stream:
        assert stream.get_final_text() == REPLY
        assert stream.get_final_message().stop_reason == "end_turn"
    count = client.messages.count_tokens(model="claude-z", messages=[{"role": "user", "content": "hi"}])
    assert count.input_tokens == replies.PROMPT_TOKENS
    recs = gw.recorded()
    assert [r.route for r in recs] == ["/api/v1/messages", "/api/v1/messages", "/api/v1/messages/count_tokens"]
    assert {(r.auth_header, r.auth_value) for r in recs} == {("authorization", KEY)}


def test_x_api_key_is_recorded(gw: RecordingGateway) -> None:
    r = httpx.post(gw.root + "/api/v1/messages?beta=true", json={"model": "m", "max_tokens": 8, "messages": []},
                   headers={"x-api-key": KEY, "anthropic-version": "2023-06-01"})
    assert anthropic.types.Message.model_validate(r.json()).content[0].text == REPLY  # type: ignore[union-attr]
    [rec] = gw.recorded()
    assert (rec.path, rec.auth_header, rec.auth_value) == ("/api/v1/messages?beta=true", "x-api-key", KEY)


def test_gemini_stream_sse_generate_and_models(gw: RecordingGateway) -> None:
    url = gw.root + "/api/v1beta/models/gemini-x:streamGenerateContent?alt=sse"
    body = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
    r = httpx.post(url, json=body, headers={"x-goog-api-key": KEY})
    [(_, data)] = sse_events(r.text)
    cand = json.loads(data)["candidates"][0]
    assert cand["content"]["parts"][0]["text"] == REPLY and cand["finishReason"] == "STOP"
    assert json.loads(data)["usageMetadata"]["totalTokenCount"] > 0
    plain = httpx.post(gw.root + "/api/v1beta/models/gemini-x:generateContent?key=" + KEY, json=body).json()
    assert plain["candidates"][0]["content"]["parts"][0]["text"] == REPLY
    listed = httpx.get(gw.root + "/api/v1beta/models").json()
    assert listed == {"models": [replies.gemini_model("gemini-x")]}
    a, b, _ = gw.recorded()
    assert (a.path, a.model, a.auth_header, a.auth_value) == (
        "/api/v1beta/models/gemini-x:streamGenerateContent?alt=sse", "gemini-x", "x-goog-api-key", KEY)
    assert (b.auth_header, b.auth_value) == ("key", KEY)
    assert KEY not in json.dumps(b.to_json()) and fingerprint(KEY) in b.to_json()["path"]


def test_gemini_json_output_fits_the_asked_schema(gw: RecordingGateway) -> None:
    schema = {"type": "object", "properties": {"next_speaker": {"type": "string", "enum": ["user", "model"]},
                                               "reasoning": {"type": "string"}}}
    body = {"contents": [], "generationConfig": {"responseMimeType": "application/json",
                                                 "responseJsonSchema": schema}}
    r = httpx.post(gw.root + "/v1beta/models/g:generateContent", json=body).json()
    assert json.loads(r["candidates"][0]["content"]["parts"][0]["text"]) == {
        "next_speaker": "user", "reasoning": REPLY}


def test_head_unknown_routes_and_bad_bodies_are_recorded(gw: RecordingGateway) -> None:
    assert httpx.head(gw.root + "/api").status_code == 200
    missing = httpx.post(gw.root + "/api/v1/embeddings", json={"model": "e"})
    assert missing.status_code == 404 and "no route" in missing.json()["error"]["message"]
    not_json = httpx.post(gw.root + "/api/v1/chat/completions", content=b"{not json")
    assert not_json.status_code == 200
    too_big = httpx.post(gw.root + "/api/v1/chat/completions", content=b"x" * (MAX_BODY_BYTES + 1))
    assert too_big.status_code == 413
    recs = gw.recorded()
    assert [(r.method, r.route) for r in recs] == [("HEAD", "/api"), ("POST", "/api/v1/embeddings"),
                                                   ("POST", "/api/v1/chat/completions"),
                                                   ("POST", "/api/v1/chat/completions")]
    assert recs[1].model == "e" and recs[2].body is None and recs[3].body is None


def test_gzip_and_chunked_bodies_are_decoded(gw: RecordingGateway) -> None:
    raw = json.dumps({"model": "gz", "messages": []}).encode()
    r = httpx.post(gw.root + "/v1/chat/completions", content=gzip.compress(raw),
                   headers={"Content-Encoding": "gzip", "Content-Type": "application/json"})
    assert r.json()["model"] == "gz"
    r = httpx.post(gw.root + "/v1/chat/completions", content=iter([raw[:5], raw[5:]]))  # chunked upload
    assert r.json()["model"] == "gz"
    assert [x.model for x in gw.recorded()] == ["gz", "gz"]
    assert "transfer-encoding" in gw.recorded()[1].headers


def test_a_negative_chunk_size_is_refused_not_read_to_the_end(gw: RecordingGateway) -> None:
    """``int("-1", 16)`` parses; reading -1 bytes would read until the client closes (a review finding)."""
    with socket.create_connection(("127.0.0.1", gw.port), timeout=10) as s:
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                  b"-1\r\n" + b"x" * 65536)  # and the connection stays open
        answer = s.recv(4096)
    assert answer.startswith(b"HTTP/1.1 413"), answer[:80]


def test_to_json_redacts_unless_asked(gw: RecordingGateway) -> None:
    httpx.post(gw.root + "/v1/messages", json={"model": "m"}, headers={"Authorization": f"Bearer {KEY}"})
    [rec] = gw.recorded()
    shown = rec.to_json()
    assert KEY not in json.dumps(shown)
    assert shown["auth_value"] == fingerprint(KEY) and shown["headers"]["authorization"] == fingerprint(
        f"Bearer {KEY}")
    raw = rec.to_json(redact=False)
    assert raw["auth_value"] == KEY and Recorded.from_json(raw) == rec


def test_models_listed_first_and_port_kept_after_stop() -> None:
    g = RecordingGateway(models=("a", "b")).start()
    port = g.port
    assert httpx.get(g.root + "/v1/models").json()["data"][1]["id"] == "b"
    g.stop()
    assert g.port == port and port != 0
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{port}/v1/models")


def test_respond_answers_first_and_none_leaves_the_route_table(gw: RecordingGateway) -> None:
    def refuse(r: Recorded) -> Answer | None:  # 401 everywhere but the model list; HEAD 204
        if r.route.endswith("/models"):
            return None
        return Answer(204) if r.method == "HEAD" else Answer(401, {"error": {"message": "bad key"}})

    gw.respond = refuse
    assert httpx.get(gw.root + "/api/v1/models").json()["data"][0]["id"] == "conduit-verify"
    denied = httpx.post(gw.root + "/api/v1/chat/completions", json={"model": "m", "messages": []})
    assert denied.status_code == 401 and denied.json() == {"error": {"message": "bad key"}}
    assert httpx.head(gw.root + "/api").status_code == 204
    gw.respond = lambda r: Answer(200, b"raw \xff", "text/plain")  # bytes go as they are
    raw = httpx.get(gw.root + "/v1/models")
    assert raw.content == b"raw \xff" and raw.headers["content-type"] == "text/plain"
    assert [(r.method, r.route, r.model) for r in gw.recorded()] == [
        ("GET", "/api/v1/models", None), ("POST", "/api/v1/chat/completions", "m"), ("HEAD", "/api", None),
        ("GET", "/v1/models", None)]
