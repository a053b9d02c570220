"""A real tool using the output limit conduit wrote: after `conduit sync` with
``[tools.X] context_window`` / ``max_output_tokens`` in the profile, the tool's model request to the recording
gateway asks for exactly that many output tokens (``max_tokens``).

Which of the five tools with a context setting send it (checked by running each against the recording gateway,
docs/formats/real-tools.md versions): OpenCode 1.18 and Continue CLI 1.5 send ``max_tokens`` equal to the
written limit; Cline CLI 3.0 and Aider 0.86 send no output limit in a plain one-shot, and Codex 0.171 has no
output-limit setting (it reads ``model_context_window`` only), so those are not asserted here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from realtools.tier import routes
from test_realtools import KEY, MODEL, PROMPT, sync, tool_env, write_profile

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
