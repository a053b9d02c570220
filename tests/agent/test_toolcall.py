"""`conduit doctor --live --deep`: one tiny tool-call request per channel and model, and its verdict.

Against loopback stand-ins (OpenAI and Anthropic shapes of a tool call, plain text, vLLM's 400 without the
tool-call flags, a key echoed back, a silent server, a closed port), through the CLI in a subprocess with a
temporary HOME and no agent.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from helpers.gateways import Gateway

from conduit.daemon.agent.toolcall import MAX_TOKENS, PROMPT, TOOL_NAME, model_uses
from conduit.daemon.config.profile import load_profile
from conduit.daemon.verify.gateway import Answer, Recorded
from conduit.daemon.vllm.toolparser import AUTO_TOOL_MESSAGE

KEY = "sk-deep-test-0123456789"
VLLM_400 = {"error": {"message": AUTO_TOOL_MESSAGE, "type": "BadRequestError", "param": None, "code": 400}}
OPENAI_CALL = {"id": "c1", "object": "chat.completion", "model": "m", "choices": [{"index": 0, "finish_reason":
               "tool_calls", "message": {"role": "assistant", "content": None, "tool_calls": [
                   {"id": "call_1", "type": "function",
                    "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]}}]}
OPENAI_TEXT = {"id": "c1", "object": "chat.completion", "model": "m", "choices": [{"index": 0, "finish_reason":
               "stop", "message": {"role": "assistant", "content": "It is sunny in Paris.\x1b[2J"}}]}
ANTHROPIC_CALL = {"id": "msg_1", "type": "message", "role": "assistant", "model": "m", "stop_reason": "tool_use",
                  "content": [{"type": "text", "text": "Let me check."},
                              {"type": "tool_use", "id": "tu_1", "name": "get_weather", "input": {"city": "Paris"}}]}


class StandIn(Gateway):
    """A loopback gateway: ``GET .../models`` answers 200; ``POST`` answers ``answer`` (status, JSON body) after
    ``delay_s`` (``messages``, when given, on ``.../v1/messages``); ``posts`` is each POST's ``(path, headers,
    body)``."""

    def __init__(self, answer: tuple[int, Any], delay_s: float = 0.0,
                 messages: tuple[int, Any] | None = None) -> None:
        self.answer, self.delay_s, self.messages = answer, delay_s, messages
        super().__init__(respond=self._answer_post)

    def _answer_post(self, rec: Recorded) -> Answer:
        if rec.method != "POST":
            return Answer(200, {"object": "list", "data": [{"id": "m", "object": "model"}]})
        time.sleep(self.delay_s)
        status, body = self.messages if self.messages and rec.route.endswith("/messages") else self.answer
        return Answer(status, body)

    @property
    def posts(self) -> list[tuple[str, dict[str, str], Any]]:
        return [(r.path, r.headers, r.body) for r in self.recorded() if r.method == "POST"]


@pytest.fixture
def stand_in() -> Any:
    made: list[StandIn] = []

    def make(answer: tuple[int, Any], delay_s: float = 0.0, messages: tuple[int, Any] | None = None) -> StandIn:
        made.append(StandIn(answer, delay_s, messages))
        return made[-1]

    yield make
    for s in made:
        s.close()


def write(home: Path, text: str) -> Path:
    """Write the profile and the key file under ``home``."""
    cfg = home / ".config" / "conduit"
    (cfg / "keys").mkdir(parents=True, exist_ok=True)
    (cfg / "keys" / "gw").write_text(KEY + "\n")
    (cfg / "keys" / "gw").chmod(0o600)
    path = cfg / "profile.toml"
    path.write_text(text)
    return path


def gateway_profile(url: str, *, protocols: str = '["openai", "anthropic"]', auth: str = "bearer",
                    extra: str = "") -> str:
    return (f'version = 1\nchannel = "gw"\nmodel = "m"\n\n[channels.gw]\nbase_url = "{url}"\n'
            f'protocols = {protocols}\nkey = {{ file = "~/.config/conduit/keys/gw" }}\nauth = "{auth}"\n{extra}')


def doctor(home: Path, *args: str) -> tuple[int, str, dict[str, Any] | None]:
    """Run `conduit doctor --deep [args]` without an agent; returns (exit code, stdout, the JSON or None)."""
    env = dict(os.environ, HOME=str(home), CONDUIT_AGENT_SOCKET=str(home / "no-agent.sock"))
    r = subprocess.run([sys.executable, "-m", "conduit.daemon.cli", "doctor", "--deep", *args], env=env,
                       capture_output=True, text=True, timeout=120)
    assert "Traceback" not in r.stderr, r.stderr
    assert KEY not in r.stdout + r.stderr
    return r.returncode, r.stdout, json.loads(r.stdout) if "--json" in args else None


def checks(rep: dict[str, Any] | None) -> list[dict[str, Any]]:
    assert rep is not None
    return list(rep["live"]["tool_calls"]["checks"])


def test_openai_tool_call_is_healthy_and_sends_what_coding_tools_send(temp_home: Path, stand_in: Any) -> None:
    gw = stand_in((200, OPENAI_CALL))
    write(temp_home, gateway_profile(gw.url))
    rc, _, rep = doctor(temp_home, "--json")  # --deep alone implies --live
    [c] = checks(rep)
    assert (c["channel"], c["model"], c["protocol"], c["verdict"], c["tool"]) == ("gw", "m", "openai", "tool_call",
                                                                                   "get_weather")
    assert rc == 0 and rep is not None and rep["live"]["ok"], rep["live"]["problems"] if rep else None
    [(path, headers, body)] = gw.posts
    assert path == "/v1/chat/completions" and headers["authorization"] == f"Bearer {KEY}"
    assert body["tool_choice"] == "auto" and body["max_tokens"] == MAX_TOKENS and body["model"] == "m"
    assert body["tools"][0]["type"] == "function" and body["tools"][0]["function"]["name"] == TOOL_NAME
    assert set(body["tools"][0]["function"]) == {"name", "description", "parameters"}
    assert body["messages"] == [{"role": "user", "content": PROMPT}]


def test_anthropic_tool_use_block_with_x_api_key(temp_home: Path, stand_in: Any) -> None:
    gw = stand_in((200, ANTHROPIC_CALL))
    write(temp_home, gateway_profile(gw.url, protocols='["anthropic"]', auth="x-api-key"))
    rc, _, rep = doctor(temp_home, "--live", "--json")
    [c] = checks(rep)
    assert (c["protocol"], c["verdict"], c["tool"]) == ("anthropic", "tool_call", "get_weather") and rc == 0
    [(path, headers, body)] = gw.posts
    assert path == "/v1/messages" and headers["x-api-key"] == KEY and "authorization" not in headers
    assert headers["anthropic-version"] == "2023-06-01"
    assert body["tools"][0]["name"] == TOOL_NAME and "input_schema" in body["tools"][0]
    assert "tool_choice" not in body and body["max_tokens"] == MAX_TOKENS


def test_plain_text_answer_is_text_only_and_exit_1(temp_home: Path, stand_in: Any) -> None:
    gw = stand_in((200, OPENAI_TEXT))
    write(temp_home, gateway_profile(gw.url))
    rc, _, rep = doctor(temp_home, "--json")
    [c] = checks(rep)
    assert c["verdict"] == "text_only" and "It is sunny in Paris.\\x1b[2J" in c["message"] and rc == 1  # escape shown escaped
    assert rep is not None and not rep["ok"]
    assert any("text_only" in p and "model m" in p for p in rep["live"]["problems"]), rep["live"]["problems"]
    rc, out, _ = doctor(temp_home)  # the table a person reads
    assert rc == 1 and "tool calls" in out and "text_only" in out and "live: not healthy" in out


def qwen_dir(tmp_path: Path) -> Path:
    d = tmp_path / "models" / "my-model"  # the name says nothing: the family comes from config.json
    d.mkdir(parents=True)
    (d / "config.json").write_text(json.dumps({"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"]}))
    return d


def vllm_profile(url: str, model_dir: Path, extra: str = "") -> str:
    port = url.rsplit(":", 1)[1]
    return (f'version = 1\nchannel = "local"\nmodel = "qwen"\n\n[vllm]\nmodel = "{model_dir}"\n'
            f'served_model_name = "qwen"\nport = {port}\n{extra}')


def test_supervised_vllm_without_the_flags_is_refused_with_the_flags_and_keys(temp_home: Path, tmp_path: Path,
                                                                              stand_in: Any) -> None:
    gw = stand_in((400, VLLM_400))
    write(temp_home, vllm_profile(gw.url, qwen_dir(tmp_path)))
    rc, _, rep = doctor(temp_home, "--json")
    [c] = checks(rep)
    assert (c["channel"], c["model"], c["verdict"], c["status"]) == ("local", "qwen", "refused", 400) and rc == 1
    assert AUTO_TOOL_MESSAGE in c["message"]
    fix = c["fix"]
    assert "--enable-auto-tool-choice --tool-call-parser hermes" in fix, fix
    assert "enable_auto_tool_choice = true" in fix and 'tool_call_parser = "hermes"' in fix
    rc, out, _ = doctor(temp_home)
    assert "refused" in out and "--tool-call-parser hermes" in " ".join(out.split())


def test_vllm_with_the_wrong_parser_names_the_right_one(temp_home: Path, tmp_path: Path, stand_in: Any) -> None:
    gw = stand_in((200, OPENAI_TEXT))
    extra = 'enable_auto_tool_choice = true\ntool_call_parser = "mistral"\n'
    write(temp_home, vllm_profile(gw.url, qwen_dir(tmp_path), extra))
    rc, _, rep = doctor(temp_home, "--json")
    [c] = checks(rep)
    assert c["verdict"] == "text_only" and rc == 1
    assert "--tool-call-parser mistral" in c["fix"] and 'tool_call_parser = "hermes"' in c["fix"], c["fix"]


def test_a_hosted_gateway_refusal_keeps_its_message_with_the_key_masked(temp_home: Path, stand_in: Any) -> None:
    gw = stand_in((401, {"error": {"message": f"invalid key {KEY}", "type": "authentication_error"}}))
    write(temp_home, gateway_profile(gw.url))
    rc, out, rep = doctor(temp_home, "--json")
    [c] = checks(rep)
    assert c["verdict"] == "refused" and c["status"] == 401 and c["fix"] is None and rc == 1
    assert "invalid key sk-...6789" in c["message"], c["message"]  # doctor() asserted the key itself is absent


def test_silent_server_times_out_and_closed_port_is_unreachable(temp_home: Path, stand_in: Any) -> None:
    gw = stand_in((200, OPENAI_CALL), delay_s=20)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    extra = (f'timeout = 1\n\n[channels.off]\nbase_url = "http://127.0.0.1:{closed}"\nprotocols = ["openai"]\n'
             '\n[tools.cline]\nchannel = "off"\n')
    write(temp_home, gateway_profile(gw.url, extra=extra))
    rc, _, rep = doctor(temp_home, "--json")
    got = {c["channel"]: c["verdict"] for c in checks(rep)}
    assert got == {"gw": "timeout", "off": "unreachable"} and rc == 1


def test_pairs_checked_are_deduplicated_with_who_uses_them(temp_home: Path) -> None:
    text = ('version = 1\nchannel = "a"\nmodel = "m1"\nsmall_model = "s1"\n\n'
            '[channels.a]\nbase_url = "http://127.0.0.1:9"\n[channels.b]\nbase_url = "http://127.0.0.1:9"\n\n'
            '[fallback]\nchannel = "b"\nmodel = "m1"\n\n'
            '[tools.cline]\n[tools.claude_code]\nmodel = "m2"\n[tools.codex]\nchannel = "b"\nenabled = false\n')
    uses = model_uses(load_profile(write(temp_home, text)))
    assert uses == {("a", "m1"): ["model", "tools.cline"], ("a", "s1"): ["small_model", "tools.cline.small_model",
                                                                        "tools.claude_code.small_model"],
                    ("a", "m2"): ["tools.claude_code"], ("b", "m1"): ["fallback"]}


def test_a_channel_of_both_protocols_is_asked_over_each_its_tools_speak(temp_home: Path, stand_in: Any) -> None:
    anthropic_text = {**ANTHROPIC_CALL, "stop_reason": "end_turn", "content": [{"type": "text", "text": "Sunny."}]}
    gw = stand_in((200, OPENAI_CALL), messages=(200, anthropic_text))  # tool calls over OpenAI only
    write(temp_home, gateway_profile(gw.url, extra="\n[tools.cline]\n[tools.claude_code]\n"))
    rc, _, rep = doctor(temp_home, "--json")
    got = {(c["protocol"], c["verdict"], tuple(c["used_by"])) for c in checks(rep)}
    assert got == {("openai", "tool_call", ("model", "tools.cline")),
                   ("anthropic", "text_only", ("model", "tools.claude_code"))}
    assert sorted(p for p, _, _ in gw.posts) == ["/v1/chat/completions", "/v1/messages"] and rc == 1
    write(temp_home, gateway_profile(gw.url, extra="\n[tools.cline]\n"))  # no Anthropic user: one request
    rc, _, rep = doctor(temp_home, "--json")
    assert [(c["protocol"], c["verdict"]) for c in checks(rep)] == [("openai", "tool_call")] and rc == 0


def test_an_oversized_answer_is_read_only_up_to_the_cap(temp_home: Path, stand_in: Any) -> None:
    huge = {"choices": [{"message": {"role": "assistant", "content": "x" * (2 << 20)}}]}  # 2 MiB, over the cap
    gw = stand_in((200, huge))
    write(temp_home, gateway_profile(gw.url))
    rc, _, rep = doctor(temp_home, "--json")
    [c] = checks(rep)
    assert c["verdict"] == "bad_answer" and "not a JSON object" in c["message"] and len(c["message"]) < 400
    assert rc == 1
