"""A real tool using the output limit conduit wrote: after `conduit sync` with
``[tools.X] context_window`` / ``max_output_tokens`` in the profile, the tool's model request to the recording
gateway asks for exactly that many output tokens (``max_tokens``).

Which of the five tools with a context setting send it (checked by running each against the recording gateway,
docs/formats/real-tools.md versions): OpenCode 1.18 and Continue CLI 1.5 send ``max_tokens`` equal to the
written limit; Cline CLI 3.0 and Aider 0.86 send no output limit in a plain one-shot, and Codex 0.171 has no
output-limit setting (it reads ``model_context_window`` only), so those are not asserted here.

Claude Code: with no limit in the profile, the window the channel's ``GET /v1/models`` reports (32,768) gives
``CLAUDE_CODE_MAX_OUTPUT_TOKENS`` (a quarter) and ``CLAUDE_CODE_MAX_CONTEXT_TOKENS``, and the loopback channel
``CLAUDE_CODE_ATTRIBUTION_HEADER=0``: the binary's request and its ``/context`` show each one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from realtools.tier import routes
from test_realtools import KEY, MODEL, PROMPT, sync, tool_env, write_profile

from conduit.daemon.verify.gateway import Answer, RecordingGateway
from conduit.daemon.verify.runner import ToolRun
from conduit.daemon.verify.tools import ONE_SHOTS, find_binary

pytestmark = [pytest.mark.realtools, pytest.mark.timeout(600)]

OUTPUT_LIMIT = 321
CONTEXT = 7777
SENDERS = ("opencode", "continue")


@pytest.mark.parametrize("tool", SENDERS)
def test_tool_sends_the_written_output_limit(tool: str, temp_home: Path, tmp_path: Path, tool_cache: Path,
                                             tool_path: str, sandbox: Any) -> None:
    spec = ONE_SHOTS[tool]
    binary = find_binary(spec, tool_cache.joinpath("bin").as_posix())
    assert binary is not None, f"{spec.binaries} not in {tool_cache / 'bin'}"
    project = tmp_path / "project"
    project.mkdir()
    write_profile(temp_home, tool, sandbox.root + "/api", KEY + "\n", project,
                  extra=f"context_window = {CONTEXT}\nmax_output_tokens = {OUTPUT_LIMIT}\n")
    sync(temp_home)
    env = tool_env(temp_home, tool_path, spec)
    result = sandbox.run(ToolRun(argv=spec.argv(binary, PROMPT), env=env, cwd=project, timeout_s=spec.timeout_s))
    model_reqs = [r for r in result.requests if r.path.split("?")[0] in routes(tool, MODEL) and isinstance(r.body, dict)]
    assert model_reqs, (f"no model request: exit {result.exit_code}; {[r.path for r in result.requests]}\n"
                        f"{result.stderr_tail[-1500:]}")
    sent = [{k: r.body.get(k) for k in ("max_tokens", "max_completion_tokens") if k in r.body} for r in model_reqs]
    assert all(r.model == MODEL for r in model_reqs)
    assert any(OUTPUT_LIMIT in s.values() for s in sent), f"{tool} sent {sent}"


# Claude Code against a small local server: the window comes from the channel's own `/v1/models` (vLLM's
# `max_model_len`), not from the profile; facts in docs/formats/claude-code.md ("Limits").
WINDOW = 32768
BILLING = "x-anthropic-billing-header:"
CHARS_PER_TOKEN = 3.5
"""A cautious estimate for the prompt's size: JSON tool schemas and English run 3.5-4 characters a token."""


def _claude_run(sandbox: Any, binary: Path, home: Path, tool_path: str, project: Path, prompt: str) -> Any:
    spec = ONE_SHOTS["claude_code"]
    return sandbox.run(ToolRun(argv=spec.argv(binary, prompt), env=tool_env(home, tool_path, spec), cwd=project,
                               timeout_s=spec.timeout_s))


