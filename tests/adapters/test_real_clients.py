"""What each adapter wrote works with the real client library its tool is built on.

A local gateway under an ``/api`` prefix answers only ``/api/v1/messages`` and ``/api/v1/chat/completions``.
The ``anthropic`` SDK stands in for Claude Code and CC Switch rows, the ``openai`` SDK for Cline
(docs/formats/claude-code.md and cline.md, "URL building": both SDKs build URLs exactly as the tools do).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import anthropic
import openai
import pytest
from helpers.gateways import COMPLETION, MESSAGE, Gateway
from helpers.toolfiles import cc_switch_db, cline_gen_b, cline_gen_c, run_sync, write_profile


@pytest.fixture
def gateway() -> Iterator[Gateway]:
    gw = Gateway({"/api/v1/messages": MESSAGE, "/api/v1/chat/completions": COMPLETION})
    yield gw
    gw.close()


INPUTS = ["{}/api", "{}/api/v1", "{}/api/", "{}/api/v1/", "{}/api/v1/chat/completions", "{}/api/v1/messages"]


@pytest.mark.parametrize("raw", INPUTS)
def test_claude_code_url_reaches_messages(temp_home: Path, gateway: Gateway, raw: str) -> None:
    write_profile(temp_home, raw.format(gateway.url), tools=("claude_code",), key_delivery="copy")
    run_sync(temp_home)
    env = json.loads((temp_home / ".claude" / "settings.json").read_text())["env"]
    client = anthropic.Anthropic(base_url=env["ANTHROPIC_BASE_URL"], auth_token=env["ANTHROPIC_AUTH_TOKEN"],
                                 max_retries=0)
    client.messages.create(model=env["ANTHROPIC_MODEL"], max_tokens=8, messages=[{"role": "user", "content": "x"}])
    assert gateway.calls() == [("POST", "/api/v1/messages", "Bearer sk-test-abc")]


@pytest.mark.parametrize("raw", INPUTS)
def test_cc_switch_row_url_reaches_messages(temp_home: Path, gateway: Gateway, raw: str) -> None:
    db = cc_switch_db(temp_home)
    write_profile(temp_home, raw.format(gateway.url), tools=("cc_switch",), auth="x-api-key")
    run_sync(temp_home)
    with sqlite3.connect(db) as conn:
        cfg = json.loads(conn.execute("SELECT settings_config FROM providers WHERE id = 'conduit-gw'").fetchone()[0])
    conn.close()
    env = cfg["env"]
    client = anthropic.Anthropic(base_url=env["ANTHROPIC_BASE_URL"], api_key=env["ANTHROPIC_API_KEY"], max_retries=0)
    client.messages.create(model=env["ANTHROPIC_MODEL"], max_tokens=8, messages=[{"role": "user", "content": "x"}])
    # anthropic-python 2.x sends api_key as a Bearer header; Claude Code sends it as x-api-key. Either reaches.
    ((method, path, auth),) = gateway.calls()
    assert (method, path) == ("POST", "/api/v1/messages") and auth in ("sk-test-abc", "Bearer sk-test-abc")


@pytest.mark.parametrize("generation", ["B", "C"])
@pytest.mark.parametrize("raw", INPUTS)
def test_cline_url_reaches_chat_completions(temp_home: Path, gateway: Gateway, raw: str, generation: str) -> None:
    (cline_gen_b if generation == "B" else cline_gen_c)(temp_home)
    write_profile(temp_home, raw.format(gateway.url), tools=("cline",))
    run_sync(temp_home)
    data = temp_home / ".cline" / "data"
    if generation == "B":
        base = json.loads((data / "globalState.json").read_text())["openAiBaseUrl"]
        key = json.loads((data / "secrets.json").read_text())["openAiApiKey"]
    else:
        s = json.loads((data / "settings" / "providers.json").read_text())["providers"]["openai-compatible"]["settings"]
        base, key = s["baseUrl"], s["apiKey"]
    client = openai.OpenAI(base_url=base, api_key=key, max_retries=0)
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    assert gateway.calls() == [("POST", "/api/v1/chat/completions", "Bearer sk-test-abc")]
