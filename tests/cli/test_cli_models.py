"""``conduit models`` and the model check of ``conduit use``, as a person runs them (real subprocesses), against
a loopback stand-in of the channel's ``GET /v1/models``."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.modelserver import OPENROUTER_BODY, VLLM_BODY, ModelServer
from helpers.toolfiles import write_profile

CONDUIT = [sys.executable, "-m", "conduit.daemon.cli"]
KEY = "sk-test-abc"


def conduit(home: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    full = dict(os.environ, HOME=str(home), COLUMNS="200", NO_COLOR="1", **env)
    return subprocess.run([*CONDUIT, *args], capture_output=True, text=True, env=full, timeout=60)


@pytest.fixture
def server() -> ModelServer:
    srv = ModelServer(VLLM_BODY)
    yield srv
    srv.close()


def _dead_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"  # nothing listens there once closed


def test_models_json_and_table(temp_home: Path, server: ModelServer) -> None:
    write_profile(temp_home, server.url, tools=(), model="qwen-coder-7b")
    r = conduit(temp_home, "models", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["channel"] == "gw" and doc["base_url"] == f"{server.url}/v1"
    assert doc["models"] == [{"id": "qwen-coder-7b", "context_window": 4096, "max_output_tokens": None}]
    assert len(server.requests) == 1
    r = conduit(temp_home, "models", "gw")
    assert r.returncode == 0, r.stderr
    assert "qwen-coder-7b" in r.stdout and "4096" in r.stdout
    assert len(server.requests) == 1  # the fresh cache answered
    r = conduit(temp_home, "models", "gw", CONDUIT_MODELS_MAX_AGE_S="0")
    assert r.returncode == 0 and len(server.requests) == 2
    assert KEY not in r.stdout + r.stderr


def test_models_gateway_shape_and_errors(temp_home: Path) -> None:
    srv = ModelServer(OPENROUTER_BODY)
    try:
        write_profile(temp_home, srv.url, tools=())
        r = conduit(temp_home, "models", "--json")
        assert [(m["id"], m["context_window"], m["max_output_tokens"]) for m in json.loads(r.stdout)["models"]] == [
            ("anthropic/claude-sonnet-4", 200000, 64000), ("meta/llama-3", 8192, None)]
    finally:
        srv.close()
    r = conduit(temp_home, "models", "gww")
    assert r.returncode == 3 and "gw" in r.stderr and "Traceback" not in r.stderr
    write_profile(temp_home, _dead_url(), tools=())
    r = conduit(temp_home, "models", CONDUIT_MODELS_MAX_AGE_S="0")
    assert r.returncode == 1 and "/v1/models" in r.stderr and "Traceback" not in r.stderr
    assert KEY not in r.stderr


def test_use_near_miss_is_refused_with_did_you_mean(temp_home: Path, server: ModelServer) -> None:
    profile = write_profile(temp_home, server.url, tools=(), model="qwen-coder-7b")
    before = profile.read_text()
    r = conduit(temp_home, "use", "qwen-coder-7", "--no-sync")
    assert r.returncode == 3, r.stdout + r.stderr
    assert "did you mean `qwen-coder-7b`?" in r.stderr and "--no-check" in r.stderr
    assert profile.read_text() == before
    r = conduit(temp_home, "use", "totally-else", "--no-sync")
    assert r.returncode == 3 and "it lists: qwen-coder-7b" in r.stderr
    r = conduit(temp_home, "use", "qwen-coder-7b", "--no-sync")
    assert r.returncode == 0, r.stderr
    r = conduit(temp_home, "use", "qwen-coder-7", "--no-sync", "--no-check")
    assert r.returncode == 0, r.stderr
    assert 'model = "qwen-coder-7"' in profile.read_text()


def test_use_goes_on_with_a_warning_when_the_list_cannot_be_had(temp_home: Path) -> None:
    profile = write_profile(temp_home, _dead_url(), tools=())
    r = conduit(temp_home, "use", "any-model", "--no-sync")
    assert r.returncode == 0, r.stderr
    warnings = [line for line in r.stderr.splitlines() if "warning" in line]
    assert len(warnings) == 1 and "cannot check `any-model`" in warnings[0]
    assert 'model = "any-model"' in profile.read_text()
    srv = ModelServer({"object": "list", "data": []})
    try:
        write_profile(temp_home, srv.url, tools=())
        r = conduit(temp_home, "use", "any-model", "--no-sync")
        assert r.returncode == 0 and "lists no models" in r.stderr
    finally:
        srv.close()


def test_sync_refreshes_a_stale_cache_and_goes_on_without_one(temp_home: Path, server: ModelServer) -> None:
    write_profile(temp_home, server.url, tools=(), model="qwen-coder-7b",
                  extra="[tools.codex]\ncreate = true\n")
    r = conduit(temp_home, "sync")
    assert r.returncode == 0, r.stderr
    assert len(server.requests) == 1
    assert "model_context_window = 4096" in (temp_home / ".codex" / "config.toml").read_text()
    write_profile(temp_home, _dead_url(), tools=(), model="qwen-coder-7b", extra="[tools.codex]\ncreate = true\n")
    r = conduit(temp_home, "sync")
    assert r.returncode == 0, r.stderr
    notes = [line for line in r.stderr.splitlines() if "not refreshed" in line]
    assert len(notes) == 1 and KEY not in r.stderr


def test_model_ids_are_shown_as_the_gateway_wrote_them(temp_home: Path) -> None:
    """An id that looks like rich markup is printed as written (`conduit use` needs it verbatim), and terminal
    control sequences in an id from the gateway never reach the terminal raw."""
    srv = ModelServer({"object": "list", "data": [{"id": "[bold]x[/bold]"}, {"id": "evil\x1b]0;owned\x07\x1b[2J"}]})
    try:
        write_profile(temp_home, srv.url, tools=(), model="[bold]x[/bold]")
        r = conduit(temp_home, "models")
    finally:
        srv.close()
    assert r.returncode == 0, r.stderr
    assert "[bold]x[/bold]" in r.stdout and "\x1b" not in r.stdout and "\x07" not in r.stdout
    assert "evil\\x1b]0;owned\\x07\\x1b[2J" in r.stdout


def test_sync_warns_about_a_model_the_channel_does_not_list(temp_home: Path, server: ModelServer) -> None:
    write_profile(temp_home, server.url, tools=(), model="qwen-codr-7b", small_model=None, extra="[tools.codex]\ncreate = true\n")
    r = conduit(temp_home, "sync")
    assert r.returncode == 0, r.stderr  # a warning: the list may be partial, the person decides
    assert "model `qwen-codr-7b` is not among the models channel `gw` lists" in r.stderr, r.stderr
    assert "did you mean `qwen-coder-7b`?" in r.stderr
    write_profile(temp_home, server.url, tools=(), model="qwen-coder-7b", small_model=None, extra="[tools.codex]\ncreate = true\n")
    r = conduit(temp_home, "sync")
    assert r.returncode == 0 and "is not among" not in r.stderr, r.stderr