def _message(result: Any) -> dict[str, Any]:
    reqs = [r for r in result.requests if r.path.split("?")[0] in routes("claude_code", MODEL)
            and isinstance(r.body, dict)]
    assert reqs, f"no model request: exit {result.exit_code}; {[r.path for r in result.requests]}\n" \
                 f"{result.stderr_tail[-1500:]}"
    return dict(reqs[0].body)


def _first_system_text(body: dict[str, Any]) -> str:
    system = body.get("system")
    return str(system[0].get("text", "")) if isinstance(system, list) and system else str(system or "")


def test_claude_code_fits_a_32k_local_server(temp_home: Path, tmp_path: Path, tool_cache: Path, tool_path: str,
                                             sandbox: Any, tier_rows: list[dict[str, Any]]) -> None:
    """`conduit sync` reads a 32,768-token window from the loopback channel's model list; the real binary then
    asks for an output that leaves room for its prompt, drops the per-conversation billing block from its
    system prompt, and `/context` counts against the window. Without conduit's three values (the "before" run)
    it asks for 32000 tokens and its first system block is the billing header."""
    binary = find_binary(ONE_SHOTS["claude_code"], tool_cache.joinpath("bin").as_posix())
    assert binary is not None
    project = tmp_path / "project"
    project.mkdir()
    write_profile(temp_home, "claude_code", sandbox.root + "/api", KEY + "\n", project)
    listing = {"object": "list", "data": [{"id": MODEL, "object": "model", "max_model_len": WINDOW}]}
    models = RecordingGateway(port=sandbox.port, respond=lambda r: Answer(200, listing)
                              if r.method == "GET" and r.route.endswith("/v1/models") else None).start()
    try:
        sync(temp_home)  # refreshes the channel's model list first: Claude Code writes limits
        fetched = [r.path for r in models.recorded()]
    finally:
        models.stop()
    assert "/api/v1/models" in fetched, fetched
    path = temp_home / ".claude" / "settings.json"
    env = json.loads(path.read_text())["env"]
    assert (env["CLAUDE_CODE_MAX_OUTPUT_TOKENS"], env["CLAUDE_CODE_MAX_CONTEXT_TOKENS"],
            env["CLAUDE_CODE_ATTRIBUTION_HEADER"]) == (str(WINDOW // 4), str(WINDOW), "0")

    after = _message(_claude_run(sandbox, binary, temp_home, tool_path, project, PROMPT))
    prompt_tokens = len(json.dumps({k: after.get(k) for k in ("system", "tools", "messages")})) / CHARS_PER_TOKEN
    assert after["max_tokens"] == WINDOW // 4
    assert after["max_tokens"] + prompt_tokens <= WINDOW, (after["max_tokens"], prompt_tokens)
    assert BILLING not in json.dumps(after.get("system")), _first_system_text(after)
    shown = _claude_run(sandbox, binary, temp_home, tool_path, project, "/context")
    assert f"/ {WINDOW / 1000:.1f}k" in shown.stdout_tail, shown.stdout_tail[:600]

    doc = json.loads(path.read_text())
    for var in ("CLAUDE_CODE_MAX_OUTPUT_TOKENS", "CLAUDE_CODE_MAX_CONTEXT_TOKENS", "CLAUDE_CODE_ATTRIBUTION_HEADER"):
        del doc["env"][var]
    path.write_text(json.dumps(doc))
    before = _message(_claude_run(sandbox, binary, temp_home, tool_path, project, PROMPT))
    assert before["max_tokens"] == 32000
    assert _first_system_text(before).startswith(BILLING + " cc_version=")
    tier_rows.append({"tool": "claude_code", "form": "/api (32k window)", "key": "limits",
                      "path_hit": f"max_tokens {before['max_tokens']} -> {after['max_tokens']}",
                      "auth_ok": f"system[0] {_first_system_text(before)[:60]!r} -> {_first_system_text(after)[:40]!r}",
                      "model_ok": f"prompt ~{prompt_tokens:.0f} tokens"})
